/* Shared by the translation units of wire._fastwire (see _fastwire.c). */
#ifndef BRAID_FASTWIRE_H
#define BRAID_FASTWIRE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
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
#define DRAIN_MAX 64

extern PyObject *WireError;    /* wire.errors.WireError */
extern PyObject *StructError;  /* struct.error: what the reference's packing raises */
extern PyObject *InvalidTag;   /* cryptography.exceptions.InvalidTag */
extern PyObject *Zero;         /* the int 0: default flags */
extern PyTypeObject AeadType, ReplayType, SealerType, OpenerType;

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

/* -- objects ------------------------------------------------------------------- */

typedef struct {
    PyObject_HEAD
    EVP_CIPHER_CTX *enc;
    EVP_CIPHER_CTX *dec;
} AeadObject;

typedef struct {
    PyObject_HEAD
    long long highest;
    long long size;
    long long *slots; /* slot c % size holds the counter c stored there, or -1 */
} ReplayObject;

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

typedef struct {
    PyObject_HEAD
    long long epoch;
    int plaintext;
    AeadObject *hdr;
    AeadObject *pay;
    ReplayObject *replay;
} OpenerObject;

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

static inline Py_ssize_t sealed_len(const SealerObject *self, Py_ssize_t plen) {
    return plen + DATA_CUT + (self->plaintext ? 0 : TAG_LEN);
}

/* -- functions shared between files ------------------------------------------- */

PyObject *wire_error_object(const char *reason, PyObject *detail);
int field_u64(PyObject *o, uint64_t max, uint64_t *out);
int attr_ll(PyObject *v, long long *out, const char *name);
int gcm_seal(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
    const uint8_t *pt, int ptlen, uint8_t *ct, uint8_t *tag);
int gcm_open(EVP_CIPHER_CTX *c, const uint8_t *iv, const uint8_t *aad, int aadlen,
    const uint8_t *ct, int ctlen, const uint8_t *tag, uint8_t *pt);
PyObject *aead_new(PyObject *key);
PyObject *replay_error_object(int why, long long counter);
int load_keys(PyObject *keys, PyObject **hdr, PyObject **pay);
PyObject *or_none(PyObject *o);
int next_counter(SealerObject *self, uint64_t *ec);
int check_epoch(SealerObject *self);
int check_dcid(SealerObject *self);
int seal_into(SealerObject *self, uint64_t ec, const DataFields *f, const uint8_t *payload,
    Py_ssize_t plen, uint8_t *out);
int open_core(OpenerObject *self, const uint8_t *d, Py_ssize_t len, uint8_t *pt,
    OpenInfo *info);
int opener_ready(OpenerObject *self);
PyObject *open_error(OpenerObject *self, int status, const OpenInfo *info);
PyObject *fields_tuple(const uint8_t *d);
PyObject *fw_place_slices(PyObject *m, PyObject *args);
PyObject *fw_data_run(PyObject *m, PyObject *args);
int rx_init_names(void);

#endif
