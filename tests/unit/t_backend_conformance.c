/*
 * Runs the conformance suite over the embedded store and over the faulty wrapper around
 * it, then checks what only those two can show: persistence across a reopen, open
 * errors, and the wrapper's injected faults (verbatim codes, partial batches repaired by
 * a retry, failing scans).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "conformance.h"
#include "embedded.h"
#include "embedded_int.h"
#include "error.h"
#include "faulty.h"
#include "gorilla.h"

extern const pt_backend_ops pt_backend_embedded;

/* ---- temp directories ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir)
{
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        diag("could not remove %s", dir);
}

static int open_embedded(pt_backend *b, const char *path, char *err, size_t errlen)
{
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    return pt_backend_open(b, &pt_backend_embedded, &cfg, err, errlen);
}

/* ---- a digest of a whole table, to compare before and after a reopen ---- */

typedef struct digest {
    size_t cells;
    uint64_t h;
} digest;

static void fnv(uint64_t *h, pt_slice s)
{
    for (size_t i = 0; i < s.n; i++)
        *h = (*h ^ s.p[i]) * 0x100000001b3ull;
    *h = (*h ^ 0xff) * 0x100000001b3ull; /* field separator */
}

static int digest_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    digest *d = ud;
    d->cells++;
    fnv(&d->h, row);
    fnv(&d->h, qual);
    fnv(&d->h, value);
    return 0;
}

static digest table_digest(pt_backend *b, pt_table t)
{
    digest d = {0, 0xcbf29ce484222325ull};
    pt_row_range all = {{0}, {0}};
    pt_scan s = {.table = t, .ranges = &all, .nranges = 1};
    if (pt_backend_scan(b, &s, digest_cell, &d) != 0)
        d.cells = (size_t)-1;
    return d;
}

/* ---- embedded-only cases ---- */

/* Opens an embedded store in tmp/name for a test of its own; a failure is a failed test. */
static int open_named(pt_backend *b, const char *tmp, const char *name, const char *label)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    if (open_embedded(b, path, err, sizeof(err)) == 0)
        return 0;
    ok(0, "%s: open: %s", label, err);
    return -1;
}

/* One batch writing a cell twice, among other rows: the later write wins on both tables
 * (the index is written in row order; the sort must keep a cell's writes in order). */
static void test_embedded_batch_order(const char *tmp)
{
    pt_backend b;
    if (open_named(&b, tmp, "batch-order", "embedded(batch order)") != 0)
        return;
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        ct_batch bt = {0};
        ct_add(&bt, (pt_table)t, "z", 1, "first");
        ct_add(&bt, (pt_table)t, "a", 1, "other");
        ct_add(&bt, (pt_table)t, "z", 1, "second");
        ct_add(&bt, (pt_table)t, "m", 1, "other");
        is(ct_write(&b, &bt), 0, "embedded: a batch writing one cell twice (table %d)", t);
        pt_row_range z[] = {CT_RANGE("z", "z\xff")};
        is_str(ct_show(&b, (pt_table)t, z, 1), "z:00000001=second;",
               "embedded: the batch's later write of the cell wins (table %d)", t);
    }
    pt_backend_close(&b);
}

/* A one-row read whose window starts after the row's last chunk (as the head learnt it at
 * the last flush) reads only the head; one starting inside it reads the chunk too. */
static void test_embedded_known_chunks(const char *tmp)
{
    pt_backend b;
    if (open_named(&b, tmp, "known-chunks", "embedded(known chunks)") != 0)
        return;
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "r", 100, "a");
    ct_add(&bt, PT_TABLE_POINTS, "r", 200, "b");
    int w1 = ct_write(&b, &bt), f = pt_embedded_flush(&b);
    ct_batch b2 = {0};
    ct_add(&b2, PT_TABLE_POINTS, "r", 300, "c");
    ct_add(&b2, PT_TABLE_POINTS, "r", 150, "d"); /* before the chunk's end: a merge later */
    int w2 = ct_write(&b, &b2);
    ok(w1 == 0 && f == 0 && w2 == 0, "embedded(known chunks): written, flushed, written");
    pt_row_range one[] = {{PT_SLICE_LIT("r"), {(const uint8_t *)"r\0", 2}}};
    uint8_t q[4][4];
    const uint32_t at[4] = {150, 201, 250, 400};
    for (int i = 0; i < 4; i++)
        pt_put_be32(q[i], at[i]);
    pt_slice s150 = {q[0], 4}, s201 = {q[1], 4}, s250 = {q[2], 4}, s400 = {q[3], 4};
    is_str(ct_show_q(&b, PT_TABLE_POINTS, one, 1, s150, s400, 0),
           "r:00000096=d;r:000000c8=b;r:0000012c=c;",
           "embedded(known chunks): a window starting inside the last chunk reads it");
    is_str(ct_show_q(&b, PT_TABLE_POINTS, one, 1, s201, s400, 0), "r:0000012c=c;",
           "embedded(known chunks): a window after the last chunk reads the head");
    is_str(ct_show_q(&b, PT_TABLE_POINTS, one, 1, s250, s400, 0), "r:0000012c=c;",
           "embedded(known chunks): the same, further on");
    is_str(ct_show(&b, PT_TABLE_POINTS, one, 1), "r:00000064=a;r:00000096=d;r:000000c8=b;r:0000012c=c;",
           "embedded(known chunks): the whole row");
    pt_backend_close(&b);
}

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

