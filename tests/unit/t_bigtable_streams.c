/*
 * The bigtable backend's streams against Google's Bigtable emulator (bt_emulator.h):
 *   - scans fanned out over concurrent ReadRows streams (many ranges in groups, one wide
 *     range cut at SampleRowKeys' keys) against the same scan on one stream, with stops,
 *     errors and row limits in later groups;
 *   - broken ReadRows streams resumed after the last delivered row, through a TCP proxy
 *     that cuts the connection after a given number of bytes;
 *   - outages: a hung emulator (SIGSTOP) gives PT_ETIMEOUT, a killed one PT_EUNAVAIL,
 *     both after no more retries than the retry budget admits, and a new emulator brings
 *     writes and scans back;
 *   - flow control: MutateRows with the bigtable-features header, a limit handed to the
 *     backend's limiter refusing a write with PT_EBUSY, and its figures in the stats.
 * Without the emulator binary the test is skipped.
 */
#include "bt_emulator.h"

/* ---- a TCP proxy that can cut connections after N bytes from the server ---- */

typedef struct proxy {
    int lfd, port, upstream;
    pthread_t acceptor;
    atomic_int active; /* pump threads running (detached; each closes its sockets) */
    atomic_int stop;
    atomic_long budget; /* server bytes still allowed before the next cut (when armed) */
    long every;         /* the budget again after each cut */
    atomic_int cuts;    /* cuts still to make; -1 = cut forever */
    atomic_int made;    /* cuts made */
} proxy;

typedef struct pump_arg {
    proxy *px;
    int client, server;
} pump_arg;

static void *pump_main(void *arg)
{
    pump_arg a = *(pump_arg *)arg;
    free(arg);
    char buf[16384];
    while (!atomic_load(&a.px->stop)) {
        struct pollfd p[2] = {{a.client, POLLIN, 0}, {a.server, POLLIN, 0}};
        if (poll(p, 2, 100) <= 0)
            continue;
        if (p[0].revents) {
            ssize_t n = read(a.client, buf, sizeof(buf));
            if (n <= 0 || send(a.server, buf, (size_t)n, MSG_NOSIGNAL) != n)
                break;
        }
        if (p[1].revents) {
            ssize_t n = read(a.server, buf, sizeof(buf));
            if (n <= 0)
                break;
            int cuts = atomic_load(&a.px->cuts);
            if (cuts != 0 && atomic_fetch_sub(&a.px->budget, n) - n < 0) {
                if (cuts > 0)
                    atomic_fetch_sub(&a.px->cuts, 1);
                atomic_fetch_add(&a.px->made, 1);
                atomic_store(&a.px->budget, a.px->every);
                break; /* drop this piece and the connection: the stream breaks */
            }
            if (send(a.client, buf, (size_t)n, MSG_NOSIGNAL) != n)
                break;
        }
    }
    close(a.client);
    close(a.server);
    atomic_fetch_sub(&a.px->active, 1);
    return NULL;
}

static void *accept_main(void *arg)
{
    proxy *px = arg;
    while (!atomic_load(&px->stop)) {
        struct pollfd p = {px->lfd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0)
            continue;
        int c = accept(px->lfd, NULL, NULL);
        if (c < 0)
            continue;
        int s = connect_port(px->upstream);
        pump_arg *pa = malloc(sizeof(*pa));
        pthread_t th;
        atomic_fetch_add(&px->active, 1);
        if (s >= 0 && pa) {
            *pa = (pump_arg){px, c, s};
            if (pthread_create(&th, NULL, pump_main, pa) == 0) {
                pthread_detach(th);
                continue;
            }
        }
        atomic_fetch_sub(&px->active, 1);
        close(c);
        if (s >= 0)
            close(s);
        free(pa);
    }
    return NULL;
}

