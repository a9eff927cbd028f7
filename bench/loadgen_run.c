/* loadgen: the phases of a run and their result lines (loadgen.h). */
#include "loadgen.h"

/* ------------------------------------------------------------------------------------ */
/* Phases                                                                               */

typedef struct run {
    const opts *o;
    const endpoint *ep;
    const pool *pl;
    _Atomic uint64_t seq;   /* next body in the stream, shared by all phases */
    uint64_t seq_limit;     /* stop before this body (requests mode) */
    uint64_t deadline_ns;   /* stop starting requests after this (duration mode), 0: none */
    uint64_t min_seq;       /* ...but not before this body has been handed out */
    _Atomic uint64_t ok_samples; /* over all phases: what the receiver should now hold */
    atomic_flag reported;   /* first error printed */
    double rate;            /* this phase: requests/s (opts.rate), 0: closed loop */
    uint64_t pace_t0;       /* when the paced phase started */
    _Atomic uint64_t turns; /* requests started in this phase, retries included */
} run;

typedef struct worker {
    pthread_t th;
    run *r;
    conn *c;
    uint64_t ok, errors, samples, busy; /* busy: answered 503 (overload) */
    /* Latency of every answered request, and of the 2xx ones only. */
    struct lat {
        uint32_t *us;
        size_t n, cap;
    } all, ok_lat;
} worker;

