/*
 * The Cloud Bigtable backend: the gRPC C core speaking google.bigtable.v2.Bigtable
 * (MutateRows, ReadRows) and google.bigtable.admin.v2.BigtableTableAdmin (CreateTable,
 * GetTable), with protobuf-c messages from bigtable.proto. This file holds the ops table
 * and the backend's lifetime; bigtable_int.h lists the modules that do the work.
 *
 * Schema (docs/storage-format.md): tables <prefix>points and <prefix>index, one family "p" each.
 *
 * Threads: one channel per endpoint, shared by every call (gRPC channels are
 * thread-safe). Each call has its own completion queue which the calling thread plucks;
 * write and scan block their (worker) thread and never run on the event loop.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "bigtable.h"
#include "bigtable_int.h"
#include "embedded/embedded.h"
#include "error.h"
#include "log.h"

enum {
    WRITE_DEADLINE_MS = 30000,
    READ_DEADLINE_MS = 60000,
    RETRY_BUDGET_MS = 5000,
    /* A piece of a wide range must repay its stream's round trip many times over. */
    SPLIT_BYTES = 16 << 20,
    /* Tablets move slowly; an old answer only makes pieces less even. */
    SAMPLE_TTL_MS = 60000,
};

/* storage.bigtable.read_streams: a macro, so that conf_keys gets the same default as text. */
#define READ_STREAMS 4
#define STR_(x) #x
#define STR(x) STR_(x)

static char *str_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static char *str_printf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Also undoes a failed open: every field is freed or NULL. */
static void bt_close(void *state)
{
    pt_bt *bt = state;
    /* Compaction first: its pass in flight uses the channel. */
    pt_bt_compact_free(bt);
    /* The write-back store next: its close flushes what it holds into Bigtable. */
    if (bt->wb.ops)
        pt_backend_close(&bt->wb);
    pt_bt_stats st;
    pt_bt_get_stats(bt, &st);
    /* Round trips per scan, for whoever tunes read_streams: there is no other place where
     * the backend's own counters show. */
    if (st.scans)
        pt_log(PT_LOG_INFO, "bigtable scans",
               "scans=%lu read_calls=%lu scan_resumes=%lu sample_calls=%lu", st.scans,
               st.read_calls, st.scan_resumes, st.sample_calls);
    /* What this process sent, buffer flushed: the traffic per sample of a whole run. */
    if (st.all.rows_mutated)
        pt_log(PT_LOG_INFO, "bigtable writes",
               "points_rows=%lu points_cells=%lu points_bytes=%lu rows=%lu cells=%lu bytes=%lu",
               st.points.rows_mutated, st.points.cells_written, st.points.write_bytes,
               st.all.rows_mutated, st.all.cells_written, st.all.write_bytes);
    if (st.flow.infos)
        pt_log(PT_LOG_INFO, "bigtable flow control",
               "rate_limit_infos=%lu writes_refused=%lu wait_seconds=%.3f", st.flow.infos,
               st.flow.refused, st.flow.waited_s);
    pt_bt_rpc_disconnect(bt);
    pt_bt_sample_free(bt);
    pt_bt_flow_free(&bt->flow);
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        free(bt->table[t]);
        free(bt->params[t]);
    }
    free(bt->parent);
    free(bt->parent_params);
    memset(bt, 0, sizeof(*bt));
}

static const pt_backend_ops pt_bt_direct_ops;

/* The write-back store over this backend (pt_bt.wb). Opening it replays its logs and
 * flushes what they hold into Bigtable. */
static int open_buffer(pt_bt *bt, const pt_bigtable_conf *bc, char *err, size_t errlen)
{
    bt->direct = (pt_backend){.ops = &pt_bt_direct_ops, .state = bt};
    pt_embedded_conf ec = {.path = bc->buffer_path,
                           .sync = bc->buffer_sync,
                           .head_memory = bc->buffer_memory,
                           .head_max_age_ms = bc->flush_interval_ms};
    pt_backend_config cfg = {.own = &ec, .inner = &bt->direct};
    char why[512] = "";
    int rv = pt_backend_open(&bt->wb, &pt_backend_embedded, &cfg, why, sizeof(why));
    if (rv != 0) {
        bt->wb.ops = NULL;
        snprintf(err, errlen, "bigtable: the write-back buffer: %s", why);
    }
    return rv;
}

static int bt_write(void *state, const pt_mutation *m, size_t n)
{
    pt_bt *bt = state;
    return bt->wb.ops ? pt_backend_write(&bt->wb, m, n) : pt_bt_data_write(bt, m, n);
}