static int proxy_start(proxy *px, int upstream)
{
    memset(px, 0, sizeof(*px));
    px->upstream = upstream;
    px->lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (px->lfd < 0 || bind(px->lfd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(px->lfd, 16) != 0 || getsockname(px->lfd, (struct sockaddr *)&sa, &len) != 0)
        return -1;
    px->port = ntohs(sa.sin_port);
    return pthread_create(&px->acceptor, NULL, accept_main, px) == 0 ? 0 : -1;
}

/* From now on, cut `cuts` connections (-1 = all) once `after` server bytes went through. */
static void proxy_arm(proxy *px, long after, int cuts)
{
    px->every = after;
    atomic_store(&px->budget, after);
    atomic_store(&px->made, 0);
    atomic_store(&px->cuts, cuts);
}

static void proxy_stop(proxy *px)
{
    atomic_store(&px->stop, 1);
    pthread_join(px->acceptor, NULL);
    while (atomic_load(&px->active) > 0)
        sleep_ms(10);
    close(px->lfd);
}

/* The most retries one retry budget admits. Each wait lasts at least half the current
 * backoff delay, which starts at 20 ms and doubles up to 1000 ms (bigtable_rpc.c), and
 * no wait may end past the budget; a slow machine only makes fewer. A count, not a
 * duration: it cannot fail because the machine is busy. */
static unsigned long max_retries(int budget_ms)
{
    unsigned long n = 0;
    int delay = 20, waited = 0;
    while (waited + delay / 2 <= budget_ms) {
        waited += delay / 2;
        n++;
        delay = delay * 2 > 1000 ? 1000 : delay * 2;
    }
    return n;
}

/* ---- fan-out: one scan over several ReadRows streams ---- */

#define FAN_RANGES 3000
#define FAN_QUALS 4

/* Rows fan/00000.. fan/02999, each the single-row range [key, key\0); every 7th row is
 * never written, so some ranges find nothing. */
static char fan_keys[FAN_RANGES][16];
static pt_row_range fan_ranges[FAN_RANGES];

static int fan_written(int i)
{
    return i % 7 != 3;
}

static int fan_write(pt_backend *b)
{
    static pt_mutation m[FAN_RANGES * FAN_QUALS];
    static uint8_t q[FAN_QUALS][4];
    static char vals[FAN_RANGES][FAN_QUALS][16];
    size_t n = 0;
    for (int j = 0; j < FAN_QUALS; j++)
        pt_put_be32(q[j], (uint32_t)j);
    for (int i = 0; i < FAN_RANGES; i++) {
        snprintf(fan_keys[i], sizeof(fan_keys[i]), "fan/%05d", i);
        pt_slice key = pt_slice_str(fan_keys[i]);
        fan_ranges[i] = (pt_row_range){key, {key.p, key.n + 1}};
        for (int j = 0; j < FAN_QUALS && fan_written(i); j++) {
            snprintf(vals[i][j], sizeof(vals[i][j]), "%d.%d", i, j);
            m[n++] = (pt_mutation){.table = PT_TABLE_POINTS,
                                   .row = key,
                                   .qual = {q[j], 4},
                                   .value = pt_slice_str(vals[i][j]),
                                   .version_us = 1000};
        }
    }
    return pt_backend_write(b, m, n);
}

/* Scans fan_ranges[from..from+n) with the qualifier range [1, 3) into sink (initialised
 * here); *calls gets the ReadRows calls it started, *scans the scans it counted. */
static int fan_scan(pt_backend *b, size_t from, size_t n, size_t row_limit, ct_sink *sink,
                    unsigned long *calls)
{
    static const uint8_t qs[4] = {0, 0, 0, 1}, qe[4] = {0, 0, 0, 3};
    pt_bt_stats st0 = stats(b);
    int rv = ct_scan(b, PT_TABLE_POINTS, fan_ranges + from, n, (pt_slice){qs, 4}, (pt_slice){qe, 4},
                     row_limit, sink);
    pt_bt_stats st1 = stats(b);
    *calls = st1.read_calls - st0.read_calls;
    if (st1.scans - st0.scans != 1)
        *calls = 0; /* not one scan: fails every count check */
    return rv;
}

/* Cells a one-stream scan delivers before the first cell of range `first`. */
static size_t fan_cells_before(size_t first)
{
    size_t n = 0;
    for (size_t i = 0; i < first; i++)
        n += fan_written((int)i) ? 2 : 0;
    return n;
}

/* Where the rendered cells after the first n begin in text ("" when it has fewer). */
static const char *fan_skip(const char *text, size_t n)
{
    const char *p = text ? text : "";
    for (size_t i = 0; i < n && *p; i++)
        p = strchr(p, ';') + 1;
    return p;
}

/* A stop after `calls` cells rendered exactly the first `calls` cells of full. */
static int fan_is_prefix(const ct_sink *part, const char *full, size_t calls)
{
    size_t n = (size_t)(fan_skip(full, calls) - full);
    return full && part->text && part->calls == calls && n == part->len &&
           memcmp(part->text, full, n) == 0;
}

static void test_fanout(pt_backend *b)
{
    is(fan_write(b), 0, "fan-out: write %d rows of %d cells (every 7th row left out)", FAN_RANGES,
       FAN_QUALS);
    size_t want_cells = fan_cells_before(FAN_RANGES);

    /* The reference: the same scan on one stream. */
    pt_bt_set_read_streams(b->state, 1);
    ct_sink one;
    ct_sink_init(&one);
    unsigned long calls;
    is(fan_scan(b, 0, FAN_RANGES, 0, &one, &calls), 0, "fan-out: %d single-row ranges, 1 stream",
       FAN_RANGES);
    is(one.calls, want_cells, "...every cell in the qualifier range");
    ok(one.ordered, "...in order");
    is(calls, 1, "...in one ReadRows call");

    /* The default: 4 streams. */
    pt_bt_set_read_streams(b->state, 4);
    ct_sink four;
    ct_sink_init(&four);
    is(fan_scan(b, 0, FAN_RANGES, 0, &four, &calls), 0, "fan-out: the same scan on 4 streams");
    is(calls, 4, "...4 ReadRows calls");
    ok(four.ordered, "...in order");
    ok(one.text && four.text && strcmp(one.text, four.text) == 0,
       "...the same cells in the same order as one stream (%zu cells)", four.calls);

    /* Groups of unequal size, more streams than the default. */
    pt_bt_set_read_streams(b->state, 7);
    ct_sink seven;
    ct_sink_init(&seven);
    is(fan_scan(b, 1, FAN_RANGES - 1, 0, &seven, &calls), 0, "fan-out: %d ranges on 7 streams",
       FAN_RANGES - 1);
    is(calls, 7, "...7 ReadRows calls");
    ok(seven.text && strcmp(fan_skip(one.text, 2), seven.text) == 0,
       "...the same cells as one stream (without row 0)");
    ct_sink_free(&seven);

    /* Too few ranges to be worth several streams. */
    ct_sink few;
    ct_sink_init(&few);
    is(fan_scan(b, 100, 40, 0, &few, &calls), 0, "fan-out: 40 ranges");
    is(calls, 1, "...stay on one stream");
    is(few.calls, fan_cells_before(140) - fan_cells_before(100), "...and return their cells");
    ct_sink_free(&few);

    /* Early stops: in group 0, and in group 2 (ranges 1500..2249 of 4 groups). */
    pt_bt_set_read_streams(b->state, 4);
    size_t stops[] = {7, fan_cells_before(1500) + 5};
    const char *where[] = {"group 0", "group 2"};
    for (size_t i = 0; i < CT_N(stops); i++) {
        ct_sink part;
        ct_sink_init(&part);
        part.stop_at = stops[i];
        double t0 = now_ms();
        is(fan_scan(b, 0, FAN_RANGES, 0, &part, &calls), 0, "fan-out: a stop in %s ends the scan",
           where[i]);
        ok(fan_is_prefix(&part, one.text, stops[i]),
           "...after exactly %zu cells, the first ones of the whole answer (%zu)", stops[i],
           part.calls);
        is(calls, 4, "...the 4 streams were started");
        diag("stop in %s: %.0f ms", where[i], now_ms() - t0);
        ct_sink_free(&part);
    }
    ct_sink fail;
    ct_sink_init(&fail);
    fail.abort_at = fan_cells_before(2250) + 1; /* the first cell of group 3 */
    fail.abort_code = PT_ELIMIT;
    is(fan_scan(b, 0, FAN_RANGES, 0, &fail, &calls), PT_ELIMIT,
       "fan-out: the callback's error in group 3 is returned");
    is(fail.calls, fan_cells_before(2250) + 1, "...with no cell after it");
    ct_sink_free(&fail);

    /* A row limit that ends in group 2. */
    ct_sink lim1, lim4;
    ct_sink_init(&lim1);
    ct_sink_init(&lim4);
    pt_bt_set_read_streams(b->state, 1);
    is(fan_scan(b, 0, FAN_RANGES, 1600, &lim1, &calls), 0, "fan-out: row limit 1600, 1 stream");
    pt_bt_set_read_streams(b->state, 4);
    is(fan_scan(b, 0, FAN_RANGES, 1600, &lim4, &calls), 0, "fan-out: row limit 1600, 4 streams");
    is(lim4.calls, 2 * 1600, "...exactly 1600 rows");
    ok(lim1.text && lim4.text && strcmp(lim1.text, lim4.text) == 0, "...the same as one stream");
    ct_sink_free(&lim1);
    ct_sink_free(&lim4);

    /* The same backend keeps working after all those cancelled streams. */
    ct_sink again;
    ct_sink_init(&again);
    is(fan_scan(b, 0, FAN_RANGES, 0, &again, &calls), 0, "fan-out: a full scan after the stops");
    ok(again.text && one.text && strcmp(again.text, one.text) == 0, "...is complete");
    ct_sink_free(&again);
    ct_sink_free(&one);
    ct_sink_free(&four);
}

/* ---- one wide range cut at sampled keys ---- */

#define SPL_ROWS 2000
#define SPL_VALUE 1024

static void test_split_wide(pt_backend *b)
{
    static pt_mutation m[SPL_ROWS];
    static char keys[SPL_ROWS][16];
    static uint8_t vals[SPL_ROWS][SPL_VALUE];
    static const uint8_t q[4] = {0, 0, 0, 9};
    for (int i = 0; i < SPL_ROWS; i++) {
        snprintf(keys[i], sizeof(keys[i]), "spl/%05d", i);
        memset(vals[i], 'a' + i % 26, SPL_VALUE);
        m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                             .row = pt_slice_str(keys[i]),
                             .qual = {q, 4},
                             .value = {vals[i], SPL_VALUE},
                             .version_us = 1000};
    }
    is(pt_backend_write(b, m, SPL_ROWS), 0, "split: write %d rows of 1 KiB", SPL_ROWS);
    pt_row_range r[] = {CT_RANGE("spl/", "spl0")};

    pt_bt_set_read_streams(b->state, 1);
    ct_sink one;
    ct_sink_init(&one);
    one.render_values = 0;
    pt_bt_stats st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &one), 0, "split: one stream");
    pt_bt_stats st1 = stats(b);
    is(one.calls, SPL_ROWS, "...every row");
    ok(st1.read_calls - st0.read_calls == 1 && st1.sample_calls == st0.sample_calls,
       "...one call, no SampleRowKeys");

    /* Samples kept from earlier scans predate these rows: ask again. The emulator samples
     * 1 % of the rows, so about 20 fall inside the range: enough for 3 cuts. */
    pt_bt_set_read_streams(b->state, 4);
    pt_bt_set_sampling(b->state, 64 << 10, 1);
    sleep_ms(5);
    pt_row_range row[] = {CT_RANGE("spl/00005", "spl/00005\0")};
    ct_sink single;
    ct_sink_init(&single);
    single.render_values = 0;
    st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, row, 1, CT_NONE, CT_NONE, 0, &single), 0, "split: a single row");
    st1 = stats(b);
    is_str(single.text, "spl/00005:00000009=<1024 bytes>;", "...its cell");
    ct_sink_free(&single);
    ok(st1.sample_calls == st0.sample_calls && st1.read_calls - st0.read_calls == 1,
       "...is read whole without asking SampleRowKeys");
    ct_sink four;
    ct_sink_init(&four);
    four.render_values = 0;
    st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &four), 0,
       "split: the range (2 MB) in pieces of 64 KiB or more, 4 streams");
    st1 = stats(b);
    is(st1.sample_calls - st0.sample_calls, 1, "...one SampleRowKeys call");
    is(st1.read_calls - st0.read_calls, 4, "...4 ReadRows calls, one per piece");
    ok(one.text && four.text && strcmp(one.text, four.text) == 0,
       "...the same cells in the same order as one stream (%zu)", four.calls);
    ct_sink_free(&four);

    pt_bt_set_sampling(b->state, 0, 60000);
    ct_sink again;
    ct_sink_init(&again);
    again.render_values = 0;
    again.stop_at = SPL_ROWS / 2 + 3;
    st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &again), 0,
       "split: a stop half way, samples kept");
    st1 = stats(b);
    ok(st1.sample_calls == st0.sample_calls && st1.read_calls - st0.read_calls == 4,
       "...no new SampleRowKeys, 4 pieces again");
    ok(again.calls == SPL_ROWS / 2 + 3 && one.text &&
           strncmp(one.text, again.text ? again.text : "", again.len) == 0,
       "...the first %d rows in order", SPL_ROWS / 2 + 3);
    ct_sink_free(&again);

    ct_sink lim;
    ct_sink_init(&lim);
    st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 10, &lim), 0, "split: a row limit");
    st1 = stats(b);
    ok(lim.calls == 10 && st1.read_calls - st0.read_calls == 1,
       "...keeps the range whole (%lu calls)", st1.read_calls - st0.read_calls);
    ct_sink_free(&lim);

    pt_bt_set_sampling(b->state, 16 << 20, 0);
    ct_sink whole;
    ct_sink_init(&whole);
    st0 = stats(b);
    is(ct_scan(b, PT_TABLE_POINTS, r, 1, CT_NONE, CT_NONE, 0, &whole), 0,
       "split: pieces of 16 MiB at least");
    st1 = stats(b);
    ok(whole.calls == SPL_ROWS && st1.read_calls - st0.read_calls == 1,
       "...leave a 2 MB range whole");
    ct_sink_free(&whole);
    ct_sink_free(&one);
}

