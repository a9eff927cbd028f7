/* libFuzzer: the embedded store's points log (points.<n>.wal) and what a replay leads to. The
 * input is the payload of one log record (row definitions, points cells and index cells); the target wraps it
 * in a record with a correct header and checksum, so the fuzzer reaches the entry parser
 * instead of the checksum. Replaying the log (what an open does) flushes the cells into
 * RocksDB chunks and its index cells into the index table; scans of both whole tables
 * then decode those chunks. Every points cell must have the 4-byte qualifier, and every
 * cell of either table the ordering the tables promise (each cell once).
 *
 * Opening RocksDB costs far more than the rest (7-40 inputs/s under ASan), so one store
 * stays open: per input its tables are emptied, the record written as its points.1.wal and
 * the store's open-time replay and flush run again on it (pt_emb_reload_logs, tests only)
 * with a new head; a replay that fails is a failed open (nothing to scan). A store is
 * opened anew every REOPEN_EVERY inputs (the deletions' tombstones are shed). */
#include <errno.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "embedded.h"
#include "embedded_int.h"
#include "backend.h"
#include "bytes.h"

extern const pt_backend_ops pt_backend_embedded;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[256];

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st, (void)flag, (void)f;
    return remove(p);
}

typedef struct order {
    uint8_t row[8192];
    size_t rn;
    uint32_t q;
    int any;
} order;

static int on_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    order *o = ud;
    (void)value;
    if (qual.n != 4)
        __builtin_trap();
    uint32_t q = pt_get_be32(qual.p);
    if (row.n <= sizeof(o->row)) {
        int c = o->any ? pt_slice_cmp((pt_slice){o->row, o->rn}, row) : -1;
        if (c > 0 || (c == 0 && q <= o->q))
            __builtin_trap(); /* rows and qualifiers out of order, or a cell twice */
        memcpy(o->row, row.p, row.n);
        o->rn = row.n;
    }
    o->q = q;
    o->any = 1;
    return 0;
}

/* Index cells: strictly increasing by (row, qualifier). */
static int on_index_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    order *o = ud;
    (void)value;
    if (row.n == 0 || memchr(row.p, 0, row.n))
        __builtin_trap();
    if (row.n + 1 + qual.n <= sizeof(o->row)) {
        uint8_t key[sizeof(o->row)];
        memcpy(key, row.p, row.n);
        key[row.n] = 0;
        if (qual.n)
            memcpy(key + row.n + 1, qual.p, qual.n);
        pt_slice k = {key, row.n + 1 + qual.n};
        if (o->any && pt_slice_cmp((pt_slice){o->row, o->rn}, k) >= 0)
            __builtin_trap();
        memcpy(o->row, key, k.n);
        o->rn = k.n;
        o->any = 1;
    }
    return 0;
}

enum { REOPEN_EVERY = 4096 };

static pt_backend b;
static int open_now;
static unsigned inputs;
static char path[300];

/* A new store in an empty directory. */
static void open_store(void)
{
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/pt-fuzz-wal-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            abort();
        snprintf(path, sizeof(path), "%s/db", dir);
    }
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    char err[256] = "";
    pt_embedded_conf ec = {.path = path};
    pt_backend_config cfg = {.own = &ec};
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || mkdir(path, 0700) != 0 ||
        pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz_wal: %s\n", err);
        abort();
    }
    open_now = 1;
    inputs = 0;
}

/* Deletes every entry of both tables: the store is as a new one to the next input. */
static void empty_store(embedded *e)
{
    rocksdb_writebatch_t *wb = rocksdb_writebatch_create();
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_total_order_seek(ro, 1);
    for (int cf = CF_POINTS; cf <= CF_INDEX; cf++) {
        rocksdb_iterator_t *it = rocksdb_create_iterator_cf(e->r.db, ro, e->r.cf[cf]);
        for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
            size_t kn;
            const char *k = rocksdb_iter_key(it, &kn);
            rocksdb_writebatch_delete_cf(wb, e->r.cf[cf], k, kn);
        }
        rocksdb_iter_destroy(it);
    }
    char *msg = NULL;
    rocksdb_write(e->r.db, e->r.wopts, wb, &msg);
    if (msg)
        abort();
    rocksdb_readoptions_destroy(ro);
    rocksdb_writebatch_destroy(wb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (open_now && inputs >= REOPEN_EVERY) {
        pt_backend_close(&b);
        open_now = 0;
    }
    if (!open_now)
        open_store();
    inputs++;
    embedded *e = b.state;
    empty_store(e);
    /* The store's directory holds just the log the fuzzer wrote. */
    uint8_t hdr[20];
    memcpy(hdr, "PTW1", 4);
    pt_put_le32(hdr + 4, 1);
    pt_put_le32(hdr + 8, (uint32_t)size);
    uint64_t sum = XXH3_64bits_withSeed(data, size, 1);
    pt_put_le32(hdr + 12, (uint32_t)sum);
    pt_put_le32(hdr + 16, (uint32_t)(sum >> 32));
    char wal[320];
    snprintf(wal, sizeof(wal), "%s/points.1.wal", path);
    FILE *f = fopen(wal, "wb");
    if (!f || fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr) ||
        (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    char err[256];
    if (pt_emb_reload_logs(e, err, sizeof(err)) != 0)
        return 0; /* what a failed open is: nothing to scan, the next input reloads */
    pt_row_range all = {{(const uint8_t *)"", 0}, {(const uint8_t *)"", 0}};
    pt_scan sc = {.table = PT_TABLE_POINTS, .ranges = &all, .nranges = 1};
    order o = {0};
    pt_backend_scan(&b, &sc, on_cell, &o);
    pt_scan si = {.table = PT_TABLE_INDEX, .ranges = &all, .nranges = 1};
    order oi = {0};
    pt_backend_scan(&b, &si, on_index_cell, &oi);
    return 0;
}
