/* wire._fastwire: SealerCore, the DATA sealer (one packet, or a run into one GSO buffer). */
#include "_fastwire.h"

/* -- sealer ------------------------------------------------------------------------ */



static int Sealer_init(SealerObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"keys", "dcid", "epoch", NULL};
    PyObject *keys, *dcid = NULL, *epoch = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|$OO", kwlist, &keys, &dcid, &epoch)) return -1;
    if (dcid == NULL) {
        PyErr_SetString(PyExc_TypeError, "missing required keyword-only argument: 'dcid'");
        return -1;
    }
    if (attr_ll(dcid, &self->dcid, "dcid") < 0) return -1;
    self->epoch = 0;
    if (epoch != NULL && attr_ll(epoch, &self->epoch, "epoch") < 0) return -1;
    self->counter = 0;
    PyObject *h, *p;
    if (load_keys(keys, &h, &p) < 0) return -1;
    Py_XSETREF(self->hdr, (AeadObject *)h);
    Py_XSETREF(self->pay, (AeadObject *)p);
    self->plaintext = h == NULL;
    self->ready = 1;
    return 0;
}

static void Sealer_dealloc(SealerObject *self) {
    Py_XDECREF(self->hdr);
    Py_XDECREF(self->pay);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Takes the next counter (the reference consumes it before packing). */
int next_counter(SealerObject *self, uint64_t *ec) {
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "sealer not initialised");
        return -1;
    }
    long long c = self->counter;
    if (c < 0 || (unsigned long long)c > COUNTER_MAX) {
        PyErr_SetString(PyExc_OverflowError,
                        "packet counter exhausted: the connection must be re-keyed");
        return -1;
    }
    self->counter = c + 1;
    *ec = (uint64_t)c;
    return 0;
}

/* The epoch joins the counter in one 64-bit field (struct.error outside 16 bits). */
int check_epoch(SealerObject *self) {
    if (self->epoch < 0 || self->epoch > 0xFFFF) {
        PyErr_SetString(StructError, "'Q' format requires 0 <= number <= 18446744073709551615");
        return -1;
    }
    return 0;
}

int check_dcid(SealerObject *self) {
    if (self->dcid < 0 || self->dcid > 0xFFFFFFFFLL) {
        PyErr_SetString(StructError, "'I' format requires 0 <= number <= 4294967295");
        return -1;
    }
    return 0;
}


/* One DATA datagram into out (sealed_len bytes). */
int seal_into(SealerObject *self, uint64_t ec, const DataFields *f, const uint8_t *payload,
                     Py_ssize_t plen, uint8_t *out) {
    out[0] = VERSION;
    out[1] = T_DATA;
    out[2] = (uint8_t)f->flags;
    out[3] = DATA_WORDS;
    ec |= (uint64_t)self->epoch << 48;
    put32(out + 4, (uint32_t)self->dcid);
    put64(out + 8, ec);
    put32(out + 16, (uint32_t)f->psn);
    put32(out + 20, (uint32_t)f->ev);
    out[24] = (uint8_t)f->plane;
    out[25] = 0;
    put16(out + 26, (uint32_t)plen);
    put32(out + 28, (uint32_t)f->msg_id);
    put64(out + 32, f->msg_offset);
    put64(out + 40, f->msg_len);
    put32(out + 48, (uint32_t)f->timestamp);
    if (self->plaintext) {
        memset(out + DATA_HLEN, 0, TAG_LEN);
        if (plen) memcpy(out + DATA_CUT, payload, plen);
        return 0;
    }
    uint8_t nonce[NONCE_LEN] = {0};
    put64(nonce + 4, ec);
    if (gcm_seal(self->hdr->enc, nonce, out, DATA_HLEN, NULL, 0, NULL, out + DATA_HLEN) < 0 ||
        gcm_seal(self->pay->enc, nonce, out, DATA_CUT, payload, (int)plen, out + DATA_CUT,
                 out + DATA_CUT + plen) < 0) {
        PyErr_SetString(PyExc_RuntimeError, "AES-GCM seal failed");
        return -1;
    }
    return 0;
}

static int wire_flags(SealerObject *self, PyObject *flags, int *out) {
    PyObject *i = PyNumber_Index(flags); /* an IntFlag is fine, as in the reference */
    if (i == NULL) return -1;
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(i, &overflow);
    Py_DECREF(i);
    if (v == -1 && PyErr_Occurred()) return -1;
    if (!overflow) {
        v = self->plaintext ? (v | PLAINTEXT_FLAG) : (v & ~(long long)PLAINTEXT_FLAG);
        if (v >= 0 && v <= 0xFF) {
            *out = (int)v;
            return 0;
        }
    }
    PyErr_SetString(StructError, "ubyte format requires 0 <= number <= 255");
    return -1;
}