/* ---- resuming broken streams ---- */

#define RES_ROWS 40
#define RES_VALUE (256 * 1024)

typedef struct res_sink {
    size_t cells;
    int bad;
    int last; /* index of the last row seen */
    int stop_at;
} res_sink;

static void res_value(uint8_t *v, int row)
{
    for (size_t i = 0; i < RES_VALUE; i++)
        v[i] = (uint8_t)(i * 7 + (size_t)row * 13);
}

static int res_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    res_sink *s = ud;
    static uint8_t want[RES_VALUE];
    (void)qual;
    int idx = -1;
    if (row.n == 7 && sscanf((const char *)row.p, "res/%03d", &idx) != 1)
        idx = -1;
    res_value(want, idx);
    if (idx != s->last + 1 || value.n != RES_VALUE || memcmp(value.p, want, RES_VALUE) != 0)
        s->bad++;
    s->last = idx;
    s->cells++;
    return s->stop_at && (int)s->cells == s->stop_at ? 1 : 0;
}

static int res_scan(pt_backend *b, res_sink *s, size_t row_limit)
{
    pt_row_range r[] = {CT_RANGE("res/", "res0")};
    pt_scan sc = {.table = PT_TABLE_POINTS, .ranges = r, .nranges = 1, .row_limit = row_limit};
    s->cells = 0;
    s->bad = 0;
    s->last = -1;
    return pt_backend_scan(b, &sc, res_cell, s);
}

