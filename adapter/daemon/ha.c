/* HA pairs: the election per (tenant, cluster), local or through lease rows (ha.h). */
#include "ha.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "error.h"
#include "metrics.h"

/* "==ha," hex(tenant) "," hex(cluster): "==" then a letter that no hex digit is, so no
 * series row ("==<16 hex>,@..."), metadata row ("==meta,") or the format marker
 * ("==format") can have it; the hex keeps the key free of escapes and of 0x00. */
#define LEASE_PREFIX PT_HA_LEASE_PREFIX
#define LEASE_PREFIX_LEN (sizeof(LEASE_PREFIX) - 1)
#define KEY_MAX (LEASE_PREFIX_LEN + 2 * PT_HA_MAX_TENANT + 1 + 2 * PT_HA_MAX_VALUE)
/* "<ms> <hex(replica)>" */
#define VALUE_MAX (20 + 1 + 2 * PT_HA_MAX_VALUE)
/* CheckAndMutateRow attempts lost to another process before the request gets 503. */
#define CAS_ATTEMPTS 4

static const uint8_t lease_qual[] = {'l'};

/* lookup's answers for a full table: all pairs, or the tenant's. */
enum { FULL_ALL = 1, FULL_TENANT = 2 };

struct pt_ha_entry {
    pthread_mutex_t mu;
    uint64_t hash;
    pt_ha_entry *next; /* in its hash chain (under the tracker's mu) */
    struct ha_tenant *owner;
    size_t refs;       /* requests holding it (under the tracker's mu) */
    int64_t touched_ms; /* last decision asked of it (under the tracker's mu) */
    size_t tenant_n, cluster_n, key_n;
    uint8_t tenant[PT_HA_MAX_TENANT], cluster[PT_HA_MAX_VALUE];
    uint8_t key[KEY_MAX + 1]; /* the lease row, then the 0x00 that ends its range */
    /* What this process knows of the election (under mu). */
    int known; /* a replica is elected */
    size_t replica_n;
    uint8_t replica[PT_HA_MAX_VALUE];
    int64_t lease_ms; /* the lease's time (when last refreshed or won) */
    int64_t read_ms;  /* when this process last read or wrote the lease row */
    int64_t seen_ms;  /* when the elected replica last wrote through this process */
    size_t stored_n;  /* the lease cell as read or written: what check_and_set expects */
    uint8_t stored[VALUE_MAX];
    _Atomic uint64_t accepted, deduplicated, elections;
};

/* A tenant with pairs tracked, and how many. */
typedef struct ha_tenant {
    struct ha_tenant *next;
    uint64_t hash;
    size_t pairs;
    size_t id_n;
    uint8_t id[PT_HA_MAX_TENANT];
} ha_tenant;

struct pt_ha {
    char *cluster_label, *replica_label;
    int64_t failover_ms, update_ms;
    pt_backend *be; /* NULL: local election */
    int64_t (*now_ms)(void *ud);
    void *clock_ud;
    pthread_mutex_t mu; /* the tables and what entries keep under it */
    size_t max, per_tenant, n, mask;
    pt_ha_entry **chains; /* by hash of the lease key */
    ha_tenant **tenants;  /* by hash of the tenant id, same size */
    /* No entry can be idle past the failover timeout before this: a full table is not
     * swept again until then. */
    int64_t sweep_ms;
};

static int64_t wall_ms(void *ud)
{
    (void)ud;
    return pt_wall_ms();
}

pt_ha *pt_ha_new(const pt_ha_opts *o)
{
    pt_ha *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    size_t chains = 16;
    while (chains < o->max_clusters)
        chains <<= 1;
    h->cluster_label = strdup(o->cluster_label);
    h->replica_label = strdup(o->replica_label);
    h->chains = calloc(chains, sizeof(*h->chains));
    h->tenants = calloc(chains, sizeof(*h->tenants));
    if (!h->cluster_label || !h->replica_label || !h->chains || !h->tenants) {
        pt_ha_free(h);
        return NULL;
    }
    h->failover_ms = o->failover_timeout_ms;
    h->update_ms = o->update_interval_ms;
    h->be = o->be && o->be->ops->check_and_set ? o->be : NULL;
    h->now_ms = o->now_ms ? o->now_ms : wall_ms;
    h->clock_ud = o->clock_ud;
    h->max = o->max_clusters;
    h->per_tenant = o->max_per_tenant ? o->max_per_tenant : o->max_clusters;
    h->mask = chains - 1;
    h->sweep_ms = INT64_MIN;
    pthread_mutex_init(&h->mu, NULL);
    return h;
}

