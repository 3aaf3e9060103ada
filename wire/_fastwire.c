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
 * Layout (wire/SPEC.md): header (52 bytes for DATA) | header tag (16) |
 * payload ciphertext | payload tag (16).
 *   header tag = AES-GMAC(header key, nonce, aad = header)
 *   payload    = AES-GCM(payload key, nonce, payload, aad = header + header tag)
 *   nonce      = 4 zero bytes | epoch (16 bits) | counter (48 bits)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define VERSION 1
#define T_DATA 3
#define DATA_WORDS 13
#define DATA_HLEN 52               /* DATA_WORDS * 4 */
#define TAG_LEN 16
#define DATA_CUT (DATA_HLEN + TAG_LEN)
#define OVERHEAD (DATA_CUT + TAG_LEN) /* bytes a sealed DATA adds to its payload */
#define PLAINTEXT_FLAG 0x80
#define COUNTER_MAX ((1ULL << 48) - 1)
#define NONCE_LEN 12
#define MAX_PAYLOAD 0xFFFF         /* the 16-bit Payload Length field */

static PyObject *WireError;    /* wire.errors.WireError */
static PyObject *StructError;  /* struct.error: what the reference's packing raises */
static PyObject *InvalidTag;   /* cryptography.exceptions.InvalidTag */
static PyObject *Zero;         /* the int 0: default flags */

/* -- bytes -------------------------------------------------------------------- */

static inline void put16(uint8_t *p, uint32_t v) { p[0] = v >> 8; p[1] = v; }
static inline void put32(uint8_t *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}
static inline void put64(uint8_t *p, uint64_t v) { put32(p, v >> 32); put32(p + 4, (uint32_t)v); }
static inline uint32_t get16(const uint8_t *p) { return ((uint32_t)p[0] << 8) | p[1]; }
static inline uint32_t get32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static inline uint64_t get64(const uint8_t *p) {
    return ((uint64_t)get32(p) << 32) | get32(p + 4);
}

static PyObject *wire_error_object(const char *reason, PyObject *detail) {
    if (detail == NULL) return NULL;
    PyObject *exc = PyObject_CallFunction(WireError, "sO", reason, detail);
    Py_DECREF(detail);
    return exc;
}

/* An unsigned field as struct.pack would take it: an int within [0, max],
 * else struct.error (the reference packs with struct). */
static int field_u64(PyObject *o, uint64_t max, uint64_t *out) {
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
static int attr_ll(PyObject *v, long long *out, const char *name) {
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

/* -- AES-GCM with keyed contexts ------------------------------------------- */

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *enc;
    EVP_CIPHER_CTX *dec;
} AeadObject;

static PyTypeObject AeadType;

static int gcm_seal(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
                    const uint8_t *pt, int ptlen, uint8_t *ct, uint8_t *tag) {
    int outl;
    uint8_t scratch[16];
    if (!EVP_EncryptInit_ex(c, NULL, NULL, NULL, iv)) return -1;
    if (aadlen > 0 && !EVP_EncryptUpdate(c, NULL, &outl, aad, aadlen)) return -1;
    if (ptlen > 0 && !EVP_EncryptUpdate(c, ct, &outl, pt, ptlen)) return -1;
    if (!EVP_EncryptFinal_ex(c, scratch, &outl)) return -1;
    if (!EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag)) return -1;
    return 0;
}

/* 1: authentic; 0: the tag does not match. */
static int gcm_open(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
                    const uint8_t *ct, int ctlen, const uint8_t *tag, uint8_t *pt) {
    int outl;
    uint8_t scratch[16];
    if (!EVP_DecryptInit_ex(c, NULL, NULL, NULL, iv)) return 0;
    if (aadlen > 0 && !EVP_DecryptUpdate(c, NULL, &outl, aad, aadlen)) return 0;
    if (ctlen > 0 && !EVP_DecryptUpdate(c, pt, &outl, ct, ctlen)) return 0;
    if (!EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_TAG, TAG_LEN, (void *)tag)) return 0;
    return EVP_DecryptFinal_ex(c, scratch, &outl) > 0;
}

static const EVP_CIPHER *gcm_cipher(Py_ssize_t keylen) {
    switch (keylen) {
    case 16: return EVP_aes_128_gcm();
    case 24: return EVP_aes_192_gcm();
    case 32: return EVP_aes_256_gcm();
    default: return NULL;
    }
}

