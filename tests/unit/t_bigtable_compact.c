/*
 * Compaction's planning and rewrite without the emulator (bigtable_chunk.c,
 * pt_bt_compact_select and pt_bt_compact_row): which cells are folded, rows left alone,
 * the guard, the writer id of the new chunks, a chunk written after the read still
 * winning, the view of every offset kept, and the chunk limits.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "bigtable_int.h"
#include "bytes.h"
#include "error.h"

#define ROW "up,job=a,@0000000000000" /* base 0: a cell's time is its offset */
#define XROW "up,job=a,#0000000000000"
#define SPAN PT_BT_CHUNK_SPAN_MS

enum { MAXC = 8192 };

/* A row's cells as a full read returns them; each cell's qualifier starts a malloc'd
 * block holding its qualifier and value. */
typedef struct row {
    pt_bt_cell c[MAXC];
    size_t n;
} row;

static void cell_free(pt_bt_cell *c)
{
    free((void *)(uintptr_t)c->qualifier.p);
}

static void row_free(row *r)
{
    for (size_t i = 0; i < r->n; i++)
        cell_free(&r->c[i]);
    r->n = 0;
}

static void add_cell(row *r, pt_slice q, pt_slice v, int64_t ts)
{
    uint8_t *m = malloc(q.n + v.n + 1);
    memcpy(m, q.p, q.n);
    if (v.n)
        memcpy(m + q.n, v.p, v.n);
    r->c[r->n++] = (pt_bt_cell){.family = PT_SLICE_LIT(PT_BT_FAMILY),
                                .qualifier = {m, q.n},
                                .value = {m + q.n, v.n},
                                .ts = ts};
}

/* Qualifier order, as the server sends a row. */
static int by_qual(const void *a, const void *b)
{
    return pt_slice_cmp(((const pt_bt_cell *)a)->qualifier, ((const pt_bt_cell *)b)->qualifier);
}

static void sort_row(row *r)
{
    qsort(r->c, r->n, sizeof(r->c[0]), by_qual);
}

static void single(row *r, uint32_t off, const char *val)
{
    uint8_t q[4];
    pt_put_be32(q, off);
    add_cell(r, (pt_slice){q, 4}, pt_slice_str(val), (int64_t)off * 1000);
}

/* One chunk cell of writer w holding offsets offs[0..n) with values "<tag><offset>". */
static void chunk(row *r, uint64_t w, const char *tag, const uint32_t *offs, size_t n)
{
    static pt_mutation m[MAXC], out[MAXC];
    static const pt_mutation *v[MAXC];
    static uint8_t q[MAXC][4];
    static char val[MAXC][16];
    for (size_t i = 0; i < n; i++) {
        pt_put_be32(q[i], offs[i]);
        snprintf(val[i], sizeof(val[i]), "%s%u", tag, (unsigned)offs[i]);
        m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                             .row = PT_SLICE_LIT(ROW),
                             .qual = {q[i], 4},
                             .value = pt_slice_str(val[i]),
                             .version_us = (int64_t)offs[i] * 1000};
        v[i] = &m[i];
    }
    pt_bt_chunker ck = {0};
    long made = pt_bt_chunk_row(&ck, v, n, w, out);
    for (long i = 0; i < made; i++)
        add_cell(r, out[i].qual, out[i].value, out[i].version_us);
    pt_bt_chunker_free(&ck);
}

static char shown[1 << 20];

static int render(void *ud, pt_slice q, pt_slice v)
{
    (void)ud;
    size_t n = strlen(shown);
    snprintf(shown + n, sizeof(shown) - n, "%x=%.*s;", (unsigned)pt_get_be32(q.p), (int)v.n,
             (const char *)v.p);
    return 0;
}

/* The merged row as a scan delivers it. */
static const char *view(const row *r)
{
    static pt_bt_rowmerge rm;
    char err[160];
    shown[0] = '\0';
    if (pt_bt_merge_row(&rm, r->c, r->n, (pt_slice){0}, (pt_slice){0}, render, NULL, err,
                        sizeof(err)) != 0)
        return "ERROR";
    pt_bt_rowmerge_free(&rm);
    return shown;
}

/* r after the mutations m[0..n) as Bigtable applies one entry: in order. */
static void apply(row *r, const pt_mutation *m, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < r->n; j++) {
            if (!pt_slice_eq(r->c[j].qualifier, m[i].qual))
                continue;
            if (pt_bt_is_delete(&m[i]) && r->c[j].ts >= -m[i].version_us)
                continue;        /* a newer version than the delete reaches */
            cell_free(&r->c[j]); /* a delete's qualifier may point here: stop looking */
            r->c[j] = r->c[--r->n];
            break;
        }
        if (!pt_bt_is_delete(&m[i]))
            add_cell(r, m[i].qual, m[i].value, m[i].version_us);
    }
    sort_row(r);
}

