/*
 * HA pairs (docs/operations.md, "HA pairs"): the Cortex HA tracker's deduplication. Two or more
 * Prometheus servers scrape the same targets and write with the same cluster label and
 * each its own replica label; per (tenant, cluster) one replica is elected and only its
 * samples are stored. When the elected replica has sent nothing for longer than the
 * failover timeout, the next replica to write is elected.
 *
 * Where the election lives: on a backend with check_and_set (Bigtable) in a lease row of
 * the index table, "==ha," hex(tenant) "," hex(cluster), one cell "l" holding
 * "<lease ms> <hex(replica)>", so every promtable on the table agrees; each process keeps
 * the row's content and acts on it without a store call until the update interval has
 * passed (the elected replica then refreshes the lease, another re-reads it). On a
 * backend without it (the embedded store, which one process owns) the election is this
 * process's memory alone.
 *
 * Thread safety: every function may be called from several threads at once.
 */
#ifndef PT_HA_H
#define PT_HA_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "rowkey.h"
#include "slice.h"
#include "store.h"

/* Longest cluster and replica label value the tracker takes (a longer one: the series is
 * rejected, 400), and longest tenant id (tenancy allows 150 bytes). */
#define PT_HA_MAX_VALUE 256
/* Every lease row key starts with it (never a series, metadata or marker row). */
#define PT_HA_LEASE_PREFIX "==ha,"
#define PT_HA_MAX_TENANT 150

typedef struct pt_ha pt_ha;
typedef struct pt_ha_entry pt_ha_entry;

typedef struct pt_ha_opts {
    const char *cluster_label; /* copied */
    const char *replica_label; /* copied */
    int64_t failover_timeout_ms;
    int64_t update_interval_ms; /* < failover_timeout_ms */
    size_t max_clusters;        /* (tenant, cluster) pairs tracked at most */
    /* The store holding lease rows when its ops have check_and_set; NULL or without it:
     * the election is kept in memory only. Must outlive the tracker. */
    pt_backend *be;
    /* The wall clock in ms (lease times are compared across processes); NULL = the real
     * one. Tests pass a fake one and move it. */
    int64_t (*now_ms)(void *ud);
    void *clock_ud;
    size_t max_per_tenant; /* pairs of one tenant tracked at most; 0 = max_clusters */
} pt_ha_opts;

/* NULL when out of memory. */
pt_ha *pt_ha_new(const pt_ha_opts *o);
void pt_ha_free(pt_ha *h);

/* 1 when the tracker shares its election through the store (lease rows). */
int pt_ha_shared(const pt_ha *h);

/* Finds the cluster and replica labels in ls (sorted by name, as pt_labels_validate
 * leaves them): 1 with their indices set when the series has both, else 0 (it is then
 * stored as it is). */
int pt_ha_labels(const pt_ha *h, const pt_label *ls, size_t n, size_t *cluster, size_t *replica);

/* Whether samples of (tenant, cluster) from replica, received now, are stored: returns
 * PT_HA_ACCEPT (store.h) (electing replica if none is, or the elected one has been silent longer
 * than the failover timeout) or PT_HA_DROP, with *entry set, holding a reference: pass it
 * to pt_ha_count, then give it back with pt_ha_release. Errors (*entry NULL): PT_ELABELS
 * for a value over the limits above and PT_ETENANTLIMIT for a new pair past max_clusters
 * or max_per_tenant, both with msg saying so; or a store error (retryable: answer 503,
 * store nothing). A full table first forgets the pairs nobody asked about for longer than
 * the failover timeout (their elections are over). Slices are not kept. */
int pt_ha_decide(pt_ha *h, pt_slice tenant, pt_slice cluster, pt_slice replica,
                 pt_ha_entry **entry, char *msg, size_t msglen);

/* Counts n samples accepted or deduplicated (verdict) for the entry's cluster. */
void pt_ha_count(pt_ha_entry *e, int verdict, size_t n);

/* Gives back the reference pt_ha_decide handed out (NULL: nothing). */
void pt_ha_release(pt_ha *h, pt_ha_entry *e);

/* The store's HA interface (pt_store.ha) over h: labels, decide, count and release as
 * above, h as ud. h must outlive every store that holds the hooks. */
pt_store_ha pt_ha_store_hooks(pt_ha *h);

/* One (tenant, cluster) pair's figures for /metrics. */
typedef struct pt_ha_stat {
    pt_slice tenant, cluster;
    uint64_t accepted, deduplicated, elections;
} pt_ha_stat;

/* Writes up to max pairs' figures (their names copied into a); returns how many. */
size_t pt_ha_stats(pt_ha *h, pt_arena *a, pt_ha_stat *out, size_t max);

#endif
