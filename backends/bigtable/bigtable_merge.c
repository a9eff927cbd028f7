/*
 * The ReadRows stream without I/O: the chunk merger (reference §5), the ranges left to
 * read after a broken stream (reference §5.6), and where sampled keys cut a range.
 * Contracts in bigtable_int.h.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bigtable_int.h"
#include "error.h"

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

void pt_bt_merger_init(pt_bt_merger *m, pt_bt_row_fn fn, void *ud, size_t max_row_bytes)
{
    memset(m, 0, sizeof(*m));
    m->state = NEW_ROW;
    m->fn = fn;
    m->ud = ud;
    pt_buf_init(&m->row, max_row_bytes);
    /* A key is part of a row, so the same ceiling bounds the resume point. */
    pt_buf_init(&m->last, max_row_bytes);
}

void pt_bt_merger_free(pt_bt_merger *m)
{
    pt_buf_free(&m->last);
    pt_buf_free(&m->row);
    free(m->cells);
    free(m->out);
    memset(m, 0, sizeof(*m));
}

static int buf_fail(pt_bt_merger *m, int rv, const char *what)
{
    if (rv == PT_ETOOLARGE)
        return merge_fail(m, PT_ELIMIT, "%s is larger than %zu bytes", what, m->row.max);
    return merge_fail(m, PT_ENOMEM, "out of memory for %s", what);
}

/* Makes room for n more bytes of the current row, within the ceiling. */
static int row_reserve(pt_bt_merger *m, size_t n)
{
    int rv = pt_buf_reserve(&m->row, n);
    return rv == 0 ? 0 : buf_fail(m, rv, "a row");
}

/* Appends to the row; *off (when wanted) gets where the bytes start. */
static int row_append(pt_bt_merger *m, const void *p, size_t n, size_t *off)
{
    size_t at = pt_buf_used(&m->row);
    int rv = pt_buf_append(&m->row, p, n);
    if (rv != 0)
        return buf_fail(m, rv, "a row");
    if (off)
        *off = at;
    return 0;
}

static void drop_row(pt_bt_merger *m)
{
    pt_buf_reset(&m->row);
    m->key_n = 0;
    m->ncells = 0;
    m->remaining = 0;
    m->value_size = 0;
    m->state = NEW_ROW;
}

static int set_last(pt_bt_merger *m, const uint8_t *p, size_t n)
{
    /* Room first, so that a failure leaves the old resume point in place. */
    size_t held = pt_buf_used(&m->last);
    int rv = pt_buf_reserve(&m->last, n > held ? n - held : 0);
    if (rv != 0)
        return buf_fail(m, rv, "a row key");
    pt_buf_reset(&m->last);
    pt_buf_append(&m->last, p, n);
    m->have_last = 1;
    return 0;
}

int pt_bt_merger_last(const pt_bt_merger *m, pt_slice *key)
{
    if (!m->have_last)
        return 0;
    *key = (pt_slice){pt_buf_data(&m->last), pt_buf_used(&m->last)};
    return 1;
}

static int after_last(const pt_bt_merger *m, const ProtobufCBinaryData *key)
{
    pt_slice last;
    if (!pt_bt_merger_last(m, &last))
        return 1;
    return pt_slice_cmp((pt_slice){key->data, key->len}, last) > 0;
}

