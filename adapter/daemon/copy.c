/*
 * `promtable copy` (copy.h; docs/operations.md, "Copying a store").
 *
 * Both stores are opened from their configuration files as `promtable check` opens one,
 * without serving. Each table of the source is scanned once in row-key order; its cells
 * are copied into a fixed buffer (rows once per batch) and written to the destination as
 * one pt_backend_write whenever the buffer or the mutation array is full. After each batch
 * the checkpoint names the last row whose cells all went out: the row before the one being
 * scanned. Memory: the buffer, the mutation array and two row keys, whatever the store's
 * size.
 *
 * Verify scans the source a slice of VERIFY_ROWS rows at a time, keeping (key, cells,
 * checksum) per row, then the destination over the same key range, comparing row by row
 * as it goes: a row missing on either side, a different cell count or a different
 * checksum is a mismatch.
 */
#include "copy_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "bytes.h"
#include "clock.h"
#include "config.h"
#include "error.h"
#include "exemplar.h"
#include "ha.h"
#include "log.h"
#include "meta.h"
#include "promql.h"
#include "read_int.h"
#include "rowkey.h"
#include "tenant.h"

#define BATCH_BYTES (8u << 20) /* cell bytes a batch holds */
#define BATCH_CELLS 20000      /* mutations a batch holds */
#define WRITE_TRIES 8          /* attempts of one batch on an outage */
#define CKPT_MAGIC "promtable copy checkpoint 1"

const char *const pt_copy_table_name[PT_TABLE_COUNT + 1] = {"points", "index", "done"};

/* ---- arguments ---- */

/* --name=value or --name value: the value, advancing *i over it; NULL when a is not the
 * flag name. */
