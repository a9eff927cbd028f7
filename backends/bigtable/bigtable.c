/*
 * The Cloud Bigtable backend: the gRPC C core speaking google.bigtable.v2.Bigtable
 * (MutateRows, ReadRows) and google.bigtable.admin.v2.BigtableTableAdmin (CreateTable,
 * GetTable), with protobuf-c messages from prompb/bigtable.proto. The protocol facts this
 * file relies on are in shared/reference/bigtable.md.
 *
 * Schema (DESIGN §3): tables <prefix>points and <prefix>index, one family "p" each with
 * GC "max versions 1", or "max versions 1 OR older than the retention" (a union: either
 * rule deletes a cell). A pt_mutation is one SetCell; its version is the cell timestamp,
 * which the write path always makes a multiple of 1000 µs as Bigtable's default MILLIS
 * granularity requires.
 *
 * Threads: one channel per endpoint, shared by every call (gRPC channels are
 * thread-safe). Each call has its own completion queue which the calling thread plucks;
 * write and scan block their (worker) thread and never run on the event loop. Every call
 * carries a deadline, and every wait on the queue is bounded too.
 *
 * Failures: per-entry MutateRows failures and broken ReadRows streams with a retryable
 * code (UNAVAILABLE, DEADLINE_EXCEEDED, ABORTED, RESOURCE_EXHAUSTED) are retried with
 * jittered exponential backoff inside a time budget, then reported as PT_EUNAVAIL /
 * PT_ETIMEOUT / PT_EBUSY so the client retries. A read resumes after the last row it
 * delivered, so no row reaches the callback twice.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/status.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "backend.h"
#include "bigtable.h"
#include "bigtable_int.h"
#include "arena.h"
#include "pb_alloc.h"
#include "error.h"
#include "log.h"

#define DATA_HOST "bigtable.googleapis.com:443"
#define ADMIN_HOST "bigtableadmin.googleapis.com:443"
#define M_READ_ROWS "/google.bigtable.v2.Bigtable/ReadRows"
#define M_MUTATE_ROWS "/google.bigtable.v2.Bigtable/MutateRows"
#define M_CREATE_TABLE "/google.bigtable.admin.v2.BigtableTableAdmin/CreateTable"
#define M_GET_TABLE "/google.bigtable.admin.v2.BigtableTableAdmin/GetTable"

static char family[] = "p"; /* protobuf-c wants a char *; never written */

enum {
    MAX_ROW_KEY = 4096,                      /* Bigtable rejects longer keys */
    MAX_REQ_MUTATIONS = 100000,              /* per MutateRows request, all entries together */
    MAX_REQ_BYTES = 32 << 20,                /* keep each request well under the 256 MiB cap */
    MAX_MESSAGE = 256 << 20,                 /* largest response we accept (one ReadRows row) */
    MAX_ROW_BYTES = MAX_MESSAGE + (1 << 20), /* one merged row, across responses */
    WRITE_DEADLINE_MS = 30000,
    READ_DEADLINE_MS = 60000,
    RETRY_BUDGET_MS = 5000,
    BACKOFF_FIRST_MS = 20,
    BACKOFF_MAX_MS = 1000,
    ENTRY_OVERHEAD = 16, /* tags and lengths around one SetCell, roughly */
};

typedef struct bigtable {
    grpc_channel *data;
    grpc_channel *admin; /* == data for the emulator, which serves both services */
    char *parent;        /* projects/P/instances/I */
    char *table[PT_TABLE_COUNT];
    const char *table_id[PT_TABLE_COUNT]; /* points into table[] */
    char *params[PT_TABLE_COUNT];         /* x-goog-request-params for data calls */
    char *parent_params;                  /* ... and for CreateTable */
    long retention_s;
    int write_ms, read_ms, retry_ms;
    int grpc_ready;
    atomic_ulong write_retries, scan_resumes; /* for tests */
} bigtable;

/* ============================================================================
 * The ReadRows chunk merger (reference §5)
 * ========================================================================== */

enum { NEW_ROW, NEW_CELL, CELL_VALUE };

static int merge_fail(pt_bt_merger *m, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int merge_fail(pt_bt_merger *m, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m->err, sizeof(m->err), fmt, ap);
    va_end(ap);
    return code;
}

/* Grows *p (of *cap elements of size elem) to hold need elements. */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return PT_ENOMEM;
    *p = np;
    *cap = ncap;
    return 0;
}

void pt_bt_merger_init(pt_bt_merger *m, pt_bt_row_fn fn, void *ud, size_t max_row_bytes)
{
    memset(m, 0, sizeof(*m));
    m->state = NEW_ROW;
    m->fn = fn;
    m->ud = ud;
    m->max_row_bytes = max_row_bytes;
}

void pt_bt_merger_free(pt_bt_merger *m)
{
    free(m->last);
    free(m->buf);
    free(m->cells);
    free(m->out);
    memset(m, 0, sizeof(*m));
}

/* Makes room for n more bytes of the current row, within the ceiling. */
static int row_reserve(pt_bt_merger *m, size_t n)
{
    if (n > m->max_row_bytes - m->buf_n)
        return merge_fail(m, PT_ELIMIT, "a row is larger than %zu bytes", m->max_row_bytes);
    if (grow((void **)&m->buf, &m->buf_cap, m->buf_n + n, 1) != 0)
        return merge_fail(m, PT_ENOMEM, "out of memory for a row");
    return 0;
}

static int row_append(pt_bt_merger *m, const void *p, size_t n, size_t *off)
{
    int rv = row_reserve(m, n);
    if (rv != 0)
        return rv;
    if (n)
        memcpy(m->buf + m->buf_n, p, n);
    *off = m->buf_n;
    m->buf_n += n;
    return 0;
}

static void drop_row(pt_bt_merger *m)
{
    m->buf_n = 0;
    m->key_n = 0;
    m->ncells = 0;
    m->remaining = 0;
    m->value_size = 0;
    m->state = NEW_ROW;
}

static int set_last(pt_bt_merger *m, const uint8_t *p, size_t n)
{
    if (grow((void **)&m->last, &m->last_cap, n ? n : 1, 1) != 0)
        return merge_fail(m, PT_ENOMEM, "out of memory for a row key");
    memcpy(m->last, p, n);
    m->last_n = n;
    m->have_last = 1;
    return 0;
}

static int after_last(const pt_bt_merger *m, const ProtobufCBinaryData *key)
{
    if (!m->have_last)
        return 1;
    return pt_slice_cmp((pt_slice){key->data, key->len}, (pt_slice){m->last, m->last_n}) > 0;
}

static int commit_row(pt_bt_merger *m)
{
    if (grow((void **)&m->out, &m->out_cap, m->ncells, sizeof(*m->out)) != 0)
        return merge_fail(m, PT_ENOMEM, "out of memory for a row");
    for (size_t i = 0; i < m->ncells; i++) {
        const pt_bt_cellpos *c = &m->cells[i];
        m->out[i] = (pt_bt_cell){
            .family = {m->buf + c->fam, c->fam_n},
            .qualifier = {m->buf + c->qual, c->qual_n},
            .ts = c->ts,
            .label = {m->buf + c->label, c->label_n},
            .value = {m->buf + c->val, c->val_n},
        };
    }
    /* The row is delivered whatever the callback answers: it is the resume point. */
    int rv = set_last(m, m->buf, m->key_n);
    if (rv != 0)
        return rv;
    size_t n = m->ncells;
    m->rows++;
    drop_row(m);
    /* drop_row only resets counters, so buf and out stay valid during the call. */
    return m->fn(m->ud, (pt_slice){m->buf, m->last_n}, m->out, n);
}

