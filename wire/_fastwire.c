/* wire._fastwire: the compiled fast path of Braid's wire codec (v1).
 *
 * The pure-Python codec (wire/codec.py) is the reference; this module must
 * produce the same bytes and take the same decisions (accept, or reject with
 * the same WireError reason), which tests/unit/test_wire_c_equivalence.py
 * checks both ways. Whole loops live here (seal a run of DATA packets into
 * one GSO buffer, open a whole GRO batch, drain a socket with recvmmsg), so
 * Python pays one call per batch instead of one per packet.
 *
 * Cryptography: OpenSSL EVP AES-GCM. Each key gets one EVP_CIPHER_CTX per
 * direction (encrypt, decrypt), keyed once; a packet re-initialises it with
 * its IV only, which skips the key schedule cryptography's AESGCM redoes on
 * every call.
 *
 * Files: _fastwire.h (shared types), _fastwire_crypto.c (AES-GCM, replay
 * window, keys), _fastwire_sealer.c, _fastwire_opener.c, _fastwire_rx.c (the
 * receive fast path into a Receiver); this one: shared
 * helpers, socket batches, benchmark floors, the module.
 *
 * Layout (wire/SPEC.md): header (52 bytes for DATA) | header tag (16) |
 * payload ciphertext | payload tag (16).
 *   header tag = AES-GMAC(header key, nonce, aad = header)
 *   payload    = AES-GCM(payload key, nonce, payload, aad = header + header tag)
 *   nonce      = 4 zero bytes | epoch (16 bits) | counter (48 bits)
 */
#include "_fastwire.h"

PyObject *WireError;    /* wire.errors.WireError */
PyObject *StructError;  /* struct.error: what the reference's packing raises */
PyObject *InvalidTag;   /* cryptography.exceptions.InvalidTag */
PyObject *Zero;         /* the int 0: default flags */

PyObject *wire_error_object(const char *reason, PyObject *detail) {
    if (detail == NULL) return NULL;
    PyObject *exc = PyObject_CallFunction(WireError, "sO", reason, detail);
    Py_DECREF(detail);
    return exc;
}

/* An unsigned field as struct.pack would take it: an int within [0, max],
 * else struct.error (the reference packs with struct). */
int field_u64(PyObject *o, uint64_t max, uint64_t *out) {
    if (!PyLong_Check(o)) {
        PyErr_SetString(StructError, "required argument is not an integer");
        return -1;
    }
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow == 0) {
        if (v == -1 && PyErr_Occurred()) return -1;
        if (v < 0 || (uint64_t)v > max) goto range;
        *out = (uint64_t)v;
        return 0;
    }
    if (overflow < 0) goto range;
    unsigned long long u = PyLong_AsUnsignedLongLong(o);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        goto range;
    }
    if (u > max) goto range;
    *out = u;
    return 0;
range:
    PyErr_Format(StructError, "argument out of range (0 <= number <= %llu)",
                 (unsigned long long)max);
    return -1;
}

/* A Python int into a C long long for a settable attribute. */
int attr_ll(PyObject *v, long long *out, const char *name) {
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    PyObject *i = PyNumber_Index(v);
    if (i == NULL) return -1;
    long long x = PyLong_AsLongLong(i);
    Py_DECREF(i);
    if (x == -1 && PyErr_Occurred()) return -1;
    *out = x;
    return 0;
}

/* -- socket batches --------------------------------------------------------------- */

#define CMSG_ROOM 128

static PyObject *sockaddr_tuple(const struct sockaddr_storage *ss) {
    char host[INET6_ADDRSTRLEN];
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        return Py_BuildValue("(si)", host, ntohs(a->sin_port));
    }
    if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        return Py_BuildValue("(siII)", host, ntohs(a->sin6_port), ntohl(a->sin6_flowinfo),
                             a->sin6_scope_id);
    }
    Py_RETURN_NONE;
}

/* drain(fd, buf, slot) -> [(nbytes, segment_size, tos, address, timestamp_ns)]
 * One recvmmsg into buf cut in slots of ``slot`` bytes (read i lands at
 * i * slot); segment_size 0 when the kernel did not coalesce (GRO), tos the
 * IP_TOS / IPV6_TCLASS byte, timestamp_ns 0 without SO_TIMESTAMPNS. An empty
 * list when nothing was queued. */