static const char *flag_value(int argc, char **argv, int *i, const char *name, int *missing)
{
    const char *a = argv[*i];
    size_t n = strlen(name);
    if (strncmp(a, name, n) != 0)
        return NULL;
    if (a[n] == '=')
        return a + n + 1;
    if (a[n] != '\0')
        return NULL;
    if (*i + 1 >= argc) {
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int pt_copy_parse_args(int argc, char **argv, pt_copy_opts *o, char *err, size_t errlen)
{
    *o = (pt_copy_opts){.start_ms = 0, .end_ms = PT_MAX_TIME_MS};
    int has_start = 0, has_end = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v;
        int missing = 0;
        if (strcmp(a, "--verify") == 0) {
            o->verify = 1;
        } else if (strcmp(a, "--verify-only") == 0) {
            o->verify = o->verify_only = 1;
        } else if ((v = flag_value(argc, argv, &i, "--from", &missing))) {
            o->from = v;
        } else if ((v = flag_value(argc, argv, &i, "--to", &missing))) {
            o->to = v;
        } else if ((v = flag_value(argc, argv, &i, "--checkpoint", &missing))) {
            o->checkpoint = v;
        } else if ((v = flag_value(argc, argv, &i, "--match", &missing))) {
            if (o->nmatch == PT_COPY_MAX_MATCH) {
                snprintf(err, errlen, "more than %d --match flags", PT_COPY_MAX_MATCH);
                return -1;
            }
            o->match[o->nmatch++] = v;
        } else if ((v = flag_value(argc, argv, &i, "--start", &missing)) ||
                   (v = flag_value(argc, argv, &i, "--end", &missing))) {
            int is_start = a[2] == 's';
            int64_t t;
            if (pt_api_time(v, &t) != 0) {
                snprintf(err, errlen, "--%s: \"%s\" is not a time (RFC 3339 or unix seconds)",
                         is_start ? "start" : "end", v);
                return -1;
            }
            if (t < 0)
                t = 0;
            if (t > PT_MAX_TIME_MS)
                t = PT_MAX_TIME_MS;
            if (is_start)
                o->start_ms = t, has_start = 1;
            else
                o->end_ms = t, has_end = 1;
        } else if (missing) {
            snprintf(err, errlen, "flag %s needs a value", a);
            return -1;
        } else {
            snprintf(err, errlen, "unknown argument \"%s\" (see promtable --help)", a);
            return -1;
        }
    }
    o->window = has_start || has_end;
    if (!o->from || !o->to) {
        snprintf(err, errlen, "copy needs --from=CONFIG and --to=CONFIG");
        return -1;
    }
    if (strcmp(o->from, o->to) == 0) {
        snprintf(err, errlen, "--from and --to name the same file \"%s\"", o->from);
        return -1;
    }
    if (o->start_ms > o->end_ms) {
        snprintf(err, errlen, "--start is after --end");
        return -1;
    }
    return 0;
}

/* ---- checkpoint ---- */

uint64_t pt_copy_job(const pt_copy_opts *o)
{
    char head[64];
    int n = snprintf(head, sizeof(head), "%lld %lld %d", (long long)o->start_ms,
                     (long long)o->end_ms, o->window);
    uint64_t h = XXH3_64bits(head, (size_t)n);
    h = XXH3_64bits_withSeed(o->from, strlen(o->from) + 1, h);
    h = XXH3_64bits_withSeed(o->to, strlen(o->to) + 1, h);
    for (size_t i = 0; i < o->nmatch; i++)
        h = XXH3_64bits_withSeed(o->match[i], strlen(o->match[i]) + 1, h);
    return h;
}

int pt_copy_ckpt_write(const char *path, const pt_copy_ckpt *ck, char *err, size_t errlen)
{
    char tmp[4096];
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
        snprintf(err, errlen, "checkpoint path too long");
        return PT_EIO;
    }
    FILE *f = fopen(tmp, "w");
    if (!f)
        goto fail;
    fprintf(f, "%s\njob %016llx\ntable %s\nrow ", CKPT_MAGIC, (unsigned long long)ck->job,
            pt_copy_table_name[ck->table]);
    if (!ck->has_row)
        fputc('-', f);
    for (size_t i = 0; ck->has_row && i < ck->row_n; i++)
        fprintf(f, "%02x", ck->row[i]);
    fputc('\n', f);
    int bad = fflush(f) != 0 || fsync(fileno(f)) != 0;
    if (fclose(f) != 0 || bad || rename(tmp, path) != 0)
        goto fail;
    /* The rename is durable once the folder is. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *(slash == dir ? slash + 1 : slash) = '\0';
    int dfd = open(slash ? dir : ".", O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        bad = fsync(dfd) != 0;
        close(dfd);
        if (bad)
            goto fail;
    }
    return 0;
fail:
    snprintf(err, errlen, "cannot write the checkpoint %s: %s", path, strerror(errno));
    return PT_EIO;
}

static int hex_digit(int c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

int pt_copy_ckpt_read(const char *path, pt_copy_ckpt *ck, char *err, size_t errlen)
{
    memset(ck, 0, offsetof(pt_copy_ckpt, row));
    FILE *f = fopen(path, "r");
    if (!f) {
        if (errno == ENOENT)
            return 1;
        snprintf(err, errlen, "cannot read the checkpoint %s: %s", path, strerror(errno));
        return PT_EIO;
    }
    /* The longest file: the header lines and a row key in hex. */
    char text[256 + 2 * PT_MAX_ROW_KEY];
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    int more = fgetc(f) != EOF;
    fclose(f);
    text[n] = '\0';
    char table[16], job[17];
    int off = 0;
    const char *why = "not a copy checkpoint";
    if (more || strncmp(text, CKPT_MAGIC "\n", sizeof(CKPT_MAGIC)) != 0)
        goto bad;
    if (sscanf(text + sizeof(CKPT_MAGIC), "job %16[0-9a-f]\ntable %15[a-z]\nrow %n", job, table,
               &off) != 2 ||
        off == 0 || strlen(job) != 16) {
        why = "its job, table or row line does not parse";
        goto bad;
    }
    ck->job = strtoull(job, NULL, 16);
    ck->table = -1;
    for (int t = 0; t <= PT_TABLE_COUNT; t++)
        if (strcmp(table, pt_copy_table_name[t]) == 0)
            ck->table = t;
    if (ck->table < 0) {
        why = "unknown table";
        goto bad;
    }
    const char *p = text + sizeof(CKPT_MAGIC) + off;
    if (strcmp(p, "-\n") == 0)
        return 0;
    size_t i = 0;
    for (; p[0] != '\n' && p[0] != '\0'; p += 2, i++) {
        int hi = hex_digit(p[0]), lo = hi < 0 ? -1 : hex_digit(p[1]);
        if (lo < 0 || i == PT_MAX_ROW_KEY) {
            why = "its row is not a row key in hex";
            goto bad;
        }
        ck->row[i] = (uint8_t)(hi << 4 | lo);
    }
    if (i == 0 || strcmp(p, "\n") != 0) {
        why = "its row is not a row key in hex";
        goto bad;
    }
    ck->row_n = i;
    ck->has_row = 1;
    return 0;
bad:
    snprintf(err, errlen, "%s is not a checkpoint of promtable copy (%s)", path, why);
    return PT_EBADREQ;
}

/* ---- what a cell is ---- */

/* The key without its tenant prefix (tenant.h), if any. */
static pt_slice untenanted(pt_slice row)
{
    if (row.n < 2 || row.p[0] != PT_TENANT_MARK)
        return row;
    const uint8_t *e = memchr(row.p + 1, PT_TENANT_MARK, row.n - 1);
    if (!e)
        return row;
    e++;
    return (pt_slice){e, row.n - (size_t)(e - row.p)};
}

static int has_prefix(pt_slice s, const char *prefix)
{
    size_t n = strlen(prefix);
    return s.n >= n && memcmp(s.p, prefix, n) == 0;
}

static int is_row(pt_slice s, const char *name)
{
    return s.n == strlen(name) && memcmp(s.p, name, s.n) == 0;
}

static const char format_row[] = "==format";

/* The cell time of a points cell in ms, or -1 for a cell of no known form. */
static int64_t points_time(pt_slice row, pt_slice qual, pt_slice value)
{
    int64_t base = pt_row_key_base_marked(row, '#');
    if (base >= 0)
        return value.n >= 4 ? base + pt_get_be32(value.p) : -1;
    base = pt_points_row_base(row.p, row.n); /* data and roll-up rows */
    return base >= 0 && qual.n == PT_QUAL_LEN ? base + pt_get_be32(qual.p) : -1;
}

