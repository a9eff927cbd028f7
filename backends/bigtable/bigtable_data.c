/*
 * The Bigtable backend's data path (google.bigtable.v2.Bigtable): write is MutateRows,
 * scan is ReadRows through the chunk merger. Contracts in backend.h and bigtable_int.h.
 *
 * A pt_mutation is one SetCell; its version is the cell timestamp, which the write path
 * always makes a multiple of 1000 µs as Bigtable's default MILLIS granularity requires.
 * Except: the points table's sample cells (pt_bt_chunkable) of one row in one write go
 * into chunk cells (bigtable_chunk.c), and a points scan merges them back into the cells
 * they hold, so callers still see one cell per sample. Compaction (bigtable_compact.c)
 * adds deletes to MutateRows (pt_bt_data_mutate) and reads rows raw (pt_bt_data_read_raw).
 *
 * Failures: per-entry MutateRows failures and broken ReadRows streams with a retryable
 * code are retried with jittered exponential backoff inside a time budget, then reported
 * as PT_EUNAVAIL / PT_ETIMEOUT / PT_EBUSY so the client retries. A read resumes after the
 * last row it delivered, so no row reaches the callback twice.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bigtable_int.h"
#include "bytes.h"
#include "error.h"
#include "log.h"

#define M_READ_ROWS "/google.bigtable.v2.Bigtable/ReadRows"
#define M_MUTATE_ROWS "/google.bigtable.v2.Bigtable/MutateRows"

enum {
    MAX_REQ_MUTATIONS = 100000,                    /* per MutateRows request, all entries */
    MAX_REQ_BYTES = 32 << 20,                      /* well under the 256 MiB request cap */
    MAX_ROW_BYTES = PT_BT_MAX_MESSAGE + (1 << 20), /* one merged row, across responses */
    ENTRY_OVERHEAD = 16,   /* tags and lengths around one SetCell, roughly */
    MIN_GROUP_RANGES = 32, /* ranges a scan needs per stream before it fans out */
};

static char family[] = PT_BT_FAMILY; /* protobuf-c wants a char *; never written */

static ProtobufCBinaryData bin(pt_slice s)
{
    return (ProtobufCBinaryData){s.n, (uint8_t *)(uintptr_t)(s.n ? s.p : (const uint8_t *)"")};
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

static int valid_mutation(const pt_mutation *m)
{
    return m->table < PT_TABLE_COUNT && m->row.n > 0 && m->row.n <= PT_BT_MAX_ROW_KEY &&
           memchr(m->row.p, 0, m->row.n) == NULL && m->version_us >= 0 && m->version_us % 1000 == 0;
}

/* A delete (pt_bt_is_delete) as a DeleteFromColumn of the versions below -version_us, into
 * mu; NULL when a is out of memory. */
static Bigtable__Mutation *put_delete(Bigtable__Mutation *mu, const pt_mutation *m, pt_arena *a)
{
    Bigtable__Mutation__DeleteFromColumn *d = pt_arena_alloc(a, sizeof(*d));
    Bigtable__TimestampRange *tr = pt_arena_alloc(a, sizeof(*tr));
    if (!d || !tr)
        return NULL;
    protobuf_c_message_init(&bigtable__timestamp_range__descriptor, tr);
    tr->end_timestamp_micros = -m->version_us;
    protobuf_c_message_init(&bigtable__mutation__delete_from_column__descriptor, d);
    d->family_name = family;
    d->column_qualifier = bin(m->qual);
    d->time_range = tr;
    mu->mutation_case = BIGTABLE__MUTATION__MUTATION_DELETE_FROM_COLUMN;
    mu->delete_from_column = d;
    return mu;
}

/* The MutateRows request for the entries e[idx[0..n)], built in a. */
static Bigtable__MutateRowsRequest *build_mutate(const pt_bt *bt, int t, const entry *e,
                                                 const size_t *idx, size_t n, pt_arena *a)
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
            protobuf_c_message_init(&bigtable__mutation__descriptor, &muts[k]);
            mptr[k] = &muts[k];
            if (pt_bt_is_delete(m)) {
                if (!put_delete(&muts[k], m, a))
                    return NULL;
                continue;
            }
            protobuf_c_message_init(&bigtable__mutation__set_cell__descriptor, &sets[k]);
            sets[k].family_name = family;
            sets[k].column_qualifier = bin(m->qual);
            sets[k].timestamp_micros = m->version_us;
            sets[k].value = bin(m->value);
            muts[k].mutation_case = BIGTABLE__MUTATION__MUTATION_SET_CELL;
            muts[k].set_cell = &sets[k];
        }
        eptr[i] = pe;
    }
    return req;
}

/* Waits until Bigtable's flow control (bigtable_flow.c) lets rows entries go: at most
 * FLOW_MAX_WAIT_MS, and never past the write's retry budget, so a throttled write holds
 * its worker and its memory only briefly. PT_EBUSY (503 with Retry-After: the client
 * comes back later) when that is not long enough. */
enum { FLOW_MAX_WAIT_MS = 1000 };

