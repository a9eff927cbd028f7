/*
 * The embedded store's flushes: a model of a few rows against random writes, flushes and
 * reopens; crashes at every stage of a flush (child processes killed mid-write); the
 * index's table file levels; and a flush that fails and is retried.
 */
#include "embedded_helpers.h"
#include "gorilla.h"

/* ---- the embedded head: flushes, chunk merges, crash recovery ---- */

/* A model of a few rows, checked against the store after random writes, rewrites,
 * backfills, flushes and reopens. */
enum { M_ROWS = 3, M_QUALS = 6000 };

typedef struct model {
    char val[M_ROWS][M_QUALS][12]; /* "" = no cell */
} model;

typedef struct mcheck {
    const model *m;
    int row;
    uint32_t next_q; /* every model cell below it was seen */
    uint32_t qe;
    int bad;
    size_t cells, streams;
} mcheck;

static int mcheck_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    mcheck *c = ud;
    (void)row;
    if (qual.n != 4) {
        c->bad = 1;
        return 1;
    }
    uint32_t q = pt_get_be32(qual.p);
    if (q < c->next_q || q >= c->qe) {
        c->bad = 1;
        return 1;
    }
    for (uint32_t k = c->next_q; k < q; k++)
        if (c->m->val[c->row][k][0]) {
            diag("row %d: cell %u missing", c->row, k);
            c->bad = 1;
            return 1;
        }
    const char *want = c->m->val[c->row][q];
    if (!want[0] || value.n != strlen(want) || memcmp(value.p, want, value.n) != 0) {
        diag("row %d: cell %u is \"%.*s\", want \"%s\"", c->row, q, (int)value.n,
             (const char *)value.p, want);
        c->bad = 1;
        return 1;
    }
    c->next_q = q + 1;
    c->cells++;
    return 0;
}

/* A stored stream in place of cells: its samples checked as the cells they stand for. */
static int mcheck_stream(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                         pt_slice stream)
{
    mcheck *c = ud;
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, stream.p, stream.n);
    int64_t t = -1;
    for (uint32_t i = 0; i < count && !c->bad; i++) {
        uint64_t bits;
        uint8_t v[8], q[4];
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || (i == 0 && t != first)) {
            c->bad = 1;
            break;
        }
        pt_put_be64(v, bits);
        pt_put_be32(q, (uint32_t)t);
        mcheck_cell(c, row, (pt_slice){q, 4}, (pt_slice){v, 8});
    }
    if (c->bad || t != last || !pt_gorilla_dec_done(&d)) {
        diag("row %d: a stream of %u samples [%u, %u] does not hold what it says", c->row, count,
             first, last);
        c->bad = 1;
        return 1;
    }
    c->streams++;
    return 0;
}

static const char *const m_rows[M_ROWS] = {"m/a", "m/a,b", "m/b"};

/* Scans row r over [qs, qe) and compares with the model; returns 1 when they agree. With
 * streams set, the scan takes stored streams too (pt_stream_fn), counted in *streams. */
static int model_agrees(pt_backend *b, const model *m, int r, uint32_t qs, uint32_t qe,
                        size_t *streams)
{
    pt_row_range rr[1];
    char end[16];
    snprintf(end, sizeof(end), "%s", m_rows[r]);
    size_t n = strlen(end);
    rr[0].start = (pt_slice){(const uint8_t *)m_rows[r], n};
    rr[0].end = (pt_slice){(const uint8_t *)end, n + 1}; /* includes the NUL: row || 0x00 */
    uint8_t a[4], z[4];
    pt_put_be32(a, qs);
    pt_put_be32(z, qe);
    mcheck c = {.m = m, .row = r, .next_q = qs, .qe = qe};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = rr, .nranges = 1,
                 .qual_start = qs ? (pt_slice){a, 4} : (pt_slice){0},
                 .qual_end = qe < M_QUALS ? (pt_slice){z, 4} : (pt_slice){0}};
    pt_stream_to to = {mcheck_stream, &c};
    if (streams)
        s.stream = &to;
    if (pt_backend_scan(b, &s, mcheck_cell, &c) != 0 || c.bad)
        return 0;
    if (streams)
        *streams += c.streams;
    for (uint32_t k = c.next_q; k < qe && k < M_QUALS; k++)
        if (m->val[r][k][0]) {
            diag("row %d: cell %u missing at the end", r, k);
            return 0;
        }
    return 1;
}