static int bt_position(void *state, pt_table t, pt_slice key, uint64_t *before, uint64_t *total)
{
    return pt_bt_sample_position(state, (int)t, key, before, total);
}

static int bt_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    pt_bt *bt = state;
    return bt->wb.ops ? pt_backend_scan(&bt->wb, s, fn, ud) : pt_bt_data_scan(bt, s, fn, ud);
}

/* Through the write-back buffer, which flushes its head into Bigtable first. */
static int bt_erase(void *state, const pt_erase *x, size_t n)
{
    pt_bt *bt = state;
    return bt->wb.ops ? pt_backend_erase(&bt->wb, x, n) : pt_bt_erase(bt, x, n);
}

/* pt_backend_ops.health: the write-back buffer's disk. */
static int bt_health(void *state, char *msg, size_t msglen)
{
    pt_bt *bt = state;
    return bt->wb.ops && bt->wb.ops->health ? bt->wb.ops->health(bt->wb.state, msg, msglen)
                                            : 0;
}

static int bt_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    static const char *const suffix[PT_TABLE_COUNT] = {"points", "index"};
    pt_bt *bt = state;
    static const pt_bigtable_conf none = {"", "", "", "", READ_STREAMS, "", 0, 0, 0, 0};
    const pt_bigtable_conf *bc = cfg->own ? cfg->own : &none;
    const char *prefix = bc->table_prefix ? bc->table_prefix : "";
    const char *endpoint = bc->endpoint && *bc->endpoint ? bc->endpoint : NULL;
    if (!endpoint) {
        const char *env = getenv("BIGTABLE_EMULATOR_HOST");
        endpoint = env && *env ? env : NULL;
    }
    if (!bc->project || !*bc->project || !bc->instance || !*bc->instance) {
        snprintf(err, errlen,
                 "bigtable: storage.bigtable.project and storage.bigtable.instance "
                 "must be set");
        return PT_EINTERNAL;
    }
    pt_bt_sample_init(bt);
    pt_bt_compact_init(bt);
    pt_bt_flow_init(&bt->flow, (int64_t)pt_now_ns());
    bt->write_ms = WRITE_DEADLINE_MS;
    bt->read_ms = READ_DEADLINE_MS;
    bt->retry_ms = RETRY_BUDGET_MS;
    bt->retention_s = cfg->retention_seconds;
    bt->keep_row = cfg->keep_row_ms;
    bt->keep_ud = cfg->keep_ud;
    bt->retention_dropped = cfg->retention_dropped;
    /* Zero when a caller filled the struct itself, without the configuration's default. */
    bt->read_streams = bc->read_streams > 0 ? (int)bc->read_streams : READ_STREAMS;
    bt->split_bytes = SPLIT_BYTES;
    bt->sample_ttl_ms = SAMPLE_TTL_MS;
    /* The low bytes of this process's writer ids (bigtable_int.h, chunk cells): random, so
     * two processes writing one row in the same millisecond still differ. */
    if (getrandom(&bt->instance, sizeof(bt->instance), GRND_NONBLOCK) != sizeof(bt->instance))
        bt->instance = (uint16_t)(getpid() ^ pt_mono_ms());

    int rv = PT_ENOMEM;
    bt->parent = str_printf("projects/%s/instances/%s", bc->project, bc->instance);
    bt->parent_params = bt->parent ? pt_bt_rpc_params("parent", bt->parent) : NULL;
    if (!bt->parent_params)
        goto nomem;
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        bt->table[t] = str_printf("%s/tables/%s%s", bt->parent, prefix, suffix[t]);
        if (!bt->table[t] || !(bt->params[t] = pt_bt_rpc_params("table_name", bt->table[t])))
            goto nomem;
        bt->table_id[t] = bt->table[t] + strlen(bt->parent) + strlen("/tables/");
    }
    if ((rv = pt_bt_rpc_connect(bt, endpoint, err, errlen)) != 0 ||
        (!cfg->direct && bc->buffer_path && *bc->buffer_path &&
         (rv = open_buffer(bt, bc, err, errlen)) != 0))
        goto fail;
    /* The daemon's store compacts; init and copy (direct) and check run beside it and
     * do not. */
    if (!cfg->direct && !cfg->no_background && bc->compaction_interval_ms > 0 &&
        (rv = pt_bt_compact_start(bt, bc->compaction_interval_ms)) != 0) {
        snprintf(err, errlen, "bigtable: cannot start the compaction thread");
        goto fail;
    }
    return 0;

nomem:
    snprintf(err, errlen, "bigtable: out of memory");
fail:
    bt_close(bt);
    return rv;
}

