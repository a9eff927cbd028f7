/*
 * Internals of the embedded backend, shared by its modules (and tests); nothing outside
 * backends/embedded/ and the tests includes this.
 *
 * Modules, lowest first; each calls only modules above it, so the graph has no cycle:
 *
 *     rocks.c     RocksDB: options, open/close, errors, keys, the index table  (none)
 *     expire.c    retention: compaction filters, the compacting thread         rocks
 *     head.c      the head: a hash table of rows and their unflushed cells     (none)
 *     ihead.c     the index head: index cells not yet in RocksDB, drains       rocks
 *     wal.c       the points logs (points.<n>.wal): records, replay            head ihead
 *     flush.c     frozen head -> chunks, merged with the stored ones           rocks head
 *                 (or, write-back, -> the sink backend's write)
 *     scan.c      points scans merging the head and the chunks                 rocks head
 *     flusher.c   the flush thread: freezes, sweeps, flushes, a full disk      rocks head ihead
 *                                                                              wal flush
 *     snapshot.c  checkpoints of the store                                     flusher ihead
 *     erase.c     erases: the head flushed, chunks rewritten                   flusher ihead
 *     embedded.c  the ops table: open/close, write, scan, statistics           all
 *
 * Ownership: an embedded holds one rocks, expire, head and wal, each made and released
 * only by its module's open/init and close/free, which embedded.c calls, and one flush
 * thread. The compaction filters of expire outlive the rocks that uses them (RocksDB does
 * not own them).
 *
 * Double buffering, by shard: the head is cut into HEAD_SHARDS shards by row hash, each
 * with two generations of cells. Writers append to each shard's current one and to the
 * current log (points.<n>.wal); when the current generations together pass the budget, a
 * writer freezes the next shard in turn (its cur flips, the records go on in the next
 * log, made beforehand: O(1)) and the flush thread writes that shard's frozen generation
 * into RocksDB, then drops it and the logs no shard needs any more. One shard is frozen at
 * a time; only when it is still being flushed and the current generations are over the
 * budget again does a writer wait (embedded.c make_room_locked).
 *
 * Locking: embedded.mu guards the head (tables, rows, every shard's generation counters,
 * row lists and cur), the log, budget, epoch, the flush state and statistics. head.c and
 * wal.c never lock; their callers hold mu, except open and close, which own the backend
 * alone (close joins the flush thread first), and the file work the flush thread does
 * without mu: making the next log (wal.c prepare) and deleting old ones (wal.c drop,
 * under drop_mu). The one exception to "mu guards the head" is the frozen shard while a
 * flush runs (e->frozen set, e->frozen_shard): the flush thread reads, without mu, its
 * frozen cells (r->s[fz]), its frozen row list (dirty[fz], which it sorts), the rows'
 * keys, and writes their flush fields (known, has_last, last_*). That is safe because
 * under mu nobody writes those: writers touch only s[cur] and dirty[cur], scans only read
 * s[fz] (and normalize s[cur]) and read the flush fields only of rows of other shards,
 * rows on the frozen list are never evicted, and a shard's cur flips only when nothing is
 * frozen. The flush ends by moving the epoch, evicting the shard's empty rows and
 * dropping its frozen cells, under mu but in steps of a few thousand rows with mu
 * released in between (flusher.c drop_frozen_locked); e->frozen is cleared only after
 * the last step. That is the only place rows are evicted, and only empty ones, never a
 * row on the frozen list. A sweep (pt_emb_head_sweep_step, under mu, e->frozen set) may
 * add rows of the other shards to their empty other generations and lists (hshard
 * flushing; with no shard frozen at all, frozen_shard HEAD_SHARDS): those rows follow the
 * frozen shard's rules, and scans and logs_done look at flushing. Conditions: work (to the thread)
 * and flushed (from it), both with mu. rocks.c holds no shared mutable state; RocksDB is
 * thread-safe.
 */
#ifndef PT_EMBEDDED_INT_H
#define PT_EMBEDDED_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>

#include <rocksdb/c.h>
#include <xxhash.h>

#include "arena.h"
#include "backend.h"
#include "buf.h"
#include "clock.h"
#include "bytes.h"
#include "cellchunk.h"

/* ---- background threads (the flush thread, the index head's drain thread) ---- */

/* The delay before the next retry after a failure that came after a delay of ms (0: the
 * first): 100 ms, doubling, at most 10 s. */
static inline uint64_t pt_emb_backoff_next(uint64_t ms)
{
    return ms ? (ms < 5000 ? ms * 2 : 10000) : 100;
}

/* Stops a thread that waits on cv under mu and exits once *stop is set; *started is
 * cleared. */
static inline void pt_emb_thread_stop(pthread_t t, pthread_mutex_t *mu, pthread_cond_t *cv,
                                      int *stop, int *started)
{
    if (!*started)
        return;
    pthread_mutex_lock(mu);
    *stop = 1;
    pthread_cond_signal(cv);
    pthread_mutex_unlock(mu);
    pthread_join(t, NULL);
    *started = 0;
}

/* ---- rocks.c ---- */

enum { CF_DEFAULT, CF_POINTS, CF_INDEX, NCF };

