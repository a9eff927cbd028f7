/*
 * Retention (storage.retention) on the embedded store: compaction filters drop the
 * entries whose samples are all older than now - retention, and a thread compacts the
 * whole store every quarter of the retention so that they go even when nothing else
 * compacts (an idle store, or table files that leveled compaction leaves alone).
 *
 * What is expired is read off the keys (base/schema.h, docs/storage-format.md): every data
 * and index row holds its time after its first unescaped ",@" (",#" for exemplar rows,
 * ",%" and the base plus a code for roll-up rows, which keep their stage's retention
 * through keep_row).
 *
 * - points ("row || 0x00 || first qualifier", row = sid ",@" base): a chunk goes when its
 *   last sample, base + its last qualifier, is before the cutoff. The key gives only the
 *   first qualifier; the value is read for the last (pt_cellchunk_last, which decodes an
 *   XOR'ed chunk) only for a chunk that starts before the cutoff in a bucket that ends
 *   after it.
 * - index ("row || 0x00 || qualifier", row = prefix ",@" day "," ...): a cell goes when
 *   the newest sample its index bucket can list, day + index bucket - 1, is before the
 *   cutoff: the index of a bucket lives as long as its samples (Bigtable's GC rule does
 *   the same through the cells' versions, write.c).
 *
 * With storage.retention_rules the points' cutoff is the row's own (backend.h
 * keep_row_ms, asked once per row: a compaction thread's keys come in row order, so the
 * last row's answer is kept per thread); index rows go by storage.retention only.
 *
 * A key that does not parse (the "==format" row, anything unknown) is kept; so is a chunk
 * whose value does not parse. The head's cells are not in RocksDB: they go at a later
 * compaction once flushed. Reads never see expired samples anyway: the read path starts
 * every query at now - retention.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "embedded_int.h"
#include "error.h"
#include "schema.h"


static int64_t cutoff(const expire *x, int64_t keep_ms)
{
    int64_t now = atomic_load_explicit(&x->now_ms, memory_order_relaxed);
    return (now ? now : pt_wall_ms()) - keep_ms;
}

/* The keep of data row k[0, rn): the rules' answer, remembered for the thread's next key. */
static int64_t row_keep(const expire *x, const uint8_t *k, size_t rn)
{
    static _Thread_local struct {
        const expire *x;
        uint64_t h;
        size_t n;
        int64_t keep;
    } last;
    if (!x->keep_row)
        return x->keep_ms;
    uint64_t h = XXH3_64bits(k, rn);
    if (last.x == x && last.h == h && last.n == rn)
        return last.keep;
    int64_t keep = x->keep_row(x->keep_ud, (pt_slice){k, rn});
    last.x = x;
    last.h = h;
    last.n = rn;
    last.keep = keep;
    return keep;
}

static int points_expired(const expire *x, const uint8_t *k, size_t kn, const uint8_t *v, size_t vn)
{
    const uint8_t *z = memchr(k, 0, kn);
    size_t rn = z ? (size_t)(z - k) : 0;
    if (!z || kn != rn + 5)
        return 0;
    int64_t base = pt_points_row_base(k, rn); /* data, exemplars, roll-ups */
    if (base < 0)
        return 0;
    int64_t keep = row_keep(x, k, rn);
    if (keep <= 0)
        return 0;
    int64_t cut = cutoff(x, keep);
    if (base + pt_get_be32(z + 1) >= cut)
        return 0;
    if (base + PT_BUCKET_MS <= cut)
        return 1;
    pt_cellchunk c;
    uint32_t last;
    if (pt_cellchunk_parse(v, vn, &c) != 0 || pt_cellchunk_last(&c, &last) != 0)
        return 0;
    return base + last < cut;
}

static int index_expired(const expire *x, const uint8_t *k, size_t kn)
{
    const uint8_t *z = memchr(k, 0, kn);
    size_t rn = z ? (size_t)(z - k) : 0, end;
    if (!z || x->keep_ms <= 0)
        return 0;
    int64_t day = pt_key_time(k, rn, "@#", &end);
    if (day < 0 || end >= rn || k[end] != ',')
        return 0;
    return day + x->index_span_ms <= cutoff(x, x->keep_ms);
}

static unsigned char filter(expire *x, int cf, const char *k, size_t kn, const char *v, size_t vn,
                            unsigned char *changed)
{
    *changed = 0;
    int gone = cf == CF_POINTS ? points_expired(x, (const uint8_t *)k, kn, (const uint8_t *)v, vn)
                               : index_expired(x, (const uint8_t *)k, kn);
    if (gone) {
        atomic_fetch_add_explicit(&x->dropped[cf == CF_POINTS ? 0 : 1], 1, memory_order_relaxed);
        if (x->counter)
            atomic_fetch_add_explicit(x->counter, 1, memory_order_relaxed);
    }
    return (unsigned char)gone;
}

/* RocksDB calls these from its compaction threads, several at once: they only read x
 * and add to its counters. */
static unsigned char filter_points(void *st, int level, const char *k, size_t kn, const char *v,
                                   size_t vn, char **nv, size_t *nvn, unsigned char *changed)
{
    (void)level, (void)nv, (void)nvn;
    return filter(st, CF_POINTS, k, kn, v, vn, changed);
}

