/* The embedded store's chunk codec (backends/embedded/chunk.c) and the Gorilla stream under
 * it (base/gorilla.c): bit-exact round trips of every kind of float64 and qualifier
 * sequence, corrupt chunks refused, and stores holding the older formats still read. */
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bytes.h"
#include "rnd.h"
#include "tap.h"
#include "chunk_helpers.h"
#include "error.h"
#include "gorilla.h"

static uint64_t rnd(uint64_t n)
{
    return rnd64() % n;
}


static const uint64_t specials[] = {
    0x7ff0000000000002ull, /* Prometheus' staleness marker */
    0x7ff8000000000001ull, /* Prometheus' NaN */
    0x7ff8000000000000ull, /* quiet NaN */
    0xfff8000000000000ull, /* negative quiet NaN */
    0x7ff0000000000001ull, /* signalling NaN */
    0x7fffffffffffffffull, /* NaN, every payload bit */
    0xffffffffffffffffull,
    0x7ff0000000000000ull, /* +Inf */
    0xfff0000000000000ull, /* -Inf */
    0x0000000000000000ull, /* +0 */
    0x8000000000000000ull, /* -0 */
    0x0000000000000001ull, /* smallest denormal */
    0x800fffffffffffffull, /* largest negative denormal */
    0x0010000000000000ull, /* DBL_MIN */
    0x7fefffffffffffffull, /* DBL_MAX */
    0x3ff0000000000000ull, /* 1 */
    0xbff0000000000000ull, /* -1 */
};
#define NSPECIALS (sizeof(specials) / sizeof(specials[0]))

/* A value sequence of one kind. */
static uint64_t value_of(int kind, size_t i, uint64_t prev)
{
    switch (kind) {
    case 0: return specials[rnd(NSPECIALS)];
    case 1: return rnd64();
    case 2: return pt_f64_bits(1e6 + 17.5 * (double)i); /* a counter */
    case 3: return pt_f64_bits(floor(5000.0 * (0.9 + (double)rnd(2001) / 10000.0) * 100 + 0.5) / 100);
    case 4: return prev; /* constant */
    case 5: return rnd(4) ? prev : specials[rnd(NSPECIALS)]; /* mostly repeats */
    default: return prev ^ ((uint64_t)1 << rnd(64)); /* one bit flips */
    }
}

/* Strictly increasing qualifiers of one kind, n of them, starting at or after lo. */
static void quals_of(int kind, uint32_t *q, size_t n)
{
    uint64_t t = kind == 3 ? 0 : rnd(1u << 20);
    for (size_t i = 0; i < n; i++) {
        q[i] = (uint32_t)t;
        uint64_t left = UINT32_MAX - t, step;
        switch (kind) {
        case 0: step = 15000; break;                             /* regular scrapes */
        case 1: step = 15000 - 200 + rnd(401); break;            /* jitter */
        case 2: step = 1 + rnd(rnd(2) ? 30 : 1u << 31); break;   /* huge jumps */
        case 3: step = i + 2 == n ? left : 1 + rnd(3); break;    /* 0 ... UINT32_MAX */
        default: step = rnd(10) ? 60000 : 1 + rnd(1u << 24); break; /* gaps */
        }
        /* Leave room for the rest: qualifiers must stay below 2^32. */
        uint64_t need = n - i - 1;
        if (step > left - need)
            step = need ? (left - need) / need + 1 : 1;
        if (step == 0)
            step = 1;
        t += step;
    }
}

static pt_vcell *cells;
static uint32_t *qs;
static pt_buf enc = PT_BUF_INIT(0);
static pt_vcells dec;

/* Encodes cells[0..n), checks the format byte (SAMPLE_FMT: 3 or 4, whichever the encoder
 * found shorter), decodes and compares bit for bit. */
enum { SAMPLE_FMT = 34 };