/* row_status is a oneof: an explicit "commit_row: false" is present but commits nothing. */
static int is_reset(const Bigtable__ReadRowsResponse__CellChunk *c)
{
    return c->row_status_case == BIGTABLE__READ_ROWS_RESPONSE__CELL_CHUNK__ROW_STATUS_RESET_ROW &&
           c->reset_row;
}

static int is_commit(const Bigtable__ReadRowsResponse__CellChunk *c)
{
    return c->row_status_case == BIGTABLE__READ_ROWS_RESPONSE__CELL_CHUNK__ROW_STATUS_COMMIT_ROW &&
           c->commit_row;
}

static int reset_row(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    if (c->row_key.len || c->family_name || c->qualifier || c->timestamp_micros || c->value_size ||
        c->value.len || c->n_labels)
        return merge_fail(m, PT_EINTERNAL, "reset_row chunk carries cell data");
    drop_row(m);
    return 0;
}

/* The first chunk of a cell (in NEW_CELL, or in NEW_ROW after the row's checks). */
static int start_cell(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    pt_bt_cellpos cp = {0};
    int rv;
    if (c->family_name && !c->qualifier)
        return merge_fail(m, PT_EINTERNAL, "a new family without a qualifier");
    if (m->ncells == 0 && (!c->family_name || !c->qualifier))
        return merge_fail(m, PT_EINTERNAL, "the first cell of a row has no family/qualifier");
    const pt_bt_cellpos *prev = m->ncells ? &m->cells[m->ncells - 1] : NULL;
    if (c->family_name) {
        const char *f = c->family_name->value ? c->family_name->value : "";
        if ((rv = row_append(m, f, strlen(f), &cp.fam)) != 0)
            return rv;
        cp.fam_n = strlen(f);
    } else {
        cp.fam = prev->fam;
        cp.fam_n = prev->fam_n;
    }
    if (c->qualifier) {
        if ((rv = row_append(m, c->qualifier->value.data, c->qualifier->value.len, &cp.qual)))
            return rv;
        cp.qual_n = c->qualifier->value.len;
    } else {
        cp.qual = prev->qual;
        cp.qual_n = prev->qual_n;
    }
    /* Timestamp and labels are never inherited from the previous cell. */
    cp.ts = c->timestamp_micros;
    if (c->n_labels && c->labels[0]) {
        cp.label_n = strlen(c->labels[0]);
        if ((rv = row_append(m, c->labels[0], cp.label_n, &cp.label)) != 0)
            return rv;
    }
    int commit = is_commit(c);
    if (c->value_size < 0)
        return merge_fail(m, PT_EINTERNAL, "negative value_size");
    if (c->value_size > 0) {
        if (commit)
            return merge_fail(m, PT_EINTERNAL, "commit_row on the first piece of a split cell");
        if (c->value.len == 0)
            return merge_fail(m, PT_EINTERNAL, "a split cell starts without a value");
        if (c->value.len > (size_t)c->value_size)
            return merge_fail(m, PT_EINTERNAL, "a split cell is longer than its value_size");
        /* Reserve the announced size now; the ceiling bounds what the peer can make us
         * allocate. */
        if ((rv = row_reserve(m, (size_t)c->value_size)) != 0)
            return rv;
    }
    if ((rv = row_append(m, c->value.data, c->value.len, &cp.val)) != 0)
        return rv;
    cp.val_n = c->value.len;
    if (grow((void **)&m->cells, &m->cells_cap, m->ncells + 1, sizeof(*m->cells)) != 0)
        return merge_fail(m, PT_ENOMEM, "out of memory for a row");
    m->cells[m->ncells++] = cp;
    if (c->value_size > 0) {
        m->value_size = c->value_size;
        m->remaining = (int64_t)c->value_size - (int64_t)c->value.len;
        m->state = CELL_VALUE;
        return 0;
    }
    m->state = NEW_CELL;
    return commit ? commit_row(m) : 0;
}

/* A later piece of a split cell (CELL_VALUE). */
static int on_cell_value(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    int rv;
    size_t off;
    if (is_reset(c))
        return reset_row(m, c);
    if (c->row_key.len || c->family_name || c->qualifier || c->timestamp_micros || c->n_labels)
        return merge_fail(m, PT_EINTERNAL, "a split cell's continuation names a cell");
    pt_bt_cellpos *cp = &m->cells[m->ncells - 1];
    if ((int64_t)c->value.len > m->remaining)
        return merge_fail(m, PT_EINTERNAL, "a split cell is longer than its value_size");
    if (c->value_size == 0) {
        if ((int64_t)c->value.len != m->remaining)
            return merge_fail(m, PT_EINTERNAL, "a split cell ends %" PRId64 " bytes short",
                              m->remaining - (int64_t)c->value.len);
    } else {
        if (c->value_size != m->value_size)
            return merge_fail(m, PT_EINTERNAL, "value_size changed inside a split cell");
        if (is_commit(c))
            return merge_fail(m, PT_EINTERNAL, "commit_row inside a split cell");
    }
    if ((rv = row_append(m, c->value.data, c->value.len, &off)) != 0)
        return rv;
    cp->val_n += c->value.len;
    m->remaining -= (int64_t)c->value.len;
    if (c->value_size > 0)
        return 0;
    m->state = NEW_CELL;
    return is_commit(c) ? commit_row(m) : 0;
}

/* One function per state; each gets a chunk that arrived in that state. */

static int on_new_row(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    if (is_reset(c))
        return merge_fail(m, PT_EINTERNAL, "reset_row outside a row");
    if (c->row_key.len == 0)
        return merge_fail(m, PT_EINTERNAL, "a new row without a row key");
    if (!c->family_name || !c->qualifier)
        return merge_fail(m, PT_EINTERNAL, "a new row without family and qualifier");
    if (!after_last(m, &c->row_key))
        return merge_fail(m, PT_EINTERNAL, "row keys out of order or repeated");
    drop_row(m);
    int rv = row_append(m, c->row_key.data, c->row_key.len, &(size_t){0});
    if (rv != 0)
        return rv;
    m->key_n = c->row_key.len;
    return start_cell(m, c);
}

static int on_new_cell(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    if (is_reset(c))
        return reset_row(m, c);
    if (c->row_key.len &&
        !pt_slice_eq((pt_slice){c->row_key.data, c->row_key.len}, (pt_slice){m->buf, m->key_n}))
        return merge_fail(m, PT_EINTERNAL, "a new row key without a commit");
    return start_cell(m, c);
}

int pt_bt_merger_chunk(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    static int (*const state_fn[])(pt_bt_merger *,
                                   const Bigtable__ReadRowsResponse__CellChunk *) = {
        [NEW_ROW] = on_new_row,
        [NEW_CELL] = on_new_cell,
        [CELL_VALUE] = on_cell_value,
    };
    return state_fn[m->state](m, c);
}

int pt_bt_merger_response(pt_bt_merger *m, const Bigtable__ReadRowsResponse *r)
{
    if (r->last_scanned_row_key.len) {
        if (m->state != NEW_ROW)
            return merge_fail(m, PT_EINTERNAL, "last_scanned_row_key inside a row");
        if (!after_last(m, &r->last_scanned_row_key))
            return merge_fail(m, PT_EINTERNAL, "last_scanned_row_key goes backwards");
        int rv = set_last(m, r->last_scanned_row_key.data, r->last_scanned_row_key.len);
        if (rv != 0)
            return rv;
    }
    for (size_t i = 0; i < r->n_chunks; i++) {
        int rv = pt_bt_merger_chunk(m, r->chunks[i]);
        if (rv != 0)
            return rv;
    }
    return 0;
}

