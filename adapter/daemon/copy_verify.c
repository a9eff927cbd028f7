/* `promtable copy --verify` (copy.h): both stores' copied rows compared, a slice of source
 * rows at a time against the destination over the same key range. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "clock.h"
#include "copy_int.h"
#include "error.h"
#include "log.h"

typedef struct vrow {
    size_t off, n; /* key in keys */
    uint64_t cells, sum;
} vrow;

typedef struct verifier {
    const pt_copy_opts *o;
    pt_table table;
    int64_t bucket_ms;
    pt_buf keys;          /* the slice's source row keys */
    vrow *rows;           /* VERIFY_ROWS + 1 */
    size_t n, seen, next; /* rows kept, rows scanned, next to compare */
    pt_buf row;           /* the destination row being summed */
    vrow acc;
    int has_row;
    size_t mismatches;
    FILE *out;
    progress pr;
} verifier;

static uint64_t cell_sum(uint64_t sum, pt_slice qual, pt_slice value)
{
    uint64_t h = XXH3_64bits_withSeed(value.p, value.n, XXH3_64bits(qual.p, qual.n));
    return sum * 0x9E3779B97F4A7C15ull + h;
}

static void mismatch(verifier *v, pt_slice row, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void mismatch(verifier *v, pt_slice row, const char *fmt, ...)
{
    if (v->mismatches++ >= SHOW_MAX)
        return;
    char q[400], what[160];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    fprintf(v->out, "mismatch: %s row %s: %s\n", pt_copy_table_name[v->table],
            pt_log_quote(q, sizeof(q), (const char *)row.p, row.n < 300 ? row.n : 300), what);
}

/* Whether row is the row v->row holds. */
static int same_row(const verifier *v, pt_slice row)
{
    return v->has_row && pt_slice_eq(row, (pt_slice){pt_buf_data(&v->row), pt_buf_used(&v->row)});
}

/* v->row := row. */
static int take_row(verifier *v, pt_slice row)
{
    v->has_row = 1;
    pt_buf_reset(&v->row);
    return pt_buf_append(&v->row, row.p, row.n);
}

static int on_source_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    verifier *v = ud;
    vrow *last = v->n ? &v->rows[v->n - 1] : NULL;
    pt_slice lk = last ? (pt_slice){pt_buf_data(&v->keys) + last->off, last->n} : (pt_slice){0};
    if (!same_row(v, row)) {
        v->seen++;
        int rv = take_row(v, row);
        if (rv)
            return rv;
    }
    if (!pt_copy_wanted(v->o, v->table, v->bucket_ms, row, qual, value))
        return 0;
    if (!last || !pt_slice_eq(row, lk)) {
        if (v->n == VERIFY_ROWS)
            return PT_ETOOLARGE; /* a series with more rows than a slice holds */
        last = &v->rows[v->n++];
        *last = (vrow){.off = pt_buf_used(&v->keys), .n = row.n};
        int rv = pt_buf_append(&v->keys, row.p, row.n);
        if (rv)
            return rv;
    }
    last->cells++;
    last->sum = cell_sum(last->sum, qual, value);
    return 0;
}

static pt_slice vrow_key(const verifier *v, const vrow *r)
{
    return (pt_slice){pt_buf_data(&v->keys) + r->off, r->n};
}

/* The slice's source rows before key d (every one left when d is NULL): the destination
 * has none of them. */
static void missing_before(verifier *v, const pt_slice *d)
{
    for (; v->next < v->n; v->next++) {
        vrow *s = &v->rows[v->next];
        pt_slice k = vrow_key(v, s);
        if (d && pt_slice_cmp(k, *d) >= 0)
            break;
        v->pr.rows++;
        v->pr.cells += s->cells;
        mismatch(v, k, "missing at the destination (%llu cells at the source)",
                 (unsigned long long)s->cells);
    }
}

/* Compares the finished destination row in v->row / v->acc with the source rows. */
static void compare_row(verifier *v)
{
    pt_slice d = {pt_buf_data(&v->row), pt_buf_used(&v->row)};
    if (v->acc.cells == 0)
        return;
    missing_before(v, &d);
    if (v->next == v->n || !pt_slice_eq(vrow_key(v, &v->rows[v->next]), d)) {
        mismatch(v, d, "only at the destination (%llu cells)", (unsigned long long)v->acc.cells);
        return;
    }
    vrow *s = &v->rows[v->next++];
    v->pr.rows++;
    v->pr.cells += s->cells;
    if (s->cells != v->acc.cells)
        mismatch(v, d, "%llu cells at the source, %llu at the destination",
                 (unsigned long long)s->cells, (unsigned long long)v->acc.cells);
    else if (s->sum != v->acc.sum)
        mismatch(v, d, "%llu cells on both sides, but their qualifiers or values differ",
                 (unsigned long long)s->cells);
}

static int on_dest_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    verifier *v = ud;
    if (!same_row(v, row)) {
        if (v->has_row)
            compare_row(v);
        v->acc = (vrow){0};
        int rv = take_row(v, row);
        if (rv)
            return rv;
    }
    if (!pt_copy_wanted(v->o, v->table, v->bucket_ms, row, qual, value))
        return 0;
    v->acc.cells++;
    v->acc.sum = cell_sum(v->acc.sum, qual, value);
    return 0;
}

