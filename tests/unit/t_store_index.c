/* The store's index over the embedded store (through the faulty wrapper): the format
 * marker, a list hint gone stale, the index conformance suite and deleting series. */
#include "cardinality.h"
#include "embedded.h"
#include "faulty.h"
#include "store_helpers.h"
#include "index_conformance.h"
#include "delete_conformance.h"
#include "tap.h"

static const int64_t T0 = 1700000000000; /* 2023-11-14 */

/* The index format marker: a new store gets it, a format-1 index is refused. */
static void index_format(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        ok(0, "store for the format test");
        return;
    }
    char err[512] = "";
    s.st.xmarks = pt_exemplar_marks_new();
    ok(pt_store_check_index(&s.st, err, sizeof(err)) == 0, "an empty store gets the marker");
    pt_faulty_stats fs;
    pt_faulty_reset_stats(&s.faulty);
    ok(pt_store_check_index(&s.st, err, sizeof(err)) == 0, "and passes the check again");
    pt_faulty_get_stats(&s.faulty, &fs);
    is(fs.writes, 0, "without cell versions the check writes nothing (no table file a start)");
    ok(!pt_exemplar_marks_known(s.st.xmarks, 0, 0),
       "a new store has exemplar marks: an unmarked bucket is not taken as marked");
    pt_exemplar_marks_free(s.st.xmarks);
    s.st.xmarks = NULL;
    /* A new series whose metric and job are known: its list rows, its series row, and
     * only the values row of its new instance. */
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    tseries one[] = {{{"__name__", "m", "instance", "a", "job", "x", NULL}, {T0}, {1}, 1}};
    tseries two[] = {{{"__name__", "m", "instance", "b", "job", "x", NULL}, {T0}, {1}, 1}};
    ok(pt_store_write(&s.st, mk_write(&a, one, 1), &a, &res) == 0 && res.index_rows == 7,
       "a first series: 3 list rows, its series row, 3 values rows");
    ok(pt_store_write(&s.st, mk_write(&a, two, 1), &a, &res) == 0 && res.index_rows == 5,
       "a second one: 3 list rows, its series row, the values row of its new instance");
    pt_arena_free(&a);
    tstore_close(&s);
    if (tstore_open(&s) != 0)
        return;
    /* A format-2 store from before the exemplar marks: its format row alone. */
    pt_mutation fm = {PT_TABLE_INDEX, {(const uint8_t *)"==format", 8}, {(const uint8_t *)"l", 1},
                      {(const uint8_t *)"2", 1}, 0};
    s.st.xmarks = pt_exemplar_marks_new();
    ok(pt_backend_write(&s.faulty, &fm, 1) == 0 && pt_store_check_index(&s.st, err, sizeof(err)) == 0,
       "a format-2 store without exemplar marks opens");
    ok(pt_exemplar_marks_known(s.st.xmarks, 0, 0) && pt_exemplar_marks_known(s.st.xmarks, 7, 1),
       "and every bucket of it counts as marked (its exemplars are read)");
    pt_exemplar_marks_free(s.st.xmarks);
    s.st.xmarks = NULL;
    tstore_close(&s);
    if (tstore_open(&s) != 0)
        return;
    /* Index format 1: the sid itself after the day, no marker. */
    static const char old[] = "up,@1699920000000,up,instance=a:9100";
    pt_mutation m = {PT_TABLE_INDEX, {(const uint8_t *)old, sizeof(old) - 1},
                     {(const uint8_t *)"l", 1}, {(const uint8_t *)"", 0}, 0};
    ok(pt_backend_write(&s.faulty, &m, 1) == 0, "a format-1 index row written");
    int rv = pt_store_check_index(&s.st, err, sizeof(err));
    ok(rv == PT_EINTERNAL && strstr(err, "format 1"), "a format-1 index is refused: %s", err);
    tstore_close(&s);
}

/* A hint that picked a list which then grew past the candidate limit: the read starts
 * over without hints and answers as counting would have. */
