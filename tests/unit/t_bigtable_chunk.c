/*
 * The Bigtable backend's chunk cells without the emulator (bigtable_chunk.c): the
 * qualifier layout, which cells go into chunks, how a row's cells are cut into chunks,
 * and how a scan merges chunks and single cells back into one cell per offset.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "bigtable_int.h"
#include "bytes.h"
#include "error.h"

#define ROW "up,job=a,@0000000000000"
#define SPAN PT_BT_CHUNK_SPAN_MS

/* A batch of mutations of one row, qualifiers and values held here. */
typedef struct batch {
    pt_mutation m[5000];
    uint8_t q[5000][4];
    uint8_t v[5000][12];
    size_t n;
} batch;

static void add(batch *b, uint32_t q, uint64_t val, size_t vlen)
{
    size_t i = b->n++;
    pt_put_be32(b->q[i], q);
    memset(b->v[i], 0xab, sizeof(b->v[i]));
    pt_put_be64(b->v[i], val);
    b->m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                            .row = PT_SLICE_LIT(ROW),
                            .qual = {b->q[i], 4},
                            .value = {b->v[i], vlen},
                            .version_us = (int64_t)q * 1000};
}

/* The chunks of b's cells (writer w) into out; how many, or an error. */
static long chunk(pt_bt_chunker *ck, batch *b, uint64_t w, pt_mutation *out)
{
    static const pt_mutation *v[5000];
    for (size_t i = 0; i < b->n; i++)
        v[i] = &b->m[i];
    return pt_bt_chunk_row(ck, v, b->n, w, out);
}

static pt_bt_chunkqual qual_of(const pt_mutation *m)
{
    pt_bt_chunkqual c = {0};
    if (pt_bt_chunk_qual_get(m->qual, &c) != 0)
        c.first = c.last = 0xdeadbeef;
    return c;
}

/* ---- merging: cells as a ReadRows row would hold them, the merged row rendered ---- */

typedef struct row {
    pt_bt_cell c[64];
    size_t n;
} row;

static void row_add(row *r, pt_slice qual, pt_slice value)
{
    r->c[r->n++] =
        (pt_bt_cell){.family = PT_SLICE_LIT(PT_BT_FAMILY), .qualifier = qual, .value = value};
}

static char shown[65536];
static size_t stop_after; /* 0: never */

static int render(void *ud, pt_slice q, pt_slice v)
{
    size_t *calls = ud, n = strlen(shown);
    char *o = shown + n;
    if (q.n == 4)
        o += sprintf(o, "%x=", (unsigned)pt_get_be32(q.p));
    else
        o += sprintf(o, "[%zu bytes]=", q.n);
    if (v.n == 8)
        o += sprintf(o, "%llx;", (unsigned long long)pt_get_be64(v.p));
    else
        o += sprintf(o, "(%zu bytes);", v.n);
    return ++*calls == stop_after;
}

static pt_bt_rowmerge rm;
static char err[200];

/* The merged row in [qs, qe) (offsets; UINT64_MAX: unbounded), or "ERROR n". */
static const char *merge(const row *r, uint64_t qs, uint64_t qe)
{
    uint8_t s[4], e[4];
    pt_slice ps = {0}, pe = {0};
    if (qs != UINT64_MAX)
        pt_put_be32(s, (uint32_t)qs), ps = (pt_slice){s, 4};
    if (qe != UINT64_MAX)
        pt_put_be32(e, (uint32_t)qe), pe = (pt_slice){e, 4};
    size_t calls = 0;
    shown[0] = '\0';
    err[0] = '\0';
    int rv = pt_bt_merge_row(&rm, r->c, r->n, ps, pe, render, &calls, err, sizeof(err));
    if (rv < 0)
        snprintf(shown, sizeof(shown), "ERROR %d", rv);
    return shown;
}

#define ALL UINT64_MAX, UINT64_MAX

/* ---- cases ---- */

