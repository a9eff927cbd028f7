/*
 * `promtable check`: whether the index and the data agree, on any backend, through full
 * scans of both tables (docs/operations.md, "Checking a store"), plus the backend's own
 * check of its files (pt_backend_ops.verify).
 *
 *   1. index scan: every cell goes into a set of (row, qualifier) hashes; every series row
 *      ==<ref>,@<day>,<sid> into a set of (sid, day);
 *   2. points scan: each row's samples fall into index buckets (day = t - t mod
 *      index.bucket); each (sid, day) must have its series row;
 *   3. series rows again: each must list a series with samples in its bucket or the one
 *      before (the write path indexes the next bucket ahead in a bucket's last 24th), its
 *      reference must be the hash of its sid, and the list cells a read finds it by (metric
 *      list, postings, values rows) must all be there.
 * With storage.retention, buckets the retention may have emptied in one table and not yet
 * in the other are not compared.
 *
 * Memory: 16 bytes per index cell, per series row and per (series, bucket) with samples.
 */
#include "check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "bytes.h"
#include "error.h"
#include "index.h"
#include "ha.h"
#include "log.h"
#include "meta.h"
#include "rollup.h"
#include "rowkey.h"
#include "tenant.h"

#define SHOW_MAX 20 /* problems printed; all are counted */

typedef struct checker {
    FILE *out;
    pt_backend *be;
    int64_t bucket; /* index.bucket */
    int64_t cutoff; /* now - storage.retention; INT64_MIN without one */
    pt_keyset cells;  /* every index cell: (row, qualifier) */
    pt_keyset series; /* (sid, day) of every series row */
    pt_keyset data;   /* (sid, day) with samples */
    size_t problems;
    size_t index_cells, series_rows, points_rows, samples, exemplars, not_compared;
    pt_buf prev_row;
    int64_t prev_day;
    size_t key_limit; /* of the space being compared (rowkey.h) */
    pt_arena a;
    int shared;     /* checking the keys of no tenant: the tenants' rows are left out */
} checker;