static void test_embedded(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/nested/dirs/db", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "embedded: open creates %s", path);
    if (!b.state) {
        diag("open failed: %s", err);
        return;
    }
    pt_conformance_run(&b, "embedded");

    pt_backend twice;
    err[0] = '\0';
    ok(open_embedded(&twice, path, err, sizeof(err)) < 0 && err[0],
       "embedded: a second open of a locked store fails with a message");
    diag("second open: %s", err);

    digest pts = table_digest(&b, PT_TABLE_POINTS), idx = table_digest(&b, PT_TABLE_INDEX);
    ok(pts.cells > 4000 && idx.cells == 2, "embedded: digest before reopen (%zu, %zu cells)",
       pts.cells, idx.cells);
    pt_backend_close(&b);
    ok(b.state == NULL, "embedded: closed");

    is(open_embedded(&b, path, err, sizeof(err)), 0, "embedded: reopen");
    if (!b.state)
        return;
    digest pts2 = table_digest(&b, PT_TABLE_POINTS), idx2 = table_digest(&b, PT_TABLE_INDEX);
    ok(pts2.cells == pts.cells && pts2.h == pts.h, "embedded: points persisted across reopen");
    ok(idx2.cells == idx.cells && idx2.h == idx.h, "embedded: index persisted across reopen");
    pt_row_range r[] = {CT_RANGE("c03/r", "c03/r\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, r, 1), "c03/r:00000001=new;c03/r:00000002=keep;",
           "embedded: a rewritten cell persisted with its last value");
    /* After the reopen the cells sit in table files, so these go through the row bloom
     * filter rather than the memtable. */
    pt_row_range a[] = {CT_RANGE("c06/a", "c06/a\0")}, missing[] = {CT_RANGE("c06/aa", "c06/aa\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, a, 1),
           "c06/a:00000000=x;c06/a:00000001=y;c06/a:ffffffff=z;",
           "embedded: single row read from table files after reopen");
    is_str(ct_show(&b, PT_TABLE_POINTS, missing, 1), "",
           "embedded: missing single row read from table files after reopen");
    pt_backend_close(&b);

    char file[512];
    snprintf(file, sizeof(file), "%s/a-file", tmp);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(path, sizeof(path), "%s/a-file/db", tmp);
    err[0] = '\0';
    ok(open_embedded(&b, path, err, sizeof(err)) < 0 && strstr(err, "a-file"),
       "embedded: open under a regular file fails, naming the path");
    diag("open error: %s", err);
    pt_embedded_conf nopath = {.path = NULL};
    pt_backend_config none = {.own = &nopath};
    ok(pt_backend_open(&b, &pt_backend_embedded, &none, err, sizeof(err)) < 0,
       "embedded: open without a path fails");
}

/* ---- the head's shards: memory, logs, eviction, replay order ---- */

static uint32_t rnd(uint32_t n);

static int count_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    (void)qual;
    (void)value;
    ++*(size_t *)ud;
    return 0;
}

/* Files in dir named points.<digits>.wal (points logs). */
static int log_files(const char *dir)
{
    uint64_t *seqs;
    size_t n;
    if (pt_emb_wal_logs(dir, &seqs, &n) != 0)
        return -1;
    free(seqs);
    return (int)n;
}

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

/* The path of the log with records that is numbered highest, in p (a store makes the log
 * after its current one ahead of time, empty). */
static int current_log(const char *dir, char *p, size_t n)
{
    uint64_t *seqs;
    size_t nl;
    if (pt_emb_wal_logs(dir, &seqs, &nl) != 0)
        return -1;
    int rv = -1;
    for (size_t i = nl; i-- > 0 && rv != 0;) {
        struct stat st;
        snprintf(p, n, "%s/points.%llu.wal", dir, (unsigned long long)seqs[i]);
        if (stat(p, &st) == 0 && st.st_size > 0)
            rv = 0;
    }
    free(seqs);
    return rv;
}

/* A copy of the records a store has logged. */
static char *read_log(const char *dir, size_t *n)
{
    char p[600];
    if (current_log(dir, p, sizeof(p)) != 0)
        return NULL;
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

/* The points log of a store that got the cells "row=value" (qualifier 1) in one batch. */
static char *log_of(const char *tmp, const char *name, const char *const *cells, size_t ncells,
                    size_t *n)
{
    pt_backend b;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    if (open_named(&b, tmp, name, name) != 0)
        return NULL;
    ct_batch bt = {0};
    for (size_t i = 0; i < ncells; i += 2)
        ct_add(&bt, PT_TABLE_POINTS, cells[i], 1, cells[i + 1]);
    char *log = ct_write(&b, &bt) == 0 ? read_log(dir, n) : NULL;
    pt_backend_close(&b);
    return log;
}

static int put_file(const char *dir, const char *name, const char *p, size_t n)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* A bit flipped in the first of five records of a log: open skips that record and
 * replays the four intact ones after it (each defines its own row), and counts the
 * damaged bytes, instead of dropping all five as a torn tail. */
static void test_embedded_replay_damage(const char *tmp)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/replay-damage", tmp);
    pt_backend b;
    if (open_named(&b, tmp, "replay-damage", "embedded(replay damage)") != 0)
        return;
    static const char *const rows[] = {"d/1", "d/2", "d/3", "d/4", "d/5"};
    int rv = 0;
    for (int i = 0; i < 5 && rv == 0; i++) {
        ct_batch bt = {0};
        ct_add(&bt, PT_TABLE_POINTS, rows[i], 1, "v");
        rv = ct_write(&b, &bt);
    }
    size_t n = 0;
    char *log = rv == 0 ? read_log(dir, &n) : NULL;
    pt_backend_close(&b);
    ok(log && n > 100, "replay damage: five records logged (%zu bytes)", n);
    if (!log)
        return;
    /* Into a store that never had those cells (the first one flushed them at close). */
    log[26] ^= 0x10; /* in the first record's payload */
    snprintf(dir, sizeof(dir), "%s/replay-damage-2", tmp);
    int put = open_named(&b, tmp, "replay-damage-2", "embedded(replay damage): new store") == 0;
    if (put)
        pt_backend_close(&b);
    ok(put && log_files(dir) == 0 && put_file(dir, "points.7.wal", log, n) == 0,
       "replay damage: the log with a flipped bit in record 1 put in a new store");
    free(log);
    if (open_named(&b, tmp, "replay-damage-2", "embedded(replay damage): reopen") != 0)
        return;
    pt_row_range all[] = {CT_RANGE("d/", "d/\xff")};
    is_str(ct_show(&b, PT_TABLE_POINTS, all, 1),
           "d/2:00000001=v;d/3:00000001=v;d/4:00000001=v;d/5:00000001=v;",
           "replay damage: records 2 to 5 replayed, the damaged one skipped");
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(st.wal_damaged_bytes > 0 && st.wal_damaged_bytes < n,
       "replay damage: the damaged bytes counted (%llu)",
       (unsigned long long)st.wal_damaged_bytes);
    pt_backend_close(&b);
}

/* ---- a full disk under the points log ---- */

/* The points log's write seam (wal.c): a disk with room_left bytes free takes what fits
 * of a record and then says ENOSPC, as write(2) does on a full file system. */
static size_t room_left;

static ssize_t room_write(int fd, const void *p, size_t n)
{
    if (room_left == 0) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = write(fd, p, n < room_left ? n : room_left);
    if (w > 0)
        room_left -= (size_t)w;
    return w;
}

static void set_room(embedded *e, int full, size_t room)
{
    pthread_mutex_lock(&e->mu);
    e->w.write_fn = full ? room_write : NULL;
    room_left = room;
    pthread_mutex_unlock(&e->mu);
}

/* Whether the log file holds exactly the records the log counts (no partial record). */
static int log_whole(embedded *e)
{
    struct stat st;
    pthread_mutex_lock(&e->mu);
    int whole = fstat(e->w.fd, &st) == 0 && (uint64_t)st.st_size == e->w.size && e->w.size > 0;
    pthread_mutex_unlock(&e->mu);
    return whole;
}

/* open_named, with the store's directory in dir. */
static int open_dir(pt_backend *b, const char *tmp, const char *name, const char *label, char *dir,
                    size_t dirlen)
{
    snprintf(dir, dirlen, "%s/%s", tmp, name);
    return open_named(b, tmp, name, label);
}

/* The store's points ("n/") and index ("x/") cells, as "points | index". */
static const char *enospc_show(pt_backend *b)
{
    static char out[2048];
    pt_row_range p[] = {CT_RANGE("n/", "n0")}, x[] = {CT_RANGE("x/", "x0")};
    int len = snprintf(out, sizeof(out), "%s | ", ct_show(b, PT_TABLE_POINTS, p, 1));
    snprintf(out + len, sizeof(out) - (size_t)len, "%s", ct_show(b, PT_TABLE_INDEX, x, 1));
    return out;
}

/* A points log append that runs out of disk space (ENOSPC after part of the record):
 * the write fails with PT_ENOSPACE (503), the partial record is cut off and nothing of
 * the batch is acknowledged or visible; the store reports the full disk until its flush
 * thread sees space. Once writes get through, the same batch and one that uses the rows
 * it defined succeed, and every acknowledged cell reads back, from the head, from the
 * log replayed (pt_emb_reload_logs) and after a close and reopen. */
static void test_embedded_wal_enospc(const char *tmp)
{
    const char *L = "embedded(full disk under the log)";
    char dir[512];
    pt_backend b;
    if (open_dir(&b, tmp, "wal-enospc", L, dir, sizeof(dir)) != 0)
        return;
    embedded *e = b.state;
    ct_batch a = {0}, bb = {0}, c = {0};
    ct_add(&a, PT_TABLE_POINTS, "n/a", 1, "a1");
    ct_add(&a, PT_TABLE_POINTS, "n/a", 2, "a2");
    ct_add(&a, PT_TABLE_INDEX, "x/a", 1, "A");
    /* A new row (its definition is in the record) and a known one. */
    ct_add(&bb, PT_TABLE_POINTS, "n/a", 3, "b3");
    ct_add(&bb, PT_TABLE_POINTS, "n/b", 1, "b1");
    ct_add(&bb, PT_TABLE_INDEX, "x/b", 1, "B");
    /* Rows the batch after the refused one defined. */
    ct_add(&c, PT_TABLE_POINTS, "n/a", 4, "c4");
    ct_add(&c, PT_TABLE_POINTS, "n/b", 2, "c2");
    is(ct_write(&b, &a), 0, "%s: a batch acknowledged", L);
    const char *want_a = "n/a:00000001=a1;n/a:00000002=a2; | x/a:00000001=A;";

    set_room(e, 1, 7); /* less than a record header */
    int rv = ct_write(&b, &bb);
    is(rv, PT_ENOSPACE, "%s: a write that finds the disk full fails with PT_ENOSPACE", L);
    is(pt_error_http_status(rv), 503, "%s: ... answered 503", L);
    ok(room_left == 0 && log_whole(e), "%s: the part of the record that fit is cut off", L);
    is(ct_write(&b, &bb), PT_ENOSPACE, "%s: a retry on the full disk: PT_ENOSPACE again", L);
    char msg[256] = "";
    is(b.ops->health(b.state, msg, sizeof(msg)), PT_ENOSPACE, "%s: health says the disk is full",
       L);
    ok(strstr(msg, "no space left on the disk holding") && strstr(msg, dir),
       "%s: ... naming the disk (%s)", L, msg);
    is_str(enospc_show(&b), want_a, "%s: nothing of the refused batch is visible", L);

    set_room(e, 0, 0);
    is(ct_write(&b, &bb), 0, "%s: with space again, the batch is acknowledged", L);
    is(ct_write(&b, &c), 0, "%s: ... and one on the rows it defined", L);
    ok(log_whole(e), "%s: the log holds whole records", L);
    int healthy = 0;
    for (int i = 0; i < 1000 && !healthy; i++) { /* the flush thread looks each second */
        healthy = b.ops->health(b.state, msg, sizeof(msg)) == 0;
        if (!healthy)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    ok(healthy, "%s: health is good again once the flush thread sees space", L);
    const char *want = "n/a:00000001=a1;n/a:00000002=a2;n/a:00000003=b3;n/a:00000004=c4;"
                       "n/b:00000001=b1;n/b:00000002=c2; | x/a:00000001=A;x/b:00000001=B;";
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back", L);

    /* The log, the only place the points are: the head is dropped and the log replayed. */
    char err[256] = "";
    is(pt_emb_reload_logs(e, err, sizeof(err)), 0, "%s: the log replayed %s", L, err);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    is(st.wal_damaged_bytes, (uint64_t)0, "%s: ... with no damaged bytes", L);
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back after the replay", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: no log left after a close", L);
    if (open_named(&b, tmp, "wal-enospc", L) != 0)
        return;
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back after a reopen", L);
    pt_backend_close(&b);
}

/* A store whose log got index cells only (a new store's format row is such a batch) and
 * no points: a close drains them into RocksDB and leaves no log, as after points. */
static void test_embedded_index_only_close(const char *tmp)
{
    const char *L = "embedded(index cells only)";
    char dir[512];
    pt_backend b;
    if (open_dir(&b, tmp, "index-only", L, dir, sizeof(dir)) != 0)
        return;
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_INDEX, "x/format", 1, "2");
    is(ct_write(&b, &bt), 0, "%s: a batch of index cells acknowledged", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: no log left after a close", L);
    if (open_named(&b, tmp, "index-only", L) != 0)
        return;
    pt_row_range x[] = {CT_RANGE("x/", "x0")};
    is_str(ct_show(&b, PT_TABLE_INDEX, x, 1), "x/format:00000001=2;",
           "%s: the index cell reads back after a reopen", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: a close with nothing written leaves no log either", L);
}

/* Open replays the logs of older versions (the frozen one, then points.wal), then the
 * numbered logs in the order of their numbers (not of their names: 7 before 12); the
 * newest write of a cell wins, and every log is gone once its cells are in RocksDB. */
static void test_embedded_replay_order(const char *tmp)
{
    static const char *const frozen[] = {"o/a", "frozen", "o/b", "frozen", "o/c", "frozen",
                                          "o/d", "frozen"},
                             *old[] = {"o/b", "wal", "o/c", "wal", "o/d", "wal"},
                             *s7[] = {"o/c", "log7", "o/d", "log7"},
                             *s12[] = {"o/d", "log12"};
    size_t n[4];
    char *logs[4] = {log_of(tmp, "ro-1", frozen, 8, &n[0]), log_of(tmp, "ro-2", old, 6, &n[1]),
                     log_of(tmp, "ro-3", s7, 4, &n[2]), log_of(tmp, "ro-4", s12, 2, &n[3])};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/replay-order", tmp);
    pt_backend b;
    int made = logs[0] && logs[1] && logs[2] && logs[3] &&
               open_named(&b, tmp, "replay-order", "embedded(replay order)") == 0;
    if (made) {
        pt_backend_close(&b);
        made = log_files(dir) == 0 &&
               put_file(dir, "points.frozen.wal", logs[0], n[0]) == 0 &&
               put_file(dir, "points.wal", logs[1], n[1]) == 0 &&
               put_file(dir, "points.7.wal", logs[2], n[2]) == 0 &&
               put_file(dir, "points.12.wal", logs[3], n[3]) == 0;
    }
    ok(made, "embedded(replay order): logs of four stores put in place");
    if (made && open_named(&b, tmp, "replay-order", "embedded(replay order)") == 0) {
        pt_row_range all[] = {CT_RANGE("o/", "o0")};
        is_str(ct_show(&b, PT_TABLE_POINTS, all, 1),
               "o/a:00000001=frozen;o/b:00000001=wal;o/c:00000001=log7;o/d:00000001=log12;",
               "embedded(replay order): the newest write of each cell wins");
        char p[600], q[600];
        snprintf(p, sizeof(p), "%s/points.frozen.wal", dir);
        snprintf(q, sizeof(q), "%s/points.wal", dir);
        uint64_t *seqs;
        size_t nl = 0;
        int listed = pt_emb_wal_logs(dir, &seqs, &nl) == 0;
        ok(access(p, F_OK) != 0 && access(q, F_OK) != 0 && listed && nl == 2 &&
               seqs[0] == 13 && seqs[1] == 14,
           "embedded(replay order): the replayed logs are gone; records go to log 13");
        if (listed)
            free(seqs);
        pt_backend_close(&b);
    }
    for (int i = 0; i < 4; i++)
        free(logs[i]);
}

/* ---- the embedded head: flushes, chunk merges, crash recovery ---- */

/* The whole suite with a budget so small that every write flushes the head first: the
 * cells then live in RocksDB chunks, and rewrites go through the chunk merge. */
static void test_embedded_flushing(const char *tmp, size_t budget, uint64_t min_flushes,
                                   const char *label)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, label);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: open", label);
    if (!b.state)
        return;
    pt_embedded_set_budget(&b, budget);
    pt_conformance_run(&b, label);
    /* Flushes run in the background: wait for them, then count (open's flush, the
     * budget's, this one). */
    is(pt_embedded_flush(&b), 0, "%s: flush", label);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(st.flushes >= min_flushes + 1, "%s: the head was flushed %llu times", label,
       (unsigned long long)st.flushes);
    digest pts = table_digest(&b, PT_TABLE_POINTS);
    pt_backend_close(&b);
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen", label);
    if (!b.state)
        return;
    digest pts2 = table_digest(&b, PT_TABLE_POINTS);
    ok(pts.cells > 4000 && pts2.cells == pts.cells && pts2.h == pts.h,
       "%s: the same %zu cells after reopen", label, pts.cells);
    pt_backend_close(&b);
}