/* The fields of seal_data, checked as struct.pack checks them. */
static int data_fields(PyObject *const *v, DataFields *f) {
    if (field_u64(v[0], 0xFFFFFFFFULL, &f->psn) < 0 || field_u64(v[1], 0xFFFFFFFFULL, &f->ev) < 0 ||
        field_u64(v[2], 0xFF, &f->plane) < 0 || field_u64(v[3], 0xFFFFFFFFULL, &f->msg_id) < 0 ||
        field_u64(v[4], UINT64_MAX, &f->msg_offset) < 0 ||
        field_u64(v[5], UINT64_MAX, &f->msg_len) < 0 ||
        field_u64(v[6], 0xFFFFFFFFULL, &f->timestamp) < 0)
        return -1;
    return 0;
}

static const char *const SEAL_NAMES[] = {"psn", "ev", "plane", "msg_id", "msg_offset",
                                         "msg_len", "timestamp", "payload", "flags"};
#define SEAL_NARGS 9

/* Positional and keyword arguments into v[] (NULL where absent), as Python binds them. */
static int bind_args(PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                     const char *const *names, int n, PyObject **v, const char *fn) {
    if (nargs > n) {
        PyErr_Format(PyExc_TypeError, "%s() takes at most %d arguments", fn, n);
        return -1;
    }
    for (int i = 0; i < n; i++) v[i] = i < nargs ? args[i] : NULL;
    if (kwnames == NULL) return 0;
    Py_ssize_t nk = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t k = 0; k < nk; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        int i;
        for (i = 0; i < n; i++)
            if (PyUnicode_CompareWithASCIIString(name, names[i]) == 0) break;
        if (i == n) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn,
                         name);
            return -1;
        }
        if (v[i] != NULL) {
            PyErr_Format(PyExc_TypeError, "%s() got multiple values for argument '%s'", fn,
                         names[i]);
            return -1;
        }
        v[i] = args[nargs + k];
    }
    return 0;
}

static PyObject *Sealer_seal_data(SealerObject *self, PyObject *const *args, Py_ssize_t nargs,
                                  PyObject *kwnames) {
    PyObject *v[SEAL_NARGS];
    if (bind_args(args, nargs, kwnames, SEAL_NAMES, SEAL_NARGS, v, "seal_data") < 0) return NULL;
    for (int i = 0; i < 8; i++)
        if (v[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "seal_data() missing required argument: '%s'",
                         SEAL_NAMES[i]);
            return NULL;
        }
    uint64_t ec;
    if (next_counter(self, &ec) < 0) return NULL;
    DataFields f;
    f.flags = 0;
    if (wire_flags(self, v[8] ? v[8] : Zero, &f.flags) < 0) return NULL;
    if (check_dcid(self) < 0 || check_epoch(self) < 0 || data_fields(v, &f) < 0) return NULL;
    Py_buffer pb;
    if (PyObject_GetBuffer(v[7], &pb, PyBUF_SIMPLE) < 0) return NULL;
    PyObject *out = NULL;
    if (pb.len > MAX_PAYLOAD) {
        PyErr_SetString(StructError, "'H' format requires 0 <= number <= 65535");
    } else {
        out = PyBytes_FromStringAndSize(NULL, sealed_len(self, pb.len));
        if (out != NULL &&
            seal_into(self, ec, &f, pb.buf, pb.len, (uint8_t *)PyBytes_AS_STRING(out)) < 0)
            Py_CLEAR(out);
    }
    PyBuffer_Release(&pb);
    return out;
}

static const char *const RUN_NAMES[] = {"psn", "ev", "plane", "msg_id", "msg_offset", "msg_len",
                                        "timestamp", "payload", "segment", "flags",
                                        "last_flags"};
#define RUN_NARGS 11

/* seal_data_run(psn, ev, plane, msg_id, msg_offset, msg_len, timestamp, payload, segment,
 *               flags=0, last_flags=0) -> (buffer, count, datagram_size) */
