/* The embedded store's read-ahead (readahead.c): a scan of many rows on a cold store is
 * read ahead of once its thread waited for the disk, a warm one never, and either way
 * every answer is the same; the index read into the page cache at the open
 * (storage.embedded.index_preload) leaves a cold start's index scans nothing to wait for. "Cold" is made by dropping the table files from the page
 * cache (posix_fadvise) after the store opened with an empty block cache. */
#include <sys/mman.h>
#include <sys/resource.h>

#include "embedded_helpers.h"

enum { ROWS = 400, CELLS = 32, STEP = 60000, WIN_LO = 10, WIN_HI = 20 };

static char rows[ROWS][16], irows[ROWS][16];
static char vals[ROWS][CELLS][9];

static long inblock(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_THREAD, &ru) == 0 ? ru.ru_inblock : 0;
}

/* Drops every table file of dir from the page cache; with probe, says whether a read
 * then goes to the disk (not on a file system without a page cache of its own). */
static int evict(const char *dir, int probe)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int cold = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t len = strlen(de->d_name);
        if (len < 4 || strcmp(de->d_name + len - 4, ".sst") != 0)
            continue;
        char path[600];
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        fsync(fd);
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        if (probe && !cold) {
            char b[4096];
            long before = inblock();
            cold = pread(fd, b, sizeof(b), 0) > 0 && inblock() > before;
            posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        }
        close(fd);
    }
    closedir(d);
    return cold;
}

static int open_preload(pt_backend *b, const char *path, long threads, size_t preload)
{
    return open_conf(b, (pt_embedded_conf){.path = (char *)path, .read_threads = threads,
                                           .index_preload = preload});
}

static int open_with(pt_backend *b, const char *path, long threads)
{
    return open_preload(b, path, threads, 0);
}

static void fill(pt_backend *b)
{
    int fails = 0;
    ct_batch bt = {0};
    for (int r = 0; r < ROWS; r++) {
        snprintf(rows[r], sizeof(rows[r]), "ra/%04d", r);
        snprintf(irows[r], sizeof(irows[r]), "ix/%04d", r);
        for (int c = 0; c < CELLS; c++) {
            snprintf(vals[r][c], sizeof(vals[r][c]), "%04d%04d", r, c);
            if (bt.n == CT_BATCH_MAX) {
                fails += ct_write(b, &bt) != 0;
                bt.n = 0;
            }
            ct_add(&bt, PT_TABLE_POINTS, rows[r], (uint32_t)c * STEP, vals[r][c]);
        }
        if (bt.n == CT_BATCH_MAX) {
            fails += ct_write(b, &bt) != 0;
            bt.n = 0;
        }
        ct_add(&bt, PT_TABLE_INDEX, irows[r], 7, vals[r][0]);
    }
    if (bt.n)
        fails += ct_write(b, &bt) != 0;
    is(fails, 0, "readahead: %d rows written", ROWS);
}

static void stats(pt_backend *b, uint64_t *scans, uint64_t *rows_read)
{
    pt_embedded_stats st;
    pt_embedded_get_stats(b, &st);
    *scans = st.readahead_scans;
    *rows_read = st.readahead_rows;
}

/* Checks each cell against what fill wrote. With wait, the third row's first cell waits
 * (up to 5 s) for the threads to have read a row ahead of this scan, so that it cannot
 * end before they were scheduled. */
typedef struct tally {
    size_t cells, bad;
    pt_backend *wait;
    uint64_t base; /* rows read ahead before the scan */
} tally;

