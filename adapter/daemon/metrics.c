#include "metrics.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "error.h"

pt_metrics pt_m;

static const char *const route_names[PT_ROUTE_COUNT] = {
    "/api/v1/write", "/api/v1/read", "/metrics", "/-/healthy", "/-/ready",
    "/api/v1/labels", "/api/v1/label/:name/values", "/api/v1/series", "/api/v1/metadata",
    "/api/v1/status/tsdb", "/api/v1/admin/tsdb/snapshot", "/api/v1/admin/tsdb/delete_series", "other"};

static const char *const reject_names[PT_REJECT_COUNT] = {"labels", "timestamp", "histogram",
                                                         "exemplar", "tenant_limit"};

const char *pt_route_name(int route)
{
    return route >= 0 && route < PT_ROUTE_COUNT ? route_names[route] : "other";
}

/* Requests by (route, code, proto): a fixed table, room for every route (6) x status the
 * server can answer (under 20) x protocol (2). */
#define REQ_SLOTS 256
static struct {
    int route, code, proto;
    _Atomic uint64_t n;
} req_slots[REQ_SLOTS];
static _Atomic int req_nslots;
static pthread_mutex_t req_lock = PTHREAD_MUTEX_INITIALIZER;

void pt_metrics_request(int route, int code, int proto)
{
    int n = atomic_load_explicit(&req_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        if (req_slots[i].route == route && req_slots[i].code == code &&
            req_slots[i].proto == proto) {
            atomic_fetch_add_explicit(&req_slots[i].n, 1, memory_order_relaxed);
            return;
        }
    }
    pthread_mutex_lock(&req_lock);
    n = atomic_load_explicit(&req_nslots, memory_order_relaxed);
    int i;
    for (i = 0; i < n; i++)
        if (req_slots[i].route == route && req_slots[i].code == code &&
            req_slots[i].proto == proto)
            break;
    if (i == n && n < REQ_SLOTS) {
        req_slots[i].route = route;
        req_slots[i].code = code;
        req_slots[i].proto = proto;
        atomic_store_explicit(&req_nslots, n + 1, memory_order_release);
    }
    if (i < REQ_SLOTS)
        atomic_fetch_add_explicit(&req_slots[i].n, 1, memory_order_relaxed);
    pthread_mutex_unlock(&req_lock);
}

typedef struct out {
    pt_buf buf;
    int failed;
} out;

static void put(out *o, const char *fmt, ...)
{
    for (size_t want = 256;;) {
        char *p = (char *)pt_buf_room(&o->buf, want);
        if (!p) {
            o->failed = 1;
            return;
        }
        size_t room = o->buf.cap - o->buf.len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            o->failed = 1;
            return;
        }
        if ((size_t)n < room) {
            pt_buf_commit(&o->buf, (size_t)n);
            return;
        }
        want = (size_t)n + 1;
    }
}

#define LOAD(x) ((unsigned long long)atomic_load_explicit(&(x), memory_order_relaxed))

static void counter(out *o, const char *name, const char *help, unsigned long long v)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n%s %llu\n", name, help, name, name, v);
}

static void gauge(out *o, const char *name, const char *help, long v)
{
    put(o, "# HELP %s %s\n# TYPE %s gauge\n%s %ld\n", name, help, name, name, v);
}

/* A run of unlabelled counters, in the order given. */
typedef struct counter_def {
    const char *name, *help;
    const _Atomic uint64_t *v;
} counter_def;

static void counters(out *o, const counter_def *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        counter(o, c[i].name, c[i].help, LOAD(*c[i].v));
}

/* One counter family with a series for each of n label values, v[i] counting values[i]. */
static void labelled(out *o, const char *name, const char *help, const char *label,
                     const char *const *values, const _Atomic uint64_t *v, size_t n)
{
    put(o, "# HELP %s %s\n# TYPE %s counter\n", name, help, name);
    for (size_t i = 0; i < n; i++)
        put(o, "%s{%s=\"%s\"} %llu\n", name, label, values[i], LOAD(v[i]));
}

/* A run of gauges gathered at render time, in the order given. */
typedef struct gauge_def {
    const char *name, *help;
    long v;
} gauge_def;