int pt_bt_merger_end(pt_bt_merger *m)
{
    if (m->state != NEW_ROW)
        return merge_fail(m, PT_EINTERNAL, "the stream ended inside a row (no commit)");
    return 0;
}

void pt_bt_merger_abandon(pt_bt_merger *m)
{
    drop_row(m);
}

/* ============================================================================
 * Time and retry budget
 * ========================================================================== */

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

typedef struct retry {
    grpc_channel *ch;
    int64_t start;
    int budget_ms;
    int delay_ms;
} retry;

static void retry_init(retry *r, grpc_channel *ch, int budget_ms)
{
    r->ch = ch;
    r->start = now_ms();
    r->budget_ms = budget_ms;
    r->delay_ms = BACKOFF_FIRST_MS;
}

/* Shuts a completion queue down, drains it and destroys it. */
static void cq_close(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

/* Waits before the next attempt, between half and all of the current delay (jitter
 * keeps the workers of one daemon from retrying in lockstep). 0 when the budget would
 * be overrun, which ends the retries.
 *
 * The wait watches the channel's state on a completion queue rather than sleeping:
 * gRPC's I/O is driven by threads waiting on a queue, and after a failure the channel
 * reports TRANSIENT_FAILURE (failing calls at once) until a reconnection completes, which
 * nobody would notice for seconds (gRPC's backup poller) if every thread slept. */
static int retry_wait(retry *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int half = r->delay_ms / 2;
    int d = half + (int)((unsigned long)ts.tv_nsec % (unsigned long)(half + 1));
    if (now_ms() + d - r->start > r->budget_ms)
        return 0;
    gpr_timespec until =
        gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_millis(d, GPR_TIMESPAN));
    grpc_completion_queue *cq = grpc_completion_queue_create_for_pluck(NULL);
    while (gpr_time_cmp(gpr_now(GPR_CLOCK_MONOTONIC), until) < 0) {
        /* Asks an idle channel to connect; the watch completes on a state change, or
         * with success = 0 at the deadline. */
        grpc_connectivity_state st = grpc_channel_check_connectivity_state(r->ch, 1);
        grpc_channel_watch_connectivity_state(r->ch, st, until, cq, r);
        grpc_completion_queue_pluck(cq, r, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    cq_close(cq);
    r->delay_ms = r->delay_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : r->delay_ms * 2;
    return 1;
}

/* ============================================================================
 * gRPC calls: one completion queue per call, plucked by the calling thread
 * ========================================================================== */

static int retryable(grpc_status_code s)
{
    return s == GRPC_STATUS_UNAVAILABLE || s == GRPC_STATUS_DEADLINE_EXCEEDED ||
           s == GRPC_STATUS_ABORTED || s == GRPC_STATUS_RESOURCE_EXHAUSTED;
}

/* The pt code that reports a final status. */
static int status_error(grpc_status_code s)
{
    switch (s) {
    case GRPC_STATUS_OK: return 0;
    case GRPC_STATUS_DEADLINE_EXCEEDED: return PT_ETIMEOUT;
    case GRPC_STATUS_UNAVAILABLE:
    case GRPC_STATUS_ABORTED:
    case GRPC_STATUS_CANCELLED: return PT_EUNAVAIL;
    case GRPC_STATUS_RESOURCE_EXHAUSTED: return PT_EBUSY;
    /* Requests are built from validated keys, so INVALID_ARGUMENT or OUT_OF_RANGE says
     * something about the table or the server, not the client's data: answering 4xx
     * would make Prometheus drop samples it could deliver later. */
    default: return PT_EIO; /* NOT_FOUND (no table: run init), permissions, INTERNAL... */
    }
}

static const char *status_name(grpc_status_code s)
{
    static const char *const names[] = {"OK",
                                        "CANCELLED",
                                        "UNKNOWN",
                                        "INVALID_ARGUMENT",
                                        "DEADLINE_EXCEEDED",
                                        "NOT_FOUND",
                                        "ALREADY_EXISTS",
                                        "PERMISSION_DENIED",
                                        "RESOURCE_EXHAUSTED",
                                        "FAILED_PRECONDITION",
                                        "ABORTED",
                                        "OUT_OF_RANGE",
                                        "UNIMPLEMENTED",
                                        "INTERNAL",
                                        "UNAVAILABLE",
                                        "DATA_LOSS",
                                        "UNAUTHENTICATED"};
    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "UNKNOWN";
}

typedef struct rpc {
    grpc_completion_queue *cq;
    grpc_call *call;
    gpr_timespec deadline;
    grpc_metadata_array md_in;
    int ended; /* no more messages will come: end of stream or a failed batch */
} rpc;

/* Waits for the batch tagged tag. gRPC ends a call at its deadline by itself; the wait
 * has its own limit a little later so that a stuck call cannot hold the thread: then the
 * call is cancelled, which completes every pending batch. */
static int rpc_wait(rpc *r, void *tag)
{
    gpr_timespec limit = gpr_time_add(r->deadline, gpr_time_from_seconds(5, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(r->cq, tag, limit, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(r->call, NULL);
        ev = grpc_completion_queue_pluck(r->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static int rpc_batch(rpc *r, const grpc_op *ops, size_t n, void *tag)
{
    if (grpc_call_start_batch(r->call, ops, n, tag, NULL) != GRPC_CALL_OK)
        return 0;
    return rpc_wait(r, tag);
}

/* Starts a call that sends one request message. rpc_finish must follow, whatever this
 * returns (0, or PT_ENOMEM when gRPC could not make the call). */
static int rpc_start(rpc *r, grpc_channel *ch, const char *method, const char *params,
                     const ProtobufCMessage *req, int deadline_ms)
{
    memset(r, 0, sizeof(*r));
    grpc_metadata_array_init(&r->md_in);
    r->cq = grpc_completion_queue_create_for_pluck(NULL);
    r->deadline =
        gpr_time_add(gpr_now(GPR_CLOCK_REALTIME), gpr_time_from_millis(deadline_ms, GPR_TIMESPAN));
    r->call =
        grpc_channel_create_call(ch, NULL, GRPC_PROPAGATE_DEFAULTS, r->cq,
                                 grpc_slice_from_static_string(method), NULL, r->deadline, NULL);
    if (!r->call) {
        r->ended = 1;
        return PT_ENOMEM;
    }

    size_t n = protobuf_c_message_get_packed_size(req);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(s));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);

    /* The routing header: Bigtable sends each call to the right backend by it. */
    grpc_metadata md = {.key = grpc_slice_from_static_string("x-goog-request-params"),
                        .value = grpc_slice_from_static_string(params)};
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = 1;
    ops[0].data.send_initial_metadata.metadata = &md;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = bb;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &r->md_in;
    if (!rpc_batch(r, ops, 4, (void *)1))
        r->ended = 1;
    grpc_byte_buffer_destroy(bb);
    return 0;
}

/* Receives the next message into *out (allocated from a, which the caller resets).
 * 1 = a message, 0 = no more (end of stream or failure: rpc_finish tells), PT_EINTERNAL
 * when the message does not parse (the call is cancelled), PT_ENOMEM. */
static int rpc_recv(rpc *r, pt_arena *a, const ProtobufCMessageDescriptor *desc,
                    ProtobufCMessage **out)
{
    if (r->ended)
        return 0;
    grpc_byte_buffer *bb = NULL;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    if (!rpc_batch(r, &op, 1, (void *)2) || !bb) {
        if (bb)
            grpc_byte_buffer_destroy(bb);
        r->ended = 1;
        return 0;
    }
    grpc_byte_buffer_reader rd;
    int rv = PT_EINTERNAL;
    if (grpc_byte_buffer_reader_init(&rd, bb)) {
        grpc_slice all = grpc_byte_buffer_reader_readall(&rd);
        ProtobufCAllocator alloc;
        pt_pb_allocator(a, &alloc);
        *out = protobuf_c_message_unpack(desc, &alloc, GRPC_SLICE_LENGTH(all),
                                         GRPC_SLICE_START_PTR(all));
        if (*out)
            rv = 1;
        else if (a->exhausted)
            rv = PT_ENOMEM;
        grpc_slice_unref(all);
        grpc_byte_buffer_reader_destroy(&rd);
    }
    grpc_byte_buffer_destroy(bb);
    if (rv != 1) {
        grpc_call_cancel(r->call, NULL);
        r->ended = 1;
    }
    return rv;
}

static void rpc_cancel(rpc *r)
{
    if (r->call)
        grpc_call_cancel(r->call, NULL);
    r->ended = 1;
}

/* Receives the final status, then frees everything the call holds. details gets the
 * server's message (may be empty). */
static grpc_status_code rpc_finish(rpc *r, char *details, size_t dlen)
{
    grpc_status_code status = GRPC_STATUS_UNAVAILABLE;
    if (dlen)
        details[0] = '\0';
    if (r->call) {
        grpc_metadata_array trailing;
        grpc_metadata_array_init(&trailing);
        grpc_slice msg = grpc_empty_slice();
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        op.data.recv_status_on_client.trailing_metadata = &trailing;
        op.data.recv_status_on_client.status = &status;
        op.data.recv_status_on_client.status_details = &msg;
        if (!rpc_batch(r, &op, 1, (void *)3)) {
            status = GRPC_STATUS_UNAVAILABLE;
            snprintf(details, dlen, "no status from the call");
        } else if (dlen) {
            size_t n = GRPC_SLICE_LENGTH(msg) < dlen - 1 ? GRPC_SLICE_LENGTH(msg) : dlen - 1;
            memcpy(details, GRPC_SLICE_START_PTR(msg), n);
            details[n] = '\0';
        }
        grpc_slice_unref(msg);
        grpc_metadata_array_destroy(&trailing);
        grpc_call_unref(r->call);
    } else {
        snprintf(details, dlen, "could not create a call");
    }
    grpc_metadata_array_destroy(&r->md_in);
    cq_close(r->cq);
    memset(r, 0, sizeof(*r));
    return status;
}

/* One request, one response (the admin calls). *out is allocated from a. */
static grpc_status_code unary(grpc_channel *ch, const char *method, const char *params,
                              const ProtobufCMessage *req, int deadline_ms, pt_arena *a,
                              const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                              char *details, size_t dlen)
{
    rpc r;
    *out = NULL;
    rpc_start(&r, ch, method, params, req, deadline_ms);
    int got = rpc_recv(&r, a, desc, out);
    if (got == 1) {
        /* A unary call ends here; drain to the status. */
        ProtobufCMessage *extra = NULL;
        if (rpc_recv(&r, a, desc, &extra) != 0)
            rpc_cancel(&r);
    }
    grpc_status_code st = rpc_finish(&r, details, dlen);
    if (st == GRPC_STATUS_OK && got != 1) {
        snprintf(details, dlen, "malformed or missing response");
        st = GRPC_STATUS_INTERNAL;
    }
    return st;
}

/* ============================================================================
 * open / close
 * ========================================================================== */

/* prefix followed by s percent-encoded (RFC 3986 unreserved bytes kept). */
static char *url_escaped(const char *prefix, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t pn = strlen(prefix), n = strlen(s);
    char *out = malloc(pn + 3 * n + 1), *o;
    if (!out)
        return NULL;
    memcpy(out, prefix, pn);
    o = out + pn;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
            *p == '-' || *p == '_' || *p == '.' || *p == '~') {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

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

static void bt_close(void *state)
{
    bigtable *bt = state;
    if (bt->admin && bt->admin != bt->data)
        grpc_channel_destroy(bt->admin);
    if (bt->data)
        grpc_channel_destroy(bt->data);
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        free(bt->table[t]);
        free(bt->params[t]);
    }
    free(bt->parent);
    free(bt->parent_params);
    /* gRPC counts grpc_init calls; the last close tears the library down. */
    if (bt->grpc_ready)
        grpc_shutdown();
    memset(bt, 0, sizeof(*bt));
}

static int bt_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    static const char *const suffix[PT_TABLE_COUNT] = {"points", "index"};
    bigtable *bt = state;
    static const pt_bigtable_conf none = {"", "", "", ""};
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
    bt->write_ms = WRITE_DEADLINE_MS;
    bt->read_ms = READ_DEADLINE_MS;
    bt->retry_ms = RETRY_BUDGET_MS;
    bt->retention_s = cfg->retention_seconds;

    bt->parent = str_printf("projects/%s/instances/%s", bc->project, bc->instance);
    bt->parent_params = bt->parent ? url_escaped("parent=", bt->parent) : NULL;
    if (!bt->parent_params)
        goto nomem;
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        bt->table[t] = str_printf("%s/tables/%s%s", bt->parent, prefix, suffix[t]);
        if (!bt->table[t] || !(bt->params[t] = url_escaped("table_name=", bt->table[t])))
            goto nomem;
        bt->table_id[t] = bt->table[t] + strlen(bt->parent) + strlen("/tables/");
    }

    grpc_init();
    bt->grpc_ready = 1;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = MAX_MESSAGE},
        {.type = GRPC_ARG_STRING,
         .key = GRPC_ARG_PRIMARY_USER_AGENT_STRING,
         .value.string = "promtable/" PT_VERSION},
        /* Come back soon after an outage: while the channel waits to reconnect every
         * call fails at once, and gRPC's default wait grows to 2 minutes. A reconnect
         * every second at most stays inside one write's retry budget. */
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS,
         .value.integer = 100},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, .value.integer = 1000},
        /* Notice a dead connection (a vanished load balancer) between requests. */
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIME_MS, .value.integer = 30000},
        {.type = GRPC_ARG_INTEGER, .key = GRPC_ARG_KEEPALIVE_TIMEOUT_MS, .value.integer = 10000},
    };
    grpc_channel_args cargs = {.num_args = sizeof(args) / sizeof(args[0]), .args = args};
    grpc_channel_credentials *creds;
    if (endpoint) {
        /* The emulator: plaintext, no auth, both services on one port. */
        creds = grpc_insecure_credentials_create();
        bt->data = grpc_channel_create(endpoint, creds, &cargs);
        bt->admin = bt->data;
    } else {
        /* Application default credentials: GOOGLE_APPLICATION_CREDENTIALS, gcloud's
         * file, or the metadata server; TLS with the system roots. */
        creds = grpc_google_default_credentials_create(NULL);
        if (!creds) {
            snprintf(err, errlen,
                     "bigtable: no Google application default credentials found "
                     "(set GOOGLE_APPLICATION_CREDENTIALS, or "
                     "storage.bigtable.endpoint for the emulator)");
            bt_close(bt);
            return PT_EINTERNAL;
        }
        bt->data = grpc_channel_create(DATA_HOST, creds, &cargs);
        bt->admin = grpc_channel_create(ADMIN_HOST, creds, &cargs);
    }
    grpc_channel_credentials_release(creds);
    if (!bt->data || !bt->admin) {
        snprintf(err, errlen, "bigtable: cannot create a channel to %s",
                 endpoint ? endpoint : DATA_HOST);
        bt_close(bt);
        return PT_EUNAVAIL;
    }
    return 0;