static int flow_wait(pt_bt *bt, const pt_bt_retry *rt, size_t rows)
{
    int64_t left_ms = rt->start + rt->budget_ms - pt_mono_ms();
    int64_t bound_ms = left_ms < FLOW_MAX_WAIT_MS ? left_ms : FLOW_MAX_WAIT_MS;
    int64_t wait;
    int rv = pt_bt_flow_acquire(&bt->flow, rows, (int64_t)pt_now_ns(),
                                (bound_ms > 0 ? bound_ms : 0) * 1000000, &wait);
    if (rv == 0 && wait > 0) {
        struct timespec ts = {.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
        while (nanosleep(&ts, &ts) != 0)
            ; /* interrupted by a signal: sleep the rest */
    }
    return rv;
}

/* One MutateRows call for e[idx[0..n)]: sets each entry's st (and done when applied).
 * Returns PT_ENOMEM or 0; outcomes are in the entries. */
static int mutate_once(pt_bt *bt, int t, entry *e, const size_t *idx, size_t n, pt_arena *a)
{
    Bigtable__MutateRowsRequest *req = build_mutate(bt, t, e, idx, n, a);
    if (!req)
        return PT_ENOMEM;
    for (size_t i = 0; i < n; i++)
        e[idx[i]].st = GRPC_STATUS_UNKNOWN; /* not reported yet */
    pt_bt_rpc r;
    size_t sent = pt_bt_rpc_start_flagged(&r, bt->data, M_MUTATE_ROWS, bt->params[t],
                                          PT_BT_FEATURES_RATE_LIMIT, &req->base, bt->write_ms);
    atomic_fetch_add_explicit(&bt->write_bytes[t], sent, memory_order_relaxed);
    pt_arena_reset(a); /* the request is packed and sent; reuse the memory for answers */
    int rv = 0;
    for (;;) {
        ProtobufCMessage *msg;
        int got = pt_bt_rpc_recv(&r, a, &bigtable__mutate_rows_response__descriptor, &msg);
        if (got <= 0) {
            if (got < 0)
                rv = got == PT_ENOMEM ? PT_ENOMEM : 0; /* malformed: entries stay unknown */
            break;
        }
        const Bigtable__MutateRowsResponse *resp = (const Bigtable__MutateRowsResponse *)msg;
        pt_bt_flow_response(&bt->flow, resp, (int64_t)pt_now_ns());
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
    grpc_status_code st = pt_bt_rpc_finish(&r, details, sizeof(details));
    for (size_t i = 0; i < n; i++) {
        entry *en = &e[idx[i]];
        if (en->st != GRPC_STATUS_UNKNOWN)
            continue;
        /* Never reported: the call's status decides; an OK stream that forgot an entry
         * is treated as a transient failure (the write is idempotent). */
        en->st = st != GRPC_STATUS_OK ? st : GRPC_STATUS_UNAVAILABLE;
    }
    if (st != GRPC_STATUS_OK && !pt_bt_rpc_retryable(st))
        pt_bt_rpc_log_failure("MutateRows", bt->table[t], st, details);
    return rv;
}

/* Sends e[0..n) (one request's worth) until applied, a fatal failure, or the budget. */
static int mutate(pt_bt *bt, int t, entry *e, size_t n, pt_bt_retry *rt, pt_arena *a)
{
    size_t *idx = malloc(n * sizeof(*idx));
    if (!idx)
        return PT_ENOMEM;
    size_t np = n;
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    int rv;
    for (int sent = 0;; sent = 1) {
        if ((rv = flow_wait(bt, rt, np)) != 0 || (rv = mutate_once(bt, t, e, idx, np, a)) != 0)
            break;
        if (!sent) {
            /* The first request holds every entry; retries are counted apart. */
            size_t cells = 0;
            for (size_t i = 0; i < n; i++)
                for (size_t j = 0; j < e[i].n; j++)
                    cells += !pt_bt_is_delete(e[i].m[j]);
            atomic_fetch_add_explicit(&bt->rows_mutated[t], n, memory_order_relaxed);
            atomic_fetch_add_explicit(&bt->cells_written[t], cells, memory_order_relaxed);
        }
        size_t keep = 0;
        grpc_status_code last = GRPC_STATUS_OK; /* the latest retryable code */
        for (size_t i = 0; i < np; i++) {
            entry *en = &e[idx[i]];
            if (en->done)
                continue;
            if (!pt_bt_rpc_retryable(en->st)) {
                rv = pt_bt_rpc_error(en->st);
                if (en->st != GRPC_STATUS_UNKNOWN)
                    pt_log(PT_LOG_WARN, "bigtable mutation rejected", "table=%s code=%s",
                           bt->table[t], pt_bt_rpc_status_name(en->st));
                goto out;
            }
            last = en->st;
            idx[keep++] = idx[i];
        }
        np = keep;
        if (np == 0)
            break;
        if (!pt_bt_retry_wait(rt)) {
            rv = pt_bt_rpc_error(last);
            pt_log(PT_LOG_WARN, "bigtable write gave up", "table=%s entries=%zu code=%s",
                   bt->table[t], np, pt_bt_rpc_status_name(last));
            break;
        }
        atomic_fetch_add(&bt->write_retries, 1);
    }
out:
    free(idx);
    return rv;
}

/* Writes the mutations v[0..n) of table t, sorted by row, in requests of bounded size. */
static int write_table(pt_bt *bt, int t, const pt_mutation *const *v, size_t n, pt_bt_retry *rt)
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

int pt_bt_data_mutate(pt_bt *bt, int t, const pt_mutation *const *v, size_t n)
{
    pt_bt_retry rt;
    pt_bt_retry_init(&rt, bt->data, bt->retry_ms);
    return n ? write_table(bt, t, v, n, &rt) : 0;
}

/* The writer id of one write call: a per-process clock that never repeats (wall-clock
 * ms, or one past the last value given when that is not behind), and the instance. */
static _Atomic int64_t writer_clock;

static uint64_t next_writer(const pt_bt *bt)
{
    int64_t now = pt_wall_ms(), prev = atomic_load(&writer_clock), next;
    do {
        next = now > prev ? now : prev + 1;
    } while (!atomic_compare_exchange_weak(&writer_clock, &prev, next));
    return pt_bt_writer_id(next, bt->instance);
}

/* The points mutations v[0..n) (sorted by row, then batch position) as they are sent:
 * each row's chunkable cells as its chunk cells, its other cells as they are, into
 * w[0..*nw) (room for n). The chunk cells go to chunks[] (room for n), their memory in
 * ck. tmp has room for n. */
static int chunk_points(pt_bt *bt, const pt_mutation *const *v, size_t n, pt_bt_chunker *ck,
                        pt_mutation *chunks, const pt_mutation **tmp, const pt_mutation **w,
                        size_t *nw)
{
    uint64_t writer = 0;
    size_t nc = 0, k = 0;
    for (size_t i = 0; i < n;) {
        size_t j = i, nt = 0;
        for (; j < n && pt_slice_eq(v[j]->row, v[i]->row); j++) {
            if (pt_bt_chunkable(v[j]))
                tmp[nt++] = v[j];
            else
                w[k++] = v[j];
        }
        if (nt) {
            if (!writer)
                writer = next_writer(bt);
            long made = pt_bt_chunk_row(ck, tmp, nt, writer, chunks + nc);
            if (made < 0)
                return (int)made;
            for (long c = 0; c < made; c++)
                w[k++] = &chunks[nc++];
        }
        i = j;
    }
    *nw = k;
    return 0;
}

/* write_table for the points table: its sample cells in chunk cells. */
static int write_points(pt_bt *bt, const pt_mutation *const *v, size_t n, pt_bt_retry *rt)
{
    pt_bt_chunker ck = {0};
    pt_mutation *chunks = malloc(n * sizeof(*chunks));
    const pt_mutation **tmp = malloc(n * sizeof(*tmp)), **w = malloc(n * sizeof(*w));
    size_t nw = 0;
    int rv = PT_ENOMEM;
    if (chunks && tmp && w && (rv = chunk_points(bt, v, n, &ck, chunks, tmp, w, &nw)) == 0)
        rv = write_table(bt, PT_TABLE_POINTS, w, nw, rt);
    pt_bt_chunker_free(&ck);
    free(w);
    free(tmp);
    free(chunks);
    return rv;
}

int pt_bt_data_write(void *state, const pt_mutation *m, size_t n)
{
    pt_bt *bt = state;
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
    qsort(v, n, sizeof(*v), pt_mutation_ptr_cmp);

    pt_bt_retry rt;
    pt_bt_retry_init(&rt, bt->data, bt->retry_ms);
    int rv = 0;
    for (size_t i = 0; i < n && rv == 0;) {
        size_t j = i;
        while (j < n && v[j]->table == v[i]->table)
            j++;
        if (v[i]->table == PT_TABLE_POINTS)
            rv = write_points(bt, v + i, j - i, &rt);
        else
            rv = write_table(bt, v[i]->table, v + i, j - i, &rt);
        i = j;
    }
    free(v);
    return rv;
}

/* ============================================================================
 * scan: ReadRows on up to read_streams concurrent streams, merged, each resumed after
 * the last row it delivered
 *
 * A scan of many ranges is cut into contiguous groups of ranges, one ReadRows call each,
 * all started together so that the server works on every group at once. The callback
 * must still see cells in (row, qualifier) order, so one group at a time is live: its
 * stream is read and merged and its rows delivered, then the next group's. A waiting
 * stream is not read: its responses stay inside gRPC, which takes in no more than the
 * stream's HTTP/2 flow-control window before the server has to wait, and only while a
 * thread polls (here: while the live stream is awaited). So a scan holds one merged row
 * plus at most (streams - 1) windows, never a whole answer however large. gRPC sizes the
 * window from its bandwidth-delay estimate of the connection, several MiB per waiting
 * stream on a fast link (docs/benchmarks.md, "Bigtable"), which is why read_streams is
 * capped at 16.
 *
 * A scan of one range is cut, when it is wide, at keys SampleRowKeys gave
 * (bigtable_sample.c) into pieces, each a group of its own.
 *
 * Each group has its own merger, so its own resume point, and its own retry budget: a
 * stream that breaks is resumed after the last row of its group that was delivered,
 * which for a group still waiting is none. A waiting stream that broke (or ran into its
 * deadline) is noticed, and resumed, in its turn.
 * ========================================================================== */

static Bigtable__RowFilter *new_filter(pt_arena *a)
{
    Bigtable__RowFilter *f = pt_arena_alloc(a, sizeof(*f));
    if (f)
        protobuf_c_message_init(&bigtable__row_filter__descriptor, f);
    return f;
}

/* A ColumnRange filter of family "p": [start, end), n == 0 unbounded. */
static Bigtable__RowFilter *column_range(pt_slice start, pt_slice end, pt_arena *a)
{
    Bigtable__RowFilter *col = new_filter(a);
    Bigtable__ColumnRange *cr = pt_arena_alloc(a, sizeof(*cr));
    if (!col || !cr)
        return NULL;
    protobuf_c_message_init(&bigtable__column_range__descriptor, cr);
    cr->family_name = family;
    if (start.n) {
        cr->start_qualifier_case = BIGTABLE__COLUMN_RANGE__START_QUALIFIER_START_QUALIFIER_CLOSED;
        cr->start_qualifier_closed = bin(start);
    }
    if (end.n) {
        cr->end_qualifier_case = BIGTABLE__COLUMN_RANGE__END_QUALIFIER_END_QUALIFIER_OPEN;
        cr->end_qualifier_open = bin(end);
    }
    col->filter_case = BIGTABLE__ROW_FILTER__FILTER_COLUMN_RANGE_FILTER;
    col->column_range_filter = cr;
    return col;
}

/* Chain (interleave 0) or Interleave of f[0..n), n >= 2 as the emulator wants; the list
 * is copied into a. */
static Bigtable__RowFilter *combine(int interleave, Bigtable__RowFilter *const *f, size_t n,
                                    pt_arena *a)
{
    Bigtable__RowFilter *r = new_filter(a);
    Bigtable__RowFilter **list = pt_arena_alloc(a, n * sizeof(*list));
    if (!r || !list)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (!f[i])
            return NULL;
        list[i] = f[i];
    }
    if (interleave) {
        Bigtable__RowFilter__Interleave *il = pt_arena_alloc(a, sizeof(*il));
        if (!il)
            return NULL;
        protobuf_c_message_init(&bigtable__row_filter__interleave__descriptor, il);
        il->n_filters = n;
        il->filters = list;
        r->filter_case = BIGTABLE__ROW_FILTER__FILTER_INTERLEAVE;
        r->interleave = il;
    } else {
        Bigtable__RowFilter__Chain *c = pt_arena_alloc(a, sizeof(*c));
        if (!c)
            return NULL;
        protobuf_c_message_init(&bigtable__row_filter__chain__descriptor, c);
        c->n_filters = n;
        c->filters = list;
        r->filter_case = BIGTABLE__ROW_FILTER__FILTER_CHAIN;
        r->chain = c;
    }
    return r;
}

/* A points scan's qualifier filter, or an empty one (pass_all is not needed: NULL with
 * *none set). Single cells and chunk cells that start in [qs, qe) (with qe as an offset
 * bound, which a chunk's longer qualifier cannot pass), and chunk cells that start in
 * [qs - span, qs), which may reach into it: interleave(range [qs, qe), chain(range
 * [qs - span, qs), exactly 16 bytes)). */
static Bigtable__RowFilter *points_columns(const pt_scan *s, int *none, pt_arena *a)
{
    uint64_t lo = pt_bt_qual_floor(s->qual_start);
    uint64_t hi = s->qual_end.n ? pt_bt_qual_floor(s->qual_end) : (uint64_t)1 << 32;
    pt_slice end = {0};
    *none = lo == 0 && hi >> 32;
    if (*none)
        return NULL;
    if (!(hi >> 32)) {
        uint8_t *e = pt_arena_alloc(a, 4);
        if (!e)
            return NULL;
        pt_put_be32(e, (uint32_t)hi);
        end = (pt_slice){e, 4};
    }
    Bigtable__RowFilter *main = column_range(s->qual_start, end, a);
    if (lo == 0)
        return main;
    uint8_t *b = pt_arena_alloc(a, 4);
    Bigtable__RowFilter *len16 = new_filter(a);
    if (!b || !len16)
        return NULL;
    pt_put_be32(b, (uint32_t)(lo > PT_BT_CHUNK_SPAN_MS ? lo - PT_BT_CHUNK_SPAN_MS : 0));
    len16->filter_case = BIGTABLE__ROW_FILTER__FILTER_COLUMN_QUALIFIER_REGEX_FILTER;
    len16->column_qualifier_regex_filter = bin(PT_SLICE_LIT("\\C{16}"));
    Bigtable__RowFilter *before[] = {column_range((pt_slice){b, 4}, s->qual_start, a), len16};
    Bigtable__RowFilter *either[] = {main, combine(0, before, 2, a)};
    return combine(1, either, 2, a);
}

/* chain(family "p", [qualifiers in [qs, qe)], latest cell per column, [values stripped
 * when strip]). The emulator wants at least two filters in a chain, which this always
 * has. */
static Bigtable__RowFilter *build_filter(const pt_scan *s, int strip, pt_arena *a)
{
    Bigtable__RowFilter *f[4];
    size_t n = 0;
    if (!(f[n++] = new_filter(a)))
        return NULL;
    f[0]->filter_case = BIGTABLE__ROW_FILTER__FILTER_FAMILY_NAME_REGEX_FILTER;
    f[0]->family_name_regex_filter = family;
    if (s->table == PT_TABLE_POINTS) {
        int none;
        Bigtable__RowFilter *cols = points_columns(s, &none, a);
        if (!none && !(f[n++] = cols))
            return NULL;
    } else if (s->qual_start.n || s->qual_end.n) {
        if (!(f[n++] = column_range(s->qual_start, s->qual_end, a)))
            return NULL;
    }
    if (!(f[n] = new_filter(a)))
        return NULL;
    f[n]->filter_case = BIGTABLE__ROW_FILTER__FILTER_CELLS_PER_COLUMN_LIMIT_FILTER;
    f[n++]->cells_per_column_limit_filter = 1;
    if (strip) {
        if (!(f[n] = new_filter(a)))
            return NULL;
        f[n]->filter_case = BIGTABLE__ROW_FILTER__FILTER_STRIP_VALUE_TRANSFORMER;
        f[n++]->strip_value_transformer = 1;
    }
    return combine(0, f, n, a);
}

/* The request for ranges r[0..n) (n > 0: an empty row set would read the whole table). */
static Bigtable__ReadRowsRequest *build_read(const pt_bt *bt, const pt_scan *s,
                                             const pt_bt_range *r, size_t n, int64_t rows_limit,
                                             int strip, pt_arena *a)
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
    if (!(req->filter = build_filter(s, strip, a)))
        return NULL;
    return req;
}