static int commit_row(pt_bt_merger *m)
{
    if (pt_array_reserve(&m->out, &m->out_cap, m->ncells, sizeof(*m->out), 0) != 0)
        return merge_fail(m, PT_ENOMEM, "out of memory for a row");
    const uint8_t *b = pt_buf_data(&m->row);
    for (size_t i = 0; i < m->ncells; i++) {
        const pt_bt_cellpos *c = &m->cells[i];
        m->out[i] = (pt_bt_cell){
            .family = {b + c->fam, c->fam_n},
            .qualifier = {b + c->qual, c->qual_n},
            .ts = c->ts,
            .label = {b + c->label, c->label_n},
            .value = {b + c->val, c->val_n},
        };
    }
    /* The row is delivered whatever the callback answers: it is the resume point. */
    pt_slice key = {b, m->key_n};
    int rv = set_last(m, key.p, key.n);
    if (rv != 0)
        return rv;
    size_t n = m->ncells;
    m->rows++;
    drop_row(m);
    /* drop_row only resets lengths, so the row's bytes and out stay valid during the call. */
    return m->fn(m->ud, key, m->out, n);
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
        cp.fam_n = strlen(f);
        if ((rv = row_append(m, f, cp.fam_n, &cp.fam)) != 0)
            return rv;
    } else {
        cp.fam = prev->fam;
        cp.fam_n = prev->fam_n;
    }
    if (c->qualifier) {
        cp.qual_n = c->qualifier->value.len;
        if ((rv = row_append(m, c->qualifier->value.data, cp.qual_n, &cp.qual)) != 0)
            return rv;
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
    cp.val_n = c->value.len;
    if ((rv = row_append(m, c->value.data, cp.val_n, &cp.val)) != 0)
        return rv;
    if (pt_array_reserve(&m->cells, &m->cells_cap, m->ncells + 1, sizeof(*m->cells), 0) != 0)
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
    int rv = row_append(m, c->row_key.data, c->row_key.len, NULL);
    if (rv != 0)
        return rv;
    m->key_n = c->row_key.len;
    return start_cell(m, c);
}

static int on_new_cell(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    if (is_reset(c))
        return reset_row(m, c);
    if (c->row_key.len && !pt_slice_eq((pt_slice){c->row_key.data, c->row_key.len},
                                       (pt_slice){pt_buf_data(&m->row), m->key_n}))
        return merge_fail(m, PT_EINTERNAL, "a new row key without a commit");
    return start_cell(m, c);
}

/* A later piece of a split cell. */
static int on_cell_value(pt_bt_merger *m, const Bigtable__ReadRowsResponse__CellChunk *c)
{
    if (is_reset(c))
        return reset_row(m, c);
    if (c->row_key.len || c->family_name || c->qualifier || c->timestamp_micros || c->n_labels)
        return merge_fail(m, PT_EINTERNAL, "a split cell's continuation names a cell");
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
    int rv = row_append(m, c->value.data, c->value.len, NULL);
    if (rv != 0)
        return rv;
    m->cells[m->ncells - 1].val_n += c->value.len;
    m->remaining -= (int64_t)c->value.len;
    if (c->value_size > 0)
        return 0;
    m->state = NEW_CELL;
    return is_commit(c) ? commit_row(m) : 0;
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
 * Resuming: the ranges left after the resume point
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

/* ============================================================================
 * Splitting: cut points among sampled keys
 * ========================================================================== */

/* The first sample whose key is > key (or >= key when inclusive). */
static size_t first_after(const pt_bt_sample *s, size_t n, pt_slice key, int inclusive)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = pt_slice_cmp(s[mid].key, key);
        if (c > 0 || (inclusive && c == 0))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

size_t pt_bt_split_points(const pt_bt_sample *s, size_t n, int64_t total, pt_slice start,
                          pt_slice end, size_t k, int64_t min_bytes, size_t *out)
{
    /* A cut must leave both pieces non-empty as ranges: keys strictly inside. */
    size_t lo = first_after(s, n, start, 0);
    size_t hi = end.n ? first_after(s, n, end, 1) : n;
    if (lo >= hi || k < 2)
        return 0;
    /* The range's bytes lie between the samples around it. */
    int64_t from = lo > 0 ? s[lo - 1].offset : 0;
    int64_t to = hi < n ? s[hi].offset : total;
    int64_t bytes = to > from ? to - from : 0;
    size_t pieces = k;
    if (min_bytes > 0 && bytes / min_bytes < (int64_t)pieces)
        pieces = (size_t)(bytes / min_bytes);
    if (pieces > hi - lo + 1)
        pieces = hi - lo + 1;
    if (pieces < 2)
        return 0;
    size_t m = 0, j = lo;
    for (size_t p = 1; p < pieces; p++) {
        int64_t target = from + bytes / (int64_t)pieces * (int64_t)p;
        /* The sample nearest the target, from j on, keeping one for each later cut. */
        size_t last = hi - 1 - (pieces - 1 - p);
        while (j < last && s[j + 1].offset <= target)
            j++;
        if (j < last && s[j].offset < target && s[j + 1].offset - target < target - s[j].offset)
            j++;
        out[m++] = j++;
    }
    return m;
}