int64_t pt_copy_version(pt_table t, pt_slice row, pt_slice qual, pt_slice value, int64_t bucket_ms,
                        int64_t now_us)
{
    const int64_t never = (PT_MAX_TIME_MS + PT_BUCKET_MS) * 1000;
    if (t == PT_TABLE_POINTS) {
        int64_t ms = points_time(row, qual, value);
        return ms >= 0 ? ms * 1000 : now_us;
    }
    pt_slice k = untenanted(row);
    if (is_row(k, format_row))
        return never;
    if (is_row(k, PT_EXEMPLAR_MARK_ROW)) {
        if (qual.n == PT_EXEMPLAR_MARK_QUAL_LEN)
            return ((int64_t)pt_get_be64(qual.p) + PT_BUCKET_MS - 1) * 1000;
        return never; /* `since` */
    }
    if (has_prefix(k, PT_META_ROW_PREFIX))
        return now_us;
    size_t end;
    int64_t day = pt_key_time(row.p, row.n, "@", &end);
    return day >= 0 ? (day + bucket_ms - 1) * 1000 : now_us;
}

/* Whether the copy takes this cell: not a lease row (HA, compaction: each store has its own),
 * and inside the window when there is one (index rows: those of the days that overlap
 * it; rows without a day whole). */
int pt_copy_wanted(const pt_copy_opts *o, pt_table t, int64_t bucket_ms, pt_slice row, pt_slice qual,
                  pt_slice value)
{
    if (t == PT_TABLE_INDEX) {
        pt_slice k = untenanted(row);
        if (has_prefix(k, PT_HA_LEASE_PREFIX) || is_row(row, PT_COMPACT_LEASE_ROW))
            return 0;
        if (!o->window || has_prefix(k, PT_META_ROW_PREFIX))
            return 1;
        if (is_row(k, PT_EXEMPLAR_MARK_ROW)) {
            if (qual.n != PT_EXEMPLAR_MARK_QUAL_LEN)
                return 1;
            int64_t base = (int64_t)pt_get_be64(qual.p);
            return base <= o->end_ms && base + PT_BUCKET_MS > o->start_ms;
        }
        size_t end;
        int64_t day = pt_key_time(row.p, row.n, "@", &end);
        return day < 0 || (day <= o->end_ms && day + bucket_ms > o->start_ms);
    }
    if (!o->window)
        return 1;
    int64_t ms = points_time(row, qual, value);
    return ms < 0 || (ms >= o->start_ms && ms <= o->end_ms);
}

/* ---- the stores ---- */

/* Loads path as the daemon loads --config.file and opens its backend; init first for a
 * destination whose backend has tables to create. 0, or -1 with err set. */
static int side_open(side *s, const char *path, int create, char *err, size_t errlen)
{
    char e[512] = "";
    s->path = path;
    if (pt_config_defaults(&s->cfg) != 0) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    s->cfg_ok = 1;
    if (pt_config_load_file(&s->cfg, path, e, sizeof(e)) != 0 ||
        pt_config_check(&s->cfg, e, sizeof(e)) != 0) {
        snprintf(err, errlen, "%s: %s", path, e);
        return -1;
    }
    const pt_backend_ops *ops = pt_backend_find(s->cfg.backend);
    if (!ops || (ops->caps & PT_BACKEND_CAP_TEST)) {
        snprintf(err, errlen, "%s: storage.backend \"%s\" %s", path, s->cfg.backend,
                 ops ? "is for tests only" : "is unknown");
        return -1;
    }
    pt_backend_config bc = {
        .own = pt_config_backend(&s->cfg, ops),
        .retention_seconds = (s->cfg.retention_ms + 999) / 1000,
        .index_span_ms = s->cfg.index_bucket_ms,
        .direct = 1, /* whole series at a time: Bigtable's chunk cells need no buffer */
    };
    if (pt_backend_open(&s->be, ops, &bc, e, sizeof(e)) != 0) {
        snprintf(err, errlen, "%s: cannot open the %s store: %s", path, ops->name, e);
        return -1;
    }
    if (create && ops->init && ops->init(s->be.state, e, sizeof(e)) != 0) {
        snprintf(err, errlen, "%s: cannot create the %s tables: %s", path, ops->name, e);
        return -1;
    }
    return 0;
}

static void side_close(side *s)
{
    pt_backend_close(&s->be);
    if (s->cfg_ok)
        pt_config_free(&s->cfg);
}

/* ---- progress ---- */

void pt_copy_progress_part(progress *p, pt_table t)
{
    p->table = t;
    p->at = (pt_slice){0};
    p->part_t0 = pt_mono_ms();
    p->part_f0 = -1;
    p->shown_pct = -1;
}

void pt_copy_progress_row(progress *p, pt_slice row)
{
    size_t end;
    if (pt_key_time(row.p, row.n, "@#%", &end) < 0 || end < PT_BASE_DIGITS + 2)
        return;
    uint64_t h = XXH3_64bits(row.p, end - PT_BASE_DIGITS - 2);
    if (p->series == 0 || h != p->sid)
        p->series++;
    p->sid = h;
}