typedef struct rocks {
    /* Every use of db and cf from a thread other than the flush thread holds lock for
     * reading (pt_emb_rocks_enter); a reopen holds it for writing. The flush thread, the
     * only one that reopens, uses them without it. */
    pthread_rwlock_t lock;
    int lock_init;
    /* A reopen waits for the lock: new users get PT_EUNAVAIL after a disk error, and wait
     * for a planned one (rocks.c). */
    atomic_int reopening;
    /* A write RocksDB refused for a disk error (no space, I/O error). RocksDB's own
     * resume is off (it raced the flush thread's ingests and aborted): the flush thread
     * reopens the store once there is space again. */
    atomic_int broken;
    /* The disk ran out of space (the points log or RocksDB said so); cleared by the flush
     * thread once space is back and RocksDB takes writes. */
    atomic_int full;
    char *path; /* for a reopen */
    int sync;
    size_t block_cache;
    size_t pin_max; /* storage.embedded.table_index_memory */
    atomic_int pinned; /* the table files' index and filter blocks stay loaded (rocks.c) */
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf[NCF];
    rocksdb_writeoptions_t *wopts;       /* index writes: RocksDB's WAL, synced if asked */
    /* Set before open, NULL = none: each family's compaction filter (expire.c's). */
    rocksdb_compactionfilter_t *filter[NCF];
    rocksdb_cache_t *cache; /* the block cache of every family */
    /* The points family's options, kept for the table files a flush writes itself. */
    rocksdb_options_t *points_opts;
    rocksdb_envoptions_t *envopts;
} rocks;

/* Opens (creating) the store in the existing directory path; refuses the one-entry-per-cell
 * layout (rocks.c old_layout). On failure err says why and close() releases what was made
 * (but not the filters). */
int pt_emb_rocks_open(rocks *r, const char *path, int sync, size_t block_cache, size_t pin_max,
                      char *err, size_t errlen);
/* 1 when the pinned index and filter blocks have outgrown pin_max (the flush thread then
 * reopens the store with them loaded on demand); else the block cache's capacity is
 * set to its own budget plus what is pinned. */
int pt_emb_rocks_pin_check(rocks *r);
/* Calls fn (when not NULL) with the path and size of each of the index family's live
 * table files; returns their total size. */
typedef void pt_emb_file_fn(const char *path, uint64_t size, void *ud);
uint64_t pt_emb_rocks_index_files(rocks *r, pt_emb_file_fn *fn, void *ud);
/* Reads the index family's table files through the page cache when they total at most
 * budget bytes, so that the first reads after an open find the index's blocks there
 * rather than wait for the disk one dependent read after the other; returns the bytes
 * read (0: none, or over budget). */
uint64_t pt_emb_rocks_preload_index(rocks *r, uint64_t budget);
/* Releases everything; a zeroed or half-opened rocks is fine. */
void pt_emb_rocks_close(rocks *r);
/* Closes and opens the store again, waiting for the users of the lock to leave (new ones
 * get PT_EUNAVAIL meanwhile, or wait when planned): clears RocksDB's background error,
 * which refuses every write after a failed one, or drops the pinning (planned). Only the
 * flush thread calls it. On failure db is NULL (enter then answers PT_EUNAVAIL) and
 * broken stays set, for the next attempt. */
int pt_emb_rocks_reopen(rocks *r, int planned, char *err, size_t errlen);
/* Takes the lock for reading around a use of db from any thread but the flush thread: 0,
 * or PT_EUNAVAIL (nothing held) while a reopen after a disk error waits or after one
 * failed; a planned reopen is waited for. */
int pt_emb_rocks_enter(rocks *r);
void pt_emb_rocks_leave(rocks *r);
/* The same before a write into RocksDB, which also refuses while the store is broken
 * (PT_ENOSPACE on a full disk, else PT_EUNAVAIL): RocksDB 7.8 asserts (aborts) when its
 * log is written again after a failed write, before a reopen. Writes into RocksDB are
 * serialized (one drain at a time; ingests write no log), so one failure is the last. */
int pt_emb_rocks_enter_write(rocks *r);
/* Notes the result of a RocksDB write: a disk error marks the store broken (and full,
 * for PT_ENOSPACE). Returns rv. */
int pt_emb_rocks_note(rocks *r, int rv);
/* Writes the index family's memtables into table files and waits: at a graceful stop, so
 * that the index is stored compressed rather than as RocksDB's log (which a start would
 * replay); then an index of at most 64 MiB with level-0 files is compacted into one
 * bottom-level file at ZSTD level 6 (rocks.c). */
int pt_emb_rocks_flush_index(rocks *r);
/* Memory RocksDB holds: memtables of every family, table readers (index and filter
 * blocks outside the cache), the block cache's usage and what of it is pinned. */
void pt_emb_rocks_memory(rocks *r, uint64_t *memtables, uint64_t *readers, uint64_t *cache,
                         uint64_t *pinned);

/* Maps a RocksDB error string to a pt code (timeouts, busy states and a full disk
 * retryable) and frees it. */
int pt_emb_rocks_error(char *msg);
/* The iterator's error as a pt code, 0 when none. */
int pt_emb_rocks_iter_error(rocksdb_iterator_t *it);
/* A scan's iterators over one column family: it[0] for ranges (total order), it[1] for
 * single rows (prefix mode, so the row bloom filter applies). Zeroed = none made yet. */
typedef struct rocks_iters {
    rocksdb_readoptions_t *ro[2];
    rocksdb_iterator_t *it[2];
    pt_buf bound; /* it[1]'s upper bound, when set: the end of the row it reads */
} rocks_iters;

/* Replaces it[one_row] by a new iterator over family cf, seeing the store as it is now
 * (or as snap, if given the first time). 0 or PT_ENOMEM (it[one_row] is then NULL). */
int pt_emb_rocks_iter(rocks *r, rocks_iters *its, int cf, int one_row,
                      const rocksdb_snapshot_t *snap);
void pt_emb_rocks_iters_free(rocks_iters *its);
/* Bounds it[1] to row's keys from its next seek on: RocksDB then knows where the row ends
 * without reading the block after it. For iterators seeing no snapshot; an it[1] made
 * before the first call stays unbounded (RocksDB copies the options when it makes an
 * iterator). 0 or PT_ENOMEM. */
int pt_emb_rocks_iters_row(rocks_iters *its, pt_slice row);

/* Keys are row || 0x00 || qualifier; row keys hold no 0x00 (backend.h). */