static int round_trip(size_t n, int want_fmt, const char *what)
{
    int fmt_ok = 0;
    pt_buf_reset(&enc);
    if (pt_cellchunk_encode(&enc, cells, n) == 0 && enc.len >= 5)
        fmt_ok = want_fmt == SAMPLE_FMT ? enc.p[0] == 3 || enc.p[0] == 4 : enc.p[0] == want_fmt;
    if (!fmt_ok) {
        diag("%s: encode failed or fmt %d", what, enc.len ? enc.p[0] : -1);
        return 0;
    }
    /* An exact-size copy, so that the sanitizers catch a read past the end. */
    uint8_t *copy = malloc(enc.len);
    memcpy(copy, enc.p, enc.len);
    pt_cellchunk c;
    uint32_t last = 0;
    dec.n = 0;
    int good = pt_cellchunk_parse(copy, enc.len, &c) == 0 && c.count == n &&
               pt_cellchunk_cells(&c, &dec) == 0 && dec.n == n &&
               pt_cellchunk_last(&c, &last) == 0 && last == cells[n - 1].q;
    for (size_t i = 0; good && i < n; i++) {
        const pt_vcell *a = &cells[i], *b = &dec.c[i];
        if (a->q != b->q || a->vlen != b->vlen ||
            memcmp(pt_vcell_val(a), pt_vcell_val(b), a->vlen) != 0) {
            diag("%s: cell %zu of %zu differs (q %u vs %u)", what, i, n, a->q, b->q);
            good = 0;
        }
    }
    /* Windows: the cells in [lo, hi) and the last qualifier decoded, which for a fmt 3 or
     * 4 chunk is the first one at or past hi (decoding stops there). */
    for (int w = 0; good && w < 4; w++) {
        size_t a = w == 0 ? 0 : w == 1 ? n / 3 : w == 2 ? n / 2 : n - 1;
        size_t b = w == 0 ? n / 4 + 1 : w == 1 ? 2 * n / 3 + 1 : w == 2 ? n / 2 : n;
        uint64_t lo = cells[a].q + (w == 1), hi = b < n ? cells[b].q : UINT64_MAX;
        size_t want = 0, first_past = n;
        for (size_t i = 0; i < n; i++) {
            want += cells[i].q >= lo && cells[i].q < hi;
            if (cells[i].q >= hi && first_past == n)
                first_past = i;
        }
        uint32_t want_last = c.fmt >= 3 && c.fmt <= 4 && first_past < n ? cells[first_past].q
                                                                        : cells[n - 1].q;
        dec.n = 0;
        uint32_t got_last = 0;
        good = pt_cellchunk_cells_in(&c, lo, hi, &dec, &got_last) == 0 && dec.n == want &&
               got_last == want_last;
        for (size_t i = 0, j = 0; good && i < n; i++) {
            if (cells[i].q < lo || cells[i].q >= hi)
                continue;
            const pt_vcell *x = &cells[i], *y = &dec.c[j++];
            good = x->q == y->q && x->vlen == y->vlen &&
                   memcmp(pt_vcell_val(x), pt_vcell_val(y), x->vlen) == 0;
        }
        if (!good)
            diag("%s: window %d [%llu, %llu): %zu cells (want %zu), last %u (want %u)", what, w,
                 (unsigned long long)lo, (unsigned long long)hi, dec.n, want, got_last,
                 want_last);
    }
    free(copy);
    return good;
}

static void set_cell(size_t i, uint32_t q, uint64_t bits)
{
    cells[i].q = q;
    cells[i].vlen = 8;
    pt_put_be64(cells[i].v.in, bits);
}

