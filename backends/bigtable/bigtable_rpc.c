/*
 * gRPC for the Bigtable backend: channels, one call at a time per completion queue,
 * deadlines, status codes, and the retry budget. Contracts in bigtable_int.h.
 *
 * Every call carries a deadline, and every wait on a queue is bounded too, so a worker
 * thread is never held by a peer that stopped answering.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc_security.h>
#include <grpc/slice.h>
#include <grpc/support/time.h>

#include "bigtable_int.h"
#include "error.h"
#include "log.h"
#include "pb_alloc.h"

#define DATA_HOST "bigtable.googleapis.com:443"
#define ADMIN_HOST "bigtableadmin.googleapis.com:443"

enum { BACKOFF_FIRST_MS = 20, BACKOFF_MAX_MS = 1000 };

/* ============================================================================
 * Channels
 * ========================================================================== */

int pt_bt_rpc_connect(pt_bt *bt, const char *endpoint, char *err, size_t errlen)
{
    grpc_init();
    bt->grpc_ready = 1;
    grpc_arg args[] = {
        {.type = GRPC_ARG_INTEGER,
         .key = GRPC_ARG_MAX_RECEIVE_MESSAGE_LENGTH,
         .value.integer = PT_BT_MAX_MESSAGE},
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
            return PT_EINTERNAL;
        }
        bt->data = grpc_channel_create(DATA_HOST, creds, &cargs);
        bt->admin = grpc_channel_create(ADMIN_HOST, creds, &cargs);
    }
    grpc_channel_credentials_release(creds);
    if (!bt->data || !bt->admin) {
        snprintf(err, errlen, "bigtable: cannot create a channel to %s",
                 endpoint ? endpoint : DATA_HOST);
        return PT_EUNAVAIL;
    }
    return 0;
}

void pt_bt_rpc_disconnect(pt_bt *bt)
{
    if (bt->admin && bt->admin != bt->data)
        grpc_channel_destroy(bt->admin);
    if (bt->data)
        grpc_channel_destroy(bt->data);
    bt->admin = bt->data = NULL;
    /* gRPC counts grpc_init calls; the last close tears the library down. */
    if (bt->grpc_ready)
        grpc_shutdown();
    bt->grpc_ready = 0;
}

char *pt_bt_rpc_params(const char *field, const char *value)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t fn = strlen(field), n = strlen(value);
    char *out = malloc(fn + 1 + 3 * n + 1), *o;
    if (!out)
        return NULL;
    memcpy(out, field, fn);
    o = out + fn;
    *o++ = '=';
    /* RFC 3986 unreserved bytes stay as they are. */
    for (const unsigned char *p = (const unsigned char *)value; *p; p++) {
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

/* ============================================================================
 * Status codes
 * ========================================================================== */

int pt_bt_rpc_retryable(grpc_status_code s)
{
    return s == GRPC_STATUS_UNAVAILABLE || s == GRPC_STATUS_DEADLINE_EXCEEDED ||
           s == GRPC_STATUS_ABORTED || s == GRPC_STATUS_RESOURCE_EXHAUSTED;
}

int pt_bt_rpc_error(grpc_status_code s)
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

const char *pt_bt_rpc_status_name(grpc_status_code s)
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

void pt_bt_rpc_log_failure(const char *what, const char *table, grpc_status_code st,
                           const char *details)
{
    char q[512];
    pt_log(PT_LOG_WARN, "bigtable call failed", "call=%s table=%s code=%s details=%s", what, table,
           pt_bt_rpc_status_name(st), pt_log_quote(q, sizeof(q), details, strlen(details)));
}

/* ============================================================================
 * Calls
 * ========================================================================== */

/* The batches of a call; a pluck queue finds each by its tag. Every batch started is
 * collected before the queue is closed (gRPC asserts that none is left behind). */
#define TAG_START ((void *)1)
#define TAG_RECV ((void *)2)
#define TAG_STATUS ((void *)3)

/* Shuts a completion queue down, drains it and destroys it. */
static void cq_close(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_REALTIME), NULL).type !=
           GRPC_QUEUE_SHUTDOWN)
        ;
    grpc_completion_queue_destroy(cq);
}

