#include "meta.h"

#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "clock.h"
#include "error.h"
#include "rowkey.h"

static const char meta_prefix[] = PT_META_ROW_PREFIX;
#define META_PREFIX_LEN (sizeof(meta_prefix) - 1)
static const uint8_t meta_qual[] = {'m'};

static const char *const type_names[PT_META_TYPES] = {
    "unknown", "counter", "gauge", "histogram", "gaugehistogram", "summary", "info", "stateset"};

const char *pt_meta_type_name(int type)
{
    return type > 0 && type < PT_META_TYPES ? type_names[type] : type_names[0];
}

void pt_meta_begin(pt_meta_batch *b, pt_store *st, pt_arena *a)
{
    memset(b, 0, sizeof(*b));
    b->st = st;
    b->a = a;
    pt_buf_init_arena(&b->muts, a, 0);
    pt_buf_init_arena(&b->keys, a, 0);
}

/* "==meta," part(family) ",": into dst (4 × family.n + PT_DIGEST_LEN + 8 bytes). */
static uint8_t *family_prefix(uint8_t *dst, pt_slice family)
{
    memcpy(dst, meta_prefix, META_PREFIX_LEN);
    uint8_t *e = pt_index_part(dst + META_PREFIX_LEN, family);
    *e++ = ',';
    return e;
}

#define FAMILY_PREFIX_MAX(n) (4 * (n) + PT_DIGEST_LEN + META_PREFIX_LEN + 1)

int pt_meta_put(pt_meta_batch *b, pt_slice family, int type, pt_slice help, pt_slice unit)
{
    if (family.n == 0 || help.n > PT_META_HELP_MAX || !pt_utf8_valid(family) ||
        !pt_utf8_valid(help) || !pt_utf8_valid(unit)) {
        b->skipped++;
        return PT_EBADREQ;
    }
    const char *tn = pt_meta_type_name(type);
    pt_label pairs[2] = {{family, pt_slice_str(tn)}, {help, unit}};
    size_t vlen = pt_labels_encoded_len(pairs, 2);
    uint8_t *val = pt_arena_alloc(b->a, vlen);
    if (!val)
        return PT_ENOMEM;
    pt_labels_encode(val, pairs, 2);
    /* Known when written today: seeds below -1 are no (series, bucket) or values-row key. */
    int64_t t = pt_wall_ms();
    pt_index_key key = pt_store_key(b->st, (pt_slice){val, vlen}, -2 - t / 86400000);
    uint8_t found;
    pt_index_cache_lookup(b->st->cache, &key, 1, &found);
    if (found)
        return 0;
    uint8_t *row = pt_arena_alloc(b->a, FAMILY_PREFIX_MAX(family.n) + PT_REF_HEX);
    if (!row)
        return PT_ENOMEM;
    uint8_t *e = family_prefix(row, family);
    e = pt_ref_hex(e, XXH3_64bits(val, vlen));
    pt_mutation m = {.table = PT_TABLE_INDEX,
                     .row = {row, (size_t)(e - row)},
                     .qual = {meta_qual, sizeof(meta_qual)},
                     .value = {val, vlen},
                     .version_us = t * 1000};
    int rv = pt_buf_append(&b->muts, &m, sizeof(m));
    return rv ? rv : pt_buf_append(&b->keys, &key, sizeof(key));
}

int pt_meta_commit(pt_meta_batch *b)
{
    size_t n = b->muts.len / sizeof(pt_mutation);
    if (n == 0)
        return 0;
    int rv = pt_backend_write(b->st->be, (const pt_mutation *)(const void *)b->muts.p, n);
    if (rv == 0) {
        pt_index_cache_add(b->st->cache, (const pt_index_key *)(const void *)b->keys.p, n);
        b->st->stats->metadata_written += n;
    }
    pt_buf_reset(&b->muts);
    pt_buf_reset(&b->keys);
    return rv;
}

typedef struct scanner {
    pt_meta_fn fn;
    void *ud;
    pt_arena a; /* the decoded pairs of one cell */
} scanner;

static int on_meta(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual;
    scanner *s = ud;
    pt_label *pairs;
    pt_arena_reset(&s->a);
    long n = pt_labels_decode(&s->a, value, &pairs);
    if (n == PT_ENOMEM)
        return PT_ENOMEM;
    if (n != 2)
        return 0; /* not a metadata cell this version knows: skip it */
    pt_meta_entry e = {.family = pairs[0].name,
                       .type = pairs[0].value,
                       .help = pairs[1].name,
                       .unit = pairs[1].value};
    return s->fn(s->ud, &e);
}

int pt_meta_scan(pt_store *st, pt_slice family, pt_meta_fn fn, void *ud)
{
    /* The range's keys live in their own arena; cells are decoded into s.a, reset per
     * cell. */
    pt_arena keys;
    pt_arena_init(&keys, 0, 0);
    scanner s = {fn, ud, {0}};
    pt_arena_init(&s.a, 4096, 0);
    int rv = PT_ENOMEM;
    size_t cap = FAMILY_PREFIX_MAX(family.n);
    uint8_t *start = pt_arena_alloc(&keys, cap), *end = pt_arena_alloc(&keys, cap);
    if (start && end) {
        size_t n = META_PREFIX_LEN;
        if (family.n)
            n = (size_t)(family_prefix(start, family) - start);
        else
            memcpy(start, meta_prefix, n);
        pt_row_range r = {{start, n}, {0}};
        pt_prefix_end(end, r.start, &r.end); /* the prefix ends in ',', never 0xff */
        size_t visited = 0;
        pt_scan sc = {.table = PT_TABLE_INDEX, .ranges = &r, .nranges = 1, .visited = &visited};
        rv = pt_backend_scan(st->be, &sc, on_meta, &s);
        st->stats->read_rows_scanned += visited;
    }
    pt_arena_free(&s.a);
    pt_arena_free(&keys);
    return rv;
}