static void problem(checker *ck, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(checker *ck, const char *fmt, ...)
{
    if (ck->problems++ >= SHOW_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("problem: ", ck->out);
    vfprintf(ck->out, fmt, ap);
    fputc('\n', ck->out);
    va_end(ap);
}

/* The backend's findings (pt_verify_fn). */
static void on_verify(void *ud, int damage, const char *msg)
{
    checker *ck = ud;
    if (damage)
        problem(ck, "%s", msg);
    else
        fprintf(ck->out, "%s\n", msg);
}

static const char *quote(char *buf, size_t cap, pt_slice s)
{
    return pt_log_quote(buf, cap < 300 ? cap : 300, (const char *)s.p, s.n);
}

static pt_index_key cell_key(pt_slice row, pt_slice qual)
{
    return pt_index_key_of(row, (int64_t)XXH3_64bits(qual.p, qual.n));
}

/* A series row, parsed. */
typedef struct srow {
    const uint8_t *ref16;
    uint64_t ref;
    int64_t day;
    pt_slice sid;
    pt_label *labels;
    size_t n;
} srow;

/* 1 with *sr filled for a series row, 0 for another row (the format marker, metadata
 * rows, HA lease rows, the exemplar marks, the compaction lease, the roll-ups' watermarks),
 * or < 0 when it does not parse (reported). Allocates
 * from ck->a. */
static int parse_series_row(checker *ck, pt_slice row, pt_slice value, srow *sr)
{
    static const char format_row[] = "==format", meta[] = PT_META_ROW_PREFIX,
                      lease[] = PT_HA_LEASE_PREFIX, marks[] = PT_EXEMPLAR_MARK_ROW,
                      compact[] = PT_COMPACT_LEASE_ROW, rollup[] = PT_ROLLUP_ROW;
    char q[320];
    if (row.n < 2 || memcmp(row.p, "==", 2) != 0 ||
        (row.n == sizeof(format_row) - 1 && memcmp(row.p, format_row, row.n) == 0) ||
        (row.n == sizeof(marks) - 1 && memcmp(row.p, marks, row.n) == 0) ||
        (row.n == sizeof(compact) - 1 && memcmp(row.p, compact, row.n) == 0) ||
        (row.n == sizeof(rollup) - 1 && memcmp(row.p, rollup, row.n) == 0) ||
        (row.n >= sizeof(meta) - 1 && memcmp(row.p, meta, sizeof(meta) - 1) == 0) ||
        (row.n >= sizeof(lease) - 1 && memcmp(row.p, lease, sizeof(lease) - 1) == 0))
        return 0;
    const uint8_t *p = row.p;
    int64_t day = 0;
    int ok = row.n > PT_INDEX_SERIES_PREFIX_LEN && pt_ref_parse(p + 2, &sr->ref) == 0 &&
             p[18] == ',' && p[19] == '@' && p[20 + PT_BASE_DIGITS] == ',';
    for (size_t i = 20; ok && i < 20 + PT_BASE_DIGITS; i++) {
        ok = p[i] >= '0' && p[i] <= '9';
        day = day * 10 + (p[i] - '0');
    }
    if (!ok) {
        problem(ck, "index row %s: a series row (==<ref>,@<day>,<sid>) that does not parse",
                quote(q, sizeof(q), row));
        return -1;
    }
    sr->ref16 = p + 2;
    sr->day = day;
    sr->sid = (pt_slice){p + PT_INDEX_SERIES_PREFIX_LEN, row.n - PT_INDEX_SERIES_PREFIX_LEN};
    long n;
    if (value.n) {
        /* A digest or hashed sid: the labels are in the cell, the sid follows from them. */
        uint8_t *copy = pt_arena_alloc(&ck->a, value.n);
        if (!copy)
            return PT_ENOMEM;
        memcpy(copy, value.p, value.n);
        n = pt_labels_decode(&ck->a, (pt_slice){copy, value.n}, &sr->labels);
        if (n > 0 && pt_series_id(&ck->a, sr->labels, (size_t)n, ck->key_limit, &sr->sid) != 0)
            return PT_ENOMEM;
    } else {
        n = pt_series_id_parse(&ck->a, sr->sid, &sr->labels);
    }
    if (n <= 0) {
        problem(ck, "index row %s: the series row's labels do not parse (%s)",
                quote(q, sizeof(q), row), value.n ? "cell" : "sid");
        return -1;
    }
    sr->n = (size_t)n;
    return 1;
}

static int on_index_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    checker *ck = ud;
    srow sr;
    ck->index_cells++;
    int rv = pt_keyset_put(&ck->cells, cell_key(row, qual));
    if (rv >= 0 && (rv = parse_series_row(ck, row, value, &sr)) == 1) {
        ck->series_rows++;
        rv = pt_keyset_put(&ck->series, pt_index_key_of(sr.sid, sr.day));
    }
    pt_arena_reset(&ck->a);
    return rv == PT_ENOMEM ? rv : 0;
}

static int on_points_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    checker *ck = ud;
    char q[320];
    int new_row = pt_slice_cmp(row, (pt_slice){ck->prev_row.p, ck->prev_row.len}) != 0;
    if (new_row) {
        ck->points_rows++;
        pt_buf_reset(&ck->prev_row);
        if (pt_buf_append(&ck->prev_row, row.p, row.n) != 0)
            return PT_ENOMEM;
        ck->prev_day = -1;
    }
    /* An exemplar row (<sid>,#<base>): its cells' times are in their values, and the
     * write path indexes the series for them as for samples. */
    int64_t xbase = pt_row_key_base_marked(row, '#');
    int64_t base = xbase >= 0 ? xbase : pt_points_row_base(row.p, row.n);
    if (base < 0 || qual.n != PT_QUAL_LEN || (xbase >= 0 && value.n < 12)) {
        if (new_row || base >= 0)
            problem(ck, "points row %s: not a data row (<sid>,@<base>, 4-byte qualifiers) "
                    "nor an exemplar row (<sid>,#<base>, values of 12 bytes or more)",
                    quote(q, sizeof(q), row));
        return 0;
    }
    if (xbase >= 0)
        ck->exemplars++;
    else
        ck->samples++;
    int64_t t = base + pt_get_be32(xbase >= 0 ? value.p : qual.p), day = t - t % ck->bucket;
    if (day == ck->prev_day)
        return 0;
    ck->prev_day = day;
    if (day + ck->bucket - 1 < ck->cutoff) {
        ck->not_compared++;
        return 0;
    }
    pt_slice sid = {row.p, row.n - 2 - PT_BASE_DIGITS};
    pt_index_key k = pt_index_key_of(sid, day);
    if (!pt_keyset_has(&ck->series, k)) {
        uint8_t ref[PT_REF_HEX + 1] = {0};
        pt_ref_hex(ref, pt_series_ref(sid, 0));
        problem(ck,
                "points row %s has samples in index bucket %013lld (t=%lld) but no series "
                "row ==%s,@%013lld,...: reads cannot find them",
                quote(q, sizeof(q), row), (long long)day, (long long)t, (const char *)ref,
                (long long)day);
    }
    return pt_keyset_put(&ck->data, k) == PT_ENOMEM ? PT_ENOMEM : 0;
}

