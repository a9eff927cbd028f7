/*
 * The backend conformance suite: what every backend must do, checked through backend.h
 * only, so the embedded store, the faulty wrapper and Bigtable all run the same cases.
 *
 *     pt_conformance_run(b, "embedded");
 *
 * b must be open on EMPTY tables (the unbounded-range cases check exact results). The
 * suite writes only rows under "a/", "c01/".."c24/" and "z/", and erases (a backend with
 * pt_backend_ops.erase) only under "c22/".."c24/".
 * Include this header from one test file, after tap.h's users are set up; the including
 * file prints the plan with done_testing().
 */
#ifndef PT_CONFORMANCE_H
#define PT_CONFORMANCE_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "bytes.h"
#include "error.h"
#include "tap.h"

/* ---- a digest of a whole table, to compare before and after a reopen ---- */

typedef struct digest {
    size_t cells;
    uint64_t h;
} digest;

static inline void fnv(uint64_t *h, pt_slice s)
{
    for (size_t i = 0; i < s.n; i++)
        *h = (*h ^ s.p[i]) * 0x100000001b3ull;
    *h = (*h ^ 0xff) * 0x100000001b3ull; /* field separator */
}

static inline int digest_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    digest *d = ud;
    d->cells++;
    fnv(&d->h, row);
    fnv(&d->h, qual);
    fnv(&d->h, value);
    return 0;
}

static inline digest table_digest(pt_backend *b, pt_table t)
{
    digest d = {0, 0xcbf29ce484222325ull};
    pt_row_range all = {{0}, {0}};
    pt_scan s = {.table = t, .ranges = &all, .nranges = 1};
    if (pt_backend_scan(b, &s, digest_cell, &d) != 0)
        d.cells = (size_t)-1;
    return d;
}

/* ---- building batches ---- */

#define CT_BATCH_MAX 512

typedef struct ct_batch {
    pt_mutation m[CT_BATCH_MAX];
    uint8_t q[CT_BATCH_MAX][4];
    size_t n;
} ct_batch;


/* Adds a cell with a 4-byte big-endian qualifier; row and value must outlive the batch. */
static void ct_add_raw(ct_batch *bt, pt_table t, pt_slice row, uint32_t q, pt_slice value)
{
    if (bt->n == CT_BATCH_MAX) {
        ok(0, "conformance: batch overflow (a bug in the suite)");
        return;
    }
    size_t i = bt->n++;
    pt_put_be32(bt->q[i], q);
    bt->m[i] = (pt_mutation){.table = (uint8_t)t, .row = row, .qual = {bt->q[i], 4},
                             .value = value, .version_us = 1000 * ((int64_t)q + 1)};
}

static void ct_add(ct_batch *bt, pt_table t, const char *row, uint32_t q, const char *value)
{
    ct_add_raw(bt, t, pt_slice_str(row), q, pt_slice_str(value));
}

typedef struct ct_cellspec {
    const char *row;
    uint32_t q;
    const char *value;
} ct_cellspec;

static void ct_add_cells(ct_batch *bt, pt_table t, const ct_cellspec *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        ct_add(bt, t, c[i].row, c[i].q, c[i].value);
}

/* Adds every (row, quals[j]) cell with value vals[j]. */
static void ct_add_grid(ct_batch *bt, const char *const *rows, size_t nrows,
                        const uint32_t *quals, const char *const *vals, size_t nquals)
{
    for (size_t i = 0; i < nrows; i++)
        for (size_t j = 0; j < nquals; j++)
            ct_add(bt, PT_TABLE_POINTS, rows[i], quals[j], vals[j]);
}

static int ct_write(pt_backend *b, ct_batch *bt)
{
    return pt_backend_write(b, bt->m, bt->n);
}

/* ---- collecting scan results ---- */

typedef struct ct_sink {
    char *text; /* "row:qualhex=value;" per cell, bytes outside printable ASCII as \xHH */
    size_t len, cap;
    size_t calls;
    size_t stop_at;  /* return 1 on this call (1-based); 0 = never */
    size_t abort_at; /* return abort_code on this call; 0 = never */
    int abort_code;
    int ordered;     /* stays 1 while each cell sorts strictly after the previous one */
    uint8_t *prev_row, *prev_qual;
    size_t prev_row_n, prev_qual_n;
    uint8_t *last_value; /* copy of the last value seen */
    size_t last_value_n;
    int render_values;   /* 0: write "=<n bytes>" instead of the value */
} ct_sink;

static void ct_sink_init(ct_sink *s)
{
    memset(s, 0, sizeof(*s));
    s->ordered = 1;
    s->render_values = 1;
}

static void ct_sink_free(ct_sink *s)
{
    free(s->text);
    free(s->prev_row);
    free(s->prev_qual);
    free(s->last_value);
    memset(s, 0, sizeof(*s));
}

static void ct_putc(ct_sink *s, char c)
{
    if (s->len + 2 > s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 256;
        char *p = realloc(s->text, cap);
        if (!p)
            abort();
        s->text = p;
        s->cap = cap;
    }
    s->text[s->len++] = c;
    s->text[s->len] = '\0';
}

static void ct_puts(ct_sink *s, const char *str)
{
    while (*str)
        ct_putc(s, *str++);
}

static void ct_put_escaped(ct_sink *s, pt_slice v)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < v.n; i++) {
        uint8_t c = v.p[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != ':' && c != ';' && c != '=') {
            ct_putc(s, (char)c);
        } else {
            ct_puts(s, "\\x");
            ct_putc(s, hex[c >> 4]);
            ct_putc(s, hex[c & 15]);
        }
    }
}