static int check_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    tally *t = ud;
    if (t->wait && t->cells == 2 * (WIN_HI - WIN_LO)) {
        uint64_t scans, nrows = t->base;
        for (int i = 0; i < 5000 && nrows == t->base; i++) {
            stats(t->wait, &scans, &nrows);
            if (nrows == t->base)
                usleep(1000);
        }
    }
    int r, c;
    char rs[16];
    snprintf(rs, sizeof(rs), "%.*s", (int)(row.n < 15 ? row.n : 15), (const char *)row.p);
    if (qual.n != 4 || sscanf(rs + 3, "%d", &r) != 1 || r < 0 || r >= ROWS) {
        t->bad++;
        return 0;
    }
    uint32_t q = pt_get_be32(qual.p);
    c = rs[0] == 'i' ? 0 : (int)(q / STEP);
    if (c >= CELLS || (rs[0] == 'i' ? q != 7 : q % STEP != 0) || value.n != 8 ||
        memcmp(value.p, vals[r][c], 8) != 0)
        t->bad++;
    t->cells++;
    return 0;
}

/* How scan_all scans: with wait (check_cell); each row as a range of rows [row, next)
 * instead of the one row; with pt_scan.cold pointing at cold. */
typedef struct how {
    int wait, spans;
    int *cold;
} how;

/* Every row's cells in [WIN_LO, WIN_HI) (points), or every index row's cell. */
static tally scan_how(pt_backend *b, pt_table t, how h)
{
    static __thread pt_row_range ranges[ROWS];
    static __thread char ends[ROWS][16];
    uint8_t lo[4], hi[4];
    pt_put_be32(lo, WIN_LO * STEP);
    pt_put_be32(hi, WIN_HI * STEP);
    for (int r = 0; r < ROWS; r++) {
        const char *k = t == PT_TABLE_POINTS ? rows[r] : irows[r];
        size_t n = strlen(k);
        memcpy(ends[r], k, n);
        ends[r][n] = 0;
        if (h.spans)
            ends[r][n - 1]++; /* "ix/0007" to "ix/0008": the same row, as a range */
        ranges[r] = (pt_row_range){{(const uint8_t *)k, n},
                                   {(const uint8_t *)ends[r], h.spans ? n : n + 1}};
    }
    pt_scan s = {.table = t, .ranges = ranges, .nranges = ROWS, .cold = h.cold};
    if (t == PT_TABLE_POINTS) {
        s.qual_start = (pt_slice){lo, 4};
        s.qual_end = (pt_slice){hi, 4};
    }
    tally y = {.wait = h.wait ? b : NULL};
    uint64_t scans;
    stats(b, &scans, &y.base);
    if (pt_backend_scan(b, &s, check_cell, &y) != 0)
        y.bad++;
    return y;
}

static tally scan_all(pt_backend *b, pt_table t, int wait)
{
    return scan_how(b, t, (how){.wait = wait});
}

typedef struct reader {
    pt_backend *b;
    tally y;
} reader;

static void *reader_main(void *arg)
{
    reader *rd = arg;
    rd->y = scan_all(rd->b, PT_TABLE_POINTS, 0);
    return NULL;
}

typedef struct resident {
    size_t in, all; /* pages in the page cache, pages in all */
} resident;

/* Counts one file's pages in the page cache (mincore) into *(resident *)ud. */
static void count_resident(const char *path, uint64_t size, void *ud)
{
    resident *r = ud;
    size_t len = (size_t)size, page = (size_t)sysconf(_SC_PAGESIZE);
    size_t pages = (len + page - 1) / page;
    r->all += pages;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    void *m = fd >= 0 && len ? mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
    unsigned char *vec = m != MAP_FAILED ? calloc(pages, 1) : NULL;
    if (vec && mincore(m, len, vec) == 0)
        for (size_t p = 0; p < pages; p++)
            r->in += vec[p] & 1;
    free(vec);
    if (m != MAP_FAILED)
        munmap(m, len);
    if (fd >= 0)
        close(fd);
}

/* storage.embedded.index_preload: an open within the budget reads the index's table
 * files into the page cache (RocksDB itself reads only each file's tail at the open), so
 * a cold start's first reads of the index wait for no disk; over the budget nothing is
 * read. An index of 4 MiB of incompressible cells, far past the tails. */
