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

/* Debian ships no CRC-32C library for C: the x86-64 instruction (SSE 4.2) when the CPU has
 * it, else the reflected Castagnoli table of 256 words. Both take and give the register
 * without the initial and final inversion. */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static uint32_t crc_sw(uint32_t c, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        c = crc_table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c;
}

static uint32_t (*crc_update)(uint32_t c, const uint8_t *p, size_t n) = crc_sw;

#if defined(__x86_64__)
#include <nmmintrin.h>

/* Eight bytes an instruction; the unaligned head and the tail a byte at a time. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const uint8_t *p, size_t n)
{
    for (; n && ((uintptr_t)p & 7); n--)
        c = _mm_crc32_u8(c, *p++);
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c64 = _mm_crc32_u64(c64, v);
    }
    c = (uint32_t)c64;
    for (; n; n--)
        c = _mm_crc32_u8(c, *p++);
    return c;
}
#endif

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
        crc_table[i] = c;
    }
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2"))
        crc_update = crc_hw;
#endif
}

uint32_t pt_crc32c(const uint8_t *p, size_t n)
{
    pthread_once(&crc_once, crc_init);
    return crc_update(0xffffffffu, p, n) ^ 0xffffffffu;
}
