/*
 * The write and read paths over a backend: decoded write requests in, row keys and cells
 * out (write); queries in, merged series out (read), in the plain types of model.h. No
 * HTTP and no protobuf here.
 */
#ifndef PT_STORE_H
#define PT_STORE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "backend.h"
#include "buf.h"
#include "clock.h"
#include "exemplar.h"
#include "index.h"
#include "model.h"
#include "rowkey.h"
#include "store_stats.h"
#include "wire.h"

/* write.max_label_name_length, write.max_label_value_length (bytes) and
 * write.max_labels_per_series; 0 = no limit. */
typedef struct pt_label_limits {
    size_t name_len, value_len, labels;
} pt_label_limits;

/* HA pair deduplication (the daemon's ha.h provides it: pt_ha_store_hooks). A series
 * with both an HA pair's cluster and replica labels is stored only when decide elects its
 * replica (PT_HA_ACCEPT), without the replica label; else (PT_HA_DROP) its samples are
 * counted deduplicated. Every function may be called from several threads at once. */
enum { PT_HA_ACCEPT = 0, PT_HA_DROP = 1 };

typedef struct pt_store_ha {
    /* Finds the cluster and replica labels in ls (sorted by name): 1 with their indices
     * set when the series has both, else 0 (it is stored as it is). */
    int (*labels)(void *ud, const pt_label *ls, size_t n, size_t *cluster, size_t *replica);
    /* PT_HA_ACCEPT or PT_HA_DROP for (tenant, cluster)'s replica, with *entry set to a
     * reference for count and release. Errors (*entry NULL): PT_ELABELS (the series is
     * rejected, 400) and PT_ETENANTLIMIT (a full table, 429), both with msg set; or a
     * store error (the request is answered 503 and stores nothing). */
    int (*decide)(void *ud, pt_slice tenant, pt_slice cluster, pt_slice replica, void **entry,
                  char *msg, size_t msglen);
    /* Counts n samples accepted or deduplicated (verdict) for the entry's pair. */
    void (*count)(void *ud, void *entry, int verdict, size_t n);
    /* Gives back the reference decide handed out (NULL: nothing). */
    void (*release)(void *ud, void *entry);
    void *ud;
} pt_store_ha;

typedef struct pt_store {
    pt_backend *be;
    pt_store_stats *stats;     /* where the store counts; never NULL in a store that writes
                                  or reads (pt_store_open sets it). Shared by tenants' copies */
    pt_store_stats *own_stats; /* the one pt_store_open allocated (stats given: NULL) */
    pt_index_cache *cache;
    pt_list_hints *hints;    /* index list sizes earlier reads saw; NULL = none kept */
    pt_ref_cache *refs;      /* series rows earlier reads resolved; NULL = none kept. Only
                                for a store no other process writes (index.h) */
    pt_ref_cache *lists;     /* index lists earlier reads scanned, per bucket (index.h: the
                                list cache); NULL = none kept. Same rule as refs */
    pt_exemplar_newest *xnewest; /* newest exemplar per series (exemplar.h); NULL = out-of-
                                    order exemplars are not checked */
    pt_exemplar_marks *xmarks;   /* buckets known to hold exemplars (exemplar.h); NULL = no
                                    marks written, every read looks for exemplar rows */
    int64_t index_bucket_ms; /* index bucket length, default one day */
    unsigned ref_bits;       /* bits of a series reference; 0 = all 64 (tests use fewer) */
    /* Read limits, per query: 0 = unlimited. */
    size_t max_series;
    size_t max_samples;
    int64_t read_timeout_ms; /* a read running longer ends with 503; 0 = no deadline */
    /* Matchers, per request (matcher.h): at most max_matchers of them (0 = no limit); a
     * regex's steps and backtracking bytes per label value (0 = PCRE2's defaults). */
    size_t max_matchers;
    uint32_t regex_match_limit;
    size_t regex_heap_limit;
    /* storage.retention: reads start no earlier than now - retention_ms (0 = forever), so
     * they never return what a backend is about to delete or has not deleted yet. */
    int64_t retention_ms;
    int64_t now_ms; /* tests: the wall clock that retention counts from; 0 = the real one */
    /* storage.retention_rules: how long a series keeps its samples (ms, 0 = forever, at
     * most retention_ms when that is set); a read of the series starts no earlier than
     * now minus it. NULL = retention_ms for every series. Called from any thread. */
    int64_t (*keep_ms)(void *ud, const pt_label *labels, size_t n);
    void *keep_ud;
    /* Tenancy (tenant.h): a tenant's store is a copy of the shared one whose be is the
     * tenant's view. salt is mixed into every cache key (index cache, series-row cache,
     * list hints), so one tenant's entries never answer another's lookups; 0 without
     * tenancy. gate, when set, is asked once per write about the 64-bit hashes of its
     * series (pt_tenant_gate's contract); the samples of refused series are not stored. */
    uint64_t salt;
    size_t (*gate)(void *ud, const uint64_t *series, size_t n, uint8_t *ok, char *msg,
                   size_t msglen);
    void *gate_ud;
    pt_store_ha ha; /* HA pair deduplication; ha.decide NULL = off */
    pt_label_limits label_limits; /* series past them are refused (400); zero = none */
    size_t key_limit; /* the longest row key built (rowkey.h); 0 = PT_MAX_ROW_KEY */
    /* storage.rollups (rollup.h): the stages, read when a read asks (pt_read_rollups) */
    const struct pt_rollup_stage *rollups;
    size_t nrollups;
    /* Where writes note samples older than what the stages have built, so that the
     * builder builds their windows again (NULL: not noted). Shared by tenants' copies. */
    struct pt_rollup_late *late;
} pt_store;