static pt_bt_chunkqual qual_of(pt_slice q)
{
    pt_bt_chunkqual c = {0xdeadbeef, 0, 0};
    pt_bt_chunk_qual_get(q, &c);
    return c;
}

static uint8_t fold[MAXC];

/* ---- cases ---- */

static void test_select(void)
{
    static row r;
    const uint32_t a[] = {10, 15, 20}, b[] = {30, 40}, live[] = {95, 105};
    single(&r, 1, "s1");
    single(&r, 2, "s2");
    chunk(&r, 5, "a", a, 3);
    chunk(&r, 7, "b", b, 2);
    chunk(&r, 9, "l", live, 2);
    single(&r, 101, "s101");
    sort_row(&r);
    size_t n = pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, 100, fold);
    is(n, 4, "select: 2 single cells and 2 chunks older than the guard");
    size_t live_folded = 0;
    for (size_t i = 0; i < r.n; i++)
        if (fold[i] && (r.c[i].qualifier.n == 4 ? pt_get_be32(r.c[i].qualifier.p) >= 100
                                                : qual_of(r.c[i].qualifier).last >= 100))
            live_folded++;
    is(live_folded, 0, "...none with a sample at or after the guard");
    is(pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, 31, fold), 3,
       "a guard inside a chunk leaves the chunk");
    is(pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, 2, fold), 0,
       "one cell older than the guard: nothing to fold");
    is(pt_bt_compact_select(PT_SLICE_LIT(XROW), r.c, r.n, 1000, fold), 0,
       "an exemplar row is never folded");
    is(pt_bt_compact_select(PT_SLICE_LIT("up,job=a"), r.c, r.n, 1000, fold), 0,
       "a row without a base (not a data row) is never folded");
    row_free(&r);

    /* Two chunks further apart than one spans make two chunks again: not worth it. */
    const uint32_t c1[] = {0, 5}, c2[] = {SPAN + 10, SPAN + 20};
    chunk(&r, 1, "x", c1, 2);
    chunk(&r, 2, "y", c2, 2);
    sort_row(&r);
    is(pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, 2 * SPAN, fold), 0,
       "two chunks a span apart are not folded (it would not cut the cells)");
    single(&r, 7, "s7");
    sort_row(&r);
    is(pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, 2 * SPAN, fold), 3,
       "...with a single cell beside the first they are");
    row_free(&r);
}

/* Builds the rewrite of r at guard, applies it; returns the mutations' count. */
static long rewrite(row *r, int64_t guard, pt_bt_compactor *cp, size_t *nchunks, pt_mutation **m)
{
    size_t nfold = pt_bt_compact_select(PT_SLICE_LIT(ROW), r->c, r->n, guard, fold);
    char err[160] = "";
    if (!nfold)
        return 0;
    return pt_bt_compact_row(cp, PT_SLICE_LIT(ROW), r->c, r->n, fold, nfold, m, nchunks, err,
                             sizeof(err));
}