static void stale_hint_limit(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        ok(0, "stale hint: open");
        return;
    }
    s.st.hints = pt_list_hints_new();
    s.st.max_series = 1; /* candidates past 4 + 1024 are refused */
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result r;
    tseries first[2] = {{{"__name__", "grow", "job", "small", NULL}, {IX_T0}, {1}, 1},
                        {{"__name__", "other", "job", "small", NULL}, {IX_T0}, {2}, 1}};
    int w1 = pt_store_write(&s.st, mk_write(&a, first, 2), &a, &r);
    /* A regex, so that the label masks cannot drop grow's other series. */
    static const tmatch q[] = {{0, "__name__", "grow"}, {2, "job", "small"}};
    long before = ix_count_once(&s.st, q, 2); /* hints: grow 1 row, job=~small 3 */
    enum { MORE = 1100 };
    static tseries more[MORE];
    static char k[MORE][8];
    for (int i = 0; i < MORE; i++) {
        snprintf(k[i], sizeof(k[i]), "%d", i);
        more[i] = (tseries){{"__name__", "grow", "k", k[i], NULL}, {IX_T0}, {i}, 1};
    }
    int w2 = pt_store_write(&s.st, mk_write(&a, more, MORE), &a, &r);
    long after = ix_count_once(&s.st, q, 2);
    ok(w1 == 0 && w2 == 0 && before == 1 && after == 1,
       "stale hint: a list grown past the limit since its hint is not read; %ld, then %ld series",
       before, after);
    pt_arena_free(&a);
    tstore_close(&s);
}

/* A flush, then a compaction of the whole store (its retention filter off: none set). */
static void compact_embedded(void *ud)
{
    pt_backend *b = ud;
    if (pt_embedded_flush(b) != 0)
        diag("flush failed");
    pt_embedded_compact(b, 0);
}

static void delete_on_embedded(void)
{
    tstore s;
    if (tstore_open(&s) == 0) {
        pt_delete_conformance(&s.faulty, compact_embedded, &s.emb, "embedded");
        tstore_close(&s);
    }
}

/* A delete of more series than one group, all sharing four references (2-bit references):
 * every selected series goes, every other stays. */
static void delete_many(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        ok(0, "delete many: open");
        return;
    }
    s.st.ref_bits = 2;
    s.st.index_bucket_ms = DL_DAY;
    s.st.max_series = 20000;
    s.st.now_ms = DL_D0 + 2 * DL_DAY;
    enum { N = 10000 };
    static char ids[N][8];
    tseries *ts = calloc(N, sizeof(*ts));
    if (!ts)
        BAIL_OUT("out of memory");
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof(ids[i]), "%d", i);
        ts[i] = (tseries){{"__name__", "c", "del", i % 2 ? "y" : "n", "i", ids[i], NULL},
                          {DL_D0 + DL_H}, {i}, 1};
    }
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, ts, N), &a, &res) == 0 && res.samples_written == N,
       "delete many: %d series over 4 references written", N);
    static const tmatch ydel[] = {{0, "del", "y"}}, all[] = {{0, "__name__", "c"}};
    pt_arena qa;
    qctx q;
    dl_qctx(&q, &s.st, &qa, DL_D0, DL_D0);
    q.c.limit = 20000;
    q.nms = 1;
    q.ms = pt_arena_calloc(&qa, sizeof(*q.ms));
    char msg[128];
    int rv = pt_matcher_init(&q.ms[0], 0, pt_slice_str("del"), pt_slice_str("y"), NULL, msg,
                             sizeof(msg));
    if (rv == 0)
        rv = pt_select(&q);
    pt_delete_result dr = {0};
    if (rv == 0)
        rv = pt_store_delete(&s.st, q.c.v, q.c.n, 0, PT_MAX_TIME_MS, &a, NULL, &dr);
    ok(rv == 0 && dr.series == N / 2 && dr.index_days_erased == N / 2,
       "delete many: %zu series in two groups deleted (%d)", dr.series, rv);
    pt_matcher_free(&q.ms[0]);
    pt_arena_free(&qa);
    ok(dl_select(&s.st, ydel, 1, DL_D0, DL_D0, NULL) == 0 &&
           dl_select(&s.st, all, 1, DL_D0, DL_D0, NULL) == N / 2,
       "delete many: none of them listed, the %d others are", N / 2);
    free(ts);
    pt_arena_free(&a);
    tstore_close(&s);
}