static void ct_put_hex(ct_sink *s, pt_slice v)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < v.n; i++) {
        ct_putc(s, hex[v.p[i] >> 4]);
        ct_putc(s, hex[v.p[i] & 15]);
    }
}

static void ct_copy(uint8_t **dst, size_t *dn, pt_slice src)
{
    free(*dst);
    *dst = malloc(src.n ? src.n : 1);
    if (!*dst)
        abort();
    if (src.n)
        memcpy(*dst, src.p, src.n);
    *dn = src.n;
}

static int ct_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    ct_sink *s = ud;
    s->calls++;
    if (s->calls > 1) {
        int c = pt_slice_cmp(row, (pt_slice){s->prev_row, s->prev_row_n});
        if (c == 0)
            c = pt_slice_cmp(qual, (pt_slice){s->prev_qual, s->prev_qual_n});
        if (c <= 0)
            s->ordered = 0;
    }
    ct_copy(&s->prev_row, &s->prev_row_n, row);
    ct_copy(&s->prev_qual, &s->prev_qual_n, qual);
    ct_copy(&s->last_value, &s->last_value_n, value);

    ct_put_escaped(s, row);
    ct_putc(s, ':');
    ct_put_hex(s, qual);
    ct_putc(s, '=');
    if (s->render_values) {
        ct_put_escaped(s, value);
    } else {
        char buf[32];
        snprintf(buf, sizeof(buf), "<%zu bytes>", value.n);
        ct_puts(s, buf);
    }
    ct_putc(s, ';');

    if (s->abort_at && s->calls == s->abort_at)
        return s->abort_code;
    if (s->stop_at && s->calls == s->stop_at)
        return 1;
    return 0;
}

static int ct_scan(pt_backend *b, pt_table t, const pt_row_range *ranges, size_t nranges,
                   pt_slice qs, pt_slice qe, size_t row_limit, ct_sink *sink)
{
    pt_scan s = {.table = t, .ranges = ranges, .nranges = nranges, .qual_start = qs,
                 .qual_end = qe, .row_limit = row_limit};
    return pt_backend_scan(b, &s, ct_cell, sink);
}

/* Scans ranges over the whole qualifier space and returns the rendered cells in a static
 * buffer (valid until the next call), or "ERROR <code>". */
static const char *ct_show_q(pt_backend *b, pt_table t, const pt_row_range *ranges,
                             size_t nranges, pt_slice qs, pt_slice qe, size_t row_limit)
{
    static char out[8192];
    ct_sink sink;
    ct_sink_init(&sink);
    int rv = ct_scan(b, t, ranges, nranges, qs, qe, row_limit, &sink);
    if (rv != 0)
        snprintf(out, sizeof(out), "ERROR %d", rv);
    else if (!sink.ordered)
        snprintf(out, sizeof(out), "UNORDERED %s", sink.text ? sink.text : "");
    else
        snprintf(out, sizeof(out), "%s", sink.text ? sink.text : "");
    ct_sink_free(&sink);
    return out;
}

static const char *ct_show(pt_backend *b, pt_table t, const pt_row_range *ranges, size_t nranges)
{
    return ct_show_q(b, t, ranges, nranges, (pt_slice){0}, (pt_slice){0}, 0);
}

#define CT_NONE ((pt_slice){0})
#define CT_RANGE(s, e) ((pt_row_range){PT_SLICE_LIT(s), PT_SLICE_LIT(e)})
#define CT_N(a) (sizeof(a) / sizeof((a)[0]))
/* The points table's cells in rows [s, e), as ct_show prints them. */
#define CT_POINTS(b, s, e) ct_show(b, PT_TABLE_POINTS, &CT_RANGE(s, e), 1)

/* ---- the cases ---- */

static void ct_tables(pt_backend *b, const char *L)
{
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "c01/r", 1, "P");
    ct_add(&bt, PT_TABLE_INDEX, "c01/r", 1, "I");
    ct_add(&bt, PT_TABLE_INDEX, "c01/only-index", 2, "X");
    is(ct_write(b, &bt), 0, "%s: write to both tables in one batch", L);
    pt_row_range r[] = {CT_RANGE("c01/", "c01/\xff")};
    is_str(ct_show(b, PT_TABLE_POINTS, r, 1), "c01/r:00000001=P;", "%s: points table", L);
    is_str(ct_show(b, PT_TABLE_INDEX, r, 1), "c01/only-index:00000002=X;c01/r:00000001=I;",
           "%s: index table holds its own cells", L);
    is(pt_backend_write(b, NULL, 0), 0, "%s: empty batch", L);
}

static void ct_order(pt_backend *b, const char *L)
{
    static const ct_cellspec cells[] = {
        {"c02/b", 0x80000000u, "1"}, {"c02/\xff", 5, "2"},  {"c02/a", 0x7fffffffu, "3"},
        {"c02/a,b", 5, "4"},         {"c02/a", 0x100, "5"}, {"c02/ab", 5, "6"},
        {"c02/b", 1, "7"},           {"c02/a\x01", 5, "8"}, {"c02/a", 0, "9"},
        {"c02/A", 5, "10"},
    };
    ct_batch bt = {0};
    ct_add_cells(&bt, PT_TABLE_POINTS, cells, CT_N(cells));
    is(ct_write(b, &bt), 0, "%s: write unsorted batch", L);
    is_str(CT_POINTS(b, "c02/", "c020"),
           "c02/A:00000005=10;"
           "c02/a:00000000=9;c02/a:00000100=5;c02/a:7fffffff=3;"
           "c02/a\\x01:00000005=8;c02/a,b:00000005=4;c02/ab:00000005=6;"
           "c02/b:00000001=7;c02/b:80000000=1;"
           "c02/\\xff:00000005=2;",
           "%s: cells come back in (row, qualifier) byte order", L);
}

