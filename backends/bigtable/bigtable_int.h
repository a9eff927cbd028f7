/*
 * Internals of the Bigtable backend, shared by its modules and its tests. Nothing outside
 * backends/bigtable/ and the tests includes this.
 *
 * Modules, and whom each may call (the graph has no cycles; a module calls only those
 * below it):
 *
 *   bigtable.c        ops table, open/close, test knobs    -> rpc, sample, compact
 *                     (names admin and data in the ops table; never calls them)
 *   bigtable_compact.c compaction passes of the points     -> data, chunk
 *                     table under a lease row; its thread
 *   bigtable_admin.c  init: CreateTable with the GC rule;  -> rpc
 *                     GetTable for tests
 *   bigtable_data.c   write: MutateRows; scan: ReadRows;   -> sample, rpc, merge,
 *                     check_and_set: CheckAndMutateRow;       flow, chunk
 *                     on concurrent streams, one group of
 *                     ranges (or piece of one) each,
 *                     delivered in turn
 *   bigtable_sample.c SampleRowKeys answers kept per       -> rpc, merge
 *                     table; cuts one wide range in pieces
 *   bigtable_rpc.c    channels, one call with a deadline,  -> gRPC
 *                     status mapping, retry/backoff
 *   bigtable_merge.c  ReadRows chunk merging, resume       -> base only (no I/O)
 *                     ranges, cut points among samples
 *   bigtable_flow.c   the write rate Bigtable's flow       -> base only (no I/O, the
 *                     control allows (rate_limit_info)        clock is an argument)
 *   bigtable_chunk.c  chunk cells of the points table:     -> base only (no I/O)
 *                     built from a row's mutations, merged
 *                     with single cells on read; which
 *                     cells compaction folds, and the
 *                     rewrite
 *
 * Protocol: Google's google.bigtable.v2 API (bigtable.proto holds the part used here).
 * Schema: docs/storage-format.md.
 */
#ifndef PT_BIGTABLE_INT_H
#define PT_BIGTABLE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <grpc/grpc.h>

#include "arena.h"
#include "backend.h"
#include "bigtable.pb-c.h"
#include "buf.h"
#include "cellchunk.h"
#include "clock.h"
#include "schema.h"
#include "slice.h"

/* The one column family of both tables. */
#define PT_BT_FAMILY "p"

enum {
    /* The largest response accepted; a merged ReadRows row may span several. */
    PT_BT_MAX_MESSAGE = 256 << 20,
    PT_BT_MAX_ROW_KEY = 4096, /* Bigtable rejects longer keys */
    /* storage.bigtable.read_streams at most: each waiting stream of a scan may hold a
     * flow-control window of responses (bigtable_data.c). */
    PT_BT_MAX_READ_STREAMS = 16,
};

/* A SampleRowKeys answer: a row key and the approximate bytes stored before it. */
typedef struct pt_bt_sample {
    pt_slice key;
    int64_t offset;
} pt_bt_sample;

/* One table's samples as kept by bigtable_sample.c, under pt_bt.samples_mu. */
typedef struct pt_bt_sampleset {
    pt_buf keys;     /* the keys back to back; v[i].key points here */
    pt_bt_sample *v; /* increasing keys, non-decreasing offsets */
    size_t n, cap;
    int64_t total;      /* bytes of the whole table, as far as the answer tells */
    int64_t fetched_ms; /* pt_mono_ms() when asked; 0 = never */
    int fetching;       /* a scan is asking: the others use what is kept */
} pt_bt_sampleset;

/* ============================================================================
 * bigtable_flow.c: Bigtable's flow control of MutateRows, without I/O
 *
 * A client that sends PT_BT_FEATURES_RATE_LIMIT may get rate_limit_info in MutateRows
 * responses: every period, multiply your rate by factor. The limiter turns that into one
 * limit, in rows (MutateRows entries) per second, for every writer thread of an open
 * backend: without rate_limit_info nothing is limited; with it the limit becomes the rate
 * observed over the last period times factor (clamped to [PT_BT_FLOW_MIN_FACTOR,
 * PT_BT_FLOW_MAX_FACTOR], applied at most once per period, and raised only when writers
 * were held back); when no rate_limit_info came for PT_BT_FLOW_LIFT_PERIODS periods (and
 * at least a second) the limit is lifted.
 *
 * Writers take rows in turn: each reservation starts when the previous one's rows have
 * gone at the allowed rate, so a batch larger than a second's worth still goes (and
 * makes the next writers wait) and no two writers get the same share. Every function
 * takes the monotonic time in ns, so a test drives the clock; all are thread-safe.
 * ========================================================================== */

