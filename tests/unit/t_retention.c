/* storage.retention on the embedded store: compactions drop the expired points chunks and
 * index cells and keep everything else; reads start at now - retention. Then
 * storage.retention_rules: the rules' text and YAML form, the first matching rule
 * deciding, per row key as the compaction filter asks, and per series in reads (samples
 * and streamed chunks). The clock is injected (pt_embedded_compact's now,
 * pt_store.now_ms), so nothing here depends on time. */
#include <inttypes.h>

#include "bytes.h"
#include "config.h"
#include "faulty.h"
#include "matcher.h"
#include "metrics.h"
#include "retention.h"
#include "embedded.h"
#include "store_helpers.h"
#include "tap.h"

#define DAY 86400000LL
#define BUCKET ((int64_t)1 << 32)

static const int64_t NOW = 1700000000000; /* 2023-11-14 */
static const int64_t KEEP = 10 * DAY;
#define CUT (NOW - KEEP)        /* the oldest sample kept */
#define B (CUT - CUT % BUCKET)  /* the bucket holding the cutoff */
#define B_OLD (B - BUCKET)      /* a bucket wholly before it */
#define D_CUR (CUT - CUT % DAY) /* the index day holding the cutoff */

static char *rowkey(char *buf, const char *sid, int64_t base)
{
    sprintf(buf, "%s,@%013" PRId64, sid, base);
    return buf;
}

static pt_slice sl(const char *s)
{
    return (pt_slice){(const uint8_t *)s, strlen(s)};
}

/* Writes samples t0, t0 + step, ... (n of them) into the points row of sid in the bucket
 * of t0. */
static int put_points(pt_backend *b, const char *sid, int64_t t0, int64_t step, int n)
{
    char row[256];
    int64_t base = t0 - t0 % BUCKET;
    rowkey(row, sid, base);
    pt_mutation *m = calloc((size_t)n, sizeof(*m));
    uint8_t *q = calloc((size_t)n, 12);
    for (int i = 0; i < n; i++) {
        int64_t t = t0 + i * step;
        pt_put_be32(q + 12 * i, (uint32_t)(t - base));
        pt_put_be64(q + 12 * i + 4, (uint64_t)t);
        m[i] =
            (pt_mutation){PT_TABLE_POINTS, sl(row), {q + 12 * i, 4}, {q + 12 * i + 4, 8}, t * 1000};
    }
    int rv = pt_backend_write(b, m, (size_t)n);
    free(m);
    free(q);
    return rv;
}

/* One exemplar cell (exemplar.h) at t in the exemplar row of sid: sid ",#" base. */
static int put_exemplar(pt_backend *b, const char *sid, int64_t t)
{
    char row[256];
    int64_t base = t - t % BUCKET;
    sprintf(row, "%s,#%013" PRId64, sid, base);
    uint8_t q[4], v[12] = {0};
    pt_put_be32(q, (uint32_t)(t - base) & ~(uint32_t)16383);
    pt_put_be32(v, (uint32_t)(t - base));
    pt_mutation m = {PT_TABLE_POINTS, sl(row), {q, 4}, {v, 12}, t * 1000};
    return pt_backend_write(b, &m, 1);
}

static int put_index(pt_backend *b, const char *row)
{
    pt_mutation m = {PT_TABLE_INDEX, sl(row), sl("l"), sl(""), 0};
    return pt_backend_write(b, &m, 1);
}

/* What a whole-table scan sees: a row's cells counted, and the newest and oldest. */
typedef struct seen {
    const char *row;
    int cells;
    int64_t first, last; /* points: sample times */
} seen;

static int on_seen(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)value;
    seen *s = ud;
    if (!pt_slice_eq(row, sl(s->row)))
        return 0;
    int64_t t = qual.n == 4 ? (int64_t)pt_get_be32(qual.p) : 0;
    if (!s->cells || t < s->first)
        s->first = t;
    if (!s->cells || t > s->last)
        s->last = t;
    s->cells++;
    return 0;
}

static seen look(pt_backend *b, pt_table table, const char *row)
{
    seen s = {.row = row};
    pt_row_range all = {{0}, {0}};
    pt_scan sc = {.table = table, .ranges = &all, .nranges = 1};
    if (pt_backend_scan(b, &sc, on_seen, &s) != 0)
        s.cells = -1;
    return s;
}