/* The fraction of the part done, or -1 when unknown. */
static double done_fraction(const progress *p)
{
    if (p->series_total)
        return (double)p->rows / (double)p->series_total;
    uint64_t before, total;
    if (!p->be || !p->at.n || pt_backend_position(p->be, p->table, p->at, &before, &total) != 0 ||
        total == 0)
        return -1;
    return before >= total ? 1.0 : (double)before / (double)total;
}

/* "1h02m", "3m05s", "42s" into b. */
static const char *span_text(char *b, size_t n, double s)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(b, n, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(b, n, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(b, n, "%lds", t);
    return b;
}

void pt_copy_progress_show(progress *p, const char *table, int final)
{
    int64_t now = pt_mono_ms();
    /* At most every 200 ms (5 s in the log), and a terminal's line also at every whole
     * percent, however fast the copy. */
    int due = final || now - p->last >= (p->tty ? 200 : 5000);
    if (!due && !p->tty)
        return;
    double f = final ? 1.0 : done_fraction(p), eta = -1;
    int whole = f >= 0 ? (int)(f * 100.0) : -1;
    if (!due && whole == p->shown_pct)
        return;
    p->last = now;
    p->shown_pct = whole;
    double s = (double)(now - p->t0) / 1000.0;
    double rate = s > 0 ? (double)p->cells / s : 0;
    /* ETA: the rest of the part at the pace since it began (or since the first look). */
    if (f >= 0 && p->part_f0 < 0) {
        p->part_f0 = f;
        p->part_t0 = now;
    } else if (!final && f >= 0 && f > p->part_f0 + 0.001 && now > p->part_t0) {
        eta = (1.0 - f) * (double)(now - p->part_t0) / 1000.0 / (f - p->part_f0);
    }
    char pct[32] = "", eta_s[32] = "", span[24];
    if (f >= 0)
        snprintf(pct, sizeof(pct), ", %.1f %%", f * 100.0);
    if (eta >= 0)
        snprintf(eta_s, sizeof(eta_s), ", ETA %s", span_text(span, sizeof(span), eta));
    int points = p->table == PT_TABLE_POINTS && (p->series || p->samples);
    if (p->tty) {
        if (points)
            fprintf(stderr, "\r%s %s: %llu series, %llu samples, %.0f samples/s%s%s, %.1f s   %s",
                    p->what, table, (unsigned long long)p->series, (unsigned long long)p->samples,
                    s > 0 ? (double)p->samples / s : 0.0, pct, eta_s, s, final ? "\n" : "");
        else
            fprintf(stderr, "\r%s %s: %llu rows, %llu cells, %.0f cells/s%s%s, %.1f s   %s", p->what,
                    table, (unsigned long long)p->rows, (unsigned long long)p->cells, rate, pct,
                    eta_s, s, final ? "\n" : "");
        fflush(stderr);
    } else {
        pt_log(PT_LOG_INFO, final ? "copy progress: done" : "copy progress",
               "phase=%s table=%s rows=%llu cells=%llu series=%llu samples=%llu "
               "cells_per_second=%.0f percent=%.1f eta_seconds=%.0f seconds=%.1f",
               p->what, table, (unsigned long long)p->rows, (unsigned long long)p->cells,
               (unsigned long long)p->series, (unsigned long long)p->samples, rate,
               f >= 0 ? f * 100.0 : -1.0, eta, s);
    }
}

/* ---- copying ---- */

typedef struct copier {
    const pt_copy_opts *o;
    side *src, *dst;
    pt_table table;
    int64_t bucket_ms, now_us;
    uint8_t *bytes; /* BATCH_BYTES */
    size_t used;
    pt_mutation *m; /* BATCH_CELLS */
    size_t n;
    pt_buf cur, prev; /* the row being scanned, the one before it */
    int has_cur, has_prev;
    const uint8_t *cur_in_batch; /* the current row's copy in bytes; NULL: not there yet */
    int cur_data;                /* the current row is a data row (its cells are samples) */
    pt_copy_ckpt ck;
    progress pr;
    char *err;
    size_t errlen;
    /* --match: the checkpoint follows series (prev: the last one done), and the index
     * buckets of the series being copied collect in days. */
    int by_series;
    int64_t *days;
    size_t ndays, days_cap;
} copier;

/* Writes the batch, retrying an outage with backoff, then notes the checkpoint. */
static int flush(copier *c)
{
    int rv = 0;
    for (int i = 0; c->n && i < WRITE_TRIES; i++) {
        rv = pt_backend_write(&c->dst->be, c->m, c->n);
        if (rv != PT_EUNAVAIL && rv != PT_ETIMEOUT && rv != PT_EBUSY && rv != PT_ENOSPACE)
            break;
        pt_log(PT_LOG_WARN, "copy: destination unavailable, retrying", "err=\"%s\" try=%d",
               pt_strerror(rv), i + 1);
        struct timespec ts = {.tv_sec = 1 << (i < 4 ? i : 4)};
        nanosleep(&ts, NULL);
    }
    if (rv != 0) {
        snprintf(c->err, c->errlen, "writing to %s failed: %s", c->dst->path, pt_strerror(rv));
        return rv;
    }
    c->pr.cells += c->n;
    c->n = 0;
    c->used = 0;
    c->cur_in_batch = NULL;
    if (c->o->checkpoint && c->has_prev) {
        c->ck.table = c->table;
        c->ck.has_row = 1;
        c->ck.row_n = pt_buf_used(&c->prev);
        memcpy(c->ck.row, pt_buf_data(&c->prev), c->ck.row_n);
        if ((rv = pt_copy_ckpt_write(c->o->checkpoint, &c->ck, c->err, c->errlen)) != 0)
            return rv;
    }
    if (c->has_prev && !c->by_series)
        c->pr.at = (pt_slice){pt_buf_data(&c->prev), pt_buf_used(&c->prev)};
    pt_copy_progress_show(&c->pr, c->by_series ? "series" : pt_copy_table_name[c->table], 0);
    return 0;
}

/* The value of the one cell of a row (a format marker): up to 63 bytes. */
typedef struct one_cell {
    int found;
    size_t n;
    uint8_t v[64];
} one_cell;

static int note_value(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual;
    one_cell *c = ud;
    c->found = 1;
    c->n = value.n < sizeof(c->v) ? value.n : sizeof(c->v);
    memcpy(c->v, value.p, c->n);
    return 1;
}

/* A format marker of the source: written only where the destination has none; one that
 * differs stops the copy. 1: write it, 0: the destination has it already, or an error. */
static int format_marker(copier *c, pt_slice row, pt_slice value)
{
    one_cell have = {0};
    int rv = pt_backend_scan_row(&c->dst->be, PT_TABLE_INDEX, row, (pt_slice){0}, (pt_slice){0},
                                 note_value, &have);
    if (rv != 0 || !have.found)
        return rv != 0 ? rv : 1;
    if (pt_slice_eq((pt_slice){have.v, have.n}, value))
        return 0;
    char a[80], b[80];
    snprintf(c->err, c->errlen,
             "the destination holds index format %s and the source %s: not copied (copy "
             "into an empty store or one of the same format)",
             pt_log_quote(a, sizeof(a), (const char *)have.v, have.n),
             pt_log_quote(b, sizeof(b), (const char *)value.p, value.n < 64 ? value.n : 64));
    return PT_EBADREQ;
}

/* Notes the index bucket of a points cell of the series being copied. */
static int note_day(copier *c, pt_slice row, pt_slice qual, pt_slice value)
{
    int64_t ms = points_time(row, qual, value);
    if (ms < 0)
        return 0;
    int64_t day = ms - ms % c->bucket_ms;
    for (size_t i = c->ndays; i > 0; i--)
        if (c->days[i - 1] == day)
            return 0;
    int rv = pt_array_reserve(&c->days, &c->days_cap, c->ndays + 1, sizeof(*c->days), 1u << 20);
    if (rv == 0)
        c->days[c->ndays++] = day;
    return rv;
}

static int on_copy_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    copier *c = ud;
    int rv;
    if (!c->has_cur || !pt_slice_eq(row, (pt_slice){pt_buf_data(&c->cur), pt_buf_used(&c->cur)})) {
        if (!c->by_series) { /* --match keeps the last series done in prev */
            pt_buf t = c->prev;
            c->prev = c->cur;
            c->cur = t;
            c->has_prev = c->has_cur;
            c->pr.rows++;
        }
        pt_buf_reset(&c->cur);
        if ((rv = pt_buf_append(&c->cur, row.p, row.n)) != 0)
            return rv;
        c->has_cur = 1;
        c->cur_in_batch = NULL;
        size_t end;
        c->cur_data = c->table == PT_TABLE_POINTS && pt_key_time(row.p, row.n, "@", &end) >= 0;
        if (c->table == PT_TABLE_POINTS)
            pt_copy_progress_row(&c->pr, row);
    }
    if (!pt_copy_wanted(c->o, c->table, c->bucket_ms, row, qual, value))
        return 0;
    c->pr.samples += (uint64_t)c->cur_data;
    if (c->by_series && c->table == PT_TABLE_POINTS && (rv = note_day(c, row, qual, value)) != 0)
        return rv;
    if (c->table == PT_TABLE_INDEX && is_row(untenanted(row), format_row) &&
        (rv = format_marker(c, row, value)) != 1)
        return rv;
    size_t need = (c->cur_in_batch ? 0 : row.n) + qual.n + value.n;
    if (c->n == BATCH_CELLS || c->used + need > BATCH_BYTES) {
        if ((rv = flush(c)) != 0)
            return rv;
        need = row.n + qual.n + value.n;
    }
    if (need > BATCH_BYTES) {
        snprintf(c->err, c->errlen, "a cell of %zu bytes: over the copy's batch", need);
        return PT_ETOOLARGE;
    }
    uint8_t *p = c->bytes + c->used;
    if (!c->cur_in_batch) {
        memcpy(p, row.p, row.n);
        c->cur_in_batch = p;
        p += row.n;
    }
    memcpy(p, qual.p, qual.n);
    memcpy(p + qual.n, value.p, value.n);
    c->m[c->n++] = (pt_mutation){
        .table = (uint8_t)c->table,
        .row = {c->cur_in_batch, row.n},
        .qual = {p, qual.n},
        .value = {p + qual.n, value.n},
        .version_us = pt_copy_version(c->table, row, qual, value, c->bucket_ms, c->now_us),
    };
    c->used += need;
    return 0;
}