static PyObject *fw_drain(PyObject *mod, PyObject *args) {
    int fd;
    Py_buffer b;
    Py_ssize_t slot;
    if (!PyArg_ParseTuple(args, "iw*n", &fd, &b, &slot)) return NULL;
    PyObject *out = NULL;
    if (slot <= 0 || slot > b.len) {
        PyErr_SetString(PyExc_ValueError, "slot must be 1 .. len(buf)");
        goto done;
    }
    unsigned vlen = (unsigned)(b.len / slot);
    if (vlen > DRAIN_MAX) vlen = DRAIN_MAX;
    struct mmsghdr msgs[DRAIN_MAX];
    struct iovec iov[DRAIN_MAX];
    struct sockaddr_storage addrs[DRAIN_MAX];
    union { char buf[CMSG_ROOM]; struct cmsghdr align; } ctl[DRAIN_MAX];
    memset(msgs, 0, sizeof(struct mmsghdr) * vlen);
    for (unsigned i = 0; i < vlen; i++) {
        iov[i].iov_base = (char *)b.buf + (Py_ssize_t)i * slot;
        iov[i].iov_len = (size_t)slot;
        msgs[i].msg_hdr.msg_iov = &iov[i];
        msgs[i].msg_hdr.msg_iovlen = 1;
        msgs[i].msg_hdr.msg_name = &addrs[i];
        msgs[i].msg_hdr.msg_namelen = sizeof(struct sockaddr_storage);
        msgs[i].msg_hdr.msg_control = ctl[i].buf;
        msgs[i].msg_hdr.msg_controllen = CMSG_ROOM;
    }
    int got;
    Py_BEGIN_ALLOW_THREADS
    got = recvmmsg(fd, msgs, vlen, MSG_DONTWAIT, NULL);
    Py_END_ALLOW_THREADS
    if (got < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
            out = PyList_New(0);
        } else {
            PyErr_SetFromErrno(PyExc_OSError);
        }
        goto done;
    }
    out = PyList_New(got);
    if (out == NULL) goto done;
    PyObject *last_addr = NULL;
    const struct sockaddr_storage *last_ss = NULL;
    socklen_t last_len = 0;
    for (int i = 0; i < got; i++) {
        struct msghdr *h = &msgs[i].msg_hdr;
        int seg = 0, tos = 0;
        long long ts = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(h); c != NULL; c = CMSG_NXTHDR(h, c)) {
            const unsigned char *data = CMSG_DATA(c);
            size_t dl = c->cmsg_len - CMSG_LEN(0);
            if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO && dl >= sizeof(int)) {
                memcpy(&seg, data, sizeof(int));
            } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS && dl >= 1) {
                tos = data[0];
            } else if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS &&
                       dl >= sizeof(int)) {
                int v;
                memcpy(&v, data, sizeof(int));
                tos = v & 0xFF;
            } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS &&
                       dl >= sizeof(struct timespec)) {
                struct timespec t;
                memcpy(&t, data, sizeof t);
                ts = (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
            }
        }
        /* A drain is mostly one peer's datagrams: one address object for a run. */
        PyObject *addr;
        if (last_addr != NULL && h->msg_namelen == last_len &&
            memcmp(&addrs[i], last_ss, last_len) == 0) {
            addr = last_addr;
            Py_INCREF(addr);
        } else {
            addr = sockaddr_tuple(&addrs[i]);
            if (addr == NULL) {
                Py_CLEAR(out);
                goto done;
            }
            last_addr = addr;
            last_ss = &addrs[i];
            last_len = h->msg_namelen;
        }
        PyObject *row = Py_BuildValue("(IiiNL)", msgs[i].msg_len, seg, tos, addr, ts);
        if (row == NULL) {
            Py_CLEAR(out);
            goto done;
        }
        PyList_SET_ITEM(out, i, row);
    }
done:
    PyBuffer_Release(&b);
    return out;
}