static int points_in(pt_backend *b, const char *sid, int64_t t_in_bucket)
{
    char row[256];
    return look(b, PT_TABLE_POINTS, rowkey(row, sid, t_in_bucket - t_in_bucket % BUCKET)).cells;
}

static int exemplars_in(pt_backend *b, const char *sid, int64_t t_in_bucket)
{
    char row[256];
    sprintf(row, "%s,#%013" PRId64, sid, t_in_bucket - t_in_bucket % BUCKET);
    return look(b, PT_TABLE_POINTS, row).cells;
}

static int index_in(pt_backend *b, const char *row)
{
    return look(b, PT_TABLE_INDEX, row).cells;
}

static int open_emb(pt_backend *b, char *dir, long retention_s)
{
    char err[256];
    strcpy(dir, "/tmp/pt-test-XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    pt_embedded_conf ec = {.path = dir};
    pt_backend_config c = {.own = &ec, .retention_seconds = retention_s, .index_span_ms = DAY};
    if (pt_backend_open(b, pt_backend_find("embedded"), &c, err, sizeof(err)) != 0) {
        diag("open: %s", err);
        return -1;
    }
    return 0;
}

static void rm_dir(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        diag("cannot remove %s", dir);
}

static char idx[16][128];

/* Index rows around the cutoff, their number; the first IDX_EXPIRED are expired at NOW. */
enum { IDX_EXPIRED = 6 };
static int index_rows(void)
{
    int n = 0;
    sprintf(idx[n++], "m,@%013lld,0000000000000001", (long long)(D_CUR - DAY));
    sprintf(idx[n++], "~job=a,@%013lld,0000000000000001", (long long)(D_CUR - DAY));
    sprintf(idx[n++], "=job,@%013lld,a", (long long)(D_CUR - DAY));
    sprintf(idx[n++], "==0000000000000001,@%013lld,m,job=a", (long long)(D_CUR - DAY));
    /* A day whose last millisecond is just before the cutoff. */
    sprintf(idx[n++], "m,@%013lld,0000000000000002", (long long)(CUT - DAY));
    /* '\' escapes itself: the ",@" after "\\" is the real one. */
    sprintf(idx[n++], "f\\\\,@%013lld,0000000000000003", (long long)(D_CUR - DAY));
    /* Kept: */
    sprintf(idx[n++], "m,@%013lld,0000000000000001", (long long)D_CUR);
    /* A day whose last millisecond is the cutoff itself. */
    sprintf(idx[n++], "m,@%013lld,0000000000000004", (long long)(CUT - DAY + 1));
    sprintf(idx[n++], "==format");
    /* An escaped comma does not start a time. */
    sprintf(idx[n++], "e\\,@0000000000000,0000000000000005");
    sprintf(idx[n++], "junk,@12,x");
    sprintf(idx[n++], "m,@%013lld", (long long)(D_CUR - DAY)); /* not an index key */
    return n;
}

static void test_filter(void)
{
    char dir[64];
    pt_backend b;
    if (open_emb(&b, dir, (long)(KEEP / 1000)) != 0) {
        ok(0, "open with a retention");
        return;
    }
    /* Points: wholly old bucket; a row of two chunks, the first expired; a chunk
     * straddling the cutoff; chunks ending exactly at / one ms before it; a new one. */
    ok(put_points(&b, "old", B_OLD + 1000, 1000, 2) == 0, "old bucket written");
    ok(put_points(&b, "split", CUT - 400000, 1000, 300) == 0, "300 expired samples written");
    ok(pt_embedded_flush(&b) == 0, "flushed: the first chunk of split");
    ok(put_points(&b, "split", CUT, 1000, 300) == 0, "300 samples from the cutoff on written");
    ok(put_points(&b, "straddle", CUT - 5, 1, 10) == 0, "a chunk across the cutoff written");
    ok(put_points(&b, "edge_in", CUT - 100, 100, 2) == 0, "a chunk ending at the cutoff");
    ok(put_points(&b, "edge_out", CUT - 101, 100, 2) == 0, "a chunk ending 1 ms before it");
    ok(put_points(&b, "fresh", NOW - 1000, 1, 1) == 0, "a fresh sample written");
    ok(put_exemplar(&b, "ex", B_OLD + 1000) == 0 && put_exemplar(&b, "ex", NOW - 1000) == 0,
       "an exemplar in an expired bucket and a fresh one written");
    ok(put_points(&b, "a,@0000000000000,b", CUT - DAY, 1, 1) == 0,
       "a row whose base is not at its end");
    int nidx = index_rows();
    for (int i = 0; i < nidx; i++)
        if (put_index(&b, idx[i]) != 0)
            ok(0, "index row %s written", idx[i]);
    ok(pt_embedded_flush(&b) == 0, "flushed");
    ok(points_in(&b, "old", B_OLD) == 2 && points_in(&b, "split", B) == 600 &&
           index_in(&b, idx[0]) == 1,
       "before compaction everything is there");

    pt_embedded_compact(&b, NOW);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    is(points_in(&b, "old", B_OLD), 0, "a bucket wholly before the cutoff: gone");
    seen s = look(&b, PT_TABLE_POINTS, rowkey((char[64]){0}, "split", B));
    ok(s.cells == 300 && B + s.first == CUT && B + s.last == CUT + 299000,
       "two chunks: the expired one gone, all of the other kept (%d cells)", s.cells);
    is(points_in(&b, "straddle", B), 10, "a chunk across the cutoff: kept whole");
    is(points_in(&b, "edge_in", B), 2, "last sample at the cutoff: kept");
    is(points_in(&b, "edge_out", B), 0, "last sample 1 ms before it: gone");
    is(points_in(&b, "fresh", NOW), 1, "a fresh sample: kept");
    is(exemplars_in(&b, "ex", B_OLD), 0, "an exemplar row of a bucket before the cutoff: gone");
    is(exemplars_in(&b, "ex", NOW), 1, "a fresh exemplar: kept");
    {
        char row[64];
        sprintf(row, "a,@0000000000000,b,@%013lld", (long long)B);
        is(look(&b, PT_TABLE_POINTS, row).cells, 1, "a points row that parses oddly: kept");
    }
    int gone = 0, kept = 0;
    for (int i = 0; i < IDX_EXPIRED; i++)
        gone += index_in(&b, idx[i]) == 0;
    for (int i = IDX_EXPIRED; i < nidx; i++)
        kept += index_in(&b, idx[i]) == 1;
    is(gone, IDX_EXPIRED, "index cells of days wholly before the cutoff: gone");
    is(kept, nidx - IDX_EXPIRED, "index cells of later days and unknown keys: kept");
    is(st.expired_chunks, 4, "4 chunks counted dropped (one of them exemplars)");
    is(st.expired_index, IDX_EXPIRED, "%d index cells counted dropped", IDX_EXPIRED);

    /* The head is not compacted: expired cells there go once flushed. */
    ok(put_points(&b, "late_old", B_OLD + 5000, 1, 3) == 0, "expired samples into the head");
    ok(put_points(&b, "late_new", CUT + 5000, 1, 3) == 0, "recent samples into the head");
    pt_embedded_compact(&b, NOW);
    ok(points_in(&b, "late_old", B_OLD) == 3 && points_in(&b, "late_new", B) == 3,
       "unflushed: compaction leaves the head alone");
    ok(pt_embedded_flush(&b) == 0, "flushed");
    pt_embedded_compact(&b, NOW);
    is(points_in(&b, "late_old", B_OLD), 0, "flushed: the expired ones gone");
    is(points_in(&b, "late_new", B), 3, "flushed: the recent ones kept");
    is(points_in(&b, "split", B), 300, "and what was kept before still is");

    /* A day later the cutoff has moved by a day. */
    pt_embedded_compact(&b, NOW + DAY);
    ok(points_in(&b, "split", B) == 0 && points_in(&b, "straddle", B) == 0 &&
           points_in(&b, "edge_in", B) == 0 && points_in(&b, "late_new", B) == 0,
       "a day later: the chunks it expired are gone");
    is(points_in(&b, "fresh", NOW), 1, "a day later: the fresh sample kept");
    ok(index_in(&b, idx[IDX_EXPIRED]) == 0 && index_in(&b, idx[IDX_EXPIRED + 1]) == 0,
       "a day later: the index day of the old cutoff gone");
    ok(index_in(&b, "==format") == 1, "the format row stays");
    pt_backend_close(&b);
    rm_dir(dir);
}

static void test_forever(void)
{
    char dir[64];
    pt_backend b;
    if (open_emb(&b, dir, 0) != 0) {
        ok(0, "open without a retention");
        return;
    }
    char row[128];
    sprintf(row, "m,@%013lld,0000000000000001", (long long)(D_CUR - 400 * DAY));
    ok(put_points(&b, "ancient", 1000, 1000, 5) == 0 && put_index(&b, row) == 0,
       "ancient samples and index written");
    ok(pt_embedded_flush(&b) == 0, "flushed");
    pt_embedded_compact(&b, NOW);
    ok(points_in(&b, "ancient", 1000) == 5 && index_in(&b, row) == 1,
       "retention 0: nothing is dropped");
    pt_backend_close(&b);
    rm_dir(dir);
}

/* Samples of the first series a read answers, their count; -1 on error. */
static long read_samples(tstore *s, int64_t start, int64_t end, const char *metric, int64_t *first)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tmatch m = {PROMETHEUS__LABEL_MATCHER__TYPE__EQ, "__name__", metric};
    Prometheus__ReadResponse *resp = pt_arena_alloc(&a, sizeof(*resp));
    char msg[512];
    int rv = store_read(&s->st, mk_read(&a, start, end, &m, 1), &a, NULL, resp, msg, 512);
    long n = -1;
    if (rv == 0) {
        Prometheus__QueryResult *q = resp->results[0];
        n = q->n_timeseries ? (long)q->timeseries[0]->n_samples : 0;
        if (q->n_timeseries && q->timeseries[0]->n_samples && first)
            *first = q->timeseries[0]->samples[0]->timestamp;
    } else {
        diag("read failed: %s", msg);
    }
    pt_arena_free(&a);
    return n;
}