static int aead_key(AeadObject *self, const uint8_t *key, Py_ssize_t keylen) {
    const EVP_CIPHER *cipher = gcm_cipher(keylen);
    if (cipher == NULL) {
        PyErr_SetString(PyExc_ValueError, "AESGCM key must be 128, 192, or 256 bits.");
        return -1;
    }
    if (self->enc == NULL) self->enc = EVP_CIPHER_CTX_new();
    if (self->dec == NULL) self->dec = EVP_CIPHER_CTX_new();
    if (self->enc == NULL || self->dec == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (!EVP_EncryptInit_ex(self->enc, cipher, NULL, key, NULL) ||
        !EVP_DecryptInit_ex(self->dec, cipher, NULL, key, NULL)) {
        PyErr_SetString(PyExc_RuntimeError, "OpenSSL refused the AES-GCM key");
        return -1;
    }
    return 0;
}

static int Aead_init(AeadObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"key", NULL};
    Py_buffer key;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "y*", kwlist, &key)) return -1;
    int r = aead_key(self, key.buf, key.len);
    PyBuffer_Release(&key);
    return r;
}

static void Aead_dealloc(AeadObject *self) {
    if (self->enc) EVP_CIPHER_CTX_free(self->enc);
    if (self->dec) EVP_CIPHER_CTX_free(self->dec);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *aead_new(PyObject *key) {
    Py_buffer b;
    if (PyObject_GetBuffer(key, &b, PyBUF_SIMPLE) < 0) return NULL;
    AeadObject *a = PyObject_New(AeadObject, &AeadType);
    if (a == NULL) {
        PyBuffer_Release(&b);
        return NULL;
    }
    a->enc = a->dec = NULL;
    int r = aead_key(a, b.buf, b.len);
    PyBuffer_Release(&b);
    if (r < 0) {
        Py_DECREF(a);
        return NULL;
    }
    return (PyObject *)a;
}

/* AESGCM.encrypt / decrypt with cryptography's signature (12-byte nonces only):
 * the generic (control-packet) path of the codec uses them unchanged. */
static int aead_args(PyObject *const *args, Py_ssize_t nargs, Py_buffer *nonce, Py_buffer *data,
                     Py_buffer *aad) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "expected (nonce, data, associated_data)");
        return -1;
    }
    if (PyObject_GetBuffer(args[0], nonce, PyBUF_SIMPLE) < 0) return -1;
    if (nonce->len != NONCE_LEN) {
        PyBuffer_Release(nonce);
        PyErr_SetString(PyExc_ValueError, "this AESGCM takes 12-byte nonces only");
        return -1;
    }
    if (PyObject_GetBuffer(args[1], data, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(nonce);
        return -1;
    }
    aad->buf = NULL;
    aad->obj = NULL;
    aad->len = 0;
    if (args[2] != Py_None && PyObject_GetBuffer(args[2], aad, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(nonce);
        PyBuffer_Release(data);
        return -1;
    }
    if (data->len > INT_MAX - TAG_LEN || aad->len > INT_MAX) {
        PyBuffer_Release(nonce);
        PyBuffer_Release(data);
        if (aad->obj) PyBuffer_Release(aad);
        PyErr_SetString(PyExc_OverflowError, "data or associated_data too long");
        return -1;
    }
    return 0;
}

static void aead_release(Py_buffer *nonce, Py_buffer *data, Py_buffer *aad) {
    PyBuffer_Release(nonce);
    PyBuffer_Release(data);
    if (aad->obj) PyBuffer_Release(aad);
}

static PyObject *Aead_encrypt(AeadObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer nonce, data, aad;
    if (aead_args(args, nargs, &nonce, &data, &aad) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, data.len + TAG_LEN);
    if (out != NULL) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        if (gcm_seal(self->enc, nonce.buf, aad.buf, (int)aad.len, data.buf, (int)data.len, o,
                     o + data.len) < 0) {
            Py_CLEAR(out);
            PyErr_SetString(PyExc_RuntimeError, "AES-GCM seal failed");
        }
    }
    aead_release(&nonce, &data, &aad);
    return out;
}

static PyObject *Aead_decrypt(AeadObject *self, PyObject *const *args, Py_ssize_t nargs) {
    Py_buffer nonce, data, aad;
    if (aead_args(args, nargs, &nonce, &data, &aad) < 0) return NULL;
    PyObject *out = NULL;
    if (data.len < TAG_LEN) {
        PyErr_SetNone(InvalidTag);
    } else {
        Py_ssize_t n = data.len - TAG_LEN;
        out = PyBytes_FromStringAndSize(NULL, n);
        if (out != NULL) {
            const uint8_t *d = data.buf;
            if (!gcm_open(self->dec, nonce.buf, aad.buf, (int)aad.len, d, (int)n, d + n,
                          (uint8_t *)PyBytes_AS_STRING(out))) {
                Py_CLEAR(out);
                PyErr_SetNone(InvalidTag);
            }
        }
    }
    aead_release(&nonce, &data, &aad);
    return out;
}