static void gauges(out *o, const gauge_def *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        gauge(o, g[i].name, g[i].help, g[i].v);
}

static void hist_series(out *o, const char *name, const char *labels, pt_lathist *h)
{
    unsigned long long cum = 0;
    const char *sep = labels[0] ? "," : "";
    for (int i = 0; i < PT_LATHIST_BUCKETS; i++) {
        cum += LOAD(h->buckets[i]);
        if (i < PT_LATHIST_BUCKETS - 1)
            put(o, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, pt_lathist_bounds[i], cum);
        else
            put(o, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, cum);
    }
    put(o, "%s_sum%s%s%s %.9f\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "",
        (double)LOAD(h->sum_ns) / 1e9);
    put(o, "%s_count%s%s%s %llu\n", name, labels[0] ? "{" : "", labels, labels[0] ? "}" : "",
        LOAD(h->count));
}

static void histogram(out *o, const char *name, const char *help, pt_lathist *h)
{
    put(o, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    hist_series(o, name, "", h);
}

/* A label value in the text format's escaping. */
static void put_value(out *o, pt_slice v)
{
    char *p = (char *)pt_buf_room(&o->buf, 2 * v.n + 1);
    if (!p) {
        o->failed = 1;
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < v.n; i++) {
        uint8_t c = v.p[i];
        if (c == '\\' || c == '"' || c == '\n')
            p[k++] = '\\';
        p[k++] = c == '\n' ? 'n' : (char)c;
    }
    pt_buf_commit(&o->buf, k);
}

/* HA pairs: per (tenant, cluster) counters, the tenant label only when there is one. */
static void ha_metrics(out *o, const pt_metrics_gauges *g)
{
    static const struct {
        const char *name, *help;
    } m[] = {
        {"promtable_ha_samples_accepted_total",
         "Samples and histograms of HA pairs that passed deduplication (the elected replica's), "
         "by cluster."},
        {"promtable_ha_samples_deduplicated_total",
         "Samples and histograms of HA pairs dropped (acknowledged, not stored) because "
         "another replica is elected, by cluster."},
        {"promtable_ha_elections_total",
         "Replicas this process elected for an HA cluster: the first one and each failover."},
    };
    for (size_t k = 0; k < 3; k++) {
        put(o, "# HELP %s %s\n# TYPE %s counter\n", m[k].name, m[k].help, m[k].name);
        for (size_t i = 0; i < g->nha; i++) {
            const pt_ha_stat *s = &g->ha[i];
            put(o, "%s{", m[k].name);
            if (s->tenant.n) {
                put(o, "tenant=\"");
                put_value(o, s->tenant);
                put(o, "\",");
            }
            put(o, "cluster=\"");
            put_value(o, s->cluster);
            put(o, "\"} %llu\n", (unsigned long long)(k == 0   ? s->accepted
                                                      : k == 1 ? s->deduplicated
                                                               : s->elections));
        }
    }
    gauge(o, "promtable_ha_clusters", "HA (tenant, cluster) pairs tracked (ha.max_clusters).",
          (long)g->nha);
    put(o, "# HELP promtable_ha_lease_operations_total Lease row reads and check-and-sets "
           "(a shared HA election; none on the embedded store).\n"
           "# TYPE promtable_ha_lease_operations_total counter\n"
           "promtable_ha_lease_operations_total{op=\"read\"} %llu\n"
           "promtable_ha_lease_operations_total{op=\"write\"} %llu\n",
        LOAD(pt_m.ha_lease_reads), LOAD(pt_m.ha_lease_writes));
    counter(o, "promtable_ha_lease_errors_total",
            "Lease row reads and writes that failed (the write got 503).",
            LOAD(pt_m.ha_lease_errors));
}

long pt_metrics_render(pt_arena *a, const pt_metrics_gauges *g, char **res)
{
    out o = {.failed = 0};
    pt_buf_init_arena(&o.buf, a, 0);
    if (pt_buf_reserve(&o.buf, 16384))
        return PT_ENOMEM;

    put(&o, "# HELP promtable_build_info Build information.\n# TYPE promtable_build_info gauge\n"
            "promtable_build_info{version=\"%s\"} 1\n", PT_VERSION);
    static const counter_def writes[] = {
        {"promtable_samples_received_total", "Samples received by remote write and stored.",
         &pt_m.store.samples_received},
        {"promtable_series_received_total", "TimeSeries entries received by remote write.",
         &pt_m.store.series_received},
        {"promtable_exemplars_received_total", "Exemplars received by remote write and stored.",
         &pt_m.store.exemplars_received},
        {"promtable_exemplars_out_of_order_total",
         "Exemplars older than their series' newest stored one: dropped (not stored, "
         "not counted written), the request answered 2xx.",
         &pt_m.store.exemplars_out_of_order},
        {"promtable_metadata_received_total",
         "Metric metadata entries received by remote write.", &pt_m.store.metadata_received},
        {"promtable_metadata_written_total",
         "Metric metadata cells written (new or changed, or first sent today).",
         &pt_m.store.metadata_written},
    };
    static const counter_def storage_and_reads[] = {
        {"promtable_index_rows_written_total", "Series index rows written.",
         &pt_m.store.index_rows_written},
        {"promtable_retention_dropped_total",
         "Stored entries (points chunks, index cells) the embedded store's compactions "
         "removed as older than storage.retention or a retention rule, and cells Bigtable "
         "compaction passes deleted under a rule.",
         &pt_m.retention_dropped},
        {"promtable_read_queries_total", "Remote read queries answered.", &pt_m.store.read_queries},
        {"promtable_read_series_total", "Series returned by remote read.", &pt_m.store.read_series},
        {"promtable_read_samples_total", "Samples returned by remote read.",
         &pt_m.store.read_samples},
        {"promtable_read_timeouts_total", "Remote reads ended by read.timeout.",
         &pt_m.store.read_timeouts},
        {"promtable_read_cancelled_total", "Remote reads stopped because the client went away.",
         &pt_m.read_cancelled},
        {"promtable_read_rows_scanned_total",
         "Rows the storage visited to answer remote reads (index and data rows).",
         &pt_m.store.read_rows_scanned},
        {"promtable_read_chunks_passed_total",
         "Stored XOR chunks streamed reads sent as they were, without decoding them.",
         &pt_m.store.read_chunks_passed},
        {"promtable_read_rollup_queries_total",
         "Remote read queries answered from a roll-up stage (?resolution=auto).",
         &pt_m.store.read_rollup_queries},
        {"promtable_rollup_cells_written_total", "Roll-up cells the builder wrote.",
         &pt_m.rollup_cells},
        {"promtable_rollup_errors_total",
         "Roll-up build passes that failed (an outage; the next pass builds again).",
         &pt_m.rollup_errors},
    };
    counters(&o, writes, sizeof(writes) / sizeof(writes[0]));
    labelled(&o, "promtable_samples_rejected_total",
             "Samples, histograms and exemplars rejected with 400, by reason.", "reason",
             reject_names, pt_m.store.samples_rejected, PT_REJECT_COUNT);
    counters(&o, storage_and_reads, sizeof(storage_and_reads) / sizeof(storage_and_reads[0]));
    put(&o, "# HELP promtable_backend_errors_total Backend calls that failed, by operation.\n"
            "# TYPE promtable_backend_errors_total counter\n"
            "promtable_backend_errors_total{op=\"write\"} %llu\n"
            "promtable_backend_errors_total{op=\"read\"} %llu\n",
        LOAD(pt_m.store.backend_write_errors), LOAD(pt_m.store.backend_read_errors));
    put(&o, "# HELP promtable_rollup_lag_seconds How far behind the wall clock the least "
            "built roll-up stage is (0 without stages).\n"
            "# TYPE promtable_rollup_lag_seconds gauge\npromtable_rollup_lag_seconds %.3f\n",
        (double)atomic_load(&pt_m.rollup_lag_ms) / 1000.0);
    histogram(&o, "promtable_backend_write_duration_seconds",
              "Duration of backend batch writes.", &pt_m.store.backend_write_duration);
    histogram(&o, "promtable_backend_read_duration_seconds",
              "Duration of backend scans for one remote read query.",
              &pt_m.store.backend_read_duration);

    put(&o, "# HELP promtable_http_requests_total HTTP requests by route, status code and "
            "protocol (1 = HTTP/1.1, 2 = HTTP/2).\n# TYPE promtable_http_requests_total counter\n");
    int n = atomic_load_explicit(&req_nslots, memory_order_acquire);
    for (int i = 0; i < n; i++)
        put(&o, "promtable_http_requests_total{route=\"%s\",code=\"%d\",proto=\"%d\"} %llu\n",
            pt_route_name(req_slots[i].route), req_slots[i].code, req_slots[i].proto,
            LOAD(req_slots[i].n));
    put(&o, "# HELP promtable_http_request_duration_seconds Time from a complete request to "
            "its response, by route.\n# TYPE promtable_http_request_duration_seconds histogram\n");
    for (int r = 0; r < PT_ROUTE_COUNT; r++) {
        char lab[64];
        snprintf(lab, sizeof(lab), "route=\"%s\"", route_names[r]);
        hist_series(&o, "promtable_http_request_duration_seconds", lab,
                    &pt_m.request_duration[r]);
    }
    gauge(&o, "promtable_http_connections", "Open client connections.", g->connections);
    static const char *const overload_reasons[PT_OVERLOAD_COUNT] = {
        "inflight", "connection_body_memory", "body_memory", "connection_response_memory",
        "response_memory", "connection_body_streams", "connections"};
    labelled(&o, "promtable_http_overload_rejected_total",
             "Requests answered 503 with Retry-After because a limit was reached, by limit.",
             "limit", overload_reasons, pt_m.http.overload_rejected, PT_OVERLOAD_COUNT);
    const gauge_def memory[] = {
        {"promtable_http_inflight_requests",
         "Requests queued for or running on workers (web.max_inflight_requests).",
         (long)LOAD(pt_m.http.inflight)},
        {"promtable_http_body_bytes",
         "Request body memory held, kept buffers included (web.max_body_memory).",
         (long)LOAD(pt_m.http.body_bytes)},
        {"promtable_http_response_bytes",
         "Answer memory held while answers are sent (web.max_response_memory).",
         (long)LOAD(pt_m.http.response_bytes)},
    };
    gauges(&o, memory, sizeof(memory) / sizeof(memory[0]));
    static const char *const timeout_kinds[PT_TIMEOUT_COUNT] = {"header", "body", "write",
                                                                "idle"};
    labelled(&o, "promtable_http_timeouts_total",
             "Requests or connections a deadline ended, by deadline.", "deadline",
             timeout_kinds, pt_m.http.timeouts, PT_TIMEOUT_COUNT);
    const gauge_def caches[] = {
        {"promtable_index_cache_entries", "(series, day) pairs known to be indexed.",
         g->index_cache_entries},
        {"promtable_index_cache_capacity", "Capacity of the index cache.",
         g->index_cache_capacity},
        {"promtable_index_cache_bytes",
         "Memory of the index cache's hash tables (grows with its entries).",
         g->index_cache_bytes},
        {"promtable_read_series_cache_bytes",
         "Memory of the series-row cache (read.series_cache).", g->series_cache_bytes},
        {"promtable_read_list_cache_bytes", "Memory of the index list cache (read.list_cache).",
         g->list_cache_bytes},
        {"promtable_arena_pool_bytes", "Memory of freed request blocks kept for the next requests.",
         g->arena_pool_bytes},
    };
    gauges(&o, caches, sizeof(caches) / sizeof(caches[0]));
    ha_metrics(&o, g);
    for (size_t i = 0; i < g->nbackend; i++) {
        const pt_backend_stat *b = &g->backend[i];
        const char *type = b->counter ? "counter" : "gauge";
        put(&o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", b->name, b->help, b->name, type,
            b->name, b->value);
    }
    if (g->extra_len && pt_buf_append(&o.buf, g->extra, g->extra_len) != 0)
        o.failed = 1;
    if (o.failed)
        return PT_ENOMEM;
    *res = (char *)o.buf.p;
    return (long)o.buf.len;
}