/* bigtable-features: base64url of FeatureFlags{mutate_rows_rate_limit: true,
 * mutate_rows_rate_limit2: true}, bytes 18 01 28 01 (tests/unit/t_bigtable_flow.c packs
 * the message to check it). Both flags, as Google's own clients send them: a server that
 * knows the second keeps per-entry (partial) retries. */
#define PT_BT_FEATURES_RATE_LIMIT "GAEoAQ=="

#define PT_BT_FLOW_MIN_FACTOR 0.3
#define PT_BT_FLOW_MAX_FACTOR 1.3
enum { PT_BT_FLOW_LIFT_PERIODS = 3 };

typedef struct pt_bt_flow {
    pthread_mutex_t mu;     /* guards every field below */
    int ready;              /* mu was made: free must destroy it */
    double rate;            /* rows per second allowed; 0 = not limited */
    int64_t period_ns;      /* of the last usable rate_limit_info; 1 s before any */
    int64_t next_update_ns; /* factors that come before this are ignored */
    int64_t last_info_ns;   /* when the last rate_limit_info came */
    int64_t next_free_ns;   /* when rows after those already granted may go */
    int throttled;          /* a writer waited or was refused since the last update */
    /* Rows granted in the current observation window (one period long) and the one
     * before it: the observed rate. */
    int64_t win_start_ns, prev_start_ns;
    double win_rows, prev_rows;
    /* The last rate_limit_info as received (factor unclamped), and counters since init. */
    int64_t info_period_ns;
    double info_factor;
    unsigned long infos, refused;
    int64_t waited_ns;
} pt_bt_flow;

void pt_bt_flow_init(pt_bt_flow *f, int64_t now_ns);
void pt_bt_flow_free(pt_bt_flow *f); /* a no-op on a zeroed, never initialised flow */

/* A writer asks to send rows entries. 0: go after sleeping *wait_ns (0 when not limited);
 * PT_EBUSY: the wait would be longer than max_wait_ns, nothing is taken and the refusal
 * counted. */
int pt_bt_flow_acquire(pt_bt_flow *f, size_t rows, int64_t now_ns, int64_t max_wait_ns,
                       int64_t *wait_ns);

/* One rate_limit_info: period_ns and factor as the server sent them. A factor that is
 * not a positive number is counted and otherwise ignored; the period is kept within
 * [10 ms, 10 min]. */
void pt_bt_flow_info(pt_bt_flow *f, int64_t period_ns, double factor, int64_t now_ns);

/* What the write path calls with each MutateRows response: hands its rate_limit_info, if
 * any, to pt_bt_flow_info. 1 when the response had one, 0 when not. */
int pt_bt_flow_response(pt_bt_flow *f, const Bigtable__MutateRowsResponse *r, int64_t now_ns);

/* The figures of /metrics. */
typedef struct pt_bt_flow_figures {
    double rate;           /* rows per second allowed now; 0 = not limited */
    unsigned long infos;   /* rate_limit_info messages received */
    unsigned long refused; /* writes refused (PT_EBUSY) by the limit */
    double waited_s;       /* seconds writers were told to wait */
} pt_bt_flow_figures;
/* Lifts a limit that is due to be lifted first, so the rate reads 0 then. */
void pt_bt_flow_get(pt_bt_flow *f, int64_t now_ns, pt_bt_flow_figures *out);

/* Compaction's part of an open backend (bigtable_compact.c). */
typedef struct pt_bt_compaction {
    long interval_ms; /* between two passes of the thread */
    uint64_t holder;  /* this backend's name in the lease row (random at open) */
    long fail_after;  /* test hook: a pass fails once it compacted this many rows; 0 = never */
    int started;      /* the thread runs: close must stop it */
    int sync_ready;   /* mu and cv were made */
    pthread_t thread;
    pthread_mutex_t mu; /* with cv: the thread's wait, which stop cuts short */
    pthread_cond_t cv;
    atomic_int stop;
    atomic_ulong rows, cells, chunks, passes, failures; /* pt_bt_stats */
} pt_bt_compaction;

/* ============================================================================
 * bigtable.c: the state of an open backend
 * ========================================================================== */

/* Made by open, released by close. Between them every field but the counters and the
 * samples (under samples_mu) is read only (the test knobs excepted, which tests call with
 * no call in flight), so write and scan may run on several threads at once; each call owns
 * its completion queue. */