static void test_layout(void)
{
    uint8_t q[16];
    pt_bt_chunkqual c = {0x01020304, 0x05060708, pt_bt_writer_id(0x0000a1a2a3a4a5a6, 0xb1b2)};
    pt_bt_chunk_qual_put(q, &c);
    static const uint8_t want[16] = {1,    2,    3,    4,    5,    6,    7,    8,
                                     0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xb1, 0xb2};
    ok(memcmp(q, want, 16) == 0, "qualifier = first BE || last BE || ms (6 B) || instance (2 B)");
    pt_bt_chunkqual back;
    ok(pt_bt_chunk_qual_get((pt_slice){q, 16}, &back) == 0 && back.first == c.first &&
           back.last == c.last && back.writer == c.writer,
       "...and reads back");
    is(pt_bt_chunk_qual_get((pt_slice){q, 15}, &back), PT_EINTERNAL, "15 bytes are no chunk");
    c.first = 9, c.last = 8;
    pt_bt_chunk_qual_put(q, &c);
    is(pt_bt_chunk_qual_get((pt_slice){q, 16}, &back), PT_EINTERNAL, "first > last is corrupt");
    ok(pt_bt_writer_id(2, 0) > pt_bt_writer_id(1, 0xffff), "a later ms sorts after any instance");

    pt_mutation m = {
        .table = PT_TABLE_POINTS, .row = PT_SLICE_LIT(ROW), .qual = PT_SLICE_LIT("abcd")};
    ok(pt_bt_chunkable(&m), "a 4-byte cell of a data row goes into chunks");
    m.row = PT_SLICE_LIT("up,job=a,#0000000000000");
    ok(!pt_bt_chunkable(&m), "an exemplar row's cell does not (its newest version wins)");
    m.row = PT_SLICE_LIT(ROW);
    m.qual = PT_SLICE_LIT("abcdefgh");
    ok(!pt_bt_chunkable(&m), "nor a qualifier of another length");
    m.qual = PT_SLICE_LIT("abcd");
    m.table = PT_TABLE_INDEX;
    ok(!pt_bt_chunkable(&m), "nor an index cell");

    is(pt_bt_qual_floor((pt_slice){0}), 0, "floor of an empty bound: 0");
    is(pt_bt_qual_floor(PT_SLICE_LIT("\x00\x00\x01")), 0x100, "floor of 3 bytes: padded");
    is(pt_bt_qual_floor(PT_SLICE_LIT("\x00\x00\x01\x02\x00")), 0x103,
       "floor of 5 bytes: past its 4-byte prefix");
    is(pt_bt_qual_floor(PT_SLICE_LIT("\xff\xff\xff\xff\x00")), (int64_t)1 << 32,
       "floor past every offset: 2^32");
}