static void test_round_trips(void)
{
    enum { MAXN = 10000 };
    cells = calloc(MAXN, sizeof(*cells));
    qs = calloc(MAXN, sizeof(*qs));
    int bad = 0;
    size_t total = 0;
    for (int iter = 0; iter < 3000 && bad < 5; iter++) {
        size_t n = iter % 10 == 0 ? 1 : 1 + rnd(iter % 3 ? 300 : 1100);
        int vk = iter % 7, qk = (iter / 7) % 5;
        quals_of(qk, qs, n);
        uint64_t prev = specials[rnd(NSPECIALS)];
        for (size_t i = 0; i < n; i++)
            set_cell(i, qs[i], prev = value_of(vk, i, prev));
        char what[64];
        snprintf(what, sizeof(what), "chunk %d (values %d, qualifiers %d)", iter, vk, qk);
        bad += !round_trip(n, SAMPLE_FMT, what);
        total += n;
    }
    ok(bad == 0, "3000 random fmt 3 / fmt 4 chunks (%zu cells: special floats, random bits, counters, "
                 "gauges, repeats; regular, jittered, huge-jump qualifiers) round-trip bit-exact",
       total);

    /* Every special value after every other one, also as the first value. */
    size_t n = 0;
    for (size_t a = 0; a < NSPECIALS; a++)
        for (size_t b = 0; b < NSPECIALS; b++) {
            set_cell(n, (uint32_t)n * 1000, specials[a]);
            n++;
            set_cell(n, (uint32_t)n * 1000, specials[b]);
            n++;
        }
    ok(round_trip(n, 3, "special pairs"), "every pair of special values, %zu cells", n);

    /* Delta-of-deltas at both ends of every bucket (14, 17, 20 and 64 bits), each one
     * followed by its negation. */
    static const int64_t edges[] = {1,       -1,      8191,    8192,    8193,   -8191,
                                    -8192,   65535,   65536,   65537,   -65535, -65536,
                                    -65537,  524287,  524288,  524289,  -524287, -524288,
                                    -524289, 1 << 24, -(1 << 24), 0};
    n = 0;
    uint64_t t = 0, d = 1 << 25;
    set_cell(n++, 0, 0);
    for (size_t k = 0; k < sizeof(edges) / sizeof(edges[0]); k++)
        for (int sign = 1; sign >= -1; sign -= 2) {
            t += (uint64_t)((int64_t)d + sign * edges[k]);
            set_cell(n, (uint32_t)t, (uint64_t)n);
            n++;
            t += d;
            set_cell(n, (uint32_t)t, (uint64_t)n);
            n++;
        }
    ok(round_trip(n, SAMPLE_FMT, "dod edges"), "delta-of-deltas at the edges of every bucket");

    set_cell(0, 0, specials[0]);
    ok(round_trip(1, 3, "q 0"), "one cell at qualifier 0 (a staleness marker)");
    set_cell(0, UINT32_MAX, specials[8]);
    ok(round_trip(1, 3, "q max"), "one cell at qualifier 2^32-1 (-Inf)");
    set_cell(0, 0, pt_f64_bits(1.5));
    set_cell(1, UINT32_MAX, pt_f64_bits(-1.5));
    ok(round_trip(2, 3, "0 and max"), "qualifiers 0 and 2^32-1 in one chunk");
    for (size_t i = 0; i < MAXN; i++)
        set_cell(i, (uint32_t)(UINT32_MAX - (MAXN - 1) + i), rnd64());
    ok(round_trip(MAXN, 3, "10000 at the top"),
       "10,000 cells of random bits ending at qualifier 2^32-1");
    quals_of(1, qs, MAXN);
    uint64_t prev = 0;
    for (size_t i = 0; i < MAXN; i++)
        set_cell(i, qs[i], prev = value_of(2 + (int)(i / 1000) % 5, i, prev));
    ok(round_trip(MAXN, 3, "10000 mixed"), "10,000 cells, jittered, every value kind");
    size_t len = enc.len;
    quals_of(0, qs, MAXN);
    for (size_t i = 0; i < MAXN; i++)
        set_cell(i, qs[i], pt_f64_bits(1e6 + 17.5 * (double)i));
    ok(round_trip(MAXN, 4, "counter"), "10,000 cells of a counter scraped every 15 s: fmt 4");
    diag("a regular counter: %.2f bytes per cell (fmt 1: 12); jittered mixed: %.2f",
         (double)enc.len / MAXN, (double)len / MAXN);
    ok(enc.len < MAXN * 4, "a regular counter takes under 4 bytes a cell (%zu bytes)", enc.len);

    /* A value that is not 8 bytes long keeps the whole chunk in fmt 2. */
    static const uint8_t longv[20] = "twenty bytes long...";
    for (size_t i = 0; i < 300; i++)
        set_cell(i, (uint32_t)i * 7, rnd64());
    cells[100].vlen = 3;
    cells[200].vlen = 0;
    cells[250].vlen = 20;
    cells[250].v.p = longv;
    ok(round_trip(300, 2, "mixed lengths"), "values of 0, 3, 8 and 20 bytes: fmt 2, round trip");
    set_cell(0, 0, 0);
    cells[0].vlen = 7;
    ok(round_trip(1, 2, "one 7-byte"), "one 7-byte value: fmt 2");
}