typedef struct pt_bt {
    grpc_channel *data;
    grpc_channel *admin; /* == data for the emulator, which serves both services */
    char *parent;        /* projects/P/instances/I */
    char *table[PT_TABLE_COUNT];
    const char *table_id[PT_TABLE_COUNT]; /* points into table[] */
    char *params[PT_TABLE_COUNT];         /* x-goog-request-params for data calls */
    char *parent_params;                  /* ... and for CreateTable */
    long retention_s;
    /* storage.retention_rules (backend.h keep_row_ms), or NULL: compaction passes delete
     * the cells of a data row past its keep, counted into retention_dropped (or not). */
    int64_t (*keep_row)(void *ud, pt_slice row);
    void *keep_ud;
    _Atomic uint64_t *retention_dropped;
    int write_ms, read_ms, retry_ms; /* deadline of one call; time spent retrying */
    int read_streams;                /* ReadRows streams one scan may run at once, >= 1 */
    int grpc_ready;                  /* grpc_init was called: close must balance it */
    uint16_t instance;               /* low 2 bytes of every writer id (random at open) */
    /* Cutting one wide range (bigtable_sample.c): pieces of at least split_bytes; a
     * table's samples are asked again after sample_ttl_ms. The sets change under
     * samples_mu, the only lock of the backend. */
    int64_t split_bytes;
    int sample_ttl_ms;
    int samples_ready; /* samples_mu was made: close must destroy it */
    pthread_mutex_t samples_mu;
    pt_bt_sampleset samples[PT_TABLE_COUNT];
    pt_bt_flow flow; /* the write rate Bigtable allows, shared by every writer */
    /* Counters since open (pt_bt_stats); the traffic ones per table, added to with
     * relaxed atomics: a write adds once per request, a scan once at its end. */
    atomic_ulong write_retries, scan_resumes, scans, read_calls, sample_calls;
    atomic_ulong rows_mutated[PT_TABLE_COUNT], cells_written[PT_TABLE_COUNT],
        write_bytes[PT_TABLE_COUNT], rows_read[PT_TABLE_COUNT], cells_read[PT_TABLE_COUNT];
    /* Write-back (storage.bigtable.buffer_path set): an embedded store in that directory
     * whose head and logs take the points, flushed into this backend (direct, its
     * ops table pt_bt_direct_ops) as whole rows; wb.ops NULL: writes go straight here. */
    pt_backend wb;
    pt_backend direct;
    pt_bt_compaction compact;
} pt_bt;

/* Test knobs for an open bigtable backend (state is its pt_bt), for use with no call in
 * flight: per-call deadline and the total time spent retrying one write or scan; the
 * streams one scan may run. 0 keeps the current value. */
void pt_bt_set_timeouts(void *state, int call_ms, int retry_budget_ms);
void pt_bt_set_read_streams(void *state, int streams);
/* Pieces one wide range is cut into hold at least min_piece_bytes by SampleRowKeys'
 * estimate; samples are kept ttl_ms. */
void pt_bt_set_sampling(void *state, int64_t min_piece_bytes, int ttl_ms);

/* What went over the wire, of one table or of both.
 * Writes: each entry and cell counted once however often it is sent again; bytes are every
 * MutateRows request sent, retries included. Reads: the rows the ReadRows merger committed,
 * and their cells. */
typedef struct pt_bt_traffic {
    unsigned long rows_mutated;  /* MutateRowsRequest entries */
    unsigned long cells_written; /* SetCell mutations in them */
    unsigned long write_bytes;   /* serialized MutateRowsRequest messages */
    unsigned long rows_read;
    unsigned long cells_read;
} pt_bt_traffic;

/* Counters since open. Round trips per scan = read_calls / scans. */
typedef struct pt_bt_stats {
    unsigned long write_retries; /* MutateRows sent again for failed entries */
    unsigned long scan_resumes;  /* broken ReadRows streams resumed */
    unsigned long scans;         /* scans with a range to read */
    unsigned long read_calls;    /* ReadRows calls started, resumes included */
    unsigned long sample_calls;  /* SampleRowKeys calls */
    pt_bt_traffic all;           /* both tables */
    pt_bt_traffic points;        /* the points table alone: the samples */
    pt_bt_flow_figures flow;     /* flow control (bigtable_flow.c) */
    /* Compaction: rows rewritten, cells they replaced, chunk cells written, passes made
     * (with the lease), passes that failed. */
    unsigned long compacted_rows, compacted_cells, compaction_chunks, compaction_passes,
        compaction_failures;
} pt_bt_stats;
void pt_bt_get_stats(void *state, pt_bt_stats *out);

/* ============================================================================
 * bigtable_admin.c
 * ========================================================================== */

/* The ops table's init: creates both tables (idempotent: ALREADY_EXISTS is success),
 * retrying transient failures within the retry budget. */
int pt_bt_admin_init(void *state, char *err, size_t errlen);

/* Renders a table's schema as the server reports it (GetTable), e.g.
 * "p: versions>1 || age>86400s", or the failure. For tests and diagnostics. 0 or a pt
 * error code. */
int pt_bt_describe_table(void *state, int table, char *out, size_t outlen);