static void test_split(void)
{
    static batch b;
    static pt_mutation out[5000];
    pt_bt_chunker ck = {0};

    b.n = 0;
    add(&b, 7, 70, 8);
    is(chunk(&ck, &b, 42, out), 1, "one sample: one chunk");
    pt_bt_chunkqual c = qual_of(&out[0]);
    ok(c.first == 7 && c.last == 7 && c.writer == 42 && out[0].version_us == 7000 &&
           pt_slice_eq(out[0].row, PT_SLICE_LIT(ROW)) && out[0].table == PT_TABLE_POINTS,
       "...its qualifier 7..7, writer 42, version its sample's");

    /* By span: [0, SPAN] is one chunk, SPAN + 1 starts the next. */
    b.n = 0;
    add(&b, SPAN + 1, 3, 8);
    add(&b, 0, 1, 8);
    add(&b, SPAN, 2, 8);
    add(&b, 3 * SPAN, 4, 8);
    is(chunk(&ck, &b, 1, out), 3, "span: 4 samples over 3 spans make 3 chunks");
    pt_bt_chunkqual c0 = qual_of(&out[0]), c1 = qual_of(&out[1]), c2 = qual_of(&out[2]);
    ok(c0.first == 0 && c0.last == SPAN && c1.first == SPAN + 1 && c1.last == SPAN + 1 &&
           c2.first == 3 * SPAN && c2.last == 3 * SPAN,
       "...[0, span], [span+1], [3 span]: none longer than the span");
    is(out[0].version_us, (int64_t)SPAN * 1000, "...a chunk's version is its newest cell's");

    /* By count: 2 * max + 1 cells. */
    b.n = 0;
    for (uint32_t i = 0; i < 2 * PT_BT_CHUNK_MAX_CELLS + 1; i++)
        add(&b, i, i, 8);
    is(chunk(&ck, &b, 1, out), 3, "count: 2 * %d + 1 cells make 3 chunks", PT_BT_CHUNK_MAX_CELLS);
    c0 = qual_of(&out[0]), c2 = qual_of(&out[2]);
    ok(c0.first == 0 && c0.last == PT_BT_CHUNK_MAX_CELLS - 1 &&
           c2.first == 2 * PT_BT_CHUNK_MAX_CELLS && c2.last == c2.first,
       "...of %d, %d and 1", PT_BT_CHUNK_MAX_CELLS, PT_BT_CHUNK_MAX_CELLS);
    row r = {0};
    for (int i = 0; i < 3; i++)
        row_add(&r, out[i].qual, out[i].value);
    size_t calls = 0;
    shown[0] = '\0';
    is(pt_bt_merge_row(&rm, r.c, r.n, (pt_slice){0}, (pt_slice){0}, render, &calls, err,
                       sizeof(err)),
       0, "...which merge back");
    is(calls, 2 * PT_BT_CHUNK_MAX_CELLS + 1, "...into every cell once");

    /* Duplicate offsets in one batch: the later wins; unsorted input comes out sorted. */
    b.n = 0;
    add(&b, 5, 0xa, 8);
    add(&b, 3, 0xb, 8);
    add(&b, 5, 0xc, 8);
    add(&b, 9, 0xd, 8);
    add(&b, 3, 0xe, 8);
    is(chunk(&ck, &b, 1, out), 1, "duplicates: one chunk");
    r.n = 0;
    row_add(&r, out[0].qual, out[0].value);
    is_str(merge(&r, ALL), "3=e;5=c;9=d;", "...holding each offset once, the later write's");
    c = qual_of(&out[0]);
    ok(c.first == 3 && c.last == 9, "...qualifier 3..9");

    /* Values of other lengths (a histogram's) go into chunks as they are. */
    b.n = 0;
    add(&b, 1, 0x1122334455667788ull, 12);
    add(&b, 2, 5, 8);
    is(chunk(&ck, &b, 1, out), 1, "a 12-byte value: one chunk");
    r.n = 0;
    row_add(&r, out[0].qual, out[0].value);
    is_str(merge(&r, ALL), "1=(12 bytes);2=5;", "...read back with its length");
    pt_bt_chunker_free(&ck);
}

/* A chunk of writer w holding offsets q[0..n) with values val + offset. */
static pt_mutation one_chunk(pt_bt_chunker *ck, batch *b, uint64_t w, const uint32_t *q, size_t n,
                             uint64_t val)
{
    pt_mutation out[8];
    b->n = 0;
    for (size_t i = 0; i < n; i++)
        add(b, q[i], val + q[i], 8);
    if (chunk(ck, b, w, out) != 1)
        BAIL_OUT("one chunk expected");
    return out[0];
}