/* Scans ranges of the destination, comparing each row with the source rows kept in v,
 * then reports the source rows it did not have. */
static int compare_dest(verifier *v, side *dst, const pt_row_range *r, size_t nr)
{
    v->has_row = 0;
    v->acc = (vrow){0};
    int rv = pt_copy_scan_ranges(dst, v->o, v->table, r, nr, 0, on_dest_cell, v);
    if (rv != 0) {
        fprintf(v->out, "verify: reading %s failed: %s\n", dst->path, pt_strerror(rv));
        return rv;
    }
    if (v->has_row)
        compare_row(v);
    missing_before(v, NULL);
    return 0;
}

static int verify_table(verifier *v, side *src, side *dst)
{
    pt_copy_opts whole = *v->o;
    whole.window = 0;
    uint8_t from[PT_MAX_ROW_KEY];
    size_t from_n = 0;
    int has_from = 0, rv = 0;
    for (;;) {
        v->n = v->seen = v->next = 0;
        v->has_row = 0;
        pt_buf_reset(&v->keys);
        /* No qualifier range here: a row with no cell in it might still count toward the
         * row limit, and then the slice would seem to be the last. */
        rv = pt_copy_scan_from(src, &whole, v->table, from, from_n, has_from, VERIFY_ROWS,
                               on_source_cell, v);
        if (rv != 0) {
            fprintf(v->out, "verify: reading %s failed: %s\n", src->path, pt_strerror(rv));
            return rv;
        }
        int last = v->seen < VERIFY_ROWS;
        /* The destination over the same keys: (from, the slice's last row], or to the end. */
        uint8_t end[PT_MAX_ROW_KEY + 1];
        size_t end_n = pt_buf_used(&v->row);
        memcpy(end, pt_buf_data(&v->row), end_n);
        end[end_n++] = 0;
        uint8_t start[PT_MAX_ROW_KEY + 1];
        size_t start_n = 0;
        if (has_from) {
            memcpy(start, from, from_n);
            start[from_n] = 0;
            start_n = from_n + 1;
        }
        pt_row_range r = {{start, start_n}, {end, last ? 0 : end_n}};
        if ((rv = compare_dest(v, dst, &r, 1)) != 0)
            return rv;
        pt_copy_progress_show(&v->pr, pt_copy_table_name[v->table], 0);
        if (last)
            return 0;
        from_n = end_n - 1;
        memcpy(from, end, from_n);
        has_from = 1;
    }
}

/* The points rows of every selected series, series by series (their index rows are the
 * destination's own, written by its index code, and not compared). */
static int verify_matched(verifier *v, side *src, side *dst, const picked *ps, pt_arena *tmp)
{
    v->table = PT_TABLE_POINTS;
    int rv = 0;
    for (size_t i = 0; i < ps->n && rv == 0; i++) {
        pt_slice sid = ps->v[i].sid;
        pt_arena_reset(tmp);
        uint8_t *keys = pt_arena_alloc(tmp, 4 * (sid.n + 2));
        if (!keys)
            return PT_ENOMEM;
        pt_row_range sr[2];
        pt_copy_series_ranges(sid, keys, sr);
        v->n = v->seen = v->next = 0;
        v->has_row = 0;
        pt_buf_reset(&v->keys);
        if ((rv = pt_copy_scan_ranges(src, v->o, v->table, sr, 2, 0, on_source_cell, v)) != 0) {
            fprintf(v->out, "verify: reading %s failed: %s\n", src->path, pt_strerror(rv));
            return rv;
        }
        rv = compare_dest(v, dst, sr, 2);
        pt_copy_progress_show(&v->pr, "series", 0);
    }
    return rv;
}

int pt_copy_verify(const pt_copy_opts *o, side *src, side *dst, const picked *ps, pt_arena *tmp,
                   FILE *out)
{
    verifier v = {.o = o,
                  .bucket_ms = src->cfg.index_bucket_ms,
                  .out = out,
                  .pr = {.tty = isatty(2), .what = "verify", .t0 = pt_mono_ms()}};
    pt_buf_init(&v.keys, (size_t)VERIFY_ROWS * PT_MAX_ROW_KEY);
    pt_buf_init(&v.row, PT_MAX_ROW_KEY + 1);
    v.rows = calloc(VERIFY_ROWS + 1, sizeof(*v.rows));
    int rv = v.rows ? 0 : PT_ENOMEM;
    if (rv == 0 && o->nmatch) {
        rv = verify_matched(&v, src, dst, ps, tmp);
        pt_copy_progress_show(&v.pr, "series", 1);
    }
    for (int t = 0; t < PT_TABLE_COUNT && rv == 0 && !o->nmatch; t++) {
        v.table = (pt_table)t;
        rv = verify_table(&v, src, dst);
        pt_copy_progress_show(&v.pr, pt_copy_table_name[t], 1);
    }
    if (rv == 0) {
        fprintf(out, "verify: %llu rows, %llu cells compared, %zu mismatches%s\n",
                (unsigned long long)v.pr.rows, (unsigned long long)v.pr.cells, v.mismatches,
                v.mismatches > SHOW_MAX ? " (the first 20 shown)" : "");
    }
    free(v.rows);
    pt_buf_free(&v.keys);
    pt_buf_free(&v.row);
    return rv != 0 ? rv : v.mismatches ? 1 : 0;
}