static int refused(const uint8_t *p, size_t n)
{
    return chunk_refused(p, n, &dec);
}

/* A fmt 3 chunk from raw samples, which the encoder of chunks would never write. */
static void raw_xor(const int64_t *t, size_t n)
{
    pt_buf_reset(&enc);
    pt_buf_reserve(&enc, 5 + pt_gorilla_max_bytes(n));
    memset(enc.p, 0, 5 + pt_gorilla_max_bytes(n));
    enc.p[0] = 3;
    pt_put_be32(enc.p + 1, (uint32_t)n);
    pt_gorilla_enc e;
    pt_gorilla_enc_init(&e, enc.p + 5);
    for (size_t i = 0; i < n; i++)
        pt_gorilla_enc_add(&e, t[i], rnd64());
    enc.len = 5 + pt_gorilla_enc_len(&e);
}

static void test_corrupt(void)
{
    size_t n = 500;
    quals_of(2, qs, n);
    for (size_t i = 0; i < n; i++)
        set_cell(i, qs[i], value_of((int)(i / 50) % 7, i, i ? pt_get_be64(cells[i - 1].v.in) : 0));
    pt_cellchunk_encode(&enc, cells, n);
    size_t len = enc.len;
    uint8_t *good = malloc(len + 1);
    memcpy(good, enc.p, len);

    chunk_cuts_refused(good, len, &dec, "fmt 3");
    /* The padding bits, from encoding the same samples again. */
    uint8_t *again = calloc(1, pt_gorilla_max_bytes(n));
    pt_gorilla_enc ge;
    pt_gorilla_enc_init(&ge, again);
    for (size_t i = 0; i < n; i++)
        pt_gorilla_enc_add(&ge, cells[i].q, pt_get_be64(cells[i].v.in));
    size_t pad = 8 * pt_gorilla_enc_len(&ge) - ge.bits;
    free(again);
    int all = 1;
    for (size_t b = 0; b < pad; b++) {
        good[len - 1] ^= (uint8_t)(1u << b);
        all &= refused(good, len);
        good[len - 1] ^= (uint8_t)(1u << b);
    }
    ok(pad > 0 && all, "each of the %zu padding bits, set, is refused", pad);
    uint8_t hdr[5];
    memcpy(hdr, good, 5);
    /* (One more sample could hide in zero padding: 2 bits repeat the last delta and value.
     * Four more need at least 8 bits, more than padding has.) */
    pt_put_be32(good + 1, (uint32_t)n + 4);
    ok(refused(good, len), "a count above what the stream holds is refused");
    pt_put_be32(good + 1, (uint32_t)n - 1);
    ok(refused(good, len), "a count one too low is refused");
    pt_put_be32(good + 1, 0);
    ok(refused(good, len), "a count of 0 is refused");
    pt_put_be32(good + 1, UINT32_MAX);
    ok(refused(good, len), "a count of 2^32-1 is refused");
    memcpy(good, hdr, 5);
    all = 1;
    for (int f = 0; f < 256; f++) {
        good[0] = (uint8_t)f;
        if (f < 1 || f > 3)
            all &= refused(good, len);
    }
    good[0] = hdr[0];
    ok(all, "formats other than 1, 2, 3 are refused");

    /* Flipped bits and bytes: refused or decoded, never a read out of bounds (the
     * sanitizer pass checks that); decoded qualifiers still increase. */
    size_t flips = 0, decoded = 0;
    all = 1;
    uint8_t *m = malloc(len);
    for (int iter = 0; iter < 20000; iter++) {
        memcpy(m, good, len);
        int k = 1 + (int)rnd(3);
        for (int j = 0; j < k; j++) {
            size_t at = 5 + rnd(len - 5);
            if (rnd(2))
                m[at] ^= (uint8_t)(1u << rnd(8));
            else
                m[at] = (uint8_t)rnd64();
        }
        size_t mlen = rnd(4) ? len : 5 + rnd(len - 5);
        uint8_t *exact = malloc(mlen);
        memcpy(exact, m, mlen);
        pt_cellchunk c;
        dec.n = 0;
        if (pt_cellchunk_parse(exact, mlen, &c) == 0) {
            int rv = pt_cellchunk_cells(&c, &dec);
            if (rv == 0) {
                decoded++;
                for (size_t i = 1; i < dec.n; i++)
                    all &= dec.c[i].q > dec.c[i - 1].q;
                all &= dec.n == c.count;
            } else {
                all &= rv == PT_EINTERNAL && dec.n == 0;
            }
        }
        free(exact);
        flips++;
    }
    free(m);
    ok(all, "%zu corrupted chunks: refused with PT_EINTERNAL or decoded to increasing "
            "qualifiers (%zu decoded)", flips, decoded);

    int64_t t[3] = {5, 5, 6};
    raw_xor(t, 2);
    ok(refused(enc.p, enc.len), "a repeated qualifier is refused");
    t[0] = 10, t[1] = 9;
    raw_xor(t, 2);
    ok(refused(enc.p, enc.len), "a decreasing qualifier is refused");
    t[0] = 0, t[1] = (int64_t)UINT32_MAX + 1;
    raw_xor(t, 2);
    ok(refused(enc.p, enc.len), "a qualifier of 2^32 is refused");
    t[0] = -1;
    raw_xor(t, 1);
    ok(refused(enc.p, enc.len), "a negative qualifier is refused");
    t[0] = 1, t[1] = 2, t[2] = 3;
    raw_xor(t, 3);
    pt_cellchunk c;
    dec.n = 0;
    ok(pt_cellchunk_parse(enc.p, enc.len, &c) == 0 && pt_cellchunk_cells(&c, &dec) == 0 &&
           dec.n == 3,
       "the hand-made chunk checks itself");

    /* fmt 1 and 2 framing. */
    uint8_t f1[5 + 12 * 2] = {1, 0, 0, 0, 2};
    pt_put_be32(f1 + 5, 7);
    pt_put_be32(f1 + 9, 9);
    memset(f1 + 13, 0xab, 16);
    dec.n = 0;
    uint32_t lastq;
    ok(pt_cellchunk_parse(f1, sizeof(f1), &c) == 0 && pt_cellchunk_cells(&c, &dec) == 0 &&
           dec.n == 2 && dec.c[1].q == 9 && dec.c[1].vlen == 8 &&
           pt_cellchunk_last(&c, &lastq) == 0 && lastq == 9,
       "a fmt 1 chunk reads");
    pt_put_be32(f1 + 9, 7);
    ok(refused(f1, sizeof(f1)), "a fmt 1 chunk with a repeated qualifier is refused");
    pt_put_be32(f1 + 9, 9);
    all = 1;
    for (size_t cut = 0; cut < sizeof(f1); cut++)
        all &= refused(f1, cut);
    ok(all, "every truncation of a fmt 1 chunk is refused");
    uint8_t f2[5 + 8 * 2 + 5] = {2, 0, 0, 0, 2};
    pt_put_be32(f2 + 5, 7);
    pt_put_be32(f2 + 9, 9);
    pt_put_be32(f2 + 13, 2);
    pt_put_be32(f2 + 17, 3);
    ok(pt_cellchunk_parse(f2, sizeof(f2), &c) == 0, "a fmt 2 chunk reads");
    pt_put_be32(f2 + 17, 0xfffffffe);
    ok(refused(f2, sizeof(f2)), "a fmt 2 length past the end is refused");
    free(good);
}