typedef struct before {
    int64_t day;
    int n;
} before;

/* Counts index cells of a day before c->day (the test's keys hold no escapes). */
static int on_index_before(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    before *c = ud;
    char buf[512];
    size_t n = row.n < sizeof(buf) - 1 ? row.n : sizeof(buf) - 1;
    memcpy(buf, row.p, n);
    buf[n] = '\0';
    const char *at = strstr(buf, ",@");
    if (at && strtoll(at + 2, NULL, 10) < c->day)
        c->n++;
    return 0;
}

static int count_index_before(pt_backend *b, int64_t day)
{
    before c = {day, 0};
    pt_row_range all = {{0}, {0}};
    pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &all, .nranges = 1};
    int rv = pt_backend_scan(b, &sc, on_index_before, &c);
    return rv ? -1 : c.n;
}

static void test_reads(void)
{
    tstore s;
    pt_backend_config c = {.retention_seconds = (long)(KEEP / 1000), .index_span_ms = DAY};
    if (tstore_open_with(&s, c) != 0) {
        ok(0, "store opened");
        return;
    }
    s.st.retention_ms = KEEP;
    s.st.now_ms = NOW;
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tseries v[] = {
        {{"__name__", "up", "job", "a", NULL},
         {CUT - 2 * DAY, CUT - 1, CUT, CUT + 1000, NOW - 1000},
         {1, 2, 3, 4, 5},
         5},
        {{"__name__", "gone", "job", "b", NULL}, {CUT - 3 * DAY, CUT - 1}, {1, 2}, 2},
    };
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, v, 2), &a, &res) == 0 && res.samples_written == 7,
       "old and recent samples accepted (backfill)");
    for (int pass = 0; pass < 2; pass++) {
        const char *when = pass ? "flushed and compacted" : "in the head";
        int64_t first = 0;
        long n = read_samples(&s, 0, NOW, "up", &first);
        ok(n == 3 && first == CUT, "%s: a read of everything returns the 3 kept samples", when);
        is(read_samples(&s, 0, NOW, "gone", NULL), 0, "%s: a series with only old samples: none",
           when);
        is(read_samples(&s, CUT - 3 * DAY - 1000, CUT - 1, "up", NULL), 0,
           "%s: a read of the expired past gets no samples", when);
        is(read_samples(&s, CUT, CUT, "up", NULL), 1, "%s: the cutoff itself is kept", when);
        if (pass == 0) {
            ok(pt_embedded_flush(&s.emb) == 0, "flushed");
            pt_embedded_compact(&s.emb, NOW);
        }
    }
    is(count_index_before(&s.emb, D_CUR), 0, "no index cell of a day before the cutoff's");
    /* The store's own clock moves on: the same data, a day later. */
    s.st.now_ms = NOW + DAY;
    is(read_samples(&s, 0, NOW, "up", NULL), 1, "a day later: only the newest sample");
    pt_arena_free(&a);
    tstore_close(&s);
}

