/* HA pairs (adapter/daemon/ha.c): the election with a fake clock, in memory and through lease
 * rows of a fake store shared by two trackers (two promtables on one Bigtable), store
 * errors, a lost check-and-set race; then the write path over the embedded store. No
 * sleeps: failover comes from moving the clock. */
#include <math.h>

#include "config.h"
#include "error.h"
#include "ha.h"
#include "metrics.h"
#include "store_helpers.h"
#include "tap.h"


static const int64_t T0 = 1700000000000;
static const int64_t FAILOVER = 30000, UPDATE = 15000;

typedef struct fake_clock {
    int64_t now;
} fake_clock;

static int64_t clock_now(void *ud)
{
    return ((fake_clock *)ud)->now;
}

/* ---- a store of lease rows: scan one row, check-and-set one cell ---- */

enum { MAX_ROWS = 8, CELL_MAX = 1024 };

typedef struct fake_store {
    struct {
        uint8_t key[CELL_MAX], value[CELL_MAX];
        size_t key_n, value_n;
        int64_t version_us;
    } rows[MAX_ROWS];
    size_t nrows;
    int fail;                  /* next calls fail with PT_EUNAVAIL */
    size_t reads, writes;      /* calls */
    pt_ha *racer;              /* before the next check_and_set, this tracker decides... */
    const char *racer_replica; /* ...for this replica (a process winning the race) */
} fake_store;

static int find_row(fake_store *f, pt_slice key)
{
    for (size_t i = 0; i < f->nrows; i++)
        if (f->rows[i].key_n == key.n && memcmp(f->rows[i].key, key.p, key.n) == 0)
            return (int)i;
    return -1;
}

static int fs_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    fake_store *f = *(fake_store **)state;
    f->reads++;
    if (f->fail)
        return PT_EUNAVAIL;
    /* Lease reads are single rows: [key, key 0x00). */
    int r = find_row(f, s->ranges[0].start);
    if (s->nranges != 1 || r < 0)
        return 0;
    int rv = fn(ud, s->ranges[0].start, (pt_slice){(const uint8_t *)"l", 1},
                (pt_slice){f->rows[r].value, f->rows[r].value_n});
    return rv < 0 ? rv : 0;
}

static int fs_write(void *state, const pt_mutation *m, size_t n)
{
    (void)state, (void)m, (void)n;
    return PT_EINTERNAL; /* the tracker only reads and checks-and-sets */
}

static int fs_cas(void *state, const pt_mutation *m, pt_slice expect, int *applied)
{
    fake_store *f = *(fake_store **)state;
    f->writes++;
    *applied = 0;
    if (f->fail)
        return PT_EUNAVAIL;
    if (f->racer) {
        pt_ha *racer = f->racer;
        f->racer = NULL;
        pt_ha_entry *e;
        char msg[256];
        pt_ha_decide(racer, pt_slice_str(""), pt_slice_str("c1"), pt_slice_str(f->racer_replica),
                     &e, msg, sizeof(msg));
        pt_ha_release(racer, e);
    }
    int r = find_row(f, m->row);
    int holds = r >= 0 ? expect.p && f->rows[r].value_n == expect.n &&
                             memcmp(f->rows[r].value, expect.p, expect.n) == 0
                       : expect.p == NULL;
    if (!holds)
        return 0;
    if (r < 0) {
        if (f->nrows == MAX_ROWS || m->row.n > CELL_MAX)
            return PT_EINTERNAL;
        r = (int)f->nrows++;
        memcpy(f->rows[r].key, m->row.p, m->row.n);
        f->rows[r].key_n = m->row.n;
    }
    if (m->value.n > CELL_MAX)
        return PT_EINTERNAL;
    memcpy(f->rows[r].value, m->value.p, m->value.n);
    f->rows[r].value_n = m->value.n;
    f->rows[r].version_us = m->version_us;
    *applied = 1;
    return 0;
}