/* ---- a store whose chunks are fmt 1 (written before fmt 3) ---- */

enum { OLD_N = 600 };
static uint64_t model[OLD_N]; /* value bits at qualifier 1000 * i, if have[i] */
static uint8_t have[OLD_N];

static int check_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    check *c = ud;
    (void)row;
    uint32_t q = qual.n == 4 ? pt_get_be32(qual.p) : 1;
    size_t i = q / 1000;
    if (q % 1000 || i >= OLD_N || !have[i] || value.n != 8 || pt_get_be64(value.p) != model[i])
        c->bad++;
    c->cells++;
    return 0;
}

static const char old_row[] = "old_metric,job=x,@0000000000000";

static int store_agrees(pt_backend *b)
{
    size_t want = 0;
    for (size_t i = 0; i < OLD_N; i++)
        want += have[i];
    return row_agrees(b, old_row, sizeof(old_row) - 1, check_cell, want);
}

static void put_old_chunk(pt_backend *b, size_t from, size_t to)
{
    uint8_t val[5 + 12 * OLD_N];
    val[0] = 1;
    pt_put_be32(val + 1, (uint32_t)(to - from));
    for (size_t i = from; i < to; i++) {
        pt_put_be32(val + 5 + 4 * (i - from), (uint32_t)i * 1000);
        model[i] = specials[i % NSPECIALS] ^ (i % 3 ? (uint64_t)i << 20 : 0);
        have[i] = 1;
        pt_put_be64(val + 5 + 4 * (to - from) + 8 * (i - from), model[i]);
    }
    put_chunk(b, old_row, sizeof(old_row) - 1, (uint32_t)from * 1000, val, 5 + 12 * (to - from));
}

