/*
 * RocksDB glue of the embedded backend: one column family per table, opened with options
 * tuned for ingest, and the index table, stored one RocksDB entry per cell:
 * key = row || 0x00 || qualifier, value = the cell value. Row keys never contain 0x00
 * (backend.h), so the first 0x00 splits a key into row and qualifier, and RocksDB's
 * bytewise order is Bigtable's (row, qualifier) order.
 */
#include <dirent.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "embedded_int.h"
#include "error.h"

static const char *const cf_names[NCF] = {"default", "points.v2", "index"};

/* The table files' bytes over their index and filter blocks' (and dictionaries'), as an
 * estimate: 474 on the months benchmark's store (64 MiB files), 84 on
 * bench/disk.sh's two hours (a few small files). RocksDB reads the tail of each file,
 * where they are, when it opens the file anyway: an estimate short of them costs an open
 * twice (pt_emb_rocks_open), not a read of the store. */
enum { PIN_SHARE = 128 };

enum { REOPEN_ERROR = 1, REOPEN_PLANNED = 2, REOPEN_WAIT_MS = 30000 };

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* RocksDB's C API reports only Status::ToString(), whose prefix names the status code. */
int pt_emb_rocks_error(char *msg)
{
    int rv = PT_EIO;
    if (strstr(msg, "No space left on device") || strstr(msg, "Disk quota exceeded"))
        rv = PT_ENOSPACE;
    else if (starts_with(msg, "Operation timed out"))
        rv = PT_ETIMEOUT;
    else if (starts_with(msg, "Resource busy") || starts_with(msg, "Operation failed. Try again") ||
             starts_with(msg, "Result incomplete") || starts_with(msg, "Shutdown in progress"))
        rv = PT_EUNAVAIL;
    rocksdb_free(msg);
    return rv;
}

int pt_emb_rocks_iter_error(rocksdb_iterator_t *it)
{
    char *msg = NULL;
    rocksdb_iter_get_error(it, &msg);
    return msg ? pt_emb_rocks_error(msg) : 0;
}

/* ---- the prefix extractor: a key's row part, row || 0x00 ----
 * It gives every SST file a bloom filter over rows, so reading one row (the common case:
 * one series in one time bucket) skips the files that do not hold it. */

static char *row_prefix(void *st, const char *key, size_t n, size_t *out_n)
{
    (void)st;
    const char *z = memchr(key, 0, n);
    *out_n = z ? (size_t)(z - key) + 1 : n;
    return (char *)key; /* RocksDB wants a pointer into the key; it is never written */
}

static unsigned char row_prefix_in_domain(void *st, const char *key, size_t n)
{
    (void)st;
    return memchr(key, 0, n) != NULL;
}

static unsigned char row_prefix_in_range(void *st, const char *key, size_t n)
{
    (void)st;
    (void)key;
    (void)n;
    return 0; /* deprecated by RocksDB, never consulted */
}

static const char *row_prefix_name(void *st)
{
    (void)st;
    return "promtable.RowPrefix.v1";
}

static void row_prefix_destroy(void *st)
{
    (void)st;
}

/* ---- open / close ---- */

/* Options tuned for ingest: large memtables written concurrently, ZSTD at every level, a
 * row bloom filter, and one block cache shared by both column families.
 *
 * Compression: ZSTD with a 16 KiB dictionary per table file for both families, because
 * their blocks are too small for ZSTD alone to learn the text they repeat: the points' row
 * keys (and fmt 4's varints) in 8 KiB blocks, the index's label text, hash references and
 * masks in IX_BLOCK blocks, at level 6. The dictionary is made from at most the first
 * DICT_BUFFER bytes of a file's blocks (unbounded, RocksDB buffers a whole memtable flush
 * in memory), and those blocks are finalized into one (ZSTD's finalize) rather than
 * trained: training costs every flush and compaction output a few hundred ms of the core
 * and saves no disk.
 *
 * Block sizes: a read of one series' short window costs a block in each level that holds
 * its row, so the block is what a read of many series decodes and keeps in the cache per
 * series: the points' 8 KiB blocks let 2,000 series' blocks in two levels fit the 64 MiB
 * block cache (16 KiB blocks did not, and every warm read decompressed them all again);
 * the dictionary keeps the smaller blocks' disk at the 16 KiB blocks' (within 1 %). The
 * index's blocks are 32 KiB: its keys repeat label text and day stamps row after row, so
 * larger blocks compress far better (a third off the index against 8 KiB), and its reads
 * are ranges of neighbouring rows (a list over days) or lookups the series-row cache
 * mostly spares.
 *
 * Index cells are hashed over every key, so every level-0 file spans the whole index and
 * each level-0 compaction rewrites the whole level below. Hence the index memtable is
 * 64 MiB like the points' and level 0 compacts at 16 files, not 4: new series then cost a
 * fraction of the compaction work.
 *
 * The index's level-0 files (its memtable flushes) are ZSTD at level 1, with the same
 * dictionary; the bottom level, where every compaction writes while the index is under
 * ~2.5 GB, stays at level 6. Under series churn level-0 files live for seconds before
 * sixteen of them are compacted into the bottom level, so compressing them harder only
 * costs CPU. The memtable a graceful stop flushes may stay in level 0 for days in a store
 * without churn, so pt_emb_rocks_flush_index writes it at level 6, and when the whole
 * index is small (IX_STOP_COMPACT) compacts level 0 into the bottom level: a store
 * without churn otherwise keeps its level-1 files, and every read of the index seeks
 * each of them, for weeks.
 *
 * Levels: RocksDB lets the level above the last hold up to max_bytes_for_level_base
 * before it pushes any of it down (beyond ten times that, a tenth of the last level). A
 * row (one series in one base period) whose chunks sit in two levels costs a read of a
 * block in each, even for a window only one of them holds: the upper level holds the
 * row's newer chunks, and the seek must read its block to learn that they begin after
 * the window. The points' upper level is kept at 64 MiB, not RocksDB's 256 MiB, so that
 * in a store of under a few GB it holds days of writes rather than weeks, and the rows
 * of a base period that has ended are soon in the last level alone: a cold read of
 * 2,000 series over an hour of a month ago reads a third fewer blocks. The price is
 * more compaction in such a store, and a level of at most 64 MiB more above those two
 * from 640 MB on rather than from 2.5 GB. The index keeps 256 MiB: its bottom level
 * takes every compaction while it is under ~2.5 GB (above).
 *
 * The figures behind each setting, and the commands that reproduce them, are in
 * docs/benchmarks.md, "Why the embedded store's settings". */