static int fs_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    (void)err, (void)errlen;
    *(fake_store **)state = cfg->inner;
    return 0;
}

static void fs_close(void *state)
{
    (void)state;
}

static const pt_backend_ops fake_ops = {
    .name = "fake_lease",
    .caps = PT_BACKEND_CAP_TEST,
    .state_size = sizeof(fake_store *),
    .open = fs_open,
    .close = fs_close,
    .write = fs_write,
    .scan = fs_scan,
    .check_and_set = fs_cas,
};

static pt_ha *tracker(pt_backend *be, fake_clock *c)
{
    pt_ha_opts o = {"cluster", "__replica__", FAILOVER, UPDATE, 4, be, clock_now, c, 0};
    return pt_ha_new(&o);
}

/* The last refusal's message. */
static char last_msg[512];

static int decide_for(pt_ha *h, const char *tenant, const char *cluster, const char *replica)
{
    pt_ha_entry *e;
    last_msg[0] = '\0';
    int v = pt_ha_decide(h, pt_slice_str(tenant), pt_slice_str(cluster), pt_slice_str(replica), &e,
                         last_msg, sizeof(last_msg));
    if (v >= 0)
        pt_ha_count(e, v, 1);
    pt_ha_release(h, e);
    return v;
}

static int decide(pt_ha *h, const char *cluster, const char *replica)
{
    return decide_for(h, "", cluster, replica);
}

static pt_ha_stat stat_of(pt_ha *h, const char *cluster)
{
    pt_ha_stat s[8], found = {{0}, {0}, 0, 0, 0};
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    size_t n = pt_ha_stats(h, &a, s, 8);
    for (size_t i = 0; i < n; i++)
        if (pt_slice_eq(s[i].cluster, pt_slice_str(cluster)))
            found = s[i];
    found.tenant = found.cluster = (pt_slice){0}; /* they die with the arena */
    pt_arena_free(&a);
    return found;
}

static void test_local(void)
{
    fake_clock c = {T0};
    pt_ha *h = tracker(NULL, &c);
    ok(h && !pt_ha_shared(h), "without a backend the election is local");
    is(decide(h, "c1", "a"), PT_HA_ACCEPT, "the first replica to write is elected");
    is(decide(h, "c1", "b"), PT_HA_DROP, "another replica's samples are dropped");
    is(decide(h, "c2", "b"), PT_HA_ACCEPT, "each cluster elects its own replica");
    c.now += FAILOVER - 1;
    is(decide(h, "c1", "a"), PT_HA_ACCEPT, "the elected replica keeps writing");
    c.now += FAILOVER;
    is(decide(h, "c1", "b"), PT_HA_DROP, "silent for exactly the failover timeout: no failover");
    c.now += 1;
    is(decide(h, "c1", "b"), PT_HA_ACCEPT, "silent for longer: the next replica to write wins");
    is(decide(h, "c1", "a"), PT_HA_DROP, "the former replica is now dropped");
    pt_ha_stat s = stat_of(h, "c1");
    ok(s.accepted == 3 && s.deduplicated == 3 && s.elections == 2,
       "c1: 3 accepted, 3 deduplicated, 2 elections (got %llu, %llu, %llu)",
       (unsigned long long)s.accepted, (unsigned long long)s.deduplicated,
       (unsigned long long)s.elections);
    /* The same cluster value under another tenant is another election. */
    is(decide_for(h, "t2", "c1", "a"), PT_HA_ACCEPT,
       "(tenant, cluster): another tenant's c1 elects on its own");
    is(decide(h, "c2", "b"), PT_HA_ACCEPT, "c2 written again (not idle)");
    is(decide(h, "c3", "a"), PT_HA_ACCEPT, "a fourth pair: max_clusters 4 reached");
    is(decide(h, "c4", "a"), PT_ETENANTLIMIT, "a fifth pair past max_clusters 4: PT_ETENANTLIMIT");
    ok(strstr(last_msg, "ha.max_clusters (4)") != NULL, "the refusal names the limit: %s", last_msg);
    is(pt_error_http_status(PT_ETENANTLIMIT), 429, "... answered 429 (retry later), not 400");
    static char big[PT_HA_MAX_VALUE + 2];
    memset(big, 'x', sizeof(big) - 1);
    is(decide(h, "c1", big), PT_ELABELS, "a replica value over the limit: PT_ELABELS");
    pt_ha_free(h);
}