static void record(struct lat *l, uint64_t ns)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        uint32_t *p = realloc(l->us, cap * sizeof *p);
        if (!p) /* losing latency samples beats dying mid-run */
            return;
        l->us = p;
        l->cap = cap;
    }
    uint64_t us = ns / 1000;
    l->us[l->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void report_error(run *r, int status, const conn *c)
{
    if (atomic_flag_test_and_set(&r->reported))
        return;
    if (status > 0)
        fprintf(stderr, "loadgen: first error: HTTP %d: %s\n", status,
                c->errlen ? c->errbody : "(empty body)");
    else
        fprintf(stderr, "loadgen: first error: %s\n", c->err);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    conn *c = w->c;
    char hdr[1536];
    uint64_t retry = UINT64_MAX; /* a body answered 503, to send again */
    for (;;) {
        if (r->deadline_ns && lg_now_ns() >= r->deadline_ns && atomic_load(&r->seq) >= r->min_seq)
            break;
        uint64_t s = retry;
        if (s == UINT64_MAX && (s = atomic_fetch_add(&r->seq, 1)) >= r->seq_limit)
            break;
        retry = UINT64_MAX;
        uint64_t turn = atomic_fetch_add(&r->turns, 1);
        if (r->rate > 0) {
            uint64_t due = r->pace_t0 + (uint64_t)((double)turn * 1e9 / r->rate);
            struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        const body *b = &r->pl->b[s % r->pl->n];
        char tenant[48] = "";
        if (r->o->tenants)
            snprintf(tenant, sizeof tenant, "X-Scope-OrgID: t%llu\r\n",
                     (unsigned long long)(s % r->pl->n % r->o->tenants));
        int hl = snprintf(hdr, sizeof hdr,
                          "POST %s HTTP/1.1\r\n"
                          "Host: %s\r\n"
                          "User-Agent: promtable-loadgen/" PT_VERSION "\r\n"
                          "Content-Type: application/x-protobuf%s\r\n"
                          "Content-Encoding: snappy\r\n"
                          "X-Prometheus-Remote-Write-Version: %s\r\n"
                          "%s"
                          "Content-Length: %zu\r\n\r\n",
                          r->ep->path, r->ep->hostport,
                          r->o->protocol == 2 ? ";proto=io.prometheus.write.v2.Request" : "",
                          r->o->protocol == 2 ? "2.0.0" : "0.1.0", tenant, b->n);
        uint64_t t0 = lg_now_ns();
        int status = -1, got = 0;
        /* A reused keep-alive connection may have been closed by the peer while idle;
         * like any HTTP client, retry once on a fresh one if no response byte came. */
        for (int attempt = 0; attempt < 2; attempt++) {
            int reused = c->fd >= 0 && c->used;
            if (c->fd < 0 && lg_conn_open(c, r->ep, r->o->timeout_s) < 0)
                break;
            status = lg_exchange(c, hdr, (size_t)hl, b, &got);
            if (status < 0 || !c->keep)
                lg_conn_close(c);
            if (status >= 0 || got || !reused)
                break;
        }
        uint64_t t1 = lg_now_ns();
        if (status >= 200 && status < 300) {
            w->ok++;
            w->samples += r->pl->samples_per_body;
            record(&w->all, t1 - t0);
            record(&w->ok_lat, t1 - t0);
        } else {
            w->errors++;
            w->busy += status == 503;
            if (status == 503 && r->o->retry_503)
                retry = s;
            if (status > 0)
                record(&w->all, t1 - t0);
            report_error(r, status, c);
            if (status < 0) /* do not spin on a dead server */
                usleep(10000);
        }
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array, in milliseconds. */
static double pct_ms(const uint32_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t rank = (size_t)ceil(p * (double)n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1] / 1000.0;
}

/* CPU seconds (user + system, all threads) process pid has used; -1 if unknown. The
 * receiver's CPU per sample is steadier than samples/s when other work shares the host. */
static double proc_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Fields after the command name, which may hold spaces and parentheses: state is
     * field 3, utime 14, stime 15. */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                     &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Busy CPU seconds of the whole host (all CPUs), from /proc/stat; -1 if unknown. */
static double host_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 7)
        return -1;
    /* user nice system [idle iowait] irq softirq steal */
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return (double)busy / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return -1;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The latencies of one kind (the struct lat at offset off in every worker), sorted; frees
 * the workers' arrays. */
static uint32_t *gather(worker *ws, size_t nw, size_t off, size_t *n)
{
    size_t total = 0, at = 0;
    for (size_t i = 0; i < nw; i++)
        total += ((struct lat *)(void *)((char *)&ws[i] + off))->n;
    uint32_t *v = lg_xmalloc(sizeof(*v) * (total ? total : 1));
    for (size_t i = 0; i < nw; i++) {
        struct lat *l = (struct lat *)(void *)((char *)&ws[i] + off);
        if (l->n)
            memcpy(v + at, l->us, l->n * sizeof *v);
        at += l->n;
        free(l->us);
    }
    qsort(v, total, sizeof *v, cmp_u32);
    *n = total;
    return v;
}

/* Runs one phase on all connections; prints its line to f. Returns the error count. */
static uint64_t run_phase(run *r, conn *conns, const char *tag, FILE *f)
{
    const opts *o = r->o;
    size_t nw = (size_t)o->connections;
    worker *ws = calloc(nw, sizeof *ws);
    if (!ws) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(2);
    }
    uint64_t seq0 = atomic_load(&r->seq);
    double cpu0 = o->server_pid ? proc_cpu_s(o->server_pid) : -1;
    double host0 = host_busy_s(), self0 = self_cpu_s();
    uint64_t t0 = lg_now_ns();
    r->pace_t0 = t0;
    atomic_store(&r->turns, 0);
    size_t started = 0;
    for (size_t i = 0; i < nw; i++) {
        ws[i].r = r;
        ws[i].c = &conns[i];
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "loadgen: pthread_create failed\n");
            break;
        }
        started++;
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(ws[i].th, NULL);
    double elapsed = (double)(lg_now_ns() - t0) / 1e9;
    double cpu1 = o->server_pid ? proc_cpu_s(o->server_pid) : -1;
    double host1 = host_busy_s(), self1 = self_cpu_s();

    uint64_t ok = 0, errors = 0, samples = 0, busy = 0;
    for (size_t i = 0; i < started; i++) {
        ok += ws[i].ok;
        errors += ws[i].errors;
        samples += ws[i].samples;
        busy += ws[i].busy;
    }
    size_t nlat, nok;
    uint32_t *lat = gather(ws, started, offsetof(worker, all), &nlat);
    uint32_t *oklat = gather(ws, started, offsetof(worker, ok_lat), &nok);
    uint64_t sent = ok + errors;
    atomic_fetch_add(&r->ok_samples, samples);
    fprintf(f,
            "%s samples_per_sec=%.0f requests_per_sec=%.1f p50_ms=%.2f p99_ms=%.2f "
            "max_ms=%.2f errors=%llu requests=%llu samples=%llu elapsed_s=%.2f "
            "pool_passes=%.2f total_ok_samples=%llu",
            tag, elapsed > 0 ? (double)samples / elapsed : 0,
            elapsed > 0 ? (double)ok / elapsed : 0, pct_ms(lat, nlat, 0.50),
            pct_ms(lat, nlat, 0.99), nlat ? lat[nlat - 1] / 1000.0 : 0.0,
            (unsigned long long)errors, (unsigned long long)sent,
            (unsigned long long)samples, elapsed,
            (double)(r->o->retry_503 ? atomic_load(&r->seq) : seq0 + sent) / (double)r->pl->n,
            (unsigned long long)atomic_load(&r->ok_samples));
    /* Series sent for the first time, counted when sent (a failed request's too). */
    uint64_t fresh = lg_series_sent(r->pl, seq0 + sent) - lg_series_sent(r->pl, seq0);
    fprintf(f, " series_total=%llu new_series=%llu new_series_per_sec=%.0f",
            (unsigned long long)lg_series_sent(r->pl, seq0 + sent), (unsigned long long)fresh,
            elapsed > 0 ? (double)fresh / elapsed : 0);
    /* Under overload: the offered rate, the 503s, and the latency of the admitted (2xx). */
    fprintf(f, " offered_per_sec=%.1f rejected_503=%llu ok_p50_ms=%.2f ok_p99_ms=%.2f "
               "ok_max_ms=%.2f",
            elapsed > 0 ? (double)sent / elapsed : 0, (unsigned long long)busy,
            pct_ms(oklat, nok, 0.50), pct_ms(oklat, nok, 0.99),
            nok ? oklat[nok - 1] / 1000.0 : 0.0);
    if (cpu0 >= 0 && cpu1 >= 0) {
        double cpu = cpu1 - cpu0;
        fprintf(f, " server_cpu_s=%.2f server_cpu_util=%.2f samples_per_server_cpu_s=%.0f", cpu,
                elapsed > 0 ? cpu / elapsed : 0, cpu > 0 ? (double)samples / cpu : 0);
        /* CPU that neither the server nor we used: other work disturbing the figure. */
        if (host0 >= 0 && host1 >= 0 && self0 >= 0 && self1 >= 0 && elapsed > 0) {
            double other = (host1 - host0) - cpu - (self1 - self0);
            fprintf(f, " loadgen_cpu_util=%.2f other_cpu_util=%.2f",
                    (self1 - self0) / elapsed, other > 0 ? other / elapsed : 0);
        }
    }
    fputc('\n', f);
    fflush(f);
    free(lat);
    free(oklat);
    free(ws);
    return errors;
}

/* ------------------------------------------------------------------------------------ */
/* The run                                                                              */

/* Sends the pool: an optional warm-up, then the timed phase. Returns the exit status. */
int lg_send_load(const opts *o, const endpoint *ep, const model *m, const pool *pl)
{
    int rv = 2;
    uint64_t opened = 0;
    conn *conns = calloc((size_t)o->connections, sizeof *conns);
    if (!conns) {
        fprintf(stderr, "loadgen: out of memory\n");
        return 2;
    }
    for (; opened < o->connections; opened++) {
        conns[opened].fd = -1;
        if (lg_conn_open(&conns[opened], ep, o->timeout_s) < 0) {
            fprintf(stderr, "loadgen: %s: %s\n", o->url, conns[opened].err);
            goto out;
        }
    }
    fprintf(stderr, "loadgen: POST %s, %llu connections, warm-up %.0fs, then %s %.0f%s\n",
            o->url, (unsigned long long)o->connections, o->warmup_s,
            o->requests ? "requests" : "duration",
            o->requests ? (double)o->requests : o->duration_s, o->requests ? "" : "s");

    run r = {.o = o, .ep = ep, .pl = pl, .reported = ATOMIC_FLAG_INIT};
    atomic_store(&r.seq, 0);
    atomic_store(&r.ok_samples, 0);
    r.rate = o->rate; /* paced in the warm-up too: a closed loop of refusals is no warm-up */
    if (o->warmup_s > 0) {
        /* Creating a series costs a receiver far more than appending to one: warm up
         * for at least one pass over all series, so the timed phase is steady state. */
        r.seq_limit = UINT64_MAX;
        r.min_seq = (m->n + pl->entries_per_body - 1) / pl->entries_per_body;
        r.deadline_ns = lg_now_ns() + (uint64_t)(o->warmup_s * 1e9);
        run_phase(&r, conns, "warmup:", stderr);
    }
    r.min_seq = 0;
    r.deadline_ns = o->requests ? 0 : lg_now_ns() + (uint64_t)(o->duration_s * 1e9);
    r.seq_limit = o->requests ? atomic_load(&r.seq) + o->requests : UINT64_MAX;
    rv = run_phase(&r, conns, "result:", stdout) ? 1 : 0;
    if (m->churn_step && atomic_load(&r.seq) > pl->n)
        fprintf(stderr, "loadgen: warning: the run sent the pool again from the start, old "
                        "series with old timestamps: churn stopped; raise --pool-mb\n");
out:
    for (uint64_t i = 0; i < opened; i++)
        lg_conn_close(&conns[i]);
    free(conns);
    return rv;
}