/* Scans the ranges of table t; with a window, points rows are read with the window's
 * qualifier range when it lies in one bucket. */
int pt_copy_scan_ranges(side *s, const pt_copy_opts *o, pt_table t, const pt_row_range *r, size_t nr,
                       size_t row_limit, pt_cell_fn fn, void *ud)
{
    uint8_t qs[4], qe[4];
    pt_scan sc = {.table = t, .ranges = r, .nranges = nr, .row_limit = row_limit};
    int64_t base = pt_bucket_base(o->start_ms);
    if (t == PT_TABLE_POINTS && o->window && pt_bucket_base(o->end_ms) == base) {
        /* Exemplar qualifiers are windows of 2^14 ms: from the start's window on. */
        pt_put_be32(qs, (uint32_t)((o->start_ms - base) & ~(int64_t)0x3fff));
        sc.qual_start = (pt_slice){qs, 4};
        if (o->end_ms - base + 1 < PT_BUCKET_MS) {
            pt_put_be32(qe, (uint32_t)(o->end_ms - base + 1));
            sc.qual_end = (pt_slice){qe, 4};
        }
    }
    return pt_backend_scan(&s->be, &sc, fn, ud);
}

/* The scan of table t after row (has_row) or from its start. */
int pt_copy_scan_from(side *s, const pt_copy_opts *o, pt_table t, const uint8_t *row, size_t row_n,
                     int has_row, size_t row_limit, pt_cell_fn fn, void *ud)
{
    uint8_t start[PT_MAX_ROW_KEY + 1];
    size_t n = 0;
    if (has_row) {
        memmove(start, row, row_n);
        start[row_n] = 0; /* keys never hold 0x00: key || 00 is the next key */
        n = row_n + 1;
    }
    pt_row_range r = {{start, n}, {0}};
    return pt_copy_scan_ranges(s, o, t, &r, 1, row_limit, fn, ud);
}