static void test_merge(void)
{
    static batch b1, b2, b3;
    pt_bt_chunker ck = {0};
    uint8_t sq[8][4];
    uint8_t sv[8];
    memset(sv, 0, sizeof(sv));
    sv[7] = 0x55;

    /* Single cells (an older version's) 1, 2, 3; a chunk 2, 4. */
    row r = {0};
    for (uint32_t i = 1; i <= 3; i++) {
        pt_put_be32(sq[i], i);
        row_add(&r, (pt_slice){sq[i], 4}, (pt_slice){sv, 8});
    }
    static const uint32_t c24[] = {2, 4};
    pt_mutation m = one_chunk(&ck, &b1, 5, c24, 2, 0x100);
    row_add(&r, m.qual, m.value);
    is_str(merge(&r, ALL), "1=55;2=102;3=55;4=104;", "a chunk wins over a single cell");

    /* Two writers' chunks overlapping on 3..5, in either order of the row's cells. */
    static const uint32_t a[] = {1, 2, 3, 4, 5}, bq[] = {3, 4, 5, 6, 7};
    pt_mutation ma = one_chunk(&ck, &b2, 10, a, 5, 0xa00);
    pt_mutation mb = one_chunk(&ck, &b3, 20, bq, 5, 0xb00);
    r.n = 0;
    row_add(&r, ma.qual, ma.value);
    row_add(&r, mb.qual, mb.value);
    const char *want = "1=a01;2=a02;3=b03;4=b04;5=b05;6=b06;7=b07;";
    is_str(merge(&r, ALL), want, "overlapping chunks: the greater writer id wins");
    r.n = 0;
    row_add(&r, mb.qual, mb.value);
    row_add(&r, ma.qual, ma.value);
    is_str(merge(&r, ALL), want, "...whatever order the cells come in");
    /* ...and over single cells at the same offsets. */
    row_add(&r, (pt_slice){sq[3], 4}, (pt_slice){sv, 8});
    is_str(merge(&r, ALL), want, "...and over a single cell");

    /* Windows: [4, 6) cuts both; a chunk starting before the window still gives its
     * cells inside it. */
    is_str(merge(&r, 4, 6), "4=b04;5=b05;", "window [4, 6)");
    is_str(merge(&r, 2, 4), "2=a02;3=b03;", "window [2, 4): cells of both chunks");
    is_str(merge(&r, 7, UINT64_MAX), "7=b07;", "window [7, inf): the chunk started at 3");
    is_str(merge(&r, UINT64_MAX, 2), "1=a01;", "window [0, 2)");
    is_str(merge(&r, 8, UINT64_MAX), "", "window past every cell: nothing");

    /* An odd-length bound is a byte string, as for single cells. */
    size_t calls = 0;
    shown[0] = '\0';
    is(pt_bt_merge_row(&rm, r.c, r.n, PT_SLICE_LIT("\x00\x00\x00\x04\x00"),
                       PT_SLICE_LIT("\x00\x00\x00\x06\x01"), render, &calls, err, sizeof(err)),
       0, "a 5-byte range");
    is_str(shown, "5=b05;6=b06;", "...holds offsets (4, 6]");

    /* The callback stops the row. */
    stop_after = 2;
    is_str(merge(&r, ALL), "1=a01;2=a02;", "a callback returning 1 stops after its cell");
    stop_after = 0;

    /* Corrupt chunks. */
    r.n = 0;
    row_add(&r, ma.qual, PT_SLICE_LIT("\x03garbage"));
    is_str(merge(&r, ALL), "ERROR -200", "a chunk that does not decode: PT_EINTERNAL");
    ok(strstr(err, "does not decode") != NULL, "...saying why: %s", err);
    is(PT_EINTERNAL, -200, "(PT_EINTERNAL is -200)");
    uint8_t lie[16];
    pt_bt_chunkqual cq = {2, 5, 1};
    pt_bt_chunk_qual_put(lie, &cq);
    r.n = 0;
    row_add(&r, (pt_slice){lie, 16}, ma.value);
    is_str(merge(&r, ALL), "ERROR -200", "a chunk holding an offset outside first..last");
    ok(strstr(err, "holds offset 00000001") != NULL, "...saying which: %s", err);

    pt_bt_chunker_free(&ck);
}

/* Random rows (chunks of several writers, overlapping or not, and single cells, in
 * Bigtable's qualifier order) merged in random windows against a model of the rules: per
 * offset, the greatest writer id's chunk, else the single cell. Rows whose cells do not
 * overlap take the merge's fast path, the others its sort. */
static int qual_order(const void *x, const void *y)
{
    const pt_bt_cell *a = x, *b = y;
    return pt_slice_cmp(a->qualifier, b->qualifier);
}