typedef struct scanner {
    pt_cell_fn fn;
    void *ud;
    size_t row_limit;
    size_t rows;     /* rows delivered */
    size_t *visited; /* pt_scan.visited: every row the server sent */
    /* Rows the merger committed and their cells, for pt_bt_stats: added to the backend's
     * counters once, at the end of the scan. */
    size_t merged_rows, merged_cells;
    /* A points scan: rows with chunk cells are merged in rm, within [qs, qe). */
    int points;
    pt_slice qs, qe;
    const char *table;
    pt_bt_rowmerge rm;
    pt_slice row;     /* the row being delivered */
    size_t delivered; /* ... and its cells delivered so far */
    /* The scan's own ranges (sorted) and the first that does not end before the rows
     * delivered so far (own_key). */
    const pt_row_range *ranges;
    size_t nranges, ri;
    const pt_stream_to *stream; /* pt_scan.stream: chunks that can go as they are */
    pt_buf xs;                  /* a chunk's samples as a stream, when stored otherwise */
    uint64_t lo, hi;            /* a points scan's offsets: [lo, hi) */
    pt_bt_row_fn raw; /* pt_bt_data_read_raw: whole rows as read go here, not to fn */
    void *raw_ud;
} scanner;

/* key as the scan's own bytes when a one-row range names it (a series' data row, what
 * reads ask for), else key: the caller then knows the row by its memory, without
 * comparing its bytes for every cell. One or two comparisons a row; rows come in order. */
