/*
 * What the store counts (pt_store.stats): the write path's samples, rejections and index
 * rows, the read path's queries and scans, and its backend calls. The daemon embeds one
 * in its metrics (metrics.h, pt_m.store) and renders it on /metrics; a store opened
 * without one counts into a struct of its own (pt_store_open). Counters are lock-free
 * atomics, so the stores of every tenant and thread may share one.
 */
#ifndef PT_STORE_STATS_H
#define PT_STORE_STATS_H

#include <stdatomic.h>
#include <stdint.h>

#include "lathist.h"

/* Why samples were rejected (promtable_samples_rejected_total's reason label). */
enum pt_reject_reason {
    PT_REJECT_LABELS, PT_REJECT_TIMESTAMP, PT_REJECT_HISTOGRAM, PT_REJECT_EXEMPLAR,
    PT_REJECT_LIMIT, PT_REJECT_COUNT
};

typedef struct pt_store_stats {
    _Atomic uint64_t samples_received;
    _Atomic uint64_t series_received; /* TimeSeries entries */
    _Atomic uint64_t samples_rejected[PT_REJECT_COUNT];
    _Atomic uint64_t metadata_received;
    _Atomic uint64_t exemplars_received;
    _Atomic uint64_t exemplars_out_of_order; /* dropped as out of order (1.0 and 2.0) */
    _Atomic uint64_t metadata_written;       /* metadata cells stored (meta.c) */
    _Atomic uint64_t index_rows_written;
    _Atomic uint64_t read_queries;
    _Atomic uint64_t read_series;
    _Atomic uint64_t read_samples;
    _Atomic uint64_t read_timeouts;      /* reads ended by read.timeout */
    _Atomic uint64_t read_rows_scanned;  /* rows the backends visited for reads */
    _Atomic uint64_t read_chunks_passed; /* stored chunks a streamed read sent as they were */
    _Atomic uint64_t read_rollup_queries; /* queries answered from a roll-up */
    _Atomic uint64_t backend_write_errors;
    _Atomic uint64_t backend_read_errors;
    pt_lathist backend_write_duration;
    pt_lathist backend_read_duration;
} pt_store_stats;

#endif