/* A model of a few rows, checked against the store after random writes, rewrites,
 * backfills, flushes and reopens. */
enum { M_ROWS = 3, M_QUALS = 6000 };

typedef struct model {
    char val[M_ROWS][M_QUALS][12]; /* "" = no cell */
} model;

static uint64_t rnd_state = 88172645463325252ull;

static uint32_t rnd(uint32_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (uint32_t)(rnd_state % n);
}

typedef struct mcheck {
    const model *m;
    int row;
    uint32_t next_q; /* every model cell below it was seen */
    uint32_t qe;
    int bad;
    size_t cells, streams;
} mcheck;

static int mcheck_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    mcheck *c = ud;
    (void)row;
    if (qual.n != 4) {
        c->bad = 1;
        return 1;
    }
    uint32_t q = pt_get_be32(qual.p);
    if (q < c->next_q || q >= c->qe) {
        c->bad = 1;
        return 1;
    }
    for (uint32_t k = c->next_q; k < q; k++)
        if (c->m->val[c->row][k][0]) {
            diag("row %d: cell %u missing", c->row, k);
            c->bad = 1;
            return 1;
        }
    const char *want = c->m->val[c->row][q];
    if (!want[0] || value.n != strlen(want) || memcmp(value.p, want, value.n) != 0) {
        diag("row %d: cell %u is \"%.*s\", want \"%s\"", c->row, q, (int)value.n,
             (const char *)value.p, want);
        c->bad = 1;
        return 1;
    }
    c->next_q = q + 1;
    c->cells++;
    return 0;
}

