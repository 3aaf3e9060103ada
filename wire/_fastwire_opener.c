/* wire._fastwire: OpenerCore, the DATA opener (one datagram, or a GRO batch). */
#include "_fastwire.h"

/* -- opener ------------------------------------------------------------------------ */


static int Opener_init(OpenerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "epoch", "replay_window", NULL};
    PyObject *keys, *epoch = NULL;
    long long window = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OL", kwlist, &keys, &epoch, &window))
        return -1;
    self->epoch = 0;
    if (epoch != NULL && attr_ll(epoch, &self->epoch, "epoch") < 0) return -1;
    PyObject *r = PyObject_CallFunction((PyObject *)&ReplayType, "L", window);
    if (r == NULL) return -1;
    PyObject *h, *p;
    if (load_keys(keys, &h, &p) < 0) {
        Py_DECREF(r);
        return -1;
    }
    Py_XSETREF(self->replay, (ReplayObject *)r);
    Py_XSETREF(self->hdr, (AeadObject *)h);
    Py_XSETREF(self->pay, (AeadObject *)p);
    self->plaintext = h == NULL;
    return 0;
}

static void Opener_dealloc(OpenerObject *self) {
    Py_XDECREF(self->hdr);
    Py_XDECREF(self->pay);
    Py_XDECREF(self->replay);
    Py_TYPE(self)->tp_free((PyObject *)self);
}



/* The checks of PyOpener.open_data_untrusted, in its order; on OPEN_OK the
 * plaintext (when not trimmed) is in pt (extra bytes of room) and the counter
 * is committed. */
int open_core(OpenerObject *self, const uint8_t *d, Py_ssize_t len, uint8_t *pt,
                     OpenInfo *info) {
    if (len < DATA_CUT) return OPEN_NOT_FAST;
    if (d[0] != VERSION || d[1] != T_DATA || d[3] != DATA_WORDS) return OPEN_NOT_FAST;
    uint64_t ec = get64(d + 8);
    info->ec = ec;
    if ((long long)(ec >> 48) != self->epoch) return OPEN_EPOCH;
    if (((d[2] & PLAINTEXT_FLAG) != 0) != (self->plaintext != 0)) return OPEN_PLAINTEXT;
    long long counter = (long long)(ec & COUNTER_MAX);
    ReplayObject *r = self->replay;
    long long highest = r->highest;
    if (counter <= highest) {
        int why = replay_seen(r, counter);
        if (why) return why == 1 ? OPEN_REPLAY_OLD : OPEN_REPLAY_SEEN;
    }
    Py_ssize_t extra = len - DATA_CUT;
    uint32_t plen = get16(d + 26);
    info->extra = extra;
    info->plen = plen;
    int trimmed = 0;
    if (extra == 0 && (plen > 0 || self->pay != NULL))
        trimmed = 1;
    else if (extra != (Py_ssize_t)plen + (self->pay == NULL ? 0 : TAG_LEN))
        return OPEN_PAYLOAD_LEN;
    info->trimmed = trimmed;
    if (self->hdr != NULL && self->pay != NULL) {
        uint8_t nonce[NONCE_LEN] = {0};
        put64(nonce + 4, ec);
        int ok = trimmed ? gcm_open(self->hdr->dec, nonce, d, DATA_HLEN, NULL, 0,
                                    d + DATA_HLEN, NULL)
                         /* One AEAD check covers header, header tag and payload. */
                         : gcm_open(self->pay->dec, nonce, d, DATA_CUT, d + DATA_CUT,
                                    (int)plen, d + DATA_CUT + plen, pt);
        if (!ok) return OPEN_TAG;
    } else if (!trimmed && plen) {
        memcpy(pt, d + DATA_CUT, plen);
    }
    uint64_t moff = get64(d + 32), mlen = get64(d + 40);
    if (moff > mlen || plen > mlen - moff) return OPEN_FIELD;
    replay_commit(r, counter);
    return OPEN_OK;
}