nomem:
    snprintf(err, errlen, "bigtable: out of memory");
    bt_close(bt);
    return PT_ENOMEM;
}

void pt_bt_set_timeouts(void *state, int call_ms, int retry_budget_ms)
{
    bigtable *bt = state;
    if (call_ms > 0)
        bt->write_ms = bt->read_ms = call_ms;
    if (retry_budget_ms > 0)
        bt->retry_ms = retry_budget_ms;
}

void pt_bt_get_stats(void *state, unsigned long *write_retries, unsigned long *scan_resumes)
{
    bigtable *bt = state;
    *write_retries = atomic_load(&bt->write_retries);
    *scan_resumes = atomic_load(&bt->scan_resumes);
}

static void log_failure(const char *what, const char *table, grpc_status_code st,
                        const char *details)
{
    char q[512];
    pt_log(PT_LOG_WARN, "bigtable call failed", "call=%s table=%s code=%s details=%s", what, table,
           status_name(st), pt_log_quote(q, sizeof(q), details, strlen(details)));
}

/* ============================================================================
 * init: CreateTable, and GetTable for tests
 * ========================================================================== */

static Bigtable__GcRule *new_rule(pt_arena *a)
{
    Bigtable__GcRule *r = pt_arena_alloc(a, sizeof(*r));
    if (r)
        protobuf_c_message_init(&bigtable__gc_rule__descriptor, r);
    return r;
}

