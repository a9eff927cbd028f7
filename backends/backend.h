/*
 * The backend interface: a wide-column store seen as rows of cells.
 *
 * A backend is one `const pt_backend_ops` table (see registry.c). The core allocates
 * `state_size` zeroed bytes for each open backend and passes them to every method; the
 * backend never sees HTTP or protobuf, only row keys, qualifiers and values.
 *
 * Tables: every backend holds the two tables of docs/storage-format.md, addressed by enum pt_table.
 * Row keys never contain the byte 0x00 (the key encoding escapes control bytes); a backend
 * may rely on that and must reject such keys with PT_EBADREQ.
 *
 * Thread safety: write and scan may be called from several threads at once.
 * Errors: pt error codes (base/error.h). An outage or timeout must be PT_EUNAVAIL or
 * PT_ETIMEOUT so that the HTTP layer answers 503 and the client retries.
 */
#ifndef PT_BACKEND_H
#define PT_BACKEND_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "conf.h"
#include "error.h"
#include "slice.h"

typedef enum pt_table { PT_TABLE_POINTS = 0, PT_TABLE_INDEX = 1, PT_TABLE_COUNT = 2 } pt_table;

/* One SetCell: the cell (row, qualifier) gets value; max versions is 1, so a rewrite with
 * the same version replaces the cell (idempotent retries), a newer version wins. */
typedef struct pt_mutation {
    uint8_t table;       /* pt_table */
    pt_slice row;
    pt_slice qual;
    pt_slice value;
    int64_t version_us;  /* cell timestamp in microseconds */
} pt_mutation;

/* Row range [start, end): end.n == 0 means unbounded. Single row r: start = r and
 * end = r followed by 0x00 (the caller provides that byte after r). An empty range list
 * selects nothing. */
typedef struct pt_row_range {
    pt_slice start;
    pt_slice end;
} pt_row_range;

typedef struct pt_scan {
    pt_table table;
    const pt_row_range *ranges; /* sorted by start, non-overlapping */
    size_t nranges;
    /* Qualifier range [qual_start, qual_end) applied to every row; n == 0 = unbounded. */
    pt_slice qual_start;
    pt_slice qual_end;
    /* Stop after this many distinct rows (0 = no limit). */
    size_t row_limit;
    /* Optional: the backend adds the rows (or keys) it examined, matching or not, so
     * that the cost of a read can be observed and tested. */
    size_t *visited;
    /* Optional (streamed reads; NULL: cells only): see pt_stream_fn. */
    struct pt_stream_to *stream;
    /* Optional, one for all the scans of a read: a backend sets it once a scan has had
     * to wait for its disk, and starts reading ahead of the read's next scans at once
     * (the embedded store's read-ahead threads). */
    int *cold;
} pt_scan;

/* One erase (pt_backend_ops.erase): the cells of row in table whose qualifiers are in
 * [qual_start, qual_end) (n == 0: unbounded). In the points table the bounds are 4-byte
 * offsets or empty. */
typedef struct pt_erase {
    uint8_t table; /* pt_table */
    pt_slice row;
    pt_slice qual_start;
    pt_slice qual_end;
} pt_erase;

/* Called for each cell in (row, qualifier) order. The slices are valid only during the
 * call. Return 0 to go on, 1 to stop the scan early (scan returns 0), or a negative pt
 * error code to abort (scan returns it). */
typedef int (*pt_cell_fn)(void *ud, pt_slice row, pt_slice qual, pt_slice value);

/* A backend that stores a row's cells as Gorilla / XOR streams (base/gorilla.h: the
 * qualifiers as timestamps, the 8 value bytes big-endian as the value) may hand over such
 * a stream as it is, in place of its cells: count samples (1 to PT_STREAM_MAX_SAMPLES),
 * qualifiers first to last, every one inside the qualifier range, 8-byte values, none
 * shadowed by a newer cell. It comes in its place in (row, qualifier) order, between the
 * cell calls; stream and row are valid only during the call. Returns as pt_cell_fn does.
 * A backend without such streams never calls it; a wrapper that changes rows must wrap
 * it too (the tenant view). */
typedef int (*pt_stream_fn)(void *ud, pt_slice row, uint32_t first, uint32_t last,
                            uint32_t count, pt_slice stream);
#define PT_STREAM_MAX_SAMPLES 65535 /* what a Prometheus XOR chunk's count can say */
typedef struct pt_stream_to {
    pt_stream_fn fn;
    void *ud;
} pt_stream_to;

