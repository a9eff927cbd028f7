/*
 * `promtable check` on the embedded store (pt_backend_ops.verify): what the generic scans
 * cannot see.
 *
 * Before open (e == NULL): whether another process holds the store (RocksDB's LOCK file,
 * an fcntl lock: F_GETLK only looks), then every record of the points logs (those of
 * older versions, then points.<seq>.wal in order, as a start replays them): magic,
 * generation, length, XXH3 checksum and the row/cell entries (the format of wal.c). The
 * check reads a log as replay does (wal.c's record, resync and row id rules) and says
 * what a start would do with it:
 *   - damaged bytes with an intact record after them are skipped: replay goes on at that
 *     record; the samples of series only the damaged bytes defined are lost (counted);
 *   - damaged bytes with no intact record after them are a torn or stale tail: dropped;
 *   - a record whose checksum holds but whose entries do not parse stops the start.
 * After open: every entry of both column families read with RocksDB's block checksums
 * verified (a flipped byte in a table file fails its block), and every points chunk
 * parsed and decoded (its key's first qualifier and its count must agree with the cells).
 */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embedded.h"
#include "embedded_int.h"
#include "error.h"

/* wal.c's record header: magic "PTW1" | generation | payload length | XXH3-64 (LE). */
enum { LOG_HDR = 20 };

typedef struct report {
    pt_verify_fn fn;
    void *ud;
    size_t damage;
} report;

static void say(report *r, int damage, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void say(report *r, int damage, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    r->damage += (size_t)damage;
    r->fn(r->ud, damage, msg);
}

/* A key for a message: quoted, bytes outside printable ASCII as \xHH, cut at ~300 bytes. */
static const char *printable(char *buf, size_t cap, const uint8_t *p, size_t n)
{
    size_t o = 0;
    if (cap > 300)
        cap = 300;
    buf[o++] = '"';
    for (size_t i = 0; i < n && o + 6 < cap; i++)
        o += (size_t)(p[i] >= 0x20 && p[i] < 0x7f && p[i] != '"' && p[i] != '\\'
                          ? snprintf(buf + o, cap - o, "%c", p[i])
                          : snprintf(buf + o, cap - o, "\\x%02x", p[i]));
    buf[o++] = '"';
    buf[o] = '\0';
    return buf;
}

/* ---- before open: the lock and the logs ---- */

static int lock_holder(const char *dir, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/LOCK", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0; /* no store yet, or never opened */
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET};
    int rv = 0;
    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK) {
        snprintf(err, errlen,
                 "the store %s is in use by process %ld (a running promtable?): "
                 "stop it, or check a copy of the directory",
                 dir, (long)fl.l_pid);
        rv = PT_EBUSY;
    }
    close(fd);
    return rv;
}

/* Walks a record's payload as replay does, counting in *lost the cells of rows the
 * skipped bytes defined: 0, or what makes a start fail on it. */
static const char *payload_check(wal_ids *ids, const uint8_t *p, const uint8_t *end, size_t *lost)
{
    while (p < end) {
        wal_entry e;
        void *row;
        if (!pt_emb_wal_entry(&p, end, &e))
            return "an entry does not parse";
        if (e.type == 'R' && pt_emb_wal_ids_define(ids, e.id, ids) != 0)
            return "a row id out of order";
        if (e.type == 'C') {
            if (pt_emb_wal_ids_row(ids, e.id, &row) != 0)
                return "a cell of a row never defined";
            *lost += row == NULL;
        }
    }
    return NULL;
}

/* Why no intact record starts at h (left bytes, after records intact ones of gen). */
static const char *damage(const uint8_t *h, size_t left, size_t records, uint32_t gen)
{
    uint32_t len = left >= LOG_HDR ? pt_get_le32(h + 8) : 0;
    if (left >= 4 && memcmp(h, "PTW1", 4) != 0)
        return "no record header (magic)";
    if (left < LOG_HDR || len > left - LOG_HDR)
        return "the record runs past the end of the file (torn write)";
    if (records > 0 && pt_get_le32(h + 4) != gen)
        return "a record of another log generation";
    return "checksum mismatch";
}

static void check_log(report *r, const char *dir, const char *name)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (errno != ENOENT)
            say(r, 1, "%s: cannot read: %s", name, strerror(errno));
        return;
    }
    struct stat st;
    uint8_t *buf = NULL;
    size_t size = 0;
    if (fstat(fileno(f), &st) == 0 && (buf = malloc(st.st_size ? (size_t)st.st_size : 1)))
        size = fread(buf, 1, (size_t)st.st_size, f);
    fclose(f);
    if (!buf) {
        say(r, 1, "%s: cannot read: out of memory", name);
        return;
    }
    size_t off = 0, records = 0, lost = 0, skipped = 0;
    uint32_t gen = 0; /* of the intact records; 0 before the first */
    wal_ids ids = {0};
    while (off < size) {
        const uint8_t *h = buf + off;
        if (pt_emb_wal_record_at(buf, size, off, gen)) {
            uint32_t len = pt_get_le32(h + 8);
            const char *bad = payload_check(&ids, h + LOG_HDR, h + LOG_HDR + len, &lost);
            if (bad) {
                say(r, 1,
                    "%s: record %zu at byte %zu has a good checksum but %s: a start "
                    "fails on it (corrupt record) and the store does not open",
                    name, records, off, bad);
                goto out;
            }
            gen = pt_get_le32(h + 4);
            records++;
            off += LOG_HDR + len;
            continue;
        }
        const char *why = damage(h, size - off, records, gen);
        size_t next = pt_emb_wal_resync(buf, size, off, gen);
        if (next >= size) {
            say(r, 1,
                "%s: the last %zu bytes (from byte %zu) are damaged: %s; no intact record "
                "follows, so a start drops them as a torn or stale tail after replaying the "
                "%zu records before them",
                name, size - off, off, why, records);
            skipped = 1;
            break;
        }
        say(r, 1,
            "%s: bytes %zu to %zu (%zu bytes) are damaged in the middle of the log: %s; a "
            "start skips them and replays the intact records after them",
            name, off, next, next - off, why);
        skipped = 1;
        ids.resynced = 1;
        off = next;
    }
    if (lost)
        say(r, 1,
            "%s: %zu samples after the damaged bytes belong to series only the damaged "
            "bytes defined: a start loses them",
            name, lost);
    if (!skipped)
        say(r, 0, "%s: %zu records, %zu bytes, checksums good", name, records, size);