/* ============================================================================
 * bigtable_data.c: the ops table's write and scan (contracts in backend.h). They block
 * the calling worker thread for at most about the retry budget plus one call deadline.
 * ========================================================================== */

int pt_bt_data_write(void *state, const pt_mutation *m, size_t n);
int pt_bt_data_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud);
/* The ops table's check_and_set: one CheckAndMutateRow, retried within the budget. */
int pt_bt_data_check_and_set(void *state, const pt_mutation *m, pt_slice expect, int *applied);

/* ============================================================================
 * bigtable_sample.c
 * ========================================================================== */

/* At open (before anything can fail) and at close; free is a no-op without init. */
void pt_bt_sample_init(pt_bt *bt);
void pt_bt_sample_free(pt_bt *bt);

/* Cuts the range r of table t into at most k pieces of about equal size at sampled keys
 * (asking SampleRowKeys when the kept answer is older than the ttl; a failure only means
 * no cut). Writes the pieces, in order and together exactly r, to out (room for
 * PT_BT_MAX_READ_STREAMS) and returns how many: 1 is r whole. The cut keys are appended
 * to cuts, which the pieces point into: valid until cuts is next changed or freed. */
size_t pt_bt_sample_split(pt_bt *bt, int t, const pt_row_range *r, size_t k, pt_buf *cuts,
                          pt_row_range *out);

/* For progress lines (pt_backend_ops.position): the bytes before key in table t and in
 * all, from the kept SampleRowKeys answer (asked when older than the ttl); PT_EINTERNAL
 * when there is none. */
int pt_bt_sample_position(pt_bt *bt, int t, pt_slice key, uint64_t *before, uint64_t *total);

/* ============================================================================
 * bigtable_rpc.c: gRPC calls, one completion queue per call, plucked by the calling
 * thread. Everything here is safe on several threads at once for distinct calls.
 * ========================================================================== */

/* grpc_init, then the data and admin channels to endpoint (the emulator: plaintext, one
 * channel for both services) or, with endpoint NULL, to Cloud Bigtable with application
 * default credentials. 0, or a pt error code with err set; either way
 * pt_bt_rpc_disconnect releases whatever was made. */
int pt_bt_rpc_connect(pt_bt *bt, const char *endpoint, char *err, size_t errlen);
void pt_bt_rpc_disconnect(pt_bt *bt);

/* "field=" followed by value percent-encoded, as x-goog-request-params wants it.
 * malloc'd (the caller frees it), NULL when out of memory. */
char *pt_bt_rpc_params(const char *field, const char *value);

/* One call in flight. Owned by the thread that started it; every field is private. */
typedef struct pt_bt_rpc {
    grpc_completion_queue *cq;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata md_out[2];
    grpc_metadata_array md_in;
    grpc_byte_buffer *sending; /* the request, until the start batch is collected */
    int starting;              /* the start batch is not collected yet */
    int ended;                 /* no more messages will come: end of stream or a failed batch */
} pt_bt_rpc;

/* Starts a call that sends one request message (packed here: req may be freed on
 * return) with the routing header params, which must outlive the call. It returns
 * without waiting for the server, so one thread may have several calls under way (each
 * on its own queue); the first pt_bt_rpc_recv or pt_bt_rpc_finish waits. A call that
 * cannot be made or sent is reported by pt_bt_rpc_finish, which must follow. Returns
 * the bytes of the packed request handed to gRPC, 0 when the call could not be made. */
size_t pt_bt_rpc_start(pt_bt_rpc *r, grpc_channel *ch, const char *method, const char *params,
                       const ProtobufCMessage *req, int deadline_ms);
/* The same, with the bigtable-features header set to features (a static string, e.g.
 * PT_BT_FEATURES_RATE_LIMIT), or without it when features is NULL. */
size_t pt_bt_rpc_start_flagged(pt_bt_rpc *r, grpc_channel *ch, const char *method,
                               const char *params, const char *features,
                               const ProtobufCMessage *req, int deadline_ms);

/* Receives the next message into *out, allocated from a (valid until a is reset).
 * 1 = a message, 0 = no more (end of stream or failure: pt_bt_rpc_finish tells),
 * PT_EINTERNAL when the message does not parse (the call is cancelled), PT_ENOMEM. */
int pt_bt_rpc_recv(pt_bt_rpc *r, pt_arena *a, const ProtobufCMessageDescriptor *desc,
                   ProtobufCMessage **out);

void pt_bt_rpc_cancel(pt_bt_rpc *r);

/* Receives the final status, then frees everything the call holds. details gets the
 * server's message (may be empty). */
grpc_status_code pt_bt_rpc_finish(pt_bt_rpc *r, char *details, size_t dlen);

/* One request, one response (the admin calls). *out is allocated from a; a call that
 * ends OK without exactly one parsable message is reported as INTERNAL. */