static PyObject *Sealer_seal_data_run(SealerObject *self, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames) {
    PyObject *v[RUN_NARGS];
    if (bind_args(args, nargs, kwnames, RUN_NAMES, RUN_NARGS, v, "seal_data_run") < 0)
        return NULL;
    for (int i = 0; i < 9; i++)
        if (v[i] == NULL) {
            PyErr_Format(PyExc_TypeError, "seal_data_run() missing required argument: '%s'",
                         RUN_NAMES[i]);
            return NULL;
        }
    DataFields f;
    int flags, last_flags;
    if (check_dcid(self) < 0 || check_epoch(self) < 0 || data_fields(v, &f) < 0) return NULL;
    if (wire_flags(self, v[9] ? v[9] : Zero, &flags) < 0) return NULL;
    if (wire_flags(self, v[10] ? v[10] : Zero, &last_flags) < 0) return NULL;
    Py_ssize_t seg = PyLong_AsSsize_t(v[8]);
    if (seg == -1 && PyErr_Occurred()) return NULL;
    if (seg <= 0 || seg > MAX_PAYLOAD) {
        PyErr_SetString(PyExc_ValueError, "segment must be 1 .. 65535 payload bytes");
        return NULL;
    }
    Py_buffer pb;
    if (PyObject_GetBuffer(v[7], &pb, PyBUF_SIMPLE) < 0) return NULL;
    Py_ssize_t n = pb.len == 0 ? 1 : (pb.len + seg - 1) / seg;
    uint64_t end = f.msg_offset + (uint64_t)pb.len;
    PyObject *out = NULL;
    if (end < f.msg_offset) {
        PyErr_SetString(StructError, "msg_offset + payload beyond 64 bits");
        goto done;
    }
    if (!self->ready) {
        PyErr_SetString(PyExc_RuntimeError, "sealer not initialised");
        goto done;
    }
    if (self->counter < 0 || (unsigned long long)self->counter + (unsigned long long)n - 1 >
                                 COUNTER_MAX) {
        PyErr_SetString(PyExc_OverflowError,
                        "packet counter exhausted: the connection must be re-keyed");
        goto done;
    }
    Py_ssize_t dsize = sealed_len(self, pb.len < seg ? pb.len : seg);
    Py_ssize_t total = pb.len + n * sealed_len(self, 0);
    out = PyBytes_FromStringAndSize(NULL, total);
    if (out == NULL) goto done;
    uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
    const uint8_t *p = pb.buf;
    Py_ssize_t left = pb.len;
    uint64_t psn0 = f.psn, off0 = f.msg_offset;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t take = left < seg ? left : seg;
        uint64_t ec;
        if (next_counter(self, &ec) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        f.psn = (psn0 + (uint64_t)i) & 0xFFFFFFFFULL;
        f.msg_offset = off0 + (uint64_t)(i * seg);
        f.flags = i == n - 1 ? (flags | last_flags) : flags;
        if (seal_into(self, ec, &f, p, take, o) < 0) {
            Py_CLEAR(out);
            goto done;
        }
        o += sealed_len(self, take);
        p += take;
        left -= take;
    }
    PyObject *r = Py_BuildValue("(Nnn)", out, n, dsize);
    out = r;
done:
    PyBuffer_Release(&pb);
    return out;
}

static PyObject *Sealer_get_counter(SealerObject *self, void *c) {
    return PyLong_FromLongLong(self->counter);
}
static int Sealer_set_counter(SealerObject *self, PyObject *v, void *c) {
    return attr_ll(v, &self->counter, "counter");
}
static PyObject *Sealer_get_dcid(SealerObject *self, void *c) {
    return PyLong_FromLongLong(self->dcid);
}
static int Sealer_set_dcid(SealerObject *self, PyObject *v, void *c) {
    return attr_ll(v, &self->dcid, "dcid");
}
static PyObject *Sealer_get_epoch(SealerObject *self, void *c) {
    return PyLong_FromLongLong(self->epoch);
}
static int Sealer_set_epoch(SealerObject *self, PyObject *v, void *c) {
    return attr_ll(v, &self->epoch, "epoch");
}
static PyObject *Sealer_get_plaintext(SealerObject *self, void *c) {
    return PyBool_FromLong(self->plaintext);
}
static PyObject *Sealer_get_hdr(SealerObject *self, void *c) {
    return or_none((PyObject *)self->hdr);
}
static PyObject *Sealer_get_pay(SealerObject *self, void *c) {
    return or_none((PyObject *)self->pay);
}

static PyGetSetDef Sealer_getset[] = {
    {"counter", (getter)Sealer_get_counter, (setter)Sealer_set_counter, "next counter", NULL},
    {"dcid", (getter)Sealer_get_dcid, (setter)Sealer_set_dcid, "destination conn id", NULL},
    {"epoch", (getter)Sealer_get_epoch, (setter)Sealer_set_epoch, "key epoch", NULL},
    {"plaintext", (getter)Sealer_get_plaintext, NULL, "insecure plaintext mode", NULL},
    {"_hdr", (getter)Sealer_get_hdr, NULL, "header-key AESGCM (None: plaintext)", NULL},
    {"_pay", (getter)Sealer_get_pay, NULL, "payload-key AESGCM (None: plaintext)", NULL},
    {NULL}};

static PyMethodDef Sealer_methods[] = {
    {"seal_data", (PyCFunction)(void (*)(void))Sealer_seal_data, METH_FASTCALL | METH_KEYWORDS,
     "seal_data(psn, ev, plane, msg_id, msg_offset, msg_len, timestamp, payload, flags=0)"},
    {"seal_data_run", (PyCFunction)(void (*)(void))Sealer_seal_data_run,
     METH_FASTCALL | METH_KEYWORDS,
     "seal_data_run(psn, ev, plane, msg_id, msg_offset, msg_len, timestamp, payload, segment, "
     "flags=0, last_flags=0) -> (buffer, count, datagram_size)"},
    {NULL}};

PyTypeObject SealerType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wire._fastwire.SealerCore",
    .tp_basicsize = sizeof(SealerObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "The DATA part of wire.codec.Sealer in C (keys, *, dcid, epoch=0).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Sealer_init,
    .tp_dealloc = (destructor)Sealer_dealloc,
    .tp_methods = Sealer_methods,
    .tp_getset = Sealer_getset,
};