/* Whether the index cell row (key bytes k..e) with qualifier qual, or else alt (when
 * alt.n), exists; reports it. */
static void want_cell(checker *ck, pt_slice srow_key, const uint8_t *k, const uint8_t *e,
                      pt_slice qual, pt_slice alt, const char *what)
{
    pt_slice row = {k, (size_t)(e - k)};
    pt_index_key key = cell_key(row, qual);
    if (pt_keyset_has(&ck->cells, key) || (alt.n && pt_keyset_has(&ck->cells, cell_key(row, alt))))
        return;
    pt_keyset_put(&ck->cells, key); /* reported once, not for every series it lists */
    char q1[320], q2[320];
    problem(ck, "series row %s: its %s cell %s is missing: reads by that label miss the series",
            quote(q1, sizeof(q1), srow_key), what, quote(q2, sizeof(q2), row));
}

static int on_series_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual;
    checker *ck = ud;
    srow sr;
    char q[320];
    int rv = parse_series_row(ck, row, value, &sr);
    if (rv != 1)
        goto out;
    rv = 0;
    if (pt_series_ref(sr.sid, 0) != sr.ref)
        problem(ck, "series row %s: its reference is not the hash of its series",
                quote(q, sizeof(q), row));
    if (sr.day - ck->bucket < ck->cutoff)
        ck->not_compared++;
    else if (!pt_keyset_has(&ck->data, pt_index_key_of(sr.sid, sr.day)) &&
             !pt_keyset_has(&ck->data, pt_index_key_of(sr.sid, sr.day - ck->bucket)))
        problem(ck,
                "series row %s: the series has no samples in its bucket (nor the one "
                "before): its data rows are missing",
                quote(q, sizeof(q), row));
    /* The cells that list it: under its metric or each label (qualifier: the label mask;
     * under its metric the mask and the sid when the series row holds the sid plainly, or
     * the mask alone as stores written before that have it), and the values rows
     * (qualifier "l"). */
    uint64_t mask = 0;
    for (size_t i = 0; i < sr.n; i++)
        mask = pt_label_mask_add(mask, sr.labels[i].name, sr.labels[i].value);
    size_t sid_n = value.n ? 0 : sr.sid.n;
    uint8_t *mq = pt_arena_alloc(&ck->a, 8 + sid_n);
    if (!mq) {
        rv = PT_ENOMEM;
        goto out;
    }
    pt_put_be64(mq, mask);
    memcpy(mq + 8, sr.sid.p, sid_n);
    pt_slice m8 = {mq, 8}, none = {mq, 0};
    static const uint8_t l = 'l';
    for (size_t i = 0; i < sr.n; i++) {
        const pt_label *lb = &sr.labels[i];
        uint8_t *k =
            pt_arena_alloc(&ck->a, PT_INDEX_PREFIX_MAX(lb->name.n, lb->value.n) + PT_REF_HEX);
        if (!k) {
            rv = PT_ENOMEM;
            goto out;
        }
        int is_name = lb->name.n == 8 && memcmp(lb->name.p, "__name__", 8) == 0;
        uint8_t *e = is_name ? pt_index_metric_prefix(k, lb->value, sr.day)
                             : pt_index_posting_prefix(k, lb->name, lb->value, sr.day);
        memcpy(e, sr.ref16, PT_REF_HEX);
        if (is_name)
            want_cell(ck, row, k, e + PT_REF_HEX, (pt_slice){mq, 8 + sid_n}, sid_n ? m8 : none,
                      "metric list");
        else
            want_cell(ck, row, k, e + PT_REF_HEX, m8, none, "postings");
        e = pt_index_part(pt_index_values_prefix(k, lb->name, sr.day), lb->value);
        want_cell(ck, row, k, e, (pt_slice){&l, 1}, none, "values");
    }