static void test_preload(const char *tmp, int cold)
{
    enum { CELLS_IX = 16384, LEN = 256 };
    char path[512];
    snprintf(path, sizeof(path), "%s/preload", tmp);
    pt_backend b;
    if (open_with(&b, path, 0) != 0) {
        ok(0, "preload: open");
        return;
    }
    static char keys[CELLS_IX][16], pvals[CELLS_IX][LEN + 1];
    uint64_t x = 88172645463325252u;
    int fails = 0;
    ct_batch bt = {0};
    for (int i = 0; i < CELLS_IX; i++) {
        snprintf(keys[i], sizeof(keys[i]), "pl/%06d", i);
        for (int k = 0; k < LEN; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            pvals[i][k] = (char)('!' + x % 90);
        }
        if (bt.n == CT_BATCH_MAX) {
            fails += ct_write(&b, &bt) != 0;
            bt.n = 0;
        }
        ct_add(&bt, PT_TABLE_INDEX, keys[i], 1, pvals[i]);
    }
    fails += ct_write(&b, &bt) != 0;
    is(fails, 0, "preload: %d index cells written", CELLS_IX);
    pt_backend_close(&b);

    for (int round = 0; round < 2; round++) {
        evict(path, 0);
        size_t budget = round == 0 ? 64u << 20 : 1u << 20;
        if (open_preload(&b, path, 4, budget) != 0) {
            ok(0, "preload: open");
            return;
        }
        pt_embedded_stats st;
        pt_embedded_get_stats(&b, &st);
        resident rs = {0};
        uint64_t files = pt_emb_rocks_index_files(&((embedded *)b.state)->r, count_resident, &rs);
        size_t in = rs.in, all = rs.all;
        if (round == 0) {
            ok(files > (2u << 20) && st.index_preloaded == files,
               "preload: the open read the index's table files (%llu of %llu bytes)",
               (unsigned long long)st.index_preloaded, (unsigned long long)files);
            ok(all > 0 && in == all, "preload: ... all %zu of their pages are in the page cache",
               all);
        } else {
            is(st.index_preloaded, (uint64_t)0, "preload: over the budget nothing is read");
            if (!cold)
                skip(1, "the file system here reads the table files without the disk");
            else
                ok(in < all / 2, "preload: ... and the files stay out of the page cache "
                                 "(%zu of %zu pages in)", in, all);
        }
        pt_backend_close(&b);
    }
}