typedef struct pt_backend_config {
    /* The backend's own settings: a struct of ops->conf_size bytes filled from its keys
     * (ops->conf, storage.<name>.*) with defaults applied; strings are never NULL. NULL
     * for a backend without keys. Valid until close. */
    const void *own;
    long retention_seconds;  /* storage.retention: keep samples this long; 0 = forever */
    /* index.bucket: an index row lists the series of this span after its day, so a
     * backend that expires index rows by their key keeps them this long past it.
     * 0 = unknown (the longest: 2^32 ms). */
    int64_t index_span_ms;
    /* Optional (storage.retention_rules): how long the series of a points-table row keeps
     * its samples, in ms (0 = forever), decided from the row key alone and never longer
     * than retention_seconds; called from any thread. A backend removes what is past it
     * in its own time (the embedded store's compaction filter, Bigtable's compaction
     * pass); reads clip above the backend. shortest_keep_ms: the least it returns (how
     * often removal is worth running). NULL: retention_seconds for every row. */
    int64_t (*keep_row_ms)(void *ud, pt_slice row);
    void *keep_ud;
    int64_t shortest_keep_ms;
    /* Optional: where a backend counts the entries its retention removed. */
    _Atomic uint64_t *retention_dropped;
    void *inner;             /* wrapper backends: the backend they wrap (pt_backend *) */
    /* Open without a write-back buffer (Bigtable's buffer_path): for `promtable init`
     * and `promtable copy`, which may run beside a daemon that holds the buffer. */
    int direct;
    /* Open for a one-off command that only reads and checks (`promtable check`): no
     * background work of the backend's own (Bigtable's compaction). */
    int no_background;
} pt_backend_config;

enum {
    PT_BACKEND_CAP_ADMIN = 1u << 0, /* has init: tables to create before use */
    PT_BACKEND_CAP_TEST = 1u << 1,  /* for tests only: the daemon refuses to run on it */
    PT_BACKEND_CAP_EXCLUSIVE = 1u << 2, /* one process at a time owns the store */
    PT_BACKEND_CAP_VERSIONS = 1u << 3,  /* keeps version_us: a GC rule may take old cells */
};

/* Most backends a registry holds (sizes the configuration's per-backend settings). */
#define PT_MAX_BACKENDS 8

/* A figure a backend reports on /metrics. */
typedef struct pt_backend_stat {
    const char *name; /* the whole metric name, promtable_<backend>_... */
    const char *help;
    int counter;      /* 1: a counter, 0: a gauge */
    double value;
} pt_backend_stat;

/* A finding of a backend's own check (pt_backend_ops.verify): damage = 0 for a count or
 * note ("points.wal: 12 records"), 1 for a problem; msg names the file, offset or key. */
typedef void (*pt_verify_fn)(void *ud, int damage, const char *msg);