void pt_bt_set_timeouts(void *state, int call_ms, int retry_budget_ms)
{
    pt_bt *bt = state;
    if (call_ms > 0)
        bt->write_ms = bt->read_ms = call_ms;
    if (retry_budget_ms > 0)
        bt->retry_ms = retry_budget_ms;
}

void pt_bt_set_read_streams(void *state, int streams)
{
    pt_bt *bt = state;
    if (streams > 0)
        bt->read_streams = streams;
}

void pt_bt_set_sampling(void *state, int64_t min_piece_bytes, int ttl_ms)
{
    pt_bt *bt = state;
    if (min_piece_bytes > 0)
        bt->split_bytes = min_piece_bytes;
    if (ttl_ms > 0)
        bt->sample_ttl_ms = ttl_ms;
}

static pt_bt_traffic traffic(const pt_bt *bt, int t)
{
    return (pt_bt_traffic){
        .rows_mutated = atomic_load(&bt->rows_mutated[t]),
        .cells_written = atomic_load(&bt->cells_written[t]),
        .write_bytes = atomic_load(&bt->write_bytes[t]),
        .rows_read = atomic_load(&bt->rows_read[t]),
        .cells_read = atomic_load(&bt->cells_read[t]),
    };
}

void pt_bt_get_stats(void *state, pt_bt_stats *out)
{
    pt_bt *bt = state;
    *out = (pt_bt_stats){
        .write_retries = atomic_load(&bt->write_retries),
        .scan_resumes = atomic_load(&bt->scan_resumes),
        .scans = atomic_load(&bt->scans),
        .read_calls = atomic_load(&bt->read_calls),
        .sample_calls = atomic_load(&bt->sample_calls),
        .points = traffic(bt, PT_TABLE_POINTS),
        .compacted_rows = atomic_load(&bt->compact.rows),
        .compacted_cells = atomic_load(&bt->compact.cells),
        .compaction_chunks = atomic_load(&bt->compact.chunks),
        .compaction_passes = atomic_load(&bt->compact.passes),
        .compaction_failures = atomic_load(&bt->compact.failures),
    };
    pt_bt_flow_get(&bt->flow, (int64_t)pt_now_ns(), &out->flow);
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        pt_bt_traffic x = traffic(bt, t);
        out->all.rows_mutated += x.rows_mutated;
        out->all.cells_written += x.cells_written;
        out->all.write_bytes += x.write_bytes;
        out->all.rows_read += x.rows_read;
        out->all.cells_read += x.cells_read;
    }
}

/* The traffic counters on /metrics, each for both tables and for the points table alone
 * (the samples; the difference is the index). */
static const struct {
    const char *all, *points;
    const char *help_all, *help_points;
    size_t field; /* offset in pt_bt_traffic */
} traffic_metrics[] = {
    {"promtable_bigtable_rows_mutated_total", "promtable_bigtable_points_rows_mutated_total",
     "Row entries sent in MutateRows requests, each once (retries are counted in "
     "promtable_bigtable_write_retries_total), both tables.",
     "Row entries sent in MutateRows requests to the points table, each once.",
     offsetof(pt_bt_traffic, rows_mutated)},
    {"promtable_bigtable_cells_written_total", "promtable_bigtable_points_cells_written_total",
     "SetCell mutations sent in MutateRows requests, each once, both tables.",
     "SetCell mutations sent in MutateRows requests to the points table, each once.",
     offsetof(pt_bt_traffic, cells_written)},
    {"promtable_bigtable_write_bytes_total", "promtable_bigtable_points_write_bytes_total",
     "Bytes of serialized MutateRows requests sent, retries included, both tables.",
     "Bytes of serialized MutateRows requests sent to the points table, retries included.",
     offsetof(pt_bt_traffic, write_bytes)},
    {"promtable_bigtable_rows_read_total", "promtable_bigtable_points_rows_read_total",
     "Rows ReadRows answers delivered after merging their chunks, both tables.",
     "Rows ReadRows answers from the points table delivered after merging their chunks.",
     offsetof(pt_bt_traffic, rows_read)},
    {"promtable_bigtable_cells_read_total", "promtable_bigtable_points_cells_read_total",
     "Cells of the rows ReadRows answers delivered, both tables.",
     "Cells of the rows ReadRows answers from the points table delivered.",
     offsetof(pt_bt_traffic, cells_read)},
};
enum { NTRAFFIC = sizeof(traffic_metrics) / sizeof(traffic_metrics[0]) };

static double traffic_value(const pt_bt_traffic *x, size_t field)
{
    return (double)*(const unsigned long *)(const void *)((const char *)x + field);
}

