/*
 * The points logs (<path>/points.<seq>.wal): every acknowledged points cell not yet
 * flushed into RocksDB is in one of them. Each is a sequence of records:
 *
 *     magic "PTW1" | generation (4 LE) | payload length (4 LE) | XXH3-64 of the payload
 *     seeded with the generation (8 LE) | payload
 *     payload entries: 'R' id (4 LE) keylen (4 LE) key     defines row id for this gen
 *                      'C' id (4 LE) qualifier (4 BE) vlen (4 LE) value
 *                      'I' rowlen (4 LE) quallen (4 LE) vlen (4 LE) row qualifier value
 *
 * 'I' entries are the batch's index cells, in key order: they wait in the index head
 * (ihead.c) until a drain writes them into RocksDB, which happens before the log holding
 * them is deleted (embedded.c).
 *
 * A write batch is one record (rows by a per-generation id, defined once per generation),
 * written and, with sync, fdatasync'ed before the cells go into the head. (The fdatasync
 * runs under the backend mutex: concurrent writers wait for each other's sync; group
 * commit would be the next step if sync = 1 matters for throughput.)
 *
 * Replay keeps the records of the first record's generation. A damaged record (checksum,
 * framing) with intact records of that generation behind it is skipped: replay resumes at
 * the next intact record header and reports the damaged byte range; cells of rows that only
 * the damaged bytes defined are lost (and counted in the report). Replay stops where no
 * intact record follows: a torn or stale tail.
 *
 * The records go to the log with the highest number. A freeze (of one head shard) only
 * switches them to the next number, a file the flush thread made beforehand
 * (pt_emb_wal_prepare): no rename, creation or deletion happens under the backend mutex,
 * where on ext4 (a journal commit forced by another file's fsync, online discard of a
 * deleted file) one can take a hundred milliseconds or more while every writer waits. So
 * every record of a log is older than every record of a log with a higher number, and
 * replay reads them in that order: for a cell in several, the newest write is applied
 * last and wins. Logs are deleted oldest first once every shard's cells in them are
 * durable in RocksDB. With sync, the directory is fsync'ed after a log is made and after
 * deletions: a log that came back after a power loss would replay old values over newer
 * flushed ones.
 *
 * Versions before the shards wrote points.wal and, during a flush, points.frozen.wal;
 * replay reads those first (the frozen one, then points.wal) and open deletes them.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embedded_int.h"
#include "error.h"

static const uint8_t wal_magic[4] = {'P', 'T', 'W', '1'};
enum { WAL_HDR = 20 };

/* The older versions' logs, replayed first in this order. */
static const char *const legacy[] = {"points.frozen.wal", "points.wal"};

int pt_emb_wal_open(wal *w, const char *dir, int sync, char *err, size_t errlen)
{
    (void)err;
    (void)errlen;
    w->fd = w->next_fd = -1;
    w->sync = sync;
    w->gen = 1;
    w->seq = 1;
    /* The payload length field is 4 bytes. */
    pt_buf_init(&w->rec, WAL_HDR + (size_t)UINT32_MAX);
    w->dir = strdup(dir);
    return w->dir ? 0 : PT_ENOMEM;
}

void pt_emb_wal_close(wal *w)
{
    if (w->fd >= 0)
        close(w->fd);
    if (w->next_fd >= 0)
        close(w->next_fd);
    free(w->dir);
    pt_buf_free(&w->rec);
    free(w->rows);
    memset(w, 0, sizeof(*w));
    w->fd = w->next_fd = -1;
}

static void next_gen(wal *w)
{
    w->size = 0;
    w->gen++;
    if (w->gen == 0)
        w->gen = 1;
    w->next_id = 0;
}

/* The code of a failed file operation (errno): a full disk is retryable. */
static int io_error(void)
{
    return errno == ENOSPC || errno == EDQUOT ? PT_ENOSPACE : PT_EIO;
}

