/* The one list of backends. Adding a backend = one folder under backends/ and one line here. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "error.h"
#include "schema.h"

extern const pt_backend_ops pt_backend_embedded;
extern const pt_backend_ops pt_backend_faulty;
extern const pt_backend_ops pt_backend_bigtable;

static const pt_backend_ops *const registry[] = {
    &pt_backend_embedded,
    &pt_backend_faulty,
    &pt_backend_bigtable,
};

#define NBACKENDS (sizeof(registry) / sizeof(registry[0]))

const pt_backend_ops *pt_backend_find(const char *name)
{
    for (size_t i = 0; i < NBACKENDS; i++)
        if (strcmp(registry[i]->name, name) == 0)
            return registry[i];
    return NULL;
}

const pt_backend_ops *const *pt_backend_list(size_t *n)
{
    _Static_assert(NBACKENDS <= PT_MAX_BACKENDS, "raise PT_MAX_BACKENDS");
    *n = NBACKENDS;
    return registry;
}

int pt_backend_open(pt_backend *b, const pt_backend_ops *ops, const pt_backend_config *cfg,
                    char *err, size_t errlen)
{
    b->ops = ops;
    b->state = calloc(1, ops->state_size ? ops->state_size : 1);
    if (!b->state)
        return PT_ENOMEM;
    int rv = ops->open(b->state, cfg, err, errlen);
    if (rv != 0) {
        free(b->state);
        b->state = NULL;
    }
    return rv;
}

void pt_backend_close(pt_backend *b)
{
    if (!b->state)
        return;
    b->ops->close(b->state);
    free(b->state);
    b->state = NULL;
}

int pt_mutation_ptr_cmp(const void *pa, const void *pb)
{
    const pt_mutation *a = *(const pt_mutation *const *)pa, *b = *(const pt_mutation *const *)pb;
    if (a->table != b->table)
        return a->table < b->table ? -1 : 1;
    int c = pt_slice_cmp(a->row, b->row);
    return c ? c : (a > b) - (a < b);
}

int pt_backend_scan_row(pt_backend *b, pt_table t, pt_slice key, pt_slice qual_start,
                        pt_slice qual_end, pt_cell_fn fn, void *ud)
{
    uint8_t end[PT_MAX_ROW_KEY + 1];
    if (key.n > PT_MAX_ROW_KEY)
        return PT_EINTERNAL;
    memcpy(end, key.p, key.n);
    end[key.n] = 0;
    pt_row_range r = {.start = key, .end = {end, key.n + 1}};
    pt_scan s = {.table = t,
                 .ranges = &r,
                 .nranges = 1,
                 .qual_start = qual_start,
                 .qual_end = qual_end,
                 .row_limit = 1};
    return pt_backend_scan(b, &s, fn, ud);
}