/* k = a || sep || b, sep < 0 meaning no separator byte; 0 or PT_ENOMEM. */
int pt_emb_rocks_key(pt_buf *k, const void *a, size_t an, int sep, const void *b, size_t bn);
/* k = the key bounding the rows >= b (as a start) or < b (as an end) of a row range. */
int pt_emb_rocks_row_bound(pt_buf *k, pt_slice b);
/* 1 when the range is exactly one row, [r, r || 0x00 ...). */
int pt_emb_rocks_one_row(const pt_row_range *r);

/* The index table holds one RocksDB entry per cell (written by ihead.c's drains). A scan
 * touches only what is in RocksDB: its caller drains the index head first. */
typedef struct ra_pool ra_pool; /* further down */
/* ra: reads ahead of a scan of many rows (NULL: none). */
int pt_emb_rocks_scan_index(rocks *r, ra_pool *ra, const pt_scan *s, pt_cell_fn fn, void *ud);

/* ---- the points chunks (base/cellchunk.h holds their codec) ---- */

/* The head writes a chunk at most CHUNK_MAX cells long. A row's last chunk with fewer than
 * CHUNK_SMALL cells is rewritten with the next flush's cells appended, so rows that get
 * few samples per flush still end up in chunks of a useful size. */
enum { CHUNK_MAX = 1024, CHUNK_SMALL = 256 };

/* Splits a points key into its row (pointing into k) and the chunk's first qualifier;
 * PT_EINTERNAL when it is not such a key. */
int pt_emb_chunk_key_split(const char *k, size_t kn, pt_slice *row, uint32_t *first);

/* ---- expire.c ---- */

typedef struct expire {
    int64_t keep_ms;       /* storage.retention; 0 = keep everything */
    /* storage.retention_rules (backend.h keep_row_ms): a data row's own keep, or NULL */
    int64_t (*keep_row)(void *ud, pt_slice row);
    void *keep_ud;
    int64_t every_ms;      /* the compacting thread's interval; 0 = no thread, no filter */
    int64_t index_span_ms; /* what an index row's day spans (index.bucket) */
    _Atomic int64_t now_ms; /* the clock, for tests; 0 = the real one */
    _Atomic uint64_t dropped[2];   /* points chunks, index cells */
    _Atomic uint64_t compactions;  /* whole-store compactions done */
    _Atomic uint64_t *counter;     /* the core's count of dropped entries, or NULL */
    rocksdb_compactionfilter_t *filter[NCF];
    rocks *r;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int stop;
    int running;
} expire;

/* Makes the filters of cfg's retention and retention rules (none when samples are kept
 * forever) and sets them in r, which must not be open yet. */
int pt_emb_expire_init(expire *x, rocks *r, const pt_backend_config *cfg);
/* Starts the thread compacting r every quarter of the shortest retention (the global one
 * or a rule's; no thread without either). */
int pt_emb_expire_start(expire *x, rocks *r);
/* Compacts both tables whole, now: expired entries go (blocks until done). */
void pt_emb_expire_compact(expire *x, rocks *r);
/* Stops the thread; before r closes. */
void pt_emb_expire_stop(expire *x);
/* Destroys the filters; after r closed. */
void pt_emb_expire_free(expire *x);

/* ---- head.c ---- */

/* A head cell: 16 bytes, the value inline when it has at most 8 bytes. */
typedef struct cell {
    uint32_t q;
    uint32_t vlen;
    union {
        uint8_t in[8];
        uint8_t *p;
    } v;
} cell;

static inline const uint8_t *cell_val(const cell *c)
{
    return c->vlen <= 8 ? c->v.in : c->v.p;
}

/* A run of a row's cells XOR-compressed (base/gorilla.h, the qualifier as the timestamp,
 * the value's 8 bytes big-endian as the value): 8-byte values with strictly increasing
 * qualifiers, what in-order ingest writes, in about 1-3 bytes a sample instead of 16. The
 * encoder's state is kept here, so a sample is appended to the run where it is. */
typedef struct zrun {
    uint32_t cap;  /* bytes of data, zeroed past the bits written */
    uint32_t n;    /* samples */
    uint32_t bits; /* written */
    uint32_t t, tdelta;
    uint8_t leading, trailing;
    uint64_t v;
    uint8_t data[];
} zrun;

/* One generation's cells of a row, in write order: those of the run z, then c[0..n). A
 * cell goes into the run while c is empty, its value has 8 bytes and its qualifier is
 * past the run's last; otherwise into c. */
typedef struct hcells {
    zrun *z;
    cell *c;
    size_t cap;
    uint32_t n;
    uint8_t sorted; /* strictly increasing by qualifier */
} hcells;

/* Cells of the generation, run and array. */
static inline uint32_t hcells_count(const hcells *s)
{
    return (s->z ? s->z->n : 0) + s->n;
}

/* A row of the head. head.c owns it; it lives until the head evicts it (at the end of its
 * shard's flush, when it got no cell since the one before) or is freed, so a pointer to
 * it is good only while mu is held, or, for the flush thread, while the row is in the
 * frozen generation's list (such a row is never evicted).
 *
 * The head holds two generations of cells (double buffering) per shard: s[cur] takes the
 * writes, s[!cur] is the frozen generation a flush is writing into RocksDB (cur is the
 * row's shard's, pt_emb_row_cur). */
typedef struct hrow hrow;
struct hrow {
    hrow *next; /* hash chain */
    uint64_t hash;
    hcells s[2];
    uint32_t wal_gen, wal_id; /* wal.c's: the row's id in the log generation wal_gen */
    /* flush.c's: the row's last RocksDB chunk, valid when known; has_last = 0: none.
     * The flush (thread) writes them; scans read them under mu, and only while the row's
     * shard is not being flushed (scan.c: a row with no chunk from a read's window on
     * skips RocksDB). */
    uint32_t last_first, last_max, last_n;
    uint8_t known, has_last;
    /* wal.c's: log generations from the one the row was logged in before wal_gen to
     * wal_gen (how often its series writes, in freezes), 255 when more or not known. */
    uint8_t gap;
    uint8_t mark; /* head.c's sweep: the head's tick at the last append, or ROW_SWEPT */
    uint32_t keylen;
    uint8_t key[];
};