grpc_status_code pt_bt_rpc_unary(grpc_channel *ch, const char *method, const char *params,
                                 const ProtobufCMessage *req, int deadline_ms, pt_arena *a,
                                 const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                                 char *details, size_t dlen);

/* pt_bt_rpc_unary with bt's write deadline, sent again after retryable failures within
 * bt's retry budget: for calls that may be repeated (idempotent, or checked by the
 * caller). */
grpc_status_code pt_bt_rpc_unary_retried(pt_bt *bt, grpc_channel *ch, const char *method,
                                         const char *params, const ProtobufCMessage *req,
                                         pt_arena *a, const ProtobufCMessageDescriptor *desc,
                                         ProtobufCMessage **out, char *details, size_t dlen);

/* UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED: worth another attempt. */
int pt_bt_rpc_retryable(grpc_status_code s);
/* The pt code that reports a final status: 0 for OK, 5xx codes for the rest. */
int pt_bt_rpc_error(grpc_status_code s);
const char *pt_bt_rpc_status_name(grpc_status_code s);
/* A warning in the log naming the call, the table and the status. */
void pt_bt_rpc_log_failure(const char *what, const char *table, grpc_status_code st,
                           const char *details);

/* Jittered exponential backoff within a time budget, for one write, scan or init. */
typedef struct pt_bt_retry {
    grpc_channel *ch;
    int64_t start;
    int budget_ms;
    int delay_ms;
} pt_bt_retry;

/* Starts (or, after progress, restarts) the budget now. */
void pt_bt_retry_init(pt_bt_retry *r, grpc_channel *ch, int budget_ms);
/* Waits before the next attempt: 1, or 0 (without waiting) when the wait would overrun
 * the budget, which ends the retries. */
int pt_bt_retry_wait(pt_bt_retry *r);

/* ============================================================================
 * bigtable_merge.c: the ReadRows stream without I/O
 *
 * The merger turns the CellChunk stream of a ReadRows call back into rows, following the
 * row-merging rules of Google's ReadRows conformance cases (tests/unit/t_bigtable_merge.c): feed it
 * responses or single chunks, and it calls back once per committed row. One merger per
 * scan; it is not shared between threads.
 * ========================================================================== */

typedef struct pt_bt_cell {
    pt_slice family;
    pt_slice qualifier;
    int64_t ts;
    pt_slice label; /* the first label, or empty */
    pt_slice value;
} pt_bt_cell;

/* One committed row, its cells in the order the server sent them. Everything it points
 * to is valid only during the call. Return 0 to go on, 1 to stop (the merger then
 * returns 1), or a negative pt error code (the merger returns it). */
typedef int (*pt_bt_row_fn)(void *ud, pt_slice key, const pt_bt_cell *cells, size_t ncells);

/* Where a cell's parts sit in the row buffer: offsets, because the buffer may move. */
typedef struct pt_bt_cellpos {
    size_t fam, fam_n, qual, qual_n, label, label_n, val, val_n;
    int64_t ts;
} pt_bt_cellpos;

typedef struct pt_bt_merger {
    int state; /* NEW_ROW, NEW_CELL or CELL_VALUE (bigtable_merge.c) */
    pt_bt_row_fn fn;
    void *ud;

    pt_buf last; /* the resume point: key of the last committed row or last_scanned_row_key */
    int have_last;

    pt_buf row; /* current row: its key, then each cell's family, qualifier, label and
                 * value; its ceiling is the largest row accepted */
    size_t key_n;
    pt_bt_cellpos *cells;
    size_t ncells, cells_cap;
    pt_bt_cell *out; /* the cells resolved to slices at commit */
    size_t out_cap;

    int32_t value_size; /* announced size of the split cell being assembled */
    int64_t remaining;  /* bytes of it still to come */

    size_t rows;   /* rows committed (and delivered) so far */
    char err[160]; /* why the last call failed */
} pt_bt_merger;

/* max_row_bytes (> 0) bounds one buffered row, and so what a server can make us hold. */
void pt_bt_merger_init(pt_bt_merger *m, pt_bt_row_fn fn, void *ud, size_t max_row_bytes);
void pt_bt_merger_free(pt_bt_merger *m);

/* Feeds one response: its last_scanned_row_key, then its chunks. Returns 0, 1 when the
 * row callback asked to stop, the callback's negative code, or PT_EINTERNAL for a stream
 * that breaks the protocol / PT_ELIMIT for a row over the ceiling (err says which). */