/* The ops table's stats: the counters on /metrics. */
/* The write-back buffer's figures (none without one). */
static size_t buffer_stats(const pt_bt *bt, pt_backend_stat *out, size_t max)
{
    if (!bt->wb.ops)
        return 0;
    pt_embedded_stats st;
    pt_embedded_get_stats((pt_backend *)&bt->wb, &st);
    const pt_backend_stat all[] = {
        {"promtable_bigtable_buffer_flushes_total",
         "Flushes of a part of the write-back buffer into Bigtable.", 1, (double)st.flushes},
        {"promtable_bigtable_buffer_flush_failures_total",
         "Flushes into Bigtable that failed; the buffer keeps the samples and retries.", 1,
         (double)st.flush_failures},
        {"promtable_bigtable_buffer_flush_seconds_total",
         "Time spent flushing the write-back buffer into Bigtable.", 1, st.flush_seconds},
        {"promtable_bigtable_buffer_samples", "Samples waiting in the write-back buffer.", 0,
         (double)st.head_cells},
        {"promtable_bigtable_buffer_frozen_bytes",
         "Samples of the part of the buffer being flushed into Bigtable now (0: none).", 0,
         (double)st.frozen_cell_bytes},
        {"promtable_bigtable_buffer_memory_bytes",
         "Memory the write-back buffer holds (series, samples).", 0, (double)st.head_bytes},
        {"promtable_bigtable_buffer_log_bytes",
         "Size of the write-back log taking writes now.", 0, (double)st.wal_bytes},
        {"promtable_bigtable_buffer_write_waits_total",
         "Writes that waited for a flush into Bigtable (the buffer was full).", 1,
         (double)st.write_waits},
        {"promtable_bigtable_buffer_disk_full",
         "1 while the write-back log's disk is full (writes get 503).", 0,
         (double)st.disk_full},
    };
    size_t n = sizeof(all) / sizeof(all[0]);
    if (n > max)
        n = max;
    memcpy(out, all, n * sizeof(*out));
    return n;
}

static size_t bt_stats(void *state, pt_backend_stat *out, size_t max)
{
    pt_bt_stats st;
    pt_bt_get_stats(state, &st);
    const pt_backend_stat calls[] = {
        {"promtable_bigtable_write_retries_total",
         "MutateRows requests sent again for entries that failed with a retryable code.", 1,
         (double)st.write_retries},
        {"promtable_bigtable_read_calls_total",
         "ReadRows calls started, resumed streams included.", 1, (double)st.read_calls},
        {"promtable_bigtable_scans_total", "Scans of one or more row ranges.", 1,
         (double)st.scans},
        {"promtable_bigtable_scan_resumes_total",
         "Broken ReadRows streams resumed after the last row delivered.", 1,
         (double)st.scan_resumes},
        {"promtable_bigtable_sample_row_keys_calls_total",
         "SampleRowKeys calls, made to cut wide scans into pieces read at once.", 1,
         (double)st.sample_calls},
        {"promtable_bigtable_write_rate_limit_rows_per_second",
         "Rows (MutateRows entries) per second that Bigtable's flow control lets all writers "
         "together send now; 0 = not limited.",
         0, st.flow.rate},
        {"promtable_bigtable_rate_limit_infos_total",
         "MutateRows responses carrying rate_limit_info: Bigtable pacing this client's "
         "writes.",
         1, (double)st.flow.infos},
        {"promtable_bigtable_compacted_rows_total",
         "Points rows compaction rewrote into fewer chunk cells.", 1, (double)st.compacted_rows},
        {"promtable_bigtable_compacted_cells_total",
         "Cells (single-sample and chunk cells) compaction replaced.", 1,
         (double)st.compacted_cells},
        {"promtable_bigtable_compaction_chunks_written_total",
         "Chunk cells compaction wrote in their place.", 1, (double)st.compaction_chunks},
        {"promtable_bigtable_compaction_passes_total",
         "Compaction passes made under the lease.", 1, (double)st.compaction_passes},
        {"promtable_bigtable_compaction_failures_total",
         "Compaction passes that failed (the next pass goes on where it stopped).", 1,
         (double)st.compaction_failures},
        {"promtable_bigtable_writes_throttled_total",
         "Writes refused (503 with Retry-After) because the flow-control limit would have "
         "held them longer than 1 s or their retry budget.",
         1, (double)st.flow.refused},
        {"promtable_bigtable_write_wait_seconds_total",
         "Seconds writers waited for the flow-control limit before sending MutateRows.", 1,
         st.flow.waited_s},
    };
    pt_backend_stat all[2 * NTRAFFIC + sizeof(calls) / sizeof(calls[0])];
    size_t n = 0;
    for (size_t i = 0; i < NTRAFFIC; i++) {
        size_t f = traffic_metrics[i].field;
        all[n++] = (pt_backend_stat){traffic_metrics[i].all, traffic_metrics[i].help_all, 1,
                                     traffic_value(&st.all, f)};
        all[n++] = (pt_backend_stat){traffic_metrics[i].points, traffic_metrics[i].help_points,
                                     1, traffic_value(&st.points, f)};
    }
    memcpy(all + n, calls, sizeof(calls));
    n += sizeof(calls) / sizeof(calls[0]);
    if (n > max)
        n = max;
    memcpy(out, all, n * sizeof(*out));
    return n + buffer_stats(state, out + n, max - n);
}