static void ct_rewrite(pt_backend *b, const char *L)
{
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "c03/r", 1, "old");
    ct_add(&bt, PT_TABLE_POINTS, "c03/r", 2, "keep");
    is(ct_write(b, &bt), 0, "%s: first write", L);
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "c03/r", 1, "new");
    is(ct_write(b, &bt), 0, "%s: rewrite one cell", L);
    is(ct_write(b, &bt), 0, "%s: the same batch again (a retry)", L);
    is_str(CT_POINTS(b, "c03/", "c03/\xff"), "c03/r:00000001=new;c03/r:00000002=keep;",
           "%s: a rewrite replaces the value, one version kept", L);
}

/* A scan of up to 2 row ranges (n of them) and the cells it must return. */
typedef struct ct_query {
    pt_row_range r[2];
    size_t n;
    const char *want;
    const char *what;
} ct_query;

static void ct_expect(pt_backend *b, const char *L, const ct_query *q, size_t n)
{
    for (size_t i = 0; i < n; i++)
        is_str(ct_show(b, PT_TABLE_POINTS, q[i].r, q[i].n), q[i].want, "%s: %s", L, q[i].what);
}

static void ct_row_ranges(pt_backend *b, const char *L)
{
    static const char *const rows[] = {"c04/r0", "c04/r1", "c04/r2", "c04/r3", "c04/r4",
                                       "c04/r5", "c04/r6", "c04/r7", "c04/r8", "c04/r9"};
    static const uint32_t quals[] = {1};
    static const char *const vals[] = {"v"};
    ct_batch bt = {0};
    ct_add_grid(&bt, rows, CT_N(rows), quals, vals, 1);
    is(ct_write(b, &bt), 0, "%s: write 10 rows", L);

    const ct_query q[] = {
        {{CT_RANGE("c04/r2", "c04/r5")}, 1,
         "c04/r2:00000001=v;c04/r3:00000001=v;c04/r4:00000001=v;", "[start, end) is half-open"},
        {{CT_RANGE("c04/r2x", "c04/r4")}, 1, "c04/r3:00000001=v;", "bounds need not be rows"},
        {{CT_RANGE("c04/r1", "c04/r3"), CT_RANGE("c04/r6", "c04/r8")}, 2,
         "c04/r1:00000001=v;c04/r2:00000001=v;c04/r6:00000001=v;c04/r7:00000001=v;",
         "two ranges in one scan"},
        {{CT_RANGE("c04/r3", "c04/r3")}, 1, "", "[r, r) is empty"},
    };
    ct_expect(b, L, q, CT_N(q));
    pt_row_range all[] = {CT_RANGE("c04/", "c04/\xff")};
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, all, 1, CT_NONE, CT_NONE, 0, &sink), 0, "%s: prefix range", L);
    is(sink.calls, 10, "%s: prefix range sees all 10 rows", L);
    ct_sink_free(&sink);
}

static void ct_unbounded(pt_backend *b, const char *L)
{
    static const ct_cellspec cells[] = {
        {"z/1", 1, "a"}, {"z/2", 1, "b"}, {"z/3", 1, "c"}, {"a/1", 1, "d"}, {"a/2", 1, "e"},
    };
    ct_batch bt = {0};
    ct_add_cells(&bt, PT_TABLE_POINTS, cells, CT_N(cells));
    is(ct_write(b, &bt), 0, "%s: write rows at both ends of the key space", L);
    pt_row_range tail[] = {CT_RANGE("z/2", "")};
    is_str(ct_show(b, PT_TABLE_POINTS, tail, 1), "z/2:00000001=b;z/3:00000001=c;",
           "%s: empty end is unbounded", L);
    pt_row_range head[] = {CT_RANGE("", "a/2")};
    is_str(ct_show(b, PT_TABLE_POINTS, head, 1), "a/1:00000001=d;",
           "%s: empty start is the first row", L);
}

static void ct_single_rows(pt_backend *b, const char *L)
{
    static const char *const rows[] = {"c06/a", "c06/a,b", "c06/ab", "c06/a\x01", "c06/b"};
    /* Qualifiers starting with 0x00 catch a row end bound placed inside the row. */
    static const uint32_t quals[] = {0, 1, 0xffffffffu};
    static const char *const vals[] = {"x", "y", "z"};
    ct_batch bt = {0};
    ct_add_grid(&bt, rows, CT_N(rows), quals, vals, CT_N(quals));
    is(ct_write(b, &bt), 0, "%s: write rows that share prefixes", L);

#define CT_ROW_A "c06/a:00000000=x;c06/a:00000001=y;c06/a:ffffffff=z;"
    const ct_query q[] = {
        {{CT_RANGE("c06/a", "c06/a\0")}, 1, CT_ROW_A,
         "single row 'a' excludes 'a\\x01', 'a,b', 'ab'"},
        {{CT_RANGE("c06/a,b", "c06/a,b\0")}, 1,
         "c06/a,b:00000000=x;c06/a,b:00000001=y;c06/a,b:ffffffff=z;", "single row 'a,b'"},
        {{CT_RANGE("c06/a", "c06/a\0"), CT_RANGE("c06/ab", "c06/ab\0")}, 2,
         CT_ROW_A "c06/ab:00000000=x;c06/ab:00000001=y;c06/ab:ffffffff=z;",
         "two single rows in one scan"},
        {{CT_RANGE("c06/a", "c06/a\0"), CT_RANGE("c06/a,", "c06/ab")}, 2,
         CT_ROW_A "c06/a,b:00000000=x;c06/a,b:00000001=y;c06/a,b:ffffffff=z;",
         "a single row and a range in one scan"},
        {{CT_RANGE("c06/aa", "c06/aa\0")}, 1, "", "single missing row"},
    };
#undef CT_ROW_A
    ct_expect(b, L, q, CT_N(q));
    uint8_t q1[4], q2[4];
    pt_put_be32(q1, 1);
    pt_put_be32(q2, 2);
    is_str(ct_show_q(b, PT_TABLE_POINTS, q[0].r, 1, (pt_slice){q1, 4}, (pt_slice){q2, 4}, 0),
           "c06/a:00000001=y;", "%s: single row with a qualifier range", L);
}