static pt_slice own_key(scanner *sc, pt_slice key)
{
    while (sc->ri < sc->nranges && sc->ranges[sc->ri].end.n &&
           pt_slice_cmp(key, sc->ranges[sc->ri].end) >= 0)
        sc->ri++;
    if (sc->ri == sc->nranges)
        return key;
    const pt_row_range *r = &sc->ranges[sc->ri];
    int one_row = r->end.n == r->start.n + 1 && r->end.p[r->start.n] == 0 &&
                  memcmp(r->end.p, r->start.p, r->start.n) == 0;
    return one_row && pt_slice_eq(r->start, key) ? r->start : key;
}

static int deliver_merged(void *ud, pt_slice qual, pt_slice value)
{
    scanner *sc = ud;
    sc->delivered++;
    return sc->fn(sc->ud, sc->row, qual, value);
}

/* Chunks shorter than this are decoded and sent again as one chunk rather than as they
 * are: a row written without the buffer holds a chunk or two of samples a request, and a
 * Prometheus chunk per one or two samples would take three times the bytes of the answer. */
enum { STREAM_MIN_SAMPLES = 32 };

/* Whether a streamed read can take the row's cells as streams (pt_stream_fn): all chunk
 * cells of family "p" inside the window, apart from each other, each of 8-byte values
 * (an XOR stream, fmt 3, goes as it is; the other layouts are encoded as one) and of
 * STREAM_MIN_SAMPLES samples at least, few enough for a Prometheus chunk. */