static PyMethodDef Aead_methods[] = {
    {"encrypt", (PyCFunction)(void (*)(void))Aead_encrypt, METH_FASTCALL,
     "encrypt(nonce, data, associated_data) -> ciphertext + tag"},
    {"decrypt", (PyCFunction)(void (*)(void))Aead_decrypt, METH_FASTCALL,
     "decrypt(nonce, data, associated_data) -> plaintext; raises InvalidTag"},
    {NULL}};

static PyTypeObject AeadType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wire._fastwire.AESGCM",
    .tp_basicsize = sizeof(AeadObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "AES-GCM under one key, with keyed OpenSSL contexts (cryptography's API).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Aead_init,
    .tp_dealloc = (destructor)Aead_dealloc,
    .tp_methods = Aead_methods,
};

/* -- replay window ------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    long long highest;
    long long size;
    long long *slots; /* slot c % size holds the counter c stored there, or -1 */
} ReplayObject;

static PyTypeObject ReplayType;

static int Replay_init(ReplayObject *self, PyObject *args, PyObject *kw) {
    static char *kwlist[] = {"size", NULL};
    long long size = 8192;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|L", kwlist, &size)) return -1;
    if (size <= 0 || size > (1LL << 30)) {
        PyErr_SetString(PyExc_ValueError, "replay window size must be in 1 .. 2**30");
        return -1;
    }
    long long *slots = PyMem_Malloc(sizeof(long long) * (size_t)size);
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (long long i = 0; i < size; i++) slots[i] = -1;
    PyMem_Free(self->slots);
    self->slots = slots;
    self->size = size;
    self->highest = -1;
    return 0;
}

static void Replay_dealloc(ReplayObject *self) {
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* 0: fresh; 1: older than the window; 2: seen before. The caller checked
 * counter <= highest (a counter above it is fresh). */
static inline int replay_seen(const ReplayObject *r, long long counter) {
    if (r->highest - counter >= r->size) return 1;
    if (r->slots[counter % r->size] == counter) return 2;
    return 0;
}

static inline void replay_commit(ReplayObject *r, long long counter) {
    r->slots[counter % r->size] = counter;
    if (counter > r->highest) r->highest = counter;
}

static PyObject *replay_error_object(int why, long long counter) {
    return wire_error_object(
        "replay", why == 1 ? PyUnicode_FromFormat("counter %lld is older than the window", counter)
                           : PyUnicode_FromFormat("counter %lld seen before", counter));
}

static int replay_counter(ReplayObject *self, PyObject *arg, long long *c) {
    if (self->slots == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "ReplayWindow not initialised");
        return -1;
    }
    *c = PyLong_AsLongLong(arg);
    if (*c == -1 && PyErr_Occurred()) return -1;
    if (*c < 0) {
        PyErr_SetString(PyExc_ValueError, "counters are not negative");
        return -1;
    }
    return 0;
}

