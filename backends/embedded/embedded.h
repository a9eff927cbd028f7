/*
 * Knobs and counters of the embedded backend that the generic interface does not carry.
 * Every function takes a backend opened with pt_backend_embedded (not a wrapper).
 */
#ifndef PT_EMBEDDED_H
#define PT_EMBEDDED_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

extern const pt_backend_ops pt_backend_embedded;

/* Its settings, keys storage.embedded.* (cfg->own at open). */
typedef struct pt_embedded_conf {
    char *path;          /* data directory */
    int sync;            /* fdatasync the logs before acknowledging a write */
    size_t head_memory;  /* bytes of samples held before a flush; 0 = the default */
    size_t block_cache;  /* RocksDB block cache for both tables; 0 = the default */
    long head_max_age_ms; /* longest a sample stays only in the head and the logs; 0 = none */
    long read_threads;    /* read-ahead threads (readahead.c); 0 = none */
    size_t table_index_memory; /* most bytes of pinned table index blocks; 0 = none */
    size_t index_preload;      /* read the index's files at open up to this; 0 = never */
} pt_embedded_conf;

typedef struct pt_embedded_stats {
    uint64_t flushes;          /* head flushes into RocksDB since open */
    uint64_t flush_failures;   /* flush attempts that failed (each is retried) */
    double flush_seconds;      /* time spent flushing since open */
    double last_flush_seconds; /* duration of the last flush attempt */
    uint64_t write_waits;      /* writes that waited for a flush (both generations full) */
    size_t head_rows;          /* rows the head tracks (with or without cells) */
    uint64_t rows_evicted;     /* rows the head dropped since open (series that stopped) */
    uint64_t rows_swept;       /* of those, rows a sweep flushed early (series that stopped) */
    size_t head_cells;         /* cells waiting in the head, rewrites included */
    size_t head_bytes;         /* memory the head holds: rows, cells, both generations */
    size_t frozen_cell_bytes;  /* samples of the frozen generation being flushed */
    uint64_t wal_bytes;        /* size of the current generation's log */
    uint64_t wal_damaged_bytes; /* damaged log records the start skipped */
    int disk_full;             /* the disk is full: writes are refused */
    uint64_t disk_full_events; /* times it filled up */
    uint64_t reopens;          /* RocksDB reopened after a disk error */
    uint64_t expired_chunks;   /* points chunks compactions dropped as past the retention */
    uint64_t expired_index;    /* index cells dropped likewise */
    uint64_t compactions;      /* whole-store compactions run for the retention */
    uint64_t memtable_bytes;   /* RocksDB memtables, both tables */
    uint64_t table_reader_bytes; /* RocksDB index and filter blocks outside the cache */
    uint64_t block_cache_bytes;  /* what the block cache holds */
    uint64_t block_cache_pinned_bytes; /* of it, pinned (index blocks, blocks in use) */
    int table_index_pinned;      /* the table files' index blocks are kept loaded (rocks.c) */
    uint64_t index_preloaded;    /* bytes of the index's files read at the open */
    uint64_t readahead_scans;    /* scans of many rows that waited for the disk */
    uint64_t readahead_rows;     /* rows read ahead of them */
    size_t index_pending_bytes;  /* index cells acknowledged, not yet in RocksDB */
    uint64_t index_drains;       /* batches of index cells written into RocksDB */
    uint64_t index_drained_cells;
    uint64_t index_drain_failures;
    double index_drain_seconds;
    uint64_t index_waits;        /* writes that waited for a drain (index head full) */
} pt_embedded_stats;

/* Samples the head's current generations may hold: past it, the next head shard in turn
 * (an eighth of the rows) is frozen and flushed into RocksDB in the background (default
 * 128 MiB; 0 = the default; the frozen shard holds about 2/9 of it more). Takes effect at
 * the next write. */
void pt_embedded_set_budget(pt_backend *b, size_t bytes);
void pt_embedded_get_stats(pt_backend *b, pt_embedded_stats *out);
/* Flushes every cell written before the call into RocksDB (on the flush thread) and waits
 * for it; empties the logs. On failure the flush thread keeps retrying. */
int pt_embedded_flush(pt_backend *b);
/* Compacts the whole store now, as the retention thread does, with the clock of the
 * retention set to now_ms from then on (tests; 0 = the real clock). Stored entries past
 * the retention are gone when it returns; the head's cells are not touched. */
void pt_embedded_compact(pt_backend *b, int64_t now_ms);

#endif
