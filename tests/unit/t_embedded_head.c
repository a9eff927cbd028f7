/*
 * The embedded store's head: samples held XOR-compressed, its shards (memory, logs, one
 * frozen at a time), eviction of series that stopped, the sweep, head_max_age, and the
 * index head under pressure from several writers.
 */
#include "embedded_helpers.h"

/* The value of sample i of row r in the compressed-head test: counters, gauges and every
 * special float64 pattern. */
static uint64_t zvalue(int r, uint32_t i)
{
    static const uint64_t special[] = {0x7ff0000000000002ULL, 0x7ff8000000000001ULL,
                                       0x8000000000000000ULL, 0x7ff0000000000000ULL,
                                       0xfff0000000000000ULL, 0x0000000000000001ULL,
                                       0x000fffffffffffffULL, 0xfff8000000000000ULL};
    double d;
    if (r == 0)
        return special[i % 8];
    if (r % 2)
        d = (double)(r * 1000 + i * (uint32_t)r); /* a counter */
    else
        d = 0.25 * (double)((i * 7919u + (uint32_t)r) % 1000); /* a gauge */
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

typedef struct zcheck {
    int bad;
    size_t cells;
} zcheck;

static int zcheck_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    zcheck *c = ud;
    int r = atoi((const char *)row.p + 2);
    uint32_t q = pt_get_be32(qual.p), i = q / 15000;
    if (q % 15000 || value.n != 8 || pt_get_be64(value.p) != zvalue(r, i)) {
        if (!c->bad)
            diag("z/%d cell %u: %zu bytes, not the value written", r, q, value.n);
        c->bad = 1;
    }
    c->cells++;
    return 0;
}

/* In-order 8-byte samples are held XOR-compressed in the head: a known, small number of
 * bytes a sample, every value bit-exact; out-of-order writes, rewrites and longer values
 * still read back last-write-wins, before and after a flush. */