static PyObject *Replay_check(ReplayObject *self, PyObject *arg) {
    long long c;
    if (replay_counter(self, arg, &c) < 0) return NULL;
    if (c > self->highest) Py_RETURN_NONE;
    int why = replay_seen(self, c);
    if (why) {
        PyObject *exc = replay_error_object(why, c);
        if (exc != NULL) {
            PyErr_SetObject(WireError, exc);
            Py_DECREF(exc);
        }
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *Replay_commit(ReplayObject *self, PyObject *arg) {
    long long c;
    if (replay_counter(self, arg, &c) < 0) return NULL;
    replay_commit(self, c);
    Py_RETURN_NONE;
}

static PyObject *Replay_get_highest(ReplayObject *self, void *closure) {
    return PyLong_FromLongLong(self->highest);
}

static int Replay_set_highest(ReplayObject *self, PyObject *v, void *closure) {
    return attr_ll(v, &self->highest, "highest");
}

static PyObject *Replay_get_size(ReplayObject *self, void *closure) {
    return PyLong_FromLongLong(self->size);
}

static PyMethodDef Replay_methods[] = {
    {"check", (PyCFunction)Replay_check, METH_O,
     "check(counter): WireError('replay') if too old or already accepted"},
    {"commit", (PyCFunction)Replay_commit, METH_O, "commit(counter): remember it as accepted"},
    {NULL}};

static PyGetSetDef Replay_getset[] = {
    {"highest", (getter)Replay_get_highest, (setter)Replay_set_highest,
     "largest counter accepted so far (-1: none)", NULL},
    {"size", (getter)Replay_get_size, NULL, "window width in counters", NULL},
    {NULL}};

static PyTypeObject ReplayType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "wire._fastwire.ReplayWindow",
    .tp_basicsize = sizeof(ReplayObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Sliding window over 48-bit counters (wire.codec.PyReplayWindow's twin).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Replay_init,
    .tp_dealloc = (destructor)Replay_dealloc,
    .tp_methods = Replay_methods,
    .tp_getset = Replay_getset,
};

/* -- keys ------------------------------------------------------------------------ */

/* keys: a DirectionKeys (attributes ``header`` and ``payload``) or None. */
static int load_keys(PyObject *keys, PyObject **hdr, PyObject **pay) {
    *hdr = *pay = NULL;
    if (keys == Py_None) return 0;
    PyObject *h = PyObject_GetAttrString(keys, "header");
    if (h == NULL) return -1;
    PyObject *p = PyObject_GetAttrString(keys, "payload");
    if (p == NULL) {
        Py_DECREF(h);
        return -1;
    }
    *hdr = aead_new(h);
    *pay = *hdr == NULL ? NULL : aead_new(p);
    Py_DECREF(h);
    Py_DECREF(p);
    if (*pay == NULL) {
        Py_CLEAR(*hdr);
        return -1;
    }
    return 0;
}

static PyObject *or_none(PyObject *o) {
    PyObject *r = o ? o : Py_None;
    Py_INCREF(r);
    return r;
}

/* -- sealer ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    long long counter;
    long long dcid;
    long long epoch;
    int plaintext;
    int ready;       /* __init__ ran: the mode and keys are set */
    AeadObject *hdr; /* NULL in plaintext mode */
    AeadObject *pay;
} SealerObject;

typedef struct {
    uint64_t psn, ev, plane, msg_id, msg_offset, msg_len, timestamp;
    int flags; /* the wire flags byte, PLAINTEXT already applied */
} DataFields;

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
static int next_counter(SealerObject *self, uint64_t *ec) {
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
static int check_epoch(SealerObject *self) {
    if (self->epoch < 0 || self->epoch > 0xFFFF) {
        PyErr_SetString(StructError, "'Q' format requires 0 <= number <= 18446744073709551615");
        return -1;
    }
    return 0;
}

static int check_dcid(SealerObject *self) {
    if (self->dcid < 0 || self->dcid > 0xFFFFFFFFLL) {
        PyErr_SetString(StructError, "'I' format requires 0 <= number <= 4294967295");
        return -1;
    }
    return 0;
}

static inline Py_ssize_t sealed_len(const SealerObject *self, Py_ssize_t plen) {
    return plen + DATA_CUT + (self->plaintext ? 0 : TAG_LEN);
}

/* One DATA datagram into out (sealed_len bytes). */
static int seal_into(SealerObject *self, uint64_t ec, const DataFields *f, const uint8_t *payload,
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

static PyTypeObject SealerType = {
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

/* -- opener ------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    long long epoch;
    int plaintext;
    AeadObject *hdr;
    AeadObject *pay;
    ReplayObject *replay;
} OpenerObject;

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

enum {
    OPEN_OK = 0,
    OPEN_NOT_FAST = 1, /* not DATA without extensions: the generic path's job */
    OPEN_EPOCH, OPEN_PLAINTEXT, OPEN_REPLAY_OLD, OPEN_REPLAY_SEEN, OPEN_PAYLOAD_LEN, OPEN_TAG,
    OPEN_FIELD,
};

typedef struct {
    uint64_t ec;
    Py_ssize_t extra;
    uint32_t plen;
    int trimmed;
} OpenInfo;

/* The checks of PyOpener.open_data_untrusted, in its order; on OPEN_OK the
 * plaintext (when not trimmed) is in pt (extra bytes of room) and the counter
 * is committed. */
static int open_core(OpenerObject *self, const uint8_t *d, Py_ssize_t len, uint8_t *pt,
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
static PyObject *open_error(OpenerObject *self, int status, const OpenInfo *info) {
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

static PyObject *fields_tuple(const uint8_t *d) {
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

static int opener_ready(OpenerObject *self) {
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

static PyTypeObject OpenerType = {
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

/* -- socket batches --------------------------------------------------------------- */

#define DRAIN_MAX 64
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

/* -- module -------------------------------------------------------------------------------- */

static PyMethodDef module_methods[] = {
    {"drain", fw_drain, METH_VARARGS,
     "drain(fd, buf, slot) -> [(nbytes, segment_size, tos, address, timestamp_ns)]"},
    {"send_gso", fw_send_gso, METH_VARARGS,
     "send_gso(fd, buffer, segment_size, sockaddr, tos_or_None) -> bytes sent"},
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
    if (Zero == NULL) return NULL;
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
