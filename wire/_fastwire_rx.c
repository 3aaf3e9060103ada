/* The receive fast path: DATA datagrams of one connection opened and placed
 * into its transport.receiver.Receiver in one call, place_slices().
 *
 * Only Receiver.on_slice's common case is done here: the next slice of a
 * message already in progress, in the PSN window, not a duplicate, within
 * the receive credit. Its effect on the receiver is exactly on_slice's (the
 * same attributes, the same values, the same order of completed messages).
 * Every other datagram returns to Python at once, already opened (its
 * replay counter is committed), so ConnDispatch takes it the reference way:
 * a new message, a whole message in one slice, a duplicate, a trimmed
 * header, a slice out of window or beyond credit, a malformed slice, a
 * datagram the DATA opener does not take, or one it rejects. A packet that
 * asks for a SACK at once (ACK_REQ, CE, every ack_every packets) returns
 * too, so the SACK describes the receiver as it was after that packet.
 *
 * The receiver's numbers are read once per call and written back before
 * any return and before Receiver._complete (a message whole) runs.
 * tests/unit/test_rx_batch.py checks that the two paths leave the same
 * receiver and send the same SACKs. */
#include "_fastwire.h"

enum { K_DONE = 0, K_URGENT = 1, K_ERROR = 2, K_GENERIC = 3, K_SLOW = 4 };

#define FLAG_ACK_REQ 0x02
#define FLAG_LAST 0x04

static PyObject *s_cum, *s_window, *s_size, *s_received, *s_freed, *s_recv_window, *s_ce,
    *s_held, *s_unacked, *s_every, *s_lo, *s_hi, *s_hi_plane, *s_deadline, *s_hold, *s_first,
    *s_first_at, *s_last, *s_last_at, *s_flush, *s_above, *s_assembly, *s_causes, *s_msg_len,
    *s_slices, *s_asm_received, *s_complete, *s_ack_req, *s_c_ce, *s_every_cause;

int rx_init_names(void) {
    struct { PyObject **p; const char *s; } n[] = {
        {&s_cum, "cum_psn"}, {&s_window, "psn_window"}, {&s_size, "slice_size"},
        {&s_received, "bytes_received"}, {&s_freed, "freed"}, {&s_recv_window, "recv_window"},
        {&s_ce, "_ce_since_ack"}, {&s_held, "held_partial"}, {&s_unacked, "_unacked"},
        {&s_every, "ack_every"}, {&s_lo, "_pend_lo"}, {&s_hi, "_pend_hi"},
        {&s_hi_plane, "_pend_hi_plane"}, {&s_deadline, "_ack_deadline"}, {&s_hold, "_hold"},
        {&s_first, "_first"}, {&s_first_at, "_first_at"}, {&s_last, "_last"},
        {&s_last_at, "_last_at"}, {&s_flush, "_flush_now"}, {&s_above, "_above"},
        {&s_assembly, "_assembly"}, {&s_causes, "sack_causes"}, {&s_msg_len, "msg_len"},
        {&s_slices, "slices"}, {&s_asm_received, "received"}, {&s_complete, "_complete"},
        {&s_ack_req, "ack_req"}, {&s_c_ce, "ce"}, {&s_every_cause, "every"},
    };
    for (size_t i = 0; i < sizeof n / sizeof n[0]; i++)
        if ((*n[i].p = PyUnicode_InternFromString(n[i].s)) == NULL) return -1;
    return 0;
}

/* The receiver's state that on_slice's common case reads or writes. */
typedef struct {
    PyObject *r;
    long long cum, window, size, received, freed, recv_window, ce, held, unacked, every;
    int has_lo;
    long long lo, hi, hi_plane;
    int has_deadline;
    double deadline, hold;
    int first_set, last_set; /* set in this call: written back */
    long long first[4], last[4];
    double first_at, last_at;
    int flush;
    PyObject *above, *assembly, *causes; /* new references */
} Rx;