/* max versions 1, or (max versions 1 OR older than the retention). */
static Bigtable__GcRule *gc_rule(pt_arena *a, long retention_s)
{
    Bigtable__GcRule *versions = new_rule(a);
    if (!versions)
        return NULL;
    versions->rule_case = BIGTABLE__GC_RULE__RULE_MAX_NUM_VERSIONS;
    versions->max_num_versions = 1;
    if (retention_s <= 0)
        return versions;
    Bigtable__GcRule *age = new_rule(a), *both = new_rule(a);
    Bigtable__Duration *d = pt_arena_alloc(a, sizeof(*d));
    Bigtable__GcRule__Union *u = pt_arena_alloc(a, sizeof(*u));
    Bigtable__GcRule **rules = pt_arena_alloc(a, 2 * sizeof(*rules));
    if (!age || !both || !d || !u || !rules)
        return NULL;
    bigtable__duration__init(d);
    d->seconds = retention_s;
    age->rule_case = BIGTABLE__GC_RULE__RULE_MAX_AGE;
    age->max_age = d;
    protobuf_c_message_init(&bigtable__gc_rule__union__descriptor, u);
    rules[0] = versions;
    rules[1] = age;
    u->n_rules = 2;
    u->rules = rules;
    both->rule_case = BIGTABLE__GC_RULE__RULE_UNION_RULES;
    both->union_rules = u;
    return both;
}

static int create_table(bigtable *bt, int t, pt_arena *a, char *err, size_t errlen)
{
    Bigtable__ColumnFamily cf;
    Bigtable__Table__ColumnFamiliesEntry entry;
    Bigtable__Table__ColumnFamiliesEntry *entries[1] = {&entry};
    Bigtable__Table table;
    Bigtable__CreateTableRequest req;
    bigtable__column_family__init(&cf);
    protobuf_c_message_init(&bigtable__table__column_families_entry__descriptor, &entry);
    bigtable__table__init(&table);
    bigtable__create_table_request__init(&req);
    if (!(cf.gc_rule = gc_rule(a, bt->retention_s)))
        return PT_ENOMEM;
    entry.key = family;
    entry.value = &cf;
    table.n_column_families = 1;
    table.column_families = entries;
    req.parent = bt->parent;
    req.table_id = (char *)bt->table_id[t];
    req.table = &table;

    char details[256];
    grpc_status_code st = GRPC_STATUS_OK;
    ProtobufCMessage *resp;
    retry rt;
    retry_init(&rt, bt->admin, bt->retry_ms);
    do {
        st = unary(bt->admin, M_CREATE_TABLE, bt->parent_params, &req.base, bt->write_ms, a,
                   &bigtable__table__descriptor, &resp, details, sizeof(details));
    } while (retryable(st) && retry_wait(&rt));
    if (st == GRPC_STATUS_OK || st == GRPC_STATUS_ALREADY_EXISTS)
        return 0;
    snprintf(err, errlen, "bigtable: CreateTable %s: %s: %s", bt->table[t], status_name(st),
             details);
    return status_error(st) ? status_error(st) : PT_EIO;
}

static int bt_init(void *state, char *err, size_t errlen)
{
    bigtable *bt = state;
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    int rv = 0;
    for (int t = 0; t < PT_TABLE_COUNT && rv == 0; t++) {
        rv = create_table(bt, t, &a, err, errlen);
        pt_arena_reset(&a);
    }
    pt_arena_free(&a);
    return rv;
}