static void test_embedded_model(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/model", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "model: open");
    if (!b.state)
        return;
    model *m = calloc(1, sizeof(*m));
    if (!m)
        abort();
    uint32_t next[M_ROWS] = {0};
    int failures = 0, scans = 0, flushes = 0, reopens = 0;
    size_t streams = 0;
    static char vals[CT_BATCH_MAX][12];
    for (int round = 0; round < 600 && b.state; round++) {
        ct_batch bt = {0};
        size_t n = 1 + rnd(CT_BATCH_MAX);
        for (size_t i = 0; i < n; i++) {
            int r = (int)rnd(M_ROWS);
            uint32_t q;
            int kind = (int)rnd(10);
            if (kind < 7 && next[r] < M_QUALS) /* in order, the common case */
                q = next[r]++;
            else /* a rewrite or a backfill */
                q = rnd(M_QUALS);
            /* 8-byte values mostly (the fixed chunk format), others now and then; only
             * 8-byte ones in the last row, whose chunks are XOR streams. */
            if (r == M_ROWS - 1 || rnd(8))
                snprintf(vals[i], sizeof(vals[i]), "%08x", (unsigned)rnd(1u << 31));
            else
                snprintf(vals[i], sizeof(vals[i]), "v%u", (unsigned)rnd(1000));
            ct_add(&bt, PT_TABLE_POINTS, m_rows[r], q, vals[i]);
            memcpy(m->val[r][q], vals[i], sizeof(vals[i]));
        }
        if (ct_write(&b, &bt) != 0)
            failures++;
        int what = (int)rnd(20);
        if (what < 3) {
            failures += pt_embedded_flush(&b) != 0;
            flushes++;
        } else if (what == 3) {
            pt_backend_close(&b);
            if (open_embedded(&b, path, err, sizeof(err)) != 0) {
                failures++;
                break;
            }
            reopens++;
        }
        int r = (int)rnd(M_ROWS);
        uint32_t qs = rnd(M_QUALS), qe = qs + 1 + rnd(M_QUALS - qs);
        if (rnd(4) == 0)
            qs = 0, qe = M_QUALS;
        if (!model_agrees(&b, m, r, qs, qe, rnd(2) ? &streams : NULL)) {
            diag("round %d: row %d [%u, %u) differs", round, r, qs, qe);
            failures++;
        }
        scans++;
    }
    is(failures, 0, "model: %d scans after random writes, %d flushes, %d reopens agree", scans,
       flushes, reopens);
    ok(streams > 0, "model: half of the scans took stored streams (%zu of them)", streams);
    if (b.state) {
        pt_embedded_flush(&b);
        int all = 1;
        size_t whole = 0;
        for (int r = 0; r < M_ROWS; r++)
            all &= model_agrees(&b, m, r, 0, M_QUALS, NULL) &&
                   model_agrees(&b, m, r, 0, M_QUALS, &whole);
        ok(all, "model: every row agrees after a final flush, with and without streams "
                "(%zu streams)", whole);
        pt_backend_close(&b);
    }
    free(m);
}

/* Decimal values (two digits): their flushed chunks take the decimal layout, and a
 * streamed scan gets them as streams encoded from it, every value exact. */
static uint64_t decimal_bits(uint32_t q)
{
    double v = (double)(q % 977) / 100.0 + 3.0;
    uint64_t bits;
    memcpy(&bits, &v, 8);
    return bits;
}

static int dec_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row, (void)qual, (void)value;
    ((size_t *)ud)[0]++;
    return 0;
}

static int dec_stream(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                      pt_slice stream)
{
    (void)row;
    size_t *n = ud; /* cells, streams, samples, bad */
    pt_gorilla_dec d;
    pt_gorilla_dec_init(&d, stream.p, stream.n);
    int64_t t = -1;
    uint64_t bits;
    n[1]++;
    for (uint32_t i = 0; i < count; i++) {
        if (pt_gorilla_dec_next(&d, &t, &bits) != 0 || bits != decimal_bits((uint32_t)t))
            n[3]++;
        n[2]++;
        if (i == 0 && t != first)
            n[3]++;
    }
    n[3] += t != last;
    return 0;
}

