/* Exemplar rows and cells (exemplar.h). */
#include "exemplar.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

#include "bytes.h"
#include "error.h"
#include "store.h"

void pt_exemplar_row_key(uint8_t *dst, pt_slice sid, int64_t base)
{
    pt_row_key(dst, sid, base);
    dst[sid.n + 1] = '#'; /* sid ",#" base: beside the data rows, never inside their ranges */
}

static size_t runes(pt_slice s)
{
    size_t n = 0;
    for (size_t i = 0; i < s.n; i++)
        n += (s.p[i] & 0xc0) != 0x80;
    return n;
}

int pt_exemplar_labels_check(const pt_label *ls, size_t n, char *why, size_t whylen)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        pt_slice name = ls[i].name, value = ls[i].value;
        if (name.n == 0) {
            snprintf(why, whylen, "an exemplar label has an empty name");
            return -1;
        }
        if (!pt_utf8_valid(name) || !pt_utf8_valid(value)) {
            snprintf(why, whylen, "exemplar label \"%.*s\" is not valid UTF-8",
                     (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
            return -1;
        }
        total += runes(name) + runes(value);
        if (total > PT_EXEMPLAR_MAX_RUNES) {
            snprintf(why, whylen, "exemplar labels are longer than %d UTF-8 runes (names and "
                     "values together, the OpenMetrics limit)", PT_EXEMPLAR_MAX_RUNES);
            return -1;
        }
        /* At most 128 labels get here (each name is a rune at least). */
        for (size_t j = 0; j < i; j++)
            if (pt_slice_eq(ls[j].name, name)) {
                snprintf(why, whylen, "duplicate exemplar label name \"%.*s\"",
                         (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
                return -1;
            }
    }
    return 0;
}

size_t pt_exemplar_cell_size(const pt_label *ls, size_t n)
{
    return 4 + 8 + pt_labels_encoded_len(ls, n);
}

void pt_exemplar_cell_encode(uint8_t *dst, uint32_t off, double v, const pt_label *ls, size_t n)
{
    uint64_t bits;
    memcpy(&bits, &v, 8);
    pt_put_be32(dst, off);
    pt_put_be64(dst + 4, bits);
    pt_labels_encode(dst + 12, ls, n);
}

int pt_exemplar_cell_decode(pt_arena *a, int64_t base, pt_slice val, int64_t *t, double *v,
                            pt_label **ls, size_t *n)
{
    if (val.n < 12)
        return PT_EINTERNAL;
    *t = base + pt_get_be32(val.p);
    uint64_t bits = pt_get_be64(val.p + 4);
    memcpy(v, &bits, 8);
    *ls = NULL;
    *n = 0;
    if (val.n == 12)
        return 0;
    long k = pt_labels_decode(a, (pt_slice){val.p + 12, val.n - 12}, ls);
    if (k < 0)
        return PT_EINTERNAL;
    *n = (size_t)k;
    return 0;
}

/* ---- out-of-order exemplars ---- */

enum { NEWEST_LOCKS = 64 };

typedef struct newest_slot {
    uint64_t h; /* 0: empty */
    int64_t ts;
} newest_slot;

struct pt_exemplar_newest {
    size_t mask;
    pthread_mutex_t mu[NEWEST_LOCKS];
    newest_slot slot[];
};

pt_exemplar_newest *pt_exemplar_newest_new(size_t slots)
{
    if (slots == 0 || (slots & (slots - 1)) != 0)
        return NULL;
    pt_exemplar_newest *t = calloc(1, sizeof(*t) + slots * sizeof(newest_slot));
    if (!t)
        return NULL;
    t->mask = slots - 1;
    for (int i = 0; i < NEWEST_LOCKS; i++)
        pthread_mutex_init(&t->mu[i], NULL);
    return t;
}

void pt_exemplar_newest_free(pt_exemplar_newest *t)
{
    if (!t)
        return;
    for (int i = 0; i < NEWEST_LOCKS; i++)
        pthread_mutex_destroy(&t->mu[i]);
    free(t);
}

int64_t pt_exemplar_newest_get(pt_exemplar_newest *t, uint64_t h)
{
    size_t i = h & t->mask;
    pthread_mutex_t *mu = &t->mu[i % NEWEST_LOCKS];
    pthread_mutex_lock(mu);
    int64_t ts = t->slot[i].h == h ? t->slot[i].ts : -1;
    pthread_mutex_unlock(mu);
    return ts;
}

void pt_exemplar_newest_put(pt_exemplar_newest *t, uint64_t h, int64_t ts)
{
    size_t i = h & t->mask;
    pthread_mutex_t *mu = &t->mu[i % NEWEST_LOCKS];
    pthread_mutex_lock(mu);
    newest_slot *s = &t->slot[i];
    if (s->h != h)
        *s = (newest_slot){h, ts};
    else if (ts > s->ts)
        s->ts = ts;
    pthread_mutex_unlock(mu);
}

uint64_t pt_exemplar_series_hash(pt_slice sid, uint64_t seed)
{
    return XXH3_64bits_withSeed(sid.p, sid.n, seed) | 1;
}

/* ---- marks ---- */

#define MARK_SLOTS 1024

typedef struct mark_slot {
    uint64_t salt;
    int64_t base; /* -1: empty */
    int marked;   /* 0: known unmarked (an exclusive store) */
} mark_slot;

struct pt_exemplar_marks {
    pthread_mutex_t mu;
    int legacy;
    uint64_t adds; /* marks added so far: an unmarked answer read before one is stale */
    mark_slot slot[MARK_SLOTS];
};

pt_exemplar_marks *pt_exemplar_marks_new(void)
{
    pt_exemplar_marks *m = calloc(1, sizeof(*m));
    if (!m)
        return NULL;
    pthread_mutex_init(&m->mu, NULL);
    for (size_t i = 0; i < MARK_SLOTS; i++)
        m->slot[i].base = -1;
    return m;
}

void pt_exemplar_marks_free(pt_exemplar_marks *m)
{
    if (!m)
        return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static mark_slot *mark_slot_of(pt_exemplar_marks *m, uint64_t salt, int64_t base)
{
    uint64_t h = XXH3_64bits_withSeed(&base, sizeof(base), salt);
    return &m->slot[h % MARK_SLOTS];
}

int pt_exemplar_marks_lookup(pt_exemplar_marks *m, uint64_t salt, int64_t base, uint64_t *when)
{
    pthread_mutex_lock(&m->mu);
    const mark_slot *s = mark_slot_of(m, salt, base);
    int r = m->legacy ? 1 : s->base == base && s->salt == salt ? s->marked : -1;
    if (when)
        *when = m->adds;
    pthread_mutex_unlock(&m->mu);
    return r;
}

int pt_exemplar_marks_known(pt_exemplar_marks *m, uint64_t salt, int64_t base)
{
    return pt_exemplar_marks_lookup(m, salt, base, NULL) == 1;
}

void pt_exemplar_marks_add(pt_exemplar_marks *m, uint64_t salt, int64_t base)
{
    pthread_mutex_lock(&m->mu);
    *mark_slot_of(m, salt, base) = (mark_slot){salt, base, 1};
    m->adds++;
    pthread_mutex_unlock(&m->mu);
}

void pt_exemplar_marks_add_unmarked(pt_exemplar_marks *m, uint64_t salt, int64_t base,
                                    uint64_t when)
{
    pthread_mutex_lock(&m->mu);
    if (m->adds == when)
        *mark_slot_of(m, salt, base) = (mark_slot){salt, base, 0};
    pthread_mutex_unlock(&m->mu);
}

void pt_exemplar_marks_set_legacy(pt_exemplar_marks *m)
{
    pthread_mutex_lock(&m->mu);
    m->legacy = 1;
    pthread_mutex_unlock(&m->mu);
}

void pt_exemplar_mark_qual(uint8_t *dst, int64_t base)
{
    pt_put_be64(dst, (uint64_t)base);
}

typedef struct mark_find {
    pt_slice qual;
    int found;
} mark_find;

static int on_mark_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)value;
    mark_find *f = ud;
    f->found |= pt_slice_eq(qual, f->qual);
    return 0;
}

int pt_exemplar_marks_read(pt_backend *be, pt_slice qual, int *found)
{
    static const uint8_t row[] = PT_EXEMPLAR_MARK_ROW;
    uint8_t end[PT_EXEMPLAR_MARK_QUAL_LEN + 1];
    if (qual.n > PT_EXEMPLAR_MARK_QUAL_LEN)
        return PT_EINTERNAL;
    /* [qual, qual ‖ 0x00): the one cell. */
    memcpy(end, qual.p, qual.n);
    end[qual.n] = 0;
    mark_find f = {qual, 0};
    int rv = pt_backend_scan_row(be, PT_TABLE_INDEX, (pt_slice){row, sizeof(row) - 1}, qual,
                                 (pt_slice){end, qual.n + 1}, on_mark_cell, &f);
    *found = f.found;
    return rv;
}