/* The res/ rows as 4 single-row ranges each: the row and 3 that do not exist after it
 * (res/000, res/000-1, res/000-2, res/000-3, res/001, ...): enough ranges to fan out. */
#define RES_PER_ROW 4
static char res_keys[RES_ROWS * RES_PER_ROW][16];
static pt_row_range res_ranges[RES_ROWS * RES_PER_ROW];

static int res_scan_fanned(pt_backend *b, res_sink *s, unsigned long *calls)
{
    for (int i = 0; i < RES_ROWS * RES_PER_ROW; i++) {
        if (i % RES_PER_ROW == 0)
            snprintf(res_keys[i], sizeof(res_keys[i]), "res/%03d", i / RES_PER_ROW);
        else
            snprintf(res_keys[i], sizeof(res_keys[i]), "res/%03d-%d", i / RES_PER_ROW,
                     i % RES_PER_ROW);
        pt_slice k = pt_slice_str(res_keys[i]);
        res_ranges[i] = (pt_row_range){k, {k.p, k.n + 1}};
    }
    pt_scan sc = {
        .table = PT_TABLE_POINTS, .ranges = res_ranges, .nranges = RES_ROWS * RES_PER_ROW};
    s->cells = 0;
    s->bad = 0;
    s->last = -1;
    unsigned long c0 = stats(b).read_calls;
    int rv = pt_backend_scan(b, &sc, res_cell, s);
    *calls = stats(b).read_calls - c0;
    return rv;
}