static void test_embedded_compressed_head(const char *tmp)
{
    enum { ROWS = 500, SAMPLES = 240 };
    pt_backend b;
    if (open_named(&b, tmp, "zhead", "embedded(compressed head)") != 0)
        return;
    static char rows[ROWS][8];
    static uint8_t vals[CT_BATCH_MAX][8];
    int fails = 0;
    for (int r = 0; r < ROWS; r++)
        snprintf(rows[r], sizeof(rows[r]), "z/%03d", r);
    /* Like Prometheus: each request carries one sample of many series. */
    for (uint32_t i = 0; i < SAMPLES; i++)
        for (int r0 = 0; r0 < ROWS; r0 += CT_BATCH_MAX) {
            ct_batch bt = {0};
            for (int r = r0; r < ROWS && r < r0 + CT_BATCH_MAX; r++) {
                pt_put_be64(vals[r - r0], zvalue(r, i));
                ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(rows[r]), i * 15000,
                           (pt_slice){vals[r - r0], 8});
            }
            fails += ct_write(&b, &bt) != 0;
        }
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    double per = (double)st.head_bytes / (double)st.head_cells;
    ok(fails == 0 && st.head_cells == (size_t)ROWS * SAMPLES && per < 6,
       "embedded(compressed head): %zu samples in order take %.2f bytes each in the head, "
       "rows and table included (16 a cell uncompressed)",
       st.head_cells, per);
    pt_row_range all[] = {CT_RANGE("z/", "z0")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    zcheck zc = {0};
    int srv = pt_backend_scan(&b, &s, zcheck_cell, &zc);
    ok(srv == 0 && !zc.bad && zc.cells == (size_t)ROWS * SAMPLES,
       "embedded(compressed head): every sample read back bit-exact (%zu)", zc.cells);

    /* After the run: a backfill, a rewrite, a longer value, then in order again. */
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "z/001", 7, "backfill");
    ct_add(&bt, PT_TABLE_POINTS, "z/001", 15000, "rewrite1");
    ct_add(&bt, PT_TABLE_POINTS, "z/002", 30000, "a longer value");
    ct_add(&bt, PT_TABLE_POINTS, "z/001", SAMPLES * 15000, "next-one");
    ct_add(&bt, PT_TABLE_POINTS, "z/003", SAMPLES * 15000, "next-one");
    ct_add(&bt, PT_TABLE_POINTS, "z/003", 15000, "rewrite3");
    int w = ct_write(&b, &bt);
    const char *want1 = "z/001:00000007=backfill;z/001:00003a98=rewrite1;",
               *want3 = "z/003:00003a98=rewrite3;z/003:0036ee80=next-one;";
    uint8_t q0[4], q1[4], q2[4];
    pt_put_be32(q0, 1);
    pt_put_be32(q1, 15001);
    pt_put_be32(q2, SAMPLES * 15000);
    pt_row_range r1[] = {CT_RANGE("z/001", "z/001\x01")}, r3[] = {CT_RANGE("z/003", "z/003\x01")};
    for (int pass = 0; pass < 2; pass++) {
        const char *when = pass ? "after a flush" : "in the head";
        is_str(ct_show_q(&b, PT_TABLE_POINTS, r1, 1, (pt_slice){q0, 4}, (pt_slice){q1, 4}, 0),
               want1, "embedded(compressed head): backfill and rewrite win over the run, %s",
               when);
        char both[256];
        snprintf(both, sizeof(both), "%s",
                 ct_show_q(&b, PT_TABLE_POINTS, r3, 1, (pt_slice){q0, 4}, (pt_slice){q1, 4}, 0));
        size_t bl = strlen(both);
        snprintf(both + bl, sizeof(both) - bl, "%s",
                 ct_show_q(&b, PT_TABLE_POINTS, r3, 1, (pt_slice){q2, 4}, (pt_slice){0}, 0));
        is_str(both, want3, "embedded(compressed head): in order after a rewrite, %s", when);
        pt_row_range r2[] = {CT_RANGE("z/002", "z/002\x01")};
        pt_put_be32(q1, 30001);
        pt_put_be32(q0, 30000);
        is_str(ct_show_q(&b, PT_TABLE_POINTS, r2, 1, (pt_slice){q0, 4}, (pt_slice){q1, 4}, 0),
               "z/002:00007530=a longer value;",
               "embedded(compressed head): a longer value replaces a run's sample, %s", when);
        pt_put_be32(q0, 1);
        pt_put_be32(q1, 15001);
        if (pass == 0)
            ok(w == 0 && pt_embedded_flush(&b) == 0, "embedded(compressed head): flushed");
    }
    pt_backend_close(&b);
}

/* ---- the head's shards: memory, logs, eviction, replay order ---- */

/* One flush takes one shard at a time: with in-order samples streaming into 4,000 rows,
 * the head's samples stay near the budget (about 1 + 2 / (HEAD_SHARDS + 1) times it; two
 * whole generations would be twice it); about HEAD_SHARDS logs are kept,
 * and none after a close; rows that stop getting samples are evicted. */