static void ct_qual_ranges(pt_backend *b, const char *L)
{
    static const uint32_t quals[] = {0,          1,           0xff,       0x100,
                                     0x10000,    0x7fffffffu, 0x80000000u, 0xffffffffu};
    ct_batch bt = {0};
    for (size_t i = 0; i < CT_N(quals); i++)
        ct_add(&bt, PT_TABLE_POINTS, "c07/r", quals[i], "v");
    ct_add(&bt, PT_TABLE_POINTS, "c07/s", 0x10, "s");
    ct_add(&bt, PT_TABLE_POINTS, "c07/s", 0x20, "s");
    ct_add(&bt, PT_TABLE_POINTS, "c07/t", 0x05, "t");
    ct_add(&bt, PT_TABLE_POINTS, "c07/u", 0x18, "u");
    is(ct_write(b, &bt), 0, "%s: write qualifiers", L);

    struct {
        uint32_t start, end; /* 0xdead = unbounded */
        const char *want;
    } cases[] = {
        {1, 0x100, "c07/r:00000001=v;c07/r:000000ff=v;"},
        {0x100, 0xdead,
         "c07/r:00000100=v;c07/r:00010000=v;c07/r:7fffffff=v;c07/r:80000000=v;"
         "c07/r:ffffffff=v;"},
        {0xdead, 0x80000000u,
         "c07/r:00000000=v;c07/r:00000001=v;c07/r:000000ff=v;c07/r:00000100=v;"
         "c07/r:00010000=v;c07/r:7fffffff=v;"},
        {0x80000000u, 0xffffffffu, "c07/r:80000000=v;"},
        {0xffffffffu, 0xdead, "c07/r:ffffffff=v;"},
        {0x100, 0x101, "c07/r:00000100=v;"},
        {2, 0xff, ""},
    };
    pt_row_range r[] = {CT_RANGE("c07/r", "c07/r\0")};
    for (size_t i = 0; i < CT_N(cases); i++) {
        uint8_t qs[4], qe[4];
        pt_put_be32(qs, cases[i].start);
        pt_put_be32(qe, cases[i].end);
        pt_slice s = cases[i].start == 0xdead ? CT_NONE : (pt_slice){qs, 4};
        pt_slice e = cases[i].end == 0xdead ? CT_NONE : (pt_slice){qe, 4};
        is_str(ct_show_q(b, PT_TABLE_POINTS, r, 1, s, e, 0), cases[i].want,
               "%s: qualifier range case %zu", L, i);
    }

    /* Bounds are byte strings, not only 4-byte numbers: a 4-byte qualifier that is a
     * proper prefix of a bound sorts before it. */
    static const struct {
        const char *start, *end; /* NULL = unbounded */
        size_t ns, ne;
        const char *want;
    } odd[] = {
        {"\x00\x01", NULL, 2, 0,
         "c07/r:00010000=v;c07/r:7fffffff=v;c07/r:80000000=v;c07/r:ffffffff=v;"},
        {"\x00\x00\x01\x00\x00", NULL, 5, 0,
         "c07/r:00010000=v;c07/r:7fffffff=v;c07/r:80000000=v;c07/r:ffffffff=v;"},
        {NULL, "\x00\x00\x01", 0, 3, "c07/r:00000000=v;c07/r:00000001=v;c07/r:000000ff=v;"},
        {"\xff\xff\xff\xff", "\xff\xff\xff\xff\x00", 4, 5, "c07/r:ffffffff=v;"},
        {"\x7f\xff\xff\xff\x00", "\x80", 5, 1, ""},
    };
    for (size_t i = 0; i < CT_N(odd); i++) {
        pt_slice s = odd[i].start ? (pt_slice){(const uint8_t *)odd[i].start, odd[i].ns} : CT_NONE;
        pt_slice e = odd[i].end ? (pt_slice){(const uint8_t *)odd[i].end, odd[i].ne} : CT_NONE;
        is_str(ct_show_q(b, PT_TABLE_POINTS, r, 1, s, e, 0), odd[i].want,
               "%s: qualifier range with a %zu-byte start and a %zu-byte end", L, odd[i].ns,
               odd[i].ne);
    }

    uint8_t qs[4], qe[4];
    pt_put_be32(qs, 0x10);
    pt_put_be32(qe, 0x21);
    pt_row_range all[] = {CT_RANGE("c07/", "c07/\xff")};
    is_str(ct_show_q(b, PT_TABLE_POINTS, all, 1, (pt_slice){qs, 4}, (pt_slice){qe, 4}, 0),
           "c07/s:00000010=s;c07/s:00000020=s;c07/u:00000018=u;",
           "%s: qualifier range over many rows skips rows without matches", L);
    is_str(ct_show_q(b, PT_TABLE_POINTS, all, 1, (pt_slice){qs, 4}, (pt_slice){qe, 4}, 1),
           "c07/s:00000010=s;c07/s:00000020=s;",
           "%s: row_limit counts only rows with cells in the qualifier range", L);
}