typedef struct pt_backend_ops {
    const char *name;
    unsigned caps;           /* PT_BACKEND_CAP_* */
    size_t state_size;
    /* Configuration fragment: keys storage.<name>.<key> (pt_conf_key.key holds <key>)
     * filling a conf_size-byte struct that open() gets as cfg->own. */
    const pt_conf_key *conf;
    size_t nconf;
    size_t conf_size;
    int (*open)(void *state, const pt_backend_config *cfg, char *err, size_t errlen);
    void (*close)(void *state);
    /* Applies every mutation or returns an error; on success they are durable per the
     * backend's sync setting. Partial application is allowed only because mutations are
     * idempotent: the caller retries the whole batch. */
    int (*write)(void *state, const pt_mutation *m, size_t n);
    int (*scan)(void *state, const pt_scan *scan, pt_cell_fn fn, void *ud);
    /* Optional: create tables (idempotent). NULL when the backend needs no setup. */
    int (*init)(void *state, char *err, size_t errlen);
    /* Optional: writes up to max figures of its own into out, returns how many. Called
     * from any thread while the backend is open. */
    size_t (*stats)(void *state, pt_backend_stat *out, size_t max);
    /* Optional, for `promtable check`: verifies what scans cannot see (checksums of the
     * backend's files and logs), reporting through fn. Called twice: first with state
     * NULL, before open, for what opening would change (a log that open replays and
     * truncates; the check then does not open a store whose log is damaged), then with the
     * open state. Returns 0 when the check ran (problems or not), or an error with err set
     * when it could not (the store is in use by another process: PT_EBUSY). */
    int (*verify)(void *state, const pt_backend_config *cfg, pt_verify_fn fn, void *ud, char *err,
                  size_t errlen);
    /* Optional: a compare-and-set of one cell (Bigtable's CheckAndMutateRow), for state that
     * several processes on one store share (the HA lease rows, docs/operations.md "HA
     * pairs"). When the newest version of the cell (m->row, m->qual) of m->table holds
     * exactly expect (expect.p == NULL: the cell does not exist), writes m and sets
     * *applied = 1; else changes nothing and sets *applied = 0. Returns 0 or an error (an
     * outage: PT_EUNAVAIL or PT_ETIMEOUT; after a timeout the write may or may not have
     * happened, so the caller reads the cell again). NULL for a store that one process
     * owns: the caller then keeps such state in its own memory. */
    int (*check_and_set)(void *state, const pt_mutation *m, pt_slice expect, int *applied);
    /* Optional: 0 when a write can be stored now; else the retryable code writes get
     * (PT_ENOSPACE: the disk is full) with msg saying why and what brings writes back.
     * Called from any thread while the backend is open (/-/ready, a failed write's
     * answer). NULL: always 0. */
    int (*health)(void *state, char *msg, size_t msglen);
    /* Optional, for progress lines: estimates of the bytes table t holds in rows before
     * key (*before) and in all (*total). 0, or an error when the store cannot tell. */
    int (*position)(void *state, pt_table t, pt_slice key, uint64_t *before, uint64_t *total);
    /* Optional: a consistent copy of the whole store made while writes go on, as name
     * among the backend's own snapshots, or in the new directory name when it holds a
     * '/'; with_head, holding every write acknowledged before the call, else only what
     * the store had already moved out of its memory. 0, or an error with err saying why.
     * NULL: the backend has none. */
    int (*snapshot)(void *state, const char *name, int with_head, char *err, size_t errlen);
    /* Optional: removes for good the cells the n erases name (sorted by table, then row):
     * every cell acknowledged before the call that an erase covers is gone from every
     * later scan, also after a restart, a flush or a compaction; a cell written after
     * the call stays. A backend that packs a row's samples into chunks rewrites the
     * chunks an erase cuts through. Not atomic across rows: after a failure the caller
     * erases again (erasing is idempotent). NULL: the backend cannot erase. */
    int (*erase)(void *state, const pt_erase *x, size_t n);
} pt_backend_ops;

/* An open backend: the ops table and its state. */
typedef struct pt_backend {
    const pt_backend_ops *ops;
    void *state;
} pt_backend;

/* Registry (registry.c). NULL when no backend has that name. */
const pt_backend_ops *pt_backend_find(const char *name);
/* Every registered backend, *n of them (at most PT_MAX_BACKENDS). */
const pt_backend_ops *const *pt_backend_list(size_t *n);

/* qsort comparator over pointers into one mutation batch: by table, then row, then batch
 * position, so a later write of a cell in the batch still comes after (and wins). */
int pt_mutation_ptr_cmp(const void *pa, const void *pb);

/* Allocates the state, opens; on failure frees and returns the error with err set. */
int pt_backend_open(pt_backend *b, const pt_backend_ops *ops, const pt_backend_config *cfg,
                    char *err, size_t errlen);
void pt_backend_close(pt_backend *b);

static inline int pt_backend_write(pt_backend *b, const pt_mutation *m, size_t n)
{
    return b->ops->write(b->state, m, n);
}

/* pt_backend_ops.position, or PT_EINTERNAL for a backend without it. */
static inline int pt_backend_position(pt_backend *b, pt_table t, pt_slice key, uint64_t *before,
                                      uint64_t *total)
{
    return b->ops->position ? b->ops->position(b->state, t, key, before, total) : PT_EINTERNAL;
}

/* pt_backend_ops.erase, or PT_EBADREQ for a backend without it. */
static inline int pt_backend_erase(pt_backend *b, const pt_erase *x, size_t n)
{
    return b->ops->erase ? b->ops->erase(b->state, x, n) : PT_EBADREQ;
}

static inline int pt_backend_scan(pt_backend *b, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    return b->ops->scan(b->state, s, fn, ud);
}

/* Scans the one row key of table t (the range [key, key || 0x00)): its cells with
 * qualifiers in [qual_start, qual_end) (an empty slice: unbounded), in qualifier order.
 * Returns as pt_backend_scan, or PT_EINTERNAL for a key longer than any row key. */
int pt_backend_scan_row(pt_backend *b, pt_table t, pt_slice key, pt_slice qual_start,
                        pt_slice qual_end, pt_cell_fn fn, void *ud);

#endif