static void test_decimal_streams(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/decimal", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "decimal streams: open");
    if (!b.state)
        return;
    static ct_batch bt;
    static uint8_t v[300][8];
    bt.n = 0;
    for (uint32_t i = 0; i < 300; i++) {
        pt_put_be64(v[i], decimal_bits(i * 10));
        ct_add_raw(&bt, PT_TABLE_POINTS, PT_SLICE_LIT("d/a"), i * 10, (pt_slice){v[i], 8});
    }
    is(ct_write(&b, &bt), 0, "decimal streams: 300 samples written");
    is(pt_embedded_flush(&b), 0, "decimal streams: flushed into chunks");
    size_t n[4] = {0};
    pt_stream_to to = {dec_stream, n};
    pt_row_range r = {PT_SLICE_LIT("d/a"), {(const uint8_t *)"d/a", 4}};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = &r, .nranges = 1, .stream = &to};
    is(pt_backend_scan(&b, &s, dec_cell, n), 0, "decimal streams: streamed scan");
    ok(n[0] == 0 && n[1] > 0 && n[2] == 300 && n[3] == 0,
       "decimal streams: every sample in a stream, exact (%zu cells, %zu streams, %zu "
       "samples, %zu bad)", n[0], n[1], n[2], n[3]);
    pt_backend_close(&b);
}

/* The crash child's flush hook: from the third flush on, at its stage, it waits until the
 * current generation holds cells too (both logs then matter), says "F" and stops the
 * flush thread there for good; the parent kills the child then. */
typedef struct stall {
    embedded *e;
    int stage, calls;
} stall;

static int stall_hook(void *ud, int stage)
{
    stall *st = ud;
    if (stage != st->stage || ++st->calls < 3)
        return 0;
    for (;;) {
        pthread_mutex_lock(&st->e->mu);
        size_t cur = pt_emb_head_cur_cells(&st->e->h);
        pthread_mutex_unlock(&st->e->mu);
        if (cur >= 20 * 17)
            break;
        usleep(1000);
    }
    if (write(1, "F\n", 2) != 2)
        _exit(1);
    for (;;)
        pause();
}

/* The child of the crash test: writes batch after batch and prints the number of each one
 * acknowledged, until it is killed. Batch i also rewrites cell w/rw:0 with "i". stage >= 0:
 * the flush thread stalls there (stall_hook). */
static int crash_child(const char *path, size_t budget, int stage)
{
    pt_backend b;
    char err[256];
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "crash child: %s\n", err);
        return 1;
    }
    if (budget)
        pt_embedded_set_budget(&b, budget);
    static stall st;
    st = (stall){.e = b.state, .stage = stage};
    if (stage >= 0)
        pt_emb_set_hook(b.state, stall_hook, &st);
    static char vals[CT_BATCH_MAX][16];
    for (uint32_t i = 0; i < 1000000; i++) {
        ct_batch bt = {0};
        char rows[8][16];
        for (int r = 0; r < 8; r++)
            snprintf(rows[r], sizeof(rows[r]), "k/r%d", r);
        for (uint32_t j = 0; j < 16; j++) {
            snprintf(vals[j], sizeof(vals[j]), "%u.%u", i, j);
            ct_add(&bt, PT_TABLE_POINTS, rows[(i + j) % 8], i * 16 + j, vals[j]);
        }
        snprintf(vals[16], sizeof(vals[16]), "%u", i);
        ct_add(&bt, PT_TABLE_POINTS, "w/rw", 0, vals[16]);
        /* Two index cells: one row per batch (read back after the crash), and one cell
         * every batch rewrites. */
        char irow[24];
        snprintf(irow, sizeof(irow), "ix/%08u", i);
        ct_add(&bt, PT_TABLE_INDEX, irow, 7, vals[16]);
        ct_add(&bt, PT_TABLE_INDEX, "ix/rw", 0, vals[16]);
        if (ct_write(&b, &bt) != 0)
            return 1;
        char line[32];
        int len = snprintf(line, sizeof(line), "%u\n", i);
        if (write(1, line, (size_t)len) != len)
            return 1;
    }
    return 0;
}