/* The WireError of a failed open_core, as an exception object. */
PyObject *open_error(OpenerObject *self, int status, const OpenInfo *info) {
    switch (status) {
    case OPEN_EPOCH:
        return wire_error_object("epoch", PyUnicode_FromFormat(
            "key epoch %llu, expected %lld", (unsigned long long)(info->ec >> 48), self->epoch));
    case OPEN_PLAINTEXT:
        return wire_error_object("plaintext", PyUnicode_FromString(
            self->plaintext ? "encrypted packet on a plaintext connection"
                            : "plaintext packet on an encrypted connection"));
    case OPEN_REPLAY_OLD:
        return replay_error_object(1, (long long)(info->ec & COUNTER_MAX));
    case OPEN_REPLAY_SEEN:
        return replay_error_object(2, (long long)(info->ec & COUNTER_MAX));
    case OPEN_PAYLOAD_LEN:
        return wire_error_object("payload_len", PyUnicode_FromFormat(
            "%zd payload bytes, header says %u", info->extra, info->plen));
    case OPEN_TAG:
        return wire_error_object("tag", PyUnicode_FromString("DATA failed authentication"));
    default:
        return wire_error_object("field",
                                 PyUnicode_FromString("DATA slice lies outside its message"));
    }
}

PyObject *fields_tuple(const uint8_t *d) {
    PyObject *t = PyTuple_New(15);
    if (t == NULL) return NULL;
    PyObject *items[15] = {
        PyLong_FromLong(d[0]), PyLong_FromLong(d[1]), PyLong_FromLong(d[2]),
        PyLong_FromLong(d[3]), PyLong_FromUnsignedLong(get32(d + 4)),
        PyLong_FromUnsignedLongLong(get64(d + 8)), PyLong_FromUnsignedLong(get32(d + 16)),
        PyLong_FromUnsignedLong(get32(d + 20)), PyLong_FromLong(d[24]), PyLong_FromLong(d[25]),
        PyLong_FromLong(get16(d + 26)), PyLong_FromUnsignedLong(get32(d + 28)),
        PyLong_FromUnsignedLongLong(get64(d + 32)), PyLong_FromUnsignedLongLong(get64(d + 40)),
        PyLong_FromUnsignedLong(get32(d + 48)),
    };
    for (int i = 0; i < 15; i++) {
        if (items[i] == NULL) {
            for (int j = i; j < 15; j++) Py_XDECREF(items[j]);
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    return t;
}

/* One datagram: (fields, payload), Py_None (not the fast path) or NULL with an
 * exception set; *err receives the WireError object instead of raising when
 * err is not NULL. */
static PyObject *open_one(OpenerObject *self, const uint8_t *d, Py_ssize_t len, PyObject **err) {
    OpenInfo info;
    PyObject *payload = NULL;
    uint8_t *pt = NULL;
    Py_ssize_t room = len > DATA_CUT ? len - DATA_CUT : 0;
    /* The plaintext is written straight into the bytes object returned, sized
     * by the header (a length that does not fit is refused by open_core). */
    if (room > 0 && d[0] == VERSION && d[1] == T_DATA && get16(d + 26) <= room) {
        payload = PyBytes_FromStringAndSize(NULL, get16(d + 26));
        if (payload == NULL) return NULL;
        pt = (uint8_t *)PyBytes_AS_STRING(payload);
    }
    int status = open_core(self, d, len, pt, &info);
    if (status == OPEN_NOT_FAST) {
        Py_XDECREF(payload);
        Py_RETURN_NONE;
    }
    if (status != OPEN_OK) {
        Py_XDECREF(payload);
        PyObject *exc = open_error(self, status, &info);
        if (exc == NULL) return NULL;
        if (err != NULL) {
            *err = exc;
            return NULL;
        }
        PyErr_SetObject(WireError, exc);
        Py_DECREF(exc);
        return NULL;
    }
    if (info.trimmed) {
        Py_CLEAR(payload);
    } else if (payload == NULL) {
        payload = PyBytes_FromStringAndSize(NULL, 0);
        if (payload == NULL) return NULL;
    }
    PyObject *fields = fields_tuple(d);
    if (fields == NULL) {
        Py_XDECREF(payload);
        return NULL;
    }
    PyObject *r = PyTuple_New(2);
    if (r == NULL) {
        Py_DECREF(fields);
        Py_XDECREF(payload);
        return NULL;
    }
    PyTuple_SET_ITEM(r, 0, fields);
    PyTuple_SET_ITEM(r, 1, payload ? payload : (Py_INCREF(Py_None), Py_None));
    return r;
}

int opener_ready(OpenerObject *self) {
    if (self->replay == NULL) { /* set by __init__ with the mode and keys */
        PyErr_SetString(PyExc_RuntimeError, "opener not initialised");
        return 0;
    }
    return 1;
}

static PyObject *Opener_open_data_untrusted(OpenerObject *self, PyObject *data) {
    if (!opener_ready(self)) return NULL;
    Py_buffer b;
    if (PyObject_GetBuffer(data, &b, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *r = open_one(self, b.buf, b.len, NULL);
    PyBuffer_Release(&b);
    return r;
}

/* open_data_many(buffer, segment_size, nbytes=-1) -> list: a GRO batch of
 * datagrams of segment_size bytes (the last maybe shorter), each opened on
 * its own: (fields, payload), None (not the fast path: open it generically)
 * or the WireError it raised. */
static PyObject *Opener_open_data_many(OpenerObject *self, PyObject *args) {
    Py_buffer b;
    Py_ssize_t seg, nbytes = -1;
    if (!opener_ready(self)) return NULL;
    if (!PyArg_ParseTuple(args, "y*n|n", &b, &seg, &nbytes)) return NULL;
    if (nbytes < 0 || nbytes > b.len) nbytes = b.len;
    if (seg <= 0 || seg > nbytes) seg = nbytes;
    Py_ssize_t n = nbytes == 0 ? 0 : (nbytes + seg - 1) / seg;
    PyObject *out = PyList_New(n);
    if (out == NULL) goto done;
    const uint8_t *d = b.buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t off = i * seg;
        Py_ssize_t len = nbytes - off < seg ? nbytes - off : seg;
        PyObject *err = NULL;
        PyObject *r = open_one(self, d + off, len, &err);
        if (r == NULL) {
            if (err == NULL) { /* not a WireError: memory */
                Py_CLEAR(out);
                goto done;
            }
            r = err;
        }
        PyList_SET_ITEM(out, i, r);
    }
done:
    PyBuffer_Release(&b);
    return out;
}

static PyObject *Opener_get_epoch(OpenerObject *self, void *c) {
    return PyLong_FromLongLong(self->epoch);
}
static int Opener_set_epoch(OpenerObject *self, PyObject *v, void *c) {
    return attr_ll(v, &self->epoch, "epoch");
}
static PyObject *Opener_get_plaintext(OpenerObject *self, void *c) {
    return PyBool_FromLong(self->plaintext);
}
static PyObject *Opener_get_replay(OpenerObject *self, void *c) {
    return or_none((PyObject *)self->replay);
}
static int Opener_set_replay(OpenerObject *self, PyObject *v, void *c) {
    if (v == NULL || !PyObject_TypeCheck(v, &ReplayType) || ((ReplayObject *)v)->slots == NULL) {
        PyErr_SetString(PyExc_TypeError, "replay must be a wire._fastwire.ReplayWindow");
        return -1;
    }
    Py_INCREF(v);
    Py_XSETREF(self->replay, (ReplayObject *)v);
    return 0;
}
static PyObject *Opener_get_hdr(OpenerObject *self, void *c) {
    return or_none((PyObject *)self->hdr);
}
static PyObject *Opener_get_pay(OpenerObject *self, void *c) {
    return or_none((PyObject *)self->pay);
}

static PyGetSetDef Opener_getset[] = {
    {"epoch", (getter)Opener_get_epoch, (setter)Opener_set_epoch, "key epoch", NULL},
    {"plaintext", (getter)Opener_get_plaintext, NULL, "insecure plaintext mode", NULL},
    {"replay", (getter)Opener_get_replay, (setter)Opener_set_replay, "the replay window", NULL},
    {"_hdr", (getter)Opener_get_hdr, NULL, "header-key AESGCM (None: plaintext)", NULL},
    {"_pay", (getter)Opener_get_pay, NULL, "payload-key AESGCM (None: plaintext)", NULL},
    {NULL}};

static PyMethodDef Opener_methods[] = {
    {"open_data_untrusted", (PyCFunction)Opener_open_data_untrusted, METH_O,
     "open_data_untrusted(data) -> (fields, payload) | None; raises only WireError"},
    {"open_data_many", (PyCFunction)Opener_open_data_many, METH_VARARGS,
     "open_data_many(buffer, segment_size, nbytes=-1) -> [(fields, payload) | None | WireError]"},
    {NULL}};

PyTypeObject OpenerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wire._fastwire.OpenerCore",
    .tp_basicsize = sizeof(OpenerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The DATA part of wire.codec.Opener in C (keys, *, epoch=0, replay_window=8192).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Opener_init,
    .tp_dealloc = (destructor)Opener_dealloc,
    .tp_methods = Opener_methods,
    .tp_getset = Opener_getset,
};