static int parse_sockaddr(PyObject *a, struct sockaddr_storage *ss, socklen_t *len) {
    const char *host;
    int port;
    unsigned int flowinfo = 0, scope = 0;
    if (!PyArg_ParseTuple(a, "si|II", &host, &port, &flowinfo, &scope)) return -1;
    memset(ss, 0, sizeof *ss);
    if (strchr(host, ':') != NULL) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        s6->sin6_flowinfo = htonl(flowinfo);
        s6->sin6_scope_id = scope;
        if (inet_pton(AF_INET6, host, &s6->sin6_addr) != 1) goto bad;
        *len = sizeof *s6;
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &s4->sin_addr) != 1) goto bad;
        *len = sizeof *s4;
    }
    return 0;
bad:
    PyErr_Format(PyExc_ValueError, "not a numeric address: %s", host);
    return -1;
}

/* send_gso(fd, buffer, segment_size, sockaddr, tos_or_None) -> bytes sent:
 * one sendmsg; the kernel cuts buffer into datagrams of segment_size (UDP
 * GSO) when it holds more than one. */
static PyObject *fw_send_gso(PyObject *mod, PyObject *args) {
    int fd;
    Py_buffer b;
    Py_ssize_t seg;
    PyObject *addr, *tos;
    if (!PyArg_ParseTuple(args, "iy*nOO", &fd, &b, &seg, &addr, &tos)) return NULL;
    PyObject *out = NULL;
    struct sockaddr_storage ss;
    socklen_t sl;
    if (parse_sockaddr(addr, &ss, &sl) < 0) goto done;
    union { char buf[2 * CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl;
    memset(&ctl, 0, sizeof ctl);
    struct iovec iov = {b.buf, (size_t)b.len};
    struct msghdr m = {0};
    m.msg_name = &ss;
    m.msg_namelen = sl;
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = ctl.buf;
    size_t cl = 0;
    struct cmsghdr *c = (struct cmsghdr *)ctl.buf;
    if (seg > 0 && seg < b.len) {
        c->cmsg_level = SOL_UDP;
        c->cmsg_type = UDP_SEGMENT;
        c->cmsg_len = CMSG_LEN(sizeof(uint16_t));
        uint16_t s = (uint16_t)seg;
        memcpy(CMSG_DATA(c), &s, sizeof s);
        cl += CMSG_SPACE(sizeof(uint16_t));
        c = (struct cmsghdr *)(ctl.buf + cl);
    }
    if (tos != Py_None) {
        int t = (int)PyLong_AsLong(tos);
        if (t == -1 && PyErr_Occurred()) goto done;
        if (ss.ss_family == AF_INET6) {
            c->cmsg_level = IPPROTO_IPV6;
            c->cmsg_type = IPV6_TCLASS;
        } else {
            c->cmsg_level = IPPROTO_IP;
            c->cmsg_type = IP_TOS;
        }
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &t, sizeof t);
        cl += CMSG_SPACE(sizeof(int));
    }
    m.msg_controllen = cl;
    if (cl == 0) m.msg_control = NULL;
    ssize_t n;
    Py_BEGIN_ALLOW_THREADS
    n = sendmsg(fd, &m, 0);
    Py_END_ALLOW_THREADS
    if (n < 0)
        PyErr_SetFromErrno(PyExc_OSError);
    else
        out = PyLong_FromSsize_t(n);
done:
    PyBuffer_Release(&b);
    return out;
}

/* -- benchmark floors ---------------------------------------------------------------- */

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

/* _bench_bare_evp(n, payload_len) -> ns for n x (one AES-GCM seal of payload_len
 * bytes with a 68-byte AAD + one open of it), keyed contexts, IV-only re-init:
 * the floor any codec of these bytes pays. */
static PyObject *fw_bench_bare_evp(PyObject *mod, PyObject *args) {
    long long n;
    Py_ssize_t plen;
    if (!PyArg_ParseTuple(args, "Ln", &n, &plen)) return NULL;
    if (plen < 0 || plen > MAX_PAYLOAD || n < 1) {
        PyErr_SetString(PyExc_ValueError, "n >= 1, payload_len 0 .. 65535");
        return NULL;
    }
    uint8_t key[32], nonce[NONCE_LEN] = {0}, aad[DATA_CUT];
    for (int i = 0; i < 32; i++) key[i] = (uint8_t)i;
    memset(aad, 0x5a, sizeof aad);
    uint8_t *pt = PyMem_Malloc(plen + 1), *ct = PyMem_Malloc(plen + 1), *back = PyMem_Malloc(plen + 1);
    EVP_CIPHER_CTX *e = EVP_CIPHER_CTX_new(), *d = EVP_CIPHER_CTX_new();
    PyObject *out = NULL;
    if (!pt || !ct || !back || !e || !d) {
        PyErr_NoMemory();
        goto done;
    }
    memset(pt, 0xa5, plen + 1);
    EVP_EncryptInit_ex(e, EVP_aes_256_gcm(), NULL, key, NULL);
    EVP_DecryptInit_ex(d, EVP_aes_256_gcm(), NULL, key, NULL);
    uint8_t tag[TAG_LEN];
    int bad = 0;
    long long t0 = now_ns();
    for (long long i = 0; i < n; i++) {
        put64(nonce + 4, (uint64_t)i);
        gcm_seal(e, nonce, aad, DATA_CUT, pt, (int)plen, ct, tag);
        bad |= !gcm_open(d, nonce, aad, DATA_CUT, ct, (int)plen, tag, back);
    }
    long long t1 = now_ns();
    if (bad) {
        PyErr_SetString(PyExc_RuntimeError, "bare EVP round trip failed");
        goto done;
    }
    out = PyLong_FromLongLong(t1 - t0);
done:
    PyMem_Free(pt);
    PyMem_Free(ct);
    PyMem_Free(back);
    EVP_CIPHER_CTX_free(e);
    EVP_CIPHER_CTX_free(d);
    return out;
}

/* _bench_fast(sealer, opener, n, payload) -> ns for n x (seal a DATA packet
 * with the sealer's own code + open it with the opener's), no Python objects
 * per packet: the extension's floor. The opener must accept the sealer's
 * counters (a fresh replay window at least n wide). */
static PyObject *fw_bench_fast(PyObject *mod, PyObject *args) {
    SealerObject *s;
    OpenerObject *o;
    long long n;
    Py_buffer pb;
    if (!PyArg_ParseTuple(args, "O!O!Ly*", &SealerType, &s, &OpenerType, &o, &n, &pb))
        return NULL;
    PyObject *out = NULL;
    if (!s->ready || !opener_ready(o) || pb.len > MAX_PAYLOAD || n < 1 ||
        s->plaintext != o->plaintext || check_dcid(s) < 0 ||
        check_epoch(s) < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "n >= 1, payload <= 65535, matching modes");
        goto done;
    }
    Py_ssize_t len = sealed_len(s, pb.len);
    uint8_t *wire = PyMem_Malloc(len), *pt = PyMem_Malloc(len);
    if (!wire || !pt) {
        PyMem_Free(wire);
        PyMem_Free(pt);
        PyErr_NoMemory();
        goto done;
    }
    DataFields f = {1000, 42, 1, 7, 0, (uint64_t)pb.len, 123456, s->plaintext ? PLAINTEXT_FLAG : 0};
    int bad = 0;
    long long t0 = now_ns();
    for (long long i = 0; i < n; i++) {
        uint64_t ec;
        OpenInfo info;
        if (next_counter(s, &ec) < 0 || seal_into(s, ec, &f, pb.buf, pb.len, wire) < 0) {
            bad = -1;
            break;
        }
        bad |= open_core(o, wire, len, pt, &info) != OPEN_OK;
    }
    long long t1 = now_ns();
    PyMem_Free(wire);
    PyMem_Free(pt);
    if (bad < 0) goto done;
    if (bad) {
        PyErr_SetString(PyExc_RuntimeError, "fast round trip failed (replay window too small?)");
        goto done;
    }
    out = PyLong_FromLongLong(t1 - t0);
done:
    PyBuffer_Release(&pb);
    return out;
}