static void test_old_store(void)
{
    char dir[] = "/tmp/t_chunk.XXXXXX", path[64];
    pt_backend b;
    if (open_temp(&b, dir, path, sizeof(path)) != 0)
        return;
    /* What a store written before fmt 3 holds: fmt 1 chunks, here two of a row. */
    put_old_chunk(&b, 0, 300);
    put_old_chunk(&b, 300, 500);
    pt_backend_close(&b);
    ok(open_at(&b, path) == 0, "a store with fmt 1 chunks opens");
    ok(chunk_census_of(&b).fmts == 1u << 1, "it holds fmt 1 chunks only");
    ok(store_agrees(&b), "its 500 cells read back bit-exact");

    /* Overwrite cells inside both chunks, backfill, and append: the flush merges the old
     * chunks with the head and writes them back as fmt 3. */
    pt_mutation m[4];
    uint8_t vals[4][8], quals[4][4];
    static const size_t at[4] = {10, 299, 450, 599};
    for (int i = 0; i < 4; i++) {
        model[at[i]] = specials[(i + 3) % NSPECIALS];
        have[at[i]] = 1;
        pt_put_be64(vals[i], model[at[i]]);
        pt_put_be32(quals[i], (uint32_t)at[i] * 1000);
        m[i] = (pt_mutation){PT_TABLE_POINTS, {(const uint8_t *)old_row, sizeof(old_row) - 1},
                             {quals[i], 4}, {vals[i], 8}, (int64_t)at[i] * 1000000};
    }
    ok(pt_backend_write(&b, m, 4) == 0, "write over and after the old chunks");
    ok(store_agrees(&b), "the head's cells win over the old chunks");
    ok(pt_embedded_flush(&b) == 0, "flush");
    ok(store_agrees(&b), "after the flush the merged cells read back");
    ok(chunk_census_of(&b).fmts == 1u << 3, "the merged chunks are fmt 3");
    pt_backend_close(&b);
    ok(open_at(&b, path) == 0 && store_agrees(&b), "and again after a reopen");
    pt_backend_close(&b);
    remove_temp(dir);
}