/* The head is cut into shards by row hash, each a table of its rows with two generations
 * of its own. A flush takes one shard: its current generation is frozen and written into
 * RocksDB while the other shards' go on taking writes, so what is held twice is one shard's
 * samples, not the whole head's (which with one table made the head about twice its
 * budget). Shards are frozen in turn; in steady state the one frozen is the one that
 * waited longest, so it holds about 2 / (HEAD_SHARDS + 1) of the budget, and a row's
 * samples per flush are about twice what one table of the same budget would give. */
enum { HEAD_SHARD_BITS = 3, HEAD_SHARDS = 1 << HEAD_SHARD_BITS };

/* hrow mark: an append sets the head's tick (a wall clock of HEAD_TICK_MS ticks, 7 bits,
 * wrapping), the sweep of a freeze ROW_SWEPT on a row it takes as stopped (head.c). */
enum { ROW_SWEPT = 0x80, HEAD_TICK_MASK = 0x7f, HEAD_TICK_MS = 250 };

typedef struct hshard {
    hrow **tab; /* hash table, chained, 2^k buckets */
    size_t mask, nrows;
    unsigned cur;         /* the generation taking writes, 0 or 1 */
    /* Its other generation holds cells a flush is writing (the shard frozen, or rows the
     * sweep took); while set the flush thread writes those rows' flush fields. */
    uint8_t flushing;
    size_t cells[2];      /* cells held by each generation, duplicates included */
    size_t cell_bytes[2]; /* the samples each holds (16 bytes a cell, longer values) */
    /* The rows with cells in each generation, in the order they got their first one. */
    hrow **dirty[2];
    size_t ndirty[2], dirty_cap[2];
} hshard;

typedef struct head {
    hshard sh[HEAD_SHARDS];
    size_t nrows;
    size_t cur_bytes; /* cell_bytes of every shard's current generation: the budget's */
    size_t swept_bytes; /* of those, what sweeps took out since the last freeze */
    size_t bytes;     /* memory held: rows, cell arrays, runs, values, the hash tables */
    uint64_t evicted; /* rows evicted, ever */
    uint64_t swept;   /* rows the sweep took out of a current generation, ever */
    uint32_t newest;  /* the greatest qualifier appended since the last sweep */
    uint8_t tick;     /* the wall clock in HEAD_TICK_MS, & HEAD_TICK_MASK (writers set it) */
} head;

static inline uint64_t pt_emb_head_hash(const uint8_t *key, size_t n)
{
    return XXH3_64bits(key, n);
}

/* The shard of a row hash: its top bits (the table buckets use the low ones). */
static inline unsigned pt_emb_shard_of(uint64_t hash)
{
    return (unsigned)(hash >> (64 - HEAD_SHARD_BITS));
}

/* The generation of r taking writes. */
static inline unsigned pt_emb_row_cur(const head *h, const hrow *r)
{
    return h->sh[pt_emb_shard_of(r->hash)].cur;
}

int pt_emb_head_init(head *h);
/* Frees every row and the tables; h is zeroed. */
void pt_emb_head_free(head *h);
hrow *pt_emb_head_find(head *h, const uint8_t *key, size_t n, uint64_t hash);
/* The row with that key, created empty if missing; NULL when out of memory. */
hrow *pt_emb_head_get(head *h, const uint8_t *key, size_t n, uint64_t hash);
/* Start loading what a lookup of hash will read: its bucket, then (once the bucket is in
 * cache) the first row it leads to, header and key. */
static inline void pt_emb_head_prefetch(const head *h, uint64_t hash)
{
    const hshard *sh = &h->sh[pt_emb_shard_of(hash)];
    __builtin_prefetch(&sh->tab[hash & sh->mask]);
}

static inline void pt_emb_head_prefetch_row(const head *h, uint64_t hash)
{
    const hshard *sh = &h->sh[pt_emb_shard_of(hash)];
    const hrow *r = sh->tab[hash & sh->mask];
    if (r) {
        __builtin_prefetch(r);
        __builtin_prefetch((const char *)r + 64);
        __builtin_prefetch((const char *)r + 128);
    }
}

/* Appends a cell to the row's current generation. */
int pt_emb_head_append(head *h, hrow *r, uint32_t q, pt_slice v);
/* Appends the points cells of a batch; rows[j] is the row of its j-th points cell, k of
 * them. A failure leaves the cells before it appended. */
int pt_emb_head_apply(head *h, hrow *const *rows, const pt_mutation *m, size_t n, size_t k);
/* Sorts a row's current cells by qualifier, keeping the last write of each. */
int pt_emb_head_normalize(head *h, hrow *r);
/* The cells of s in write order, *n of them: *out = s->c when it has no run, else the run
 * decoded into *buf (capacity *cap cells, grown as needed) followed by c. Reads s only:
 * the flush thread calls it on frozen cells without mu. PT_EINTERNAL when the run does
 * not decode (never, unless memory is corrupt). */
int pt_emb_hcells_get(const hcells *s, cell **buf, size_t *cap, const cell **out, uint32_t *n);
/* Sorts c[0..n) by qualifier, keeping the last write of each (tmp: room for n cells);
 * returns how many are left. Drops cells without freeing their values: for copies. */
uint32_t pt_emb_cells_sort(cell *c, cell *tmp, uint32_t n);
/* The rows holding cells (of either generation) whose key is in range r (NULL: every
 * row), in table order, into the array *rows (capacity *cap, grown as needed); their
 * number in *n. */