/* Makes renames, creations and deletions in the directory durable (with sync only). */
static int sync_dir(const wal *w)
{
    if (!w->sync)
        return 0;
    int fd = open(w->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return io_error();
    int rv = fsync(fd) == 0 ? 0 : io_error();
    close(fd);
    return rv;
}

/* The path of log seq in dir. */
static void log_path(const char *dir, uint64_t seq, char *out, size_t n)
{
    snprintf(out, n, "%s/points.%llu.wal", dir, (unsigned long long)seq);
}

/* Opens log seq of dir for appending, creating it (an existing one, made by a racing
 * prepare, is taken as it is), with its directory entry durable; -1 on failure, errno
 * saying why. */
static int make_log(const wal *w, uint64_t seq)
{
    char path[4096];
    log_path(w->dir, seq, path, sizeof(path));
    int fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0 && sync_dir(w) != 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        fd = -1;
    }
    return fd;
}

int pt_emb_wal_start(wal *w)
{
    if ((w->fd = make_log(w, w->seq)) < 0)
        return io_error();
    next_gen(w);
    return 0;
}

int pt_emb_wal_prepare_fd(const wal *w, uint64_t seq)
{
    return make_log(w, seq);
}

void pt_emb_wal_prepared(wal *w, uint64_t seq, int fd)
{
    if (fd < 0)
        return;
    if (w->next_fd < 0 && seq == w->seq + 1)
        w->next_fd = fd;
    else
        close(fd); /* a freeze made it meanwhile, or moved on: it is another's now */
}

int pt_emb_wal_freeze(wal *w)
{
    int fd = w->next_fd;
    if (fd < 0 && (fd = make_log(w, w->seq + 1)) < 0)
        return io_error();
    close(w->fd);
    w->fd = fd;
    w->next_fd = -1;
    w->seq++;
    next_gen(w);
    return 0;
}

int pt_emb_wal_drop(wal *w, uint64_t upto)
{
    char path[4096];
    int gone = 0;
    for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]); i++) {
        snprintf(path, sizeof(path), "%s/%s", w->dir, legacy[i]);
        if (unlink(path) == 0)
            gone = 1;
        else if (errno != ENOENT)
            return PT_EIO;
    }
    for (; w->dropped < upto; w->dropped++, gone = 1) {
        log_path(w->dir, w->dropped + 1, path, sizeof(path));
        if (unlink(path) != 0 && errno != ENOENT)
            return PT_EIO;
    }
    return gone ? sync_dir(w) : 0;
}

void pt_emb_wal_end(wal *w)
{
    char path[4096];
    for (uint64_t seq = w->seq; seq <= w->seq + 1; seq++) {
        int *fd = seq == w->seq ? &w->fd : &w->next_fd;
        if (*fd < 0)
            continue;
        close(*fd);
        *fd = -1;
        log_path(w->dir, seq, path, sizeof(path));
        unlink(path);
    }
    sync_dir(w);
}

/* "points.<digits>.wal": 1 and its number in *seq. */
static int log_name(const char *name, uint64_t *seq)
{
    const char *p = name + sizeof("points.") - 1;
    if (strncmp(name, "points.", sizeof("points.") - 1) != 0 || *p < '0' || *p > '9')
        return 0;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (UINT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (uint64_t)(*p - '0');
    }
    *seq = v;
    return v > 0 && strcmp(p, ".wal") == 0;
}

static int seq_cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

int pt_emb_wal_logs(const char *dir, uint64_t **seqs, size_t *n)
{
    *seqs = NULL;
    *n = 0;
    DIR *d = opendir(dir);
    if (!d)
        return PT_EIO;
    size_t cap = 0;
    int rv = 0;
    struct dirent *de;
    while (rv == 0 && (de = readdir(d)) != NULL) {
        uint64_t seq;
        if (!log_name(de->d_name, &seq))
            continue;
        if ((rv = pt_array_reserve(seqs, &cap, *n + 1, sizeof(**seqs), 0)) == 0)
            (*seqs)[(*n)++] = seq;
    }
    closedir(d);
    if (rv != 0) {
        free(*seqs);
        *seqs = NULL;
        *n = 0;
        return rv;
    }
    if (*n)
        qsort(*seqs, *n, sizeof(**seqs), seq_cmp);
    return 0;
}

/* ---- append ---- */