/* ---- storage.retention_rules ---- */

static pt_retention_rules *rules_of(const char *text, int64_t global_ms, char *err, size_t n)
{
    pt_retention_rules *r = NULL;
    err[0] = '\0';
    if (pt_retention_rules_parse(text, global_ms, NULL, 0, 0, 0, &r, err, n) != 0)
        return NULL;
    return r;
}

static int64_t keep_of(pt_retention_rules *r, const char *row)
{
    return pt_retention_keep_row(r, sl(row));
}

static void test_rules_parse(void)
{
    char err[512];
    pt_retention_rules *r =
        rules_of("7d {__name__=~\"debug_.*\"}\n\n  2d debug_x \n30d {job=\"batch\"}\n", 0, err,
                 sizeof(err));
    if (!ok(r != NULL, "three rules parse (%s)", err))
        return;
    is(pt_retention_rules_shortest(r), 2 * DAY, "the shortest is 2d");
    is(keep_of(r, "debug_x,job=a,@0000000000000"), 7 * DAY,
       "the first matching rule decides (7d, not the later 2d)");
    is(keep_of(r, "up,job=batch,@0000000000000"), 30 * DAY, "a later rule matches");
    is(keep_of(r, "up,job=web,@0000000000000"), 0, "no rule: storage.retention (forever)");
    is(keep_of(r, "debug_x,job=a,#4294967296000"), 7 * DAY, "an exemplar row as its series");
    is(keep_of(r, "\001t1\001debug_y,@0000000000000"), 7 * DAY,
       "a tenant's row: the prefix is not part of the series");
    is(keep_of(r, "debug_z,\\#0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef,"
                  "@0000000000000"),
       0, "a hashed long series: storage.retention");
    is(keep_of(r, "debug_x,job=a"), 0, "not a data row: storage.retention");
    is(keep_of(r, "debug\\,x,@0000000000000"), 0, "an escaped name is read unescaped");
    pt_label ls[] = {{sl("__name__"), sl("up")}, {sl("job"), sl("batch")}};
    is(pt_retention_keep(r, ls, 2), 30 * DAY, "by labels as the read path asks");
    pt_retention_rules_free(r);

    r = rules_of("7d {job=\"a\"}", 30 * DAY, err, sizeof(err));
    ok(r != NULL, "a rule shorter than storage.retention");
    is(keep_of(r, "m,job=b,@0000000000000"), 30 * DAY, "no rule: storage.retention");
    pt_retention_rules_free(r);
    ok(rules_of("", 0, err, sizeof(err)) == NULL && !err[0], "no text: no rules, no error");

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"40d {job=\"a\"}", "rule 1: retention 40d is longer than storage.retention"},
        {"1d up\n0s {job=\"a\"}", "rule 2: retention \"0s\" is not a duration above 0"},
        {"1d {job=~\"(\"}", "rule 1: selector {job=~\"(\"}:"},
        {"1d", "rule 1: \"<retention> <selector>\" expected"},
        {"soon up", "rule 1: retention \"soon\" is not a duration"},
        {"1d {job=\"\"}", "rule 1: selector"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        r = rules_of(bad[i].text, 30 * DAY, err, sizeof(err));
        ok(r == NULL && strstr(err, bad[i].want), "bad rules %zu refused (%s)", i + 1, err);
        pt_retention_rules_free(r);
    }
}

