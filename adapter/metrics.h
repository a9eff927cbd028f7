/*
 * promtable's own metrics, exposed on /metrics in the Prometheus text format.
 * Counters are lock-free atomics; the (route, code, proto) request counters live in a
 * small fixed table.
 */
#ifndef PT_METRICS_H
#define PT_METRICS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "clock.h"
#include "ha.h"
#include "http.h"

#define PT_HIST_BUCKETS 14

typedef struct pt_latency_hist {
    _Atomic uint64_t buckets[PT_HIST_BUCKETS]; /* cumulative only when rendered */
    _Atomic uint64_t count;
    _Atomic uint64_t sum_ns;
} pt_latency_hist;

enum pt_route_id {
    PT_ROUTE_WRITE, PT_ROUTE_READ, PT_ROUTE_METRICS, PT_ROUTE_HEALTHY, PT_ROUTE_READY,
    PT_ROUTE_LABELS, PT_ROUTE_LABEL_VALUES, PT_ROUTE_SERIES, PT_ROUTE_METADATA,
    PT_ROUTE_OTHER, PT_ROUTE_COUNT
};

enum pt_reject_reason {
    PT_REJECT_LABELS, PT_REJECT_TIMESTAMP, PT_REJECT_HISTOGRAM, PT_REJECT_EXEMPLAR,
    PT_REJECT_LIMIT, PT_REJECT_COUNT
};

typedef struct pt_metrics {
    _Atomic uint64_t samples_received;
    _Atomic uint64_t series_received;       /* TimeSeries entries */
    _Atomic uint64_t samples_rejected[PT_REJECT_COUNT];
    _Atomic uint64_t metadata_received;
    _Atomic uint64_t exemplars_received;
    _Atomic uint64_t exemplars_out_of_order; /* dropped as out of order (1.0 and 2.0) */
    _Atomic uint64_t metadata_written;      /* metadata cells stored (meta.c) */
    _Atomic uint64_t index_rows_written;
    _Atomic uint64_t read_queries;
    _Atomic uint64_t read_series;
    _Atomic uint64_t read_samples;
    _Atomic uint64_t read_timeouts;         /* reads ended by read.timeout */
    _Atomic uint64_t read_rows_scanned;     /* rows the backends visited for reads */
    _Atomic uint64_t read_cancelled;       /* reads whose client went away */
    _Atomic uint64_t read_chunks_passed;   /* stored chunks a streamed read sent as they were */
    _Atomic uint64_t retention_dropped;     /* stored entries storage.retention removed */
    _Atomic uint64_t backend_write_errors;
    _Atomic uint64_t backend_read_errors;
    pt_http_stats http; /* the HTTP server counts here (pt_server_opts.stats) */
    /* HA pairs (ha.c): lease row reads and check-and-sets, and the store errors they met. */
    _Atomic uint64_t ha_lease_reads;
    _Atomic uint64_t ha_lease_writes;
    _Atomic uint64_t ha_lease_errors;
    pt_latency_hist request_duration[PT_ROUTE_COUNT];
    pt_latency_hist backend_write_duration;
    pt_latency_hist backend_read_duration;
} pt_metrics;

extern pt_metrics pt_m;

void pt_metrics_observe(pt_latency_hist *h, uint64_t ns);
void pt_metrics_request(int route, int code, int proto);

/* Gauges gathered at render time. */
typedef struct pt_metrics_gauges {
    long connections;
    long index_cache_entries;
    long index_cache_capacity;
    long index_cache_bytes;
    long series_cache_bytes;
    long list_cache_bytes;
    long arena_pool_bytes;
    const pt_backend_stat *backend; /* the backend's own figures, nbackend of them */
    const char *extra;              /* text appended as it is (the tenants' figures) */
    size_t extra_len;
    size_t nbackend;
    const pt_ha_stat *ha; /* HA pairs' figures, nha of them */
    size_t nha;
} pt_metrics_gauges;

/* Renders everything into arena memory; returns the text length or a negative error. */
long pt_metrics_render(pt_arena *a, const pt_metrics_gauges *g, char **out);

const char *pt_route_name(int route);

#endif