int pt_emb_head_collect(head *h, const pt_row_range *r, hrow ***rows, size_t *cap, size_t *n);
/* Cells in the current generations of every shard. */
size_t pt_emb_head_cur_cells(const head *h);
/* Makes shard k's current generation its frozen one; the other, which must be empty,
 * takes the shard's writes from now on. */
void pt_emb_head_freeze(head *h, unsigned k);
/* Ends shard k's frozen generation once it is in RocksDB: evicts the shard's rows that
 * hold no cell (they got none since its previous flush) and empties the frozen cells,
 * giving their runs' memory back. */
void pt_emb_head_drop_frozen(head *h, unsigned k);
/* The same in steps, so that mu can be released in between: evict_step walks up to n
 * buckets of shard k from *b, clear_step empties up to n of its frozen rows from *i; each
 * returns 1 once done (start both at 0, evict first: a row flushed now holds cells).
 *
 * clear_step with gen, the log generation now (0: not this rule), also evicts a row it
 * empties that took no cell since the freeze and went unlogged for more than twice its
 * own gap (hrow gap) of log generations: a series that stopped goes at the first flush of
 * its shard after it stopped instead of the second. */
int pt_emb_head_evict_step(head *h, unsigned k, size_t *b, size_t n);
int pt_emb_head_clear_step(head *h, unsigned k, size_t *i, size_t n, uint32_t gen);

/* The sweep: series that stopped leave the head at the next freeze of any shard, not at
 * the next flush of their own, which under series churn came a whole round of the shards
 * later and held most of the head in rows of series gone. At a freeze the flush thread
 * walks every shard's row list, up to n rows per call from *i (start *i and *j at 0;
 * returns 1 once the list is done). A row is taken when it got no append for
 * PT_EMB_SWEEP_GUARD_MS of wall time, its cells are one in-order run (the common case),
 * and that run ends more than max(PT_EMB_STALE_MS, 4 x the row's interval) of sample time
 * before h->newest, the greatest qualifier written since the previous sweep. A row taken
 * is marked ROW_SWEPT; in any shard but the frozen one its cells move into the shard's
 * empty other generation, to be flushed with the frozen shard's (sh->flushing set).
 * clear_step then evicts the rows still marked. In the frozen shard (frozen set; its
 * frozen generation is the list walked) rows are only marked. Rows ahead of h->newest
 * (another index bucket) stay. Both clocks: a stop in sample time alone may be a
 * backfill, or a client behind the others; in wall time alone, a slow scrape interval. */
enum { PT_EMB_STALE_MS = 5 * 60 * 1000, PT_EMB_SWEEP_GUARD_MS = 2000 };
int pt_emb_head_sweep_step(head *h, unsigned k, int frozen, size_t *i, size_t *j, size_t n);

/* ---- ihead.c ---- */

typedef struct irun irun;

typedef struct ihead {
    pthread_mutex_t mu;
    pthread_cond_t cv;   /* to waiters: a drain took the runs, or ended */
    pthread_cond_t work; /* to the drain thread: past the soft limit, a drain ended, stop */
    irun *first, *last; /* pending runs, oldest first */
    size_t bytes;       /* memory of the pending runs */
    size_t soft, hard;  /* the drain thread drains past soft; writers wait past hard */
    uint64_t added, drained; /* runs added, and how many of the first of them are drained */
    atomic_int pending;      /* added > drained, readable without mu */
    int draining;            /* a drain is writing (at most one at a time) */
    int last_err;            /* of the last drain, 0 when it succeeded */
    rocks *r;
    pthread_t thread;
    int thread_started, stop, init;
    uint64_t drains, drained_cells, drain_failures, drain_ns, waits;
} ihead;

typedef struct pt_emb_ihead_stat {
    size_t pending_bytes;
    uint64_t drains, drained_cells, drain_failures, waits;
    double drain_seconds;
} pt_emb_ihead_stat;

/* soft: pending bytes past which the drain thread drains; writers wait past hard (at
 * least soft). */
int pt_emb_ihead_init(ihead *x, rocks *r, size_t soft, size_t hard);
/* Stops the thread and frees pending runs (their cells are still in the logs). */
void pt_emb_ihead_free(ihead *x);
int pt_emb_ihead_start(ihead *x);
/* qsort order of index cells (const pt_mutation *): by row, qualifier, then place in
 * memory (a batch's order, so the later write of a cell comes last). */
int pt_emb_ihead_cmp(const void *a, const void *b);
/* Appends v[0..n), in pt_emb_ihead_cmp order, as a run. */
int pt_emb_ihead_add(ihead *x, const pt_mutation *const *v, size_t n);
/* Before a write adds cells: while the pending runs are past the hard limit, waits for
 * the drain thread to take them (it does once the drain in progress ends); PT_EBUSY
 * when the last drain failed (RocksDB refuses writes: the client retries later). */
int pt_emb_ihead_wait_room(ihead *x);
/* Returns once every cell added before the call is in RocksDB (through its log), or with
 * the error of a failed drain (the cells stay pending). */
int pt_emb_ihead_drain(ihead *x);
/* Forgets the pending runs (tests: the logs that hold them are about to be replayed). */
void pt_emb_ihead_clear(ihead *x);
void pt_emb_ihead_stats(ihead *x, pt_emb_ihead_stat *st);

/* ---- wal.c ---- */

/* The points logs, points.<seq>.wal (wal.c). Records go to the one numbered seq; a freeze
 * (of one head shard) moves them on to seq + 1 in a new log generation, whose records
 * define their rows anew. A log holds cells of every shard; it is deleted once each
 * shard's cells in it are in RocksDB, i.e. once every shard was flushed (or found empty)
 * since it was closed, so about HEAD_SHARDS logs are kept. Files are made and deleted
 * outside the backend mutex (prepare, drop); a freeze under it only switches fds. */