/* A stored stream in place of cells: its samples checked as the cells they stand for. */
static int mcheck_stream(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                         pt_slice stream)
{
    mcheck *c = ud;
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, stream.p, stream.n);
    int64_t t = -1;
    for (uint32_t i = 0; i < count && !c->bad; i++) {
        uint64_t bits;
        uint8_t v[8], q[4];
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || (i == 0 && t != first)) {
            c->bad = 1;
            break;
        }
        pt_put_be64(v, bits);
        pt_put_be32(q, (uint32_t)t);
        mcheck_cell(c, row, (pt_slice){q, 4}, (pt_slice){v, 8});
    }
    if (c->bad || t != last || !pt_gorilla_dec_done(&d)) {
        diag("row %d: a stream of %u samples [%u, %u] does not hold what it says", c->row, count,
             first, last);
        c->bad = 1;
        return 1;
    }
    c->streams++;
    return 0;
}

static const char *const m_rows[M_ROWS] = {"m/a", "m/a,b", "m/b"};

/* Scans row r over [qs, qe) and compares with the model; returns 1 when they agree. With
 * streams set, the scan takes stored streams too (pt_stream_fn), counted in *streams. */
static int model_agrees(pt_backend *b, const model *m, int r, uint32_t qs, uint32_t qe,
                        size_t *streams)
{
    pt_row_range rr[1];
    char end[16];
    snprintf(end, sizeof(end), "%s", m_rows[r]);
    size_t n = strlen(end);
    rr[0].start = (pt_slice){(const uint8_t *)m_rows[r], n};
    rr[0].end = (pt_slice){(const uint8_t *)end, n + 1}; /* includes the NUL: row || 0x00 */
    uint8_t a[4], z[4];
    pt_put_be32(a, qs);
    pt_put_be32(z, qe);
    mcheck c = {.m = m, .row = r, .next_q = qs, .qe = qe};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = rr, .nranges = 1,
                 .qual_start = qs ? (pt_slice){a, 4} : (pt_slice){0},
                 .qual_end = qe < M_QUALS ? (pt_slice){z, 4} : (pt_slice){0}};
    pt_stream_to to = {mcheck_stream, &c};
    if (streams)
        s.stream = &to;
    if (pt_backend_scan(b, &s, mcheck_cell, &c) != 0 || c.bad)
        return 0;
    if (streams)
        *streams += c.streams;
    for (uint32_t k = c.next_q; k < qe && k < M_QUALS; k++)
        if (m->val[r][k][0]) {
            diag("row %d: cell %u missing at the end", r, k);
            return 0;
        }
    return 1;
}

static void test_embedded_model(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/model", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "model: open");
    if (!b.state)
        return;
    model *m = calloc(1, sizeof(*m));
    if (!m)
        abort();
    uint32_t next[M_ROWS] = {0};
    int failures = 0, scans = 0, flushes = 0, reopens = 0;
    size_t streams = 0;
    static char vals[CT_BATCH_MAX][12];
    for (int round = 0; round < 600 && b.state; round++) {
        ct_batch bt = {0};
        size_t n = 1 + rnd(CT_BATCH_MAX);
        for (size_t i = 0; i < n; i++) {
            int r = (int)rnd(M_ROWS);
            uint32_t q;
            int kind = (int)rnd(10);
            if (kind < 7 && next[r] < M_QUALS) /* in order, the common case */
                q = next[r]++;
            else /* a rewrite or a backfill */
                q = rnd(M_QUALS);
            /* 8-byte values mostly (the fixed chunk format), others now and then; only
             * 8-byte ones in the last row, whose chunks are XOR streams. */
            if (r == M_ROWS - 1 || rnd(8))
                snprintf(vals[i], sizeof(vals[i]), "%08x", (unsigned)rnd(1u << 31));
            else
                snprintf(vals[i], sizeof(vals[i]), "v%u", (unsigned)rnd(1000));
            ct_add(&bt, PT_TABLE_POINTS, m_rows[r], q, vals[i]);
            memcpy(m->val[r][q], vals[i], sizeof(vals[i]));
        }
        if (ct_write(&b, &bt) != 0)
            failures++;
        int what = (int)rnd(20);
        if (what < 3) {
            failures += pt_embedded_flush(&b) != 0;
            flushes++;
        } else if (what == 3) {
            pt_backend_close(&b);
            if (open_embedded(&b, path, err, sizeof(err)) != 0) {
                failures++;
                break;
            }
            reopens++;
        }
        int r = (int)rnd(M_ROWS);
        uint32_t qs = rnd(M_QUALS), qe = qs + 1 + rnd(M_QUALS - qs);
        if (rnd(4) == 0)
            qs = 0, qe = M_QUALS;
        if (!model_agrees(&b, m, r, qs, qe, rnd(2) ? &streams : NULL)) {
            diag("round %d: row %d [%u, %u) differs", round, r, qs, qe);
            failures++;
        }
        scans++;
    }
    is(failures, 0, "model: %d scans after random writes, %d flushes, %d reopens agree", scans,
       flushes, reopens);
    ok(streams > 0, "model: half of the scans took stored streams (%zu of them)", streams);
    if (b.state) {
        pt_embedded_flush(&b);
        int all = 1;
        size_t whole = 0;
        for (int r = 0; r < M_ROWS; r++)
            all &= model_agrees(&b, m, r, 0, M_QUALS, NULL) &&
                   model_agrees(&b, m, r, 0, M_QUALS, &whole);
        ok(all, "model: every row agrees after a final flush, with and without streams "
                "(%zu streams)", whole);
        pt_backend_close(&b);
    }
    free(m);
}