/* One tenant filling the table must not deny another; idle pairs make room. */
static void test_limits(void)
{
    fake_clock c = {T0};
    pt_ha_opts o = {"cluster", "__replica__", FAILOVER, UPDATE, 4, NULL, clock_now, &c, 2};
    pt_ha *h = pt_ha_new(&o);
    is(decide_for(h, "mallory", "m1", "a"), PT_HA_ACCEPT, "mallory's first cluster");
    is(decide_for(h, "mallory", "m2", "a"), PT_HA_ACCEPT, "mallory's second cluster");
    is(decide_for(h, "mallory", "m3", "a"), PT_ETENANTLIMIT,
       "mallory's third cluster: past max_per_tenant 2, PT_ETENANTLIMIT");
    ok(strstr(last_msg, "ha.max_clusters_per_tenant (2)") && strstr(last_msg, "\"mallory\""),
       "the refusal names the limit and the tenant: %s", last_msg);
    is(decide_for(h, "mallory", "m1", "b"), PT_HA_DROP, "mallory's known clusters still decide");
    is(decide_for(h, "victim", "prod", "a"), PT_HA_ACCEPT,
       "victim's first HA write is decided although mallory is at her limit");
    is(decide_for(h, "eve", "e1", "a"), PT_HA_ACCEPT, "a fourth pair: the table is full");
    is(decide_for(h, "bob", "b1", "a"), PT_ETENANTLIMIT, "a fifth pair: past max_clusters 4");
    ok(strstr(last_msg, "ha.max_clusters (4)") != NULL, "the refusal names the limit: %s",
       last_msg);
    /* A pair held by a request in flight is never forgotten. */
    pt_ha_entry *held;
    char msg[256];
    is(pt_ha_decide(h, pt_slice_str("eve"), pt_slice_str("e1"), pt_slice_str("a"), &held, msg,
                    sizeof(msg)),
       PT_HA_ACCEPT, "eve's pair held by a request");
    c.now += FAILOVER;
    is(decide_for(h, "victim", "prod", "a"), PT_HA_ACCEPT, "victim keeps writing");
    is(decide_for(h, "bob", "b1", "a"), PT_ETENANTLIMIT,
       "idle for exactly the failover timeout: nothing is forgotten yet");
    c.now += 1;
    is(decide_for(h, "bob", "b1", "a"), PT_HA_ACCEPT,
       "idle for longer: mallory's pairs are forgotten and bob's is tracked");
    is(decide_for(h, "mallory", "m3", "a"), PT_HA_ACCEPT, "mallory is under her limit again");
    ok(stat_of(h, "prod").accepted == 2, "victim's pair is kept, with its counts");
    ok(stat_of(h, "e1").accepted == 1, "eve's held pair is kept");
    ok(stat_of(h, "m1").accepted == 0 && stat_of(h, "m2").accepted == 0,
       "mallory's idle pairs are gone");
    is(decide_for(h, "carol", "c1", "a"), PT_ETENANTLIMIT, "full again: prod, e1, b1, m3");
    pt_ha_release(h, held);
    c.now += FAILOVER + 1;
    is(decide_for(h, "carol", "c1", "a"), PT_HA_ACCEPT, "released and idle: eve's pair goes too");
    is(decide_for(h, "mallory", "m1", "b"), PT_HA_ACCEPT,
       "a forgotten pair elects again: its replica was silent past the failover timeout");
    pt_ha_free(h);
}