static int streamable(const scanner *sc, const pt_bt_cell *cells, size_t n)
{
    uint64_t next = sc->lo;
    for (size_t i = 0; i < n; i++) {
        pt_bt_chunkqual q;
        pt_cellchunk c;
        if (!pt_slice_eq(cells[i].family, PT_SLICE_LIT(PT_BT_FAMILY)) ||
            pt_bt_chunk_qual_get(cells[i].qualifier, &q) != 0 || q.first < next ||
            q.last >= sc->hi ||
            pt_cellchunk_parse(cells[i].value.p, cells[i].value.n, &c) != 0 ||
            !pt_cellchunk_floats(&c) || c.count < STREAM_MIN_SAMPLES ||
            c.count > PT_STREAM_MAX_SAMPLES)
            return 0;
        next = (uint64_t)q.last + 1;
    }
    return 1;
}

static void log_corrupt(const scanner *sc, pt_slice key, const char *why)
{
    char q[96];
    size_t shown = key.n < 64 ? key.n : 64;
    pt_log(PT_LOG_ERROR, "bigtable chunk cell is corrupt", "table=%s row=%s why=\"%s\"",
           sc->table, pt_log_quote(q, sizeof(q), (const char *)key.p, shown), why);
}

/* Hands the row's chunks over as streams; streamable() said they may go. */
static int deliver_streams(scanner *sc, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        pt_bt_chunkqual q;
        pt_cellchunk c;
        pt_bt_chunk_qual_get(cells[i].qualifier, &q);
        pt_cellchunk_parse(cells[i].value.p, cells[i].value.n, &c);
        pt_slice stream;
        const pt_vcells *dec = &sc->rm.dec; /* empty when the stream is the stored one */
        int rv = pt_cellchunk_to_stream(&c, &sc->rm.dec, &sc->xs, &stream);
        if (rv == 0 && dec->n && (dec->n != c.count || dec->c[0].q != q.first ||
                                  dec->c[dec->n - 1].q != q.last))
            rv = PT_EINTERNAL;
        if (rv == PT_EINTERNAL)
            log_corrupt(sc, key, "its samples do not decode to its qualifier's first..last");
        if (rv != 0)
            return rv;
        sc->delivered += c.count;
        if ((rv = sc->stream->fn(sc->stream->ud, key, q.first, q.last, c.count, stream)) != 0)
            return rv;
    }
    return 0;
}

/* A row of a points scan that holds chunk cells. */
static int deliver_chunked(scanner *sc, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    if (sc->stream && streamable(sc, cells, n))
        return deliver_streams(sc, key, cells, n);
    char why[160] = "";
    sc->row = key;
    int rv = pt_bt_merge_row(&sc->rm, cells, n, sc->qs, sc->qe, deliver_merged, sc, why,
                             sizeof(why));
    if (rv == PT_EINTERNAL && why[0])
        log_corrupt(sc, key, why);
    return rv;
}

static int deliver_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    scanner *sc = ud;
    pt_slice prev = {0};
    if (sc->visited)
        (*sc->visited)++;
    sc->merged_rows++;
    sc->merged_cells += n;
    sc->delivered = 0;
    if (sc->raw) {
        int rv = sc->raw(sc->raw_ud, key, cells, n);
        return rv != 0 ? rv : ++sc->rows == sc->row_limit;
    }
    key = own_key(sc, key);
    if (sc->points && pt_bt_row_has_chunks(cells, n)) {
        int rv = deliver_chunked(sc, key, cells, n);
        if (rv != 0)
            return rv;
        n = 0;
    }
    for (size_t i = 0; i < n; i++) {
        /* The filter lets only family "p", newest version first, through; these checks
         * keep the callback's contract even if a server ignored part of it. A points
         * scan's filter may pass other qualifiers than [qs, qe) holds (its end is an
         * offset bound), which only a qualifier of another length than 4 bytes may fall past. */
        if (!pt_slice_eq(cells[i].family, PT_SLICE_LIT(PT_BT_FAMILY)))
            continue;
        if (sc->delivered && pt_slice_eq(cells[i].qualifier, prev))
            continue;
        if (sc->points && sc->qe.n && sc->qe.n != 4 &&
            pt_slice_cmp(cells[i].qualifier, sc->qe) >= 0)
            continue;
        prev = cells[i].qualifier;
        sc->delivered++;
        int rv = sc->fn(sc->ud, key, cells[i].qualifier, cells[i].value);
        if (rv != 0)
            return rv;
    }
    if (sc->delivered && ++sc->rows == sc->row_limit)
        return 1;
    return 0;
}

