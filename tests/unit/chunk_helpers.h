/* For the tests that look at the embedded store's points table in RocksDB: open a store
 * at a path, scan one row against a model, count the chunks and their formats. */
#ifndef PT_TEST_CHUNK_HELPERS_H
#define PT_TEST_CHUNK_HELPERS_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "embedded_int.h"
#include "error.h"
#include "tap.h"

/* A scan's tally: what the cell callback saw, and how many of them did not match. */
typedef struct check {
    size_t cells, bad;
} check;

/* 1 when row (a NUL-terminated row key) scans to want cells, fn (its ud a check) finding
 * none bad. */
__attribute__((unused)) static int row_agrees(pt_backend *b, const char *row, size_t rowlen,
                                              pt_cell_fn fn, size_t want)
{
    pt_row_range rr = {{(const uint8_t *)row, rowlen}, {(const uint8_t *)row, rowlen + 1}};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = &rr, .nranges = 1};
    check c = {0};
    int rv = pt_backend_scan(b, &s, fn, &c);
    if (rv != 0 || c.bad || c.cells != want)
        diag("scan: rv %d, %zu cells (want %zu), %zu wrong", rv, c.cells, want, c.bad);
    return rv == 0 && !c.bad && c.cells == want;
}

/* The points table's chunks: how many, their keys' and values' bytes, their formats as a
 * bit set. */
typedef struct chunk_census {
    uint64_t chunks, bytes;
    unsigned fmts;
} chunk_census;

__attribute__((unused)) static chunk_census chunk_census_of(pt_backend *b)
{
    embedded *e = b->state;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(e->r.db, ro, e->r.cf[CF_POINTS]);
    chunk_census cc = {0};
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kn, vn;
        rocksdb_iter_key(it, &kn);
        const char *v = rocksdb_iter_value(it, &vn);
        cc.chunks++;
        cc.bytes += kn + vn;
        if (vn && (uint8_t)v[0] < 32)
            cc.fmts |= 1u << (uint8_t)v[0];
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    return cc;
}

/* Puts a chunk value v[0, n) at row (NUL-terminated) and first qualifier first, as a
 * flush would have written it. */
__attribute__((unused)) static void put_chunk(pt_backend *b, const char *row, size_t rowlen,
                                              uint32_t first, const uint8_t *v, size_t n)
{
    embedded *e = b->state;
    uint8_t key[512];
    if (rowlen + 5 > sizeof(key)) {
        BAIL_OUT("row key too long");
    }
    memcpy(key, row, rowlen + 1); /* the NUL is the separator */
    pt_put_be32(key + rowlen + 1, first);
    char *msg = NULL;
    rocksdb_put_cf(e->r.db, e->r.wopts, e->r.cf[CF_POINTS], (const char *)key, rowlen + 5,
                   (const char *)v, n, &msg);
    if (msg)
        diag("put: %s", msg);
    free(msg);
}

__attribute__((unused)) static int open_at(pt_backend *b, const char *path)
{
    char err[256] = "";
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    int rv = pt_backend_open(b, &pt_backend_embedded, &cfg, err, sizeof(err));
    if (rv != 0)
        diag("open %s: %s", path, err);
    return rv;
}

/* 1 when chunk bytes p[0, n) are refused by parse or by decoding (and by
 * pt_cellchunk_last for the formats it decodes), nothing appended to dec; reads an
 * exact-size copy, so that the sanitizers see any over-read. */
__attribute__((unused)) static int chunk_refused(const uint8_t *p, size_t n, pt_vcells *dec)
{
    uint8_t *copy = malloc(n ? n : 1);
    if (n)
        memcpy(copy, p, n);
    pt_cellchunk c;
    uint32_t last;
    pt_vcells_reset(dec);
    int rv = pt_cellchunk_parse(copy, n, &c), rv2 = rv;
    if (rv == 0) {
        rv = pt_cellchunk_cells(&c, dec);
        rv2 = c.fmt >= 3 ? pt_cellchunk_last(&c, &last) : rv;
    }
    free(copy);
    return rv == PT_EINTERNAL && rv2 == PT_EINTERNAL && dec->n == 0;
}

/* Two test lines: every truncation of the pt_cellchunk p[0, n) is refused, and so is the chunk
 * with a zero byte appended. */
__attribute__((unused)) static void chunk_cuts_refused(const uint8_t *p, size_t n, pt_vcells *dec,
                                                       const char *what)
{
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, p, n);
    longer[n] = 0;
    int all = 1;
    for (size_t cut = 0; cut < n; cut++)
        all &= chunk_refused(p, cut, dec);
    ok(all, "every truncation of a %zu-byte %s chunk is refused", n, what);
    ok(chunk_refused(longer, n + 1, dec), "a trailing zero byte is refused");
    free(longer);
}

/* A new store in a new directory under /tmp (dir: its name, a template ending in XXXXXX
 * that becomes the name; path: room for dir/db): 0, or -1 with a failed test line. */
__attribute__((unused)) static int open_temp(pt_backend *b, char *dir, char *path,
                                             size_t pathlen)
{
    if (!mkdtemp(dir)) {
        ok(0, "mkdtemp");
        return -1;
    }
    snprintf(path, pathlen, "%s/db", dir);
    if (open_at(b, path) != 0) {
        ok(0, "open a new store");
        return -1;
    }
    return 0;
}

__attribute__((unused)) static void remove_temp(const char *dir)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    if (system(cmd) != 0)
        diag("could not remove %s", dir);
}

#endif