out:
    pt_arena_reset(&ck->a);
    return rv == PT_ENOMEM ? rv : 0;
}

/* One whole-table scan (or the rows in [start, end)). Over the keys of no tenant, a
 * whole-table scan leaves out the tenants' rows: [01, 02) (tenant.h). */
static int scan(checker *ck, pt_table table, const char *start, const char *end, pt_cell_fn fn)
{
    static const uint8_t mark[2] = {PT_TENANT_MARK, PT_TENANT_MARK + 1};
    pt_row_range r[2] = {{{(const uint8_t *)start, strlen(start)},
                          {(const uint8_t *)end, strlen(end)}}};
    pt_scan s = {.table = table, .ranges = r, .nranges = 1};
    if (ck->shared && !start[0] && !end[0]) {
        r[0].end = (pt_slice){mark, 1};
        r[1] = (pt_row_range){{mark + 1, 1}, {0}};
        s.nranges = 2;
    }
    return pt_backend_scan(ck->be, &s, fn, ck);
}

static int compare(checker *ck)
{
    int rv = scan(ck, PT_TABLE_INDEX, "", "", on_index_cell);
    if (rv != 0)
        return rv;
    fprintf(ck->out, "index: %zu cells, %zu series rows (series x bucket)\n", ck->index_cells,
            ck->series_rows);
    if ((rv = scan(ck, PT_TABLE_POINTS, "", "", on_points_cell)) != 0)
        return rv;
    fprintf(ck->out, "points: %zu rows, %zu samples, %zu exemplars\n", ck->points_rows,
            ck->samples, ck->exemplars);
    /* '>' follows '=': [==, =>) is every series row. */
    if ((rv = scan(ck, PT_TABLE_INDEX, "==", "=>", on_series_row)) != 0)
        return rv;
    if (ck->not_compared)
        fprintf(ck->out,
                "retention: %zu (series, bucket) pairs near or past the retention "
                "cutoff not compared\n",
                ck->not_compared);
    return 0;
}

/* The least row key (its first bytes, as many as key holds) that the scans of [from, 02)
 * in each table find; found = 0 when there is none. */
typedef struct first_key {
    uint8_t key[PT_TENANT_PREFIX_MAX + 1];
    size_t n;
    int found;
} first_key;

static int on_first(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    first_key *f = ud;
    pt_slice k = {row.p, row.n < sizeof(f->key) ? row.n : sizeof(f->key)};
    if (!f->found || pt_slice_cmp(k, (pt_slice){f->key, f->n}) < 0) {
        memcpy(f->key, k.p, k.n);
        f->n = k.n;
        f->found = 1;
    }
    return 1;
}

static void space_reset(checker *ck)
{
    pt_keyset_free(&ck->cells);
    pt_keyset_free(&ck->series);
    pt_keyset_free(&ck->data);
    ck->index_cells = ck->series_rows = ck->points_rows = ck->samples = ck->exemplars = 0;
    ck->not_compared = 0;
    pt_buf_reset(&ck->prev_row);
    ck->prev_day = 0;
}

/* compare() over the keys of no tenant, then over each tenant's space found in either
 * table, each on its own (a series of one tenant never answers for another's). */