/* One group of a scan's ranges, read by one stream at a time (a new one after each
 * break). Its merger holds its resume point. */
typedef struct group {
    const pt_row_range *ranges;
    size_t nranges;
    pt_bt_merger m;
    pt_bt_rpc r;
    int running; /* r is a call started and not yet finished */
} group;

/* What the groups of one scan share. Only one group is fed to its merger at a time, so
 * one scanner, one arena and one clip array serve them all. */
typedef struct scan_ctx {
    pt_bt *bt;
    const pt_scan *s;
    scanner sc;
    pt_bt_range *clip; /* room for the largest group's ranges */
    pt_arena a;
    /* The row limit goes to the server too: not when the filter passes chunk cells that
     * start before the qualifier range, whose rows may deliver nothing. */
    int server_limit;
    int strip; /* values stripped (pt_bt_data_read_raw) */
} scan_ctx;

/* Starts g's next ReadRows: its ranges after its resume point. 1 = started, 0 = nothing
 * is left to read, PT_ENOMEM. */
static int group_call(scan_ctx *x, group *g)
{
    pt_slice last;
    int resume = pt_bt_merger_last(&g->m, &last);
    size_t n = pt_bt_clip_ranges(g->ranges, g->nranges, resume ? &last : NULL, x->clip);
    if (n == 0)
        return 0; /* never send an empty row set: it reads the whole table */
    /* The rows earlier groups will deliver are unknown yet, so a waiting group asks for
     * as many as the whole scan still may take. */
    size_t lim = x->server_limit ? x->s->row_limit : 0;
    Bigtable__ReadRowsRequest *req =
        build_read(x->bt, x->s, x->clip, n, lim ? (int64_t)(lim - x->sc.rows) : 0, x->strip, &x->a);
    if (!req) {
        pt_arena_reset(&x->a);
        return PT_ENOMEM;
    }
    pt_bt_rpc_start(&g->r, x->bt->data, M_READ_ROWS, x->bt->params[x->s->table], &req->base,
                    x->bt->read_ms);
    pt_arena_reset(&x->a); /* packed: the arena is free for the answers */
    g->running = 1;
    atomic_fetch_add(&x->bt->read_calls, 1);
    return 1;
}

/* Reads g to its end, its rows going to the callback, resuming broken streams after the
 * last row delivered. 0 when every range is read, 1 when the callback (or the row limit)
 * stopped the scan, or a pt error code. */
static int group_read(scan_ctx *x, group *g)
{
    pt_bt *bt = x->bt;
    const char *table = bt->table[x->s->table];
    /* The budget runs from the group's turn: a stream that broke while it waited costs
     * nothing until then. */
    pt_bt_retry rt;
    pt_bt_retry_init(&rt, bt->data, bt->retry_ms);
    for (;;) {
        int rv;
        if (!g->running && (rv = group_call(x, g)) <= 0)
            return rv;
        rv = 0;
        size_t rows_before = g->m.rows;
        g->m.err[0] = '\0';
        ProtobufCMessage *msg;
        int got;
        while ((got = pt_bt_rpc_recv(&g->r, &x->a, &bigtable__read_rows_response__descriptor,
                                     &msg)) == 1) {
            rv = pt_bt_merger_response(&g->m, (const Bigtable__ReadRowsResponse *)msg);
            pt_arena_reset(&x->a);
            if (rv != 0) {
                pt_bt_rpc_cancel(&g->r);
                break;
            }
        }
        char details[256];
        grpc_status_code st = pt_bt_rpc_finish(&g->r, details, sizeof(details));
        g->running = 0;
        if (got < 0 && rv == 0) {
            rv = got;
            snprintf(g->m.err, sizeof(g->m.err), "a ReadRowsResponse does not parse");
        }
        if (rv == 1)
            return 1;
        if (rv == 0 && st == GRPC_STATUS_OK)
            rv = pt_bt_merger_end(&g->m);
        if (rv != 0 || st == GRPC_STATUS_OK) {
            if (g->m.err[0]) /* the merger's own failure, not the callback's code */
                pt_bt_rpc_log_failure("ReadRows", table, GRPC_STATUS_INTERNAL, g->m.err);
            return rv;
        }
        /* A broken stream: resume after the last row delivered. Progress renews the
         * budget, so a long scan survives several breaks but a dead server does not. */
        pt_bt_merger_abandon(&g->m);
        if (g->m.rows > rows_before)
            pt_bt_retry_init(&rt, bt->data, bt->retry_ms);
        if (!pt_bt_rpc_retryable(st) || !pt_bt_retry_wait(&rt)) {
            pt_bt_rpc_log_failure("ReadRows", table, st, details);
            return pt_bt_rpc_error(st);
        }
        atomic_fetch_add(&bt->scan_resumes, 1);
    }
}

/* [k, k 0x00): one row, which no key can cut (a query of one series reads this way). */
static int single_row(const pt_row_range *r)
{
    return r->end.n == r->start.n + 1 && r->end.p[r->start.n] == 0 &&
           memcmp(r->end.p, r->start.p, r->start.n) == 0;
}