static int copy_tables(copier *c)
{
    int rv = 0;
    for (int t = c->ck.table; t < PT_TABLE_COUNT && rv == 0; t++) {
        c->table = (pt_table)t;
        pt_copy_progress_part(&c->pr, c->table);
        c->has_cur = c->has_prev = 0;
        c->cur_in_batch = NULL;
        int resume = t == c->ck.table && c->ck.has_row;
        if (resume) {
            char q[200];
            pt_log(PT_LOG_INFO, "copy: resuming after the checkpoint", "table=%s row=%s",
                   pt_copy_table_name[t],
                   pt_log_quote(q, sizeof(q), (const char *)c->ck.row,
                                c->ck.row_n < 150 ? c->ck.row_n : 150));
        }
        rv = pt_copy_scan_from(c->src, c->o, c->table, c->ck.row, c->ck.row_n, resume, 0, on_copy_cell, c);
        if (rv != 0 && !c->err[0])
            snprintf(c->err, c->errlen, "reading %s's %s table failed: %s", c->src->path,
                     pt_copy_table_name[t], pt_strerror(rv));
        /* The table's last row is complete now. */
        if (rv == 0) {
            c->has_prev = 0;
            rv = flush(c);
        }
        if (rv == 0 && c->o->checkpoint) {
            c->ck = (pt_copy_ckpt){.job = c->ck.job, .table = t + 1};
            rv = pt_copy_ckpt_write(c->o->checkpoint, &c->ck, c->err, c->errlen);
        }
        pt_copy_progress_show(&c->pr, pt_copy_table_name[t], 1);
    }
    return rv;
}

/* ---- --match ---- */

static int sid_cmp(const void *x, const void *y)
{
    const series *a = x, *b = y;
    return pt_slice_cmp(a->sid, b->sid);
}

static int label_name_cmp(const void *x, const void *y)
{
    const pt_label *a = x, *b = y;
    return pt_slice_cmp(a->name, b->name);
}

/* A store over an open side's backend, for its index: the selection of --match, and the
 * destination's index rows. */
static int store_open(pt_store *st, side *s)
{
    pt_store_caches caches = {.index_entries = 1024};
    if (pt_store_open(st, &s->be, &caches) != 0)
        return PT_ENOMEM;
    st->index_bucket_ms = s->cfg.index_bucket_ms;
    st->regex_match_limit = (uint32_t)s->cfg.read_regex_match_limit;
    st->regex_heap_limit = s->cfg.read_regex_heap_limit;
    st->key_limit = s->cfg.tenancy_enabled ? PT_TENANT_KEY_LIMIT : PT_MAX_ROW_KEY;
    return 0;
}

/* The series the selectors pick over the window's index buckets, sorted by series id,
 * each once, in arena a. */