static int compare_spaces(checker *ck, pt_backend *be)
{
    ck->be = be;
    ck->shared = 1;
    ck->key_limit = PT_MAX_ROW_KEY;
    int rv = compare(ck);
    ck->shared = 0;
    uint8_t from[PT_TENANT_PREFIX_MAX + 1] = {PT_TENANT_MARK};
    size_t from_n = 1;
    static const uint8_t stop[1] = {PT_TENANT_MARK + 1};
    while (rv == 0) {
        first_key f = {0};
        pt_row_range r = {{from, from_n}, {stop, 1}};
        for (int t = 0; t < PT_TABLE_COUNT && rv == 0; t++) {
            pt_scan s = {.table = (pt_table)t, .ranges = &r, .nranges = 1, .row_limit = 1};
            rv = pt_backend_scan(be, &s, on_first, &f);
        }
        if (rv != 0 || !f.found)
            break;
        const uint8_t *end = memchr(f.key + 1, PT_TENANT_MARK, f.n - 1);
        char msg[200];
        size_t idn = end ? (size_t)(end - f.key - 1) : f.n - 1;
        char id[PT_TENANT_MAX + 1];
        if (!end || !pt_tenant_valid((const char *)f.key + 1, idn, msg, sizeof(msg))) {
            problem(ck, "a row key starts with byte 01 but names no valid tenant (%s)",
                    end ? msg : "no end mark in the first 152 bytes");
            /* Go past every key sharing this start. */
            pt_slice e;
            pt_prefix_end(from, (pt_slice){f.key, end ? idn + 2 : f.n}, &e);
            from_n = e.n;
            continue;
        }
        memcpy(id, f.key + 1, idn);
        id[idn] = '\0';
        space_reset(ck);
        fprintf(ck->out, "tenant %s:\n", id);
        pt_tenant_view v;
        pt_tenant_view_init(&v, be, id, idn);
        ck->be = &v.be;
        ck->key_limit = PT_TENANT_KEY_LIMIT;
        rv = compare(ck);
        ck->be = be;
        pt_slice e;
        pt_prefix_end(from, (pt_slice){v.prefix, v.plen}, &e);
        from_n = e.n;
    }
    ck->key_limit = PT_MAX_ROW_KEY;
    return rv;
}

int pt_check_store(const pt_config *cfg, const pt_backend_ops *ops, const pt_backend_config *bc,
                   FILE *out)
{
    checker ck = {.out = out, .bucket = cfg->index_bucket_ms, .cutoff = INT64_MIN,
                  .key_limit = PT_MAX_ROW_KEY};
    char err[512] = "";
    int status = PT_CHECK_FAILED;
    pt_backend be = {0};
    if (cfg->retention_ms > 0)
        ck.cutoff = (int64_t)time(NULL) * 1000 - cfg->retention_ms;
    pt_arena_init(&ck.a, 64 * 1024, 0);
    pt_buf_init(&ck.prev_row, 0);
    fprintf(out, "checking the %s store\n", ops->name);
    /* What opening would change first: a damaged log is reported, not replayed. */
    if (ops->verify && ops->verify(NULL, bc, on_verify, &ck, err, sizeof(err)) != 0) {
        fprintf(out, "cannot check: %s\n", err);
        goto done;
    }
    if (ck.problems) {
        fprintf(out, "not opening the store: a start replays its logs as said above and "
                     "then deletes them (copy the directory away first to keep them)\n");
        status = PT_CHECK_DAMAGED;
        goto done;
    }
    int rv = pt_backend_open(&be, ops, bc, err, sizeof(err));
    if (rv != 0) {
        fprintf(out, "cannot open the store: %s\n", err);
        goto done;
    }
    /* The backend's own check first: a damaged chunk or table file also stops the scans. */
    if (ops->verify && (rv = ops->verify(be.state, bc, on_verify, &ck, err, sizeof(err))) != 0) {
        fprintf(out, "cannot check: %s\n", err);
        goto done_open;
    }
    if ((rv = compare_spaces(&ck, &be)) != 0) {
        fprintf(out, "index and data not compared: reading the store failed: %s\n",
                pt_strerror(rv));
        if (!ck.problems)
            goto done_open;
    }
    status = ck.problems ? PT_CHECK_DAMAGED : PT_CHECK_OK;
done_open:
    pt_backend_close(&be);
done:
    if (status == PT_CHECK_OK)
        fprintf(out, "ok: no problems found\n");
    else if (ck.problems)
        fprintf(out, "DAMAGED: %zu problems%s\n", ck.problems,
                ck.problems > SHOW_MAX ? " (the first 20 shown)" : "");
    pt_keyset_free(&ck.cells);
    pt_keyset_free(&ck.series);
    pt_keyset_free(&ck.data);
    pt_buf_free(&ck.prev_row);
    pt_arena_free(&ck.a);
    return status;
}