/* The caches a store keeps in memory (index.h, exemplar.h). */
typedef struct pt_store_caches {
    size_t index_entries; /* the index cache (index.cache_entries); 0 = 65,536 */
    size_t series_bytes;  /* the series-row cache; 0 = none. Only for a store no other */
    size_t list_bytes;    /* process writes (PT_BACKEND_CAP_EXCLUSIVE); the list cache */
    int hints;            /* keep the index list sizes earlier reads saw */
    int exemplars;        /* check exemplars' order and mark the buckets that hold them */
    pt_store_stats *stats; /* where the store counts (outlives it); NULL = a struct the
                              store allocates, reached as st->stats, freed on close */
} pt_store_caches;

/* Makes st a store over be with the caches c asks for, counting into c->stats or a struct
 * of its own; st's other fields (limits, deadlines, retention, tenancy, HA) are the
 * caller's to set, before or after. 0 or PT_ENOMEM (nothing is kept). pt_store_close
 * frees what pt_store_open made, and is safe on a store that was never opened (all
 * zero). */
int pt_store_open(pt_store *st, pt_backend *be, const pt_store_caches *c);
void pt_store_close(pt_store *st);

/* The store's clock: now_ms when a test set it, else the wall clock. */
static inline int64_t pt_store_now(const pt_store *st)
{
    return st->now_ms ? st->now_ms : pt_wall_ms();
}

static inline size_t pt_store_key_limit(const pt_store *st)
{
    return st->key_limit ? st->key_limit : PT_MAX_ROW_KEY;
}

/* The index-cache key of s with seed, for this store's tenant. */
static inline pt_index_key pt_store_key(const pt_store *st, pt_slice s, int64_t seed)
{
    pt_index_key k = pt_index_key_of(s, seed);
    k.lo ^= st->salt;
    k.hi ^= st->salt >> 1;
    return k;
}

#define PT_MSG_MAX 1024

typedef struct pt_write_result {
    size_t samples_written;    /* float samples */
    size_t histograms_written; /* native histogram samples */
    size_t exemplars_written;
    size_t series;             /* TimeSeries entries seen */
    size_t samples_rejected;   /* samples, histograms and exemplars not stored */
    size_t entries_rejected;   /* TimeSeries entries with an invalid label set */
    size_t index_rows;
    int limited;               /* samples were refused by pt_store.gate or a full HA table: 429 */
    size_t samples_deduplicated; /* HA: samples and histograms of a replica not elected */
    char msg[PT_MSG_MAX];      /* first problem, for the 400 body */
} pt_write_result;

/* Validates, stores what is valid, and reports what was not. With st->ha, a series of an
 * HA pair is stored only when its replica is elected (without the replica label), else
 * counted in res->samples_deduplicated. Returns 0 when the backend acknowledged every
 * valid sample (res->samples_rejected tells whether the answer is 400), or a backend
 * error (retryable → 503; also when the HA election could not reach the store). */