/* Waits for the batch tagged tag. gRPC ends a call at its deadline by itself; the wait
 * has its own limit a little later so that a stuck call cannot hold the thread: then the
 * call is cancelled, which completes every pending batch. */
static int rpc_wait(pt_bt_rpc *r, void *tag)
{
    gpr_timespec limit = gpr_time_add(r->deadline, gpr_time_from_seconds(5, GPR_TIMESPAN));
    grpc_event ev = grpc_completion_queue_pluck(r->cq, tag, limit, NULL);
    if (ev.type == GRPC_QUEUE_TIMEOUT) {
        grpc_call_cancel(r->call, NULL);
        ev = grpc_completion_queue_pluck(r->cq, tag, gpr_inf_future(GPR_CLOCK_REALTIME), NULL);
    }
    return ev.type == GRPC_OP_COMPLETE && ev.success;
}

static int rpc_batch(pt_bt_rpc *r, const grpc_op *ops, size_t n, void *tag)
{
    if (grpc_call_start_batch(r->call, ops, n, tag, NULL) != GRPC_CALL_OK)
        return 0;
    return rpc_wait(r, tag);
}

size_t pt_bt_rpc_start(pt_bt_rpc *r, grpc_channel *ch, const char *method, const char *params,
                       const ProtobufCMessage *req, int deadline_ms)
{
    return pt_bt_rpc_start_flagged(r, ch, method, params, NULL, req, deadline_ms);
}

size_t pt_bt_rpc_start_flagged(pt_bt_rpc *r, grpc_channel *ch, const char *method,
                               const char *params, const char *features,
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
        return 0;
    }

    size_t n = protobuf_c_message_get_packed_size(req);
    grpc_slice s = grpc_slice_malloc(n);
    protobuf_c_message_pack(req, GRPC_SLICE_START_PTR(s));
    r->sending = grpc_raw_byte_buffer_create(&s, 1);
    grpc_slice_unref(s);

    /* The routing header: Bigtable sends each call to the right backend by it. */
    r->md_out[0] = (grpc_metadata){.key = grpc_slice_from_static_string("x-goog-request-params"),
                                   .value = grpc_slice_from_static_string(params)};
    /* What the client supports (FeatureFlags), for the calls that opt in to something. */
    if (features)
        r->md_out[1] = (grpc_metadata){.key = grpc_slice_from_static_string("bigtable-features"),
                                       .value = grpc_slice_from_static_string(features)};
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[0].data.send_initial_metadata.count = features ? 2 : 1;
    ops[0].data.send_initial_metadata.metadata = r->md_out;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = r->sending;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &r->md_in;
    /* Not waited for here, so that a caller can have several calls under way; the first
     * recv or the finish collects it. */
    if (grpc_call_start_batch(r->call, ops, 4, TAG_START, NULL) == GRPC_CALL_OK)
        r->starting = 1;
    else
        r->ended = 1;
    return n;
}

/* Collects the start batch when it is still out; the request buffer is the caller's
 * until then. 0 when the call could not be started. */
static int settle_start(pt_bt_rpc *r)
{
    int ok = 1;
    if (r->starting) {
        ok = rpc_wait(r, TAG_START);
        r->starting = 0;
    }
    if (r->sending) {
        grpc_byte_buffer_destroy(r->sending);
        r->sending = NULL;
    }
    if (!ok)
        r->ended = 1;
    return ok;
}

