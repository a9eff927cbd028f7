#include "xor.h"

#include <pthread.h>
#include <string.h>

#include "error.h"
#include "gorilla.h"

int pt_xor_encode(pt_arena *a, const int64_t *t, const double *v, size_t n, pt_slice *out)
{
    size_t cap = 2 + pt_gorilla_max_bytes(n);
    uint8_t *buf = pt_arena_calloc(a, cap);
    if (!buf)
        return PT_ENOMEM;
    buf[0] = (uint8_t)(n >> 8);
    buf[1] = (uint8_t)n;
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, buf + 2);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        memcpy(&bits, &v[i], 8);
        pt_gorilla_enc_add(&e, t[i], bits);
    }
    *out = (pt_slice){buf, 2 + pt_gorilla_enc_len(&e)};
    return 0;
}

long pt_xor_decode(pt_slice chunk, int64_t *t, double *v, size_t cap)
{
    if (chunk.n < 2)
        return PT_EBADREQ;
    size_t n = (size_t)chunk.p[0] << 8 | chunk.p[1];
    if (n > cap)
        return PT_EBADREQ;
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, chunk.p + 2, chunk.n - 2);
    for (size_t i = 0; i < n; i++) {
        uint64_t bits;
        if (pt_gorilla_dec_next(&d, &t[i], &bits))
            return PT_EBADREQ;
        memcpy(&v[i], &bits, 8);
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