typedef struct wal {
    int fd;      /* log seq, taking the records; -1 when none is open */
    int next_fd; /* log seq + 1, made ahead of the next freeze; -1 when not made yet */
    char *dir;
    int sync;         /* fdatasync every record */
    uint32_t gen;     /* generation of the records now being appended */
    uint32_t next_id; /* next row id of this generation */
    uint64_t size;
    uint64_t seq;     /* the log taking the records */
    uint64_t dropped; /* logs up to this one are deleted (pt_emb_wal_drop's, alone) */
    uint64_t damaged_bytes; /* bytes of damaged records the replay skipped */
    /* Tests only: replaces write(2) for records (a full disk on demand; the faulty
     * backend wraps the ops table and cannot reach this file). NULL: write(2). */
    ssize_t (*write_fn)(int fd, const void *p, size_t n);
    pt_buf rec;  /* record being built */
    hrow **rows; /* after pt_emb_wal_log: the row of each points cell */
    size_t rows_cap;
} wal;

/* Sets w up for the logs in dir (nothing opened yet: replay, then start). */
int pt_emb_wal_open(wal *w, const char *dir, int sync, char *err, size_t errlen);
/* Replays the logs of older versions (points.frozen.wal, points.wal), then every
 * points.<seq>.wal in order into the head's current generations (so the newer write of a
 * cell comes last) and their index cells into x, each up to its torn or stale tail;
 * damaged bytes with intact records after them are skipped (w->damaged_bytes). Fails
 * (PT_EINTERNAL) on a record whose checksum holds but whose entries do not parse. Then
 * w->seq is past every log found, and pt_emb_wal_drop(w, w->seq - 1) deletes them all. */
int pt_emb_wal_replay(wal *w, head *h, ihead *x, char *err, size_t errlen);
/* Starts log w->seq (after a replay, and the drop of what it replayed). */
int pt_emb_wal_start(wal *w);
/* The log numbers in dir, ascending, into *seqs (malloc'ed, *n of them; NULL when none). */
int pt_emb_wal_logs(const char *dir, uint64_t **seqs, size_t *n);
/* Writes the points cells of a batch (k of them, hashes[j] the row hash of the j-th) and
 * its index cells iv[0..ni) as one record, creating the points' rows in the head; then
 * w->rows[0..k) are their rows, valid while mu is held. On failure nothing is logged (a
 * partly written record is cut off) and no row keeps an id the record would have
 * defined. */
int pt_emb_wal_log(wal *w, head *h, const pt_mutation *m, size_t n, const uint64_t *hashes,
                   size_t k, const pt_mutation *const *iv, size_t ni);

/* One entry of a record's payload. */
typedef struct wal_entry {
    uint8_t type; /* 'R' row definition, 'C' points cell, 'I' index cell */
    uint32_t id;  /* R, C: the row's id in the generation */
    uint32_t q;   /* C: the qualifier */
    pt_slice key; /* R: the row key; I: the row */
    pt_slice qual, value; /* I: the qualifier; C, I: the value */
} wal_entry;

/* Parses the entry at *p (before end): 1 with *p past it, 0 when it is malformed
 * (truncated, of no known type, a row key empty or holding 0x00). Ids are the caller's. */
int pt_emb_wal_entry(const uint8_t **p, const uint8_t *end, wal_entry *e);
/* Whether an intact record starts at buf + off (of size bytes): its magic, a length
 * inside buf, its checksum, and generation want (any when want is 0). */
int pt_emb_wal_record_at(const uint8_t *buf, size_t size, size_t off, uint32_t want);
/* Where replay goes on past a damaged record at off: the next offset where an intact
 * record of generation gen (any when 0) starts; size when none does (a torn or stale
 * tail). */
size_t pt_emb_wal_resync(const uint8_t *buf, size_t size, size_t off, uint32_t gen);

/* The row ids of one log generation as replay reads them: 'R' entries define them in
 * order. Once damaged bytes were skipped (resynced), the ids they defined are missing: a
 * later definition may leave a gap, and the cells of a missing id are lost. */
typedef struct wal_ids {
    void **row; /* the caller's row of each id; NULL: defined in skipped bytes */
    size_t n, cap;
    int resynced;
} wal_ids;

/* Defines id as row (not NULL): 0, PT_ENOMEM, or PT_EINTERNAL when id is not the next
 * one (or, after skipped bytes, a later one). */
int pt_emb_wal_ids_define(wal_ids *ids, uint32_t id, void *row);
/* The row of a cell's id into *row, NULL when skipped bytes defined it (the cell is
 * lost); PT_EINTERNAL when id was never defined and nothing was skipped. */
int pt_emb_wal_ids_row(const wal_ids *ids, uint32_t id, void **row);
void pt_emb_wal_ids_free(wal_ids *ids);
/* Moves the records on to log seq + 1 (made now if no prepare made it) in the next log
 * generation; log seq is closed. On failure nothing changed. */
int pt_emb_wal_freeze(wal *w);
/* Making the next log ahead of a freeze, without the mutex: note seq = w->seq + 1 under
 * it, make the file with prepare_fd (no lock; -1 on failure), then hand the fd over with
 * prepared, under it again (closed if a freeze made that log meanwhile). */
int pt_emb_wal_prepare_fd(const wal *w, uint64_t seq);
void pt_emb_wal_prepared(wal *w, uint64_t seq, int fd);
/* Deletes the logs up to upto (and the older versions' logs): their cells are in RocksDB.
 * Touches only w->dropped and files: callers serialize it among themselves, not under the
 * backend mutex. */
int pt_emb_wal_drop(wal *w, uint64_t upto);
/* Closes and deletes the current log and the next one made ahead: the stop of a store
 * whose every cell is in RocksDB (the current log's records included). */
void pt_emb_wal_end(wal *w);
void pt_emb_wal_close(wal *w);

/* ---- read-ahead for scans of many rows (readahead.c) ---- */