/* Appends to out[0..n) at *o; output past the end is dropped, *o counts it anyway. */
static void appendf(char *out, size_t n, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void appendf(char *out, size_t n, size_t *o, const char *fmt, ...)
{
    char tmp[1];
    va_list ap;
    va_start(ap, fmt);
    int k = *o < n ? vsnprintf(out + *o, n - *o, fmt, ap) : vsnprintf(tmp, 0, fmt, ap);
    va_end(ap);
    *o += k > 0 ? (size_t)k : 0;
}

static void render_rule(const Bigtable__GcRule *r, char *out, size_t n, size_t *o)
{
    switch (r ? r->rule_case : BIGTABLE__GC_RULE__RULE__NOT_SET) {
    case BIGTABLE__GC_RULE__RULE_MAX_NUM_VERSIONS:
        appendf(out, n, o, "versions>%d", r->max_num_versions);
        break;
    case BIGTABLE__GC_RULE__RULE_MAX_AGE:
        appendf(out, n, o, "age>%" PRId64 "s", r->max_age ? r->max_age->seconds : 0);
        break;
    case BIGTABLE__GC_RULE__RULE_UNION_RULES:
    case BIGTABLE__GC_RULE__RULE_INTERSECTION: {
        int u = r->rule_case == BIGTABLE__GC_RULE__RULE_UNION_RULES;
        size_t nr = u ? r->union_rules->n_rules : r->intersection->n_rules;
        Bigtable__GcRule **rules = u ? r->union_rules->rules : r->intersection->rules;
        appendf(out, n, o, "(");
        for (size_t i = 0; i < nr; i++) {
            appendf(out, n, o, "%s", i == 0 ? "" : u ? " || " : " && ");
            render_rule(rules[i], out, n, o);
        }
        appendf(out, n, o, ")");
        break;
    }
    default: appendf(out, n, o, "never"); break;
    }
}

int pt_bt_describe_table(void *state, int t, char *out, size_t outlen)
{
    bigtable *bt = state;
    if (t < 0 || t >= PT_TABLE_COUNT || outlen == 0)
        return PT_EINTERNAL;
    Bigtable__GetTableRequest req;
    bigtable__get_table_request__init(&req);
    req.name = bt->table[t];
    req.view = 2; /* SCHEMA_VIEW */
    char *params = url_escaped("name=", bt->table[t]);
    if (!params)
        return PT_ENOMEM;
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    ProtobufCMessage *resp;
    char details[256];
    grpc_status_code st = unary(bt->admin, M_GET_TABLE, params, &req.base, bt->write_ms, &a,
                                &bigtable__table__descriptor, &resp, details, sizeof(details));
    int rv = status_error(st);
    size_t o = 0;
    out[0] = '\0';
    if (st == GRPC_STATUS_OK) {
        const Bigtable__Table *tb = (const Bigtable__Table *)resp;
        for (size_t i = 0; i < tb->n_column_families; i++) {
            const Bigtable__Table__ColumnFamiliesEntry *e = tb->column_families[i];
            appendf(out, outlen, &o, "%s%s: ", i ? "; " : "", e->key);
            render_rule(e->value ? e->value->gc_rule : NULL, out, outlen, &o);
        }
    } else {
        snprintf(out, outlen, "%s: %s", status_name(st), details);
    }
    pt_arena_free(&a);
    free(params);
    return rv;
}

/* ============================================================================
 * write: MutateRows, one entry per row, per-entry retries
 * ========================================================================== */

/* One row's mutations in one request; a row with more than MAX_REQ_MUTATIONS cells
 * spans several entries. */
typedef struct entry {
    const pt_mutation *const *m;
    size_t n;
    size_t bytes;
    grpc_status_code st; /* last outcome; OK once applied */
    int done;
} entry;

static int cmp_mutation(const void *pa, const void *pb)
{
    const pt_mutation *a = *(const pt_mutation *const *)pa, *b = *(const pt_mutation *const *)pb;
    if (a->table != b->table)
        return a->table < b->table ? -1 : 1;
    int c = pt_slice_cmp(a->row, b->row);
    if (c != 0)
        return c;
    /* Same row: keep the batch order, so a later SetCell of one cell wins. */
    return (a > b) - (a < b);
}

static int valid_mutation(const pt_mutation *m)
{
    return m->table < PT_TABLE_COUNT && m->row.n > 0 && m->row.n <= MAX_ROW_KEY &&
           memchr(m->row.p, 0, m->row.n) == NULL && m->version_us >= 0 && m->version_us % 1000 == 0;
}

static ProtobufCBinaryData bin(pt_slice s)
{
    return (ProtobufCBinaryData){s.n, (uint8_t *)(uintptr_t)(s.n ? s.p : (const uint8_t *)"")};
}

/* The MutateRows request for the entries e[idx[0..n)], built in a. */
static Bigtable__MutateRowsRequest *build_mutate(bigtable *bt, int t, entry *e, const size_t *idx,
                                                 size_t n, pt_arena *a)
{
    size_t nm = 0;
    for (size_t i = 0; i < n; i++)
        nm += e[idx[i]].n;
    Bigtable__MutateRowsRequest *req = pt_arena_alloc(a, sizeof(*req));
    Bigtable__MutateRowsRequest__Entry *ents = pt_arena_alloc(a, n * sizeof(*ents));
    Bigtable__MutateRowsRequest__Entry **eptr = pt_arena_alloc(a, n * sizeof(*eptr));
    Bigtable__Mutation *muts = pt_arena_alloc(a, nm * sizeof(*muts));
    Bigtable__Mutation__SetCell *sets = pt_arena_alloc(a, nm * sizeof(*sets));
    Bigtable__Mutation **mptr = pt_arena_alloc(a, nm * sizeof(*mptr));
    if (!req || !ents || !eptr || !muts || !sets || !mptr)
        return NULL;
    bigtable__mutate_rows_request__init(req);
    req->table_name = bt->table[t];
    req->n_entries = n;
    req->entries = eptr;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const entry *en = &e[idx[i]];
        Bigtable__MutateRowsRequest__Entry *pe = &ents[i];
        protobuf_c_message_init(&bigtable__mutate_rows_request__entry__descriptor, pe);
        pe->row_key = bin(en->m[0]->row);
        pe->n_mutations = en->n;
        pe->mutations = &mptr[k];
        for (size_t j = 0; j < en->n; j++, k++) {
            const pt_mutation *m = en->m[j];
            protobuf_c_message_init(&bigtable__mutation__set_cell__descriptor, &sets[k]);
            sets[k].family_name = family;
            sets[k].column_qualifier = bin(m->qual);
            sets[k].timestamp_micros = m->version_us;
            sets[k].value = bin(m->value);
            protobuf_c_message_init(&bigtable__mutation__descriptor, &muts[k]);
            muts[k].mutation_case = BIGTABLE__MUTATION__MUTATION_SET_CELL;
            muts[k].set_cell = &sets[k];
            mptr[k] = &muts[k];
        }
        eptr[i] = pe;
    }
    return req;
}

/* One MutateRows call for e[idx[0..n)]: sets each entry's st (and done when applied).
 * Returns PT_ENOMEM or 0; outcomes are in the entries. */
static int mutate_once(bigtable *bt, int t, entry *e, const size_t *idx, size_t n, pt_arena *a)
{
    Bigtable__MutateRowsRequest *req = build_mutate(bt, t, e, idx, n, a);
    if (!req)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        e[idx[i]].st = GRPC_STATUS_UNKNOWN; /* not reported yet */
    rpc r;
    rpc_start(&r, bt->data, M_MUTATE_ROWS, bt->params[t], &req->base, bt->write_ms);
    pt_arena_reset(a); /* the request is packed and sent; reuse the memory for answers */
    int rv = 0;
    for (;;) {
        ProtobufCMessage *msg;
        int got = rpc_recv(&r, a, &bigtable__mutate_rows_response__descriptor, &msg);
        if (got <= 0) {
            if (got < 0)
                rv = got == PT_ENOMEM ? PT_ENOMEM : 0; /* malformed: entries stay unknown */
            break;
        }
        const Bigtable__MutateRowsResponse *resp = (const Bigtable__MutateRowsResponse *)msg;
        for (size_t i = 0; i < resp->n_entries; i++) {
            const Bigtable__MutateRowsResponse__Entry *re = resp->entries[i];
            if (re->index < 0 || (uint64_t)re->index >= n)
                continue; /* not ours: ignore rather than trust */
            entry *en = &e[idx[re->index]];
            en->st = re->status ? (grpc_status_code)re->status->code : GRPC_STATUS_OK;
            en->done = en->st == GRPC_STATUS_OK;
        }
        pt_arena_reset(a);
    }
    char details[256];
    grpc_status_code st = rpc_finish(&r, details, sizeof(details));
    for (size_t i = 0; i < n; i++) {
        entry *en = &e[idx[i]];
        if (en->st != GRPC_STATUS_UNKNOWN)
            continue;
        /* Never reported: the call's status decides; an OK stream that forgot an entry
         * is treated as a transient failure (the write is idempotent). */
        en->st = st != GRPC_STATUS_OK ? st : GRPC_STATUS_UNAVAILABLE;
    }
    if (st != GRPC_STATUS_OK && !retryable(st))
        log_failure("MutateRows", bt->table[t], st, details);
    return rv;
}

