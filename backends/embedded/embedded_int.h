/*
 * Internals shared by the embedded backend's modules: embedded.c (RocksDB, the index
 * table, the ops table) and embedded_head.c (the points table: head, WAL, flush, scans).
 * Nothing outside backends/embedded*.c and the tests includes this.
 */
#ifndef PT_EMBEDDED_INT_H
#define PT_EMBEDDED_INT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <rocksdb/c.h>

#include "backend.h"
#include "embedded.h"

enum { CF_DEFAULT, CF_POINTS, CF_INDEX, NCF };

/* The head's limits. A chunk holds at most CHUNK_MAX cells; a row's last chunk with fewer
 * than CHUNK_SMALL cells is rewritten with the next flush's cells appended, so rows that
 * get few samples per flush still end up in chunks of a useful size. */
enum { CHUNK_MAX = 1024, CHUNK_SMALL = 256 };

#define EMB_DEFAULT_BUDGET ((size_t)256 << 20)

typedef struct hrow hrow;

/* The in-memory head of the points table plus its write-ahead log. Everything in it is
 * guarded by mu. */
typedef struct head {
    pthread_mutex_t mu;
    int mu_init;
    int ready;           /* opened and replayed: close may flush */
    hrow **tab;          /* hash table, chained, 2^k buckets */
    size_t mask, nrows;
    size_t cells;        /* cells held, duplicates included */
    size_t bytes;        /* memory held: rows, cell arrays, values, the hash table */
    size_t cell_bytes;   /* the samples held (16 bytes a cell, longer values), against budget */
    size_t budget;
    uint64_t epoch;      /* flushes completed; scans refresh their iterators when it moves */
    uint64_t flushes;
    /* WAL */
    int wal_fd;
    char *wal_path;
    uint32_t wal_gen;    /* generation of the records now being appended */
    uint32_t wal_next_id;/* next row id of this generation */
    uint64_t wal_size;
    int sync;
    uint8_t *wbuf;       /* record being built */
    size_t wbuf_cap;
    hrow **wrows;        /* rows of the batch being applied */
    size_t wrows_cap;
} head;

typedef struct embedded {
    rocksdb_t *db;
    rocksdb_column_family_handle_t *cf[NCF];
    rocksdb_writeoptions_t *wopts;
    rocksdb_writeoptions_t *flush_wopts; /* no RocksDB WAL: the head's WAL covers these */
    head h;
} embedded;

/* A growable byte buffer for keys. */
typedef struct keybuf {
    char *p;
    size_t n, cap;
} keybuf;

/* Grows *p (capacity *cap, first allocation `first` bytes, then doubling) to hold n bytes;
 * 0 or PT_ENOMEM, *p unchanged on failure. */
int pt_emb_reserve(void **p, size_t *cap, size_t n, size_t first);
int pt_emb_kb_set(keybuf *kb, const void *a, size_t an, int sep, const void *b, size_t bn);
int pt_emb_kb_row_bound(keybuf *kb, pt_slice b);
int pt_emb_single_row(const pt_row_range *r);
int pt_emb_rocks_error(char *msg);

/* embedded_head.c */
int pt_emb_head_open(embedded *e, const pt_embedded_conf *cfg, char *err, size_t errlen);
/* Flushes what is left and releases the head; returns the flush result. */
int pt_emb_head_close(embedded *e);
int pt_emb_head_write(embedded *e, const pt_mutation *m, size_t n);
int pt_emb_points_scan(embedded *e, const pt_scan *s, pt_cell_fn fn, void *ud);

#endif