static int load_config(const char *yaml, pt_config *c, char *err, size_t n)
{
    if (pt_config_defaults(c) != 0)
        return -1;
    int rv = pt_config_load_yaml(c, yaml, strlen(yaml), err, n);
    if (rv == 0)
        rv = pt_config_check(c, err, n);
    return rv;
}

static void test_rules_config(void)
{
    char err[512] = "";
    pt_config c;
    int rv = load_config("storage:\n  retention: 30d\n  retention_rules:\n"
                         "    - match: '{__name__=~\"debug_.*\"}'\n      retention: 7d\n"
                         "    - {retention: 1d, match: 'tmp_x'}\n",
                         &c, err, sizeof(err));
    ok(rv == 0, "a YAML list of rules loads (%s)", err);
    is_str(rv == 0 ? c.retention_rules : "", "7d {__name__=~\"debug_.*\"}\n1d tmp_x\n",
           "...into one line a rule");
    pt_config_free(&c);
    rv = load_config("storage:\n  retention: 3d\n  retention_rules:\n"
                     "    - match: up\n      retention: 7d\n", &c, err, sizeof(err));
    ok(rv != 0 && strstr(err, "longer than storage.retention"),
       "a rule longer than storage.retention: refused (%s)", err);
    pt_config_free(&c);
    rv = load_config("storage:\n  retention_rules:\n    - match: up\n", &c, err, sizeof(err));
    ok(rv != 0 && strstr(err, "both match and retention are needed"),
       "a rule without retention: refused (%s)", err);
    pt_config_free(&c);
    rv = load_config("storage:\n  retention_rules:\n    - up\n", &c, err, sizeof(err));
    ok(rv != 0 && strstr(err, "is a list of {match"), "a rule that is no mapping: refused (%s)",
       err);
    pt_config_free(&c);
    rv = load_config("storage:\n  retention_rules:\n    - {match: up, retention: 1d, x: 1}\n",
                     &c, err, sizeof(err));
    ok(rv != 0 && strstr(err, "unknown key \"x\""), "an unknown key in a rule: refused (%s)",
       err);
    pt_config_free(&c);
    rv = load_config("web:\n  x:\n    - 1\n", &c, err, sizeof(err));
    ok(rv != 0 && strstr(err, "lists are not used"), "any other list: refused (%s)", err);
    pt_config_free(&c);
}