void pt_ha_free(pt_ha *h)
{
    if (!h)
        return;
    for (size_t i = 0; h->chains && i <= h->mask; i++)
        for (pt_ha_entry *e = h->chains[i], *next; e; e = next) {
            next = e->next;
            pthread_mutex_destroy(&e->mu);
            free(e);
        }
    for (size_t i = 0; h->tenants && i <= h->mask; i++)
        for (ha_tenant *t = h->tenants[i], *next; t; t = next) {
            next = t->next;
            free(t);
        }
    if (h->chains && h->tenants)
        pthread_mutex_destroy(&h->mu);
    free(h->chains);
    free(h->tenants);
    free(h->cluster_label);
    free(h->replica_label);
    free(h);
}

int pt_ha_shared(const pt_ha *h)
{
    return h->be != NULL;
}

static int name_is(pt_slice name, const char *s)
{
    size_t n = strlen(s);
    return name.n == n && memcmp(name.p, s, n) == 0;
}

int pt_ha_labels(const pt_ha *h, const pt_label *ls, size_t n, size_t *cluster, size_t *replica)
{
    int found = 0;
    for (size_t i = 0; i < n && found != 3; i++) {
        if (name_is(ls[i].name, h->cluster_label))
            *cluster = i, found |= 1;
        else if (name_is(ls[i].name, h->replica_label))
            *replica = i, found |= 2;
    }
    return found == 3;
}

static uint8_t *put_hex(uint8_t *o, pt_slice s)
{
    static const char hex[] = "0123456789abcdef";
    for (size_t i = 0; i < s.n; i++) {
        *o++ = (uint8_t)hex[s.p[i] >> 4];
        *o++ = (uint8_t)hex[s.p[i] & 15];
    }
    return o;
}

static int unhex(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

/* The lease row key of (tenant, cluster) into k (KEY_MAX bytes); returns its length. */
static size_t lease_key(uint8_t *k, pt_slice tenant, pt_slice cluster)
{
    memcpy(k, LEASE_PREFIX, LEASE_PREFIX_LEN);
    uint8_t *e = put_hex(k + LEASE_PREFIX_LEN, tenant);
    *e++ = ',';
    e = put_hex(e, cluster);
    return (size_t)(e - k);
}

/* FNV-1a over the key. */
static uint64_t key_hash(const uint8_t *k, size_t n)
{
    uint64_t x = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++)
        x = (x ^ k[i]) * 0x100000001b3ULL;
    return x;
}

/* Under h->mu: the link that holds the tenant's record (*link NULL when it has none). */
static ha_tenant **tenant_link(pt_ha *h, pt_slice tenant, uint64_t hash)
{
    ha_tenant **at = &h->tenants[hash & h->mask];
    while (*at && !((*at)->hash == hash && pt_slice_eq((pt_slice){(*at)->id, (*at)->id_n}, tenant)))
        at = &(*at)->next;
    return at;
}

/* Under h->mu: forgets every pair nobody holds and nobody asked about for longer than
 * the failover timeout. Forgetting one changes no verdict: its elected replica has been
 * silent that long, so the next replica to write would be elected anyway, and a shared
 * election lives on in its lease row. Sets when the next sweep can find one; a pair held
 * by a request is looked at again a failover timeout later, so that a long request does
 * not make every refused one sweep. */
static void sweep(pt_ha *h, int64_t now)
{
    int64_t next = INT64_MAX;
    for (size_t i = 0; i <= h->mask; i++)
        for (pt_ha_entry **at = &h->chains[i]; *at;) {
            pt_ha_entry *e = *at;
            if (e->refs > 0 || now - e->touched_ms <= h->failover_ms) {
                int64_t idle_at = (e->refs > 0 ? now : e->touched_ms) + h->failover_ms + 1;
                next = idle_at < next ? idle_at : next;
                at = &e->next;
                continue;
            }
            *at = e->next;
            ha_tenant *t = e->owner;
            if (--t->pairs == 0) {
                ha_tenant **tl = tenant_link(h, (pt_slice){t->id, t->id_n}, t->hash);
                *tl = t->next;
                free(t);
            }
            pthread_mutex_destroy(&e->mu);
            free(e);
            h->n--;
        }
    h->sweep_ms = next;
}