static unsigned long resumes(pt_backend *b)
{
    return stats(b).scan_resumes;
}

static void test_resume(int emulator_port)
{
    proxy px;
    if (proxy_start(&px, emulator_port) != 0) {
        ok(0, "start the proxy");
        return;
    }
    char endpoint[64], err[256] = "";
    snprintf(endpoint, sizeof(endpoint), "127.0.0.1:%d", px.port);
    pt_backend b;
    if (open_bt(&b, endpoint, "", 0, err, sizeof(err)) != 0) {
        ok(0, "open through the proxy: %s", err);
        proxy_stop(&px);
        return;
    }
    pt_bt_set_timeouts(b.state, 10000, 3000);

    static uint8_t values[RES_ROWS][RES_VALUE];
    char rows[RES_ROWS][16];
    pt_mutation m[RES_ROWS];
    static const uint8_t q[4] = {0, 0, 0, 1};
    for (int i = 0; i < RES_ROWS; i++) {
        snprintf(rows[i], sizeof(rows[i]), "res/%03d", i);
        res_value(values[i], i);
        m[i] = (pt_mutation){.table = PT_TABLE_POINTS,
                             .row = pt_slice_str(rows[i]),
                             .qual = {q, 4},
                             .value = {values[i], RES_VALUE},
                             .version_us = 1000};
    }
    is(pt_backend_write(&b, m, RES_ROWS), 0, "write %d rows of 256 KiB through the proxy",
       RES_ROWS);

    res_sink s = {0};
    unsigned long r0 = resumes(&b);
    is(res_scan(&b, &s, 0), 0, "an unbroken scan");
    ok(s.cells == RES_ROWS && !s.bad, "...sees every row once, in order (%zu)", s.cells);
    is(resumes(&b) - r0, 0, "...without resuming");

    proxy_arm(&px, 3 << 20, 1);
    r0 = resumes(&b);
    is(res_scan(&b, &s, 0), 0, "a scan whose stream breaks after 3 MiB succeeds");
    ok(s.cells == RES_ROWS && !s.bad, "...every row once, in order (%zu cells, %d bad)", s.cells,
       s.bad);
    is(atomic_load(&px.made), 1, "...the proxy did cut the stream");
    is(resumes(&b) - r0, 1, "...and the scan resumed once");

    proxy_arm(&px, 2 << 20, -1);
    r0 = resumes(&b);
    is(res_scan(&b, &s, 0), 0, "a scan broken every 2 MiB makes progress and succeeds");
    ok(s.cells == RES_ROWS && !s.bad, "...every row once, in order (%zu cells, %d bad)", s.cells,
       s.bad);
    ok(resumes(&b) - r0 >= 4, "...after %lu resumes", resumes(&b) - r0);

    /* 4 streams on one connection: a cut breaks them all, and each resumes in its
     * turn after its own last row (a waiting one from its start). */
    unsigned long calls;
    proxy_arm(&px, 0, 0);
    is(res_scan_fanned(&b, &s, &calls), 0, "a scan of %d ranges on 4 streams, unbroken",
       RES_ROWS * RES_PER_ROW);
    ok(s.cells == RES_ROWS && !s.bad, "...every row once, in order (%zu)", s.cells);
    is(calls, 4, "...in 4 calls");
    proxy_arm(&px, 3 << 20, 1);
    r0 = resumes(&b);
    is(res_scan_fanned(&b, &s, &calls), 0, "a scan on 4 streams cut after 3 MiB succeeds");
    ok(s.cells == RES_ROWS && !s.bad, "...every row once, in order (%zu cells, %d bad)", s.cells,
       s.bad);
    is(atomic_load(&px.made), 1, "...the proxy did cut the connection");
    ok(resumes(&b) - r0 >= 1 && calls == 4 + resumes(&b) - r0,
       "...streams resumed (%lu), one call each (%lu calls)", resumes(&b) - r0, calls);
    proxy_arm(&px, 2 << 20, -1);
    r0 = resumes(&b);
    is(res_scan_fanned(&b, &s, &calls), 0, "a scan on 4 streams cut every 2 MiB succeeds");
    ok(s.cells == RES_ROWS && !s.bad, "...every row once, in order (%zu cells, %d bad)", s.cells,
       s.bad);
    ok(resumes(&b) - r0 >= 4, "...after %lu resumes", resumes(&b) - r0);

    proxy_arm(&px, 3 << 20, -1);
    is(res_scan(&b, &s, 15), 0, "a row limit across resumes");
    ok(s.cells == 15 && !s.bad, "...returns exactly 15 rows (%zu)", s.cells);

    proxy_arm(&px, 1, -1);
    r0 = resumes(&b);
    int rv = res_scan(&b, &s, 0);
    ok(rv == PT_EUNAVAIL || rv == PT_ETIMEOUT, "a stream broken before any row gives up: %d", rv);
    /* Without progress no stream renews its budget; the scan has at most 4 streams. */
    ok(resumes(&b) - r0 <= 4 * max_retries(3000), "...within the retry budget (%lu resumes)",
       resumes(&b) - r0);
    is(s.cells, 0, "...having delivered nothing");

    proxy_arm(&px, 0, 0);
    s.stop_at = 3;
    is(res_scan(&b, &s, 0), 0, "the callback stops a big scan");
    is(s.cells, 3, "...after 3 cells");
    pt_backend_close(&b);
    proxy_stop(&px);
}

