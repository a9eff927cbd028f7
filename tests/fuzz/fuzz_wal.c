/* libFuzzer: the embedded store's points log (points.wal) and what a replay leads to. The
 * input is the payload of one log record (row definitions and cells); the target wraps it
 * in a record with a correct header and checksum, so the fuzzer reaches the entry parser
 * instead of the checksum. Opening the store replays the record and flushes the cells
 * into RocksDB chunks; a scan of the whole points table then decodes those chunks. Every
 * cell the scan returns must have the 4-byte qualifier and ordering the table promises. */
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

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dir[0]) {
        snprintf(dir, sizeof(dir), "%s/pt-fuzz-wal-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(dir))
            abort();
    }
    nftw(dir, rm_one, 16, FTW_DEPTH | FTW_PHYS);
    char path[300];
    snprintf(path, sizeof(path), "%s/db", dir);
    /* A new store whose directory holds just the log the fuzzer wrote. */
    pt_backend b;
    char err[256];
    pt_embedded_conf ec = {.path = path};
    pt_backend_config cfg = {.own = &ec};
    if ((mkdir(dir, 0700) != 0 && errno != EEXIST) || mkdir(path, 0700) != 0)
        abort();
    uint8_t hdr[20];
    memcpy(hdr, "PTW1", 4);
    pt_put_le32(hdr + 4, 1);
    pt_put_le32(hdr + 8, (uint32_t)size);
    uint64_t sum = XXH3_64bits_withSeed(data, size, 1);
    pt_put_le32(hdr + 12, (uint32_t)sum);
    pt_put_le32(hdr + 16, (uint32_t)(sum >> 32));
    char wal[320];
    snprintf(wal, sizeof(wal), "%s/points.wal", path);
    FILE *f = fopen(wal, "wb");
    if (!f || fwrite(hdr, 1, sizeof(hdr), f) != sizeof(hdr) ||
        (size && fwrite(data, 1, size, f) != size) || fclose(f) != 0)
        abort();
    if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) == 0) {
        pt_row_range all = {{(const uint8_t *)"", 0}, {(const uint8_t *)"", 0}};
        pt_scan sc = {PT_TABLE_POINTS, &all, 1, {0}, {0}, 0, NULL};
        order o = {0};
        pt_backend_scan(&b, &sc, on_cell, &o);
        pt_backend_close(&b);
    }
    return 0;
}