/* Sends e[0..n) (one request's worth) until applied, a fatal failure, or the budget. */
static int mutate(bigtable *bt, int t, entry *e, size_t n, retry *rt, pt_arena *a)
{
    size_t *idx = malloc(n * sizeof(*idx));
    if (!idx)
        return PT_ENOMEM;
    size_t np = n;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    int rv;
    for (;;) {
        if ((rv = mutate_once(bt, t, e, idx, np, a)) != 0)
            break;
        size_t keep = 0;
        grpc_status_code last = GRPC_STATUS_OK; /* the latest retryable code */
        for (size_t i = 0; i < np; i++) {
            entry *en = &e[idx[i]];
            if (en->done)
                continue;
            if (!retryable(en->st)) {
                rv = status_error(en->st) ? status_error(en->st) : PT_EIO;
                if (en->st != GRPC_STATUS_UNKNOWN)
                    pt_log(PT_LOG_WARN, "bigtable mutation rejected", "table=%s code=%s",
                           bt->table[t], status_name(en->st));
                goto out;
            }
            last = en->st;
            idx[keep++] = idx[i];
        }
        np = keep;
        if (np == 0)
            break;
        if (!retry_wait(rt)) {
            rv = status_error(last);
            pt_log(PT_LOG_WARN, "bigtable write gave up", "table=%s entries=%zu code=%s",
                   bt->table[t], np, status_name(last));
            break;
        }
        atomic_fetch_add(&bt->write_retries, 1);
    }
out:
    free(idx);
    return rv;
}

/* Writes the mutations v[0..n) of table t, sorted by row, in requests of bounded size. */
static int write_table(bigtable *bt, int t, const pt_mutation *const *v, size_t n, retry *rt)
{
    entry *e = calloc(n, sizeof(*e)); /* at most one entry per mutation */
    if (!e)
        return PT_ENOMEM;
    size_t ne = 0;
    for (size_t i = 0; i < n; ne++) {
        size_t j = i, bytes = v[i]->row.n + ENTRY_OVERHEAD;
        while (j < n && j - i < MAX_REQ_MUTATIONS && pt_slice_eq(v[j]->row, v[i]->row)) {
            bytes += v[j]->qual.n + v[j]->value.n + ENTRY_OVERHEAD;
            j++;
        }
        e[ne] = (entry){.m = v + i, .n = j - i, .bytes = bytes};
        i = j;
    }

    pt_arena a;
    pt_arena_init(&a, 64 << 10, 0);
    int rv = 0;
    for (size_t i = 0; i < ne && rv == 0;) {
        /* One request: as many entries as fit both limits (at least one). */
        size_t j = i, muts = 0, bytes = 0;
        while (j < ne && (j == i || (muts + e[j].n <= MAX_REQ_MUTATIONS &&
                                     bytes + e[j].bytes <= MAX_REQ_BYTES))) {
            muts += e[j].n;
            bytes += e[j].bytes;
            j++;
        }
        rv = mutate(bt, t, e + i, j - i, rt, &a);
        pt_arena_reset(&a);
        i = j;
    }
    pt_arena_free(&a);
    free(e);
    return rv;
}

static int bt_write(void *state, const pt_mutation *m, size_t n)
{
    bigtable *bt = state;
    /* Validate everything first so that a bad batch changes nothing. */
    for (size_t i = 0; i < n; i++) {
        if (!valid_mutation(&m[i])) {
            char q[96];
            size_t shown = m[i].row.n < 40 ? m[i].row.n : 40;
            pt_log(PT_LOG_WARN, "bigtable rejects a mutation",
                   "table=%u row_bytes=%zu row=%s version_us=%" PRId64, m[i].table, m[i].row.n,
                   pt_log_quote(q, sizeof(q), (const char *)m[i].row.p, shown), m[i].version_us);
            return m[i].table < PT_TABLE_COUNT ? PT_EBADREQ : PT_EINTERNAL;
        }
    }
    if (n == 0)
        return 0;
    const pt_mutation **v = malloc(n * sizeof(*v));
    if (!v)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        v[i] = &m[i];
    qsort(v, n, sizeof(*v), cmp_mutation);

    retry rt;
    retry_init(&rt, bt->data, bt->retry_ms);
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0;) {
        size_t j = i;
        while (j < n && v[j]->table == v[i]->table)
            j++;
        rv = write_table(bt, v[i]->table, v + i, j - i, &rt);
        i = j;
    }
    free(v);
    return rv;
}

/* ============================================================================
 * scan: ReadRows, merged, resumed after the last delivered row
 * ========================================================================== */

static int range_empty(const pt_row_range *r)
{
    return r->end.n > 0 && pt_slice_cmp(r->end, r->start) <= 0;
}

/* True when no row key k with last < k < end exists: end <= last, or end == last||0x00. */
static int range_done(pt_slice end, pt_slice last)
{
    if (end.n == 0)
        return 0;
    if (pt_slice_cmp(end, last) <= 0)
        return 1;
    return end.n == last.n + 1 && end.p[last.n] == 0 && memcmp(end.p, last.p, last.n) == 0;
}

size_t pt_bt_clip_ranges(const pt_row_range *in, size_t n, const pt_slice *last, pt_bt_range *out)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (range_empty(&in[i]))
            continue;
        pt_bt_range r = {.start = in[i].start, .start_open = 0, .end = in[i].end};
        if (last) {
            if (range_done(in[i].end, *last))
                continue;
            if (pt_slice_cmp(in[i].start, *last) <= 0) {
                r.start = *last;
                r.start_open = 1;
            }
        }
        out[k++] = r;
    }
    return k;
}

static Bigtable__RowFilter *new_filter(pt_arena *a)
{
    Bigtable__RowFilter *f = pt_arena_alloc(a, sizeof(*f));
    if (f)
        protobuf_c_message_init(&bigtable__row_filter__descriptor, f);
    return f;
}

/* chain(family "p", [qualifiers in [qs, qe)], latest cell per column). The emulator
 * wants at least two filters in a chain, which this always has. */
static Bigtable__RowFilter *build_filter(const pt_scan *s, pt_arena *a)
{
    Bigtable__RowFilter *chain = new_filter(a), *fam = new_filter(a), *lim = new_filter(a);
    Bigtable__RowFilter__Chain *c = pt_arena_alloc(a, sizeof(*c));
    Bigtable__RowFilter **list = pt_arena_alloc(a, 3 * sizeof(*list));
    if (!chain || !fam || !lim || !c || !list)
        return NULL;
    protobuf_c_message_init(&bigtable__row_filter__chain__descriptor, c);
    size_t n = 0;
    fam->filter_case = BIGTABLE__ROW_FILTER__FILTER_FAMILY_NAME_REGEX_FILTER;
    fam->family_name_regex_filter = family;
    list[n++] = fam;
    if (s->qual_start.n || s->qual_end.n) {
        Bigtable__RowFilter *col = new_filter(a);
        Bigtable__ColumnRange *cr = pt_arena_alloc(a, sizeof(*cr));
        if (!col || !cr)
            return NULL;
        protobuf_c_message_init(&bigtable__column_range__descriptor, cr);
        cr->family_name = family;
        if (s->qual_start.n) {
            cr->start_qualifier_case =
                BIGTABLE__COLUMN_RANGE__START_QUALIFIER_START_QUALIFIER_CLOSED;
            cr->start_qualifier_closed = bin(s->qual_start);
        }
        if (s->qual_end.n) {
            cr->end_qualifier_case = BIGTABLE__COLUMN_RANGE__END_QUALIFIER_END_QUALIFIER_OPEN;
            cr->end_qualifier_open = bin(s->qual_end);
        }
        col->filter_case = BIGTABLE__ROW_FILTER__FILTER_COLUMN_RANGE_FILTER;
        col->column_range_filter = cr;
        list[n++] = col;
    }
    lim->filter_case = BIGTABLE__ROW_FILTER__FILTER_CELLS_PER_COLUMN_LIMIT_FILTER;
    lim->cells_per_column_limit_filter = 1;
    list[n++] = lim;
    c->n_filters = n;
    c->filters = list;
    chain->filter_case = BIGTABLE__ROW_FILTER__FILTER_CHAIN;
    chain->chain = c;
    return chain;
}

