#include "xor.h"

#include <pthread.h>
#include <string.h>

#include "error.h"

/* ---- bit writer / reader, MSB first ---- */

typedef struct bw {
    uint8_t *p;
    size_t cap;
    size_t bits; /* bits written */
} bw;

static void put_bit(bw *w, int bit)
{
    size_t byte = w->bits >> 3;
    if (bit)
        w->p[byte] |= (uint8_t)(0x80u >> (w->bits & 7));
    w->bits++;
}

static void put_bits(bw *w, uint64_t v, int n)
{
    for (int i = n - 1; i >= 0; i--)
        put_bit(w, (int)((v >> i) & 1));
}

typedef struct br {
    const uint8_t *p;
    size_t nbits;
    size_t pos;
} br;

static int get_bit(br *r, int *bit)
{
    if (r->pos >= r->nbits)
        return -1;
    *bit = (r->p[r->pos >> 3] >> (7 - (r->pos & 7))) & 1;
    r->pos++;
    return 0;
}

static int get_bits(br *r, int n, uint64_t *v)
{
    uint64_t x = 0;
    for (int i = 0; i < n; i++) {
        int b;
        if (get_bit(r, &b))
            return -1;
        x = x << 1 | (uint64_t)b;
    }
    *v = x;
    return 0;
}

static void put_uvarint(bw *w, uint64_t v)
{
    while (v >= 0x80) {
        put_bits(w, (v & 0x7f) | 0x80, 8);
        v >>= 7;
    }
    put_bits(w, v, 8);
}

static int get_uvarint(br *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 70; shift += 7) {
        uint64_t byte;
        if (get_bits(r, 8, &byte))
            return -1;
        x |= (byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static uint64_t bits_of(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

/* The value part shared by samples 1..n-1. */
static void put_value(bw *w, uint64_t cur, uint64_t prev, int *leading, int *trailing)
{
    uint64_t delta = cur ^ prev;
    if (delta == 0) {
        put_bit(w, 0);
        return;
    }
    put_bit(w, 1);
    int lz = __builtin_clzll(delta), tz = __builtin_ctzll(delta);
    if (lz > 31)
        lz = 31;
    if (*leading != 0xff && lz >= *leading && tz >= *trailing) {
        put_bit(w, 0);
        put_bits(w, delta >> *trailing, 64 - *leading - *trailing);
        return;
    }
    *leading = lz;
    *trailing = tz;
    int sig = 64 - lz - tz;
    put_bit(w, 1);
    put_bits(w, (uint64_t)lz, 5);
    put_bits(w, (uint64_t)(sig == 64 ? 0 : sig), 6);
    put_bits(w, delta >> tz, sig);
}

int pt_xor_encode(pt_arena *a, const int64_t *t, const double *v, size_t n, pt_slice *out)
{
    /* Worst case per sample: 4+64 timestamp bits and 2+5+6+64 value bits. */
    size_t cap = 2 + 20 + n * 19 + 8;
    uint8_t *buf = pt_arena_calloc(a, cap);
    if (!buf)
        return PT_ENOMEM;
    bw w = {buf, cap, 0};
    put_bits(&w, (uint64_t)n, 16);
    int leading = 0xff, trailing = 0;
    int64_t tdelta = 0;
    for (size_t i = 0; i < n; i++) {
        if (i == 0) {
            /* zig-zag signed varint of t0, then the raw value bits */
            put_uvarint(&w, ((uint64_t)t[0] << 1) ^ (uint64_t)(t[0] >> 63));
            put_bits(&w, bits_of(v[0]), 64);
            continue;
        }
        if (i == 1) {
            tdelta = t[1] - t[0];
            put_uvarint(&w, (uint64_t)tdelta);
        } else {
            int64_t d = t[i] - t[i - 1];
            int64_t dod = d - tdelta;
            tdelta = d;
            if (dod == 0) {
                put_bit(&w, 0);
            } else if (dod >= -8191 && dod <= 8192) {
                put_bits(&w, 0x2, 2);
                put_bits(&w, (uint64_t)dod, 14);
            } else if (dod >= -65535 && dod <= 65536) {
                put_bits(&w, 0x6, 3);
                put_bits(&w, (uint64_t)dod, 17);
            } else if (dod >= -524287 && dod <= 524288) {
                put_bits(&w, 0xe, 4);
                put_bits(&w, (uint64_t)dod, 20);
            } else {
                put_bits(&w, 0xf, 4);
                put_bits(&w, (uint64_t)dod, 64);
            }
        }
        put_value(&w, bits_of(v[i]), bits_of(v[i - 1]), &leading, &trailing);
    }
    *out = (pt_slice){buf, (w.bits + 7) / 8};
    return 0;
}

long pt_xor_decode(pt_slice chunk, int64_t *t, double *v, size_t cap)
{
    br r = {chunk.p, chunk.n * 8, 0};
    uint64_t n, x;
    if (get_bits(&r, 16, &n) || n > cap)
        return PT_EBADREQ;
    int leading = 0, trailing = 0;
    int64_t tdelta = 0;
    uint64_t prev = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (i == 0) {
            if (get_uvarint(&r, &x) || get_bits(&r, 64, &prev))
                return PT_EBADREQ;
            t[0] = (int64_t)(x >> 1) ^ -(int64_t)(x & 1);
            memcpy(&v[0], &prev, 8);
            continue;
        }
        if (i == 1) {
            if (get_uvarint(&r, &x))
                return PT_EBADREQ;
            tdelta = (int64_t)x;
        } else {
            int prefix = 0, b;
            while (prefix < 4) {
                if (get_bit(&r, &b))
                    return PT_EBADREQ;
                if (!b)
                    break;
                prefix++;
            }
            static const int sizes[] = {0, 14, 17, 20, 64};
            int64_t dod = 0;
            if (prefix) {
                int sz = sizes[prefix];
                if (get_bits(&r, sz, &x))
                    return PT_EBADREQ;
                if (sz < 64 && x > (1ULL << (sz - 1)))
                    x -= 1ULL << sz;
                dod = (int64_t)x;
            }
            tdelta += dod;
        }
        t[i] = t[i - 1] + tdelta;
        int b;
        if (get_bit(&r, &b))
            return PT_EBADREQ;
        if (b) {
            if (get_bit(&r, &b))
                return PT_EBADREQ;
            if (b) {
                uint64_t lz, sig;
                if (get_bits(&r, 5, &lz) || get_bits(&r, 6, &sig))
                    return PT_EBADREQ;
                if (sig == 0)
                    sig = 64;
                if (lz + sig > 64)
                    return PT_EBADREQ;
                leading = (int)lz;
                trailing = 64 - (int)lz - (int)sig;
            }
            int sig = 64 - leading - trailing;
            if (get_bits(&r, sig, &x))
                return PT_EBADREQ;
            prev ^= sig == 64 ? x : x << trailing;
        }
        memcpy(&v[i], &prev, 8);
    }
    return (long)n;
}

/* Debian ships no CRC-32C library for C; the reflected Castagnoli table is 256 words. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t pt_crc32c(const uint8_t *p, size_t n)
{
    const uint32_t *table = crc_table;
    pthread_once(&crc_once, crc_init);
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}