static void test_labels(void)
{
    fake_clock c = {T0};
    pt_ha *h = tracker(NULL, &c);
    pt_label ls[] = {{pt_slice_str("__name__"), pt_slice_str("up")},
                     {pt_slice_str("__replica__"), pt_slice_str("r1")},
                     {pt_slice_str("cluster"), pt_slice_str("eu")},
                     {pt_slice_str("job"), pt_slice_str("x")}};
    size_t ci = 99, ri = 99;
    ok(pt_ha_labels(h, ls, 4, &ci, &ri) && ci == 2 && ri == 1, "both labels found");
    ok(!pt_ha_labels(h, ls, 1, &ci, &ri), "neither: not an HA series");
    pt_label only[] = {ls[0], ls[1], ls[3]};
    ok(!pt_ha_labels(h, only, 3, &ci, &ri), "a replica label without a cluster label: not HA");
    pt_ha_free(h);
}

static void test_shared(void)
{
    fake_store fs = {0};
    fake_clock c1 = {T0}, c2 = {T0};
    pt_backend be;
    char err[128];
    pt_backend_config bc = {.inner = &fs};
    if (pt_backend_open(&be, &fake_ops, &bc, err, sizeof(err)) != 0)
        BAIL_OUT("%s", err);
    pt_ha *p1 = tracker(&be, &c1), *p2 = tracker(&be, &c2);
    ok(p1 && p2 && pt_ha_shared(p1), "two trackers on one store with check_and_set: shared");

    is(decide(p1, "c1", "a"), PT_HA_ACCEPT, "process 1: replica a elected");
    ok(fs.nrows == 1 && fs.rows[0].key_n > 5 && memcmp(fs.rows[0].key, "==ha,", 5) == 0,
       "the lease row is ==ha,...");
    char want[64];
    snprintf(want, sizeof(want), "%lld 61", (long long)T0);
    ok(fs.rows[0].value_n == strlen(want) && memcmp(fs.rows[0].value, want, strlen(want)) == 0 &&
           fs.rows[0].version_us == T0 * 1000,
       "its cell: \"<ms> <hex replica>\" at version ms*1000");
    is(decide(p2, "c1", "b"), PT_HA_DROP, "process 2: replica b dropped, a holds the lease");
    is(decide(p2, "c1", "a"), PT_HA_ACCEPT, "process 2: replica a accepted");

    size_t r0 = fs.reads, w0 = fs.writes;
    for (int i = 0; i < 100; i++) {
        c1.now += 100;
        c2.now += 100;
        decide(p1, "c1", "a");
        decide(p2, "c1", "b");
    }
    ok(fs.reads == r0 && fs.writes == w0,
       "within the update interval, 200 decisions make no store call");

    /* Past the update interval the elected replica refreshes its lease. */
    c1.now = c2.now = T0 + UPDATE;
    is(decide(p1, "c1", "a"), PT_HA_ACCEPT, "a past the update interval: accepted");
    ok(fs.writes == w0 + 1, "... and the lease refreshed (one check-and-set)");
    snprintf(want, sizeof(want), "%lld 61", (long long)(T0 + UPDATE));
    ok(fs.rows[0].value_n == strlen(want) && memcmp(fs.rows[0].value, want, strlen(want)) == 0,
       "the lease time moved");

    /* a goes quiet; b keeps writing to process 2. */
    c2.now = T0 + UPDATE + FAILOVER;
    is(decide(p2, "c1", "b"), PT_HA_DROP, "b at exactly the failover timeout: still dropped");
    c2.now += 1;
    is(decide(p2, "c1", "b"), PT_HA_ACCEPT, "b after a is silent longer than it: elected");
    c1.now = c2.now;
    is(decide(p1, "c1", "a"), PT_HA_DROP, "process 1 reads the new lease: a dropped");
    ok(stat_of(p2, "c1").elections == 1 && stat_of(p1, "c1").elections == 1,
       "each process counts the election it made");

    /* Store errors: the decision fails (503), nothing is decided from a stale cache. */
    c1.now = c2.now = c2.now + UPDATE;
    fs.fail = 1;
    is(decide(p2, "c1", "b"), PT_EUNAVAIL, "lease refresh during an outage: PT_EUNAVAIL");
    is(decide(p1, "c1", "a"), PT_EUNAVAIL, "another replica during an outage: PT_EUNAVAIL");
    fs.fail = 0;
    is(decide(p2, "c1", "b"), PT_HA_ACCEPT, "after the outage: b accepted again");

    /* A lost race: process 1 reads an expired lease, process 2 takes it over first. */
    c1.now = c2.now = c2.now + FAILOVER + 1;
    fs.racer = p2;
    fs.racer_replica = "b";
    is(decide(p1, "c1", "a"), PT_HA_DROP,
       "a's takeover loses to b's refresh made in between: re-read, a dropped");
    is(fs.racer, NULL, "(the race happened)");

    /* A process whose clock is behind the lease's time never takes it over early. */
    c1.now = c2.now = c2.now + 10 * FAILOVER;
    is(decide(p1, "c1", "a"), PT_HA_ACCEPT, "a takes over the expired lease");
    int64_t v = fs.rows[0].version_us;
    c2.now = c1.now - 60000; /* process 2's clock a minute behind */
    is(decide(p2, "c1", "b"), PT_HA_DROP, "b on a clock a minute behind: dropped");
    is(decide(p2, "c1", "a"), PT_HA_ACCEPT, "a on that clock: accepted");
    ok(fs.rows[0].version_us == v, "the lease was not written back in time");

    pt_ha_free(p1);
    pt_ha_free(p2);
    pt_backend_close(&be);
}