/* How many streams read the scan, each a group of *nranges ranges from *ranges. A
 * stream costs a request and a round trip, which a handful of rows does not repay. One
 * range is cut at sampled keys when it is wide (into piece, keys in cuts), except under a
 * row limit, which usually wants the first rows only: later pieces would be read for
 * nothing. */
static size_t plan(pt_bt *bt, const pt_scan *s, pt_buf *cuts, pt_row_range *piece,
                   const pt_row_range **ranges, size_t *nranges)
{
    if (s->nranges == 1 && s->row_limit == 0 && bt->read_streams > 1 &&
        !single_row(&s->ranges[0])) {
        *ranges = piece;
        *nranges =
            pt_bt_sample_split(bt, s->table, s->ranges, (size_t)bt->read_streams, cuts, piece);
        return *nranges;
    }
    size_t k = s->nranges / MIN_GROUP_RANGES;
    if (k > (size_t)bt->read_streams)
        k = (size_t)bt->read_streams;
    return k ? k : 1;
}

/* A scan, its rows going to fn cell by cell, or with raw set to raw whole. */
static int scan(pt_bt *bt, const pt_scan *s, pt_cell_fn fn, void *ud, pt_bt_row_fn raw,
                void *raw_ud, int strip)
{
    if ((unsigned)s->table >= PT_TABLE_COUNT)
        return PT_EINTERNAL;
    if (s->qual_start.n && s->qual_end.n && pt_slice_cmp(s->qual_start, s->qual_end) >= 0)
        return 0;
    if (s->nranges == 0)
        return 0;
    uint64_t lo = pt_bt_qual_floor(s->qual_start);
    if (s->table == PT_TABLE_POINTS && s->qual_end.n && lo >= pt_bt_qual_floor(s->qual_end))
        return 0; /* no offset is inside */
    const pt_row_range *ranges = s->ranges;
    size_t nranges = s->nranges;
    pt_row_range piece[PT_BT_MAX_READ_STREAMS];
    pt_buf cuts;
    pt_buf_init(&cuts, (size_t)PT_BT_MAX_READ_STREAMS * PT_BT_MAX_ROW_KEY);
    size_t ng = plan(bt, s, &cuts, piece, &ranges, &nranges);
    int points = s->table == PT_TABLE_POINTS;
    scan_ctx x = {.bt = bt,
                  .s = s,
                  .sc = {.fn = fn,
                         .ud = ud,
                         .row_limit = s->row_limit,
                         .visited = s->visited,
                         .points = points,
                         .qs = s->qual_start,
                         .qe = s->qual_end,
                         .table = bt->table[s->table],
                         .ranges = s->ranges,
                         .nranges = s->nranges,
                         .stream = points ? s->stream : NULL,
                         .lo = lo,
                         .hi = s->qual_end.n ? pt_bt_qual_floor(s->qual_end)
                                             : (uint64_t)1 << 32,
                         .raw = raw,
                         .raw_ud = raw_ud},
                  .server_limit = !points || lo == 0,
                  .strip = strip};
    group *g = calloc(ng, sizeof(*g));
    x.clip = malloc((nranges / ng + 1) * sizeof(*x.clip));
    if (!g || !x.clip) {
        free(g);
        free(x.clip);
        pt_buf_free(&cuts);
        return PT_ENOMEM;
    }
    pt_arena_init(&x.a, 64 << 10, 0);
    /* Contiguous groups of the sorted ranges: every row of group i sorts before every row
     * of group i + 1, so reading the groups in turn keeps the callback's order. */
    for (size_t i = 0; i < ng; i++) {
        size_t from = i * nranges / ng, to = (i + 1) * nranges / ng;
        g[i].ranges = ranges + from;
        g[i].nranges = to - from;
        pt_bt_merger_init(&g[i].m, deliver_row, &x.sc, MAX_ROW_BYTES);
    }
    atomic_fetch_add(&bt->scans, 1);

    /* Every stream starts now, so the server works on all groups at once; the waiting
     * ones are read in their turn (the bound on what they hold meanwhile is at the top of
     * this section). */
    int rv = 0;
    for (size_t i = 0; i < ng && rv >= 0; i++)
        rv = group_call(&x, &g[i]);
    if (rv > 0)
        rv = 0;
    for (size_t i = 0; i < ng && rv == 0; i++) {
        rv = group_read(&x, &g[i]);
        pt_bt_merger_free(&g[i].m); /* its row buffer, at once rather than at the end */
    }
    if (rv == 1)
        rv = 0; /* the callback (or the row limit) stopped the scan */
    atomic_fetch_add_explicit(&bt->rows_read[s->table], x.sc.merged_rows, memory_order_relaxed);
    atomic_fetch_add_explicit(&bt->cells_read[s->table], x.sc.merged_cells, memory_order_relaxed);
    /* A stop or a failure leaves later streams under way: cancel them, then collect
     * them (a call is freed only once its status is in). */
    for (size_t i = 0; i < ng; i++) {
        if (g[i].running) {
            char details[8];
            pt_bt_rpc_cancel(&g[i].r);
            pt_bt_rpc_finish(&g[i].r, details, sizeof(details));
        }
        pt_bt_merger_free(&g[i].m);
    }
    pt_arena_free(&x.a);
    pt_bt_rowmerge_free(&x.sc.rm);
    pt_buf_free(&x.sc.xs);
    free(x.clip);
    free(g);
    pt_buf_free(&cuts);
    return rv;
}

int pt_bt_data_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    return scan(state, s, fn, ud, NULL, NULL, 0);
}

int pt_bt_data_read_raw(pt_bt *bt, const pt_scan *s, int strip, pt_bt_row_fn fn, void *ud)
{
    return scan(bt, s, NULL, NULL, fn, ud, strip);
}