static void test_merge_model(void)
{
    enum { ROWS = 400, SPACE = 40 };
    static batch bs[6];
    static uint8_t sq[SPACE][4], sv[SPACE][8];
    pt_bt_chunker ck = {0};
    srand(7);
    size_t fails = 0, disjoint_rows = 0, disjoint_chunked = 0;
    for (int t = 0; t < ROWS; t++) {
        uint64_t val[SPACE]; /* the model: the winner's value per offset, 0 = none */
        uint64_t win[SPACE]; /* ... its writer id + 1, 0 for a single cell */
        memset(val, 0, sizeof(val));
        memset(win, 0, sizeof(win));
        row r = {0};
        int nchunks = rand() % 4, overlap = 0;
        uint64_t covered[SPACE] = {0};
        for (int c = 0; c < nchunks; c++) {
            uint32_t q[SPACE];
            size_t n = 0;
            uint32_t lo = (uint32_t)(rand() % SPACE), len = 1 + (uint32_t)(rand() % 12);
            for (uint32_t o = lo; o < SPACE && o < lo + len; o++)
                if (rand() % 3)
                    q[n++] = o;
            if (n == 0)
                continue;
            uint64_t w = 1 + (uint64_t)(rand() % 1000) * 8 + (uint64_t)c; /* distinct */
            uint64_t base = (uint64_t)(c + 1) << 12;
            pt_mutation m = one_chunk(&ck, &bs[c], w, q, n, base);
            row_add(&r, m.qual, m.value);
            for (size_t i = 0; i < n; i++) {
                overlap |= covered[q[i]] != 0;
                covered[q[i]] = 1;
                if (win[q[i]] < w + 1)
                    win[q[i]] = w + 1, val[q[i]] = base + q[i];
            }
        }
        int singles = rand() % 3 == 0;
        for (uint32_t o = 0; o < SPACE && singles; o++) {
            if (rand() % 8)
                continue;
            pt_put_be32(sq[o], o);
            memset(sv[o], 0, 8);
            sv[o][7] = (uint8_t)(0x10 + o);
            row_add(&r, (pt_slice){sq[o], 4}, (pt_slice){sv[o], 8});
            if (!win[o])
                val[o] = 0x10 + o;
        }
        qsort(r.c, r.n, sizeof(r.c[0]), qual_order);
        /* Overlap by ranges too: a chunk's first..last spanning another cell. */
        for (size_t i = 1; i < r.n; i++) {
            pt_bt_chunkqual a, b;
            if (r.c[i - 1].qualifier.n == 4)
                a.first = a.last = pt_get_be32(r.c[i - 1].qualifier.p);
            else
                pt_bt_chunk_qual_get(r.c[i - 1].qualifier, &a);
            if (r.c[i].qualifier.n == 4)
                b.first = pt_get_be32(r.c[i].qualifier.p);
            else
                pt_bt_chunk_qual_get(r.c[i].qualifier, &b);
            overlap |= b.first <= a.last;
        }
        disjoint_rows += !overlap;
        disjoint_chunked += !overlap && nchunks > 0 && r.n > 0 && r.c[0].qualifier.n == 16;
        uint64_t qs = (uint64_t)(rand() % (SPACE + 2)), qe = qs + (uint64_t)(rand() % SPACE);
        if (rand() % 4 == 0)
            qs = UINT64_MAX;
        if (rand() % 4 == 0)
            qe = UINT64_MAX;
        char want[4096] = "", *o = want;
        for (uint64_t q = 0; q < SPACE; q++)
            if (val[q] && (qs == UINT64_MAX || q >= qs) && (qe == UINT64_MAX || q < qe))
                o += sprintf(o, "%llx=%llx;", (unsigned long long)q, (unsigned long long)val[q]);
        const char *got = merge(&r, qs, qe);
        if (strcmp(got, want) != 0 && fails++ < 3)
            diag("row %d (%zu cells, window %lld..%lld): got %s want %s", t, r.n, (long long)qs,
                 (long long)qe, got, want);
    }
    ok(fails == 0, "%d random rows merged as the rules say (%zu of them disjoint)", ROWS,
       disjoint_rows);
    ok(disjoint_chunked > ROWS / 10 && disjoint_rows < ROWS - ROWS / 10,
       "...both paths taken (%zu disjoint rows, %zu of them starting with a chunk)",
       disjoint_rows, disjoint_chunked);
    pt_bt_chunker_free(&ck);
}

int main(void)
{
    test_layout();
    test_split();
    test_merge();
    test_merge_model();
    pt_bt_rowmerge_free(&rm);
    return done_testing();
}