/* Threads that seek the rows ahead of a scan whose own thread had to wait for the disk,
 * so that a cold read of many series waits for many disk reads at once, not one after
 * the other. Cost only: the threads read into the block cache and answer nothing. */
typedef struct ra_job ra_job;
struct ra_pool {
    rocks *r;
    pthread_mutex_t mu;
    pthread_cond_t work; /* to the threads: rows to read, or stop */
    pthread_cond_t left; /* from them: a thread finished a row of an ending job */
    ra_job *jobs;        /* the scans being read ahead of */
    pthread_t *threads;
    unsigned nthreads;
    int init, stop;
    uint64_t scans, rows; /* scans read ahead of, rows read ahead (since the start) */
};

/* One scan's, on its stack. Its rows are s->ranges' starts; the threads read rows
 * [next, limit), and leave it before pt_emb_readahead_end returns. */
struct ra_job {
    ra_pool *ra; /* NULL: no read-ahead for this scan */
    int cf;
    const pt_scan *s;
    long inblock; /* the scan thread's disk reads when it began */
    int listed;   /* on ra->jobs: the scan (or the one before it) has waited for the disk */
    int ending;
    size_t next, limit;
    unsigned workers; /* threads reading one of its rows */
    ra_job *next_job;
    atomic_uint span; /* the scan's pt_emb_seek_chunks span, for the threads to seek alike */
};

/* threads 0: none (every scan reads alone). 0 or PT_ENOMEM; pt_emb_readahead_stop undoes
 * whatever was started, also after a failure. */
int pt_emb_readahead_start(ra_pool *ra, rocks *r, unsigned threads);
void pt_emb_readahead_stop(ra_pool *ra);
/* Around a scan of family cf over s's ranges (rows or ranges of rows, each range's
 * first key read ahead): begin, then at after every range (done = ranges finished), then
 * end. The caller holds the store open (rocks' lock) from begin to end. span: as the
 * scan seeks its rows' chunks (pt_emb_seek_chunks; j->span as it learns). */
void pt_emb_readahead_begin(ra_pool *ra, ra_job *j, int cf, const pt_scan *s, uint32_t span);
void pt_emb_readahead_at(ra_job *j, size_t done);
void pt_emb_readahead_end(ra_job *j);
void pt_emb_readahead_stats(ra_pool *ra, uint64_t *scans, uint64_t *rows);

/* ---- erase.c ---- */

/* pt_backend_ops.erase: the head flushed, then the erased cells deleted from RocksDB (the
 * chunks an erase cuts through rewritten), or, write-back, from the sink. */
int pt_emb_erase(void *state, const pt_erase *x, size_t n);

/* ---- snapshot.c ---- */

/* pt_backend_ops.snapshot: <path>/snapshots/<name>. */
int pt_emb_snapshot(void *state, const char *name, int with_head, char *err, size_t errlen);

/* ---- the backend (embedded.c) ---- */

#define EMB_DEFAULT_BUDGET ((size_t)128 << 20)
#define EMB_DEFAULT_BLOCK_CACHE ((size_t)64 << 20)
/* Free bytes on a full disk's file system before RocksDB is reopened and writes count as
 * possible again. */
#define EMB_FREE_MIN ((uint64_t)4 << 20)

/* Where a flush calls a test's hook: after its first chunks went into RocksDB, and after
 * they all are durable there (before the frozen log is deleted). */
enum { EMB_HOOK_WRITTEN, EMB_HOOK_DURABLE };
/* Called by the flushing thread without mu; a nonzero return fails the flush with it. */
typedef int (*emb_hook)(void *ud, int stage);

typedef struct embedded {
    /* A write-back store (pt_backend_config.inner set): the points the head and the logs
     * hold are flushed into this backend rather than into RocksDB, which is not opened;
     * index cells go straight to it, and scans merge the head with its scans. NULL: the
     * embedded store itself. */
    pt_backend *sink;
    int lock_fd; /* a write-back store's lock on its directory (RocksDB's own otherwise) */
    rocks r;
    uint64_t index_preloaded; /* bytes of the index's files read at the open */
    expire x;
    pthread_mutex_t mu;
    pthread_cond_t work;    /* to the flush thread: a frozen generation, a retry, or stop */
    pthread_cond_t flushed; /* from it: a flush attempt ended */
    pthread_t thread;
    int mu_init, cond_init, drop_mu_init, thread_started;
    int ready;      /* opened and replayed: close may flush */
    size_t budget;  /* samples of the current generations (h.cur_bytes) that freeze a shard */
    /* head_max_age / HEAD_SHARDS: the flush thread freezes the next shard with cells (or,
     * with none anywhere, rows) when no shard was frozen for this long (0: never for age),
     * so every sample is in RocksDB within about head_max_age and a series gone twice that
     * long has no row left. */
    uint64_t age_step_ns;
    uint64_t last_freeze_ns; /* when a shard was last frozen (or the store opened) */
    uint64_t epoch; /* flushes completed; scans refresh their iterators when it moves */
    atomic_int young_rows; /* the last scan's rows began inside its window (a hint) */
    atomic_uint chunk_span; /* the last scan's pt_emb_seek_chunks span (a hint) */
    int frozen;     /* a head shard has a frozen generation (waiting for or in its flush) */
    unsigned frozen_shard; /* that shard, when frozen; HEAD_SHARDS: a sweep alone */
    unsigned next_shard;   /* the shard the next freeze looks at first */
    uint64_t frozen_seq;   /* the last log holding cells of that frozen generation */
    uint64_t swept_at;     /* the freeze (freezes) whose sweep is done */
    size_t sweep_rows;     /* head rows after the last sweep (flusher.c sweep_alone_locked) */
    hrow **flush_rows;     /* the flush thread's: the rows of every shard flushing */
    size_t flush_rows_cap;
    /* Per shard: the logs up to this one hold none of its cells that RocksDB lacks. */
    uint64_t done[HEAD_SHARDS];
    uint64_t logs_done;      /* the least of done: logs up to it may be deleted */
    pthread_mutex_t drop_mu; /* serializes deleting logs (pt_emb_wal_drop), without mu */
    /* Held by the flush thread through a flush (which reads stored chunks and writes them
     * back merged) and by an erase (which rewrites them), never with mu held first. */
    pthread_mutex_t rewrite_mu;
    int stop;       /* the flush thread is to exit */
    int retry_now;  /* a synchronous flush waits: skip the backoff */
    int flush_err;  /* the last flush attempt's result */
    uint64_t freezes, flushes, flush_failures, waits;
    /* A full disk (flusher.c disk_check_locked), the flush thread's alone. */
    int full_logged;       /* its start was logged and counted */
    uint64_t full_events;  /* times the disk filled up */
    uint64_t reopens;      /* RocksDB reopened after a disk error */
    uint64_t recover_at;   /* no reopen before this (CLOCK_MONOTONIC ns) */
    uint64_t pin_check_at; /* the next look at the pinned index blocks (ns) */
    uint64_t recover_ms;   /* the backoff after a failed reopen */
    uint64_t flush_ns, last_flush_ns; /* time spent in flushes, in total and the last one */
    emb_hook hook;  /* tests only */
    void *hook_ud;
    ra_pool ra; /* threads reading ahead of scans of many rows */
    head h;
    wal w;
    ihead ix;
} embedded;