/* ---- the write path ---- */

static size_t stored(tstore *s, const char *name)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tmatch m = {0, "__name__", name};
    Prometheus__ReadResponse *resp = pt_arena_alloc(&a, sizeof(*resp));
    char msg[256];
    int rv = store_read(&s->st, mk_read(&a, T0 - 60000, T0 + 600000, &m, 1), &a, NULL, resp, msg,
                           sizeof(msg));
    size_t n = 0;
    if (rv == 0)
        for (size_t i = 0; i < resp->results[0]->n_timeseries; i++)
            n += resp->results[0]->timeseries[i]->n_samples;
    pt_arena_free(&a);
    return n;
}

static int has_label(tstore *s, const char *metric, const char *name)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    tmatch m = {0, "__name__", metric};
    Prometheus__ReadResponse *resp = pt_arena_alloc(&a, sizeof(*resp));
    char msg[256];
    int found = -1;
    if (store_read(&s->st, mk_read(&a, T0 - 60000, T0 + 600000, &m, 1), &a, NULL, resp, msg,
                      sizeof(msg)) == 0 &&
        resp->results[0]->n_timeseries > 0) {
        found = 0;
        const Prometheus__TimeSeries *ts = resp->results[0]->timeseries[0];
        for (size_t i = 0; i < ts->n_labels; i++)
            if (ts->labels[i]->name.len == strlen(name) &&
                memcmp(ts->labels[i]->name.data, name, strlen(name)) == 0)
                found = 1;
    }
    pt_arena_free(&a);
    return found;
}