/* The compaction filter with a rule: "debug" series keep 2 days, the others storage.retention
 * (10 days), or forever without one. */
static void test_rules_filter(void)
{
    char err[512];
    for (int forever = 0; forever < 2; forever++) {
        const char *how = forever ? "storage.retention forever" : "storage.retention 10d";
        pt_retention_rules *r =
            rules_of("2d {__name__=~\"debug.*\"}", forever ? 0 : KEEP, err, sizeof(err));
        char dir[64];
        strcpy(dir, "/tmp/pt-test-XXXXXX");
        pt_embedded_conf ec = {.path = mkdtemp(dir)};
        pt_backend_config c = {.own = &ec, .retention_seconds = forever ? 0 : (long)(KEEP / 1000),
                               .index_span_ms = DAY, .keep_row_ms = pt_retention_keep_row,
                               .keep_ud = r, .shortest_keep_ms = 2 * DAY};
        pt_backend b;
        if (!ok(r && pt_backend_open(&b, pt_backend_find("embedded"), &c, err, sizeof(err)) == 0,
                "%s: open with a rule", how)) {
            pt_retention_rules_free(r);
            return;
        }
        int64_t t3 = NOW - 3 * DAY, t1 = NOW - DAY, t20 = NOW - 20 * DAY;
        ok(put_points(&b, "debug_a", t3, 1000, 5) == 0 && put_points(&b, "debug_b", t1, 1000, 5) == 0 &&
               put_points(&b, "up", t3, 1000, 5) == 0 && put_points(&b, "up_old", t20, 1000, 5) == 0 &&
               put_exemplar(&b, "debug_a", t3) == 0,
           "%s: samples 3 and 1 days old of debug series, 3 and 20 of others", how);
        ok(pt_embedded_flush(&b) == 0, "flushed");
        pt_embedded_compact(&b, NOW);
        is(points_in(&b, "debug_a", t3), 0, "%s: debug, 3 days old: gone (2d rule)", how);
        is(exemplars_in(&b, "debug_a", t3), 0, "%s: its exemplar row too", how);
        is(points_in(&b, "debug_b", t1), 5, "%s: debug, 1 day old: kept", how);
        is(points_in(&b, "up", t3), 5, "%s: no rule, 3 days old: kept", how);
        is(points_in(&b, "up_old", t20), forever ? 5 : 0, "%s: no rule, 20 days old: %s", how,
           forever ? "kept" : "gone");
        pt_backend_close(&b);
        rm_dir(dir);
        pt_retention_rules_free(r);
    }
}

