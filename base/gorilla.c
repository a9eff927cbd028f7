#include "gorilla.h"

#include "bytes.h"

/* ---- bits, MSB first, up to a byte at a time ---- */

/* Appends the low n (0..64) bits of v; the buffer is zeroed, so only set bits are or'ed. */
void pt_gorilla_put_bits(pt_gorilla_enc *e, uint64_t v, int n)
{
    while (n > 0) {
        int room = 8 - (int)(e->bits & 7);
        int take = n < room ? n : room;
        unsigned part = (unsigned)(v >> (n - take)) & ((1u << take) - 1);
        e->p[e->bits >> 3] |= (uint8_t)(part << (room - take));
        e->bits += (size_t)take;
        n -= take;
    }
}

static void put_uvarint(pt_gorilla_enc *e, uint64_t v)
{
    while (v >= 0x80) {
        pt_gorilla_put_bits(e, (v & 0x7f) | 0x80, 8);
        v >>= 7;
    }
    pt_gorilla_put_bits(e, v, 8);
}

/* Reads n (0..64) bits into *v; -1 when fewer are left. */
int pt_gorilla_get_bits(pt_gorilla_dec *d, int n, uint64_t *v)
{
    if ((size_t)n > d->nbits - d->pos)
        return -1;
    size_t at = d->pos >> 3;
    if (n > 0 && n <= 56 && at + 8 <= d->nbits / 8) {
        /* Eight bytes from the current one hold the next 57 bits at least: one load. */
        *v = (pt_get_be64(d->p + at) << (d->pos & 7)) >> (64 - n);
        d->pos += (size_t)n;
        return 0;
    }
    uint64_t x = 0;
    while (n > 0) {
        int room = 8 - (int)(d->pos & 7);
        int take = n < room ? n : room;
        unsigned byte = d->p[d->pos >> 3];
        x = x << take | ((byte >> (room - take)) & ((1u << take) - 1));
        d->pos += (size_t)take;
        n -= take;
    }
    *v = x;
    return 0;
}