/* timerfd_settime(fd, deadline_ns[, interval_ns]): the I/O layer's one deadline
   (transport/timerfd.py), absolute on CLOCK_MONOTONIC, then every interval_ns if given;
   0 disarms. A ctypes call is ~2x dearer, and a paced sender re-arms per pass. */
static PyObject *fw_timerfd_settime(PyObject *self, PyObject *args) {
    int fd;
    long long ns, every = 0;
    if (!PyArg_ParseTuple(args, "iL|L", &fd, &ns, &every)) return NULL;
    struct itimerspec its;
    memset(&its, 0, sizeof its);
    if (ns > 0) {
        its.it_value.tv_sec = (time_t)(ns / 1000000000LL);
        its.it_value.tv_nsec = (long)(ns % 1000000000LL);
        if (every > 0) {
            its.it_interval.tv_sec = (time_t)(every / 1000000000LL);
            its.it_interval.tv_nsec = (long)(every % 1000000000LL);
        }
    }
    if (timerfd_settime(fd, TFD_TIMER_ABSTIME, &its, NULL) != 0)
        return PyErr_SetFromErrno(PyExc_OSError);
    Py_RETURN_NONE;
}

/* -- module -------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"drain", fw_drain, METH_VARARGS,
     "drain(fd, buf, slot) -> [(nbytes, segment_size, tos, address, timestamp_ns)]"},
    {"send_gso", fw_send_gso, METH_VARARGS,
     "send_gso(fd, buffer, segment_size, sockaddr, tos_or_None) -> bytes sent"},
    {"timerfd_settime", fw_timerfd_settime, METH_VARARGS,
     "timerfd_settime(fd, deadline_ns[, interval_ns]) -> None (absolute, CLOCK_MONOTONIC; 0 disarms)"},
    {"place_slices", fw_place_slices, METH_VARARGS,
     "place_slices(receiver, opener, datagrams, start, plane, ce, now) -> (next, kind, item, opened)"},
    {"data_run", fw_data_run, METH_VARARGS,
     "data_run(datagrams, start) -> (cid, end): the run of DATA for one connection at start"},
    {"_bench_bare_evp", fw_bench_bare_evp, METH_VARARGS,
     "_bench_bare_evp(n, payload_len) -> ns for n bare EVP seal+open round trips"},
    {"_bench_fast", fw_bench_fast, METH_VARARGS,
     "_bench_fast(sealer, opener, n, payload) -> ns for n DATA seal+open in C"},
    {NULL}};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "wire._fastwire",
    "Compiled fast path of Braid's wire codec (see wire/codec.py for the reference).", -1,
    module_methods,
};

static PyObject *import_attr(const char *mod, const char *name) {
    PyObject *m = PyImport_ImportModule(mod);
    if (m == NULL) return NULL;
    PyObject *a = PyObject_GetAttrString(m, name);
    Py_DECREF(m);
    return a;
}

PyMODINIT_FUNC PyInit__fastwire(void) {
    WireError = import_attr("wire.errors", "WireError");
    StructError = WireError ? import_attr("struct", "error") : NULL;
    InvalidTag = StructError ? import_attr("cryptography.exceptions", "InvalidTag") : NULL;
    Zero = InvalidTag ? PyLong_FromLong(0) : NULL;
    if (Zero == NULL || rx_init_names() < 0) return NULL;
    PyTypeObject *types[] = {&AeadType, &ReplayType, &SealerType, &OpenerType};
    for (int i = 0; i < 4; i++)
        if (PyType_Ready(types[i]) < 0) return NULL;
    PyObject *m = PyModule_Create(&moduledef);
    if (m == NULL) return NULL;
    const char *names[] = {"AESGCM", "ReplayWindow", "SealerCore", "OpenerCore"};
    for (int i = 0; i < 4; i++) {
        Py_INCREF(types[i]);
        if (PyModule_AddObject(m, names[i], (PyObject *)types[i]) < 0) {
            Py_DECREF(types[i]);
            Py_DECREF(m);
            return NULL;
        }
    }
    if (PyModule_AddIntConstant(m, "DRAIN_MAX", DRAIN_MAX) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