/* A read's samples of metric, through the streamed path (chunks passed on) or not:
 * samples plus chunk samples, the first time. */
static long read_any(tstore *s, int chunks, int64_t start, const char *metric, int64_t *first,
                     size_t *nchunks)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_query_matcher m = {PT_MATCH_EQ, sl("__name__"), sl(metric)};
    pt_query q = {.start_ms = start, .end_ms = NOW, .ms = &m, .nms = 1};
    pt_read *r;
    pt_read_batch out;
    char msg[256];
    long n = -1;
    *nchunks = 0;
    if (pt_read_start(&s->st, &q, 1, &a, NULL, &r) == 0) {
        pt_read_chunks(r, chunks);
        int rv = pt_read_next(r, &a, 0, &out, msg, sizeof(msg));
        if (rv == 1) {
            n = 0;
            for (size_t i = 0; i < out.n; i++) {
                n += (long)out.s[i].nsamples;
                if (out.s[i].nsamples)
                    *first = out.s[i].samples[0].t;
                *nchunks += out.s[i].nchunks;
                for (size_t k = 0; k < out.s[i].nchunks; k++) {
                    n += out.s[i].chunks[k].data.p[0] << 8 | out.s[i].chunks[k].data.p[1];
                    if (!out.s[i].nsamples)
                        *first = out.s[i].chunks[0].tmin;
                }
            }
        }
        pt_read_free(r);
    }
    pt_arena_free(&a);
    return n;
}

static void test_rules_reads(void)
{
    char err[512];
    pt_retention_rules *r = rules_of("2d {__name__=~\"debug.*\"}", 0, err, sizeof(err));
    tstore s;
    pt_backend_config c = {.index_span_ms = DAY};
    if (!ok(r && tstore_open_with(&s, c) == 0, "store opened")) {
        pt_retention_rules_free(r);
        return;
    }
    s.st.now_ms = NOW;
    s.st.keep_ms = pt_retention_keep;
    s.st.keep_ud = r;
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    int64_t cut = NOW - 2 * DAY;
    tseries v[] = {
        {{"__name__", "debug_x", "job", "a", NULL},
         {cut - 3 * 3600000, cut - 1, cut, cut + 1000, NOW - 1000},
         {1, 2, 3, 4, 5},
         5},
        {{"__name__", "up", "job", "a", NULL}, {cut - 3 * 3600000, cut - 1, cut}, {1, 2, 3}, 3},
    };
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, v, 2), &a, &res) == 0 && res.samples_written == 8,
       "samples either side of the rule's cutoff written");
    for (int pass = 0; pass < 2; pass++) {
        const char *when = pass ? "flushed" : "in the head";
        for (int chunks = 0; chunks < 2; chunks++) {
            const char *way = chunks ? "streamed" : "samples";
            int64_t first = 0;
            size_t nch;
            long n = read_any(&s, chunks, 0, "debug_x", &first, &nch);
            ok(n == 3 && first == cut, "%s, %s: the ruled series from its cutoff on (%ld, first "
               "%lld)", when, way, n, (long long)(first - cut));
            if (pass && chunks)
                is(nch, 0, "%s, %s: its chunk across the cutoff comes as samples", when, way);
            n = read_any(&s, chunks, 0, "up", &first, &nch);
            ok(n == 3 && first == cut - 3 * 3600000, "%s, %s: another series: all (%ld)", when,
               way, n);
            if (pass && chunks)
                is(nch, 1, "%s, %s: ...as its stored chunk", when, way);
        }
        if (pass == 0)
            ok(pt_embedded_flush(&s.emb) == 0, "flushed");
    }
    s.st.now_ms = NOW + DAY;
    int64_t first = 0;
    size_t nch;
    is(read_any(&s, 0, 0, "debug_x", &first, &nch), 1, "a day later: one sample left");
    pt_arena_free(&a);
    tstore_close(&s);
    pt_retention_rules_free(r);
}

int main(void)
{
    test_filter();
    test_forever();
    test_reads();
    test_rules_parse();
    test_rules_config();
    test_rules_filter();
    test_rules_reads();
    return done_testing();
}