/* The request for ranges r[0..n) (n > 0: an empty row set would read the whole table). */
static Bigtable__ReadRowsRequest *build_read(bigtable *bt, const pt_scan *s, const pt_bt_range *r,
                                             size_t n, int64_t rows_limit, pt_arena *a)
{
    Bigtable__ReadRowsRequest *req = pt_arena_alloc(a, sizeof(*req));
    Bigtable__RowSet *set = pt_arena_alloc(a, sizeof(*set));
    Bigtable__RowRange *rr = pt_arena_alloc(a, n * sizeof(*rr));
    Bigtable__RowRange **rp = pt_arena_alloc(a, n * sizeof(*rp));
    if (!req || !set || !rr || !rp)
        return NULL;
    bigtable__read_rows_request__init(req);
    protobuf_c_message_init(&bigtable__row_set__descriptor, set);
    for (size_t i = 0; i < n; i++) {
        protobuf_c_message_init(&bigtable__row_range__descriptor, &rr[i]);
        if (r[i].start_open) {
            rr[i].start_key_case = BIGTABLE__ROW_RANGE__START_KEY_START_KEY_OPEN;
            rr[i].start_key_open = bin(r[i].start);
        } else if (r[i].start.n) {
            rr[i].start_key_case = BIGTABLE__ROW_RANGE__START_KEY_START_KEY_CLOSED;
            rr[i].start_key_closed = bin(r[i].start);
        }
        if (r[i].end.n) {
            rr[i].end_key_case = BIGTABLE__ROW_RANGE__END_KEY_END_KEY_OPEN;
            rr[i].end_key_open = bin(r[i].end);
        }
        rp[i] = &rr[i];
    }
    set->n_row_ranges = n;
    set->row_ranges = rp;
    req->table_name = bt->table[s->table];
    req->rows = set;
    req->rows_limit = rows_limit;
    if (!(req->filter = build_filter(s, a)))
        return NULL;
    return req;
}

typedef struct scanner {
    pt_cell_fn fn;
    void *ud;
    size_t row_limit;
    size_t rows; /* rows delivered */
} scanner;

static int deliver_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    scanner *sc = ud;
    pt_slice prev = {0};
    size_t delivered = 0;
    for (size_t i = 0; i < n; i++) {
        /* The filter lets only family "p", newest version first, through; these checks
         * keep the callback's contract even if a server ignored part of it. */
        if (!pt_slice_eq(cells[i].family, PT_SLICE_LIT("p")))
            continue;
        if (delivered && pt_slice_eq(cells[i].qualifier, prev))
            continue;
        prev = cells[i].qualifier;
        delivered++;
        int rv = sc->fn(sc->ud, key, cells[i].qualifier, cells[i].value);
        if (rv != 0)
            return rv;
    }
    if (delivered && ++sc->rows == sc->row_limit)
        return 1;
    return 0;
}

static int bt_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    bigtable *bt = state;
    if ((unsigned)s->table >= PT_TABLE_COUNT)
        return PT_EINTERNAL;
    if (s->qual_start.n && s->qual_end.n && pt_slice_cmp(s->qual_start, s->qual_end) >= 0)
        return 0;
    if (s->nranges == 0)
        return 0;
    pt_bt_range *ranges = malloc(s->nranges * sizeof(*ranges));
    if (!ranges)
        return PT_ENOMEM;

    scanner sc = {.fn = fn, .ud = ud, .row_limit = s->row_limit};
    pt_bt_merger m;
    pt_bt_merger_init(&m, deliver_row, &sc, MAX_ROW_BYTES);
    pt_arena a;
    pt_arena_init(&a, 64 << 10, 0);
    retry rt;
    retry_init(&rt, bt->data, bt->retry_ms);
    int rv = 0;
    for (;;) {
        pt_slice last = {m.last, m.last_n};
        size_t n = pt_bt_clip_ranges(s->ranges, s->nranges, m.have_last ? &last : NULL, ranges);
        if (n == 0)
            break; /* everything delivered; never send an empty row set */
        int64_t limit = s->row_limit ? (int64_t)(s->row_limit - sc.rows) : 0;
        Bigtable__ReadRowsRequest *req = build_read(bt, s, ranges, n, limit, &a);
        if (!req) {
            rv = PT_ENOMEM;
            break;
        }
        size_t rows_before = m.rows;
        rpc r;
        m.err[0] = '\0';
        rpc_start(&r, bt->data, M_READ_ROWS, bt->params[s->table], &req->base, bt->read_ms);
        pt_arena_reset(&a);
        ProtobufCMessage *msg;
        int got;
        while ((got = rpc_recv(&r, &a, &bigtable__read_rows_response__descriptor, &msg)) == 1) {
            rv = pt_bt_merger_response(&m, (const Bigtable__ReadRowsResponse *)msg);
            pt_arena_reset(&a);
            if (rv != 0) {
                rpc_cancel(&r);
                break;
            }
        }
        char details[256];
        grpc_status_code st = rpc_finish(&r, details, sizeof(details));
        if (got < 0 && rv == 0) {
            rv = got;
            snprintf(m.err, sizeof(m.err), "a ReadRowsResponse does not parse");
        }
        if (rv == 1) {
            rv = 0; /* the callback (or the row limit) stopped the scan */
            break;
        }
        if (rv == 0 && st == GRPC_STATUS_OK)
            rv = pt_bt_merger_end(&m);
        if (rv != 0 || st == GRPC_STATUS_OK) {
            if (m.err[0]) /* the merger's own failure, not the callback's code */
                log_failure("ReadRows", bt->table[s->table], GRPC_STATUS_INTERNAL, m.err);
            break;
        }
        /* A broken stream: resume after the last row delivered. Progress renews the
         * budget, so a long scan survives several breaks but a dead server does not. */
        pt_bt_merger_abandon(&m);
        if (m.rows > rows_before)
            retry_init(&rt, bt->data, bt->retry_ms);
        if (!retryable(st) || !retry_wait(&rt)) {
            rv = status_error(st);
            log_failure("ReadRows", bt->table[s->table], st, details);
            break;
        }
        atomic_fetch_add(&bt->scan_resumes, 1);
    }
    pt_arena_free(&a);
    pt_bt_merger_free(&m);
    free(ranges);
    return rv;
}

#define C(field) offsetof(pt_bigtable_conf, field)
static const pt_conf_key conf_keys[] = {
    {"project", NULL, PT_CONF_STR, "", 0, 0, C(project), "Bigtable project ID."},
    {"instance", NULL, PT_CONF_STR, "", 0, 0, C(instance), "Bigtable instance ID."},
    {"endpoint", NULL, PT_CONF_STR, "", 0, 0, C(endpoint),
     "Emulator host:port (plaintext); empty = $BIGTABLE_EMULATOR_HOST, else Cloud Bigtable "
     "with application default credentials."},
    {"table_prefix", "storage.table_prefix", PT_CONF_STR, "", 0, 0, C(table_prefix),
     "Tables are <prefix>points and <prefix>index."},
};
#undef C

const pt_backend_ops pt_backend_bigtable = {
    .name = "bigtable",
    .caps = PT_BACKEND_CAP_ADMIN,
    .state_size = sizeof(bigtable),
    .conf = conf_keys,
    .nconf = sizeof(conf_keys) / sizeof(conf_keys[0]),
    .conf_size = sizeof(pt_bigtable_conf),
    .open = bt_open,
    .close = bt_close,
    .write = bt_write,
    .scan = bt_scan,
    .init = bt_init,
};