/* ---- outages ---- */

/* The outage cases run with this retry budget. */
#define OUTAGE_BUDGET_MS 1500

/* ReadRows calls a scan made, which gives up after each of its (at most 4) streams used
 * up its own budget. */
static int scan_gave_up(pt_backend *b, unsigned long calls0, const char *what)
{
    unsigned long calls = stats(b).read_calls - calls0;
    return ok(calls <= 4 * (1 + max_retries(OUTAGE_BUDGET_MS)),
              "...%s gives up within the retry budget (%lu calls)", what, calls);
}

/* A scan of the fan-out rows on 4 streams fails with want, within the retry budget. */
static void fanned_outage(pt_backend *b, int want, const char *server)
{
    ct_sink sink;
    ct_sink_init(&sink);
    unsigned long c0 = stats(b).read_calls;
    int rv = ct_scan(b, PT_TABLE_POINTS, fan_ranges, FAN_RANGES, CT_NONE, CT_NONE, 0, &sink);
    is(rv, want, "a scan on 4 streams of a %s emulator fails with %d", server, want);
    scan_gave_up(b, c0, "it");
    ct_sink_free(&sink);
}

/* A write of one row that gave up after at most the retries the budget admits. */
static void write_gave_up(pt_backend *b, unsigned long retries0)
{
    unsigned long n = stats(b).write_retries - retries0;
    ok(n <= max_retries(OUTAGE_BUDGET_MS), "...within the retry budget (%lu retries)", n);
}