int pt_bt_merger_response(pt_bt_merger *m, const Bigtable__ReadRowsResponse *r);
int pt_bt_merger_chunk(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c);
/* The stream ended with status OK: fails unless the last row was committed. */
int pt_bt_merger_end(pt_bt_merger *m);
/* The stream broke: drops the partial row, keeps the resume point (last key). */
void pt_bt_merger_abandon(pt_bt_merger *m);
/* The resume point: 1 with *key set (valid until the merger is next fed or freed), or 0
 * when no row was committed and no scan marker seen yet. */
int pt_bt_merger_last(const pt_bt_merger *m, pt_slice *key);

/* A row range as sent: [start, end) or (start, end) when start_open; end.n == 0 is +inf. */
typedef struct pt_bt_range {
    pt_slice start;
    int start_open;
    pt_slice end;
} pt_bt_range;

/* The ranges a ReadRows must still cover: in[0..n) without empty ones and, when last is
 * given, without every row key <= *last (the resume point after a broken stream).
 * Writes at most n ranges to out and returns how many; 0 means nothing is left to read
 * (never send that: an empty row set reads the whole table). out points into in and last. */
size_t pt_bt_clip_ranges(const pt_row_range *in, size_t n, const pt_slice *last, pt_bt_range *out);

/* Where to cut the range [start, end) (end.n == 0: +inf) into at most k pieces of about
 * equal estimated size, none under min_bytes: indices into s[0..n) (increasing keys,
 * non-decreasing offsets; total = bytes of the whole table) of keys strictly inside the
 * range, increasing, written to out (room for k - 1). Returns how many; 0 leaves the
 * range whole. Sizes only steer the choice: any answer cuts the range correctly. */
size_t pt_bt_split_points(const pt_bt_sample *s, size_t n, int64_t total, pt_slice start,
                          pt_slice end, size_t k, int64_t min_bytes, size_t *out);

/* ============================================================================
 * bigtable_chunk.c: chunk cells of the points table, without I/O (docs/storage-format.md,
 * "Chunk cells on Bigtable")
 *
 * A chunk cell holds a run of one row's samples as one value, the pt_cellchunk encoding
 * (base/cellchunk.h) of cells whose qualifiers are their 4-byte offsets. Its qualifier is
 *
 *     first offset (4 B BE) || last offset (4 B BE) || writer id (8 B BE)
 *
 * and its version the greatest version of its cells (a data row's: its last sample's time
 * in µs), so an age-based GC rule drops it once its newest sample is past retention. The
 * writer id is 6 bytes of a per-process strictly increasing ms clock and 2 bytes of an
 * instance id, so two writes never share a qualifier and a later write's sorts after.
 * On equal offsets a chunk cell wins over a single-sample cell (4-byte qualifier, written
 * by older versions), and among chunk cells the one with the greater writer id wins.
 * ========================================================================== */

enum {
    PT_BT_CHUNK_QUAL_LEN = 16,
    PT_BT_CHUNK_MAX_CELLS = 2048, /* cells of one chunk at most */
};
/* Sample time one chunk spans at most (last - first offset): a scan from qs also reads
 * the chunks that start in [qs - span, qs). */
#define PT_BT_CHUNK_SPAN_MS 14400000u

typedef struct pt_bt_chunkqual {
    uint32_t first, last;
    uint64_t writer;
} pt_bt_chunkqual;

void pt_bt_chunk_qual_put(uint8_t *q, const pt_bt_chunkqual *c);
/* 0, or PT_EINTERNAL when q is not a chunk cell's qualifier (16 bytes, first <= last). */
int pt_bt_chunk_qual_get(pt_slice q, pt_bt_chunkqual *c);

/* The writer id of ms (the low 48 bits) and instance. */
static inline uint64_t pt_bt_writer_id(int64_t ms, uint16_t instance)
{
    return ((uint64_t)ms & 0xffffffffffffull) << 16 | instance;
}

/* Whether a points-table mutation goes into a chunk cell: a 4-byte qualifier in a row
 * that is not an exemplar row (",#": there the newest version wins, not the last write,
 * which chunks cannot tell; those stay single cells). */
int pt_bt_chunkable(const pt_mutation *m);

/* Turns one row's chunkable mutations into chunk cells. What it keeps between rows of
 * one write call; zero it, then pt_bt_chunker_free. */
typedef struct pt_bt_chunker {
    pt_vcell *cells; /* one row's cells, by offset */
    int64_t *ver;    /* ... and their versions */
    size_t cap, vcap;
    pt_buf enc;    /* one chunk's value as encoded */
    pt_arena mem;  /* the chunk cells' qualifiers and values: until free */
    int mem_ready; /* mem was made */
} pt_bt_chunker;
void pt_bt_chunker_free(pt_bt_chunker *ck);