/* ZSTD's levels for the index (the bottom level's, and level 0's; the points use ZSTD's
 * default, RocksDB's kDefaultCompressionLevel) and a dictionary of DICT bytes per table
 * file, made from at most DICT_BUFFER bytes of its first blocks. */
enum {
    IX_BLOCK = 32 << 10,
    IX_STOP_COMPACT = 64 << 20,
    IX_LEVEL = 6,
    IX_LEVEL_L0 = 1,
    IX_LEVEL_BASE = 256 << 20,
    POINTS_LEVEL_BASE = 64 << 20,
    LEVEL_DEFAULT = 32767,
    DICT = 16 << 10,
    DICT_TRAIN = 100 * DICT,
    DICT_BUFFER = 4 << 20
};

/* ZSTD at level with a finalized dictionary (DICT, DICT_TRAIN, DICT_BUFFER), for every
 * level or, with bottom, for the bottommost only. */
static void zstd_dict(rocksdb_options_t *o, int level, int bottom)
{
    if (bottom) {
        rocksdb_options_set_bottommost_compression_options(o, -14, level, 0, DICT, 1);
        rocksdb_options_set_bottommost_compression_options_zstd_max_train_bytes(o, DICT_TRAIN, 1);
        rocksdb_options_set_bottommost_compression_options_max_dict_buffer_bytes(o, DICT_BUFFER,
                                                                                 1);
        rocksdb_options_set_bottommost_compression_options_use_zstd_dict_trainer(o, 0, 1);
    } else {
        rocksdb_options_set_compression_options(o, -14, level, 0, DICT);
        rocksdb_options_set_compression_options_zstd_max_train_bytes(o, DICT_TRAIN);
        rocksdb_options_set_compression_options_max_dict_buffer_bytes(o, DICT_BUFFER);
        rocksdb_options_set_compression_options_use_zstd_dict_trainer(o, 0);
    }
}