static int select_series(const pt_copy_opts *o, pt_store *st, pt_arena *a, picked *out, char *err,
                         size_t errlen)
{
    *out = (picked){0};
    for (size_t i = 0; i < o->nmatch; i++) {
        qctx q;
        char msg[PT_MSG_MAX] = "";
        memset(&q, 0, sizeof(q));
        q.st = st;
        q.a = q.c.a = a;
        q.day_first = o->start_ms - o->start_ms % st->index_bucket_ms;
        q.day_last = o->end_ms - o->end_ms % st->index_bucket_ms;
        int rv = pt_selector_parse(a, o->match[i], strlen(o->match[i]), NULL, &q.ms, &q.nms, msg,
                                   sizeof(msg));
        if (rv == 0 && (rv = pt_select(&q)) == PT_EREGEXLIMIT)
            pt_matcher_limit_msg(q.costly, msg, sizeof(msg));
        else if (rv != 0 && !msg[0])
            snprintf(msg, sizeof(msg), "%s", pt_strerror(rv));
        pt_selector_free(q.ms, q.nms);
        if (rv != 0) {
            snprintf(err, errlen, "--match \"%s\": %s", o->match[i], msg);
            return rv;
        }
        series *all = pt_arena_alloc(a, (out->n + q.c.n + 1) * sizeof(*all));
        if (!all)
            return PT_ENOMEM;
        if (out->n)
            memcpy(all, out->v, out->n * sizeof(*all));
        if (q.c.n)
            memcpy(all + out->n, q.c.v, q.c.n * sizeof(*all));
        out->v = all;
        out->n += q.c.n;
    }
    if (out->n)
        qsort(out->v, out->n, sizeof(*out->v), sid_cmp);
    size_t k = 0;
    for (size_t i = 0; i < out->n; i++)
        if (k == 0 || !pt_slice_eq(out->v[k - 1].sid, out->v[i].sid))
            out->v[k++] = out->v[i];
    out->n = k;
    return 0;
}

/* The points rows of the series sid: its exemplar rows [sid,# sid,$) and its data rows
 * [sid,@ sid,A), in key order. keys: 4 × (sid.n + 2) bytes. */
void pt_copy_series_ranges(pt_slice sid, uint8_t *keys, pt_row_range r[2])
{
    static const char marks[4] = {'#', '$', '@', 'A'};
    size_t kn = sid.n + 2;
    for (size_t i = 0; i < 4; i++) {
        uint8_t *k = keys + i * kn;
        memcpy(k, sid.p, sid.n);
        k[sid.n] = ',';
        k[sid.n + 1] = (uint8_t)marks[i];
    }
    r[0] = (pt_row_range){{keys, kn}, {keys + kn, kn}};
    r[1] = (pt_row_range){{keys + 2 * kn, kn}, {keys + 3 * kn, kn}};
}

/* Copies the selected series: the store-wide rows a read of them needs first (every
 * metadata row, the exemplar marks), then, series by series in series-id order, its
 * points and exemplar rows and, through the destination store's own index code, its
 * index rows for every bucket it has cells in. */
static int copy_matched(copier *c, const picked *ps, pt_store *dst, pt_arena *tmp)
{
    static const uint8_t meta[] = PT_META_ROW_PREFIX, mark[] = PT_EXEMPLAR_MARK_ROW;
    const pt_row_range store_rows[2] = {
        {{meta, sizeof(meta) - 1}, {(const uint8_t *)"==meta-", 7}}, /* ',' + 1 */
        {{mark, sizeof(mark) - 1}, {mark, sizeof(mark)}},            /* the row, its NUL */
    };
    c->by_series = 1;
    c->table = PT_TABLE_INDEX;
    int rv = 0;
    if (c->ck.table == PT_TABLE_POINTS)
        rv = pt_copy_scan_ranges(c->src, c->o, PT_TABLE_INDEX, store_rows, 2, 0, on_copy_cell, c);
    c->table = PT_TABLE_POINTS;
    c->has_prev = 0;
    pt_copy_progress_part(&c->pr, PT_TABLE_POINTS);
    c->pr.series_total = ps->n;
    for (size_t i = 0; i < ps->n && rv == 0 && c->ck.table == PT_TABLE_POINTS; i++) {
        series *s = &ps->v[i];
        if (c->ck.has_row && pt_slice_cmp(s->sid, (pt_slice){c->ck.row, c->ck.row_n}) <= 0)
            continue;
        pt_arena_reset(tmp);
        uint8_t *keys = pt_arena_alloc(tmp, 4 * (s->sid.n + 2));
        if (!keys) {
            rv = PT_ENOMEM;
            break;
        }
        pt_row_range sr[2];
        pt_copy_series_ranges(s->sid, keys, sr);
        c->ndays = 0;
        rv = pt_copy_scan_ranges(c->src, c->o, PT_TABLE_POINTS, sr, 2, 0, on_copy_cell, c);
        qsort(s->labels, s->nlabels, sizeof(*s->labels), label_name_cmp);
        for (size_t d = 0; d < c->ndays && rv == 0; d++)
            rv = pt_store_index_series(dst, tmp, s->labels, s->nlabels, c->days[d]);
        if (rv != 0)
            break;
        c->pr.rows++;
        pt_buf_reset(&c->prev);
        if ((rv = pt_buf_append(&c->prev, s->sid.p, s->sid.n)) != 0)
            break;
        c->has_prev = 1; /* done: the next batch's checkpoint names it */
    }
    if (rv == 0)
        rv = flush(c);
    if (rv != 0 && !c->err[0])
        snprintf(c->err, c->errlen, "copying the selected series failed: %s", pt_strerror(rv));
    if (rv == 0 && c->o->checkpoint) {
        c->ck = (pt_copy_ckpt){.job = c->ck.job, .table = PT_TABLE_COUNT};
        rv = pt_copy_ckpt_write(c->o->checkpoint, &c->ck, c->err, c->errlen);
    }
    pt_copy_progress_show(&c->pr, "series", 1);
    return rv;
}