/* v[0..n): mutations of one row (chunkable, pointers into one batch, so an address tells
 * its batch position). Sorts v by (offset, batch position), keeps the last of equal
 * offsets, cuts the run into chunks of at most PT_BT_CHUNK_MAX_CELLS cells spanning at
 * most PT_BT_CHUNK_SPAN_MS, and writes each as one mutation of the row to out (room for n:
 * never more than n), its qualifier and value in ck's memory, valid until
 * pt_bt_chunker_free. Returns how many (>= 1 for n >= 1), or a negative pt error code. */
long pt_bt_chunk_row(pt_bt_chunker *ck, const pt_mutation **v, size_t n, uint64_t writer,
                     pt_mutation *out);

/* A row's cells merged for a points scan. Keep one per scan; zero it, then
 * pt_bt_rowmerge_free. */
typedef struct pt_bt_rowmerge_item pt_bt_rowmerge_item;
typedef struct pt_bt_rowmerge {
    pt_vcells dec; /* the row's chunks decoded */
    pt_bt_rowmerge_item *items;
    size_t n, cap;
    size_t src; /* during pt_bt_merge_row's fn: the index in cells[] of the value's cell */
} pt_bt_rowmerge;
void pt_bt_rowmerge_free(pt_bt_rowmerge *rm);

/* Called per merged cell, in qualifier order; qual and value are valid during the call.
 * Returns as pt_cell_fn does. */
typedef int (*pt_bt_merged_fn)(void *ud, pt_slice qual, pt_slice value);

/* Whether one of cells[0..n) is a chunk cell (so the row needs pt_bt_merge_row). */
int pt_bt_row_has_chunks(const pt_bt_cell *cells, size_t n);

/* Merges the points row's cells (family PT_BT_FAMILY, newest version first per column,
 * in any order of columns) into the cells a single-cell layout would hold in [qs, qe)
 * (byte strings, n == 0: unbounded): every offset once, a chunk's over a single cell's,
 * the greater writer id's among chunks; cells whose qualifier is neither 4 nor 16 bytes
 * pass through as they are. Calls fn for each in qualifier order. Returns 0, 1 (fn
 * stopped), fn's negative code, or PT_EINTERNAL with err set when a chunk cell is corrupt
 * (does not decode, or holds an offset outside its qualifier's first..last). */
int pt_bt_merge_row(pt_bt_rowmerge *rm, const pt_bt_cell *cells, size_t n, pt_slice qs,
                    pt_slice qe, pt_bt_merged_fn fn, void *ud, char *err, size_t errlen);

/* ---- compaction, without I/O (docs/bigtable.md, "Compaction") ----
 *
 * A data row's single cells and chunk cells whose samples are all older than a guard time
 * are folded: replaced, in one MutateRows entry, by as few chunk cells as the limits above
 * allow. The row's cells are those a read with the newest version per column returns
 * (family PT_BT_FAMILY; others are never folded). */

/* Sample time a folded cell's newest sample must be older than: now minus this. Rows
 * still being written (a chunk per request or per flush of the write-back buffer) would
 * otherwise be rewritten again at every pass, and a single cell that an older version
 * writes again at the same offset (it deletes with its column) is not raced. */
#define PT_BT_COMPACT_GUARD_MS 3600000
enum {
    /* Cells folded in one row at most: its entry stays far under MutateRows' 100,000
     * mutations, and a row's rewrite under a few MiB. */
    PT_BT_COMPACT_MAX_FOLD = 20000,
};

/* Picks the cells of row key's cells[0..n) to fold with the guard time guard_ms (ms since
 * the epoch): sets fold[i] (room for n) to 1 for each, 0 for the others. Returns how many
 * when folding them is worth it (it cuts the row's cell count, as far as the qualifiers
 * tell: the chunks they would make, estimated from the chunks' first and last offsets and
 * the single cells' offsets, with a cut between two chunks of one writer id, are fewer
 * than the cells), else 0 (fold all 0). Never folds
 * in a row that is not a data row (exemplar, index, ...). Reads qualifiers and versions
 * only, so it works on a scan with stripped values. */
size_t pt_bt_compact_select(pt_slice key, const pt_bt_cell *cells, size_t n, int64_t guard_ms,
                            uint8_t *fold);

/* Points s at a copy of its bytes in a (a batch's memory, for slices that die with the
 * row read); 0 or PT_ENOMEM. */
static inline int pt_bt_copy_in(pt_arena *a, pt_slice *s)
{
    if (s->n == 0)
        return 0;
    uint8_t *c = pt_arena_alloc(a, s->n);
    if (!c)
        return PT_ENOMEM;
    memcpy(c, s->p, s->n);
    s->p = c;
    return 0;
}

/* A delete in a points mutation list for MutateRows (bigtable_data.c): version_us
 * negative: DeleteFromColumn of m.qual's versions below -version_us µs. */
static inline int pt_bt_is_delete(const pt_mutation *m)
{
    return m->version_us < 0;
}