static rocksdb_options_t *make_options(rocksdb_cache_t *cache, int index,
                                       rocksdb_compactionfilter_t *filter)
{
    rocksdb_options_t *o = rocksdb_options_create();
    rocksdb_options_set_create_if_missing(o, 1);
    rocksdb_options_set_create_missing_column_families(o, 1);
    rocksdb_options_set_max_background_jobs(o, 2);
    rocksdb_options_set_bytes_per_sync(o, 1 << 20);
    rocksdb_options_set_keep_log_file_num(o, 4);
    /* RocksDB's info log (LOG) gets only the header an open writes: on a full disk its
     * first failed line made the next one abort the process (RocksDB 7.8 asserts that a
     * file which failed a write is not written again), and every background error logs.
     * Our own log says what failed. */
    rocksdb_options_set_info_log_level(o, 5 /* HEADER_LEVEL */);
    rocksdb_options_set_max_log_file_size(o, 16 << 20);
    /* The index family is written rarely; without a cap its memtable would pin old WAL
     * files until it fills. */
    rocksdb_options_set_max_total_wal_size(o, 256u << 20);

    rocksdb_options_set_write_buffer_size(o, 64u << 20);
    rocksdb_options_set_max_write_buffer_number(o, 3);
    rocksdb_options_set_target_file_size_base(o, 64u << 20);
    rocksdb_options_set_max_bytes_for_level_base(o, index ? IX_LEVEL_BASE : POINTS_LEVEL_BASE);
    rocksdb_options_set_level_compaction_dynamic_level_bytes(o, 1);
    rocksdb_options_set_compression(o, rocksdb_zstd_compression);
    rocksdb_options_set_bottommost_compression(o, rocksdb_zstd_compression);
    zstd_dict(o, index ? IX_LEVEL_L0 : LEVEL_DEFAULT, 0);
    if (index) {
        zstd_dict(o, IX_LEVEL, 1);
        rocksdb_options_set_level0_file_num_compaction_trigger(o, 16);
        rocksdb_options_set_level0_slowdown_writes_trigger(o, 32);
        rocksdb_options_set_level0_stop_writes_trigger(o, 48);
    }

    if (filter)
        rocksdb_options_set_compaction_filter(o, filter);

    rocksdb_options_set_prefix_extractor(
        o, rocksdb_slicetransform_create(NULL, row_prefix_destroy, row_prefix, row_prefix_in_domain,
                                         row_prefix_in_range, row_prefix_name));
    /* No memtable prefix bloom: it costs a hash on every insert and only saves reads. */

    rocksdb_block_based_table_options_t *t = rocksdb_block_based_options_create();
    rocksdb_block_based_options_set_block_size(t, index ? IX_BLOCK : 8 << 10);
    rocksdb_block_based_options_set_block_cache(t, cache);
    /* Partitioned index and filters: a seek reads one small index partition instead of
     * the whole index block of a 64 MiB table (megabytes to decompress for a small read
     * at 500,000 series); the top level stays pinned in the cache, and
     * index and filter blocks go to the cache's high-priority pool so data blocks do not
     * evict them. Partitions of 16 KiB, not 4: a cold read of many series reads a
     * partition per series and level where the rows are far apart, and one covers four
     * times the rows (16 % off a cold read of 2,000 series, warm reads unchanged). */
    rocksdb_block_based_options_set_index_type(
        t, rocksdb_block_based_table_index_type_two_level_index_search);
    rocksdb_block_based_options_set_partition_filters(t, 1);
    rocksdb_block_based_options_set_metadata_block_size(t, 16 << 10);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks(t, 1);
    rocksdb_block_based_options_set_cache_index_and_filter_blocks_with_high_priority(t, 1);
    rocksdb_block_based_options_set_pin_top_level_index_and_filter(t, 1);
    rocksdb_block_based_options_set_pin_l0_filter_and_index_blocks_in_cache(t, 1);
    rocksdb_block_based_options_set_format_version(t, 5);
    /* Only scans read this store, never point lookups, so whole-key filters are waste.
     * The points' one-row scans (a series' row) skip the table files without the row by
     * its prefix in a Ribbon filter, which takes about 30 % less space than a Bloom filter
     * of the same false-positive rate. The index is read by ranges of rows (a list over
     * days, a series' rows over days), which RocksDB seeks in total order, past any
     * prefix filter: it has none (a Bloom filter there takes 3.4 % of its bytes). */
    rocksdb_block_based_options_set_whole_key_filtering(t, 0);
    if (!index)
        rocksdb_block_based_options_set_filter_policy(t, rocksdb_filterpolicy_create_ribbon(10));
    /* Index entries delta-encoded in runs of 16 rather than each whole: neighbouring
     * blocks' separators share most of a long row key, so the index blocks take a
     * quarter of the bytes (kept loaded, above), for a short linear step after the
     * binary search. */
    rocksdb_block_based_options_set_index_block_restart_interval(t, 16);
    rocksdb_options_set_block_based_table_factory(o, t);
    rocksdb_block_based_options_destroy(t);
    return o;
}

/* A store of the one-entry-per-cell layout keeps its points in the family "points". Its
 * data would be misread as chunks, so it is refused with a clear message. */
static int old_layout(const char *path)
{
    rocksdb_options_t *o = rocksdb_options_create();
    size_t n = 0;
    char *msg = NULL;
    char **names = rocksdb_list_column_families(o, path, &n, &msg);
    rocksdb_options_destroy(o);
    int old = 0;
    if (msg) {
        rocksdb_free(msg); /* no store yet */
        n = 0;
    }
    for (size_t i = 0; i < n; i++)
        old |= strcmp(names[i], "points") == 0;
    if (names) /* allocated even when listing fails */
        rocksdb_list_column_families_destroy(names, n);
    return old;
}

/* base with the options of text applied (RocksDB's option-string syntax, for what its C
 * API has no setter for); base itself, unchanged, if this RocksDB does not take them. */