out:
    pt_emb_wal_ids_free(&ids);
    free(buf);
}

/* ---- the open store: table checksums, chunks ---- */

static void check_family(report *r, embedded *e, int cf, const char *what)
{
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_verify_checksums(ro, 1);
    rocksdb_readoptions_set_fill_cache(ro, 0);
    rocksdb_readoptions_set_total_order_seek(ro, 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(e->r.db, ro, e->r.cf[cf]);
    size_t entries = 0, cells = 0, bad = 0;
    pt_buf last;
    pt_buf_init(&last, 0);
    pt_vcells vc = {0};
    char kb[1024];
    for (rocksdb_iter_seek_to_first(it); rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        const char *v = rocksdb_iter_value(it, &vn);
        entries++;
        pt_buf_reset(&last);
        if (pt_buf_append(&last, k, kn) != 0)
            break;
        if (cf != CF_POINTS)
            continue;
        pt_slice row;
        uint32_t first;
        pt_cellchunk c;
        pt_vcells_reset(&vc);
        const char *why = NULL;
        if (pt_emb_chunk_key_split(k, kn, &row, &first) != 0)
            why = "not a points key (row, 0x00, 4-byte qualifier)";
        else if (pt_cellchunk_parse((const uint8_t *)v, vn, &c) != 0)
            why = "the chunk's framing does not parse";
        else if (pt_cellchunk_cells(&c, &vc) != 0)
            why = "the chunk does not decode";
        else if (vc.n != c.count || vc.c[0].q != first)
            why = "the chunk's first qualifier or count disagrees with its key";
        if (why) {
            bad++;
            say(r, 1, "%s: chunk %s: %s", what, printable(kb, sizeof(kb), (const uint8_t *)k, kn),
                why);
        }
        cells += vc.n;
    }
    char *msg = NULL;
    rocksdb_iter_get_error(it, &msg);
    if (msg) {
        say(r, 1, "%s: RocksDB stopped reading after %zu entries (last good key %s): %s", what,
            entries, last.len ? printable(kb, sizeof(kb), last.p, last.len) : "none", msg);
        rocksdb_free(msg);
    } else if (cf == CF_POINTS) {
        say(r, 0, "%s: %zu chunks, %zu cells decoded, %zu bad; block checksums verified", what,
            entries, cells, bad);
    } else {
        say(r, 0, "%s: %zu entries read; block checksums verified", what, entries);
    }
    pt_vcells_free(&vc);
    pt_buf_free(&last);
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
}

int pt_emb_verify(void *state, const pt_backend_config *cfg, pt_verify_fn fn, void *ud, char *err,
                  size_t errlen)
{
    const pt_embedded_conf *ec = cfg->own;
    report r = {fn, ud, 0};
    if (!ec || !ec->path || !*ec->path) {
        snprintf(err, errlen, "embedded: no data directory configured");
        return PT_EINTERNAL;
    }
    if (!state) {
        /* Opening would create a store: a mistyped path must not pass as an empty one. */
        char current[4096];
        struct stat st;
        snprintf(current, sizeof(current), "%s/CURRENT", ec->path);
        if (stat(current, &st) != 0) {
            snprintf(err, errlen, "no embedded store at %s (no RocksDB CURRENT file)", ec->path);
            return PT_EINTERNAL;
        }
        int rv = lock_holder(ec->path, err, errlen);
        if (rv != 0)
            return rv;
        /* In the order a start replays them. */
        uint64_t *seqs;
        size_t n;
        if (pt_emb_wal_logs(ec->path, &seqs, &n) != 0) {
            snprintf(err, errlen, "cannot list %s", ec->path);
            return PT_EIO;
        }
        check_log(&r, ec->path, "points.frozen.wal"); /* older versions' logs */
        check_log(&r, ec->path, "points.wal");
        for (size_t i = 0; i < n; i++) {
            char name[40];
            snprintf(name, sizeof(name), "points.%llu.wal", (unsigned long long)seqs[i]);
            check_log(&r, ec->path, name);
        }
        free(seqs);
        return 0;
    }
    embedded *e = state;
    int rv = pt_emb_rocks_enter(&e->r);
    if (rv != 0) {
        snprintf(err, errlen, "embedded: RocksDB is not open (a reopen after a disk error "
                              "failed)");
        return rv;
    }
    check_family(&r, state, CF_POINTS, "points table");
    check_family(&r, state, CF_INDEX, "index table");
    pt_emb_rocks_leave(&e->r);
    return 0;
}