static void test_embedded_shards(const char *tmp)
{
    enum { ROWS = 4000, ROUNDS = 1000, LIVE = 500 };
    const size_t budget = 256 << 10;
    char path[512];
    snprintf(path, sizeof(path), "%s/shards", tmp);
    pt_backend b;
    if (open_named(&b, tmp, "shards", "embedded(shards)") != 0)
        return;
    pt_embedded_set_budget(&b, budget);
    static char rows[ROWS][12];
    static uint8_t vals[CT_BATCH_MAX][8];
    for (int r = 0; r < ROWS; r++)
        snprintf(rows[r], sizeof(rows[r]), "s/%04d", r);
    embedded *e = b.state;
    size_t max_samples = 0, max_frozen = 0;
    int fails = 0, max_logs = 0;
    for (uint32_t i = 0; i < ROUNDS; i++) {
        /* From round 200 on only the first LIVE rows get samples. */
        int nrows = i < 200 ? ROWS : LIVE;
        for (int r0 = 0; r0 < nrows; r0 += CT_BATCH_MAX) {
            ct_batch bt = {0};
            for (int r = r0; r < nrows && r < r0 + CT_BATCH_MAX; r++) {
                /* Random low bits: about 8 bytes a sample, like two-decimal gauges. */
                pt_put_be64(vals[r - r0], 0x4059000000000000ULL ^ ((uint64_t)rnd(1u << 30) << 12));
                ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(rows[r]), i * 15000,
                           (pt_slice){vals[r - r0], 8});
            }
            fails += ct_write(&b, &bt) != 0;
            pthread_mutex_lock(&e->mu);
            size_t held = e->h.cur_bytes;
            if (e->frozen && e->frozen_shard < HEAD_SHARDS) {
                const hshard *sh = &e->h.sh[e->frozen_shard];
                size_t fb = sh->cell_bytes[sh->cur ^ 1];
                held += fb;
                max_frozen = fb > max_frozen ? fb : max_frozen;
            }
            pthread_mutex_unlock(&e->mu);
            max_samples = held > max_samples ? held : max_samples;
        }
        int logs = log_files(path);
        max_logs = logs > max_logs ? logs : max_logs;
    }
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(fails == 0 && st.flushes > 3 * HEAD_SHARDS,
       "embedded(shards): %d rows written, %d of them for %d rounds, %llu flushes", ROWS, LIVE,
       ROUNDS, (unsigned long long)st.flushes);
    ok(max_samples <= budget + budget / 2 + (64 << 10),
       "embedded(shards): samples held at most %zu bytes for a budget of %zu (%.2fx)", max_samples,
       budget, (double)max_samples / (double)budget);
    ok(max_frozen > 0 && max_frozen < budget / 2,
       "embedded(shards): one shard frozen at a time (at most %zu bytes)", max_frozen);
    ok(max_logs >= 2 && max_logs <= HEAD_SHARDS + 3,
       "embedded(shards): at most %d logs on disk", max_logs);
    ok(st.head_rows <= LIVE + ROWS / HEAD_SHARDS,
       "embedded(shards): rows without samples evicted (%zu rows left, %d live)", st.head_rows,
       LIVE);
    pt_row_range all[] = {CT_RANGE("s/", "s0")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    size_t cells = 0;
    is(pt_backend_scan(&b, &s, count_cell, &cells), 0, "embedded(shards): scan");
    is(cells, (size_t)ROWS * 200 + (size_t)LIVE * (ROUNDS - 200),
       "embedded(shards): every sample read back");
    pt_backend_close(&b);
    is(log_files(path), 0, "embedded(shards): no log left after a close");
}

/* A series that stops is dropped from the head at the first flush of its shard that comes
 * more than twice its gap of log generations (freezes) after its last sample; a series
 * written all along never is, nor one written once every few freezes. With only the rule
 * "no cell in either generation" the stopped rows would stay for a second flush of their
 * shard, past HEAD_SHARDS + 3 flushes. */