/* Flow control through the write path. The emulator never sends rate_limit_info (but
 * must accept the bigtable-features header that asks for it), so the test hands the
 * backend's limiter one, as a MutateRows response would. */
static void test_throttle(pt_backend *b)
{
    pt_bt *bt = b->state;
    const char *rate = "promtable_bigtable_write_rate_limit_rows_per_second";
    pt_row_range r[] = {CT_RANGE("fl/", "fl/\xff")};
    is(write1(b, PT_TABLE_POINTS, "fl/a", 1, "x"), 0,
       "a write with bigtable-features goes through the emulator");
    ok(bt_metric(b, rate) == 0, "not limited: the rate gauge reads 0");

    /* A fresh limiter told to slow down with nothing observed: its floor, 1 row/s, for a
     * period (60 s) longer than the test. */
    int64_t now = (int64_t)pt_now_ns();
    pt_bt_flow_free(&bt->flow);
    pt_bt_flow_init(&bt->flow, now);
    pt_bt_flow_info(&bt->flow, 60 * 1000000000LL, 0.5, now);
    ok(bt_metric(b, rate) == 1, "limited: the gauge reads 1 row/s (%g)", bt_metric(b, rate));
    is(bt_metric(b, "promtable_bigtable_rate_limit_infos_total"), 1, "one rate_limit_info");
    ct_batch five = {0};
    const char *rows[] = {"fl/b", "fl/c", "fl/d", "fl/e", "fl/f"};
    for (int i = 0; i < 5; i++)
        ct_add(&five, PT_TABLE_POINTS, rows[i], 1, "y");
    is(ct_write(b, &five), 0, "5 rows go at once: nobody was waiting");
    is(write1(b, PT_TABLE_POINTS, "fl/g", 1, "z"), PT_EBUSY,
       "the next row would wait 5 s, past the 1 s bound: PT_EBUSY (503 + Retry-After)");
    is(bt_metric(b, "promtable_bigtable_writes_throttled_total"), 1, "the refusal is counted");
    is_str(ct_show(b, PT_TABLE_POINTS, r, 1),
           "fl/a:00000001=x;fl/b:00000001=y;fl/c:00000001=y;fl/d:00000001=y;fl/e:00000001=y;"
           "fl/f:00000001=y;",
           "the refused row was not written");

    pt_bt_flow_free(&bt->flow); /* lifted, for the tests that follow */
    pt_bt_flow_init(&bt->flow, (int64_t)pt_now_ns());
    is(write1(b, PT_TABLE_POINTS, "fl/g", 1, "z"), 0, "without the limit it goes");
}