/* What one row's rewrite keeps; zero it, then pt_bt_compactor_free. */
typedef struct pt_bt_compactor {
    pt_bt_chunker ck; /* the new chunks' values and qualifiers */
    pt_bt_rowmerge rm;
    const uint8_t *fold; /* during a build */
    /* An erase's rewrite (bigtable_erase.c): offsets in [drop_lo, drop_hi) are left out,
     * and the rewrite is made even when it does not cut the row's cells. Zero: none. */
    uint64_t drop_lo, drop_hi;
    size_t nkeep;        /* cells gathered in ck.cells / ck.ver */
    int failed;          /* ENOMEM while gathering */
    pt_mutation *out;    /* the row's mutations */
    size_t outcap;
} pt_bt_compactor;
void pt_bt_compactor_free(pt_bt_compactor *cp);

/* The row's rewrite: cells[0..n) of table PT_TABLE_POINTS row key, as read in full,
 * fold[] as pt_bt_compact_select set it (nfold of them). The merged row (pt_bt_merge_row
 * over all cells) decides every offset; the offsets whose winner is a folded cell go into
 * new chunk cells with the greatest writer id among the folded chunks (single cells count
 * as 0): a chunk written after this read has a greater one and still wins, and the view
 * of every offset is what it was. *out gets the mutations, the deletes of the folded
 * cells first (each column's versions up to the one read), then the new chunks (so one
 * whose qualifier equals a deleted one survives); *nchunks how many new chunks. Returns
 * the number of mutations, 0 when the rewrite would not cut the row's cells (nothing to
 * do), or a negative pt error code (PT_EINTERNAL with err set: a corrupt chunk). *out
 * and what it points to stay valid until the next build or free. */
long pt_bt_compact_row(pt_bt_compactor *cp, pt_slice key, const pt_bt_cell *cells, size_t n,
                       const uint8_t *fold, size_t nfold, pt_mutation **out, size_t *nchunks,
                       char *err, size_t errlen);

/* The smallest offset whose 4-byte qualifier sorts at or after the byte string q (n == 0:
 * 0); 2^32 when none does. [qs, qe) holds exactly the offsets in [lo(qs), lo(qe)). */
uint64_t pt_bt_qual_floor(pt_slice q);

/* ============================================================================
 * More of bigtable_data.c, for compaction
 * ========================================================================== */

/* The scan s (no stream) with whole rows as read going to fn, chunk cells unmerged, every
 * column's newest version only; with strip set their values are empty (qualifiers and
 * versions only). Returns as pt_bt_data_scan does. */
int pt_bt_data_read_raw(pt_bt *bt, const pt_scan *s, int strip, pt_bt_row_fn fn, void *ud);
/* Writes v[0..n) of table t (sorted by row; a row's mutations stay in order and in one
 * MutateRows entry up to 100,000 of them), deletes (pt_bt_is_delete) included, retried
 * as write is. */
int pt_bt_data_mutate(pt_bt *bt, int t, const pt_mutation *const *v, size_t n);

/* ============================================================================
 * bigtable_erase.c: pt_backend_ops.erase without the write-back buffer
 * ========================================================================== */

int pt_bt_erase(void *state, const pt_erase *x, size_t n);

/* ============================================================================
 * bigtable_compact.c: compaction passes and their thread (docs/bigtable.md,
 * "Compaction"), over bigtable_data.c and the planning above
 * ========================================================================== */

/* The lease: row PT_COMPACT_LEASE_ROW (base/schema.h) of the index table, qualifier "l",
 * value "<expiry ms> <holder hex>" (docs/storage-format.md). */
enum { PT_BT_COMPACT_LEASE_MS = 300000 }; /* a dead holder's lease lapses after this */

/* At open: the lease holder's id, the counters' lock. */
void pt_bt_compact_init(pt_bt *bt);
/* Starts the thread that runs a pass every interval_ms (> 0). 0 or PT_ENOMEM/PT_EINTERNAL. */
int pt_bt_compact_start(pt_bt *bt, long interval_ms);
/* Stops the thread (at the next row of a pass at most; an RPC in flight is awaited) and
 * frees what init made. A no-op when neither ran. */
void pt_bt_compact_free(pt_bt *bt);

/* One pass at now_ms (ms since the epoch: the guard and the lease's clock), on the
 * calling thread: 0 done, 1 another holder's lease is live (nothing done), or a pt error
 * code (the pass stops; what it compacted stays compacted). A test knob too. */
int pt_bt_compact_pass(void *state, int64_t now_ms);
/* Test hook: passes fail (PT_EUNAVAIL) once they compacted rows rows; 0 = never. */
void pt_bt_set_compact_fail_after(void *state, long rows);

#endif