int pt_bt_rpc_recv(pt_bt_rpc *r, pt_arena *a, const ProtobufCMessageDescriptor *desc,
                   ProtobufCMessage **out)
{
    if (r->ended || !settle_start(r))
        return 0;
    grpc_byte_buffer *bb = NULL;
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &bb;
    if (!rpc_batch(r, &op, 1, TAG_RECV) || !bb) {
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

void pt_bt_rpc_cancel(pt_bt_rpc *r)
{
    if (r->call)
        grpc_call_cancel(r->call, NULL);
    r->ended = 1;
}

grpc_status_code pt_bt_rpc_finish(pt_bt_rpc *r, char *details, size_t dlen)
{
    grpc_status_code status = GRPC_STATUS_UNAVAILABLE;
    if (dlen)
        details[0] = '\0';
    if (r->call) {
        settle_start(r);
        grpc_metadata_array trailing;
        grpc_metadata_array_init(&trailing);
        grpc_slice msg = grpc_empty_slice();
        grpc_op op;
        memset(&op, 0, sizeof(op));
        op.op = GRPC_OP_RECV_STATUS_ON_CLIENT;
        op.data.recv_status_on_client.trailing_metadata = &trailing;
        op.data.recv_status_on_client.status = &status;
        op.data.recv_status_on_client.status_details = &msg;
        if (!rpc_batch(r, &op, 1, TAG_STATUS)) {
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

grpc_status_code pt_bt_rpc_unary(grpc_channel *ch, const char *method, const char *params,
                                 const ProtobufCMessage *req, int deadline_ms, pt_arena *a,
                                 const ProtobufCMessageDescriptor *desc, ProtobufCMessage **out,
                                 char *details, size_t dlen)
{
    pt_bt_rpc r;
    *out = NULL;
    pt_bt_rpc_start(&r, ch, method, params, req, deadline_ms);
    int got = pt_bt_rpc_recv(&r, a, desc, out);
    if (got == 1) {
        /* A unary call ends here; drain to the status. */
        ProtobufCMessage *extra = NULL;
        if (pt_bt_rpc_recv(&r, a, desc, &extra) != 0)
            pt_bt_rpc_cancel(&r);
    }
    grpc_status_code st = pt_bt_rpc_finish(&r, details, dlen);
    if (st == GRPC_STATUS_OK && got != 1) {
        snprintf(details, dlen, "malformed or missing response");
        st = GRPC_STATUS_INTERNAL;
    }
    return st;
}

grpc_status_code pt_bt_rpc_unary_retried(pt_bt *bt, grpc_channel *ch, const char *method,
                                         const char *params, const ProtobufCMessage *req,
                                         pt_arena *a, const ProtobufCMessageDescriptor *desc,
                                         ProtobufCMessage **out, char *details, size_t dlen)
{
    grpc_status_code st;
    pt_bt_retry rt;
    pt_bt_retry_init(&rt, ch, bt->retry_ms);
    do {
        st = pt_bt_rpc_unary(ch, method, params, req, bt->write_ms, a, desc, out, details, dlen);
    } while (pt_bt_rpc_retryable(st) && pt_bt_retry_wait(&rt));
    return st;
}

/* ============================================================================
 * Retries
 * ========================================================================== */

void pt_bt_retry_init(pt_bt_retry *r, grpc_channel *ch, int budget_ms)
{
    r->ch = ch;
    r->start = pt_mono_ms();
    r->budget_ms = budget_ms;
    r->delay_ms = BACKOFF_FIRST_MS;
}

/* The wait lasts between half and all of the current delay: jitter keeps the workers of
 * one daemon from retrying in lockstep.
 *
 * It watches the channel's state on a completion queue rather than sleeping: gRPC's I/O
 * is driven by threads waiting on a queue, and after a failure the channel reports
 * TRANSIENT_FAILURE (failing calls at once) until a reconnection completes, which nobody
 * would notice for seconds (gRPC's backup poller) if every thread slept. */
int pt_bt_retry_wait(pt_bt_retry *r)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int half = r->delay_ms / 2;
    int d = half + (int)((unsigned long)ts.tv_nsec % (unsigned long)(half + 1));
    if (pt_mono_ms() + d - r->start > r->budget_ms)
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
