/* The fault-injecting wrapper backend; the plan and counters are described in faulty.h. */
#include <assert.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "faulty.h"
#include "error.h"

typedef struct faulty {
    pt_backend *inner;
    pthread_mutex_t mu; /* guards plan, rng and stats */
    pt_faulty_plan plan;
    uint64_t rng;
    pt_faulty_stats stats;
} faulty;

static faulty *state_of(pt_backend *b)
{
    assert(b && b->ops == &pt_backend_faulty && b->state);
    return b->state;
}

/* splitmix64: tiny, good enough to spread faults, and reproducible from its seed. */
static double next_unit(faulty *f)
{
    uint64_t z = (f->rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return (double)(z >> 11) * 0x1.0p-53;
}

/* Whether this call fails; the caller holds f->mu. The PRNG advances only when a
 * probability is set, so adding fail_next does not shift the random pattern. */
static int fires(faulty *f, unsigned *fail_next, double prob)
{
    if (*fail_next > 0) {
        (*fail_next)--;
        return 1;
    }
    return prob > 0 && next_unit(f) < prob;
}

static void sleep_ms(unsigned ms)
{
    if (ms == 0)
        return;
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ; /* EINTR: sleep the rest */
}

static int or_default(int code)
{
    return code ? code : PT_EUNAVAIL;
}

void pt_faulty_set(pt_backend *b, const pt_faulty_plan *plan)
{
    faulty *f = state_of(b);
    pthread_mutex_lock(&f->mu);
    if (plan)
        f->plan = *plan;
    else
        memset(&f->plan, 0, sizeof(f->plan));
    f->rng = f->plan.seed ? f->plan.seed : 0x5eedfa017ull;
    pthread_mutex_unlock(&f->mu);
}

void pt_faulty_get_stats(pt_backend *b, pt_faulty_stats *out)
{
    faulty *f = state_of(b);
    pthread_mutex_lock(&f->mu);
    *out = f->stats;
    pthread_mutex_unlock(&f->mu);
}

void pt_faulty_reset_stats(pt_backend *b)
{
    faulty *f = state_of(b);
    pthread_mutex_lock(&f->mu);
    memset(&f->stats, 0, sizeof(f->stats));
    pthread_mutex_unlock(&f->mu);
}

static int faulty_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    faulty *f = state;
    pt_backend *inner = cfg->inner;
    if (!inner || !inner->ops || !inner->state) {
        snprintf(err, errlen, "faulty: no open inner backend to wrap");
        return PT_EINTERNAL;
    }
    if (pthread_mutex_init(&f->mu, NULL) != 0) {
        snprintf(err, errlen, "faulty: cannot create mutex");
        return PT_EINTERNAL;
    }
    f->inner = inner;
    f->rng = 0x5eedfa017ull;
    return 0;
}

static void faulty_close(void *state)
{
    faulty *f = state;
    pthread_mutex_destroy(&f->mu);
    f->inner = NULL;
}

static int faulty_write(void *state, const pt_mutation *m, size_t n)
{
    faulty *f = state;
    pthread_mutex_lock(&f->mu);
    unsigned latency = f->plan.latency_ms;
    int fail = fires(f, &f->plan.write.fail_next, f->plan.write.fail_prob);
    int partial = fail && f->plan.write.partial;
    int code = or_default(f->plan.write.code);
    f->stats.writes++;
    f->stats.write_faults += (uint64_t)fail;
    f->stats.partial_writes += (uint64_t)partial;
    pthread_mutex_unlock(&f->mu);

    sleep_ms(latency);
    if (!fail)
        return pt_backend_write(f->inner, m, n);
    if (partial) {
        int rv = pt_backend_write(f->inner, m, n - n / 2);
        if (rv != 0)
            return rv;
    }
    return code;
}

/* Erases fail as writes do (the write plan), without a partial form. */
static int faulty_erase(void *state, const pt_erase *x, size_t n)
{
    faulty *f = state;
    pthread_mutex_lock(&f->mu);
    int fail = fires(f, &f->plan.write.fail_next, f->plan.write.fail_prob);
    int code = or_default(f->plan.write.code);
    f->stats.write_faults += (uint64_t)fail;
    pthread_mutex_unlock(&f->mu);
    return fail ? code : pt_backend_erase(f->inner, x, n);
}

/* Passes cells through until the budget runs out, then cuts the stream with the code. */
typedef struct cut {
    pt_cell_fn fn;
    void *ud;
    unsigned left;
    int code;
} cut;

static int cut_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    cut *c = ud;
    if (c->left == 0)
        return c->code;
    c->left--;
    return c->fn(c->ud, row, qual, value);
}

static int faulty_scan(void *state, const pt_scan *s, pt_cell_fn fn, void *ud)
{
    faulty *f = state;
    pthread_mutex_lock(&f->mu);
    unsigned latency = f->plan.latency_ms;
    int fail = fires(f, &f->plan.scan.fail_next, f->plan.scan.fail_prob);
    unsigned after = f->plan.scan.after_cells;
    int code = or_default(f->plan.scan.code);
    f->stats.scans++;
    f->stats.scan_faults += (uint64_t)fail;
    pthread_mutex_unlock(&f->mu);

    sleep_ms(latency);
    if (!fail)
        return pt_backend_scan(f->inner, s, fn, ud);
    if (after > 0) {
        cut c = {.fn = fn, .ud = ud, .left = after, .code = code};
        pt_scan cells = *s;
        cells.stream = NULL; /* the cut counts cells */
        int rv = pt_backend_scan(f->inner, &cells, cut_cell, &c);
        if (rv != 0)
            return rv;
    }
    return code;
}

static int faulty_init(void *state, char *err, size_t errlen)
{
    faulty *f = state;
    if (!f->inner->ops->init)
        return 0;
    return f->inner->ops->init(f->inner->state, err, errlen);
}

static size_t faulty_stats(void *state, pt_backend_stat *out, size_t max)
{
    faulty *f = state;
    return f->inner->ops->stats ? f->inner->ops->stats(f->inner->state, out, max) : 0;
}

static int faulty_health(void *state, char *msg, size_t msglen)
{
    faulty *f = state;
    return f->inner->ops->health ? f->inner->ops->health(f->inner->state, msg, msglen) : 0;
}

const pt_backend_ops pt_backend_faulty = {
    .name = "faulty",
    .caps = PT_BACKEND_CAP_TEST,
    .state_size = sizeof(faulty),
    .open = faulty_open,
    .close = faulty_close,
    .write = faulty_write,
    .scan = faulty_scan,
    .erase = faulty_erase,
    .init = faulty_init,
    .stats = faulty_stats,
    .health = faulty_health,
};