/* The crash child's flush hook: from the third flush on, at its stage, it waits until the
 * current generation holds cells too (both logs then matter), says "F" and stops the
 * flush thread there for good; the parent kills the child then. */
typedef struct stall {
    embedded *e;
    int stage, calls;
} stall;

static int stall_hook(void *ud, int stage)
{
    stall *st = ud;
    if (stage != st->stage || ++st->calls < 3)
        return 0;
    for (;;) {
        pthread_mutex_lock(&st->e->mu);
        size_t cur = pt_emb_head_cur_cells(&st->e->h);
        pthread_mutex_unlock(&st->e->mu);
        if (cur >= 20 * 17)
            break;
        usleep(1000);
    }
    if (write(1, "F\n", 2) != 2)
        _exit(1);
    for (;;)
        pause();
}

/* The child of the crash test: writes batch after batch and prints the number of each one
 * acknowledged, until it is killed. Batch i also rewrites cell w/rw:0 with "i". stage >= 0:
 * the flush thread stalls there (stall_hook). */
static int crash_child(const char *path, size_t budget, int stage)
{
    pt_backend b;
    char err[256];
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "crash child: %s\n", err);
        return 1;
    }
    if (budget)
        pt_embedded_set_budget(&b, budget);
    static stall st;
    st = (stall){.e = b.state, .stage = stage};
    if (stage >= 0)
        pt_emb_set_hook(b.state, stall_hook, &st);
    static char vals[CT_BATCH_MAX][16];
    for (uint32_t i = 0; i < 1000000; i++) {
        ct_batch bt = {0};
        char rows[8][16];
        for (int r = 0; r < 8; r++)
            snprintf(rows[r], sizeof(rows[r]), "k/r%d", r);
        for (uint32_t j = 0; j < 16; j++) {
            snprintf(vals[j], sizeof(vals[j]), "%u.%u", i, j);
            ct_add(&bt, PT_TABLE_POINTS, rows[(i + j) % 8], i * 16 + j, vals[j]);
        }
        snprintf(vals[16], sizeof(vals[16]), "%u", i);
        ct_add(&bt, PT_TABLE_POINTS, "w/rw", 0, vals[16]);
        /* Two index cells: one row per batch (read back after the crash), and one cell
         * every batch rewrites. */
        char irow[24];
        snprintf(irow, sizeof(irow), "ix/%08u", i);
        ct_add(&bt, PT_TABLE_INDEX, irow, 7, vals[16]);
        ct_add(&bt, PT_TABLE_INDEX, "ix/rw", 0, vals[16]);
        if (ct_write(&b, &bt) != 0)
            return 1;
        char line[32];
        int len = snprintf(line, sizeof(line), "%u\n", i);
        if (write(1, line, (size_t)len) != len)
            return 1;
    }
    return 0;
}

typedef struct crash_check {
    uint32_t acked;  /* batches 0..acked-1 were acknowledged */
    size_t found, bad;
    long rw;         /* w/rw:0, -1 if missing */
    size_t ifound, ibad; /* index cells ix/<batch> */
} crash_check;

static int crash_index_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    char r[32], v[16];
    snprintf(r, sizeof(r), "%.*s", (int)(row.n < 31 ? row.n : 31), (const char *)row.p);
    snprintf(v, sizeof(v), "%.*s", (int)(value.n < 15 ? value.n : 15), (const char *)value.p);
    if (strcmp(r, "ix/rw") == 0) {
        c->rw = strtol(v, NULL, 10);
        return 0;
    }
    uint32_t i = (uint32_t)strtoul(r + 3, NULL, 10);
    if (qual.n != 4 || pt_get_be32(qual.p) != 7 || strtoul(v, NULL, 10) != i)
        c->ibad++;
    else if (i < c->acked)
        c->ifound++;
    return 0;
}

static int rw_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    char v[16];
    (void)row;
    (void)qual;
    snprintf(v, sizeof(v), "%.*s", (int)(value.n < 15 ? value.n : 15), (const char *)value.p);
    c->rw = strtol(v, NULL, 10);
    return 0;
}

static int crash_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    (void)row;
    uint32_t q = pt_get_be32(qual.p);
    char want[32];
    snprintf(want, sizeof(want), "%u.%u", q / 16, q % 16);
    if (value.n != strlen(want) || memcmp(value.p, want, value.n) != 0)
        c->bad++;
    if (q / 16 < c->acked)
        c->found++;
    return 0;
}

/* Table files in dir whose properties say they were written with the index's ZSTD
 * dictionary (only the index has one) at that level. */
static int index_files_at(const char *dir, int level)
{
    char want[64], path[600];
    snprintf(want, sizeof(want), "level=%d; strategy=0; max_dict_bytes=16384;", level);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 4, ".sst") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static char buf[1 << 20];
        size_t got = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        n += memmem(buf, got, want, strlen(want)) != NULL;
    }
    closedir(d);
    return n;
}

/* The index's level-0 files are ZSTD level 1 while the store runs (compactions soon
 * rewrite them at level 6), and the one a graceful stop writes is level 6, since it may
 * stay in level 0 for days; a reopen goes back to level 1. */
static void test_embedded_index_levels(const char *tmp)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ixlevels", tmp);
    pt_backend b;
    for (int round = 0; round < 2; round++) {
        if (open_named(&b, tmp, "ixlevels", "embedded(index levels)") != 0)
            return;
        static char rows[101][32], vals[100][16]; /* they outlive the batches */
        int fails = 0;
        for (int i0 = 0; i0 < 100; i0 += 50) {
            ct_batch bt = {0};
            for (int i = i0; i < i0 + 50; i++) {
                snprintf(rows[i], sizeof(rows[i]), "lv%d,%03d", round, i);
                snprintf(vals[i], sizeof(vals[i]), "v%d", i);
                ct_add(&bt, PT_TABLE_INDEX, rows[i], 1, vals[i]);
            }
            fails += ct_write(&b, &bt) != 0;
        }
        is(fails, 0, "embedded(index levels) %d: write", round);
        size_t cells = 0;
        pt_row_range all[] = {CT_RANGE("lv", "lw")};
        pt_scan s = {.table = PT_TABLE_INDEX, .ranges = all, .nranges = 1};
        is(pt_backend_scan(&b, &s, count_cell, &cells), 0, "embedded(index levels): scan");
        /* this round's 100, and the last round's 100 and its "last" */
        is(cells, (size_t)101 * round + 100, "embedded(index levels) %d: every cell", round);
        /* What RocksDB does when the index memtable fills: a flush of its own. */
        embedded *e = b.state;
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        char *msg = NULL;
        rocksdb_flush_cf(e->r.db, fo, e->r.cf[CF_INDEX], &msg);
        rocksdb_flushoptions_destroy(fo);
        ok(msg == NULL, "embedded(index levels) %d: memtable flushed", round);
        free(msg);
        is(index_files_at(path, 1), round + 1,
           "embedded(index levels) %d: a flush while running writes level 1", round);
        ct_batch bt = {0};
        snprintf(rows[100], sizeof(rows[100]), "lv%d,last", round);
        ct_add(&bt, PT_TABLE_INDEX, rows[100], 1, "v");
        /* with a sample: the stop's flush of the points drains the index head */
        ct_add(&bt, PT_TABLE_POINTS, rows[100], 1, "12345678");
        is(ct_write(&b, &bt), 0, "embedded(index levels) %d: write after", round);
        pt_backend_close(&b);
        is(index_files_at(path, 6), round + 1,
           "embedded(index levels) %d: the stop's flush writes level 6", round);
    }
}