/* The entry of (tenant, cluster) with a reference (pt_ha_release), made when new: 0,
 * PT_ETENANTLIMIT (msg says which limit) or PT_ENOMEM. */
static int lookup(pt_ha *h, pt_slice tenant, pt_slice cluster, int64_t now, pt_ha_entry **out)
{
    uint8_t k[KEY_MAX];
    size_t kn = lease_key(k, tenant, cluster);
    uint64_t hash = key_hash(k, kn), th = key_hash(tenant.p, tenant.n);
    int rv = 0;
    pthread_mutex_lock(&h->mu);
    pt_ha_entry **at = &h->chains[hash & h->mask], *e;
    while ((e = *at) != NULL && !(e->hash == hash && e->key_n == kn && memcmp(e->key, k, kn) == 0))
        at = &e->next;
    if (!e) {
        ha_tenant **tl = tenant_link(h, tenant, th);
        if ((h->n >= h->max || (*tl && (*tl)->pairs >= h->per_tenant)) && now >= h->sweep_ms) {
            sweep(h, now);
            tl = tenant_link(h, tenant, th); /* the sweep may have freed the record */
        }
        if (h->n >= h->max || (*tl && (*tl)->pairs >= h->per_tenant)) {
            rv = h->n >= h->max ? FULL_ALL : FULL_TENANT;
            goto out;
        }
        ha_tenant *t = *tl;
        if (!t && (t = calloc(1, sizeof(*t))) != NULL) {
            t->hash = th;
            memcpy(t->id, tenant.p, tenant.n);
            t->id_n = tenant.n;
            *tl = t;
        }
        if (!t || !(e = calloc(1, sizeof(*e)))) {
            if (t && t->pairs == 0) {
                *tl = t->next;
                free(t);
            }
            rv = PT_ENOMEM;
            goto out;
        }
        t->pairs++;
        pthread_mutex_init(&e->mu, NULL);
        e->hash = hash;
        e->owner = t;
        memcpy(e->key, k, kn);
        e->key[kn] = 0;
        e->key_n = kn;
        memcpy(e->tenant, tenant.p, tenant.n);
        e->tenant_n = tenant.n;
        memcpy(e->cluster, cluster.p, cluster.n);
        e->cluster_n = cluster.n;
        e->next = h->chains[hash & h->mask];
        h->chains[hash & h->mask] = e;
        h->n++;
    }
    e->refs++;
    e->touched_ms = now;
    *out = e;
out:
    pthread_mutex_unlock(&h->mu);
    return rv;
}

void pt_ha_release(pt_ha *h, pt_ha_entry *e)
{
    if (!e)
        return;
    pthread_mutex_lock(&h->mu);
    e->refs--;
    pthread_mutex_unlock(&h->mu);
}

static int is_elected(const pt_ha_entry *e, pt_slice replica)
{
    return e->known && e->replica_n == replica.n && memcmp(e->replica, replica.p, replica.n) == 0;
}

/* The entry now knows replica as elected with the lease at lease_ms; a change of
 * replica resets what was seen of the previous one. */
static void set_elected(pt_ha_entry *e, pt_slice replica, int64_t lease_ms)
{
    if (!is_elected(e, replica)) {
        memcpy(e->replica, replica.p, replica.n);
        e->replica_n = replica.n;
        e->seen_ms = lease_ms;
        e->known = 1;
    }
    e->lease_ms = lease_ms;
}

/* In memory only: the elected replica's last write here is the lease. */
static int decide_local(const pt_ha *h, pt_ha_entry *e, pt_slice replica, int64_t now)
{
    if (e->known && !is_elected(e, replica) && now - e->seen_ms <= h->failover_ms)
        return PT_HA_DROP;
    if (!is_elected(e, replica))
        atomic_fetch_add(&e->elections, 1);
    set_elected(e, replica, now);
    e->seen_ms = now;
    return PT_HA_ACCEPT;
}

/* The lease cell as read. */
typedef struct lease {
    int found, valid;
    int64_t ms;
    size_t replica_n;
    uint8_t replica[PT_HA_MAX_VALUE];
    size_t raw_n;
    uint8_t raw[VALUE_MAX];
} lease;