static void test_embedded_evict(const char *tmp)
{
    /* Rows [0, LIVE) get a sample every round, the next SLOW every SLOW_EVERY rounds (a
     * few freezes apart), the last DEAD every round until STOP. */
    enum { LIVE = 500, SLOW = 200, SLOW_EVERY = 40, DEAD = 2000, STOP = 50 };
    enum { ROWS = LIVE + SLOW + DEAD };
    pt_backend b;
    if (open_named(&b, tmp, "evict", "embedded(evict)") != 0)
        return;
    pt_embedded_set_budget(&b, 256 << 10);
    static char rows[ROWS][12];
    static uint8_t vals[CT_BATCH_MAX][8];
    static int pick[ROWS];
    for (int r = 0; r < ROWS; r++)
        snprintf(rows[r], sizeof(rows[r]), "e/%04d", r);
    pt_embedded_stats st;
    uint64_t at_stop = 0;
    size_t written = 0;
    int fails = 0;
    uint32_t i;
    for (i = 0; i < 100000; i++) {
        int n = 0;
        for (int r = 0; r < ROWS; r++)
            if (r < LIVE || (r < LIVE + SLOW ? i % SLOW_EVERY == 0 : i < STOP))
                pick[n++] = r;
        for (int k0 = 0; k0 < n; k0 += CT_BATCH_MAX) {
            ct_batch bt = {0};
            for (int k = k0; k < n && k < k0 + CT_BATCH_MAX; k++) {
                pt_put_be64(vals[k - k0], 0x4059000000000000ULL ^ ((uint64_t)rnd(1u << 30) << 12));
                ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(rows[pick[k]]), i * 15000,
                           (pt_slice){vals[k - k0], 8});
            }
            fails += ct_write(&b, &bt) != 0;
        }
        written += (size_t)n;
        pt_embedded_get_stats(&b, &st);
        if (i + 1 == STOP)
            at_stop = st.flushes;
        if (i >= STOP && st.flushes >= at_stop + HEAD_SHARDS + 3)
            break;
    }
    ok(fails == 0 && i < 100000, "embedded(evict): %llu flushes, %u rounds",
       (unsigned long long)st.flushes, i + 1);
    ok(st.head_rows == LIVE + SLOW,
       "embedded(evict): %llu flushes after %d series stopped, %zu rows left (%d live, %d "
       "slow)",
       (unsigned long long)(st.flushes - at_stop), DEAD, st.head_rows, LIVE, SLOW);
    ok(st.rows_evicted == DEAD,
       "embedded(evict): %llu rows evicted, none of the live or slow ones",
       (unsigned long long)st.rows_evicted);
    pt_row_range all[] = {CT_RANGE("e/", "e0")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    size_t cells = 0;
    is(pt_backend_scan(&b, &s, count_cell, &cells), 0, "embedded(evict): scan");
    is(cells, written, "embedded(evict): every sample read back");
    pt_backend_close(&b);
}

/* Writes one sample at q to each row named fmt % r for r in [lo, hi). */
static int write_rows(pt_backend *b, const char *fmt, int lo, int hi, uint32_t q)
{
    static char names[CT_BATCH_MAX][16];
    static uint8_t vals[CT_BATCH_MAX][8];
    int fails = 0;
    for (int r0 = lo; r0 < hi; r0 += CT_BATCH_MAX) {
        ct_batch bt = {0};
        for (int r = r0; r < hi && r < r0 + CT_BATCH_MAX; r++) {
            snprintf(names[r - r0], sizeof(names[0]), fmt, r);
            pt_put_be64(vals[r - r0], 0x4059000000000000ULL ^ ((uint64_t)rnd(1u << 30) << 12));
            ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(names[r - r0]), q,
                       (pt_slice){vals[r - r0], 8});
        }
        fails += ct_write(b, &bt) != 0;
    }
    return fails;
}

static size_t count_rows_cells(pt_backend *b, const char *lo, const char *hi)
{
    pt_row_range all[] = {{.start = pt_slice_str(lo), .end = pt_slice_str(hi)}};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    size_t cells = 0;
    if (pt_backend_scan(b, &s, count_cell, &cells) != 0)
        return SIZE_MAX;
    return cells;
}

/* The sweep: with no shard frozen (the budget is far), series that stopped leave the
 * head once they are stale in sample time (5 min behind the newest sample) and got no
 * write for 2 s of wall time, when the head's rows grow by 16,384; live series, a
 * client an hour behind that is still writing, and series seen once stay. The swept
 * samples read back, and again after the logs (which still hold them) are replayed. */
