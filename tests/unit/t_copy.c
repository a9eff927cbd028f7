/* copy.c: `promtable copy`'s arguments, its checkpoint file (round trip, refusals), the
 * cell versions it writes, and whole copies between two embedded stores: what is copied
 * and what is not (HA lease rows), a resume from a checkpoint, a window, a destination of
 * another index format, --verify-only on equal and unequal stores. */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bytes.h"
#include "copy.h"
#include "embedded_helpers.h"
#include "error.h"
#include "log.h"
#include "tap.h"

static char dir[] = "/tmp/t_copy.XXXXXX";

/* argv = {"copy", the arguments up to NULL}; returns argc. */
static int args_of(char **argv, const char *a0, va_list ap)
{
    int argc = 1;
    argv[0] = "copy";
    for (const char *a = a0; a && argc < 79; a = va_arg(ap, const char *))
        argv[argc++] = (char *)a;
    return argc;
}

static int parse(pt_copy_opts *o, char *err, size_t n, const char *a0, ...)
{
    char *argv[80];
    va_list ap;
    va_start(ap, a0);
    int argc = args_of(argv, a0, ap);
    va_end(ap);
    err[0] = '\0';
    return pt_copy_parse_args(argc, argv, o, err, n);
}

static void test_args(void)
{
    pt_copy_opts o;
    char err[256];
    is(parse(&o, err, sizeof(err), "--from=a.yml", "--to", "b.yml", "--match", "up",
             "--match={job=\"x\"}", "--checkpoint=ck", "--verify", NULL),
       0, "flags parse");
    is_str(o.from, "a.yml", "--from=");
    is_str(o.to, "b.yml", "--to VALUE");
    is(o.nmatch, 2, "--match twice");
    is_str(o.match[1], "{job=\"x\"}", "second selector");
    is_str(o.checkpoint, "ck", "--checkpoint");
    ok(o.verify && !o.verify_only && !o.window, "--verify, no window");
    is(o.end_ms, PT_MAX_TIME_MS, "no --end: up to the last time a key holds");
    is(parse(&o, err, sizeof(err), "--from=a", "--to=b", "--start=2023-11-14T22:13:20Z", "--end",
             "1700000100.5", "--verify-only", NULL),
       0, "times parse");
    ok(o.window && o.start_ms == 1700000000000 && o.end_ms == 1700000100500,
       "RFC 3339 and unix seconds: %lld %lld", (long long)o.start_ms, (long long)o.end_ms);
    ok(o.verify && o.verify_only, "--verify-only verifies");

    static const struct {
        const char *a[4], *want;
    } bad[] = {
        {{"--from=a", NULL}, "needs --from=CONFIG and --to=CONFIG"},
        {{"--from=a", "--to=a", NULL}, "name the same file"},
        {{"--from=a", "--to=b", "--stat=1", NULL}, "unknown argument \"--stat=1\""},
        {{"--from=a", "--to=b", "--start=yesterday", NULL}, "--start: \"yesterday\" is not"},
        {{"--from=a", "--to=b", "--start=20", "--end=10"}, "--start is after --end"},
        {{"--from=a", "--to=b", "--match", NULL}, "flag --match needs a value"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        int rv =
            parse(&o, err, sizeof(err), bad[i].a[0], bad[i].a[1], bad[i].a[2], bad[i].a[3], NULL);
        ok(rv == -1 && strstr(err, bad[i].want), "refused: %s (%s)", bad[i].want, err);
    }
    char *argv[70] = {"copy", "--from=a", "--to=b"};
    for (int i = 3; i < 70; i++)
        argv[i] = "--match=up";
    ok(pt_copy_parse_args(70, argv, &o, err, sizeof(err)) == -1 && strstr(err, "more than 64"),
       "at most 64 selectors (%s)", err);
}

static void test_job(void)
{
    pt_copy_opts a = {.from = "a", .to = "b", .end_ms = 5}, b = a;
    ok(pt_copy_job(&a) == pt_copy_job(&b), "same copy, same job");
    b.start_ms = 1;
    ok(pt_copy_job(&a) != pt_copy_job(&b), "another window, another job");
    b = a;
    b.match[b.nmatch++] = "up";
    ok(pt_copy_job(&a) != pt_copy_job(&b), "another selection, another job");
    b = a;
    b.from = "ab", b.to = "";
    ok(pt_copy_job(&a) != pt_copy_job(&b), "the file names are kept apart");
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        BAIL_OUT("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void test_checkpoint(void)
{
    char path[256], tmp[300], err[512];
    snprintf(path, sizeof(path), "%s/ckpt", dir);
    pt_copy_ckpt w = {.job = 0x0123456789abcdefull, .table = PT_TABLE_INDEX, .has_row = 1}, r;
    static const uint8_t row[] = {0x01, 't', 0x01, 'm', ',', '@', 0xff, '\\'};
    memcpy(w.row, row, sizeof(row));
    w.row_n = sizeof(row);
    is(pt_copy_ckpt_read(path, &r, err, sizeof(err)), 1, "no file: 1");
    ok(r.table == PT_TABLE_POINTS && !r.has_row, "no file: from the start");
    is(pt_copy_ckpt_write(path, &w, err, sizeof(err)), 0, "written");
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    ok(access(tmp, F_OK) != 0, "no temporary file left");
    is(pt_copy_ckpt_read(path, &r, err, sizeof(err)), 0, "read back");
    ok(r.job == w.job && r.table == w.table && r.has_row && r.row_n == w.row_n &&
           memcmp(r.row, w.row, w.row_n) == 0,
       "the same job, table and row bytes");
    w = (pt_copy_ckpt){.job = 7, .table = PT_TABLE_COUNT};
    pt_copy_ckpt_write(path, &w, err, sizeof(err));
    ok(pt_copy_ckpt_read(path, &r, err, sizeof(err)) == 0 && r.table == PT_TABLE_COUNT &&
           !r.has_row && r.job == 7,
       "done, no row");
    memset(w.row, 'k', PT_MAX_ROW_KEY);
    w = (pt_copy_ckpt){.job = 1, .table = PT_TABLE_POINTS, .has_row = 1, .row_n = PT_MAX_ROW_KEY};
    memset(w.row, 'k', PT_MAX_ROW_KEY);
    pt_copy_ckpt_write(path, &w, err, sizeof(err));
    ok(pt_copy_ckpt_read(path, &r, err, sizeof(err)) == 0 && r.row_n == PT_MAX_ROW_KEY,
       "the longest row key");

    static const char *const bad[] = {
        "",
        "promtable copy checkpoint 2\njob 0000000000000001\ntable points\nrow -\n",
        "promtable copy checkpoint 1\njob 1\ntable points\nrow -\n",
        "promtable copy checkpoint 1\njob 0000000000000001\ntable rows\nrow -\n",
        "promtable copy checkpoint 1\njob 0000000000000001\ntable points\nrow 6a6\n",
        "promtable copy checkpoint 1\njob 0000000000000001\ntable points\nrow 6x\n",
        "promtable copy checkpoint 1\njob 0000000000000001\ntable points\nrow \n",
        "promtable copy checkpoint 1\njob 0000000000000001\ntable points\nrow 61\nmore\n",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_file(path, bad[i]);
        int rv = pt_copy_ckpt_read(path, &r, err, sizeof(err));
        ok(rv == PT_EBADREQ && strstr(err, "is not a checkpoint of promtable copy"),
           "refused: case %zu (%s)", i, err);
    }
}

static pt_slice S(const char *s)
{
    return (pt_slice){(const uint8_t *)s, strlen(s)};
}

static void test_versions(void)
{
    const int64_t day = 86400000, now = 42, never = (PT_MAX_TIME_MS + PT_BUCKET_MS) * 1000;
    uint8_t q[4], v[12] = {0}, b8[8];
    pt_put_be32(q, 1000);
    pt_put_be32(v, 2500);
    is(pt_copy_version(PT_TABLE_POINTS, S("up,job=a,@0004294967296"), (pt_slice){q, 4},
                       (pt_slice){v, 8}, day, now),
       (4294967296LL + 1000) * 1000, "a sample: its time");
    is(pt_copy_version(PT_TABLE_POINTS, S("up,job=a,#0004294967296"), (pt_slice){q, 4},
                       (pt_slice){v, 12}, day, now),
       (4294967296LL + 2500) * 1000, "an exemplar: its time, from the value");
    is(pt_copy_version(PT_TABLE_POINTS, S("up,job=a"), (pt_slice){q, 4}, (pt_slice){v, 8}, day,
                       now),
       now, "a points row of no known form: now");
    is(pt_copy_version(PT_TABLE_INDEX, S("up,@1700006400000,0123456789abcdef"), S("mask8byt"),
                       S(""), day, now),
       (1700006400000LL + day - 1) * 1000, "a list row: its bucket's last ms");
    is(pt_copy_version(PT_TABLE_INDEX, S("\x01t1\x01=job,@1700006400000,a"), S("l"), S(""), day,
                       now),
       (1700006400000LL + day - 1) * 1000, "a tenant's values row: the same");
    is(pt_copy_version(PT_TABLE_INDEX, S("==format"), S("l"), S("2"), day, now), never,
       "the format marker: never expires");
    is(pt_copy_version(PT_TABLE_INDEX, S("\x01t1\x01==format"), S("l"), S("2"), day, now), never,
       "a tenant's format marker too");
    pt_put_be64(b8, (uint64_t)PT_BUCKET_MS);
    is(pt_copy_version(PT_TABLE_INDEX, S("==xmarks"), (pt_slice){b8, 8}, S("1"), day, now),
       (2 * PT_BUCKET_MS - 1) * 1000, "an exemplar mark: its bucket's last ms");
    is(pt_copy_version(PT_TABLE_INDEX, S("==xmarks"), S("since"), S("1"), day, now), never,
       "the marks' since");
    is(pt_copy_version(PT_TABLE_INDEX, S("==meta,up,0123456789abcdef"), S("m"), S("x"), day, now),
       now, "a metadata row: now");
}

/* ---- whole copies between embedded stores ---- */

static char cfg_path[4][300];

static const char *store_cfg(int i)
{
    char text[600];
    snprintf(cfg_path[i], sizeof(cfg_path[i]), "%s/s%d.yml", dir, i);
    snprintf(text, sizeof(text), "storage:\n  backend: embedded\n  embedded:\n    path: %s/s%d\n",
             dir, i);
    write_file(cfg_path[i], text);
    return cfg_path[i];
}

static void open_store(int i, pt_backend *be)
{
    char err[256], path[300];
    snprintf(path, sizeof(path), "%s/s%d", dir, i);
    if (open_embedded(be, path, err, sizeof(err)) != 0)
        BAIL_OUT("open store %d: %s", i, err);
}

typedef struct dump {
    char text[8192];
    size_t n, cells;
} dump;

static int on_dump(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    dump *d = ud;
    d->cells++;
    d->n += (size_t)snprintf(d->text + d->n, sizeof(d->text) - d->n, "%.*s|%zu|%zu\n", (int)row.n,
                             (const char *)row.p, qual.n, value.n);
    return 0;
}

/* Every cell of both tables of store i: "row|qual bytes|value bytes" lines. */
static void dump_store(int i, dump *d)
{
    pt_backend be = {0};
    open_store(i, &be);
    memset(d, 0, sizeof(*d));
    pt_row_range all = {{(const uint8_t *)"", 0}, {0}};
    for (int t = 0; t < PT_TABLE_COUNT; t++) {
        pt_scan s = {.table = (pt_table)t, .ranges = &all, .nranges = 1};
        pt_backend_scan(&be, &s, on_dump, d);
        d->n += (size_t)snprintf(d->text + d->n, sizeof(d->text) - d->n, "--\n");
    }
    pt_backend_close(&be);
}

static int run(const char *a0, ...)
{
    char *argv[80];
    va_list ap;
    va_start(ap, a0);
    int argc = args_of(argv, a0, ap);
    va_end(ap);
    FILE *out = fopen("/dev/null", "w");
    int rv = pt_copy_main(argc, argv, out);
    fclose(out);
    return rv;
}

static void test_copies(void)
{
    pt_backend be = {0};
    open_store(0, &be);
    uint8_t q[3][4], v[8] = {0x3f, 0xf0};
    for (int i = 0; i < 3; i++)
        pt_put_be32(q[i], (uint32_t)(i * 1000000));
    /* Samples at t = 0, 1000 s and 2000 s of bucket 0 in two series; index rows. */
    const char *rows[] = {"a,@0000000000000", "b,@0000000000000"};
    pt_mutation m[16];
    size_t n = 0;
    for (int r = 0; r < 2; r++)
        for (int i = 0; i < 3; i++)
            m[n++] = (pt_mutation){PT_TABLE_POINTS, S(rows[r]), {q[i], 4}, {v, 8}, 1000};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S("==format"), S("l"), S("2"), 1};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S("==ha,00,61"), S("l"), S("123 72"), 1};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S("\x01t\x01==ha,74,61"), S("l"), S("1 2"), 1};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S(PT_COMPACT_LEASE_ROW), S("l"), S("9 ff"), 1000};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S("a,@0000000000000,0123"), S("mask8byt"), S(""), 1};
    m[n++] = (pt_mutation){PT_TABLE_INDEX, S("a,@0000864000000,0123"), S("mask8byt"), S(""), 1};
    if (pt_backend_write(&be, m, n) != 0)
        BAIL_OUT("writing the source failed");
    pt_backend_close(&be);
    const char *from = store_cfg(0), *to = store_cfg(1);
    char ck[300], a_from[320], a_to[320], a_ck[320];
    snprintf(ck, sizeof(ck), "%s/ck", dir);
    snprintf(a_from, sizeof(a_from), "--from=%s", from);
    snprintf(a_to, sizeof(a_to), "--to=%s", to);
    snprintf(a_ck, sizeof(a_ck), "--checkpoint=%s", ck);

    is(run(a_from, a_to, a_ck, "--verify", NULL), 0, "copy and verify: exit 0");
    dump d;
    dump_store(1, &d);
    is_str(d.text,
           "a,@0000000000000|4|8\na,@0000000000000|4|8\na,@0000000000000|4|8\n"
           "b,@0000000000000|4|8\nb,@0000000000000|4|8\nb,@0000000000000|4|8\n--\n"
           "==format|1|1\na,@0000000000000,0123|8|0\na,@0000864000000,0123|8|0\n--\n",
           "every cell but the HA and compaction lease rows");
    is(run(a_from, a_to, "--verify-only", NULL), 0, "verify alone: equal");
    is(run(a_from, a_to, a_ck, NULL), 0, "a done checkpoint: nothing to do, exit 0");

    /* A checkpoint inside the points table: the rows up to it are not copied again. */
    const char *to2 = store_cfg(2);
    char a_to2[320];
    snprintf(a_to2, sizeof(a_to2), "--to=%s", to2);
    pt_copy_opts o = {.from = from, .to = to2, .end_ms = PT_MAX_TIME_MS};
    pt_copy_ckpt c = {
        .job = pt_copy_job(&o), .table = PT_TABLE_POINTS, .has_row = 1, .row_n = strlen(rows[0])};
    char err[512];
    memcpy(c.row, rows[0], c.row_n);
    pt_copy_ckpt_write(ck, &c, err, sizeof(err));
    is(run(a_from, a_to2, a_ck, NULL), 0, "resumed copy: exit 0");
    dump_store(2, &d);
    ok(!strstr(d.text, "a,@0000000000000|") && strstr(d.text, "b,@0000000000000|4|8") &&
           strstr(d.text, "==format"),
       "resumed after the checkpoint's row");
    is(run(a_from, a_to2, "--verify-only", NULL), 1, "verify alone: the rows not copied");
    c.job ^= 1;
    pt_copy_ckpt_write(ck, &c, err, sizeof(err));
    is(run(a_from, a_to2, a_ck, NULL), 1, "a checkpoint of another copy: refused");

    /* A window: the samples at 1000 s only; index rows of its day only. */
    const char *to3 = store_cfg(3);
    char a_to3[320];
    snprintf(a_to3, sizeof(a_to3), "--to=%s", to3);
    is(run(a_from, a_to3, "--start=500", "--end=1500", "--verify", NULL), 0, "window copy");
    dump_store(3, &d);
    is(d.cells, 4, "two samples, the format marker, one index row");
    ok(strstr(d.text, "a,@0000000000000,0123") && !strstr(d.text, "a,@0000864000000"),
       "the index row of the window's day only");

    /* A destination of another index format is refused. */
    open_store(3, &be);
    pt_mutation f = {PT_TABLE_INDEX, S("==format"), S("l"), S("9"), 1};
    pt_backend_write(&be, &f, 1);
    pt_backend_close(&be);
    is(run(a_from, a_to3, NULL), 1, "a destination of index format 9: refused");
    dump_store(3, &d);
    ok(strstr(d.text, "==format|1|1") != NULL, "its marker stays");
}

int main(void)
{
    if (!mkdtemp(dir))
        BAIL_OUT("mkdtemp");
    pt_log_set_level("error");
    test_args();
    test_job();
    test_checkpoint();
    test_versions();
    test_copies();
    rm_rf(dir);
    return done_testing();
}