static rocksdb_options_t *with_string(rocksdb_options_t *base, const char *text, const char *what)
{
    rocksdb_options_t *o = rocksdb_options_create();
    char *msg = NULL;
    rocksdb_get_options_from_string(base, text, o, &msg);
    if (msg) {
        fprintf(stderr, "promtable: embedded: cannot %s: %s\n", what, msg);
        rocksdb_free(msg);
        rocksdb_options_destroy(o);
        return base;
    }
    rocksdb_options_destroy(base);
    return o;
}

/* The options of the whole store (and of the default family), with RocksDB's automatic
 * resume after a background error off: it runs on RocksDB's own thread, concurrently
 * with the flush thread's ingestion of table files, and can abort the process (Debian's
 * build keeps assertions) once a full disk has space again. The flush thread reopens the
 * store instead, at a point where nothing else uses it (pt_emb_rocks_reopen). */
static rocksdb_options_t *db_options(rocksdb_cache_t *cache)
{
    return with_string(make_options(cache, 0, NULL), "max_bgerror_resume_count=0",
                       "turn RocksDB's resume off");
}

/* A family's options; pinned: every table file's index and filter blocks are loaded when
 * the file is opened and stay in the block cache, so that a seek on a cold store reads
 * its data block only (pt_emb_rocks_open says when). */
static rocksdb_options_t *family_options(rocksdb_cache_t *cache, int index,
                                         rocksdb_compactionfilter_t *filter, int pinned)
{
    rocksdb_options_t *o = make_options(cache, index, filter);
    if (!pinned)
        return o;
    return with_string(o,
                       "block_based_table_factory={metadata_cache_options={"
                       "top_level_index_pinning=kAll;partition_pinning=kAll;"
                       "unpartitioned_pinning=kAll}}",
                       "keep the table files' index blocks loaded");
}

/* Opens r->path with the column families; db NULL and err set on failure. */
static int open_db(rocks *r, char *err, size_t errlen)
{
    /* Options are reference-counted inside RocksDB once the DB holds them, so our
     * handles are released right after open; the cache's is kept for its usage. */
    rocksdb_cache_t *cache = rocksdb_cache_create_lru(r->block_cache);
    rocksdb_options_t *opts = db_options(cache),
                      *popts = family_options(cache, 0, r->filter[CF_POINTS], r->pinned),
                      *iopts = family_options(cache, 1, r->filter[CF_INDEX], r->pinned);
    const rocksdb_options_t *cfopts[NCF] = {opts, popts, iopts};
    char *msg = NULL;
    r->db = rocksdb_open_column_families(opts, r->path, NCF, cf_names, cfopts, r->cf, &msg);
    rocksdb_options_destroy(opts);
    rocksdb_options_destroy(iopts);
    r->points_opts = popts;
    r->cache = cache;
    if (msg) {
        snprintf(err, errlen, "embedded: open %s: %s", r->path, msg);
        r->db = NULL;
        return pt_emb_rocks_error(msg);
    }
    return 0;
}

/* Destroys *p with fn unless NULL, and clears it. */
#define RELEASE(p, fn)                                                                      \
    do {                                                                                    \
        if (p)                                                                              \
            fn(p);                                                                          \
        (p) = NULL;                                                                         \
    } while (0)

static void close_db(rocks *r)
{
    for (int i = 0; i < NCF; i++)
        RELEASE(r->cf[i], rocksdb_column_family_handle_destroy);
    RELEASE(r->db, rocksdb_close);
    RELEASE(r->cache, rocksdb_cache_destroy);
    RELEASE(r->points_opts, rocksdb_options_destroy);
}

/* Bytes of the table files in path (0 when there are none yet). */
static uint64_t table_bytes(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return 0;
    uint64_t sum = 0;
    struct stat st;
    for (struct dirent *de; (de = readdir(d));) {
        size_t n = strlen(de->d_name);
        if (n >= 4 && strcmp(de->d_name + n - 4, ".sst") == 0 &&
            fstatat(dirfd(d), de->d_name, &st, 0) == 0)
            sum += (uint64_t)st.st_size;
    }
    closedir(d);
    return sum;
}

int pt_emb_rocks_pin_check(rocks *r)
{
    if (!r->pinned || !r->cache)
        return 0;
    size_t pinned = rocksdb_cache_get_pinned_usage(r->cache);
    if (pinned > r->pin_max)
        return 1;
    /* The pinned blocks come on top of the cache's own budget, which stays the data's. */
    rocksdb_cache_set_capacity(r->cache, r->block_cache + pinned);
    return 0;
}

