/*
 * `promtable check` on the embedded store (pt_backend_ops.verify): what the generic scans
 * cannot see.
 *
 * Before open (e == NULL): whether another process holds the store (RocksDB's LOCK file,
 * an fcntl lock: F_GETLK only looks), then every record of the points logs (those of
 * older versions, then points.<seq>.wal in order, as a start replays them): magic,
 * generation, length, XXH3 checksum and the row/cell entries (the format of wal.c). Open
 * replays a log up to its first bad record and drops the rest, so the check looks first
 * and says what a start would drop:
 *   - a bad last record (torn: it runs past the end of the file, or its checksum fails and
 *     nothing follows) is the tail;
 *   - a bad record with more bytes behind it is in the middle: replay would drop them.
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

/* Whether the payload's entries parse: rows defined in order, cells naming a defined row. */
static int payload_ok(const uint8_t *p, const uint8_t *end, uint32_t *nrows)
{
    while (p < end) {
        wal_entry e;
        if (!pt_emb_wal_entry(&p, end, &e))
            return 0;
        if (e.type == 'R' && e.id != (*nrows)++)
            return 0;
        if (e.type == 'C' && e.id >= *nrows)
            return 0;
    }
    return 1;
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
    size_t off = 0, records = 0;
    uint32_t gen = 0, nrows = 0;
    while (off < size) {
        const uint8_t *h = buf + off;
        size_t left = size - off;
        const char *why = NULL;
        uint32_t len = left >= LOG_HDR ? pt_get_le32(h + 8) : 0;
        int past_end = left < LOG_HDR || len > left - LOG_HDR;
        if (left >= 4 && memcmp(h, "PTW1", 4) != 0)
            why = "no record header (magic)";
        else if (past_end)
            why = "the record runs past the end of the file (torn write)";
        else if (records > 0 && pt_get_le32(h + 4) != gen)
            why = "a record of another log generation";
        else if (XXH3_64bits_withSeed(h + LOG_HDR, len, pt_get_le32(h + 4)) !=
                 ((uint64_t)pt_get_le32(h + 12) | (uint64_t)pt_get_le32(h + 16) << 32))
            why = "checksum mismatch";
        else if (!payload_ok(h + LOG_HDR, h + LOG_HDR + len, &nrows))
            why = "malformed entries behind a good checksum";
        if (why) {
            size_t after = past_end ? 0 : left - LOG_HDR - len;
            if (after == 0)
                say(r, 1,
                    "%s: the last record (byte %zu, %zu bytes) is damaged: %s; a start "
                    "replays the %zu records before it and drops it",
                    name, off, left, why, records);
            else
                say(r, 1,
                    "%s: record %zu at byte %zu is damaged in the middle of the log: %s; "
                    "a start replays the %zu records before it and drops it and the %zu "
                    "bytes after it",
                    name, records, off, why, records, after);
            free(buf);
            return;
        }
        gen = pt_get_le32(h + 4);
        records++;
        off += LOG_HDR + len;
    }
    say(r, 0, "%s: %zu records, %zu bytes, checksums good", name, records, size);
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
    vcells vc = {0};
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
        chunk c;
        vcells_reset(&vc);
        const char *why = NULL;
        if (pt_emb_chunk_key_split(k, kn, &row, &first) != 0)
            why = "not a points key (row, 0x00, 4-byte qualifier)";
        else if (pt_emb_chunk_parse((const uint8_t *)v, vn, &c) != 0)
            why = "the chunk's framing does not parse";
        else if (pt_emb_chunk_cells(&c, &vc) != 0)
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
    vcells_free(&vc);
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