static void test_rewrite(void)
{
    static row r, late;
    pt_bt_compactor cp = {0};
    const uint32_t a[] = {10, 15, 20}, b[] = {12, 30}, k[] = {15, 200};
    single(&r, 1, "s1");
    single(&r, 12, "s12"); /* under chunk b: b wins */
    chunk(&r, 5, "a", a, 3);
    chunk(&r, 7, "b", b, 2);
    chunk(&r, 6, "k", k, 2); /* kept (200 is past the guard); beats a at 15 */
    sort_row(&r);
    char before[4096];
    snprintf(before, sizeof(before), "%s", view(&r));
    is_str(before, "1=s1;a=a10;c=b12;f=k15;14=a20;1e=b30;c8=k200;", "the row as read");
    size_t nchunks = 0;
    pt_mutation *m = NULL;
    long nm = rewrite(&r, 100, &cp, &nchunks, &m);
    ok(nm > 0, "rewrite: %ld mutations", nm);
    is(nchunks, 1, "...one new chunk");
    size_t ndel = 0, sets_after_delete = 1;
    for (long i = 0; i < nm; i++) {
        if (pt_bt_is_delete(&m[i]))
            ndel++;
        else if (i < (long)ndel)
            sets_after_delete = 0;
    }
    is(ndel, 4, "...deletes the 4 folded cells");
    ok(sets_after_delete && !pt_bt_is_delete(&m[nm - 1]), "...the deletes come first");
    pt_bt_chunkqual cq = qual_of(m[nm - 1].qual);
    is(cq.writer, 7, "the new chunk takes the greatest writer id of those it replaces");
    is(cq.first, 1, "...first offset 1");
    is(cq.last, 30, "...last offset 30");
    ok(m[nm - 1].version_us >= 30000, "...version at least its last sample's");
    apply(&r, m, (size_t)nm);
    is(r.n, 2, "the row holds 2 cells (the kept chunk and the new one), 5 before");
    is_str(view(&r), before, "every offset reads as before (the kept chunk still wins at 15)");

    nm = rewrite(&r, 100, &cp, &nchunks, &m);
    is(nm, 0, "a second rewrite finds nothing to do");

    /* A chunk written after the read, and one of a later write applied after the rewrite:
     * both have greater writer ids, and win. */
    row_free(&r);
    single(&r, 1, "s1");
    single(&r, 2, "s2");
    chunk(&r, 3, "a", a, 3);
    sort_row(&r);
    nm = rewrite(&r, 100, &cp, &nchunks, &m);
    ok(nm > 0, "planned and built");
    const uint32_t l[] = {2, 15};
    chunk(&late, 1000, "late", l, 2);
    add_cell(&r, late.c[0].qualifier, late.c[0].value, late.c[0].ts);
    sort_row(&r);
    apply(&r, m, (size_t)nm);
    is_str(view(&r), "1=s1;2=late2;a=a10;f=late15;14=a20;",
           "a chunk written between read and rewrite still wins");
    row_free(&late);
    row_free(&r);

    /* The new chunk's qualifier equals one being deleted: the set survives. */
    const uint32_t e[] = {10, 20};
    chunk(&r, 4, "e", e, 2);
    single(&r, 20, "s20");
    sort_row(&r);
    snprintf(before, sizeof(before), "%s", view(&r));
    nm = rewrite(&r, 100, &cp, &nchunks, &m);
    ok(nm == 3 && (pt_slice_eq(m[0].qual, m[2].qual) || pt_slice_eq(m[1].qual, m[2].qual)),
       "the new chunk's qualifier equals a deleted one's");
    apply(&r, m, (size_t)nm);
    is(r.n, 1, "...one cell left");
    is_str(view(&r), before, "...reading as before");
    row_free(&r);
    pt_bt_compactor_free(&cp);
}

static void test_limits(void)
{
    static row r;
    pt_bt_compactor cp = {0};
    /* 5000 single cells a second apart, then 30 cells an hour apart over 30 h. */
    for (uint32_t i = 0; i < 5000; i++) {
        char v[16];
        snprintf(v, sizeof(v), "v%u", (unsigned)i);
        single(&r, i * 1000, v);
    }
    for (uint32_t i = 0; i < 30; i++)
        single(&r, 10000000 + i * 3600000u, "h");
    sort_row(&r);
    char *before = strdup(view(&r));
    size_t nchunks;
    pt_mutation *m;
    long nm = rewrite(&r, (int64_t)1 << 33, &cp, &nchunks, &m);
    ok(nm > 0, "limits: 5030 single cells rewritten");
    int within = 1;
    for (long i = 0; i < nm; i++) {
        if (pt_bt_is_delete(&m[i]))
            continue;
        pt_bt_chunkqual cq = qual_of(m[i].qual);
        pt_cellchunk ch;
        pt_vcells vc = {0};
        if (pt_cellchunk_parse(m[i].value.p, m[i].value.n, &ch) != 0 ||
            pt_cellchunk_cells(&ch, &vc) != 0 || vc.n > PT_BT_CHUNK_MAX_CELLS ||
            cq.last - cq.first > SPAN)
            within = 0;
        pt_vcells_free(&vc);
    }
    ok(within, "...every chunk within %d cells and the span", PT_BT_CHUNK_MAX_CELLS);
    /* 2048 + 2048 cells by count; the last 904 and the first 3 hourly ones within a span;
     * the other 27 hourly ones 5 to a span (4 h). */
    is(nchunks, 9, "...into 9 chunks");
    apply(&r, m, (size_t)nm);
    is(r.n, nchunks, "the row holds just the chunks");
    is_str(view(&r), before, "...reading as before");
    is(pt_bt_compact_select(PT_SLICE_LIT(ROW), r.c, r.n, (int64_t)1 << 33, fold), 0,
       "chunks cut at 2,048 cells within one span are not picked again");
    free(before);
    row_free(&r);
    pt_bt_compactor_free(&cp);
}

int main(void)
{
    test_select();
    test_rewrite();
    test_limits();
    done_testing();
}