int pt_emb_rocks_open(rocks *r, const char *path, int sync, size_t block_cache, size_t pin_max,
                      char *err, size_t errlen)
{
    if (old_layout(path)) {
        snprintf(err, errlen,
                 "embedded: %s holds the old one-key-per-sample layout (column "
                 "family \"points\"); copy its data out with the old version",
                 path);
        return PT_EINTERNAL;
    }
    if (pthread_rwlock_init(&r->lock, NULL) != 0)
        return PT_ENOMEM;
    r->lock_init = 1;
    r->sync = sync;
    r->block_cache = block_cache;
    r->pin_max = pin_max;
    /* Pinned while the index and filter blocks (estimated at 1/PIN_SHARE of the table
     * files' bytes) fit the budget; a store that grows past it later is reopened without
     * (pt_emb_rocks_pin_check). */
    r->pinned = pin_max > 0 && table_bytes(path) / PIN_SHARE <= pin_max;
    if (!(r->path = strdup(path)))
        return PT_ENOMEM;
    int rv = open_db(r, err, errlen);
    if (rv == 0 && pt_emb_rocks_pin_check(r)) { /* the estimate was short */
        r->pinned = 0;
        close_db(r);
        rv = open_db(r, err, errlen);
    }
    if (rv != 0)
        return rv;
    r->wopts = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(r->wopts, sync ? 1 : 0);
    rocksdb_writeoptions_set_memtable_insert_hint_per_batch(r->wopts, 1);
    r->envopts = rocksdb_envoptions_create();
    return r->envopts ? 0 : PT_ENOMEM;
}

void pt_emb_rocks_close(rocks *r)
{
    close_db(r);
    RELEASE(r->wopts, rocksdb_writeoptions_destroy);
    RELEASE(r->envopts, rocksdb_envoptions_destroy);
    free(r->path);
    r->path = NULL;
    if (r->lock_init)
        pthread_rwlock_destroy(&r->lock);
    r->lock_init = 0;
}

int pt_emb_rocks_reopen(rocks *r, int planned, char *err, size_t errlen)
{
    atomic_store(&r->reopening, planned ? REOPEN_PLANNED : REOPEN_ERROR);
    pthread_rwlock_wrlock(&r->lock);
    close_db(r);
    int rv = open_db(r, err, errlen);
    if (rv == 0) {
        atomic_store(&r->broken, 0);
        pt_emb_rocks_pin_check(r);
    }
    pthread_rwlock_unlock(&r->lock);
    atomic_store(&r->reopening, 0);
    return rv;
}

int pt_emb_rocks_enter(rocks *r)
{
    /* A planned reopen is a close and an open of a healthy store: waited for (up to
     * REOPEN_WAIT_MS, polled: it happens about once in a store's life). */
    for (int ms = 0; atomic_load(&r->reopening) == REOPEN_PLANNED && ms < REOPEN_WAIT_MS; ms++)
        nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    if (atomic_load(&r->reopening))
        return PT_EUNAVAIL;
    pthread_rwlock_rdlock(&r->lock);
    if (r->db)
        return 0;
    pthread_rwlock_unlock(&r->lock);
    return PT_EUNAVAIL;
}

int pt_emb_rocks_enter_write(rocks *r)
{
    int rv = pt_emb_rocks_enter(r);
    if (rv == 0 && atomic_load(&r->broken)) {
        pt_emb_rocks_leave(r);
        rv = atomic_load(&r->full) ? PT_ENOSPACE : PT_EUNAVAIL;
    }
    return rv;
}

void pt_emb_rocks_leave(rocks *r)
{
    pthread_rwlock_unlock(&r->lock);
}

int pt_emb_rocks_note(rocks *r, int rv)
{
    if (rv == PT_ENOSPACE)
        atomic_store(&r->full, 1);
    if (rv == PT_ENOSPACE || rv == PT_EIO)
        atomic_store(&r->broken, 1);
    return rv;
}

/* Sets the ZSTD level of the index's level-0 files, the rest of their options (the
 * dictionary's) kept; on failure logs and leaves it. */
static void index_l0_level(rocks *r, int level)
{
    char v[32];
    snprintf(v, sizeof v, "{level=%d}", level);
    const char *keys[] = {"compression_opts"}, *vals[] = {v};
    char *msg = NULL;
    rocksdb_set_options_cf(r->db, r->cf[CF_INDEX], 1, keys, vals, &msg);
    if (msg) {
        fprintf(stderr, "promtable: embedded: setting the index's level-0 compression: %s\n",
                msg);
        rocksdb_free(msg);
    }
}