static void ct_row_limit(pt_backend *b, const char *L)
{
    static const char *const rows[] = {"c08/r0", "c08/r1", "c08/r2", "c08/r3", "c08/r4"};
    static const uint32_t quals[] = {1, 2};
    static const char *const vals[] = {"a", "b"};
    ct_batch bt = {0};
    ct_add_grid(&bt, rows, CT_N(rows), quals, vals, CT_N(quals));
    is(ct_write(b, &bt), 0, "%s: write 5 rows of 2 cells", L);
    pt_row_range all[] = {CT_RANGE("c08/", "c08/\xff")};
    is_str(ct_show_q(b, PT_TABLE_POINTS, all, 1, CT_NONE, CT_NONE, 2),
           "c08/r0:00000001=a;c08/r0:00000002=b;c08/r1:00000001=a;c08/r1:00000002=b;",
           "%s: row_limit 2 returns whole rows", L);
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, all, 1, CT_NONE, CT_NONE, 5, &sink), 0, "%s: limit 5", L);
    is(sink.calls, 10, "%s: row_limit equal to the row count returns everything", L);
    ct_sink_free(&sink);
    pt_row_range two[] = {CT_RANGE("c08/r0", "c08/r1"), CT_RANGE("c08/r3", "c08/r9")};
    is_str(ct_show_q(b, PT_TABLE_POINTS, two, 2, CT_NONE, CT_NONE, 2),
           "c08/r0:00000001=a;c08/r0:00000002=b;c08/r3:00000001=a;c08/r3:00000002=b;",
           "%s: row_limit counts across ranges", L);
}

static void ct_callback(pt_backend *b, const char *L)
{
    ct_batch bt = {0};
    for (uint32_t q = 1; q <= 5; q++)
        ct_add(&bt, PT_TABLE_POINTS, "c09/r", q, "v");
    ct_add(&bt, PT_TABLE_POINTS, "c09/s", 1, "v");
    is(ct_write(b, &bt), 0, "%s: write 6 cells", L);
    pt_row_range r[] = {CT_RANGE("c09/r", "c09/r\0"), CT_RANGE("c09/s", "c09/t")};
    /* A callback that stops (1) or fails on its nth call. */
    static const struct {
        size_t stop_at, abort_at;
        int abort_code, rv;
        size_t calls;
        const char *what_rv, *what_calls;
    } cases[] = {
        {2, 0, 0, 0, 2, "callback returning 1 ends the scan with 0",
         "no call after the callback returned 1"},
        {0, 3, PT_ELIMIT, PT_ELIMIT, 3, "a negative callback code is returned",
         "no call after the callback failed"},
        {5, 0, 0, 0, 5, "stop on the last cell of the first range",
         "the second range is not scanned after a stop"},
    };
    for (size_t i = 0; i < CT_N(cases); i++) {
        ct_sink sink;
        ct_sink_init(&sink);
        sink.stop_at = cases[i].stop_at;
        sink.abort_at = cases[i].abort_at;
        sink.abort_code = cases[i].abort_code;
        is(ct_scan(b, PT_TABLE_POINTS, r, 2, CT_NONE, CT_NONE, 0, &sink), cases[i].rv, "%s: %s", L,
           cases[i].what_rv);
        is(sink.calls, cases[i].calls, "%s: %s", L, cases[i].what_calls);
        ct_sink_free(&sink);
    }
}

static void ct_binary(pt_backend *b, const char *L)
{
    static const uint8_t nan_bits[8] = {0x7f, 0xf0, 0, 0, 0, 0, 0, 0x02};
    static const uint8_t mixed[8] = {0x00, 0xff, 0x00, 0x01, 0x7f, 0x80, 0xff, 0x00};
    ct_batch bt = {0};
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c10/r"), 1, (pt_slice){nan_bits, 8});
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c10/r"), 2, (pt_slice){mixed, 8});
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c10/r"), 3, (pt_slice){NULL, 0});
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c10/\x01\x1f\x7f\xfe"), 1,
               PT_SLICE_LIT("k"));
    is(ct_write(b, &bt), 0, "%s: write binary values and an empty one", L);
    is_str(CT_POINTS(b, "c10/", "c10/\xff"),
           "c10/\\x01\\x1f\\x7f\\xfe:00000001=k;"
           "c10/r:00000001=\\x7f\\xf0\\x00\\x00\\x00\\x00\\x00\\x02;"
           "c10/r:00000002=\\x00\\xff\\x00\\x01\\x7f\\x80\\xff\\x00;"
           "c10/r:00000003=;",
           "%s: binary values and row bytes round-trip exactly", L);
}

static void ct_large(pt_backend *b, const char *L)
{
    size_t n = 1u << 20;
    uint8_t *big = malloc(n);
    if (!big)
        abort();
    for (size_t i = 0; i < n; i++)
        big[i] = (uint8_t)(i * 131 + i / 256);
    ct_batch bt = {0};
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c11/big"), 7, (pt_slice){big, n});
    is(ct_write(b, &bt), 0, "%s: write a 1 MiB value", L);
    pt_row_range r[] = {CT_RANGE("c11/big", "c11/big\0")};
    ct_sink sink;
    ct_sink_init(&sink);
    sink.render_values = 0;
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), 0, "%s: scan it", L);
    is(sink.last_value_n, n, "%s: 1 MiB value length", L);
    ok(sink.last_value && sink.last_value_n == n && memcmp(sink.last_value, big, n) == 0,
       "%s: 1 MiB value bytes", L);
    ct_sink_free(&sink);
    free(big);
}