/* fmt 4: decimal values, the shorter form chosen, every value that is no decimal falling
 * back to fmt 3, corrupt chunks refused. */
static void test_decimal(void)
{
    enum { N = 1000 };
    uint64_t prev = pt_f64_bits(5000);
    quals_of(0, qs, N);
    for (size_t i = 0; i < N; i++) {
        double g;
        memcpy(&g, &prev, 8);
        prev = pt_f64_bits(floor((g + (double)((int)rnd(2001) - 1000) / 100) * 100 + 0.5) / 100);
        set_cell(i, qs[i], prev);
    }
    ok(round_trip(N, 4, "gauge"), "a gauge with two decimals: fmt 4");
    ok(enc.len < 3 * N, "  %.2f bytes a cell", (double)enc.len / N);
    double c = 0;
    for (size_t i = 0; i < N; i++)
        set_cell(i, qs[i], pt_f64_bits(c += (double)rnd(100)));
    int counter_ok = round_trip(N, 4, "int counter");
    ok(counter_ok && enc.len < 2 * N, "an integer counter: fmt 4, %.2f bytes a cell",
       (double)enc.len / N);
    set_cell(0, qs[0], pt_f64_bits(7));
    ok(round_trip(1, 3, "one 7"), "one sample: fmt 3 (as short, and written first)");

    /* Values fmt 4 cannot hold: the chunk stays fmt 3. */
    static const double odd[] = {-0.0, 1e-10, 9007199254740993.0 * 4, 1.0 / 3, 1e300};
    int all = 1;
    for (size_t k = 0; k < sizeof(odd) / sizeof(odd[0]); k++) {
        for (size_t i = 0; i < 100; i++)
            set_cell(i, qs[i], pt_f64_bits((double)i));
        set_cell(50, qs[50], pt_f64_bits(odd[k]));
        all &= round_trip(100, 3, "odd value");
    }
    for (size_t k = 0; k < NSPECIALS; k++) {
        for (size_t i = 0; i < 100; i++)
            set_cell(i, qs[i], pt_f64_bits((double)i));
        set_cell(99, qs[99], specials[k]);
        /* +0, 1 and -1 are decimals: either form may be the shorter. */
        int dec_ok = specials[k] == 0 || specials[k] == pt_f64_bits(1) || specials[k] == pt_f64_bits(-1);
        all &= round_trip(100, dec_ok ? SAMPLE_FMT : 3, "special");
    }
    ok(all, "-0, NaNs, infinities, 1e-10, 1/3, 2^55 and 1e300 keep fmt 3");

    /* Sums of decimals are a few units in the last place off a decimal: corrections. */
    double base = 1234.56, step = 7.89;
    for (size_t i = 0; i < N; i++)
        set_cell(i, qs[i], pt_f64_bits(base + step * (double)i));
    int sums_ok = round_trip(N, 4, "sums") && (enc.p[5] & 0x20);
    ok(sums_ok && enc.len < 3 * N, "a counter computed as base + step * i: fmt 4 with "
       "corrections, %.2f bytes a cell", (double)enc.len / N);
    set_cell(0, qs[0], pt_f64_bits(0.1 + 0.2));
    ok(round_trip(1, SAMPLE_FMT, "0.1 + 0.2"), "0.1 + 0.2 round-trips");

    /* A gauge of 8 decimals around 10^5 (13 significant digits) is within reach of a
     * 5-decimal with corrections; at 8 digits it needs none and takes fewer bytes. */
    double w = 77324.571428571435;
    for (size_t i = 0; i < N; i++) {
        w += ((double)rnd(1u << 30) / (1u << 30) - 0.5) * 3.0;
        set_cell(i, qs[i], pt_f64_bits(round(w * 1e8) / 1e8));
    }
    int eight_ok = round_trip(N, 4, "8 decimals");
    ok(eight_ok && enc.p[5] == 8 && enc.len < 5 * N,
       "a gauge of 8 decimals: fmt 4 at k 8, no corrections (mode %#x), %.2f bytes a cell",
       eight_ok ? enc.p[5] : 0, (double)enc.len / N);

    /* Random decimals of every precision fmt 4 has, and random integers up to 2^53. */
    all = 1;
    for (int iter = 0; iter < 500; iter++) {
        int k = (int)rnd(10), n = 1 + (int)rnd(300);
        double p = 1;
        for (int j = 0; j < k; j++)
            p *= 10;
        for (int i = 0; i < n; i++) {
            int64_t m = (int64_t)(rnd64() % ((uint64_t)1 << (1 + rnd(53)))) * (rnd(2) ? 1 : -1);
            set_cell((size_t)i, qs[i], pt_f64_bits((double)m / p));
        }
        /* Either form may be the shorter. */
        all &= round_trip((size_t)n, SAMPLE_FMT, "random decimals");
    }
    ok(all, "500 chunks of random decimals (k 0-9, |m| up to 2^53) round trip");

    /* Corrupt fmt 4 chunks. */
    for (size_t i = 0; i < 300; i++)
        set_cell(i, qs[i], pt_f64_bits((double)(int)rnd(100000) / 100));
    pt_cellchunk_encode(&enc, cells, 300);
    size_t len = enc.len;
    uint8_t *good = malloc(len + 1);
    memcpy(good, enc.p, len);
    all = good[0] == 4;
    for (size_t cut = 0; cut < len; cut++)
        all &= refused(good, cut);
    good[len] = 0;
    all &= refused(good, len + 1);
    ok(all, "every truncation of a %zu-byte fmt 4 chunk, and a trailing byte, is refused", len);
    uint8_t mode = good[5];
    good[5] = 10;
    ok(refused(good, len), "k = 10 is refused");
    good[5] = 0x40 | (mode & 0xf);
    ok(refused(good, len), "an unknown mode bit is refused");
    good[5] = mode;
    uint32_t tlen = pt_get_be32(good + 6);
    pt_put_be32(good + 6, (uint32_t)len);
    ok(refused(good, len), "a timestamp stream longer than the chunk is refused");
    pt_put_be32(good + 6, tlen - 1);
    ok(refused(good, len), "a timestamp stream one byte short is refused");
    pt_put_be32(good + 6, tlen);
    /* The last value's varint (the final bytes) replaced by one past 2^53. */
    uint8_t big[16], *e = pt_put_uvarint(big, (uint64_t)1 << 60);
    size_t bl = (size_t)(e - big), last = len - 1;
    while (last > 0 && (good[last - 1] & 0x80))
        last--;
    uint8_t *m = malloc(last + bl);
    memcpy(m, good, last);
    memcpy(m + last, big, bl);
    ok(refused(m, last + bl), "a value past 2^53 is refused");
    free(m);
    free(good);
}

int main(void)
{
    test_round_trips();
    test_decimal();
    test_corrupt();
    test_old_store();
    free(cells);
    free(qs);
    free(dec.c);
    pt_buf_free(&enc);
    return done_testing();
}
