/* The roll-up builder's thread and passes (rollups.h). */
#include "rollups.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "error.h"
#include "log.h"
#include "metrics.h"

struct pt_rollup_job {
    pt_rollup_job_opts o;
    pt_rollup_stage stages[PT_ROLLUP_MAX_STAGES];
    atomic_int stop;
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    char (*ids)[PT_TENANT_MAX + 1]; /* the tenants of a pass */
    pt_store_stats stats; /* the builder's reads and writes: not the clients' figures */
    uint64_t holder;      /* this builder's name in the lease cell */
};

/* On a store several promtables share (a backend with check_and_set: Bigtable), one of
 * them builds: the one holding the lease cell "l" of the index row PT_ROLLUP_ROW (outside
 * every tenant's keys), "<until ms> <holder, 16 hex digits>", taken when absent or lapsed,
 * renewed by its holder at every pass. */
enum { LEASE_MS = 600000 };
static const uint8_t lease_qual[] = {'l'};

typedef struct lease_cell {
    uint8_t v[64];
    size_t n;
    int found;
} lease_cell;

static int on_lease(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    lease_cell *c = ud;
    if (qual.n == 1 && qual.p[0] == 'l' && value.n < sizeof(c->v)) {
        memcpy(c->v, value.p, value.n);
        c->n = value.n;
        c->found = 1;
    }
    return 0;
}

/* 1 when this builder holds the lease at now (taking or renewing it), 0 when another
 * does, or a storage error. A store one process owns needs none: 1. */
static int lease_held(pt_rollup_job *j, int64_t now)
{
    pt_backend *be = j->o.store->be;
    if (!be->ops->check_and_set)
        return 1;
    static const uint8_t qend[] = {'l', 0};
    lease_cell cur = {0};
    int rv = pt_rollup_row_scan(be, (pt_slice){lease_qual, 1}, (pt_slice){qend, 2}, on_lease,
                                &cur);
    if (rv)
        return rv;
    long long until = 0;
    unsigned long long who = 0;
    char text[65];
    memcpy(text, cur.v, cur.n);
    text[cur.n] = '\0';
    if (cur.found && sscanf(text, "%lld %llx", &until, &who) == 2 && until >= now &&
        who != j->holder)
        return 0;
    char v[64];
    int vn = snprintf(v, sizeof(v), "%lld %016llx", (long long)(now + LEASE_MS),
                      (unsigned long long)j->holder);
    pt_mutation m = {.table = PT_TABLE_INDEX,
                     .row = PT_SLICE_LIT(PT_ROLLUP_ROW),
                     .qual = {lease_qual, 1},
                     .value = {(const uint8_t *)v, (size_t)vn},
                     .version_us = now * 1000};
    int applied = 0;
    rv = be->ops->check_and_set(be->state, &m,
                                cur.found ? (pt_slice){cur.v, cur.n} : (pt_slice){NULL, 0},
                                &applied);
    return rv ? rv : applied;
}

pt_rollup_job *pt_rollup_job_new(const pt_rollup_job_opts *o)
{
    pt_rollup_job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->o = *o;
    j->o.nstages = o->nstages < PT_ROLLUP_MAX_STAGES ? o->nstages : PT_ROLLUP_MAX_STAGES;
    memcpy(j->stages, o->stages, j->o.nstages * sizeof(*j->stages));
    j->o.stages = j->stages;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    j->holder = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ULL ^ (uint64_t)ts.tv_sec << 20 ^
                (uint64_t)getpid();
    if (j->o.interval_ms <= 0)
        j->o.interval_ms = 10000;
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    return j;
}

/* Where stage s of st starts building when it has built nothing: the first index bucket
 * with series, not before what the raw data or the stage still keeps. INT64_MAX: no data
 * yet. */
static int first_window(pt_store *st, const pt_rollup_stage *s, int64_t now, int64_t *from)
{
    int64_t day;
    int rv = pt_rollup_first_day(st, &day);
    if (rv || day == INT64_MAX) {
        *from = INT64_MAX;
        return rv;
    }
    int64_t kept = pt_oldest_kept(st), stage = pt_kept_since(now, s->keep_ms);
    kept = stage > kept ? stage : kept;
    /* The window that ends at the day's first millisecond holds a sample there. */
    *from = (day > kept ? day : kept) - s->res_ms;
    if (*from < 0)
        *from = 0;
    return 0;
}

/* Builds stage s of store st up to `to`, a day at a time (at most max_days, 0 = all),
 * rebuilding from late_day when that is before what is built. *built: its watermark
 * after. */
