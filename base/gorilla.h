/*
 * The Gorilla / XOR sample stream (Pelkonen et al., VLDB 2015) in the bit layout of
 * Prometheus' XOR chunks (tsdb/chunkenc), without their 2-byte sample count: per sample a
 * timestamp (the first as a zig-zag varint, the second as a varint delta, the rest as
 * delta-of-delta in 1, 16, 20, 24 or 68 bits) and a 64-bit value (the first raw, the rest
 * XOR'ed with the previous one: 1 bit when equal, else its meaningful bits). Bits are
 * written MSB first; the last byte is zero-padded.
 *
 * Values are opaque 64-bit patterns, so every float64 (NaN payloads, -0, denormals) comes
 * back bit-exact. Timestamp arithmetic wraps modulo 2^64: any int64 sequence round-trips,
 * and a decoder fed garbage computes garbage, never undefined behaviour. Neither side
 * allocates; the encoder writes into a zeroed buffer the caller sized with
 * pt_gorilla_max_bytes(), the decoder reads only the bytes it was given.
 * Used by the adapter (Prometheus chunks of streamed reads) and the embedded store
 * (its fmt 3 chunks).
 */
#ifndef PT_GORILLA_H
#define PT_GORILLA_H

#include <stddef.h>
#include <stdint.h>

/* Bytes n samples can take at most: the first sample 10 + 8, the second 10 + 10, every
 * other 68 + 77 bits; plus the padding byte. */
static inline size_t pt_gorilla_max_bytes(size_t n)
{
    return 38 + n * 19;
}

/* One XOR'ed value stream: the last value and the window (leading and trailing zero bits)
 * its last '11' form set. An encoder's starts with leading 0xff (no window yet); a
 * decoder's at zero. (The sample stream below keeps its own in v, leading, trailing.) */
typedef struct pt_gorilla_xor {
    uint64_t v;
    int leading, trailing;
} pt_gorilla_xor;

typedef struct pt_gorilla_enc {
    uint8_t *p; /* zeroed, pt_gorilla_max_bytes(samples) long */
    size_t bits;
    uint64_t n, t, tdelta, v;
    int leading, trailing; /* of the last value written with its window; leading 0xff: none */
} pt_gorilla_enc;

void pt_gorilla_enc_init(pt_gorilla_enc *e, uint8_t *zeroed);
void pt_gorilla_enc_add(pt_gorilla_enc *e, int64_t t, uint64_t v);

/* Bytes written so far, the padding byte included. */
static inline size_t pt_gorilla_enc_len(const pt_gorilla_enc *e)
{
    return (e->bits + 7) / 8;
}

typedef struct pt_gorilla_dec {
    const uint8_t *p;
    size_t nbits, pos;
    uint64_t n, t, tdelta, v;
    int leading, trailing;
} pt_gorilla_dec;

void pt_gorilla_dec_init(pt_gorilla_dec *d, const uint8_t *p, size_t len);
/* The next sample: 0, or -1 when the stream ends inside it or holds an impossible value
 * window. */
int pt_gorilla_dec_next(pt_gorilla_dec *d, int64_t *t, uint64_t *v);
/* 1 when what is left of the stream is the zero padding of its last byte, else 0. */
int pt_gorilla_dec_done(const pt_gorilla_dec *d);

/* The pieces, for other layouts on the same bit stream (Prometheus' histogram chunks,
 * base/hchunk.h). The encoder's buffer must have room, zeroed, for what is appended. */
void pt_gorilla_put_bits(pt_gorilla_enc *e, uint64_t v, int n); /* the low n (0..64) bits */
void pt_gorilla_put_xor(pt_gorilla_enc *e, pt_gorilla_xor *x, uint64_t v); /* 1 to 77 bits */
/* 0, or -1 when the stream ends first (nothing is read past it). */
int pt_gorilla_get_bits(pt_gorilla_dec *d, int n, uint64_t *v);
/* The next value of stream x into x->v: 0, or -1 (stream ends, impossible window). */
int pt_gorilla_get_xor(pt_gorilla_dec *d, pt_gorilla_xor *x);

#endif