/* Table files of a flush not ingested (flush.N.sst) in dir. */
static int flush_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strncmp(de->d_name, "flush.", 6) == 0;
    closedir(d);
    return n;
}

static void test_crash(const char *self, const char *tmp, size_t budget, const char *label,
                       int garbage, int stage)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, label);
    int fds[2];
    if (pipe(fds) != 0) {
        ok(0, "%s: pipe", label);
        return;
    }
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char bud[32], stg[16];
        snprintf(bud, sizeof(bud), "%zu", budget);
        snprintf(stg, sizeof(stg), "%d", stage);
        execl(self, self, "--crash-child", path, bud, stg, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    /* Read acknowledgements until enough came (or the flush stalled), then kill without
     * warning. */
    uint32_t acked = 0;
    int stalled = 0;
    char buf[4096], line[32];
    size_t ln = 0;
    ssize_t got;
    while (!stalled && (stage >= 0 || acked < 3000) &&
           (got = read(fds[0], buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < got && !stalled; i++) {
            if (buf[i] == '\n') {
                line[ln] = '\0';
                if (strcmp(line, "F") == 0)
                    stalled = 1;
                else
                    acked = (uint32_t)strtoul(line, NULL, 10) + 1;
                ln = 0;
            } else if (ln + 1 < sizeof(line)) {
                line[ln++] = buf[i];
            }
        }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
           (stage >= 0 ? stalled && acked > 0 : acked >= 3000),
       "%s: child killed with SIGKILL after %u acknowledged batches", label, acked);

    if (garbage) {
        /* A torn record at the end of the log, as a crash in the middle of write(). */
        char log[600] = "";
        current_log(path, log, sizeof(log));
        int fd = open(log, O_WRONLY | O_APPEND);
        static const char junk[] = "PTW1\x05\0\0\0\xff\xff\0\0torn";
        ok(fd >= 0 && write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk),
           "%s: append a torn record to the log", label);
        if (fd >= 0)
            close(fd);
    }

    /* Cut short after its first table file was written, a flush leaves that file
     * (not ingested); open deletes it, and the replayed log writes its cells again. */
    if (stage == EMB_HOOK_WRITTEN)
        ok(flush_files(path) > 0, "%s: the crash left the flush's table file", label);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen after the crash", label);
    if (!b.state) {
        diag("%s", err);
        return;
    }
    is(flush_files(path), 0, "%s: no flush table file left after open", label);
    crash_check c = {.acked = acked};
    pt_row_range all[] = {CT_RANGE("k/", "k/\xff")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "%s: scan", label);
    is(c.found, (size_t)acked * 16, "%s: every acknowledged cell is there, once (%zu)", label,
       c.found);
    is(c.bad, 0, "%s: with its value", label);
    /* The cell rewritten by every batch holds the last acknowledged write (or a later
     * one the parent had not read yet), not an older one from the frozen log. */
    c.rw = -1;
    pt_row_range rw[] = {CT_RANGE("w/rw", "w/rw\0")};
    pt_scan srw = {.table = PT_TABLE_POINTS, .ranges = rw, .nranges = 1};
    is(pt_backend_scan(&b, &srw, rw_cell, &c), 0, "%s: scan the rewritten cell", label);
    ok(c.rw >= (long)acked - 1, "%s: the newest write wins (%ld, acked %u)", label, c.rw, acked);
    /* Index cells: logged with their batch, replayed into the index head, readable. */
    c.rw = -1;
    pt_row_range ix[] = {CT_RANGE("ix/", "ix/\xff")};
    pt_scan six = {.table = PT_TABLE_INDEX, .ranges = ix, .nranges = 1};
    is(pt_backend_scan(&b, &six, crash_index_cell, &c), 0, "%s: scan the index", label);
    is(c.ifound, (size_t)acked, "%s: every acknowledged index cell is there (%zu)", label,
       c.ifound);
    is(c.ibad, 0, "%s: with its value", label);
    ok(c.rw >= (long)acked - 1, "%s: the newest write of an index cell wins (%ld, acked %u)",
       label, c.rw, acked);
    /* The store takes writes again after recovery, and keeps them. */
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "k/after", 1, "x");
    is(ct_write(&b, &bt), 0, "%s: write after recovery", label);
    pt_backend_close(&b);
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen again", label);
    if (!b.state)
        return;
    pt_row_range one[] = {CT_RANGE("k/after", "k/after\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, one, 1), "k/after:00000001=x;",
           "%s: the write after recovery persisted", label);
    pt_backend_close(&b);
}

/* A flush that keeps failing: the frozen generation stays (readable), writers are asked
 * to come back (PT_EBUSY, a 503) once the current one is full too, a synchronous flush
 * reports the error; once the fault is gone everything reaches RocksDB. */
static int fail_hook(void *ud, int stage)
{
    (void)stage;
    (*(int *)ud)++;
    return PT_EIO;
}

static void test_flush_failure(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/flush-failure", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "flush failure: open");
    if (!b.state)
        return;
    pt_embedded_set_budget(&b, 4 << 10);
    int calls = 0;
    pt_emb_set_hook(b.state, fail_hook, &calls);
    static char vals[16][16];
    uint32_t acked = 0;
    int rv = 0;
    for (; acked < 100000; acked++) {
        ct_batch bt = {0};
        for (uint32_t j = 0; j < 16; j++) {
            snprintf(vals[j], sizeof(vals[j]), "%u.%u", acked, j);
            ct_add(&bt, PT_TABLE_POINTS, j % 2 ? "k/a" : "k/b", acked * 16 + j, vals[j]);
        }
        if ((rv = ct_write(&b, &bt)) != 0)
            break;
    }
    is(rv, PT_EBUSY, "flush failure: writes are refused, retryable, after %u batches", acked);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(st.flush_failures >= 1 && calls >= 1 && st.frozen_cell_bytes > 0,
       "flush failure: counted (%llu), the frozen generation kept (%zu bytes)",
       (unsigned long long)st.flush_failures, st.frozen_cell_bytes);
    pt_row_range all[] = {CT_RANGE("k/", "k/\xff")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    crash_check c = {.acked = acked};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "flush failure: scan");
    ok(c.found == (size_t)acked * 16 && c.bad == 0,
       "flush failure: both generations read (%zu cells)", c.found);
    is(pt_embedded_flush(&b), PT_EIO, "flush failure: a synchronous flush reports it");

    pt_emb_set_hook(b.state, NULL, NULL);
    is(pt_embedded_flush(&b), 0, "flush failure: fault gone, flushed");
    pt_embedded_get_stats(&b, &st);
    ok(st.frozen_cell_bytes == 0 && st.head_cells == 0, "flush failure: the head is empty");
    ct_batch bt = {0};
    snprintf(vals[0], sizeof(vals[0]), "%u.0", acked);
    ct_add(&bt, PT_TABLE_POINTS, "k/b", acked * 16, vals[0]);
    is(ct_write(&b, &bt), 0, "flush failure: writes are accepted again");
    pt_backend_close(&b);
    is(open_embedded(&b, path, err, sizeof(err)), 0, "flush failure: reopen");
    if (!b.state)
        return;
    c = (crash_check){.acked = acked + 1};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "flush failure: scan after reopen");
    ok(c.found == (size_t)acked * 16 + 1 && c.bad == 0,
       "flush failure: every acknowledged cell after reopen (%zu)", c.found);
    pt_backend_close(&b);
}

