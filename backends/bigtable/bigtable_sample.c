/*
 * SampleRowKeys: where a table's data lies, so that a scan of one wide range can be cut
 * into pieces read on concurrent streams. Contracts in bigtable_int.h.
 *
 * A scan of one range has no groups of ranges to fan out over. SampleRowKeys answers
 * with keys spread over the table (about one per tablet on Cloud Bigtable, 1 % of the
 * rows on the emulator), each with the bytes stored before it, so a wide range can be
 * cut at those keys into pieces of similar size. Asking on every scan would add a round
 * trip to each (and the emulator walks the whole table to answer) while most
 * single-range scans, index prefixes, are small; so one answer per table is kept for a
 * while and shared by every scan. An old answer costs balance, never correctness: any
 * keys strictly inside a range cut it into pieces that together cover it exactly.
 */
#include <stdlib.h>
#include <string.h>

#include "bigtable_int.h"
#include "error.h"
#include "log.h"

#define M_SAMPLE_ROW_KEYS "/google.bigtable.v2.Bigtable/SampleRowKeys"

enum {
    /* Kept per table; a longer answer is thinned out evenly. Even, see fetch. */
    MAX_SAMPLES = 1024,
    /* A scan waits for the answer before it starts reading: keep that short. */
    SAMPLE_DEADLINE_MS = 2000,
};

static void set_free(pt_bt_sampleset *ss)
{
    pt_buf_free(&ss->keys);
    free(ss->v);
    ss->v = NULL;
    ss->n = ss->cap = 0;
    ss->total = 0;
}

void pt_bt_sample_init(pt_bt *bt)
{
    for (int t = 0; t < PT_TABLE_COUNT; t++)
        pt_buf_init(&bt->samples[t].keys, (size_t)MAX_SAMPLES * PT_BT_MAX_ROW_KEY);
    pthread_mutex_init(&bt->samples_mu, NULL);
    bt->samples_ready = 1;
}

void pt_bt_sample_free(pt_bt *bt)
{
    if (!bt->samples_ready)
        return;
    for (int t = 0; t < PT_TABLE_COUNT; t++)
        set_free(&bt->samples[t]);
    pthread_mutex_destroy(&bt->samples_mu);
    bt->samples_ready = 0;
}

/* While an answer is collected, a sample's key is only its length: the keys lie back to
 * back in ss->keys, which may move as it grows. This points them into it. */
static void resolve_keys(pt_bt_sampleset *ss)
{
    const uint8_t *p = pt_buf_data(&ss->keys);
    for (size_t i = 0; i < ss->n; i++) {
        ss->v[i].key.p = p;
        p += ss->v[i].key.n;
    }
}

/* Keeps every other sample: the answer is longer than MAX_SAMPLES. */
static int thin_out(pt_bt_sampleset *ss)
{
    pt_buf kept;
    pt_buf_init(&kept, ss->keys.max);
    const uint8_t *p = pt_buf_data(&ss->keys);
    size_t m = 0;
    for (size_t i = 0; i < ss->n; p += ss->v[i].key.n, i++) {
        if (i % 2)
            continue;
        if (pt_buf_append(&kept, p, ss->v[i].key.n) != 0) {
            pt_buf_free(&kept);
            return PT_ENOMEM;
        }
        ss->v[m++] = ss->v[i];
    }
    pt_buf_free(&ss->keys);
    ss->keys = kept;
    ss->n = m;
    return 0;
}

/* Adds one sample of an answer, unless it cannot serve as a cut: keys must increase
 * (and sizes not decrease) for pt_bt_split_points, whatever the server sends. */
static int add_sample(pt_bt_sampleset *ss, pt_slice key, int64_t offset, unsigned long *seen,
                      unsigned long *stride)
{
    if (key.n == 0 || key.n > PT_BT_MAX_ROW_KEY)
        return 0;
    if (ss->n) {
        const pt_bt_sample *last = &ss->v[ss->n - 1];
        pt_slice last_key = {pt_buf_data(&ss->keys) + pt_buf_used(&ss->keys) - last->key.n,
                             last->key.n};
        if (pt_slice_cmp(key, last_key) <= 0 || offset < last->offset)
            return 0;
    }
    if ((*seen)++ % *stride)
        return 0;
    if (ss->n == MAX_SAMPLES) {
        /* The kept samples are those at multiples of 2 * stride, and so is this one
         * (MAX_SAMPLES * stride, MAX_SAMPLES even). */
        int rv = thin_out(ss);
        if (rv != 0)
            return rv;
        *stride *= 2;
    }
    if (pt_array_reserve(&ss->v, &ss->cap, ss->n + 1, sizeof(*ss->v), MAX_SAMPLES) != 0 ||
        pt_buf_append(&ss->keys, key.p, key.n) != 0)
        return PT_ENOMEM;
    ss->v[ss->n++] = (pt_bt_sample){{NULL, key.n}, offset};
    return 0;
}

/* Table t's SampleRowKeys answer into ss (empty). 0 or a pt error code; on failure ss
 * holds part of an answer, which the caller drops. */
