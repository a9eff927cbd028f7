/*
 * A store's lifetime: the caches it keeps over its backend, made and freed in one place for
 * the daemon and the test fixtures alike.
 */
#include "store.h"

#include <stdlib.h>

#include "error.h"

int pt_store_open(pt_store *st, pt_backend *be, const pt_store_caches *c)
{
    st->be = be;
    st->own_stats = c->stats ? NULL : calloc(1, sizeof(*st->own_stats));
    st->stats = c->stats ? c->stats : st->own_stats;
    st->cache = pt_index_cache_new(c->index_entries ? c->index_entries : 1 << 16);
    st->hints = c->hints ? pt_list_hints_new() : NULL;
    st->refs = c->series_bytes ? pt_ref_cache_new(c->series_bytes) : NULL;
    st->lists = c->list_bytes ? pt_ref_cache_new(c->list_bytes) : NULL;
    st->xnewest = c->exemplars ? pt_exemplar_newest_new(PT_EXEMPLAR_NEWEST_SLOTS) : NULL;
    st->xmarks = c->exemplars ? pt_exemplar_marks_new() : NULL;
    if (!st->stats || !st->cache || (c->hints && !st->hints) || (c->series_bytes && !st->refs) ||
        (c->list_bytes && !st->lists) || (c->exemplars && (!st->xnewest || !st->xmarks))) {
        pt_store_close(st);
        return PT_ENOMEM;
    }
    return 0;
}

void pt_store_close(pt_store *st)
{
    pt_index_cache_free(st->cache);
    pt_list_hints_free(st->hints);
    pt_ref_cache_free(st->refs);
    pt_ref_cache_free(st->lists);
    pt_exemplar_newest_free(st->xnewest);
    pt_exemplar_marks_free(st->xmarks);
    st->cache = NULL;
    st->hints = NULL;
    st->refs = st->lists = NULL;
    st->xnewest = NULL;
    st->xmarks = NULL;
    if (st->own_stats) {
        free(st->own_stats);
        st->stats = st->own_stats = NULL;
    }
}