typedef struct crash_check {
    uint32_t acked;  /* batches 0..acked-1 were acknowledged */
    size_t found, bad;
    long rw;         /* w/rw:0, -1 if missing */
    size_t ifound, ibad; /* index cells ix/<batch> */
} crash_check;

static int crash_index_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    char r[32], v[16];
    snprintf(r, sizeof(r), "%.*s", (int)(row.n < 31 ? row.n : 31), (const char *)row.p);
    snprintf(v, sizeof(v), "%.*s", (int)(value.n < 15 ? value.n : 15), (const char *)value.p);
    if (strcmp(r, "ix/rw") == 0) {
        c->rw = strtol(v, NULL, 10);
        return 0;
    }
    uint32_t i = (uint32_t)strtoul(r + 3, NULL, 10);
    if (qual.n != 4 || pt_get_be32(qual.p) != 7 || strtoul(v, NULL, 10) != i)
        c->ibad++;
    else if (i < c->acked)
        c->ifound++;
    return 0;
}

static int rw_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    char v[16];
    (void)row;
    (void)qual;
    snprintf(v, sizeof(v), "%.*s", (int)(value.n < 15 ? value.n : 15), (const char *)value.p);
    c->rw = strtol(v, NULL, 10);
    return 0;
}

static int crash_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    crash_check *c = ud;
    (void)row;
    uint32_t q = pt_get_be32(qual.p);
    char want[32];
    snprintf(want, sizeof(want), "%u.%u", q / 16, q % 16);
    if (value.n != strlen(want) || memcmp(value.p, want, value.n) != 0)
        c->bad++;
    if (q / 16 < c->acked)
        c->found++;
    return 0;
}

/* Table files in dir whose properties say they were written with a 16 KiB ZSTD dictionary
 * at that level: 1 or 6 the index's, 32767 (ZSTD's default) the points'. */
static int files_at(const char *dir, int level)
{
    char want[64], path[600];
    snprintf(want, sizeof(want), "level=%d; strategy=0; max_dict_bytes=16384;", level);
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 4, ".sst") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        static char buf[1 << 20];
        size_t got = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        n += memmem(buf, got, want, strlen(want)) != NULL;
    }
    closedir(d);
    return n;
}

/* What the newest OPTIONS file in dir says of max_bytes_for_level_base for the column
 * family cf: the setting RocksDB applied. -1 if it says nothing. */
static long long level_base(const char *dir, const char *cf)
{
    char name[300] = "", path[600], line[512], section[128];
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        if (strncmp(de->d_name, "OPTIONS-", 8) == 0 &&
            (strlen(de->d_name) > strlen(name) ||
             (strlen(de->d_name) == strlen(name) && strcmp(de->d_name, name) > 0)))
            snprintf(name, sizeof(name), "%s", de->d_name);
    closedir(d);
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(section, sizeof(section), "[CFOptions \"%s\"]", cf);
    FILE *f = name[0] ? fopen(path, "r") : NULL;
    if (!f)
        return -1;
    long long v = -1;
    int in = 0;
    while (v < 0 && fgets(line, sizeof(line), f)) {
        const char *l = line + strspn(line, " ");
        if (l[0] == '[')
            in = strncmp(l, section, strlen(section)) == 0;
        else if (in && strncmp(l, "max_bytes_for_level_base=", 25) == 0)
            v = strtoll(l + 25, NULL, 10);
    }
    fclose(f);
    return v;
}

/* The index's level-0 files are ZSTD level 1 while the store runs (compactions soon
 * rewrite them at level 6); a graceful stop writes its flush at level 6 and compacts a
 * small index's level 0 into the bottom level, so the store keeps one level-6 index file
 * (with what the last stop left); a reopen goes back to level 1. */
