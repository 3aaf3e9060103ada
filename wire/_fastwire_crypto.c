/* wire._fastwire: AES-GCM with keyed OpenSSL contexts, the replay window, connection keys. */
#include "_fastwire.h"

/* -- AES-GCM with keyed contexts ------------------------------------------- */



int gcm_seal(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
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
int gcm_open(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
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

PyObject *aead_new(PyObject *key) {
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

PyTypeObject AeadType = {
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


PyObject *replay_error_object(int why, long long counter) {
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

PyTypeObject ReplayType = {
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
int load_keys(PyObject *keys, PyObject **hdr, PyObject **pay) {
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

PyObject *or_none(PyObject *o) {
    PyObject *r = o ? o : Py_None;
    Py_INCREF(r);
    return r;
}