/* ---- the command ---- */

int pt_copy_main(int argc, char **argv, FILE *out)
{
    pt_copy_opts o;
    char err[1024] = "";
    side src = {0}, dst = {0};
    copier c = {.o = &o, .src = &src, .dst = &dst, .err = err, .errlen = sizeof(err)};
    pt_store sst = {0}, dst_st = {0};
    pt_arena sel, tmp;
    picked ps = {0};
    int status = 1, rv, has_sst = 0, has_dst_st = 0;
    pt_arena_init(&sel, 1 << 20, 0);
    pt_arena_init(&tmp, 64 << 10, 0);
    if (pt_copy_parse_args(argc, argv, &o, err, sizeof(err)) != 0)
        goto done;
    c.ck.job = pt_copy_job(&o);
    if (o.checkpoint && !o.verify_only) {
        pt_copy_ckpt ck;
        rv = pt_copy_ckpt_read(o.checkpoint, &ck, err, sizeof(err));
        if (rv < 0)
            goto done;
        if (rv == 0 && ck.job != c.ck.job) {
            snprintf(err, sizeof(err),
                     "the checkpoint %s is of another copy (other stores, "
                     "window or matchers): remove it to start over",
                     o.checkpoint);
            goto done;
        }
        if (rv == 0)
            c.ck = ck;
    }
    if (side_open(&src, o.from, 0, err, sizeof(err)) != 0 ||
        side_open(&dst, o.to, !o.verify_only, err, sizeof(err)) != 0)
        goto done;
    if (src.cfg.index_bucket_ms != dst.cfg.index_bucket_ms) {
        snprintf(err, sizeof(err),
                 "index.bucket differs (%ld ms in %s, %ld ms in %s): index "
                 "rows are laid out by it, so both stores must use the same",
                 src.cfg.index_bucket_ms, o.from, dst.cfg.index_bucket_ms, o.to);
        goto done;
    }
    if (o.nmatch) {
        /* The destination's format marker first: an empty store gets it, another
         * format is refused (as a promtable starting on it would). */
        if (store_open(&sst, &src) != 0 || (has_sst = 1, store_open(&dst_st, &dst)) != 0) {
            snprintf(err, sizeof(err), "out of memory");
            goto done;
        }
        has_dst_st = 1;
        if (!o.verify_only && pt_store_check_index(&dst_st, err, sizeof(err)) != 0)
            goto done;
        if (select_series(&o, &sst, &sel, &ps, err, sizeof(err)) != 0)
            goto done;
        fprintf(out, "copy: %zu series selected\n", ps.n);
    }
    if (!o.verify_only) {
        c.bucket_ms = src.cfg.index_bucket_ms;
        c.now_us = pt_wall_ms() * 1000;
        c.bytes = malloc(BATCH_BYTES);
        c.m = malloc(BATCH_CELLS * sizeof(*c.m));
        pt_buf_init(&c.cur, PT_MAX_ROW_KEY);
        pt_buf_init(&c.prev, PT_MAX_ROW_KEY);
        c.pr = (progress){.tty = isatty(2), .what = "copy", .t0 = pt_mono_ms(), .be = &src.be};
        if (!c.bytes || !c.m) {
            snprintf(err, sizeof(err), "out of memory");
            goto done;
        }
        if (c.ck.table == PT_TABLE_COUNT)
            fprintf(out, "copy: the checkpoint says this copy is complete\n");
        if ((o.nmatch ? copy_matched(&c, &ps, &dst_st, &tmp) : copy_tables(&c)) != 0)
            goto done;
        double s = (double)(pt_mono_ms() - c.pr.t0) / 1000.0;
        fprintf(out, "copy: %llu rows, %llu cells in %.1f s (%.0f cells/s)\n",
                (unsigned long long)c.pr.rows, (unsigned long long)c.pr.cells, s,
                s > 0 ? (double)c.pr.cells / s : 0.0);
    }
    if (o.verify && (rv = pt_copy_verify(&o, &src, &dst, &ps, &tmp, out)) != 0) {
        if (rv < 0)
            snprintf(err, sizeof(err), "verify could not finish: %s", pt_strerror(rv));
        else
            snprintf(err, sizeof(err), "verify found mismatches");
        goto done;
    }
    status = 0;
done:
    if (status != 0)
        fprintf(stderr, "promtable copy: %s\n", err[0] ? err : "failed");
    free(c.bytes);
    free(c.m);
    free(c.days);
    if (has_dst_st)
        pt_store_close(&dst_st);
    if (has_sst)
        pt_store_close(&sst);
    pt_arena_free(&tmp);
    pt_arena_free(&sel);
    pt_buf_free(&c.cur);
    pt_buf_free(&c.prev);
    side_close(&dst);
    side_close(&src);
    return status;
}