static void test_embedded_index_levels(const char *tmp)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/ixlevels", tmp);
    pt_backend b;
    for (int round = 0; round < 2; round++) {
        if (open_named(&b, tmp, "ixlevels", "embedded(index levels)") != 0)
            return;
        static char rows[101][32], vals[100][16]; /* they outlive the batches */
        int fails = 0;
        for (int i0 = 0; i0 < 100; i0 += 50) {
            ct_batch bt = {0};
            for (int i = i0; i < i0 + 50; i++) {
                snprintf(rows[i], sizeof(rows[i]), "lv%d,%03d", round, i);
                snprintf(vals[i], sizeof(vals[i]), "v%d", i);
                ct_add(&bt, PT_TABLE_INDEX, rows[i], 1, vals[i]);
            }
            fails += ct_write(&b, &bt) != 0;
        }
        is(fails, 0, "embedded(index levels) %d: write", round);
        size_t cells = 0;
        pt_row_range all[] = {CT_RANGE("lv", "lw")};
        pt_scan s = {.table = PT_TABLE_INDEX, .ranges = all, .nranges = 1};
        is(pt_backend_scan(&b, &s, count_cell, &cells), 0, "embedded(index levels): scan");
        /* this round's 100, and the last round's 100 and its "last" */
        is(cells, (size_t)101 * round + 100, "embedded(index levels) %d: every cell", round);
        /* What RocksDB does when the index memtable fills: a flush of its own. */
        embedded *e = b.state;
        rocksdb_flushoptions_t *fo = rocksdb_flushoptions_create();
        rocksdb_flushoptions_set_wait(fo, 1);
        char *msg = NULL;
        rocksdb_flush_cf(e->r.db, fo, e->r.cf[CF_INDEX], &msg);
        rocksdb_flushoptions_destroy(fo);
        ok(msg == NULL, "embedded(index levels) %d: memtable flushed", round);
        free(msg);
        is(files_at(path, 1), 1,
           "embedded(index levels) %d: a flush while running writes level 1", round);
        ct_batch bt = {0};
        snprintf(rows[100], sizeof(rows[100]), "lv%d,last", round);
        ct_add(&bt, PT_TABLE_INDEX, rows[100], 1, "v");
        /* with a sample: the stop's flush of the points drains the index head */
        ct_add(&bt, PT_TABLE_POINTS, rows[100], 1, "12345678");
        is(ct_write(&b, &bt), 0, "embedded(index levels) %d: write after", round);
        pt_backend_close(&b);
        is(files_at(path, 6), 1,
           "embedded(index levels) %d: the stop leaves one index file, at level 6", round);
        is(files_at(path, 1), 0,
           "embedded(index levels) %d: ... the level-1 files compacted into it", round);
        is(files_at(path, 32767), round + 1,
           "embedded(index levels) %d: the points' table file has its dictionary", round);
    }
    /* The points' level above the last holds 64 MiB before it pushes chunks down
     * (rocks.c), the index's RocksDB's 256 MiB. */
    is(level_base(path, "points.v2"), 64LL << 20, "embedded: the points' level base is 64 MiB");
    is(level_base(path, "index"), 256LL << 20, "embedded: the index's level base is 256 MiB");
}

/* Table files of a flush not ingested (flush.N.sst) in dir. */
static int flush_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += strncmp(de->d_name, "flush.", 6) == 0;
    closedir(d);
    return n;
}

/* Runs this program again as a child (self, mode, path, budget, stage), its standard
 * output into *out; its pid, or -1. */
static pid_t spawn_child(const char *self, const char *mode, const char *path, size_t budget,
                         int stage, int *out)
{
    int fds[2];
    if (pipe(fds) != 0)
        return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fds[1], 1);
        close(fds[0]);
        close(fds[1]);
        char bud[32], stg[16];
        snprintf(bud, sizeof(bud), "%zu", budget);
        snprintf(stg, sizeof(stg), "%d", stage);
        execl(self, self, mode, path, bud, stg, (char *)NULL);
        _exit(127);
    }
    close(fds[1]);
    *out = fds[0];
    return pid;
}