#define C(field) offsetof(pt_bigtable_conf, field)
static const pt_conf_key conf_keys[] = {
    {"project", NULL, PT_CONF_STR, "", 0, 0, C(project), "Bigtable project ID."},
    {"instance", NULL, PT_CONF_STR, "", 0, 0, C(instance), "Bigtable instance ID."},
    {"endpoint", NULL, PT_CONF_ADDR, "", 1, 65535, C(endpoint),
     "Emulator host:port (plaintext); empty = $BIGTABLE_EMULATOR_HOST, else Cloud Bigtable "
     "with application default credentials."},
    {"table_prefix", "storage.table_prefix", PT_CONF_STR, "", 0, 0, C(table_prefix),
     "Tables are <prefix>points and <prefix>index."},
    {"read_streams", NULL, PT_CONF_LONG, STR(READ_STREAMS), 1, PT_BT_MAX_READ_STREAMS,
     C(read_streams),
     "ReadRows streams one scan of many rows (or of one range over 16 MiB) runs at once; the "
     "server works on them in parallel, and their rows are delivered in order, one stream "
     "after another."},
    {"buffer_path", NULL, PT_CONF_DIR, "./data/bigtable-buffer", 0, 0, C(buffer_path),
     "Write-back buffer directory (one promtable each): samples are acknowledged once in "
     "its log and reach Bigtable as chunk cells, a row's samples of up to flush_interval in "
     "one cell; empty: every write goes straight to Bigtable, a chunk cell per series and "
     "request."},
    {"buffer_memory", NULL, PT_CONF_BYTES, "128MiB", 64LL << 10, 1LL << 40, C(buffer_memory),
     "Bytes of samples the write-back buffer holds in memory before it flushes an eighth "
     "of the series into Bigtable."},
    {"flush_interval", NULL, PT_CONF_DURATION, "30m", 0, 366LL * 86400000LL,
     C(flush_interval_ms),
     "Longest a sample waits in the write-back buffer before it is written to Bigtable: "
     "what another promtable reading the same tables lags behind, and the samples per "
     "chunk cell (30m: 120 at a 15 s scrape interval)."},
    {"compaction_interval", NULL, PT_CONF_DURATION, "1h", 0, 366LL * 86400000LL,
     C(compaction_interval_ms),
     "Time between two compaction passes, which rewrite the points rows' single-sample "
     "cells and small chunk cells older than an hour into few large chunk cells (one pass "
     "at a time over all promtables on the tables, through a lease row); 0 = off."},
    {"buffer_sync", NULL, PT_CONF_BOOL, "false", 0, 1, C(buffer_sync),
     "fsync the write-back log before acknowledging each write."},
};
#undef C

const pt_backend_ops pt_backend_bigtable = {
    .name = "bigtable",
    .caps = PT_BACKEND_CAP_ADMIN | PT_BACKEND_CAP_VERSIONS,
    .state_size = sizeof(pt_bt),
    .conf = conf_keys,
    .nconf = sizeof(conf_keys) / sizeof(conf_keys[0]),
    .conf_size = sizeof(pt_bigtable_conf),
    .open = bt_open,
    .close = bt_close,
    .write = bt_write,
    .scan = bt_scan,
    .init = pt_bt_admin_init,
    .check_and_set = pt_bt_data_check_and_set,
    .stats = bt_stats,
    .health = bt_health,
    .position = bt_position,
    .erase = bt_erase,
};

/* What the write-back store writes into and reads from: Bigtable itself. */
static const pt_backend_ops pt_bt_direct_ops = {
    .name = "bigtable",
    .write = pt_bt_data_write,
    .scan = pt_bt_data_scan,
    .position = bt_position,
    .erase = pt_bt_erase,
};