static void test_embedded_sweep(const char *tmp)
{
    enum { LIVE = 500, LAG = 300, DEAD = 20000, NEW = 17000, STOP = 30, ROUNDS = 60 };
    const uint32_t hour = 3600 * 1000, step = 15000;
    pt_backend b;
    if (open_named(&b, tmp, "sweep", "embedded(sweep)") != 0)
        return;
    pt_embedded_set_budget(&b, 256u << 20);
    int fails = 0;
    for (uint32_t i = 0; i < ROUNDS; i++) {
        fails += write_rows(&b, "l/%05d", 0, LIVE, 10 * hour + i * step);
        fails += write_rows(&b, "g/%05d", 0, LAG, 9 * hour + i * step);
        if (i < STOP)
            fails += write_rows(&b, "d/%05d", 0, DEAD, 10 * hour + i * step);
    }
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    uint64_t flushes = st.flushes;
    ok(fails == 0 && st.rows_swept == 0 && st.head_rows == LIVE + LAG + DEAD,
       "embedded(sweep): nothing swept while the stopped series are recent in wall time "
       "(%llu swept, %zu rows)",
       (unsigned long long)st.rows_swept, st.head_rows);
    /* Past the wall-time guard, the live and lagging series write again; new series
     * grow the head's rows by more than 16,384, which starts a sweep. */
    usleep(2300 * 1000);
    fails += write_rows(&b, "l/%05d", 0, LIVE, 10 * hour + ROUNDS * step);
    fails += write_rows(&b, "g/%05d", 0, LAG, 9 * hour + ROUNDS * step);
    fails += write_rows(&b, "n/%05d", 0, NEW, 10 * hour + ROUNDS * step);
    embedded *e = b.state;
    for (int w = 0; w < 100; w++) {
        pthread_mutex_lock(&e->mu);
        int busy = e->frozen;
        pthread_mutex_unlock(&e->mu);
        pt_embedded_get_stats(&b, &st);
        if (!busy && st.head_rows <= LIVE + LAG + NEW)
            break;
        usleep(50 * 1000);
    }
    ok(fails == 0 && st.rows_swept == DEAD && st.head_rows == LIVE + LAG + NEW,
       "embedded(sweep): the %d stopped series swept (%llu), %zu rows left (%d live, %d "
       "behind, %d new)",
       DEAD, (unsigned long long)st.rows_swept, st.head_rows, LIVE, LAG, NEW);
    is(st.flushes, flushes, "embedded(sweep): with no shard flushed");
    /* The budget's freezes count the swept samples until the next freeze (the log holds
     * them): a write freezes a shard once the head's samples and the swept ones pass the
     * budget, and not before. */
    pthread_mutex_lock(&e->mu);
    uint64_t f0 = e->freezes;
    e->budget = e->h.cur_bytes + e->h.swept_bytes + (1u << 20);
    pthread_mutex_unlock(&e->mu);
    fails += write_rows(&b, "l/%05d", 0, 1, 10 * hour + (ROUNDS + 1) * step);
    pthread_mutex_lock(&e->mu);
    uint64_t f1 = e->freezes;
    size_t held = e->h.cur_bytes;
    size_t budget = e->budget = held + e->h.swept_bytes / 2;
    pthread_mutex_unlock(&e->mu);
    fails += write_rows(&b, "l/%05d", 0, 1, 10 * hour + (ROUNDS + 2) * step);
    pthread_mutex_lock(&e->mu);
    uint64_t f2 = e->freezes;
    pthread_mutex_unlock(&e->mu);
    ok(fails == 0 && f1 == f0 && f2 == f1 + 1 && held < budget,
       "embedded(sweep): swept samples count in the budget's freezes (%llu, %llu, %llu "
       "freezes)",
       (unsigned long long)f0, (unsigned long long)f1, (unsigned long long)f2);
    pt_embedded_set_budget(&b, 256u << 20);
    size_t want = (size_t)DEAD * STOP + (size_t)(LIVE + LAG) * (ROUNDS + 1) + NEW + 2;
    is(count_rows_cells(&b, "a", "z"), want, "embedded(sweep): every sample read back");
    char err[256] = "";
    is(pt_emb_reload_logs(e, err, sizeof(err)), 0, "embedded(sweep): the logs replayed %s",
       err);
    is(count_rows_cells(&b, "a", "z"), want,
       "embedded(sweep): every sample read back once after the replay");
    is(count_rows_cells(&b, "d/", "d0"), (size_t)DEAD * STOP,
       "embedded(sweep): the swept series' samples, once");
    pt_backend_close(&b);
}