static void test_crash(const char *self, const char *tmp, size_t budget, const char *label,
                       int garbage, int stage)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, label);
    int fds[1];
    pid_t pid = spawn_child(self, "--crash-child", path, budget, stage, &fds[0]);
    if (pid < 0) {
        ok(0, "%s: pipe", label);
        return;
    }
    /* Read acknowledgements until enough came (or the flush stalled), then kill without
     * warning. */
    uint32_t acked = 0;
    int stalled = 0;
    char buf[4096], line[32];
    size_t ln = 0;
    ssize_t got;
    while (!stalled && (stage >= 0 || acked < 3000) &&
           (got = read(fds[0], buf, sizeof(buf))) > 0) {
        for (ssize_t i = 0; i < got && !stalled; i++) {
            if (buf[i] == '\n') {
                line[ln] = '\0';
                if (strcmp(line, "F") == 0)
                    stalled = 1;
                else
                    acked = (uint32_t)strtoul(line, NULL, 10) + 1;
                ln = 0;
            } else if (ln + 1 < sizeof(line)) {
                line[ln++] = buf[i];
            }
        }
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    ok(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL &&
           (stage >= 0 ? stalled && acked > 0 : acked >= 3000),
       "%s: child killed with SIGKILL after %u acknowledged batches", label, acked);

    if (garbage) {
        /* A torn record at the end of the log, as a crash in the middle of write(). */
        char log[600] = "";
        current_log(path, log, sizeof(log));
        int fd = open(log, O_WRONLY | O_APPEND);
        static const char junk[] = "PTW1\x05\0\0\0\xff\xff\0\0torn";
        ok(fd >= 0 && write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk),
           "%s: append a torn record to the log", label);
        if (fd >= 0)
            close(fd);
    }

    /* Cut short after its first table file was written, a flush leaves that file
     * (not ingested); open deletes it, and the replayed log writes its cells again. */
    if (stage == EMB_HOOK_WRITTEN)
        ok(flush_files(path) > 0, "%s: the crash left the flush's table file", label);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen after the crash", label);
    if (!b.state) {
        diag("%s", err);
        return;
    }
    is(flush_files(path), 0, "%s: no flush table file left after open", label);
    crash_check c = {.acked = acked};
    pt_row_range all[] = {CT_RANGE("k/", "k/\xff")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "%s: scan", label);
    is(c.found, (size_t)acked * 16, "%s: every acknowledged cell is there, once (%zu)", label,
       c.found);
    is(c.bad, 0, "%s: with its value", label);
    /* The cell rewritten by every batch holds the last acknowledged write (or a later
     * one the parent had not read yet), not an older one from the frozen log. */
    c.rw = -1;
    pt_row_range rw[] = {CT_RANGE("w/rw", "w/rw\0")};
    pt_scan srw = {.table = PT_TABLE_POINTS, .ranges = rw, .nranges = 1};
    is(pt_backend_scan(&b, &srw, rw_cell, &c), 0, "%s: scan the rewritten cell", label);
    ok(c.rw >= (long)acked - 1, "%s: the newest write wins (%ld, acked %u)", label, c.rw, acked);
    /* Index cells: logged with their batch, replayed into the index head, readable. */
    c.rw = -1;
    pt_row_range ix[] = {CT_RANGE("ix/", "ix/\xff")};
    pt_scan six = {.table = PT_TABLE_INDEX, .ranges = ix, .nranges = 1};
    is(pt_backend_scan(&b, &six, crash_index_cell, &c), 0, "%s: scan the index", label);
    is(c.ifound, (size_t)acked, "%s: every acknowledged index cell is there (%zu)", label,
       c.ifound);
    is(c.ibad, 0, "%s: with its value", label);
    ok(c.rw >= (long)acked - 1, "%s: the newest write of an index cell wins (%ld, acked %u)",
       label, c.rw, acked);
    /* The store takes writes again after recovery, and keeps them. */
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_POINTS, "k/after", 1, "x");
    is(ct_write(&b, &bt), 0, "%s: write after recovery", label);
    pt_backend_close(&b);
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen again", label);
    if (!b.state)
        return;
    pt_row_range one[] = {CT_RANGE("k/after", "k/after\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, one, 1), "k/after:00000001=x;",
           "%s: the write after recovery persisted", label);
    pt_backend_close(&b);
}

