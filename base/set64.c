#include "set64.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"

/* The slot holding key, or the empty slot where it goes. */
static size_t probe(const uint64_t *slot, size_t mask, uint64_t key)
{
    size_t i = key & mask;
    while (slot[i] && slot[i] != key)
        i = (i + 1) & mask;
    return i;
}

int pt_set64_has(const pt_set64 *s, uint64_t key)
{
    return s->slot && s->slot[probe(s->slot, s->mask, key)] == key;
}

int pt_set64_add(pt_set64 *s, uint64_t key)
{
    size_t i = s->slot ? probe(s->slot, s->mask, key) : 0;
    if (s->slot && s->slot[i] == key)
        return 0;
    if ((s->n + 1) * 2 > (s->slot ? s->mask + 1 : 0)) {
        size_t slots = s->slot ? 2 * (s->mask + 1) : 256;
        uint64_t *ns = calloc(slots, sizeof(*ns));
        if (!ns)
            return PT_ENOMEM;
        for (size_t j = 0; s->slot && j <= s->mask; j++)
            if (s->slot[j])
                ns[probe(ns, slots - 1, s->slot[j])] = s->slot[j];
        free(s->slot);
        s->slot = ns;
        s->mask = slots - 1;
        i = probe(s->slot, s->mask, key); /* its place in the new table */
    }
    s->slot[i] = key;
    s->n++;
    return 1;
}

void pt_set64_clear(pt_set64 *s)
{
    if (s->slot)
        memset(s->slot, 0, (s->mask + 1) * sizeof(*s->slot));
    s->n = 0;
}

void pt_set64_free(pt_set64 *s)
{
    free(s->slot);
    *s = (pt_set64){0};
}