/* Every sample reaches RocksDB within head_max_age with no write pushing the head past
 * its budget: the flush thread freezes a shard every head_max_age / HEAD_SHARDS, so the
 * head empties, the rows of series that got no more samples go, and only the current and
 * the next log stay. Without the setting, the same wait flushes nothing. */
static void test_embedded_max_age(const char *tmp)
{
    enum { ROWS = 64 };
    static char rows[ROWS][12];
    uint8_t v[8];
    for (int age = 0; age < 2; age++) {
        char path[512], err[256] = "";
        snprintf(path, sizeof(path), "%s/max-age-%d", tmp, age);
        pt_embedded_conf ec = {.path = path, .head_max_age_ms = age ? 800 : 0};
        pt_backend_config cfg = {.own = &ec};
        pt_backend b;
        if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
            ok(0, "embedded(max age): open: %s", err);
            return;
        }
        ct_batch bt = {0};
        for (int r = 0; r < ROWS; r++) {
            snprintf(rows[r], sizeof(rows[r]), "a/%04d", r);
            pt_put_be64(v, (uint64_t)r);
            ct_add_raw(&bt, PT_TABLE_POINTS, pt_slice_str(rows[r]), 15000, (pt_slice){v, 8});
        }
        int rv = ct_write(&b, &bt);
        pt_embedded_stats st;
        pt_embedded_get_stats(&b, &st);
        uint64_t f0 = st.flushes; /* the open's flush of what it replayed */
        /* Eight steps of 100 ms make a round; wait up to 20 rounds for a slow host (without
         * the setting, one round and a quarter). */
        for (int i = 0; i < (age ? 160 : 10); i++) {
            pt_embedded_get_stats(&b, &st);
            if (st.head_rows == 0 && log_files(path) <= 2)
                break;
            usleep(100 * 1000);
        }
        pt_embedded_get_stats(&b, &st);
        pt_row_range all[] = {CT_RANGE("a/", "a0")};
        pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
        size_t cells = 0;
        int srv = pt_backend_scan(&b, &s, count_cell, &cells);
        if (age) {
            ok(rv == 0 && st.head_cells == 0 && st.head_rows == 0 && st.flushes > f0,
               "embedded(max age 800 ms): the head emptied without a write past the budget "
               "(%zu cells, %zu rows left, %llu flushes)",
               st.head_cells, st.head_rows, (unsigned long long)(st.flushes - f0));
            ok(log_files(path) <= 2, "embedded(max age): only the current and next log left (%d)",
               log_files(path));
        } else {
            ok(rv == 0 && st.head_cells == ROWS && st.head_rows == ROWS && st.flushes == f0,
               "embedded(no max age): the same wait flushed nothing (%zu cells, %llu flushes)",
               st.head_cells, (unsigned long long)(st.flushes - f0));
        }
        ok(srv == 0 && cells == ROWS, "embedded(%s): every sample read back (%zu)",
           age ? "max age" : "no max age", cells);
        pt_backend_close(&b);
    }
}

/* The index head under pressure: writers on four threads bring about 50 MB of index
 * cells, past the hard limit (4 x the 4 MiB minimum soft limit) unless the drains keep
 * up, so they drain and usually wait for the drain thread (pt_emb_ihead_wait_room);
 * every cell is then read back once, the rewritten ones with their last value. */
enum { IXP_THREADS = 4, IXP_BATCHES = 100, IXP_CELLS = 1000 };

typedef struct ixp_arg {
    pt_backend *b;
    int t, failed;
} ixp_arg;