/* A flush that keeps failing: the frozen generation stays (readable), writers are asked
 * to come back (PT_EBUSY, a 503) once the current one is full too, a synchronous flush
 * reports the error; once the fault is gone everything reaches RocksDB. */
static int fail_hook(void *ud, int stage)
{
    (void)stage;
    (*(int *)ud)++;
    return PT_EIO;
}

static void test_flush_failure(const char *tmp)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/flush-failure", tmp);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "flush failure: open");
    if (!b.state)
        return;
    pt_embedded_set_budget(&b, 4 << 10);
    int calls = 0;
    pt_emb_set_hook(b.state, fail_hook, &calls);
    static char vals[16][16];
    uint32_t acked = 0;
    int rv = 0;
    for (; acked < 100000; acked++) {
        ct_batch bt = {0};
        for (uint32_t j = 0; j < 16; j++) {
            snprintf(vals[j], sizeof(vals[j]), "%u.%u", acked, j);
            ct_add(&bt, PT_TABLE_POINTS, j % 2 ? "k/a" : "k/b", acked * 16 + j, vals[j]);
        }
        if ((rv = ct_write(&b, &bt)) != 0)
            break;
    }
    is(rv, PT_EBUSY, "flush failure: writes are refused, retryable, after %u batches", acked);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(st.flush_failures >= 1 && calls >= 1 && st.frozen_cell_bytes > 0,
       "flush failure: counted (%llu), the frozen generation kept (%zu bytes)",
       (unsigned long long)st.flush_failures, st.frozen_cell_bytes);
    pt_row_range all[] = {CT_RANGE("k/", "k/\xff")};
    pt_scan s = {.table = PT_TABLE_POINTS, .ranges = all, .nranges = 1};
    crash_check c = {.acked = acked};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "flush failure: scan");
    ok(c.found == (size_t)acked * 16 && c.bad == 0,
       "flush failure: both generations read (%zu cells)", c.found);
    is(pt_embedded_flush(&b), PT_EIO, "flush failure: a synchronous flush reports it");

    pt_emb_set_hook(b.state, NULL, NULL);
    is(pt_embedded_flush(&b), 0, "flush failure: fault gone, flushed");
    pt_embedded_get_stats(&b, &st);
    ok(st.frozen_cell_bytes == 0 && st.head_cells == 0, "flush failure: the head is empty");
    ct_batch bt = {0};
    snprintf(vals[0], sizeof(vals[0]), "%u.0", acked);
    ct_add(&bt, PT_TABLE_POINTS, "k/b", acked * 16, vals[0]);
    is(ct_write(&b, &bt), 0, "flush failure: writes are accepted again");
    pt_backend_close(&b);
    is(open_embedded(&b, path, err, sizeof(err)), 0, "flush failure: reopen");
    if (!b.state)
        return;
    c = (crash_check){.acked = acked + 1};
    is(pt_backend_scan(&b, &s, crash_cell, &c), 0, "flush failure: scan after reopen");
    ok(c.found == (size_t)acked * 16 + 1 && c.bad == 0,
       "flush failure: every acknowledged cell after reopen (%zu)", c.found);
    pt_backend_close(&b);
}

/* The erase child: 100 cells of row e/r written (still in the head and its log, or with a
 * budget partly flushed), offsets [20, 80) erased, then offset 50 and 200..209 written:
 * "E" after each step, and it waits to be killed. */