static int on_lease(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    lease *l = ud;
    if (qual.n != sizeof(lease_qual) || memcmp(qual.p, lease_qual, qual.n) != 0)
        return 0;
    l->found = 1;
    l->raw_n = value.n < sizeof(l->raw) ? value.n : sizeof(l->raw);
    memcpy(l->raw, value.p, l->raw_n);
    /* "<ms> <hex>": anything else reads as an expired lease, to be taken over. */
    size_t i = 0;
    int64_t ms = 0;
    while (i < value.n && i < 19 && value.p[i] >= '0' && value.p[i] <= '9')
        ms = ms * 10 + (value.p[i++] - '0');
    if (i == 0 || i >= value.n || value.p[i] != ' ' || value.n > sizeof(l->raw))
        return 1;
    size_t hn = value.n - i - 1;
    if (hn % 2 || hn / 2 > PT_HA_MAX_VALUE)
        return 1;
    for (size_t j = 0; j < hn / 2; j++) {
        int a = unhex(value.p[i + 1 + 2 * j]), b = unhex(value.p[i + 2 + 2 * j]);
        if (a < 0 || b < 0)
            return 1;
        l->replica[j] = (uint8_t)(a << 4 | b);
    }
    l->replica_n = hn / 2;
    l->ms = ms;
    l->valid = 1;
    return 1;
}

static int read_lease(pt_ha *h, pt_ha_entry *e, lease *l)
{
    memset(l, 0, offsetof(lease, replica));
    l->raw_n = 0;
    pt_m.ha_lease_reads++;
    int rv = pt_backend_scan_row(h->be, PT_TABLE_INDEX, (pt_slice){e->key, e->key_n},
                                 (pt_slice){0}, (pt_slice){0}, on_lease, l);
    if (rv != 0)
        pt_m.ha_lease_errors++;
    return rv;
}

/* Writes the lease "replica since at" where the cell holds l's content (or is absent):
 * 0 with *won set, or a store error. */
static int write_lease(pt_ha *h, pt_ha_entry *e, const lease *l, pt_slice replica, int64_t at,
                       int *won)
{
    uint8_t v[VALUE_MAX];
    int n = snprintf((char *)v, sizeof(v), "%" PRId64 " ", at);
    size_t vn = (size_t)(put_hex(v + n, replica) - v);
    pt_mutation m = {
        PT_TABLE_INDEX, {e->key, e->key_n}, {lease_qual, sizeof(lease_qual)}, {v, vn}, at * 1000};
    pt_slice expect = l->found ? (pt_slice){l->raw, l->raw_n} : (pt_slice){NULL, 0};
    pt_m.ha_lease_writes++;
    int rv = h->be->ops->check_and_set(h->be->state, &m, expect, won);
    if (rv != 0) {
        pt_m.ha_lease_errors++;
        return rv;
    }
    if (*won) {
        memcpy(e->stored, v, vn);
        e->stored_n = vn;
    }
    return 0;
}

/* Through the lease row; the entry caches it for update_ms. */
static int decide_shared(pt_ha *h, pt_ha_entry *e, pt_slice replica, int64_t now)
{
    if (is_elected(e, replica) && now - e->lease_ms < h->update_ms) {
        e->seen_ms = now;
        return PT_HA_ACCEPT;
    }
    int64_t last = e->lease_ms > e->seen_ms ? e->lease_ms : e->seen_ms;
    if (e->known && !is_elected(e, replica) && now - e->read_ms < h->update_ms &&
        now - last <= h->failover_ms)
        return PT_HA_DROP;
    lease l;
    for (int attempt = 0; attempt < CAS_ATTEMPTS; attempt++) {
        int rv = read_lease(h, e, &l);
        if (rv != 0)
            return rv;
        e->read_ms = now;
        pt_slice cur = {l.replica, l.replica_n};
        if (l.valid) {
            set_elected(e, cur, l.ms);
            memcpy(e->stored, l.raw, l.raw_n);
            e->stored_n = l.raw_n;
        } else {
            e->known = 0;
        }
        int mine = l.valid && pt_slice_eq(cur, replica);
        if (mine && now - l.ms < h->update_ms) {
            e->seen_ms = now;
            return PT_HA_ACCEPT;
        }
        /* The elected replica may have written here after its lease was last refreshed. */
        last = l.ms > e->seen_ms ? l.ms : e->seen_ms;
        if (l.valid && !mine && now - last <= h->failover_ms)
            return PT_HA_DROP;
        /* Refresh our lease or take over an expired (or absent, or unreadable) one. A
         * lease time never goes back, so the new cell is always the newest version even
         * when another process's clock ran ahead. */
        int64_t at = l.valid && l.ms >= now ? l.ms + 1 : now;
        int won;
        if ((rv = write_lease(h, e, &l, replica, at, &won)) != 0)
            return rv;
        if (won) {
            if (!mine)
                atomic_fetch_add(&e->elections, 1);
            set_elected(e, replica, at);
            e->seen_ms = now;
            return PT_HA_ACCEPT;
        }
        /* Another process changed the lease since it was read: read it again. */
    }
    return PT_EUNAVAIL;
}