static void index_on_embedded(void)
{
    tstore full, tiny;
    if (tstore_open(&full) == 0 && tstore_open(&tiny) == 0) {
        pt_index_conformance(&full.faulty, &tiny.faulty, "embedded");
        tstore_close(&full);
        tstore_close(&tiny);
    }
}

/* A label with more values than one batch counts (1100 pods), a day after with series of
 * its own (not counted), a limit of 3 with ties (by name). */
static void cardinality_batches(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        ok(0, "cardinality: open");
        return;
    }
    enum { PODS = 1100, NEXT = 7 };
    static char pods[PODS][8], next[NEXT][8];
    static const char *const zones[] = {"z0", "z1", "z2"};
    tseries *ts = calloc(PODS + NEXT, sizeof(*ts));
    if (!ts)
        BAIL_OUT("out of memory");
    for (int i = 0; i < PODS; i++) {
        snprintf(pods[i], sizeof(pods[i]), "p%04d", i);
        ts[i] = (tseries){{"__name__", "b", "pod", pods[i], "zone", zones[i % 3], NULL}, {T0}, {i}, 1};
    }
    for (int i = 0; i < NEXT; i++) {
        snprintf(next[i], sizeof(next[i]), "n%d", i);
        ts[PODS + i] = (tseries){{"__name__", "c", "pod", next[i], NULL}, {T0 + 86400000}, {i}, 1};
    }
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    ok(pt_store_write(&s.st, mk_write(&a, ts, PODS + NEXT), &a, &res) == 0 &&
           res.samples_written == PODS + NEXT,
       "cardinality: %d series on one day, %d on the next", PODS, NEXT);
    pt_cardinality c;
    int rv = pt_cardinality_count(&s.st, &a, T0, 3, NULL, &c);
    char got[512] = "";
    pt_card_top *tops[] = {&c.by_metric, &c.values_by_name, &c.bytes_by_name, &c.by_pair};
    for (size_t t = 0; t < 4; t++)
        for (size_t i = 0; i < tops[t]->n; i++)
            snprintf(got + strlen(got), sizeof(got) - strlen(got), "%.*s:%llu%s",
                     (int)tops[t]->v[i].name.len, (const char *)tops[t]->v[i].name.p,
                     (unsigned long long)tops[t]->v[i].value, i + 1 < tops[t]->n ? "," : " ");
    ok(rv == 0 && c.series == PODS && c.pairs == PODS + 4, "cardinality: %llu series, %llu pairs",
       (unsigned long long)c.series, (unsigned long long)c.pairs);
    is_str(got,
           "b:1100 pod:1100,zone:3,__name__:1 pod:5500,zone:6,__name__:1 "
           "__name__=b:1100,zone=z0:367,zone=z1:367 ",
           "cardinality: the largest 3 of each, ties by name");
    pt_cardinality_free(&c);
    rv = pt_cardinality_count(&s.st, &a, T0 + 86400000, 10, NULL, &c);
    ok(rv == 0 && c.series == NEXT && c.by_metric.n == 1 && c.values_by_name.n == 2,
       "cardinality: the next day has its own %llu series", (unsigned long long)c.series);
    pt_cardinality_free(&c);
    pt_arena_free(&a);
    free(ts);
    tstore_close(&s);
}

int main(void)
{
    index_format();
    stale_hint_limit();
    cardinality_batches();
    index_on_embedded();
    delete_on_embedded();
    delete_many();
    return done_testing();
}