static int erase_child(const char *path, size_t budget)
{
    pt_backend b;
    char err[256];
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    if (pt_backend_open(&b, &pt_backend_embedded, &cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "erase child: %s\n", err);
        return 1;
    }
    if (budget)
        pt_embedded_set_budget(&b, budget);
    static char vals[210][8];
    int rv = 0;
    for (uint32_t i = 0; i < 100 && rv == 0; i += 10) {
        ct_batch bt = {0};
        for (uint32_t j = i; j < i + 10; j++) {
            snprintf(vals[j], sizeof(vals[j]), "v%u", j);
            ct_add(&bt, PT_TABLE_POINTS, "e/r", j, vals[j]);
        }
        rv = ct_write(&b, &bt);
    }
    uint8_t lo[4], hi[4];
    pt_put_be32(lo, 20);
    pt_put_be32(hi, 80);
    pt_erase x = {PT_TABLE_POINTS, pt_slice_str("e/r"), {lo, 4}, {hi, 4}};
    if (rv == 0 && (rv = pt_backend_erase(&b, &x, 1)) == 0) {
        printf("E\n");
        fflush(stdout);
    }
    ct_batch later = {0};
    ct_add(&later, PT_TABLE_POINTS, "e/r", 50, "later");
    for (uint32_t j = 200; j < 210; j++) {
        snprintf(vals[j], sizeof(vals[j]), "v%u", j);
        ct_add(&later, PT_TABLE_POINTS, "e/r", j, vals[j]);
    }
    if (rv == 0 && ct_write(&b, &later) == 0) {
        printf("E\n");
        fflush(stdout);
    }
    for (;;)
        pause();
}

/* kill -9 after an erase: the erased cells do not come back from the replayed log, the
 * cells written after it do. */
static void test_erase_crash(const char *self, const char *tmp, size_t budget, const char *label)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, label);
    int fds[1];
    pid_t pid = spawn_child(self, "--erase-child", path, budget, -1, &fds[0]);
    if (pid < 0) {
        ok(0, "%s: pipe", label);
        return;
    }
    char buf[8];
    int steps = 0;
    ssize_t got;
    while (steps < 2 && (got = read(fds[0], buf, sizeof(buf))) > 0)
        for (ssize_t i = 0; i < got; i++)
            steps += buf[i] == '\n';
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(fds[0]);
    ok(steps == 2 && WIFSIGNALED(status), "%s: erased, written again, killed", label);
    pt_backend b;
    is(open_embedded(&b, path, err, sizeof(err)), 0, "%s: reopen after the crash", label);
    if (!b.state) {
        diag("%s", err);
        return;
    }
    char want[4096] = "";
    size_t o = 0;
    for (uint32_t j = 0; j < 210; j++) {
        if ((j >= 20 && j < 80 && j != 50) || (j >= 100 && j < 200))
            continue;
        if (j == 50)
            o += (size_t)snprintf(want + o, sizeof(want) - o, "e/r:%08x=later;", (unsigned)j);
        else
            o += (size_t)snprintf(want + o, sizeof(want) - o, "e/r:%08x=v%u;", (unsigned)j, j);
    }
    pt_row_range r[] = {CT_RANGE("e/r", "e/r\0")};
    is_str(ct_show(&b, PT_TABLE_POINTS, r, 1), want,
           "%s: the erased cells stay erased, the later writes are there", label);
    pt_backend_close(&b);
}

int main(int argc, char **argv)
{
    if (argc == 5 && strcmp(argv[1], "--crash-child") == 0)
        return crash_child(argv[2], (size_t)strtoull(argv[3], NULL, 10), atoi(argv[4]));
    if (argc == 5 && strcmp(argv[1], "--erase-child") == 0)
        return erase_child(argv[2], (size_t)strtoull(argv[3], NULL, 10));
    char t[] = "/tmp/pt-emb-flush-XXXXXX";
    if (emb_tmpdir(t) != 0)
        return done_testing();
    /* The crash children first: a fork after RocksDB started its threads is not safe,
     * and they exec this program afresh anyway. */
    test_crash(argv[0], t, 0, "crash(log only)", 1, -1);
    test_crash(argv[0], t, 16 << 10, "crash(flushing)", 0, -1);
    test_crash(argv[0], t, 16 << 10, "crash(mid-flush, chunks written)", 0, EMB_HOOK_WRITTEN);
    test_crash(argv[0], t, 16 << 10, "crash(mid-flush, chunks durable)", 0, EMB_HOOK_DURABLE);
    test_erase_crash(argv[0], t, 0, "erase, then kill -9");
    test_erase_crash(argv[0], t, 512, "erase under flushes, then kill -9");
    test_embedded_model(t);
    test_decimal_streams(t);
    test_flush_failure(t);
    test_embedded_index_levels(t);
    rm_rf(t);
    return done_testing();
}
