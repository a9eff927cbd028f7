/*
 * Runs the conformance suite over the embedded store (as it is, and with heads so small
 * that every write flushes) and over the faulty wrapper around it, then checks what only
 * those two can show: persistence across a reopen, open errors, and the wrapper's
 * injected faults (verbatim codes, partial batches repaired by a retry, failing scans).
 * The embedded store's own cases are in t_embedded_head.c (the head: memory, shards,
 * eviction, the index head), t_embedded_wal.c (the points logs: replay, a full disk) and
 * t_embedded_flush.c (flushes: chunk merges, crashes, failed flushes).
 */
#include "embedded_helpers.h"
#include "faulty.h"

/* ---- embedded-only cases ---- */

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
    ok(pts.cells > 4000 && idx.cells == 5, "embedded: digest before reopen (%zu, %zu cells)",
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

/* ---- write-back: the head and the logs in front of another backend ---- */

static int open_writeback(pt_backend *b, const char *path, pt_backend *sink, char *err,
                          size_t errlen)
{
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec, .inner = sink};
    return pt_backend_open(b, &pt_backend_embedded, &cfg, err, errlen);
}

/* The suite over a write-back store whose sink is an embedded store of its own: with a
 * head of budget bytes (1: every write flushes first), reads merge the head with the
 * sink's cells. Then: what a flush moved is in the sink itself; a close flushes the rest,
 * so the sink alone holds every cell; a write-back store reopened over it reads the same;
 * and what an unflushed head held comes back from the logs after a reopen. */
static void test_writeback(const char *tmp, size_t budget, const char *label)
{
    char sp[512], wp[512], err[256] = "";
    snprintf(sp, sizeof(sp), "%s/%s-sink", tmp, label);
    snprintf(wp, sizeof(wp), "%s/%s-buffer", tmp, label);
    pt_backend sink, b;
    if (!ok(open_embedded(&sink, sp, err, sizeof(err)) == 0, "%s: sink open %s", label, err))
        return;
    if (!ok(open_writeback(&b, wp, &sink, err, sizeof(err)) == 0, "%s: open %s", label, err)) {
        pt_backend_close(&sink);
        return;
    }
    pt_embedded_set_budget(&b, budget);
    pt_conformance_run(&b, label);
    digest pts = table_digest(&b, PT_TABLE_POINTS), idx = table_digest(&b, PT_TABLE_INDEX);
    digest idx_sink = table_digest(&sink, PT_TABLE_INDEX);
    ok(idx_sink.cells == idx.cells && idx_sink.h == idx.h,
       "%s: index cells go straight to the sink (%zu cells)", label, idx.cells);

    pt_backend again;
    err[0] = '\0';
    ok(open_writeback(&again, wp, &sink, err, sizeof(err)) < 0 && err[0],
       "%s: a second open of the buffer fails with a message", label);
    diag("second open: %s", err);

    is(pt_embedded_flush(&b), 0, "%s: flush", label);
    digest flushed = table_digest(&sink, PT_TABLE_POINTS);
    ok(pts.cells > 4000 && flushed.cells == pts.cells && flushed.h == pts.h,
       "%s: after a flush the sink alone holds the %zu cells", label, pts.cells);

    /* Cells only the head and the logs hold, then a reopen: the replay flushes them. */
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "wb/late", 7, "head-only");
    ct_add(&bt, PT_TABLE_POINTS, "c03/r", 2, "newer");
    is(ct_write(&b, &bt), 0, "%s: a write the head keeps", label);
    pt_row_range late[] = {CT_RANGE("wb/late", "wb/late\0")};
    is_str(ct_show(&sink, PT_TABLE_POINTS, late, 1), "",
           "%s: ... not in the sink before a flush", label);
    is_str(ct_show(&b, PT_TABLE_POINTS, late, 1), "wb/late:00000007=head-only;",
           "%s: ... but read through the buffer", label);
    pt_row_range r[] = {CT_RANGE("c03/r", "c03/r\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, r, 1), "c03/r:00000001=new;c03/r:00000002=newer;",
           "%s: the head's cell wins over the sink's", label);
    pt_backend_close(&b);
    is_str(ct_show(&sink, PT_TABLE_POINTS, late, 1), "wb/late:00000007=head-only;",
           "%s: close flushes the head into the sink", label);
    is(log_files(wp), 0, "%s: and leaves no log behind", label);
    if (ok(open_writeback(&b, wp, &sink, err, sizeof(err)) == 0, "%s: reopen %s", label, err)) {
        digest after = table_digest(&b, PT_TABLE_POINTS);
        ok(after.cells == pts.cells + 1, "%s: every cell read back after the reopen (%zu)",
           label, after.cells);
        pt_backend_close(&b);
    }
    pt_backend_close(&sink);
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

int main(void)
{
    ok(pt_backend_find("embedded") == &pt_backend_embedded, "registry: embedded");
    ok(pt_backend_find("faulty") == &pt_backend_faulty, "registry: faulty");

    char t1[] = "/tmp/pt-conformance-XXXXXX";
    char t2[] = "/tmp/pt-conformance-XXXXXX";
    if (emb_tmpdir(t1) != 0 || emb_tmpdir(t2) != 0)
        return done_testing();
    test_embedded(t1);
    test_embedded_batch_order(t1);
    test_embedded_known_chunks(t1);
    test_embedded_flushing(t1, 1, 100, "embedded(flush every write)");
    test_embedded_flushing(t1, 64 << 10, 2, "embedded(64 KiB head)");
    test_writeback(t1, 1, "write-back(flush every write)");
    test_writeback(t1, 64 << 10, "write-back(64 KiB head)");
    test_faulty(t2);
    rm_rf(t1);
    rm_rf(t2);
    return done_testing();
}