static int get_uvarint(pt_gorilla_dec *d, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        uint64_t byte;
        if (pt_gorilla_get_bits(d, 8, &byte))
            return -1;
        x |= (byte & 0x7f) << shift;
        if (!(byte & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* ---- encoder ---- */

void pt_gorilla_enc_init(pt_gorilla_enc *e, uint8_t *zeroed)
{
    *e = (pt_gorilla_enc){.p = zeroed, .leading = 0xff};
}

void pt_gorilla_put_xor(pt_gorilla_enc *e, pt_gorilla_xor *x, uint64_t v)
{
    uint64_t delta = v ^ x->v;
    x->v = v;
    if (delta == 0) {
        pt_gorilla_put_bits(e, 0, 1);
        return;
    }
    int lz = __builtin_clzll(delta), tz = __builtin_ctzll(delta);
    if (lz > 31)
        lz = 31; /* 5 bits hold it */
    if (x->leading != 0xff && lz >= x->leading && tz >= x->trailing) {
        pt_gorilla_put_bits(e, 0x2, 2);
        pt_gorilla_put_bits(e, delta >> x->trailing, 64 - x->leading - x->trailing);
        return;
    }
    x->leading = lz;
    x->trailing = tz;
    int sig = 64 - lz - tz;
    pt_gorilla_put_bits(e, 0x3, 2);
    pt_gorilla_put_bits(e, (uint64_t)lz, 5);
    pt_gorilla_put_bits(e, (uint64_t)(sig & 63), 6); /* 64 is written as 0 */
    pt_gorilla_put_bits(e, delta >> tz, sig);
}

static void put_value(pt_gorilla_enc *e, uint64_t v)
{
    pt_gorilla_xor x = {e->v, e->leading, e->trailing};
    pt_gorilla_put_xor(e, &x, v);
    e->v = x.v;
    e->leading = x.leading;
    e->trailing = x.trailing;
}

void pt_gorilla_enc_add(pt_gorilla_enc *e, int64_t t, uint64_t v)
{
    uint64_t ut = (uint64_t)t;
    if (e->n == 0) {
        put_uvarint(e, (ut << 1) ^ (uint64_t)(t >> 63)); /* zig-zag */
        pt_gorilla_put_bits(e, v, 64);
        e->v = v;
    } else if (e->n == 1) {
        e->tdelta = ut - e->t;
        put_uvarint(e, e->tdelta);
        put_value(e, v);
    } else {
        uint64_t d = ut - e->t;
        int64_t dod = (int64_t)(d - e->tdelta);
        e->tdelta = d;
        if (dod == 0) {
            pt_gorilla_put_bits(e, 0, 1);
        } else if (dod >= -8191 && dod <= 8192) {
            pt_gorilla_put_bits(e, 0x2, 2);
            pt_gorilla_put_bits(e, (uint64_t)dod, 14);
        } else if (dod >= -65535 && dod <= 65536) {
            pt_gorilla_put_bits(e, 0x6, 3);
            pt_gorilla_put_bits(e, (uint64_t)dod, 17);
        } else if (dod >= -524287 && dod <= 524288) {
            pt_gorilla_put_bits(e, 0xe, 4);
            pt_gorilla_put_bits(e, (uint64_t)dod, 20);
        } else {
            pt_gorilla_put_bits(e, 0xf, 4);
            pt_gorilla_put_bits(e, (uint64_t)dod, 64);
        }
        put_value(e, v);
    }
    e->t = ut;
    e->n++;
}

/* ---- decoder ---- */

void pt_gorilla_dec_init(pt_gorilla_dec *d, const uint8_t *p, size_t len)
{
    *d = (pt_gorilla_dec){.p = p, .nbits = len * 8};
}

int pt_gorilla_get_xor(pt_gorilla_dec *d, pt_gorilla_xor *xs)
{
    uint64_t b, lz, sig, x;
    if (pt_gorilla_get_bits(d, 1, &b))
        return -1;
    if (!b)
        return 0;
    if (pt_gorilla_get_bits(d, 1, &b))
        return -1;
    if (b) {
        if (pt_gorilla_get_bits(d, 5, &lz) || pt_gorilla_get_bits(d, 6, &sig))
            return -1;
        if (sig == 0)
            sig = 64;
        if (lz + sig > 64)
            return -1;
        xs->leading = (int)lz;
        xs->trailing = 64 - (int)lz - (int)sig;
    }
    int n = 64 - xs->leading - xs->trailing;
    if (pt_gorilla_get_bits(d, n, &x))
        return -1;
    xs->v ^= n == 64 ? x : x << xs->trailing;
    return 0;
}

static int get_value(pt_gorilla_dec *d)
{
    pt_gorilla_xor x = {d->v, d->leading, d->trailing};
    int rv = pt_gorilla_get_xor(d, &x);
    d->v = x.v;
    d->leading = x.leading;
    d->trailing = x.trailing;
    return rv;
}

int pt_gorilla_dec_next(pt_gorilla_dec *d, int64_t *t, uint64_t *v)
{
    uint64_t x;
    if (d->n == 0) {
        if (get_uvarint(d, &x) || pt_gorilla_get_bits(d, 64, &d->v))
            return -1;
        d->t = (x >> 1) ^ (0 - (x & 1));
    } else if (d->n == 1) {
        if (get_uvarint(d, &d->tdelta) || get_value(d))
            return -1;
        d->t += d->tdelta;
    } else {
        static const int sizes[] = {0, 14, 17, 20, 64};
        int prefix = 0;
        uint64_t b = 1;
        while (prefix < 4) {
            if (pt_gorilla_get_bits(d, 1, &b))
                return -1;
            if (!b)
                break;
            prefix++;
        }
        if (prefix) {
            int sz = sizes[prefix];
            if (pt_gorilla_get_bits(d, sz, &x))
                return -1;
            if (sz < 64 && x > (1ULL << (sz - 1)))
                x -= 1ULL << sz; /* negative: sign-extend, modulo 2^64 */
            d->tdelta += x;
        }
        if (get_value(d))
            return -1;
        d->t += d->tdelta;
    }
    d->n++;
    *t = (int64_t)d->t;
    *v = d->v;
    return 0;
}

int pt_gorilla_dec_done(const pt_gorilla_dec *d)
{
    size_t left = d->nbits - d->pos;
    if (left >= 8)
        return 0;
    unsigned mask = (1u << left) - 1;
    return left == 0 || (d->p[d->pos >> 3] & mask) == 0;
}