static int build_stage(pt_rollup_job *j, pt_store *st, const pt_rollup_stage *s, int64_t now,
                       int64_t late_day, size_t max_days, int64_t *built)
{
    int64_t res = s->res_ms, wm, to = (now - j->o.delay_ms) / res * res;
    int rv = pt_rollup_watermark(st, s, &wm);
    if (rv == 0 && wm == 0)
        rv = first_window(st, s, now, &wm);
    *built = wm;
    if (rv || wm == INT64_MAX)
        return rv;
    /* Windows rebuilt for late samples do not move the watermark back: reads go on using
     * the stage there (its cells are rewritten in place) while the raw data may be gone. */
    int64_t high = wm;
    wm = wm / res * res;
    if (late_day < wm)
        wm = late_day / res * res;
    int64_t step = st->index_bucket_ms > res ? st->index_bucket_ms : res;
    for (size_t d = 0; wm < to && (!max_days || d < max_days); d++) {
        int64_t end = (wm / step + 1) * step;
        end = end < to ? end : to;
        pt_rollup_built b = {0};
        if ((rv = pt_rollup_build(st, s, wm, end, &j->stop, &b)) != 0 ||
            (end > high && (rv = pt_rollup_set_watermark(st, s, end)) != 0))
            break;
        pt_m.rollup_cells += b.cells;
        wm = end;
        high = end > high ? end : high;
        *built = high;
    }
    return rv;
}

/* Every stage of one store; *floor lowered to the least any stage has built. */
static int build_store(pt_rollup_job *j, pt_store *st, int64_t now, int64_t late_day,
                       size_t max_days, int64_t *floor, const char *tenant)
{
    int first = 0;
    for (size_t i = 0; i < j->o.nstages && !atomic_load(&j->stop); i++) {
        int64_t built;
        int rv = build_stage(j, st, &j->stages[i], now, late_day, max_days, &built);
        if (built < *floor)
            *floor = built;
        if (rv && rv != PT_ECANCELLED) {
            pt_m.rollup_errors++;
            pt_log(PT_LOG_WARN, "roll-up build failed", "tenant=\"%s\" resolution_ms=%lld "
                   "err=\"%s\"", tenant, (long long)j->stages[i].res_ms, pt_strerror(rv));
            first = first ? first : rv;
        }
    }
    return first;
}

int pt_rollup_job_pass(pt_rollup_job *j, int64_t now_ms, size_t max_days)
{
    pt_store own = *j->o.store, *st = &own;
    own.stats = &j->stats;
    int held = lease_held(j, now_ms);
    if (held <= 0) {
        if (held < 0) {
            pt_m.rollup_errors++;
            pt_log(PT_LOG_WARN, "roll-up lease not read", "err=\"%s\"", pt_strerror(held));
        }
        return held < 0 ? held : 0;
    }
    int64_t late = st->late ? pt_rollup_late_take(st->late) : INT64_MAX;
    /* Writes below what every store's every stage has built are late (pt_rollup_late). */
    int64_t floor = INT64_MAX, most = INT64_MIN;
    int rv = 0;
    if (!j->o.tenants) {
        rv = build_store(j, st, now_ms, late, max_days, &floor, "");
        most = floor;
    } else {
        enum { MAX_TENANTS = 1 << 16 };
        if (!j->ids && !(j->ids = calloc(MAX_TENANTS, sizeof(*j->ids))))
            return PT_ENOMEM;
        size_t n = pt_tenants_ids(j->o.tenants, j->ids, MAX_TENANTS);
        for (size_t i = 0; i < n && !atomic_load(&j->stop); i++) {
            pt_tenant_view view;
            pt_store ts = *st;
            size_t len = strlen(j->ids[i]);
            pt_tenant_view_init(&view, st->be, j->ids[i], len);
            ts.be = &view.be;
            ts.salt = pt_tenant_salt(j->ids[i], len);
            int64_t f = INT64_MAX;
            int r = build_store(j, &ts, now_ms, late, max_days, &f, j->ids[i]);
            rv = rv ? rv : r;
            floor = f < floor ? f : floor;
            most = f != INT64_MAX && f > most ? f : most;
        }
    }
    if (st->late && most != INT64_MIN && most != INT64_MAX)
        atomic_store(&st->late->floor, most);
    if (floor != INT64_MAX)
        pt_m.rollup_lag_ms = now_ms - floor;
    if (late != INT64_MAX && st->late && rv)
        pt_rollup_late_note(st->late, late); /* not built again yet: the next pass tries */
    return rv;
}

static void *job_main(void *arg)
{
    pt_rollup_job *j = arg;
    while (!atomic_load(&j->stop)) {
        pt_rollup_job_pass(j, pt_wall_ms(), 0);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += j->o.interval_ms / 1000;
        ts.tv_nsec += (j->o.interval_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L)
            ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_mutex_lock(&j->mu);
        while (!atomic_load(&j->stop) &&
               pthread_cond_timedwait(&j->cv, &j->mu, &ts) != ETIMEDOUT)
            ;
        pthread_mutex_unlock(&j->mu);
    }
    return NULL;
}

int pt_rollup_job_run(pt_rollup_job *j)
{
    if (pthread_create(&j->thread, NULL, job_main, j) != 0)
        return -1;
    j->running = 1;
    return 0;
}

void pt_rollup_job_free(pt_rollup_job *j)
{
    if (!j)
        return;
    if (j->running) {
        pthread_mutex_lock(&j->mu);
        atomic_store(&j->stop, 1);
        pthread_cond_signal(&j->cv);
        pthread_mutex_unlock(&j->mu);
        pthread_join(j->thread, NULL);
    }
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j->ids);
    free(j);
}