int pt_emb_rocks_flush_index(rocks *r)
{
    if (!r->db || atomic_load(&r->broken))
        return PT_EUNAVAIL; /* a reopen failed, or none was made after a disk error */
    rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
    if (!fo)
        return PT_ENOMEM;
    rocksdb_flushoptions_set_wait(fo, 1);
    /* This file may stay in level 0 long: it gets the bottom level's compression (an
     * error leaves level 1: a larger file, no less correct). */
    index_l0_level(r, IX_LEVEL);
    char *msg = NULL;
    rocksdb_flush_cf(r->db, fo, r->cf[CF_INDEX], &msg);
    rocksdb_flushoptions_destroy(fo);
    if (msg)
        return pt_emb_rocks_error(msg);
    /* num-files-at-level<N> is a string property, not an integer one. */
    char *l0 = rocksdb_property_value_cf(r->db, r->cf[CF_INDEX], "rocksdb.num-files-at-level0");
    int files = l0 ? atoi(l0) : 0;
    rocksdb_free(l0);
    uint64_t bytes = 0;
    if (files < 1 ||
        rocksdb_property_int_cf(r->db, r->cf[CF_INDEX], "rocksdb.live-sst-files-size", &bytes) !=
            0 ||
        bytes > IX_STOP_COMPACT)
        return 0;
    /* A failure leaves the files as they were: larger, no less correct. */
    rocksdb_compactoptions_t *co = rocksdb_compactoptions_create();
    if (!co)
        return 0;
    /* kForceOptimized: level 0 into the bottom level, then the bottom level's other files
     * rewritten too (one a trivial move took down keeps its level-1 compression
     * otherwise), but not the files this compaction just wrote. */
    rocksdb_compactoptions_set_bottommost_level_compaction(co, 3);
    /* Not behind a compaction of the points running meanwhile (they share no files). */
    rocksdb_compactoptions_set_exclusive_manual_compaction(co, 0);
    rocksdb_compact_range_cf_opt(r->db, r->cf[CF_INDEX], co, NULL, 0, NULL, 0);
    rocksdb_compactoptions_destroy(co);
    return 0;
}

uint64_t pt_emb_rocks_index_files(rocks *r, pt_emb_file_fn *fn, void *ud)
{
    const rocksdb_livefiles_t *lf = rocksdb_livefiles(r->db);
    if (!lf)
        return 0;
    uint64_t total = 0;
    for (int i = 0; i < rocksdb_livefiles_count(lf); i++) {
        if (strcmp(rocksdb_livefiles_column_family_name(lf, i), cf_names[CF_INDEX]) != 0)
            continue;
        uint64_t size = rocksdb_livefiles_size(lf, i);
        total += size;
        char file[4096];
        if (fn && snprintf(file, sizeof file, "%s/%s", r->path, rocksdb_livefiles_name(lf, i)) <
                      (int)sizeof file)
            fn(file, size, ud);
    }
    rocksdb_livefiles_destroy(lf);
    return total;
}

/* Reads one file through the page cache; *(uint64_t *)ud += its bytes. */
static void preload_file(const char *path, uint64_t size, void *ud)
{
    enum { CHUNK = 1 << 20 };
    (void)size;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return; /* compacted away meanwhile */
    char *buf = malloc(CHUNK);
    posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
    for (ssize_t k; buf && (k = read(fd, buf, CHUNK)) > 0;)
        *(uint64_t *)ud += (uint64_t)k;
    free(buf);
    close(fd);
}

uint64_t pt_emb_rocks_preload_index(rocks *r, uint64_t budget)
{
    uint64_t total = pt_emb_rocks_index_files(r, NULL, NULL), done = 0;
    if (total > 0 && total <= budget)
        pt_emb_rocks_index_files(r, preload_file, &done);
    return done;
}

void pt_emb_rocks_memory(rocks *r, uint64_t *memtables, uint64_t *readers, uint64_t *cache,
                         uint64_t *pinned)
{
    *memtables = *readers = *cache = *pinned = 0;
    if (pt_emb_rocks_enter(r) != 0)
        return;
    for (int i = 0; i < NCF; i++) {
        uint64_t v;
        if (rocksdb_property_int_cf(r->db, r->cf[i], "rocksdb.cur-size-all-mem-tables", &v) == 0)
            *memtables += v;
        if (rocksdb_property_int_cf(r->db, r->cf[i], "rocksdb.estimate-table-readers-mem", &v) == 0)
            *readers += v;
    }
    *cache = rocksdb_cache_get_usage(r->cache);
    *pinned = rocksdb_cache_get_pinned_usage(r->cache);
    pt_emb_rocks_leave(r);
}

/* The read options of it[one_row], made the first time (seeing snap, if given). */
static rocksdb_readoptions_t *iter_options(rocks_iters *its, int one_row,
                                           const rocksdb_snapshot_t *snap)
{
    if (its->ro[one_row])
        return its->ro[one_row];
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    if (!ro)
        return NULL;
    if (snap)
        rocksdb_readoptions_set_snapshot(ro, snap);
    /* With a prefix extractor, RocksDB's default seek may skip keys of other prefixes;
     * range scans must ask for total order, one-row scans may stop at the prefix end. */
    if (one_row)
        rocksdb_readoptions_set_prefix_same_as_start(ro, 1);
    else
        rocksdb_readoptions_set_total_order_seek(ro, 1);
    return its->ro[one_row] = ro;
}