static void ct_empty(pt_backend *b, const char *L)
{
    pt_row_range r[] = {CT_RANGE("c12/", "c12/\xff")};
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), 0,
       "%s: scan of an empty range", L);
    is(sink.calls, 0, "%s: empty range, no callback", L);
    ct_sink_free(&sink);
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_INDEX, NULL, 0, CT_NONE, CT_NONE, 0, &sink), 0,
       "%s: scan with no ranges", L);
    is(sink.calls, 0, "%s: no ranges means no rows", L);
    ct_sink_free(&sink);
}

static void ct_bad_rows(pt_backend *b, const char *L)
{
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "c13/good", 1, "v");
    ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("c13/b\0d"), 1, PT_SLICE_LIT("v"));
    is(ct_write(b, &bt), PT_EBADREQ, "%s: a row key with 0x00 is rejected", L);
    bt.n = 0;
    ct_add_raw(&bt, PT_TABLE_INDEX, (pt_slice){NULL, 0}, 1, PT_SLICE_LIT("v"));
    is(ct_write(b, &bt), PT_EBADREQ, "%s: an empty row key is rejected", L);
    is_str(CT_POINTS(b, "c13/", "c13/\xff"), "", "%s: a rejected batch writes nothing", L);
}

#define CT_THREAD_BATCHES 100
#define CT_THREAD_CELLS 20

typedef struct ct_writer {
    pt_backend *b;
    int id;
    int failures;
} ct_writer;

static void *ct_writer_main(void *arg)
{
    ct_writer *w = arg;
    char rows[10][32];
    for (int r = 0; r < 10; r++)
        snprintf(rows[r], sizeof(rows[r]), "c14/t%d/r%d", w->id, r);
    for (int i = 0; i < CT_THREAD_BATCHES; i++) {
        ct_batch bt = {0};
        for (int j = 0; j < CT_THREAD_CELLS; j++)
            ct_add(&bt, PT_TABLE_POINTS, rows[(i + j) % 10], (uint32_t)(i * CT_THREAD_CELLS + j),
                   w->id ? "one" : "zero");
        if (ct_write(w->b, &bt) != 0)
            w->failures++;
    }
    return NULL;
}

static void ct_concurrent(pt_backend *b, const char *L)
{
    ct_writer w[2] = {{b, 0, 0}, {b, 1, 0}};
    pthread_t th[2];
    int started = 0;
    for (int i = 0; i < 2; i++)
        started += pthread_create(&th[i], NULL, ct_writer_main, &w[i]) == 0;
    is(started, 2, "%s: start 2 writer threads", L);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    is(w[0].failures + w[1].failures, 0, "%s: concurrent writes succeed", L);
    pt_row_range r[] = {CT_RANGE("c14/", "c14/\xff")};
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), 0, "%s: full scan", L);
    is(sink.calls, 2 * CT_THREAD_BATCHES * CT_THREAD_CELLS,
       "%s: the scan sees every cell of both writers", L);
    ok(sink.ordered, "%s: in order, no duplicates", L);
    ct_sink_free(&sink);
}

/* The cells of row at offsets q[0..n) with values vals[q / step], rendered as ct_show
 * prints them. */
static const char *ct_expect_cells(const char *row, const uint32_t *q, size_t n,
                                   char (*vals)[9], uint32_t step)
{
    static char out[8192];
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n && o < sizeof(out); i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s:%08x=%s;", row, (unsigned)q[i],
                              vals[q[i] / step]);
    return out;
}

/* The cells of rows [s, e) with offsets in [qs, qe) (UINT32_MAX: unbounded end). */
static const char *ct_window(pt_backend *b, const char *s, const char *e, uint32_t qs,
                             uint32_t qe)
{
    uint8_t bs[4], be[4];
    pt_put_be32(bs, qs);
    pt_put_be32(be, qe);
    pt_row_range r = {pt_slice_str(s), pt_slice_str(e)};
    return ct_show_q(b, PT_TABLE_POINTS, &r, 1, (pt_slice){bs, 4},
                     qe == UINT32_MAX ? CT_NONE : (pt_slice){be, 4}, 0);
}

/* Many cells of one row in one write (which a backend may keep as a run, a chunk, in
 * place of single cells): windows that cut the run anywhere give exactly its cells inside
 * them; a later write of some of its cells wins; two writes whose cells interleave read as
 * one series. Cells are a minute apart, 300 of them: five hours, more than one Bigtable
 * chunk may span. */