int pt_store_write(pt_store *st, pt_wreq *wr, pt_arena *a, pt_write_result *res);
/* The same for a tenant's request: the HA election is per (tenant, cluster). Until
 * tenancy is wired in, the daemon writes with the empty tenant (pt_store_write). */
int pt_store_write_tenant(pt_store *st, pt_slice tenant, pt_wreq *wr, pt_arena *a,
                          pt_write_result *res);

/* Checks the index table's format marker, writing it into an empty table; PT_EINTERNAL
 * with err set for a store whose index has another format (format 1 had no marker), or a
 * storage error. */
int pt_store_check_index(pt_store *st, char *err, size_t errlen);

/* Writes the index rows of one series in one index bucket (its list entries, its series
 * row and its values rows, as a write of its first sample in that bucket does) straight
 * to the store's backend, whatever the index cache holds, and leaves the cache as it was
 * (`promtable copy --match` indexes the series it copies). ls is a validated label set
 * (sorted, with __name__); day is the bucket's start. Memory from a. 0, PT_ENOMEM or a
 * storage error. */
int pt_store_index_series(pt_store *st, pt_arena *a, const pt_label *ls, size_t n, int64_t day);

/* Validates one label set in place: refuses more labels than lim allows (before any
 * other work), sorts it by name (as Prometheus's own receiver does), refuses empty or
 * duplicate names, names and values longer than lim allows, invalid UTF-8 and a missing
 * __name__, and drops labels with an empty value (moving the rest up); *plain (when not
 * NULL) tells whether no name or value needs escaping in keys. lim NULL or a limit 0: no
 * such limit. Returns the label count or PT_ELABELS with msg set (naming the limit, the
 * series and the length). */
long pt_labels_validate(pt_label *ls, size_t n, const pt_label_limits *lim, int *plain,
                        char *msg, size_t msglen);

/* Returns 1 if s is valid UTF-8. */
int pt_utf8_valid(pt_slice s);

/*
 * A remote read, answered a group of series at a time so that an answer can be streamed:
 * each query's matchers are resolved to its series (sorted by labels) when the read gets
 * to it; pt_read_next then reads the samples of the next group of them.
 */
typedef struct pt_read pt_read;

/* The series of one query that one pt_read_next produced, with their samples, in time
 * order (series without samples in the window are left out). */
typedef struct pt_read_batch {
    size_t query;      /* index into the read's queries */
    pt_series *s;      /* allocated from the batch arena */
    size_t n;
    int last_of_query; /* no more series of this query follow */
} pt_read_batch;

/* Allocates the read of the nq queries qs (which must outlive it) from a (the request's
 * arena, which must outlive it too). The read stops with PT_ECANCELLED at its next
 * storage call once *cancel (when not NULL) is set: the client went away. 0 or PT_ENOMEM. */
int pt_read_start(pt_store *st, const pt_query *qs, size_t nq, pt_arena *a,
                  const atomic_int *cancel, pt_read **out);
/* Reads the next group of at most max_series series (0 = all of the query) into arena b
 * (which may be reset between calls). 1 with *out set, 0 when every query is answered, or
 * an error with msg set (bad matcher or limit: 4xx; storage: 503). */
int pt_read_next(pt_read *r, pt_arena *b, size_t max_series, pt_read_batch *out, char *msg,
                 size_t msglen);
/* Whether the read returns exemplars (on by default). Streamed reads turn it off: their
 * chunked answer has no place for exemplars. */
void pt_read_exemplars(pt_read *r, int on);
/* Whether stored XOR chunks inside the window come as they are (pt_series.chunks) instead
 * of as samples; off by default. For streamed reads, which send XOR chunks anyway. */
void pt_read_chunks(pt_read *r, int on);
/* The first millisecond a retention of keep_ms (0 = forever) keeps at now. */
static inline int64_t pt_kept_since(int64_t now, int64_t keep_ms)
{
    return keep_ms > 0 && now > keep_ms ? now - keep_ms : 0;
}

/* The first millisecond a read may return (storage.retention). */
int64_t pt_oldest_kept(const pt_store *st);

/* Whether the read answers from a roll-up where a query's hints allow it (rollup.h,
 * pt_rollup_choose); off by default: a client asks (remote read's ?resolution=auto). */
void pt_read_rollups(pt_read *r, int on);
/* Releases the matchers; safe at any point, also after an error. */
void pt_read_free(pt_read *r);

#endif