static int get_ll(PyObject *r, PyObject *name, long long *out) {
    PyObject *v = PyObject_GetAttr(r, name);
    if (v == NULL) return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int get_opt_ll(PyObject *r, PyObject *name, int *has, long long *out) {
    PyObject *v = PyObject_GetAttr(r, name);
    if (v == NULL) return -1;
    *has = v != Py_None;
    *out = *has ? PyLong_AsLongLong(v) : 0;
    Py_DECREF(v);
    return (*has && *out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int get_opt_double(PyObject *r, PyObject *name, int *has, double *out) {
    PyObject *v = PyObject_GetAttr(r, name);
    if (v == NULL) return -1;
    *has = v != Py_None;
    *out = *has ? PyFloat_AsDouble(v) : 0.0;
    Py_DECREF(v);
    return (*has && *out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

static int rx_load(Rx *x) {
    PyObject *r = x->r;
    int has;
    if (get_ll(r, s_cum, &x->cum) || get_ll(r, s_window, &x->window) ||
        get_ll(r, s_size, &x->size) || get_ll(r, s_received, &x->received) ||
        get_ll(r, s_freed, &x->freed) || get_ll(r, s_recv_window, &x->recv_window) ||
        get_ll(r, s_ce, &x->ce) || get_ll(r, s_held, &x->held) ||
        get_ll(r, s_unacked, &x->unacked) || get_ll(r, s_every, &x->every) ||
        get_opt_ll(r, s_lo, &x->has_lo, &x->lo) || get_ll(r, s_hi, &x->hi) ||
        get_ll(r, s_hi_plane, &x->hi_plane) ||
        get_opt_double(r, s_deadline, &x->has_deadline, &x->deadline) ||
        get_opt_double(r, s_hold, &has, &x->hold))
        return -1;
    PyObject *f = PyObject_GetAttr(r, s_flush);
    if (f == NULL) return -1;
    x->flush = PyObject_IsTrue(f);
    Py_DECREF(f);
    if (x->flush < 0) return -1;
    if (x->size <= 0) {
        PyErr_SetString(PyExc_ValueError, "slice_size must be positive");
        return -1;
    }
    return 0;
}

static int set_ll(PyObject *r, PyObject *name, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int rc = PyObject_SetAttr(r, name, o);
    Py_DECREF(o);
    return rc;
}

static int set_double(PyObject *r, PyObject *name, double v) {
    PyObject *o = PyFloat_FromDouble(v);
    if (o == NULL) return -1;
    int rc = PyObject_SetAttr(r, name, o);
    Py_DECREF(o);
    return rc;
}

static int set_quad(PyObject *r, PyObject *name, const long long q[4]) {
    PyObject *t = Py_BuildValue("(LLLL)", q[0], q[1], q[2], q[3]);
    if (t == NULL) return -1;
    int rc = PyObject_SetAttr(r, name, t);
    Py_DECREF(t);
    return rc;
}

static int rx_store(Rx *x) {
    PyObject *r = x->r;
    if (set_ll(r, s_cum, x->cum) || set_ll(r, s_received, x->received) ||
        set_ll(r, s_ce, x->ce) || set_ll(r, s_held, x->held) ||
        set_ll(r, s_unacked, x->unacked) || set_ll(r, s_hi, x->hi) ||
        set_ll(r, s_hi_plane, x->hi_plane))
        return -1;
    if (x->has_lo ? set_ll(r, s_lo, x->lo) : PyObject_SetAttr(r, s_lo, Py_None)) return -1;
    if (x->has_deadline ? set_double(r, s_deadline, x->deadline)
                        : PyObject_SetAttr(r, s_deadline, Py_None))
        return -1;
    if (x->first_set && (set_quad(r, s_first, x->first) || set_double(r, s_first_at, x->first_at)))
        return -1;
    if (x->last_set && (set_quad(r, s_last, x->last) || set_double(r, s_last_at, x->last_at)))
        return -1;
    if (PyObject_SetAttr(r, s_flush, x->flush ? Py_True : Py_False)) return -1;
    x->first_set = x->last_set = 0;
    return 0;
}

static int bump_cause(PyObject *causes, PyObject *key) {
    PyObject *v = PyDict_GetItemWithError(causes, key);
    if (v == NULL) {
        if (PyErr_Occurred()) return -1;
        v = Zero;
    }
    PyObject *one = PyLong_FromLong(1);
    if (one == NULL) return -1;
    PyObject *w = PyNumber_Add(v, one);
    Py_DECREF(one);
    if (w == NULL) return -1;
    int rc = PyDict_SetItem(causes, key, w);
    Py_DECREF(w);
    return rc;
}

/* long long -> new int; NULL on error. */
#define LL(v) PyLong_FromLongLong(v)

/* Place one opened, checked slice (on_slice from "self._last = ..." on).
 * Returns 1: ask for a SACK now; 0: not; -1: error. */
static int place(Rx *x, PyObject *asm, PyObject *slices, long long psn, long long ev,
                 long long ts, long long plane, long long mid, long long off, long long mlen,
                 PyObject *payload, long long n, int ce, double now, int ack_req, int last) {
    x->last_set = 1;
    x->last[0] = psn; x->last[1] = ev; x->last[2] = ts; x->last[3] = plane;
    x->last_at = now;
    if (ce) x->ce += 1;
    if (psn == x->cum) {
        long long cum = psn + 1;
        if (PySet_GET_SIZE(x->above)) {
            for (;;) {
                PyObject *k = LL(cum);
                if (k == NULL) return -1;
                int rc = PySet_Discard(x->above, k);
                Py_DECREF(k);
                if (rc < 0) return -1;
                if (rc == 0) break;
                cum += 1;
            }
        }
        x->cum = cum;
    } else {
        PyObject *k = LL(psn);
        if (k == NULL) return -1;
        int rc = PySet_Add(x->above, k);
        Py_DECREF(k);
        if (rc < 0) return -1;
    }
    x->received += n;
    PyObject *key = LL(off);
    if (key == NULL) return -1;
    int rc = PyDict_SetItem(slices, key, payload);
    Py_DECREF(key);
    if (rc < 0) return -1;
    long long got;
    if (get_ll(asm, s_asm_received, &got) < 0) return -1;
    got += n;
    if (set_ll(asm, s_asm_received, got) < 0) return -1;
    x->held += n;
    if (got == mlen) {
        PyObject *mkey = LL(mid);
        if (mkey == NULL) return -1;
        rc = PyDict_DelItem(x->assembly, mkey);
        Py_DECREF(mkey);
        if (rc < 0) return -1;
        x->held -= mlen;
        PyObject *whole = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)mlen);
        if (whole == NULL) return -1;
        char *w = PyBytes_AS_STRING(whole);
        for (long long o = 0; o < mlen; o += x->size) {
            PyObject *ok = LL(o);
            if (ok == NULL) { Py_DECREF(whole); return -1; }
            PyObject *part = PyDict_GetItemWithError(slices, ok);
            Py_DECREF(ok);
            long long want = mlen - o < x->size ? mlen - o : x->size;
            if (part == NULL || !PyBytes_Check(part) || PyBytes_GET_SIZE(part) != want) {
                Py_DECREF(whole);
                if (!PyErr_Occurred())
                    PyErr_SetString(PyExc_RuntimeError, "place_slices: a message's slices do not add up");
                return -1;
            }
            memcpy(w + o, PyBytes_AS_STRING(part), (size_t)want);
        }
        /* Receiver._complete reads and moves the receiver's own numbers. */
        PyObject *mid_o = LL(mid), *len_o = LL(mlen);
        PyObject *res = NULL;
        if (mid_o != NULL && len_o != NULL && rx_store(x) == 0)
            res = PyObject_CallMethodObjArgs(x->r, s_complete, mid_o, len_o, whole, NULL);
        Py_XDECREF(mid_o);
        Py_XDECREF(len_o);
        Py_DECREF(whole);
        if (res == NULL) return -1;
        Py_DECREF(res);
        if (rx_load(x) < 0) return -1;
    }
    x->unacked += 1;
    if (!x->has_lo || psn < x->lo) {
        x->has_lo = 1;
        x->lo = psn;
    }
    if (psn > x->hi) {
        x->hi = psn;
        x->hi_plane = plane;
    }
    if (!x->has_deadline) {
        x->has_deadline = 1;
        x->deadline = now + x->hold;
        x->first_set = 1;
        x->first[0] = psn; x->first[1] = ev; x->first[2] = ts; x->first[3] = plane;
        x->first_at = now;
    }
    if (last) x->flush = 1;
    if (ack_req || ce || x->unacked >= x->every) {
        if (bump_cause(x->causes, ack_req ? s_ack_req : ce ? s_c_ce : s_every_cause) < 0)
            return -1;
        return 1;
    }
    return 0;
}

/* The checks of on_slice's common case on an opened slice: the assembly it
 * extends (borrowed) or NULL when Python must take it. */
static PyObject *common_case(Rx *x, long long d, long long mid, long long off, long long mlen,
                             long long n, PyObject **slices, int *err) {
    *err = 0;
    if (d < 0 || d >= x->window) return NULL; /* duplicate below cum, or out of window */
    long long psn = x->cum + d;
    if (PySet_GET_SIZE(x->above)) {
        PyObject *k = LL(psn);
        if (k == NULL) { *err = 1; return NULL; }
        int in = PySet_Contains(x->above, k);
        Py_DECREF(k);
        if (in) { *err = in < 0; return NULL; } /* a duplicate */
    }
    PyObject *mk = LL(mid);
    if (mk == NULL) { *err = 1; return NULL; }
    PyObject *asm = PyDict_GetItemWithError(x->assembly, mk);
    Py_DECREF(mk);
    if (asm == NULL) { *err = PyErr_Occurred() != NULL; return NULL; } /* a new message */
    long long alen;
    if (get_ll(asm, s_msg_len, &alen) < 0) { *err = 1; return NULL; }
    if (alen != mlen || off % x->size) return NULL;
    if (n != (mlen - off > x->size ? x->size : mlen - off)) return NULL;
    PyObject *sl = PyObject_GetAttr(asm, s_slices);
    if (sl == NULL) { *err = 1; return NULL; }
    if (!PyDict_Check(sl)) { Py_DECREF(sl); return NULL; }
    PyObject *ok = LL(off);
    if (ok == NULL) { Py_DECREF(sl); *err = 1; return NULL; }
    int placed = PyDict_Contains(sl, ok);
    Py_DECREF(ok);
    if (placed) { Py_DECREF(sl); *err = placed < 0; return NULL; }
    if (x->received + n > x->freed + x->recv_window) { Py_DECREF(sl); return NULL; }
    *slices = sl; /* new reference */
    return asm;
}

static PyObject *result(Py_ssize_t next, int kind, PyObject *item, Py_ssize_t opened) {
    /* steals item */
    PyObject *r = Py_BuildValue("(niNn)", next, kind, item ? item : (Py_INCREF(Py_None), Py_None),
                                opened);
    return r;
}

/* place_slices(receiver, opener, datagrams, start, plane, ce, now)
 *   -> (next, kind, item, opened)
 * Takes datagrams[start:] until one needs Python. kind: 0 all taken; 1 the
 * datagram before next asks for a SACK now; 2 it was rejected (item: the
 * WireError); 3 the DATA opener does not take it (the generic path);
 * 4 it is opened, for the reference path (item: (fields, payload)).
 * opened: datagrams opened in this call (kind 4's included). */
PyObject *fw_place_slices(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *r, *list;
    OpenerObject *o;
    Py_ssize_t start;
    long long rx_plane;
    int ce;
    double now;
    if (!PyArg_ParseTuple(args, "OO!O!nLpd", &r, &OpenerType, &o, &PyList_Type, &list, &start,
                          &rx_plane, &ce, &now))
        return NULL;
    if (!opener_ready(o)) return NULL;
    Rx x = {0};
    x.r = r;
    x.above = PyObject_GetAttr(r, s_above);
    x.assembly = x.above ? PyObject_GetAttr(r, s_assembly) : NULL;
    x.causes = x.assembly ? PyObject_GetAttr(r, s_causes) : NULL;
    PyObject *out = NULL;
    if (x.causes == NULL) goto done;
    if (!PySet_Check(x.above) || !PyDict_Check(x.assembly) || !PyDict_Check(x.causes)) {
        PyErr_SetString(PyExc_TypeError, "place_slices: not a Receiver");
        goto done;
    }
    if (rx_load(&x) < 0) goto done;
    Py_ssize_t n = PyList_GET_SIZE(list), opened = 0, i = start < 0 ? 0 : start;
    for (; i < n; i++) {
        PyObject *item = PyList_GET_ITEM(list, i);
        Py_buffer b;
        if (PyObject_GetBuffer(item, &b, PyBUF_SIMPLE) < 0) goto fail;
        const uint8_t *d = b.buf;
        Py_ssize_t len = b.len, room = len > DATA_CUT ? len - DATA_CUT : 0;
        PyObject *payload = NULL;
        uint8_t *pt = NULL;
        if (room > 0 && d[0] == VERSION && d[1] == T_DATA && get16(d + 26) <= room) {
            payload = PyBytes_FromStringAndSize(NULL, get16(d + 26));
            if (payload == NULL) { PyBuffer_Release(&b); goto fail; }
            pt = (uint8_t *)PyBytes_AS_STRING(payload);
        }
        OpenInfo info;
        int status = open_core(o, d, len, pt, &info);
        if (status != OPEN_OK) {
            Py_XDECREF(payload);
            PyBuffer_Release(&b);
            if (status == OPEN_NOT_FAST) {
                if (rx_store(&x) < 0) goto fail;
                out = result(i + 1, K_GENERIC, NULL, opened);
                goto done;
            }
            PyObject *exc = open_error(o, status, &info);
            if (exc == NULL || rx_store(&x) < 0) { Py_XDECREF(exc); goto fail; }
            out = result(i + 1, K_ERROR, exc, opened);
            goto done;
        }
        opened += 1;
        if (!info.trimmed && payload == NULL) {
            payload = PyBytes_FromStringAndSize(NULL, 0);
            if (payload == NULL) { PyBuffer_Release(&b); goto fail; }
        }
        int flags = d[2];
        long long wpsn = get32(d + 16), ev = get32(d + 20), mid = get32(d + 28);
        long long moff = (long long)get64(d + 32), mlen = (long long)get64(d + 40);
        long long ts = get32(d + 48), plen = get16(d + 26);
        long long dd = (wpsn - x.cum) & 0xFFFFFFFFLL;
        if (dd >= 0x80000000LL) dd -= 0x100000000LL;
        PyObject *slices = NULL, *asm = NULL;
        int err = 0;
        /* Offsets and lengths beyond 2^62 never reach the common case. */
        if (!info.trimmed && mlen >= 0 && moff >= 0)
            asm = common_case(&x, dd, mid, moff, mlen, plen, &slices, &err);
        if (err) { Py_XDECREF(payload); PyBuffer_Release(&b); goto fail; }
        if (asm == NULL) {
            PyObject *fields = fields_tuple(d);
            PyBuffer_Release(&b);
            PyObject *pair = fields ? PyTuple_Pack(2, fields, payload ? payload : Py_None) : NULL;
            Py_XDECREF(fields);
            Py_XDECREF(payload);
            if (pair == NULL || rx_store(&x) < 0) { Py_XDECREF(pair); goto fail; }
            out = result(i + 1, K_SLOW, pair, opened);
            goto done;
        }
        PyBuffer_Release(&b);
        Py_INCREF(asm); /* _complete may drop the assembly's last reference */
        int urgent = place(&x, asm, slices, x.cum + dd, ev, ts, rx_plane, mid, moff, mlen,
                           payload, plen, ce, now, (flags & FLAG_ACK_REQ) != 0,
                           (flags & FLAG_LAST) != 0);
        Py_DECREF(asm);
        Py_DECREF(slices);
        Py_DECREF(payload);
        if (urgent < 0) goto fail;
        if (urgent) {
            if (rx_store(&x) < 0) goto fail;
            out = result(i + 1, K_URGENT, NULL, opened);
            goto done;
        }
    }
    if (rx_store(&x) < 0) goto fail;
    out = result(n, K_DONE, NULL, opened);
    goto done;
fail:
    out = NULL;
done:
    Py_XDECREF(x.above);
    Py_XDECREF(x.assembly);
    Py_XDECREF(x.causes);
    return out;
}

/* The connection a datagram is DATA for: its destination CID, or -1 when it
 * does not look like DATA without header extensions (the checks of
 * transport.endpoint.data_run, the reference). */
static long long data_cid(PyObject *item) {
    Py_buffer b;
    if (PyObject_GetBuffer(item, &b, PyBUF_SIMPLE) < 0) return -2;
    const uint8_t *d = b.buf;
    long long cid = -1;
    if (b.len >= DATA_CUT && d[1] == T_DATA && d[3] == DATA_WORDS && d[0] == VERSION)
        cid = get32(d + 4);
    PyBuffer_Release(&b);
    return cid;
}

/* data_run(datagrams, start) -> (cid, end): datagrams[start:end] are DATA for
 * connection cid, as many in a row as there are; cid -1 (end start + 1):
 * datagrams[start] is not DATA. */
PyObject *fw_data_run(PyObject *m, PyObject *args) {
    (void)m;
    PyObject *list;
    Py_ssize_t start;
    if (!PyArg_ParseTuple(args, "O!n", &PyList_Type, &list, &start)) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(list);
    if (start < 0 || start >= n) {
        PyErr_SetString(PyExc_IndexError, "data_run: start out of range");
        return NULL;
    }
    long long cid = data_cid(PyList_GET_ITEM(list, start));
    if (cid == -2) return NULL;
    Py_ssize_t end = start + 1;
    if (cid >= 0) {
        for (; end < n; end++) {
            long long c = data_cid(PyList_GET_ITEM(list, end));
            if (c == -2) return NULL;
            if (c != cid) break;
        }
    }
    return Py_BuildValue("(Ln)", cid, end);
}