static unsigned char filter_index(void *st, int level, const char *k, size_t kn, const char *v,
                                  size_t vn, char **nv, size_t *nvn, unsigned char *changed)
{
    (void)level, (void)nv, (void)nvn;
    return filter(st, CF_INDEX, k, kn, v, vn, changed);
}

static const char *filter_name(void *st)
{
    (void)st;
    return "promtable.Expire.v1";
}

static void filter_destroy(void *st)
{
    (void)st; /* x belongs to the embedded backend */
}

int pt_emb_expire_init(expire *x, rocks *r, const pt_backend_config *cfg)
{
    x->keep_ms = (int64_t)cfg->retention_seconds * 1000;
    x->index_span_ms = cfg->index_span_ms > 0 ? cfg->index_span_ms : PT_BUCKET_MS;
    x->counter = cfg->retention_dropped;
    int64_t shortest = x->keep_ms;
    if (cfg->keep_row_ms && cfg->shortest_keep_ms > 0) {
        x->keep_row = cfg->keep_row_ms;
        x->keep_ud = cfg->keep_ud;
        if (shortest <= 0 || cfg->shortest_keep_ms < shortest)
            shortest = cfg->shortest_keep_ms;
    }
    if (shortest <= 0)
        return 0;
    x->every_ms = shortest / 4 > 1000 ? shortest / 4 : 1000;
    x->filter[CF_POINTS] =
        rocksdb_compactionfilter_create(x, filter_destroy, filter_points, filter_name);
    x->filter[CF_INDEX] =
        rocksdb_compactionfilter_create(x, filter_destroy, filter_index, filter_name);
    if (!x->filter[CF_POINTS] || !x->filter[CF_INDEX])
        return PT_ENOMEM;
    for (int cf = 0; cf < NCF; cf++) {
        if (x->filter[cf])
            rocksdb_compactionfilter_set_ignore_snapshots(x->filter[cf], 1);
        r->filter[cf] = x->filter[cf];
    }
    return 0;
}

void pt_emb_expire_compact(expire *x, rocks *r)
{
    rocksdb_compactoptions_t *o = rocksdb_compactoptions_create();
    /* Alongside the automatic compactions, which ingest needs to go on. */
    rocksdb_compactoptions_set_exclusive_manual_compaction(o, 0);
    /* Rewrite the bottom level too: that is where most expired entries are. */
    rocksdb_compactoptions_set_bottommost_level_compaction(o, 2 /* kForce */);
    for (int cf = CF_POINTS; cf <= CF_INDEX; cf++)
        if (!atomic_load(&x->stop) && pt_emb_rocks_enter_write(r) == 0) {
            rocksdb_compact_range_cf_opt(r->db, r->cf[cf], o, NULL, 0, NULL, 0);
            pt_emb_rocks_leave(r);
        }
    rocksdb_compactoptions_destroy(o);
    atomic_fetch_add(&x->compactions, 1);
}

/* Compacts at every multiple of the interval on the wall clock, so that restarts more
 * frequent than the interval do not put it off forever. */
static void *expire_main(void *arg)
{
    expire *x = arg;
    int64_t every = x->every_ms;
    pthread_mutex_lock(&x->mu);
    while (!atomic_load(&x->stop)) {
        int64_t next = (pt_wall_ms() / every + 1) * every;
        struct timespec ts = {(time_t)(next / 1000), (long)(next % 1000) * 1000000};
        int rc = 0;
        while (!atomic_load(&x->stop) && rc != ETIMEDOUT)
            rc = pthread_cond_timedwait(&x->cv, &x->mu, &ts);
        if (atomic_load(&x->stop))
            break;
        pthread_mutex_unlock(&x->mu);
        pt_emb_expire_compact(x, x->r);
        pthread_mutex_lock(&x->mu);
    }
    pthread_mutex_unlock(&x->mu);
    return NULL;
}

int pt_emb_expire_start(expire *x, rocks *r)
{
    if (x->every_ms <= 0)
        return 0;
    x->r = r;
    if (pthread_mutex_init(&x->mu, NULL) != 0)
        return PT_ENOMEM;
    if (pthread_cond_init(&x->cv, NULL) != 0) {
        pthread_mutex_destroy(&x->mu);
        return PT_ENOMEM;
    }
    if (pthread_create(&x->thread, NULL, expire_main, x) != 0) {
        pthread_cond_destroy(&x->cv);
        pthread_mutex_destroy(&x->mu);
        return PT_ENOMEM;
    }
    x->running = 1;
    return 0;
}

void pt_emb_expire_stop(expire *x)
{
    if (!x->running)
        return;
    pthread_mutex_lock(&x->mu);
    atomic_store(&x->stop, 1);
    pthread_cond_signal(&x->cv);
    pthread_mutex_unlock(&x->mu);
    /* A compaction under way gives up at its next step. */
    if (pt_emb_rocks_enter(x->r) == 0) {
        rocksdb_disable_manual_compaction(x->r->db);
        pt_emb_rocks_leave(x->r);
    }
    pthread_join(x->thread, NULL);
    pthread_cond_destroy(&x->cv);
    pthread_mutex_destroy(&x->mu);
    x->running = 0;
}

void pt_emb_expire_free(expire *x)
{
    for (int cf = 0; cf < NCF; cf++) {
        if (x->filter[cf])
            rocksdb_compactionfilter_destroy(x->filter[cf]);
        x->filter[cf] = NULL;
    }
}