static void test_outages(pt_backend *b, const char *endpoint)
{
    pt_bt_set_timeouts(b->state, 1000, OUTAGE_BUDGET_MS);
    pt_row_range r[] = {CT_RANGE("c03/", "c03/\xff")};

    /* A hung server: calls run into their deadline. */
    /* The signal takes effect asynchronously; wait until the emulator is stopped. */
    kill((pid_t)emu_pid, SIGSTOP);
    int wst;
    ok(waitpid((pid_t)emu_pid, &wst, WUNTRACED) == (pid_t)emu_pid && WIFSTOPPED(wst),
       "the emulator is stopped");
    /* PT_ETIMEOUT is the call deadline firing: without one a call to a stopped server
     * never ends (and the watchdog fails the test). */
    unsigned long w0 = stats(b).write_retries;
    int rv = write1(b, PT_TABLE_POINTS, "out/hang", 1, "v");
    ok(rv == PT_ETIMEOUT, "a write to a hung emulator times out: %d", rv);
    write_gave_up(b, w0);
    unsigned long c0 = stats(b).read_calls;
    const char *got = ct_show(b, PT_TABLE_POINTS, r, 1);
    is_str(got, "ERROR -101", "a scan of a hung emulator times out");
    scan_gave_up(b, c0, "and");
    fanned_outage(b, PT_ETIMEOUT, "hung");
    kill((pid_t)emu_pid, SIGCONT);
    pt_bt_stats s0 = stats(b);
    is(write1(b, PT_TABLE_POINTS, "out/hang", 1, "v"), 0, "after SIGCONT writes work again");
    pt_bt_stats s1 = stats(b);
    unsigned long one = s1.all.write_bytes - s0.all.write_bytes; /* one request of one cell */
    ok(one > 0, "a request of one cell: %lu bytes", one);

    /* A dead server: connections are refused. */
    emu_stop();
    w0 = stats(b).write_retries;
    rv = write1(b, PT_TABLE_POINTS, "out/dead", 1, "v"); /* as long as "out/hang" */
    is(rv, PT_EUNAVAIL, "a write to a killed emulator is PT_EUNAVAIL (retryable)");
    write_gave_up(b, w0);
    pt_bt_stats s2 = stats(b);
    is(s2.all.rows_mutated - s1.all.rows_mutated, 1, "its row is counted once however often sent");
    is(s2.all.cells_written - s1.all.cells_written, 1, "...and its cell");
    is(s2.all.write_bytes - s1.all.write_bytes, (s2.write_retries - w0 + 1) * one,
       "write_bytes counts every request sent, retries included (%lu retries)",
       s2.write_retries - w0);
    c0 = stats(b).read_calls;
    got = ct_show(b, PT_TABLE_POINTS, r, 1);
    is_str(got, "ERROR -100", "a scan of a killed emulator is PT_EUNAVAIL");
    scan_gave_up(b, c0, "and");
    fanned_outage(b, PT_EUNAVAIL, "killed");

    /* A new emulator on the same address (empty: it keeps data in memory). */
    if (emu_start(emu_port) != 0) {
        ok(0, "restart the emulator");
        return;
    }
    char err[256] = "";
    double t0 = now_ms();
    while ((rv = init_bt(b, err, sizeof(err))) != 0 && now_ms() - t0 < 20000)
        sleep_ms(200);
    is(rv, 0, "init on the new emulator (after %.0f ms)", now_ms() - t0);
    is(write1(b, PT_TABLE_POINTS, "c03/r", 1, "back"), 0, "writes recover");
    is_str(ct_show(b, PT_TABLE_POINTS, r, 1), "c03/r:00000001=back;", "scans recover");
    (void)endpoint;
}

int main(void)
{
    char endpoint[64], err[256] = "";
    int setup = bt_emulator_setup(endpoint, sizeof(endpoint));
    if (setup != 0)
        return setup > 0 ? 0 : done_testing();
    pt_backend b;
    is(open_bt(&b, endpoint, "", 0, err, sizeof(err)), 0, "open on the emulator");
    if (!b.state) {
        diag("open: %s", err);
        return done_testing();
    }
    is(init_bt(&b, err, sizeof(err)), 0, "init creates the tables %s", err);
    test_fanout(&b);
    test_split_wide(&b);
    test_resume(emu_port);
    test_throttle(&b);
    test_outages(&b, endpoint);
    pt_backend_close(&b);
    emu_stop();
    return done_testing();
}