static void test_write_path(void)
{
    tstore s;
    if (tstore_open(&s) != 0)
        BAIL_OUT("cannot open the embedded store");
    fake_clock c = {T0};
    pt_ha_opts o = {"cluster", "__replica__", FAILOVER, UPDATE, 16, s.st.be, clock_now, &c, 0};
    pt_ha *h = pt_ha_new(&o);
    ok(h && !pt_ha_shared(h), "the embedded store (no check_and_set): local");
    s.st.ha = pt_ha_store_hooks(h);
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_write_result res;
    /* One request mixing pairs and plain series; labels unsorted as a sender may send. */
    tseries mixed[] = {
        {{"__replica__", "r1", "__name__", "m_a", "cluster", "eu", NULL}, {T0, T0 + 1}, {1, 2}, 2},
        {{"__name__", "m_plain", "__replica__", "r9", NULL}, {T0}, {3}, 1},
        {{"__name__", "m_nocl", "cluster", "eu", NULL}, {T0}, {4}, 1},
        {{"__name__", "m_b", "cluster", "eu", "__replica__", "r2", NULL}, {T0}, {5}, 1},
        {{"__name__", "m_us", "cluster", "us", "__replica__", "r2", "zz", "1", NULL}, {T0}, {6}, 1},
    };
    int rv = pt_store_write_tenant(&s.st, pt_slice_str(""), mk_write(&a, mixed, 5), &a, &res);
    ok(rv == 0 && res.samples_rejected == 0, "a mixed request is accepted");
    is(res.samples_written, 5, "stored: r1's 2 (eu), the two series without a pair, r2's of us");
    is(res.samples_deduplicated, 1, "deduplicated: r2's sample for eu (r1 is elected)");
    is(stored(&s, "m_a"), 2, "m_a (eu, r1) reads back");
    is(has_label(&s, "m_a", "__replica__"), 0, "... without the replica label");
    is(has_label(&s, "m_a", "cluster"), 1, "... with the cluster label");
    is(has_label(&s, "m_plain", "__replica__"), 1, "a replica label without cluster: kept");
    is(stored(&s, "m_nocl"), 1, "a cluster label without replica: stored as is");
    is(stored(&s, "m_b"), 0, "m_b (eu, r2) is not stored");
    is(stored(&s, "m_us"), 1, "m_us (us, r2): r2 is elected for us");
    is(has_label(&s, "m_us", "zz"), 1, "the label after the removed one is kept");

    c.now += FAILOVER + 1;
    tseries r2[] = {
        {{"__name__", "m_b", "cluster", "eu", "__replica__", "r2", NULL}, {T0 + 5}, {7}, 1}};
    rv = pt_store_write_tenant(&s.st, pt_slice_str(""), mk_write(&a, r2, 1), &a, &res);
    ok(rv == 0 && res.samples_written == 1 && res.samples_deduplicated == 0,
       "after r1 is silent past the failover timeout, r2's sample is stored");
    is(stored(&s, "m_b"), 1, "m_b reads back");

    /* A full table refuses a new pair's series as over a limit (429), not as bad input. */
    pt_ha_free(h);
    o.max_clusters = 1;
    h = pt_ha_new(&o);
    s.st.ha = pt_ha_store_hooks(h);
    tseries two[] = {
        {{"__name__", "m_c", "cluster", "eu", "__replica__", "r1", NULL}, {T0 + 6}, {8}, 1},
        {{"__name__", "m_c", "cluster", "us", "__replica__", "r1", NULL}, {T0 + 6}, {9}, 1}};
    rv = pt_store_write_tenant(&s.st, pt_slice_str(""), mk_write(&a, two, 2), &a, &res);
    ok(rv == 0 && res.samples_written == 1 && res.samples_rejected == 1 && res.limited,
       "a full table: the new pair's series is refused as over a limit, the other stored");
    ok(strstr(res.msg, "ha.max_clusters (1)") != NULL, "the message names the limit: %s", res.msg);

    pt_ha_free(h);
    s.st.ha = (pt_store_ha){0};
    pt_arena_free(&a);
    tstore_close(&s);
}

static void test_flags(void)
{
    ok(pt_config_flag_is_bool("ha.enabled") && pt_config_flag_is_bool("storage.embedded.sync") &&
           pt_config_flag_is_bool("storage.sync"),
       "boolean flags (a backend's, a former name) may stand alone");
    ok(!pt_config_flag_is_bool("ha.failover-timeout") && !pt_config_flag_is_bool("ha.enabledx") &&
           !pt_config_flag_is_bool("nope"),
       "other flags and unknown ones are not boolean");
}

int main(void)
{
    test_flags();
    test_local();
    test_limits();
    test_labels();
    test_shared();
    test_write_path();
    return done_testing();
}
