/*
 * Multi-tenancy (docs/operations.md, "Tenants"): tenant ids, each tenant's row space, and the
 * per-tenant limits and counters.
 *
 * Row space: every row key a tenant's requests read or write, in both tables, is the key
 * promtable would write without tenancy preceded by PT_TENANT_MARK, the tenant id and
 * PT_TENANT_MARK again. A key without tenancy never holds a byte below 0x20 (row keys
 * escape them), so no tenant's key is one of those; an id never holds the mark, so no
 * tenant's prefix is the start of another's ("a" gives 01 'a' 01, "ab" gives 01 'a' 'b'
 * 01: they differ at the third byte). The view (pt_tenant_view) adds the prefix to every
 * key and range it passes down and takes it off every row it hands back, so the code above
 * it cannot name a row outside the tenant's space.
 */
#ifndef PT_TENANT_H
#define PT_TENANT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "slice.h"

#define PT_TENANT_MAX 150
#define PT_TENANT_MARK 0x01
/* The longest prefix: mark, id, mark. Row keys are built PT_TENANT_PREFIX_MAX shorter
 * than Bigtable's cap when tenancy is on: their key limit (rowkey.h, pt_store.key_limit). */
#define PT_TENANT_PREFIX_MAX (PT_TENANT_MAX + 2)
#define PT_TENANT_KEY_LIMIT (PT_MAX_ROW_KEY - PT_TENANT_PREFIX_MAX)

/* 1 when id (n bytes) is a valid tenant id: 1 to 150 bytes of [A-Za-z0-9!._*'()-], not
 * "." or "..". Else 0 with msg saying what is wrong. */
int pt_tenant_valid(const char *id, size_t n, char *msg, size_t msglen);

/* A tenant's view of a backend: a pt_backend whose keys are the tenant's. Lives as long
 * as the request that made it (or the check that walks the tenant's space). */
typedef struct pt_tenant_view {
    pt_backend be;           /* what the store uses */
    pt_backend *inner;
    uint8_t prefix[PT_TENANT_PREFIX_MAX];
    size_t plen;
} pt_tenant_view;

/* id must be valid (pt_tenant_valid). */
void pt_tenant_view_init(pt_tenant_view *v, pt_backend *inner, const char *id, size_t n);
/* The prefix of every key of tenant id: written into dst (PT_TENANT_PREFIX_MAX bytes). */
size_t pt_tenant_prefix(uint8_t *dst, const char *id, size_t n);

/* 64-bit hash of a tenant id, never 0: what tenant stores mix into cache keys. */
uint64_t pt_tenant_salt(const char *id, size_t n);

/*
 * The tenants this process has seen: limits and counters per tenant.
 *
 * Active series of a tenant: distinct series (label sets) it has written samples for
 * since the current index bucket began (wall clock, index.bucket; UTC days by default).
 * Every write checks its series against the tenant's set (one lock per request); the set
 * empties at the tenant's first write in a new bucket. A set holds at most max_series
 * entries when that limit is set; without it, all tenants' sets together stop growing at
 * track_max entries (series past it are admitted, not counted).
 * 8 bytes a series (a 64-bit hash of it) in an open-addressing table up to half full.
 */
typedef struct pt_tenants pt_tenants;
typedef struct pt_tenant pt_tenant;

typedef struct pt_tenant_limits {
    size_t max_series;          /* active series per tenant, 0 = no limit */
    uint64_t max_samples_per_s; /* samples, histograms and exemplars per second, 0 = none */
    size_t max_tenants;         /* tenants kept at once */
    size_t metrics_tenants;     /* tenants with their own label values on /metrics */
    size_t track_max;           /* entries all sets hold together without a series limit */
    int64_t bucket_ms;          /* index.bucket */
} pt_tenant_limits;

pt_tenants *pt_tenants_new(const pt_tenant_limits *lim);
void pt_tenants_free(pt_tenants *ts);
/* Copies the ids of up to max of the tenants kept now into ids; returns how many. */
size_t pt_tenants_ids(pt_tenants *ts, char (*ids)[PT_TENANT_MAX + 1], size_t max);

/* The tenant of a write (only writes make tenants: a read of an id never written reads
 * its empty row space without one), with a reference the caller drops with
 * pt_tenant_put; NULL
 * when max_tenants are kept and none of them has been idle for a whole index bucket
 * (msg says so: 429), or out of memory. now_ms: wall clock. */
pt_tenant *pt_tenant_get(pt_tenants *ts, const char *id, int64_t now_ms, char *msg,
                         size_t msglen);
void pt_tenant_put(pt_tenants *ts, pt_tenant *t);
const char *pt_tenant_id(const pt_tenant *t);

/* Takes n samples from the tenant's rate: 1 when they fit (and are counted), 0 when the
 * request is refused (msg names the limit and the tenant). The rate is a token bucket of
 * max_samples_per_s tokens a second holding at most one second's worth. */
int pt_tenant_take(pt_tenant *t, uint64_t n, int64_t now_ms, char *msg, size_t msglen);

/* The write path's series gate (pt_store.gate): ok[i] = 1 for each series hash that is
 * active or fits under the limit (and is now active), 0 for refused ones; returns how
 * many were refused, msg set when any was. */
size_t pt_tenant_gate(void *tenant, const uint64_t *series, size_t n, uint8_t *ok, char *msg,
                      size_t msglen);

/* After a write: samples stored and refused (invalid or over a limit). */
void pt_tenant_count(pt_tenant *t, uint64_t accepted, uint64_t rejected);

/* Appends the per-tenant metrics (Prometheus text format) to an arena buffer; returns
 * its length and sets *out, or -1 when out of memory. */
long pt_tenants_render(pt_tenants *ts, pt_arena *a, const char **out);

#endif