/* The head's wall clock (head tick) now. */
static inline uint8_t pt_emb_head_tick(void)
{
    return (uint8_t)(pt_now_ns() / (HEAD_TICK_MS * 1000000ULL)) & HEAD_TICK_MASK;
}

/* ---- flusher.c ---- */

/* The flush thread's body (pthread_create's start routine; arg is the embedded). It exits
 * once e->stop is set; a frozen generation it could not flush stays in the logs. */
void *pt_emb_flusher_main(void *arg);
/* Waits until every cell written before the call is in RocksDB: the flush in progress,
 * then every shard with cells in turn. A failed flush ends the wait with its error; its
 * frozen generation stays with the flush thread's retries. */
int pt_emb_flusher_sync(embedded *e);
/* At open, alone: the replayed cells (every log) go into RocksDB, shard by shard, and the
 * logs are emptied. */
int pt_emb_flusher_replayed(embedded *e);
/* Freezes the next shard, in turn, that holds cells in its current generation, or with
 * rows set, rows; nothing when none does. Called with mu held and nothing frozen. */
int pt_emb_flusher_freeze_next_locked(embedded *e, int rows);
/* Bytes free on the disk holding dir for an unprivileged writer; UINT64_MAX when the
 * file system does not say. */
uint64_t pt_emb_disk_free(const char *dir);

/* ---- check.c ---- */

/* pt_backend_ops.verify: before open (e NULL) the lock and the logs' records; with the
 * open store, every entry of both column families read with RocksDB's block checksums
 * verified and every points chunk decoded. */
int pt_emb_verify(void *e, const pt_backend_config *cfg, pt_verify_fn fn, void *ud, char *err,
                  size_t errlen);

/* ---- flush.c ---- */

/* Writes the rows of head shard k's frozen generation into RocksDB as chunks and makes
 * them durable there; the caller then drops them (pt_emb_head_drop_frozen, under mu) and
 * the logs no shard needs. Called without mu by the one thread that flushes. On failure
 * the rows are as they were (some chunks may be in RocksDB already; flushing them again
 * is harmless). */
int pt_emb_flush_frozen(embedded *e, unsigned k, emb_hook hook, void *ud);
/* The same for the rows of every shard flushing (hshard flushing): the frozen shard's and
 * the sweep's, written into the same table files. */
int pt_emb_flush_flushing(embedded *e, emb_hook hook, void *ud);
/* A write-back store's flush (flush.c calls it for rows[0..n) of the shards flushing):
 * each row's frozen cells, sorted, go to the sink in batches that never cut a row, with
 * their sample times as their versions. On failure some rows may be in the sink
 * already; writing them again is harmless. */
int pt_emb_sink_flush(embedded *e, hrow **rows, size_t n);
/* Deletes the table files a flush left in dir when it was cut short (open calls it). */
void pt_emb_flush_clean(const char *dir);

/* ---- scan.c ---- */

/* The points table's part of the ops table's scan; takes mu only briefly per row. */
int pt_emb_scan_points(embedded *e, const pt_scan *s, pt_cell_fn fn, void *ud);
/* The smallest 4-byte qualifier at or after the byte string b, as a number (2^32: none). */
uint64_t pt_emb_qual_bound(pt_slice b);
/* Puts it on the first chunk of row that may hold cells at or after qual_start (none: the
 * row's first chunk), or past the row: seeking forward from span before the window's
 * start when span is nonzero, else (or when that finds nothing there) the last chunk
 * beginning at or before it; *young (in and out) says the row's chunks likely all begin
 * inside the window. key: room for the keys sought. 0 or PT_ENOMEM. */
int pt_emb_seek_chunks(rocksdb_iterator_t *it, pt_buf *key, pt_slice row, pt_slice qual_start,
                       uint32_t span, int *young);

/* ---- tests ---- */

/* Sets the flush hook (NULL: none) for the flushes that start from now on. */
void pt_emb_set_hook(embedded *e, emb_hook hook, void *ud);
/* Does again what open does once RocksDB is open, on an open store with nothing frozen
 * (else PT_EBUSY): drops the head, reopens the logs and replays them into a new head,
 * flushes the replayed cells and empties the logs (fuzz_wal: one store for every input,
 * its logs rewritten between calls). On failure, as after a failed open, the store is not
 * ready: a close then writes nothing; only this call or a close may follow. */
int pt_emb_reload_logs(embedded *e, char *err, size_t errlen);

#endif