int pt_emb_rocks_iter(rocks *r, rocks_iters *its, int cf, int one_row,
                      const rocksdb_snapshot_t *snap)
{
    if (its->it[one_row])
        rocksdb_iter_destroy(its->it[one_row]);
    its->it[one_row] = NULL;
    rocksdb_readoptions_t *ro = iter_options(its, one_row, snap);
    if (!ro)
        return PT_ENOMEM;
    its->it[one_row] = rocksdb_create_iterator_cf(r->db, ro, r->cf[cf]);
    return its->it[one_row] ? 0 : PT_ENOMEM;
}

/* RocksDB's iterators keep a pointer to the options' bound (a slice inside the C API's
 * options), which the setter rewrites in place, and check it again on every seek
 * (BlockBasedTableIterator re-checks a data block's bound when a seek stays in it). */
int pt_emb_rocks_iters_row(rocks_iters *its, pt_slice row)
{
    rocksdb_readoptions_t *ro = iter_options(its, 1, NULL);
    if (!ro || pt_emb_rocks_key(&its->bound, row.p, row.n, 1, NULL, 0) != 0)
        return PT_ENOMEM;
    rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)its->bound.p, its->bound.len);
    return 0;
}

void pt_emb_rocks_iters_free(rocks_iters *its)
{
    for (int i = 0; i < 2; i++) {
        if (its->it[i])
            rocksdb_iter_destroy(its->it[i]);
        if (its->ro[i])
            rocksdb_readoptions_destroy(its->ro[i]);
    }
    pt_buf_free(&its->bound);
    memset(its, 0, sizeof(*its));
}

/* ---- keys ---- */

int pt_emb_rocks_key(pt_buf *k, const void *a, size_t an, int sep, const void *b, size_t bn)
{
    size_t n = an + (sep >= 0) + bn;
    pt_buf_reset(k);
    if (pt_buf_reserve(k, n) != 0)
        return PT_ENOMEM;
    if (an)
        memcpy(k->p, a, an);
    if (sep >= 0)
        k->p[an] = (uint8_t)sep;
    if (bn)
        memcpy(k->p + an + (sep >= 0), b, bn);
    pt_buf_commit(k, n);
    return 0;
}

/* If b holds no 0x00, the bound is b || 0x00. If its first 0x00 is at i, every row that
 * compares below b is <= b[0..i), so the bound is b[0..i) || 0x01: it sorts after all
 * cells of that row (including qualifiers that start with 0x00) and before the rows
 * extending it. The single-row end r || 0x00 thus becomes r || 0x01. */
int pt_emb_rocks_row_bound(pt_buf *k, pt_slice b)
{
    const uint8_t *z = b.n ? memchr(b.p, 0, b.n) : NULL;
    if (z)
        return pt_emb_rocks_key(k, b.p, (size_t)(z - b.p), 1, NULL, 0);
    return pt_emb_rocks_key(k, b.p, b.n, 0, NULL, 0);
}

/* Only such a range can use the row bloom filter. */
int pt_emb_rocks_one_row(const pt_row_range *r)
{
    pt_slice s = r->start, e = r->end;
    return s.n > 0 && e.n > s.n && e.p[s.n] == 0 && memcmp(s.p, e.p, s.n) == 0 &&
           memchr(s.p, 0, s.n) == NULL;
}

static pt_slice buf_slice(const pt_buf *b)
{
    return (pt_slice){b->p, b->len};
}

/* ---- the index table ---- */

typedef struct scanner {
    rocks *r;
    const pt_scan *s;
    pt_cell_fn fn;
    void *ud;
    const rocksdb_snapshot_t *snap;
    rocks_iters its;
    pt_buf seek, upper, last_row;
    int have_row;
    size_t rows;
    int done; /* row_limit reached or the callback asked to stop */
    int at_end; /* the range iterator stands on the first key past the last range */
    int pause;  /* ranges to seek without trying steps first */
} scanner;

static rocksdb_iterator_t *scanner_iter(scanner *sc, int one_row)
{
    if (!sc->its.it[one_row] && pt_emb_rocks_iter(sc->r, &sc->its, CF_INDEX, one_row, sc->snap))
        return NULL;
    return sc->its.it[one_row];
}

static void seek_to(rocksdb_iterator_t *it, const pt_buf *k)
{
    rocksdb_iter_seek(it, (const char *)k->p, k->len);
}

/* Puts the range iterator on the first key >= sc->seek. When the previous range ended at
 * its bound the iterator stands at or before that key, so a few steps forward replace a
 * seek when the ranges are close (the series rows of a dense set of references).
 * When steps did not get there, the next ranges seek directly for a while: sparse ranges
 * then cost a seek each and no wasted steps. */
static void advance_to(scanner *sc, rocksdb_iterator_t *it)
{
    enum { STEPS = 4, PAUSE = 16 };
    int at_end = sc->at_end;
    sc->at_end = 0;
    if (sc->pause) {
        sc->pause--;
        at_end = 0;
    }
    for (int i = 0; at_end && i < STEPS && rocksdb_iter_valid(it); i++) {
        size_t kn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (pt_slice_cmp((pt_slice){(const uint8_t *)k, kn}, buf_slice(&sc->seek)) >= 0)
            return;
        if (sc->s->visited)
            (*sc->s->visited)++;
        rocksdb_iter_next(it);
    }
    if (at_end)
        sc->pause = PAUSE;
    seek_to(it, &sc->seek);
}