static int fetch(pt_bt *bt, int t, pt_bt_sampleset *ss)
{
    Bigtable__SampleRowKeysRequest req = BIGTABLE__SAMPLE_ROW_KEYS_REQUEST__INIT;
    req.table_name = bt->table[t];
    pt_arena a;
    pt_arena_init(&a, 16 << 10, 0);
    pt_bt_rpc r;
    int deadline = bt->read_ms < SAMPLE_DEADLINE_MS ? bt->read_ms : SAMPLE_DEADLINE_MS;
    pt_bt_rpc_start(&r, bt->data, M_SAMPLE_ROW_KEYS, bt->params[t], &req.base, deadline);
    atomic_fetch_add(&bt->sample_calls, 1);
    unsigned long seen = 0, stride = 1;
    int rv = 0, got;
    ProtobufCMessage *msg;
    while ((got = pt_bt_rpc_recv(&r, &a, &bigtable__sample_row_keys_response__descriptor, &msg)) ==
           1) {
        const Bigtable__SampleRowKeysResponse *sr = (const Bigtable__SampleRowKeysResponse *)msg;
        /* The last answer, with an empty key, carries the size of the whole table. */
        if (sr->offset_bytes > ss->total)
            ss->total = sr->offset_bytes;
        rv = add_sample(ss, (pt_slice){sr->row_key.data, sr->row_key.len}, sr->offset_bytes, &seen,
                        &stride);
        pt_arena_reset(&a);
        if (rv != 0) {
            pt_bt_rpc_cancel(&r);
            break;
        }
    }
    char details[256];
    grpc_status_code st = pt_bt_rpc_finish(&r, details, sizeof(details));
    pt_arena_free(&a);
    if (rv == 0)
        rv = got < 0 ? got : pt_bt_rpc_error(st);
    if (rv != 0) {
        char q[300];
        pt_log(PT_LOG_DEBUG, "bigtable SampleRowKeys failed: scans stay whole",
               "table=%s code=%s details=%s", bt->table_id[t], pt_bt_rpc_status_name(st),
               pt_log_quote(q, sizeof(q), details, strlen(details)));
        return rv;
    }
    resolve_keys(ss);
    return 0;
}

/* Makes table t's kept answer at most ttl old, unless another scan is already asking.
 * A failed answer is kept too (as no samples), so that a server that cannot answer is
 * not asked by every scan. */
static void refresh(pt_bt *bt, int t)
{
    pt_bt_sampleset *ss = &bt->samples[t];
    int64_t now = pt_mono_ms();
    pthread_mutex_lock(&bt->samples_mu);
    int ask = !ss->fetching && (ss->fetched_ms == 0 || now - ss->fetched_ms >= bt->sample_ttl_ms);
    if (ask)
        ss->fetching = 1;
    pthread_mutex_unlock(&bt->samples_mu);
    if (!ask)
        return;
    pt_bt_sampleset fresh = {0};
    pt_buf_init(&fresh.keys, ss->keys.max);
    if (fetch(bt, t, &fresh) != 0)
        set_free(&fresh);
    pthread_mutex_lock(&bt->samples_mu);
    set_free(ss);
    ss->keys = fresh.keys;
    ss->v = fresh.v;
    ss->n = fresh.n;
    ss->cap = fresh.cap;
    ss->total = fresh.total;
    ss->fetched_ms = now;
    ss->fetching = 0;
    pthread_mutex_unlock(&bt->samples_mu);
}

size_t pt_bt_sample_split(pt_bt *bt, int t, const pt_row_range *r, size_t k, pt_buf *cuts,
                          pt_row_range *out)
{
    size_t idx[PT_BT_MAX_READ_STREAMS], len[PT_BT_MAX_READ_STREAMS];
    size_t m = 0;
    if (k > PT_BT_MAX_READ_STREAMS)
        k = PT_BT_MAX_READ_STREAMS;
    if (k >= 2 && bt->samples_ready) {
        refresh(bt, t);
        pthread_mutex_lock(&bt->samples_mu);
        const pt_bt_sampleset *ss = &bt->samples[t];
        m = pt_bt_split_points(ss->v, ss->n, ss->total, r->start, r->end, k, bt->split_bytes, idx);
        /* Another scan may replace the kept answer once the lock is let go: copy. */
        for (size_t i = 0; i < m; i++) {
            len[i] = ss->v[idx[i]].key.n;
            if (pt_buf_append(cuts, ss->v[idx[i]].key.p, len[i]) != 0)
                m = 0; /* no room: read the range whole */
        }
        pthread_mutex_unlock(&bt->samples_mu);
    }
    /* Pieces [start, cut 1), [cut 1, cut 2), ..., [cut m, end). */
    const uint8_t *p = pt_buf_data(cuts);
    pt_slice from = r->start;
    for (size_t i = 0; i < m; i++) {
        pt_slice cut = {p, len[i]};
        out[i] = (pt_row_range){from, cut};
        from = cut;
        p += len[i];
    }
    out[m] = (pt_row_range){from, r->end};
    return m + 1;
}

int pt_bt_sample_position(pt_bt *bt, int t, pt_slice key, uint64_t *before, uint64_t *total)
{
    if (!bt->samples_ready)
        return PT_EINTERNAL;
    refresh(bt, t);
    pthread_mutex_lock(&bt->samples_mu);
    const pt_bt_sampleset *ss = &bt->samples[t];
    int rv = ss->n && ss->total > 0 ? 0 : PT_EINTERNAL;
    if (rv == 0) {
        /* The offset of the last sampled key at or before key (0 before the first). */
        size_t lo = 0, hi = ss->n;
        while (lo < hi) {
            size_t mid = lo + (hi - lo) / 2;
            if (pt_slice_cmp(ss->v[mid].key, key) <= 0)
                lo = mid + 1;
            else
                hi = mid;
        }
        *before = lo ? (uint64_t)ss->v[lo - 1].offset : 0;
        *total = (uint64_t)ss->total;
    }
    pthread_mutex_unlock(&bt->samples_mu);
    return rv;
}