int pt_ha_decide(pt_ha *h, pt_slice tenant, pt_slice cluster, pt_slice replica, pt_ha_entry **entry,
                 char *msg, size_t msglen)
{
    *entry = NULL;
    if (cluster.n > PT_HA_MAX_VALUE || replica.n > PT_HA_MAX_VALUE || tenant.n > PT_HA_MAX_TENANT) {
        snprintf(msg, msglen, "HA cluster, replica or tenant over %d bytes (cluster \"%.*s...\")",
                 PT_HA_MAX_VALUE, (int)(cluster.n > 60 ? 60 : cluster.n), (const char *)cluster.p);
        return PT_ELABELS;
    }
    int64_t now = h->now_ms(h->clock_ud);
    pt_ha_entry *e;
    int rv = lookup(h, tenant, cluster, now, &e);
    if (rv == FULL_ALL || rv == FULL_TENANT) {
        int all = rv == FULL_ALL;
        snprintf(msg, msglen, "HA cluster \"%.*s\"%s%.*s%s is one more than %s (%zu) tracks; "
                 "a pair is forgotten once idle longer than ha.failover_timeout, retry later",
                 (int)(cluster.n > 60 ? 60 : cluster.n), (const char *)cluster.p,
                 tenant.n ? " of tenant \"" : "", (int)tenant.n, (const char *)tenant.p,
                 tenant.n ? "\"" : "", all ? "ha.max_clusters" : "ha.max_clusters_per_tenant",
                 all ? h->max : h->per_tenant);
        return PT_ETENANTLIMIT;
    }
    if (rv != 0)
        return rv;
    pthread_mutex_lock(&e->mu);
    rv = h->be ? decide_shared(h, e, replica, now) : decide_local(h, e, replica, now);
    pthread_mutex_unlock(&e->mu);
    if (rv < 0)
        pt_ha_release(h, e);
    else
        *entry = e;
    return rv;
}

void pt_ha_count(pt_ha_entry *e, int verdict, size_t n)
{
    atomic_fetch_add(verdict == PT_HA_ACCEPT ? &e->accepted : &e->deduplicated, n);
}

/* ---- the store's interface (pt_store_ha) ---- */

static int hook_labels(void *ud, const pt_label *ls, size_t n, size_t *cluster, size_t *replica)
{
    return pt_ha_labels(ud, ls, n, cluster, replica);
}

static int hook_decide(void *ud, pt_slice tenant, pt_slice cluster, pt_slice replica, void **entry,
                       char *msg, size_t msglen)
{
    pt_ha_entry *e = NULL;
    int rv = pt_ha_decide(ud, tenant, cluster, replica, &e, msg, msglen);
    *entry = e;
    return rv;
}

static void hook_count(void *ud, void *entry, int verdict, size_t n)
{
    (void)ud;
    pt_ha_count(entry, verdict, n);
}

static void hook_release(void *ud, void *entry)
{
    pt_ha_release(ud, entry);
}

pt_store_ha pt_ha_store_hooks(pt_ha *h)
{
    return (pt_store_ha){hook_labels, hook_decide, hook_count, hook_release, h};
}

size_t pt_ha_stats(pt_ha *h, pt_arena *a, pt_ha_stat *out, size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&h->mu);
    for (size_t i = 0; i <= h->mask; i++)
        for (pt_ha_entry *e = h->chains[i]; e && n < max; e = e->next) {
            uint8_t *names = pt_arena_alloc(a, e->tenant_n + e->cluster_n + 1);
            if (!names)
                goto out;
            memcpy(names, e->tenant, e->tenant_n);
            memcpy(names + e->tenant_n, e->cluster, e->cluster_n);
            out[n++] = (pt_ha_stat){{names, e->tenant_n},
                                    {names + e->tenant_n, e->cluster_n},
                                    atomic_load(&e->accepted),
                                    atomic_load(&e->deduplicated),
                                    atomic_load(&e->elections)};
        }
out:
    pthread_mutex_unlock(&h->mu);
    return n;
}