static void ct_runs(pt_backend *b, const char *L)
{
    enum { N = 300, STEP = 60000 };
    static char vals[N][9], neu[N][9];
    static ct_batch bt;
    bt.n = 0;
    for (uint32_t i = 0; i < N; i++) {
        snprintf(vals[i], sizeof(vals[i]), "v%07u", (unsigned)i);
        snprintf(neu[i], sizeof(neu[i]), "w%07u", (unsigned)i);
        ct_add(&bt, PT_TABLE_POINTS, "c20/r", i * STEP, vals[i]);
    }
    is(ct_write(b, &bt), 0, "%s: %d cells of one row in one write", L, N);
    pt_row_range r = CT_RANGE("c20/", "c20/\xff");
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(b, PT_TABLE_POINTS, &r, 1, CT_NONE, CT_NONE, 0, &sink), 0, "%s: scan them", L);
    ok(sink.calls == N && sink.ordered, "%s: every cell once, in order (%zu)", L, sink.calls);
    ct_sink_free(&sink);
    static const struct {
        uint32_t qs, qe;
        uint32_t first, n; /* the cells expected: first, first + 1, ... */
    } w[] = {
        {100 * STEP + 1, 103 * STEP + 1, 101, 3}, /* inside the run */
        {239 * STEP, 243 * STEP, 239, 4},         /* across the span boundary */
        {299 * STEP, UINT32_MAX, 299, 1},         /* to the end */
        {0, 1, 0, 1},                             /* its first cell */
        {100 * STEP + 1, 101 * STEP, 0, 0},       /* between two cells */
        {N * STEP, UINT32_MAX, 0, 0},             /* past the run */
    };
    for (size_t i = 0; i < CT_N(w); i++) {
        uint32_t q[8];
        for (uint32_t j = 0; j < w[i].n; j++)
            q[j] = (w[i].first + j) * STEP;
        char want[512];
        snprintf(want, sizeof(want), "%s", ct_expect_cells("c20/r", q, w[i].n, vals, STEP));
        is_str(ct_window(b, "c20/", "c20/\xff", w[i].qs, w[i].qe), want,
               "%s: window %zu of the run", L, i);
    }

    /* Rewrites of cells already stored in the run: the later write wins; twice in one
     * batch, the later in the batch. */
    ct_batch re = {0};
    static const uint32_t moved[] = {101, 240, 241};
    for (size_t i = 0; i < CT_N(moved); i++)
        ct_add(&re, PT_TABLE_POINTS, "c20/r", moved[i] * STEP, neu[moved[i]]);
    ct_add(&re, PT_TABLE_POINTS, "c20/r", 150 * STEP, "first");
    ct_add(&re, PT_TABLE_POINTS, "c20/r", 150 * STEP, neu[150]);
    is(ct_write(b, &re), 0, "%s: rewrite 4 cells of the run", L);
    char want[512];
    snprintf(want, sizeof(want), "c20/r:%08x=%s;c20/r:%08x=%s;c20/r:%08x=%s;",
             100 * STEP, vals[100], 101 * STEP, neu[101], 102 * STEP, vals[102]);
    is_str(ct_window(b, "c20/", "c20/\xff", 100 * STEP, 103 * STEP), want,
           "%s: a rewritten cell reads its new value, its neighbours their old", L);
    snprintf(want, sizeof(want), "c20/r:%08x=%s;c20/r:%08x=%s;c20/r:%08x=%s;c20/r:%08x=%s;",
             239 * STEP, vals[239], 240 * STEP, neu[240], 241 * STEP, neu[241], 242 * STEP,
             vals[242]);
    is_str(ct_window(b, "c20/", "c20/\xff", 239 * STEP, 243 * STEP), want,
           "%s: rewrites on both sides of the span boundary", L);
    snprintf(want, sizeof(want), "c20/r:%08x=%s;", 150 * STEP, neu[150]);
    is_str(ct_window(b, "c20/", "c20/\xff", 150 * STEP, 150 * STEP + 1), want,
           "%s: a cell written twice in one batch keeps the later value", L);

    /* Two writes of one row whose offsets interleave, the second also rewriting one of
     * the first's. */
    ct_batch even = {0}, odd = {0};
    uint32_t all[20];
    for (uint32_t i = 0; i < 20; i++) {
        all[i] = i;
        ct_add(i % 2 ? &odd : &even, PT_TABLE_POINTS, "c21/r", i, vals[i]);
    }
    ct_add(&odd, PT_TABLE_POINTS, "c21/r", 10, neu[10]);
    is(ct_write(b, &even) == 0 && ct_write(b, &odd) == 0, 1, "%s: two interleaved writes", L);
    snprintf(want, sizeof(want), "%s", ct_expect_cells("c21/r", all, 10, vals, 1));
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "c21/r:0000000a=%s;", neu[10]);
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s",
             ct_expect_cells("c21/r", all + 11, 9, vals, 1));
    is_str(CT_POINTS(b, "c21/", "c21/\xff"), want,
           "%s: interleaved writes read as one series, the later write's cell at 10", L);
    snprintf(want, sizeof(want), "%s", ct_expect_cells("c21/r", all + 9, 3, vals, 1));
    memcpy(strstr(want, "=v0000010") + 1, neu[10], 8);
    is_str(ct_window(b, "c21/", "c21/\xff", 9, 12), want, "%s: ...and through a window", L);
}

/* pt_erase of the points rows' offsets [qs, qe) (UINT32_MAX: unbounded end) or, for the
 * index, of qualifiers [qs, qe) as strings ("" unbounded); bounds held in buf. */
static pt_erase ct_erase_points(const char *row, uint32_t qs, uint32_t qe, uint8_t buf[8])
{
    pt_put_be32(buf, qs);
    pt_put_be32(buf + 4, qe);
    return (pt_erase){PT_TABLE_POINTS, pt_slice_str(row), qs ? (pt_slice){buf, 4} : CT_NONE,
                      qe == UINT32_MAX ? CT_NONE : (pt_slice){buf + 4, 4}};
}

/* Erases: a run of one write cut through (a backend's chunks rewritten), cells written one
 * by one, a whole row, an index row's cells by qualifier, two erases of one row in one
 * call; a later write into an erased range stays; erasing again changes nothing. */