static int scan_range(scanner *sc, const pt_row_range *r)
{
    const pt_scan *s = sc->s;
    int one_row = pt_emb_rocks_one_row(r);
    int bounded = r->end.n > 0;
    int rv;

    if (bounded && (rv = pt_emb_rocks_row_bound(&sc->upper, r->end)) != 0)
        return rv;
    if ((rv = pt_emb_rocks_row_bound(&sc->seek, r->start)) != 0)
        return rv;
    pt_slice upper = buf_slice(&sc->upper);
    if (bounded && pt_slice_cmp(buf_slice(&sc->seek), upper) >= 0)
        return 0;

    rocksdb_iterator_t *it = scanner_iter(sc, one_row);
    if (!it)
        return PT_ENOMEM;
    if (one_row)
        seek_to(it, &sc->seek);
    else
        advance_to(sc, it);
    while (rocksdb_iter_valid(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (s->visited)
            (*s->visited)++;
        if (bounded && pt_slice_cmp((pt_slice){(const uint8_t *)k, kn}, upper) >= 0) {
            sc->at_end = !one_row;
            break;
        }
        const char *z = memchr(k, 0, kn);
        if (!z)
            return PT_EINTERNAL; /* not a key this backend wrote */
        pt_slice row = {(const uint8_t *)k, (size_t)(z - k)};
        pt_slice qual = {(const uint8_t *)z + 1, kn - row.n - 1};

        /* Skip to the qualifier range rather than step through cells outside it. */
        if (s->qual_start.n && pt_slice_cmp(qual, s->qual_start) < 0) {
            if ((rv = pt_emb_rocks_key(&sc->seek, row.p, row.n, 0, s->qual_start.p,
                                       s->qual_start.n)))
                return rv;
            seek_to(it, &sc->seek);
            continue;
        }
        if (s->qual_end.n && pt_slice_cmp(qual, s->qual_end) >= 0) {
            if (one_row)
                break;
            if ((rv = pt_emb_rocks_key(&sc->seek, row.p, row.n, 1, NULL, 0)))
                return rv;
            seek_to(it, &sc->seek);
            continue;
        }

        if (!sc->have_row || !pt_slice_eq(row, buf_slice(&sc->last_row))) {
            if (s->row_limit && sc->rows == s->row_limit) {
                sc->done = 1;
                return 0;
            }
            if ((rv = pt_emb_rocks_key(&sc->last_row, row.p, row.n, -1, NULL, 0)))
                return rv;
            sc->have_row = 1;
            sc->rows++;
        }
        const char *v = rocksdb_iter_value(it, &vn);
        rv = sc->fn(sc->ud, row, qual, (pt_slice){(const uint8_t *)v, vn});
        if (rv < 0)
            return rv;
        if (rv > 0) {
            sc->done = 1;
            return 0;
        }
        rocksdb_iter_next(it);
    }
    return pt_emb_rocks_iter_error(it);
}

int pt_emb_rocks_scan_index(rocks *r, ra_pool *ra, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    scanner sc = {.r = r, .s = s, .fn = fn, .ud = ud};

    /* Ranges of both kinds need two iterators; a snapshot keeps them consistent. */
    size_t ones = 0;
    for (size_t i = 0; i < s->nranges; i++)
        ones += pt_emb_rocks_one_row(&s->ranges[i]);
    if (ones > 0 && ones < s->nranges)
        sc.snap = rocksdb_create_snapshot(r->db);

    ra_job j;
    pt_emb_readahead_begin(ra, &j, CF_INDEX, s, 0);
    int rv = 0;
    for (size_t i = 0; i < s->nranges && !sc.done && rv == 0; i++) {
        rv = scan_range(&sc, &s->ranges[i]);
        pt_emb_readahead_at(&j, i + 1);
    }
    pt_emb_readahead_end(&j);

    pt_emb_rocks_iters_free(&sc.its);
    if (sc.snap)
        rocksdb_release_snapshot(r->db, sc.snap);
    pt_buf_free(&sc.seek);
    pt_buf_free(&sc.upper);
    pt_buf_free(&sc.last_row);
    return rv;
}

int pt_emb_chunk_key_split(const char *k, size_t kn, pt_slice *row, uint32_t *first)
{
    const char *z = memchr(k, 0, kn);
    if (!z || kn - (size_t)(z - k) != 5)
        return PT_EINTERNAL;
    *row = (pt_slice){(const uint8_t *)k, (size_t)(z - k)};
    *first = pt_get_be32((const uint8_t *)z + 1);
    return 0;
}