/* ============================================================================
 * check_and_set: CheckAndMutateRow
 *
 * The predicate is chain(family "p", qualifier, newest cell, [value]); the SetCell goes
 * to true_mutations when a value is expected (the newest cell holds it) and to
 * false_mutations when the cell is expected absent (the chain matches nothing). Regexes
 * are RE2 in raw-byte mode with full-match semantics: every byte but a letter or digit
 * is written \x{HH}, which matches exactly that byte.
 * ========================================================================== */

#define M_CHECK_AND_MUTATE "/google.bigtable.v2.Bigtable/CheckAndMutateRow"

/* The regex matching exactly s, in a (6 bytes per byte at most). */
static ProtobufCBinaryData exact_regex(pt_slice s, pt_arena *a)
{
    static const char hex[] = "0123456789abcdef";
    uint8_t *o = pt_arena_alloc(a, 6 * s.n + 1), *p = o;
    if (!o)
        return (ProtobufCBinaryData){0, NULL};
    for (size_t i = 0; i < s.n; i++) {
        uint8_t c = s.p[i];
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
            *p++ = c;
            continue;
        }
        memcpy(p, "\\x{", 3);
        p[3] = (uint8_t)hex[c >> 4];
        p[4] = (uint8_t)hex[c & 15];
        p[5] = '}';
        p += 6;
    }
    return (ProtobufCBinaryData){(size_t)(p - o), o};
}

static Bigtable__CheckAndMutateRowRequest *build_check(const pt_bt *bt, const pt_mutation *m,
                                                       pt_slice expect, pt_arena *a)
{
    Bigtable__CheckAndMutateRowRequest *req = pt_arena_alloc(a, sizeof(*req));
    Bigtable__Mutation *mut = pt_arena_alloc(a, sizeof(*mut));
    Bigtable__Mutation__SetCell *set = pt_arena_alloc(a, sizeof(*set));
    Bigtable__Mutation **mlist = pt_arena_alloc(a, sizeof(*mlist));
    Bigtable__RowFilter *chain = new_filter(a), *f[4] = {new_filter(a), new_filter(a),
                                                          new_filter(a), new_filter(a)};
    Bigtable__RowFilter__Chain *c = pt_arena_alloc(a, sizeof(*c));
    Bigtable__RowFilter **list = pt_arena_alloc(a, 4 * sizeof(*list));
    if (!req || !mut || !set || !mlist || !chain || !f[0] || !f[1] || !f[2] || !f[3] || !c ||
        !list)
        return NULL;
    f[0]->filter_case = BIGTABLE__ROW_FILTER__FILTER_FAMILY_NAME_REGEX_FILTER;
    f[0]->family_name_regex_filter = family;
    f[1]->filter_case = BIGTABLE__ROW_FILTER__FILTER_COLUMN_QUALIFIER_REGEX_FILTER;
    f[1]->column_qualifier_regex_filter = exact_regex(m->qual, a);
    f[2]->filter_case = BIGTABLE__ROW_FILTER__FILTER_CELLS_PER_COLUMN_LIMIT_FILTER;
    f[2]->cells_per_column_limit_filter = 1;
    f[3]->filter_case = BIGTABLE__ROW_FILTER__FILTER_VALUE_REGEX_FILTER;
    f[3]->value_regex_filter = exact_regex(expect, a);
    if (!f[1]->column_qualifier_regex_filter.data || !f[3]->value_regex_filter.data)
        return NULL;
    protobuf_c_message_init(&bigtable__row_filter__chain__descriptor, c);
    c->n_filters = expect.p ? 4 : 3;
    c->filters = list;
    for (size_t i = 0; i < 4; i++)
        list[i] = f[i];
    chain->filter_case = BIGTABLE__ROW_FILTER__FILTER_CHAIN;
    chain->chain = c;

    protobuf_c_message_init(&bigtable__mutation__set_cell__descriptor, set);
    set->family_name = family;
    set->column_qualifier = bin(m->qual);
    set->timestamp_micros = m->version_us;
    set->value = bin(m->value);
    protobuf_c_message_init(&bigtable__mutation__descriptor, mut);
    mut->mutation_case = BIGTABLE__MUTATION__MUTATION_SET_CELL;
    mut->set_cell = set;
    mlist[0] = mut;

    protobuf_c_message_init(&bigtable__check_and_mutate_row_request__descriptor, req);
    req->table_name = bt->table[m->table];
    req->row_key = bin(m->row);
    req->predicate_filter = chain;
    if (expect.p)
        req->n_true_mutations = 1, req->true_mutations = mlist;
    else
        req->n_false_mutations = 1, req->false_mutations = mlist;
    return req;
}

int pt_bt_data_check_and_set(void *state, const pt_mutation *m, pt_slice expect, int *applied)
{
    pt_bt *bt = state;
    *applied = 0;
    if (!valid_mutation(m))
        return PT_EBADREQ;
    pt_arena a;
    pt_arena_init(&a, 4096 + 12 * (m->qual.n + expect.n), 0);
    Bigtable__CheckAndMutateRowRequest *req = build_check(bt, m, expect, &a);
    int rv = PT_ENOMEM;
    if (req) {
        char details[256];
        ProtobufCMessage *resp;
        /* A retry after a lost answer may find its own write: the predicate then fails
         * and the caller, reading the cell again, sees it. */
        grpc_status_code st = pt_bt_rpc_unary_retried(
            bt, bt->data, M_CHECK_AND_MUTATE, bt->params[m->table], &req->base, &a,
            &bigtable__check_and_mutate_row_response__descriptor, &resp, details, sizeof(details));
        rv = pt_bt_rpc_error(st);
        if (st == GRPC_STATUS_OK) {
            int matched = ((Bigtable__CheckAndMutateRowResponse *)resp)->predicate_matched != 0;
            *applied = expect.p ? matched : !matched;
        } else {
            pt_bt_rpc_log_failure("CheckAndMutateRow", bt->table[m->table], st, details);
        }
    }
    pt_arena_free(&a);
    return rv;
}