static void ct_erase(pt_backend *b, const char *L)
{
    enum { N = 300, STEP = 60000 };
    if (!b->ops->erase) {
        (void)L;
        skip(1, "this backend has no erase");
        return;
    }
    static char vals[N][9];
    static ct_batch run, one;
    run.n = 0;
    for (uint32_t i = 0; i < N; i++) {
        snprintf(vals[i], sizeof(vals[i]), "e%07u", (unsigned)i);
        ct_add(&run, PT_TABLE_POINTS, "c22/r", i * STEP, vals[i]);
        if (i < 20)
            ct_add(&run, PT_TABLE_POINTS, "c22/t", i, vals[i]);
    }
    int rv = ct_write(b, &run);
    for (uint32_t i = 0; i < 10 && rv == 0; i++) {
        one.n = 0;
        ct_add(&one, PT_TABLE_POINTS, "c22/s", i, vals[i]);
        rv = ct_write(b, &one);
    }
    one.n = 0;
    ct_add(&one, PT_TABLE_INDEX, "c22/i", 0, "x");
    ct_add(&one, PT_TABLE_INDEX, "c22/i", 1, "y");
    ct_add(&one, PT_TABLE_INDEX, "c22/i", 2, "z");
    ct_add(&one, PT_TABLE_INDEX, "c22/j", 0, "x");
    ct_add(&one, PT_TABLE_INDEX, "c22/k", 0, "x");
    ct_add(&one, PT_TABLE_INDEX, "c22/k", 1, "y");
    if (rv == 0)
        rv = ct_write(b, &one);
    is(rv, 0, "%s: rows to erase written", L);
    uint8_t bufs[5][8], q1[4], q2[4], q0[5] = {0};
    pt_put_be32(q1, 1);
    pt_put_be32(q2, 2);
    pt_erase x[] = {
        ct_erase_points("c22/r", 100 * STEP, 200 * STEP, bufs[0]),
        ct_erase_points("c22/s", 3, 6, bufs[1]),
        ct_erase_points("c22/t", 0, UINT32_MAX, bufs[2]),
        {PT_TABLE_INDEX, pt_slice_str("c22/i"), {q1, 4}, {q2, 4}},
        {PT_TABLE_INDEX, pt_slice_str("c22/j"), CT_NONE, CT_NONE},
        {PT_TABLE_INDEX, pt_slice_str("c22/k"), {q0, 4}, {q0, 5}}, /* exactly one cell */
    };
    is(pt_backend_erase(b, x, CT_N(x)), 0, "%s: six erases", L);
    uint32_t q[N];
    size_t k = 0;
    for (uint32_t i = 0; i < N; i++)
        if (i < 100 || i >= 200)
            q[k++] = i * STEP;
    char want[8192];
    snprintf(want, sizeof(want), "%s", ct_expect_cells("c22/r", q, k, vals, STEP));
    is_str(CT_POINTS(b, "c22/r", "c22/r\xff"), want,
           "%s: a run cut through: the cells either side kept, with their values", L);
    snprintf(want, sizeof(want), "%s", ct_expect_cells("c22/r", q + 99, 2, vals, STEP));
    is_str(ct_window(b, "c22/r", "c22/r\xff", 99 * STEP, 201 * STEP), want,
           "%s: ...and through a window across the erased range", L);
    static const uint32_t s_left[] = {0, 1, 2, 6, 7, 8, 9};
    is_str(CT_POINTS(b, "c22/s", "c22/s\xff"), ct_expect_cells("c22/s", s_left, 7, vals, 1),
           "%s: cells written one by one: 3 to 5 gone", L);
    is_str(CT_POINTS(b, "c22/t", "c22/t\xff"), "", "%s: a row erased whole", L);
    pt_row_range ir = CT_RANGE("c22/", "c22/\xff");
    is_str(ct_show(b, PT_TABLE_INDEX, &ir, 1),
           "c22/i:00000000=x;c22/i:00000002=z;c22/k:00000001=y;",
           "%s: index cells by qualifier, one cell exactly; an index row whole", L);

    one.n = 0;
    ct_add(&one, PT_TABLE_POINTS, "c22/r", 150 * STEP, "later");
    is(ct_write(b, &one), 0, "%s: a write into the erased range", L);
    pt_erase twice[] = {ct_erase_points("c22/r", 0, 10 * STEP, bufs[3]),
                        ct_erase_points("c22/r", 290 * STEP, UINT32_MAX, bufs[4])};
    is(pt_backend_erase(b, twice, 2), 0, "%s: two erases of one row in one call", L);
    is(pt_backend_erase(b, twice, 2), 0, "%s: ...again", L);
    k = 0;
    for (uint32_t i = 10; i < 290; i++)
        if (i < 100 || i >= 200)
            q[k++] = i * STEP;
    snprintf(want, sizeof(want), "%s", ct_expect_cells("c22/r", q, 90, vals, STEP));
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "c22/r:%08x=later;", 150 * STEP);
    snprintf(want + strlen(want), sizeof(want) - strlen(want), "%s",
             ct_expect_cells("c22/r", q + 90, k - 90, vals, STEP));
    is_str(CT_POINTS(b, "c22/r", "c22/r\xff"), want,
           "%s: both ends gone, the later write kept", L);
    uint8_t bad[3] = {1, 2, 3};
    pt_erase odd = {PT_TABLE_POINTS, pt_slice_str("c22/r"), {bad, 3}, CT_NONE};
    is(pt_backend_erase(b, &odd, 1), PT_EBADREQ, "%s: points bounds of 3 bytes: refused", L);
}

/* Runs every case against b; TAP lines are prefixed with label. A program may take only
 * the builders above without it. */
__attribute__((unused)) static void pt_conformance_run(pt_backend *b, const char *label)
{
    diag("conformance suite: %s", label);
    ct_tables(b, label);
    ct_order(b, label);
    ct_rewrite(b, label);
    ct_row_ranges(b, label);
    ct_unbounded(b, label);
    ct_single_rows(b, label);
    ct_qual_ranges(b, label);
    ct_row_limit(b, label);
    ct_callback(b, label);
    ct_binary(b, label);
    ct_large(b, label);
    ct_empty(b, label);
    ct_bad_rows(b, label);
    ct_concurrent(b, label);
    ct_runs(b, label);
    ct_erase(b, label);
}

#endif