static int write_all(const wal *wl, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t w = wl->write_fn ? wl->write_fn(wl->fd, p, n) : write(wl->fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return io_error();
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static size_t entry_max(const pt_mutation *m)
{
    return 1 + 8 + m->row.n + 1 + 12 + m->value.n;
}

static size_t index_entry_size(const pt_mutation *m)
{
    return 13 + m->row.n + m->qual.n + m->value.n;
}

static uint8_t *encode_index(uint8_t *p, const pt_mutation *const *iv, size_t ni)
{
    for (size_t i = 0; i < ni; i++) {
        const pt_mutation *m = iv[i];
        *p++ = 'I';
        pt_put_le32(p, (uint32_t)m->row.n);
        pt_put_le32(p + 4, (uint32_t)m->qual.n);
        pt_put_le32(p + 8, (uint32_t)m->value.n);
        p += 12;
        memcpy(p, m->row.p, m->row.n);
        p += m->row.n;
        if (m->qual.n)
            memcpy(p, m->qual.p, m->qual.n);
        p += m->qual.n;
        if (m->value.n)
            memcpy(p, m->value.p, m->value.n);
        p += m->value.n;
    }
    return p;
}

/* Rows defined by the record get ids of this generation; returns where the payload ends.
 * *nrows counts the cells encoded, whose rows are w->rows[0..*nrows). */
static uint8_t *encode(wal *w, head *h, const pt_mutation *m, size_t n, const uint64_t *hashes,
                       size_t k, size_t *nrows)
{
    /* The rows are scattered over memory: load buckets 16 cells ahead and the rows they
     * lead to (header and key) 8 ahead, so the cache misses overlap instead of queueing. */
    enum { BUCKET_AHEAD = 16, ROW_AHEAD = 8 };
    for (size_t i = 0; i < k && i < BUCKET_AHEAD; i++)
        pt_emb_head_prefetch(h, hashes[i]);

    uint8_t *p = w->rec.p + WAL_HDR;
    hrow *prev = NULL;
    size_t j = 0;
    for (size_t i = 0; i < n; i++) {
        const pt_mutation *mu = &m[i];
        if (mu->table != PT_TABLE_POINTS)
            continue;
        if (j + BUCKET_AHEAD < k)
            pt_emb_head_prefetch(h, hashes[j + BUCKET_AHEAD]);
        if (j + ROW_AHEAD < k)
            pt_emb_head_prefetch_row(h, hashes[j + ROW_AHEAD]);
        hrow *r = prev;
        /* Batches come sorted by row: most cells share the previous cell's row. */
        if (!r || r->keylen != mu->row.n || memcmp(r->key, mu->row.p, mu->row.n) != 0) {
            r = pt_emb_head_get(h, mu->row.p, mu->row.n, hashes[j]);
            if (!r)
                break;
            prev = r;
        }
        if (r->wal_gen != w->gen || r->wal_id >= w->next_id) {
            uint32_t gap = w->gen - r->wal_gen; /* 0: a new row, or one reset below */
            if (r->wal_gen != w->gen)
                r->gap = r->wal_gen == 0 || gap > 255 ? 255 : (uint8_t)gap;
            r->wal_gen = w->gen;
            r->wal_id = w->next_id++;
            *p++ = 'R';
            pt_put_le32(p, r->wal_id);
            pt_put_le32(p + 4, r->keylen);
            memcpy(p + 8, r->key, r->keylen);
            p += 8 + r->keylen;
        }
        *p++ = 'C';
        pt_put_le32(p, r->wal_id);
        memcpy(p + 4, mu->qual.p, 4);
        pt_put_le32(p + 8, (uint32_t)mu->value.n);
        if (mu->value.n)
            memcpy(p + 12, mu->value.p, mu->value.n);
        p += 12 + mu->value.n;
        w->rows[j++] = r;
    }
    *nrows = j;
    return p;
}

int pt_emb_wal_log(wal *w, head *h, const pt_mutation *m, size_t n, const uint64_t *hashes,
                   size_t k, const pt_mutation *const *iv, size_t ni)
{
    size_t need = WAL_HDR;
    for (size_t i = 0; i < n; i++)
        if (m[i].table == PT_TABLE_POINTS)
            need += entry_max(&m[i]);
    for (size_t i = 0; i < ni; i++)
        need += index_entry_size(iv[i]);
    if (need - WAL_HDR > UINT32_MAX)
        return PT_EBADREQ; /* the payload length field is 4 bytes */
    pt_buf_reset(&w->rec);
    int rv = pt_buf_reserve(&w->rec, need);
    if (rv == 0)
        rv = pt_array_reserve(&w->rows, &w->rows_cap, k, sizeof(*w->rows), 0);
    if (rv != 0)
        return rv;

    uint32_t first_new_id = w->next_id;
    size_t nrows;
    uint8_t *end = encode(w, h, m, n, hashes, k, &nrows);
    if (nrows < k) {
        rv = PT_ENOMEM;
        goto undo;
    }
    end = encode_index(end, iv, ni);
    uint8_t *rec = w->rec.p;
    size_t len = (size_t)(end - rec) - WAL_HDR;
    memcpy(rec, wal_magic, 4);
    pt_put_le32(rec + 4, w->gen);
    pt_put_le32(rec + 8, (uint32_t)len);
    uint64_t sum = XXH3_64bits_withSeed(rec + WAL_HDR, len, w->gen);
    pt_put_le32(rec + 12, (uint32_t)sum);
    pt_put_le32(rec + 16, (uint32_t)(sum >> 32));
    rv = write_all(w, rec, WAL_HDR + len);
    if (rv == 0 && w->sync && fdatasync(w->fd) != 0)
        rv = io_error();
    if (rv != 0) {
        /* Cut the torn record off so the next record is not hidden behind it (on a full
         * disk this gives the partial record's blocks back). */
        if (ftruncate(w->fd, (off_t)w->size) != 0)
            rv = PT_EIO;
        goto undo;
    }
    w->size += WAL_HDR + len;
    return 0;

undo:
    /* Ids handed out by a record that was not written must not be referenced later; only
     * rows of this batch can hold them. */
    for (size_t i = 0; i < nrows; i++)
        if (w->rows[i]->wal_gen == w->gen && w->rows[i]->wal_id >= first_new_id)
            w->rows[i]->wal_gen = 0;
    w->next_id = first_new_id;
    return rv;
}

/* ---- replay ---- */

int pt_emb_wal_entry(const uint8_t **pp, const uint8_t *end, wal_entry *e)
{
    const uint8_t *p = *pp;
    size_t left = (size_t)(end - p);
    memset(e, 0, sizeof(*e));
    if (left < 1)
        return 0;
    e->type = *p;
    if (e->type == 'R' && left >= 9) {
        e->id = pt_get_le32(p + 1);
        uint32_t kl = pt_get_le32(p + 5);
        if (kl == 0 || left - 9 < kl || memchr(p + 9, 0, kl))
            return 0;
        e->key = (pt_slice){p + 9, kl};
        *pp = p + 9 + kl;
        return 1;
    }
    if (e->type == 'C' && left >= 13) {
        e->id = pt_get_le32(p + 1);
        e->q = pt_get_be32(p + 5);
        uint32_t vl = pt_get_le32(p + 9);
        if (left - 13 < vl)
            return 0;
        e->value = (pt_slice){p + 13, vl};
        *pp = p + 13 + vl;
        return 1;
    }
    if (e->type == 'I' && left >= 13) {
        uint64_t rl = pt_get_le32(p + 1), ql = pt_get_le32(p + 5), vl = pt_get_le32(p + 9);
        if (rl == 0 || left - 13 < rl + ql + vl || memchr(p + 13, 0, rl))
            return 0;
        e->key = (pt_slice){p + 13, rl};
        e->qual = (pt_slice){p + 13 + rl, ql};
        e->value = (pt_slice){p + 13 + rl + ql, vl};
        *pp = p + 13 + rl + ql + vl;
        return 1;
    }
    return 0;
}

/* A record's index cells, collected to go into the index head as one run. */
typedef struct icells {
    pt_mutation *m;
    const pt_mutation **v;
    size_t n, cap, vcap;
} icells;

static int icells_flush(icells *ic, ihead *x)
{
    if (ic->n == 0)
        return 0;
    int rv = pt_array_reserve(&ic->v, &ic->vcap, ic->n, sizeof(*ic->v), 0);
    if (rv != 0)
        return rv;
    int sorted = 1;
    for (size_t i = 0; i < ic->n; i++) {
        ic->v[i] = &ic->m[i];
        if (i > 0 && pt_emb_ihead_cmp(&ic->v[i - 1], &ic->v[i]) > 0)
            sorted = 0;
    }
    /* The writer logs them in key order; sort what another order would break. */
    if (!sorted)
        qsort(ic->v, ic->n, sizeof(*ic->v), pt_emb_ihead_cmp);
    rv = pt_emb_ihead_add(x, ic->v, ic->n);
    ic->n = 0;
    return rv;
}

int pt_emb_wal_record_at(const uint8_t *buf, size_t size, size_t off, uint32_t want)
{
    if (size - off < WAL_HDR || memcmp(buf + off, wal_magic, 4) != 0)
        return 0;
    const uint8_t *r = buf + off;
    uint32_t g = pt_get_le32(r + 4), len = pt_get_le32(r + 8);
    if ((want && g != want) || len > size - off - WAL_HDR)
        return 0;
    uint64_t sum = (uint64_t)pt_get_le32(r + 12) | (uint64_t)pt_get_le32(r + 16) << 32;
    return XXH3_64bits_withSeed(r + WAL_HDR, len, g) == sum;
}

size_t pt_emb_wal_resync(const uint8_t *buf, size_t size, size_t off, uint32_t gen)
{
    size_t next = off + 1;
    while (next < size && !pt_emb_wal_record_at(buf, size, next, gen))
        next++;
    return next < size ? next : size;
}

int pt_emb_wal_ids_define(wal_ids *ids, uint32_t id, void *row)
{
    /* After skipped bytes, the ids they defined are unknown: a gap. */
    if (id < ids->n || (id > ids->n && !ids->resynced))
        return PT_EINTERNAL;
    int rv = pt_array_reserve(&ids->row, &ids->cap, (size_t)id + 1, sizeof(*ids->row), 0);
    if (rv != 0)
        return rv;
    while (ids->n < id)
        ids->row[ids->n++] = NULL;
    ids->row[ids->n++] = row;
    return 0;
}

int pt_emb_wal_ids_row(const wal_ids *ids, uint32_t id, void **row)
{
    *row = id < ids->n ? ids->row[id] : NULL;
    return id < ids->n || ids->resynced ? 0 : PT_EINTERNAL;
}

void pt_emb_wal_ids_free(wal_ids *ids)
{
    free(ids->row);
    *ids = (wal_ids){0};
}

/* Replays buf; *good is where the last intact record ends. A damaged record in the middle
 * (more intact records of the generation behind it) is skipped: replay goes on at the
 * next intact record header, and the damaged range is reported (file, offset, length).
 * Cells of rows the damaged bytes defined cannot be placed and are counted as lost. */
static int replay(wal *w, head *h, ihead *x, const uint8_t *buf, size_t size, size_t *good,
                  const char *path)
{
    wal_ids ids = {0};
    size_t lost = 0;
    icells ic = {0};
    uint32_t gen = 0; /* of the records replayed; 0 (no generation) until the first */
    size_t off = 0, end_ok = 0;
    int rv = 0;
    while (size - off >= WAL_HDR) {
        if (!pt_emb_wal_record_at(buf, size, off, gen)) {
            size_t next = pt_emb_wal_resync(buf, size, off, gen);
            if (next >= size)
                break; /* nothing intact behind it: a torn or stale tail */
            fprintf(stderr,
                    "promtable: embedded: %s: bytes %zu to %zu (%zu bytes) are damaged; "
                    "skipped, replay goes on with the intact records after them\n",
                    path, off, next, next - off);
            w->damaged_bytes += next - off;
            ids.resynced = 1;
            off = next;
            continue;
        }
        const uint8_t *r = buf + off;
        uint32_t len = pt_get_le32(r + 8);
        gen = pt_get_le32(r + 4);
        const uint8_t *p = r + WAL_HDR, *end = p + len;
        while (p < end) {
            wal_entry e;
            if (!pt_emb_wal_entry(&p, end, &e)) {
                rv = PT_EINTERNAL;
                goto out;
            }
            if (e.type == 'R') {
                hrow *row =
                    pt_emb_head_get(h, e.key.p, e.key.n, pt_emb_head_hash(e.key.p, e.key.n));
                if (!row) {
                    rv = PT_ENOMEM;
                    goto out;
                }
                if ((rv = pt_emb_wal_ids_define(&ids, e.id, row)) != 0)
                    goto out;
            } else if (e.type == 'C') {
                void *row;
                if ((rv = pt_emb_wal_ids_row(&ids, e.id, &row)) != 0)
                    goto out;
                if (!row) {
                    lost++; /* its row was defined in the damaged bytes */
                    continue;
                }
                if ((rv = pt_emb_head_append(h, row, e.q, e.value)) != 0)
                    goto out;
            } else {
                if ((rv = pt_array_reserve(&ic.m, &ic.cap, ic.n + 1, sizeof(*ic.m), 0)) != 0)
                    goto out;
                ic.m[ic.n++] = (pt_mutation){.table = PT_TABLE_INDEX,
                                             .row = e.key,
                                             .qual = e.qual,
                                             .value = e.value};
            }
        }
        if ((rv = icells_flush(&ic, x)) != 0)
            goto out;
        off += WAL_HDR + len;
        end_ok = off;
    }
    w->gen = gen + 1 ? gen + 1 : 1;
    if (lost)
        fprintf(stderr,
                "promtable: embedded: %s: %zu samples after the damaged bytes belong to "
                "series only the damaged bytes defined and are lost\n",
                path, lost);
out:
    *good = rv == 0 ? end_ok : off;
    pt_emb_wal_ids_free(&ids);
    free(ic.m);
    free(ic.v);
    return rv;
}

static int read_file(int fd, uint8_t **out, size_t *n)
{
    struct stat st;
    if (fstat(fd, &st) != 0)
        return PT_EIO;
    size_t size = (size_t)st.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return PT_ENOMEM;
    size_t got = 0;
    while (got < size) {
        ssize_t r = pread(fd, buf + got, size - got, (off_t)got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    *out = buf;
    *n = got;
    return 0;
}

/* Replays one file; *good and *size: where its valid records end, and its size. */
static int replay_fd(wal *w, head *h, ihead *x, int fd, const char *path, size_t *good,
                     size_t *size, char *err, size_t errlen)
{
    uint8_t *buf = NULL;
    *size = *good = 0;
    int rv = read_file(fd, &buf, size);
    if (rv == 0)
        rv = replay(w, h, x, buf, *size, good, path);
    free(buf);
    if (rv != 0) {
        snprintf(err, errlen, "embedded: replay %s failed at byte %zu (%s)", path, *good,
                 rv == PT_ENOMEM ? "out of memory" : "corrupt record");
        return rv;
    }
    if (*good < *size)
        fprintf(stderr,
                "promtable: embedded: %s: dropped %zu bytes at byte %zu, a torn or stale "
                "tail (no intact record after them)\n",
                path, *size - *good, *good);
    return 0;
}

/* Replays one log (missing is fine) up to its torn or stale tail. */
static int replay_path(wal *w, head *h, ihead *x, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "embedded: open %s: %s", path, strerror(errno));
        return PT_EIO;
    }
    size_t size, good;
    int rv = replay_fd(w, h, x, fd, path, &good, &size, err, errlen);
    close(fd);
    return rv;
}

int pt_emb_wal_replay(wal *w, head *h, ihead *x, char *err, size_t errlen)
{
    uint64_t *seqs;
    size_t n;
    char path[4096];
    int rv = pt_emb_wal_logs(w->dir, &seqs, &n);
    if (rv != 0) {
        snprintf(err, errlen, "embedded: cannot list %s", w->dir);
        return rv;
    }
    for (size_t i = 0; i < sizeof(legacy) / sizeof(legacy[0]) && rv == 0; i++) {
        snprintf(path, sizeof(path), "%s/%s", w->dir, legacy[i]);
        rv = replay_path(w, h, x, path, err, errlen);
    }
    for (size_t i = 0; i < n && rv == 0; i++) {
        log_path(w->dir, seqs[i], path, sizeof(path));
        rv = replay_path(w, h, x, path, err, errlen);
    }
    w->dropped = n ? seqs[0] - 1 : 0;
    w->seq = n ? seqs[n - 1] + 1 : 1;
    free(seqs);
    return rv;
}