int main(void)
{
    char t[] = "/tmp/pt-emb-ra-XXXXXX";
    if (emb_tmpdir(t) != 0)
        return done_testing();
    char path[512];
    snprintf(path, sizeof(path), "%s/store", t);
    pt_backend b;
    if (open_with(&b, path, 4) != 0) {
        ok(0, "readahead: open");
        return done_testing();
    }
    fill(&b);
    pt_backend_close(&b); /* everything into table files */

    const size_t want = (size_t)ROWS * (WIN_HI - WIN_LO);
    uint64_t scans, nrows;
    if (open_with(&b, path, 4) != 0) {
        ok(0, "readahead: reopen");
        return done_testing();
    }
    int cold = evict(path, 1);
    tally y = scan_all(&b, PT_TABLE_POINTS, cold);
    is(y.cells, want, "readahead: a cold scan of %d rows answers every cell in the window", ROWS);
    is(y.bad, (size_t)0, "readahead: ... each as written");
    stats(&b, &scans, &nrows);
    if (!cold) {
        skip(2, "the file system here reads the table files without the disk "
                "(posix_fadvise does not drop them): no cold scan to read ahead of");
    } else {
        is(scans, (uint64_t)1, "readahead: the cold scan was read ahead of");
        ok(nrows > 0 && nrows < ROWS, "readahead: ... the threads read %llu of its rows",
           (unsigned long long)nrows);
    }
    y = scan_all(&b, PT_TABLE_POINTS, 0);
    is(y.cells, want, "readahead: the same scan warm answers every cell");
    is(y.bad, (size_t)0, "readahead: ... each as written");
    uint64_t scans2, nrows2;
    stats(&b, &scans2, &nrows2);
    is(scans2, scans, "readahead: a warm scan is not read ahead of");

    evict(path, 0);
    y = scan_all(&b, PT_TABLE_INDEX, 0);
    is(y.cells, (size_t)ROWS, "readahead: a cold scan of %d index rows answers every cell", ROWS);
    is(y.bad, (size_t)0, "readahead: ... each as written");
    stats(&b, &scans2, &nrows2);
    if (!cold)
        skip(1, "no cold scan here (above)");
    else
        is(scans2, scans + 1, "readahead: the cold index scan was read ahead of");
    pt_backend_close(&b);

    /* Readers at once on a cold store share the threads; each answer whole. */
    if (open_with(&b, path, 2) != 0) {
        ok(0, "readahead: reopen");
        return done_testing();
    }
    evict(path, 0);
    reader rd[3];
    pthread_t th[3];
    int started = 0;
    for (int i = 0; i < 3; i++) {
        rd[i] = (reader){.b = &b};
        started += pthread_create(&th[i], NULL, reader_main, &rd[i]) == 0;
    }
    is(started, 3, "readahead: three readers started");
    size_t whole = 0;
    for (int i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
        whole += rd[i].y.cells == want && rd[i].y.bad == 0;
    }
    is(whole, (size_t)3, "readahead: three cold scans at once each answer every cell");

    /* Ranges of rows (the index's series rows over days) are read ahead of like rows;
     * a read's scan that waited marks the read cold, and its next scans are read ahead
     * of from the start, warm or not. */
    evict(path, 0);
    int rcold = 0;
    stats(&b, &scans, &nrows);
    y = scan_how(&b, PT_TABLE_INDEX, (how){.wait = 1, .spans = 1, .cold = &rcold});
    is(y.cells, (size_t)ROWS, "readahead: a cold scan of %d index row ranges answers every cell",
       ROWS);
    is(y.bad, (size_t)0, "readahead: ... each as written");
    stats(&b, &scans2, &nrows2);
    if (!cold) {
        skip(2, "no cold scan here (above)");
    } else {
        is(scans2, scans + 1, "readahead: ... and was read ahead of");
        is(rcold, 1, "readahead: ... and marks its read cold");
    }
    rcold = 0;
    y = scan_how(&b, PT_TABLE_INDEX, (how){.spans = 1, .cold = &rcold});
    stats(&b, &scans, &nrows);
    ok(y.cells == ROWS && y.bad == 0 && scans == scans2 && rcold == 0,
       "readahead: warm, the same scan is not read ahead of and leaves its read warm");
    rcold = 1;
    y = scan_how(&b, PT_TABLE_POINTS, (how){.wait = 1, .cold = &rcold});
    stats(&b, &scans2, &nrows2);
    ok(y.cells == want && y.bad == 0 && scans2 == scans + 1 && nrows2 > nrows,
       "readahead: a scan of a cold read is read ahead of from the start (%llu rows)",
       (unsigned long long)(nrows2 - nrows));
    pt_backend_close(&b);

    /* No threads: the same answer, nothing read ahead. */
    if (open_with(&b, path, 0) != 0) {
        ok(0, "readahead: reopen");
        return done_testing();
    }
    evict(path, 0);
    y = scan_all(&b, PT_TABLE_POINTS, 0);
    is(y.cells, want, "readahead: without threads a cold scan answers every cell");
    is(y.bad, (size_t)0, "readahead: ... each as written");
    stats(&b, &scans, &nrows);
    is(scans, (uint64_t)0, "readahead: ... and nothing is read ahead");
    pt_backend_close(&b);
    test_preload(t, cold);
    rm_rf(t);
    return done_testing();
}