/* ---- faulty-only cases ---- */

static void stats_are(pt_backend *fb, pt_faulty_stats want, const char *what)
{
    pt_faulty_stats got;
    pt_faulty_get_stats(fb, &got);
    if (!ok(memcmp(&got, &want, sizeof(got)) == 0, "faulty: counters after %s", what))
        diag("got writes=%llu write_faults=%llu partial=%llu scans=%llu scan_faults=%llu",
             (unsigned long long)got.writes, (unsigned long long)got.write_faults,
             (unsigned long long)got.partial_writes, (unsigned long long)got.scans,
             (unsigned long long)got.scan_faults);
}

static void test_fail_next(pt_backend *fb)
{
    pt_faulty_reset_stats(fb);
    pt_faulty_plan plan = {0};
    plan.write.fail_next = 3;
    plan.write.code = PT_ETIMEOUT;
    pt_faulty_set(fb, &plan);

    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "f1/r", 1, "try1");
    ct_add(&bt, PT_TABLE_POINTS, "f1/only-try1", 1, "x");
    is(ct_write(fb, &bt), PT_ETIMEOUT, "faulty: injected PT_ETIMEOUT returned verbatim");
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "f1/r", 1, "try2");
    is(ct_write(fb, &bt), PT_ETIMEOUT, "faulty: second injected failure");

    plan.write.fail_next = 1;
    plan.write.code = -150;
    pt_faulty_set(fb, &plan);
    is(ct_write(fb, &bt), -150, "faulty: any code, even an unnamed one, comes back as is");
    plan.write.fail_next = 1;
    plan.write.code = PT_EIO;
    pt_faulty_set(fb, &plan);
    is(ct_write(fb, &bt), PT_EIO, "faulty: a fatal code comes back as is");
    plan.write.code = 0;
    plan.write.fail_next = 1;
    pt_faulty_set(fb, &plan);
    is(ct_write(fb, &bt), PT_EUNAVAIL, "faulty: code 0 defaults to PT_EUNAVAIL");

    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "f1/r", 1, "try3");
    is(ct_write(fb, &bt), 0, "faulty: the write after the faults succeeds");
    pt_row_range r[] = {CT_RANGE("f1/", "f1/\xff")};
    is_str(ct_show(fb, PT_TABLE_POINTS, r, 1), "f1/r:00000001=try3;",
           "faulty: failed (non-partial) writes applied nothing");

    stats_are(fb, (pt_faulty_stats){.writes = 6, .write_faults = 5, .scans = 1},
              "6 writes, 5 faults, 1 scan");
    pt_faulty_set(fb, NULL);
}

static void test_partial(pt_backend *fb)
{
    pt_faulty_set(fb, NULL);
    pt_faulty_reset_stats(fb);
    ct_batch bt = {0};
    for (uint32_t q = 1; q <= 6; q++)
        ct_add(&bt, PT_TABLE_POINTS, "f2/r", q, "old");
    is(ct_write(fb, &bt), 0, "faulty: seed 6 old cells");

    /* The intended batch: rewrite the 6 cells, add 2 new ones, one index cell. */
    ct_batch want = {0};
    for (uint32_t q = 1; q <= 8; q++)
        ct_add(&want, PT_TABLE_POINTS, "f2/r", q, "new");
    ct_add(&want, PT_TABLE_INDEX, "f2/idx", 1, "i");

    pt_faulty_plan plan = {0};
    plan.write.fail_next = 2;
    plan.write.partial = 1;
    pt_faulty_set(fb, &plan);
    is(ct_write(fb, &want), PT_EUNAVAIL, "faulty: partial write fails with PT_EUNAVAIL");
    pt_row_range r[] = {CT_RANGE("f2/", "f2/\xff")};
    is_str(ct_show(fb, PT_TABLE_POINTS, r, 1),
           "f2/r:00000001=new;f2/r:00000002=new;f2/r:00000003=new;f2/r:00000004=new;"
           "f2/r:00000005=new;f2/r:00000006=old;",
           "faulty: after the outage the first ceil(9/2) = 5 mutations are applied");
    is_str(ct_show(fb, PT_TABLE_INDEX, r, 1), "", "faulty: the index cell was not applied");
    is(ct_write(fb, &want), PT_EUNAVAIL, "faulty: the first retry hits the outage too");

    is(ct_write(fb, &want), 0, "faulty: the second retry succeeds");
    is_str(ct_show(fb, PT_TABLE_POINTS, r, 1),
           "f2/r:00000001=new;f2/r:00000002=new;f2/r:00000003=new;f2/r:00000004=new;"
           "f2/r:00000005=new;f2/r:00000006=new;f2/r:00000007=new;f2/r:00000008=new;",
           "faulty: retried batch leaves exactly the intended cells, no duplicates");
    is_str(ct_show(fb, PT_TABLE_INDEX, r, 1), "f2/idx:00000001=i;",
           "faulty: and the intended index cell");
    stats_are(fb,
              (pt_faulty_stats){.writes = 4, .write_faults = 2, .partial_writes = 2,
                                .scans = 4},
              "4 writes, 2 partial, 4 scans");

    /* A one-mutation batch is applied whole, then fails: an acknowledgement lost. */
    plan.write.fail_next = 1;
    pt_faulty_set(fb, &plan);
    bt.n = 0;
    ct_add(&bt, PT_TABLE_POINTS, "f2/single", 1, "s");
    is(ct_write(fb, &bt), PT_EUNAVAIL, "faulty: partial write of one mutation fails");
    pt_row_range one[] = {CT_RANGE("f2/single", "f2/single\0")};
    is_str(ct_show(fb, PT_TABLE_POINTS, one, 1), "f2/single:00000001=s;",
           "faulty: ...but its mutation was applied (lost acknowledgement)");
    pt_faulty_set(fb, NULL);
}

static void record_pattern(pt_backend *fb, const pt_faulty_plan *plan, char *out, size_t n)
{
    pt_faulty_set(fb, plan);
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "f3/r", 1, "v");
    for (size_t i = 0; i < n; i++)
        out[i] = ct_write(fb, &bt) == 0 ? '.' : 'X';
    out[n] = '\0';
    pt_faulty_set(fb, NULL);
}

