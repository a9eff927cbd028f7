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
#include "lathist.h"
#include "store_stats.h"

enum pt_route_id {
    PT_ROUTE_WRITE, PT_ROUTE_READ, PT_ROUTE_METRICS, PT_ROUTE_HEALTHY, PT_ROUTE_READY,
    PT_ROUTE_LABELS, PT_ROUTE_LABEL_VALUES, PT_ROUTE_SERIES, PT_ROUTE_METADATA,
    PT_ROUTE_TSDB_STATUS, PT_ROUTE_SNAPSHOT, PT_ROUTE_DELETE_SERIES, PT_ROUTE_OTHER,
    PT_ROUTE_COUNT
};

typedef struct pt_metrics {
    pt_store_stats store; /* the daemon's store counts here (pt_store.stats) */
    _Atomic uint64_t read_cancelled;    /* reads whose client went away */
    _Atomic uint64_t retention_dropped; /* stored entries storage.retention removed */
    pt_http_stats http; /* the HTTP server counts here (pt_server_opts.stats) */
    /* HA pairs (ha.c): lease row reads and check-and-sets, and the store errors they met. */
    _Atomic uint64_t ha_lease_reads;
    _Atomic uint64_t ha_lease_writes;
    _Atomic uint64_t ha_lease_errors;
    /* Roll-ups (rollups.c): cells written, passes that failed, and how far the least-built
     * stage is behind the wall clock (ms, set by the builder). */
    _Atomic uint64_t rollup_cells;
    _Atomic uint64_t rollup_errors;
    _Atomic int64_t rollup_lag_ms;
    pt_lathist request_duration[PT_ROUTE_COUNT];
} pt_metrics;

extern pt_metrics pt_m;

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