static void *ixp_writer(void *p)
{
    ixp_arg *a = p;
    static const uint8_t mask[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    char (*rows)[112] = malloc(IXP_CELLS * sizeof(*rows));
    pt_mutation *m = malloc(IXP_CELLS * sizeof(*m));
    char val[IXP_BATCHES][16];
    if (!rows || !m) {
        a->failed = 1;
        goto out;
    }
    for (int i = 0; i < IXP_BATCHES && !a->failed; i++) {
        snprintf(val[i], sizeof(val[i]), "%d", i);
        for (int j = 0; j < IXP_CELLS; j++) {
            /* Rows spread like references, each 100 bytes; the cell j == 0 of every
             * thread is rewritten by each batch. */
            unsigned h = (unsigned)(j ? (a->t * 7919u + (unsigned)i * 104729u + (unsigned)j * 2654435761u) : (unsigned)a->t);
            snprintf(rows[j], sizeof(rows[j]), "ixp,@%08x,t%d,b%03d,c%04d,%-60s", h, a->t,
                     j ? i : 0, j, "pad");
            m[j] = (pt_mutation){.table = PT_TABLE_INDEX,
                                 .row = pt_slice_str(rows[j]),
                                 .qual = {mask, 8},
                                 .value = pt_slice_str(j ? "" : val[i])};
        }
        if (pt_backend_write(a->b, m, IXP_CELLS) != 0)
            a->failed = 1;
    }
out:
    free(rows);
    free(m);
    return NULL;
}

typedef struct ixp_count {
    size_t cells, last[IXP_THREADS];
} ixp_count;

static int ixp_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    ixp_count *c = ud;
    (void)qual;
    c->cells++;
    char r[128];
    snprintf(r, sizeof(r), "%.*s", (int)(row.n < 127 ? row.n : 127), (const char *)row.p);
    const char *c0 = strstr(r, ",c0000,");
    const char *t = strstr(r, ",t");
    if (c0 && t) {
        int th = atoi(t + 2);
        char v[16];
        snprintf(v, sizeof(v), "%.*s", (int)(value.n < 15 ? value.n : 15), (const char *)value.p);
        if (th >= 0 && th < IXP_THREADS)
            c->last[th] = (size_t)atoi(v);
    }
    return 0;
}

static void test_index_pressure(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/ixpressure", tmp);
    pt_backend b;
    /* The smallest head: the index head's limits are then their minimum, 4 and 16 MiB. */
    pt_embedded_conf ec = {.path = path, .head_memory = 64 << 10};
    pt_backend_config cfg = {.own = &ec};
    if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
        ok(0, "index pressure: open: %s", err);
        return;
    }
    pthread_t th[IXP_THREADS];
    ixp_arg args[IXP_THREADS];
    for (int i = 0; i < IXP_THREADS; i++) {
        args[i] = (ixp_arg){&b, i, 0};
        if (pthread_create(&th[i], NULL, ixp_writer, &args[i]) != 0)
            args[i].failed = 1, th[i] = 0;
    }
    int failed = 0;
    for (int i = 0; i < IXP_THREADS; i++) {
        if (th[i])
            pthread_join(th[i], NULL);
        failed |= args[i].failed;
    }
    ok(!failed, "index pressure: %d writers, %d batches of %d index cells each, all acknowledged",
       IXP_THREADS, IXP_BATCHES, IXP_CELLS);
    /* How often writers waited depends on how the threads were scheduled, so it is only
     * reported, never asserted. */
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    diag("index pressure: %llu drains done while writing, %llu waits for room",
         (unsigned long long)st.index_drains, (unsigned long long)st.index_waits);
    ixp_count c = {0};
    pt_row_range all[] = {CT_RANGE("ixp,", "ixp,\xff")};
    pt_scan s = {.table = PT_TABLE_INDEX, .ranges = all, .nranges = 1};
    is(pt_backend_scan(&b, &s, ixp_cell, &c), 0, "index pressure: scan");
    is(c.cells, (size_t)IXP_THREADS * (IXP_BATCHES * (IXP_CELLS - 1) + 1),
       "index pressure: every cell once (%zu)", c.cells);
    int last_ok = 1;
    for (int i = 0; i < IXP_THREADS; i++)
        last_ok &= c.last[i] == IXP_BATCHES - 1;
    ok(last_ok, "index pressure: each rewritten cell holds its last write");
    pt_backend_close(&b);
}

int main(void)
{
    static emb_test_fn *const tests[] = {
        test_embedded_compressed_head, test_embedded_shards,   test_embedded_evict,
        test_embedded_sweep,           test_embedded_max_age, test_index_pressure,
    };
    return emb_main("emb-head", tests, CT_N(tests));
}