static void test_probability(pt_backend *fb)
{
    enum { N = 200 };
    char a[N + 1], c[N + 1], d[N + 1];
    pt_faulty_plan plan = {0};
    plan.seed = 42;
    plan.write.fail_prob = 0.25;
    pt_faulty_reset_stats(fb);
    record_pattern(fb, &plan, a, N);
    record_pattern(fb, &plan, c, N);
    is_str(c, a, "faulty: the same seed fails the same writes");
    size_t faults = 0;
    for (size_t i = 0; i < N; i++)
        faults += a[i] == 'X';
    ok(faults > 20 && faults < 80, "faulty: p = 0.25 failed %zu of %d writes", faults, N);
    stats_are(fb, (pt_faulty_stats){.writes = 2 * N, .write_faults = 2 * faults},
              "two random runs");
    plan.seed = 43;
    record_pattern(fb, &plan, d, N);
    ok(strcmp(a, d) != 0, "faulty: another seed gives another pattern");
    plan.write.fail_prob = 1.0;
    record_pattern(fb, &plan, d, 10);
    is_str(d, "XXXXXXXXXX", "faulty: p = 1 fails every write");
}

static void test_scan_faults(pt_backend *fb)
{
    ct_batch bt = {0};
    for (uint32_t q = 1; q <= 5; q++)
        ct_add(&bt, PT_TABLE_POINTS, "f4/r", q, "v");
    is(ct_write(fb, &bt), 0, "faulty: write 5 cells to scan");
    pt_row_range r[] = {CT_RANGE("f4/", "f4/\xff")};

    pt_faulty_reset_stats(fb);
    pt_faulty_plan plan = {0};
    plan.scan.fail_next = 1;
    plan.scan.code = PT_EUNAVAIL;
    pt_faulty_set(fb, &plan);
    ct_sink sink;
    ct_sink_init(&sink);
    is(ct_scan(fb, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), PT_EUNAVAIL,
       "faulty: a failed scan returns the injected code");
    is(sink.calls, 0, "faulty: ...before any cell");
    ct_sink_free(&sink);
    ct_sink_init(&sink);
    is(ct_scan(fb, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), 0,
       "faulty: the next scan succeeds");
    is(sink.calls, 5, "faulty: ...with every cell");
    ct_sink_free(&sink);

    plan.scan.fail_next = 1;
    plan.scan.code = PT_ETIMEOUT;
    plan.scan.after_cells = 2;
    pt_faulty_set(fb, &plan);
    ct_sink_init(&sink);
    is(ct_scan(fb, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &sink), PT_ETIMEOUT,
       "faulty: a scan cut mid-stream returns the injected code");
    is(sink.calls, 2, "faulty: ...after delivering 2 cells");
    ct_sink_free(&sink);

    plan = (pt_faulty_plan){0};
    plan.scan.fail_prob = 1.0;
    plan.scan.code = PT_EBUSY;
    pt_faulty_set(fb, &plan);
    is_str(ct_show(fb, PT_TABLE_POINTS, r, 1), "ERROR -102",
           "faulty: p = 1 fails every scan with its code");
    stats_are(fb, (pt_faulty_stats){.scans = 4, .scan_faults = 3}, "4 scans, 3 faults");
    pt_faulty_set(fb, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void test_latency(pt_backend *fb)
{
    pt_faulty_plan plan = {0};
    plan.latency_ms = 30;
    pt_faulty_set(fb, &plan);
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "f5/r", 1, "v");
    double t0 = now_ms();
    int rv = ct_write(fb, &bt);
    double t1 = now_ms();
    pt_row_range r[] = {CT_RANGE("f5/", "f5/\xff")};
    const char *got = ct_show(fb, PT_TABLE_POINTS, r, 1);
    double t2 = now_ms();
    is(rv, 0, "faulty: a slow write still succeeds");
    ok(t1 - t0 >= 29.0, "faulty: latency added to write (%.1f ms)", t1 - t0);
    is_str(got, "f5/r:00000001=v;", "faulty: a slow scan still succeeds");
    ok(t2 - t1 >= 29.0, "faulty: latency added to scan (%.1f ms)", t2 - t1);
    pt_faulty_set(fb, NULL);
}

static void test_faulty(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/db", tmp);
    pt_backend inner, fb;
    is(open_embedded(&inner, path, err, sizeof(err)), 0, "faulty: open the inner store");
    if (!inner.state) {
        diag("open failed: %s", err);
        return;
    }
    pt_backend_config none = {0};
    ok(pt_backend_open(&fb, &pt_backend_faulty, &none, err, sizeof(err)) < 0 && err[0],
       "faulty: open without an inner backend fails");
    pt_backend_config cfg = {.inner = &inner};
    is(pt_backend_open(&fb, &pt_backend_faulty, &cfg, err, sizeof(err)), 0, "faulty: open");
    if (!fb.state) {
        pt_backend_close(&inner);
        return;
    }
    is(fb.ops->init(fb.state, err, sizeof(err)), 0, "faulty: init forwards (inner needs none)");

    pt_conformance_run(&fb, "faulty(embedded)");
    test_fail_next(&fb);
    test_partial(&fb);
    test_probability(&fb);
    test_scan_faults(&fb);
    test_latency(&fb);

    pt_backend_close(&fb);
    pt_backend_close(&inner);
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

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--crash-child") == 0)
        return crash_child(argv[2], (size_t)strtoull(argv[3], NULL, 10), atoi(argv[4]));
    ok(pt_backend_find("embedded") == &pt_backend_embedded, "registry: embedded");
    ok(pt_backend_find("faulty") == &pt_backend_faulty, "registry: faulty");

    char t1[] = "/tmp/pt-conformance-XXXXXX";
    char t2[] = "/tmp/pt-conformance-XXXXXX";
    if (!mkdtemp(t1) || !mkdtemp(t2)) {
        ok(0, "mkdtemp");
        return done_testing();
    }
    /* The crash children first: a fork after RocksDB started its threads is not safe,
     * and they exec this program afresh anyway. */
    test_crash(argv[0], t1, 0, "crash(log only)", 1, -1);
    test_crash(argv[0], t1, 16 << 10, "crash(flushing)", 0, -1);
    test_crash(argv[0], t1, 16 << 10, "crash(mid-flush, chunks written)", 0, EMB_HOOK_WRITTEN);
    test_crash(argv[0], t1, 16 << 10, "crash(mid-flush, chunks durable)", 0, EMB_HOOK_DURABLE);
    test_embedded(t1);
    test_embedded_batch_order(t1);
    test_embedded_known_chunks(t1);
    test_embedded_flushing(t1, 1, 100, "embedded(flush every write)");
    test_embedded_flushing(t1, 64 << 10, 2, "embedded(64 KiB head)");
    test_embedded_model(t1);
    test_embedded_compressed_head(t1);
    test_embedded_shards(t1);
    test_embedded_evict(t1);
    test_embedded_sweep(t1);
    test_embedded_replay_order(t1);
    test_embedded_replay_damage(t1);
    test_embedded_wal_enospc(t1);
    test_embedded_index_only_close(t1);
    test_embedded_max_age(t1);
    test_flush_failure(t1);
    test_index_pressure(t1);
    test_embedded_index_levels(t1);
    test_faulty(t2);
    rm_rf(t1);
    rm_rf(t2);
    return done_testing();
}
