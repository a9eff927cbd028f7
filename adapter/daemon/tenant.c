/* Tenant ids, the tenant view of a backend, and per-tenant limits (tenant.h). */
#include "tenant.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <xxhash.h>

#include "buf.h"
#include "clock.h"
#include "error.h"
#include "rowkey.h"
#include "set64.h"

/* ---- ids ---- */

static int id_byte_ok(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("!._*'()-", c) != NULL;
}

int pt_tenant_valid(const char *id, size_t n, char *msg, size_t msglen)
{
    if (n == 0) {
        snprintf(msg, msglen, "tenant id is empty");
        return 0;
    }
    if (n > PT_TENANT_MAX) {
        snprintf(msg, msglen, "tenant id is %zu bytes long, more than the %d allowed", n,
                 PT_TENANT_MAX);
        return 0;
    }
    if ((n == 1 && id[0] == '.') || (n == 2 && id[0] == '.' && id[1] == '.')) {
        snprintf(msg, msglen, "tenant id \"%.*s\" is not allowed", (int)n, id);
        return 0;
    }
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)id[i];
        if (c && id_byte_ok(c))
            continue;
        if (c >= 0x20 && c < 0x7f)
            snprintf(msg, msglen, "tenant id has '%c' at byte %zu; allowed are A-Z a-z 0-9 and "
                     "!._*'()-", c, i);
        else
            snprintf(msg, msglen, "tenant id has byte 0x%02x at byte %zu; allowed are A-Z a-z "
                     "0-9 and !._*'()-", c, i);
        return 0;
    }
    return 1;
}

uint64_t pt_tenant_salt(const char *id, size_t n)
{
    uint64_t h = XXH3_64bits_withSeed(id, n, 0x7e4a47);
    return h ? h : 1;
}

size_t pt_tenant_prefix(uint8_t *dst, const char *id, size_t n)
{
    dst[0] = PT_TENANT_MARK;
    memcpy(dst + 1, id, n);
    dst[n + 1] = PT_TENANT_MARK;
    return n + 2;
}

/* ---- the view ---- */

static int view_open(void *state, const pt_backend_config *cfg, char *err, size_t errlen)
{
    (void)state, (void)cfg;
    snprintf(err, errlen, "tenant views are made by pt_tenant_view_init");
    return PT_EINTERNAL;
}

static void view_close(void *state)
{
    (void)state;
}

/* The prefixed copy of a key, in mem. */
static pt_slice prefixed(uint8_t **mem, const pt_tenant_view *v, pt_slice key)
{
    uint8_t *p = *mem;
    memcpy(p, v->prefix, v->plen);
    if (key.n)
        memcpy(p + v->plen, key.p, key.n);
    *mem = p + v->plen + key.n;
    return (pt_slice){p, v->plen + key.n};
}

static int view_write(void *state, const pt_mutation *m, size_t n)
{
    pt_tenant_view *v = state;
    size_t keys = 0;
    for (size_t i = 0; i < n; i++)
        keys += v->plen + m[i].row.n;
    /* One allocation per request, not per sample. */
    pt_mutation *c = malloc(n * sizeof(*c) + keys + 1);
    if (!c)
        return PT_ENOMEM;
    uint8_t *mem = (uint8_t *)(c + n);
    for (size_t i = 0; i < n; i++) {
        c[i] = m[i];
        c[i].row = prefixed(&mem, v, m[i].row);
    }
    int rv = pt_backend_write(v->inner, c, n);
    free(c);
    return rv;
}

typedef struct strip {
    pt_cell_fn fn;
    void *ud;
    const pt_stream_to *to; /* the caller's, when it takes streams */
    size_t plen;
} strip;

/* The row without the tenant's prefix; 0 when the inner backend returned a row outside
 * its ranges. */
static int unprefixed(const strip *s, pt_slice *row)
{
    if (row->n < s->plen)
        return 0;
    *row = (pt_slice){row->p + s->plen, row->n - s->plen};
    return 1;
}

static int strip_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    strip *s = ud;
    return unprefixed(s, &row) ? s->fn(s->ud, row, qual, value) : PT_EINTERNAL;
}

static int strip_stream(void *ud, pt_slice row, uint32_t first, uint32_t last, uint32_t count,
                        pt_slice stream)
{
    strip *s = ud;
    return unprefixed(s, &row) ? s->to->fn(s->to->ud, row, first, last, count, stream)
                               : PT_EINTERNAL;
}

static int view_scan(void *state, const pt_scan *sc, pt_cell_fn fn, void *ud)
{
    pt_tenant_view *v = state;
    size_t keys = 0;
    for (size_t i = 0; i < sc->nranges; i++)
        keys += 2 * v->plen + sc->ranges[i].start.n + sc->ranges[i].end.n;
    pt_row_range *r = malloc(sc->nranges * sizeof(*r) + keys + 1);
    if (!r)
        return PT_ENOMEM;
    uint8_t *mem = (uint8_t *)(r + sc->nranges);
    pt_slice space_end;
    uint8_t end_buf[PT_TENANT_PREFIX_MAX];
    pt_prefix_end(end_buf, (pt_slice){v->prefix, v->plen}, &space_end);
    for (size_t i = 0; i < sc->nranges; i++) {
        r[i].start = prefixed(&mem, v, sc->ranges[i].start);
        /* Unbounded: to the end of the tenant's space. */
        r[i].end = sc->ranges[i].end.n ? prefixed(&mem, v, sc->ranges[i].end) : space_end;
    }
    pt_scan s = *sc;
    s.ranges = r;
    strip st = {.fn = fn, .ud = ud, .to = sc->stream, .plen = v->plen};
    pt_stream_to to = {strip_stream, &st};
    if (sc->stream)
        s.stream = &to;
    int rv = pt_backend_scan(v->inner, &s, strip_cell, &st);
    free(r);
    return rv;
}

static int view_erase(void *state, const pt_erase *x, size_t n)
{
    pt_tenant_view *v = state;
    size_t keys = 0;
    for (size_t i = 0; i < n; i++)
        keys += v->plen + x[i].row.n;
    pt_erase *c = malloc(n * sizeof(*c) + keys + 1);
    if (!c)
        return PT_ENOMEM;
    uint8_t *mem = (uint8_t *)(c + n);
    for (size_t i = 0; i < n; i++) {
        c[i] = x[i];
        c[i].row = prefixed(&mem, v, x[i].row);
    }
    int rv = pt_backend_erase(v->inner, c, n);
    free(c);
    return rv;
}

static const pt_backend_ops view_ops = {
    .name = "tenant",
    .caps = PT_BACKEND_CAP_TEST,
    .state_size = sizeof(pt_tenant_view),
    .open = view_open,
    .close = view_close,
    .write = view_write,
    .scan = view_scan,
    .erase = view_erase,
};

void pt_tenant_view_init(pt_tenant_view *v, pt_backend *inner, const char *id, size_t n)
{
    v->inner = inner;
    v->plen = pt_tenant_prefix(v->prefix, id, n);
    v->be = (pt_backend){&view_ops, v};
}

/* ---- tenants, limits, counters ---- */

struct pt_tenant {
    char id[PT_TENANT_MAX + 1];
    size_t refs;        /* requests holding it; guarded by the registry's lock */
    int labelled;       /* has its own label value on /metrics */
    int64_t last_ms;    /* last request */
    pt_tenants *ts;
    pt_tenant *next;    /* in its hash chain */
    pthread_mutex_t mu; /* guards what follows */
    pt_set64 active_set; /* 64-bit hashes of the active series of bucket `bucket` */
    int64_t bucket;
    double tokens;      /* samples/s bucket */
    int64_t tokens_ms;
    /* Counters. */
    _Atomic uint64_t accepted, rejected, limited_series, limited_rate;
    _Atomic uint64_t active; /* = active_set.n, readable without the lock */
};

struct pt_tenants {
    pt_tenant_limits lim;
    pthread_mutex_t mu;
    pt_tenant **chains; /* hash chains by pt_tenant_salt of the id */
    size_t mask;        /* chains - 1, a power of two - 1 */
    size_t n, labelled;
    _Atomic size_t tracked; /* series in every tenant's set */
    /* Figures of tenants that were dropped or never had label values of their own. */
    uint64_t gone_accepted, gone_rejected, gone_series, gone_rate;
};

pt_tenants *pt_tenants_new(const pt_tenant_limits *lim)
{
    pt_tenants *ts = calloc(1, sizeof(*ts));
    if (!ts)
        return NULL;
    ts->lim = *lim;
    if (ts->lim.max_tenants == 0)
        ts->lim.max_tenants = 1;
    if (ts->lim.bucket_ms <= 0)
        ts->lim.bucket_ms = 86400000;
    size_t chains = 16;
    while (chains < ts->lim.max_tenants)
        chains <<= 1;
    ts->mask = chains - 1;
    ts->chains = calloc(chains, sizeof(*ts->chains));
    if (!ts->chains || pthread_mutex_init(&ts->mu, NULL) != 0) {
        free(ts->chains);
        free(ts);
        return NULL;
    }
    return ts;
}

static void tenant_free(pt_tenant *t)
{
    pthread_mutex_destroy(&t->mu);
    pt_set64_free(&t->active_set);
    free(t);
}

void pt_tenants_free(pt_tenants *ts)
{
    if (!ts)
        return;
    for (size_t i = 0; i <= ts->mask; i++)
        for (pt_tenant *t = ts->chains[i], *next; t; t = next) {
            next = t->next;
            tenant_free(t);
        }
    pthread_mutex_destroy(&ts->mu);
    free(ts->chains);
    free(ts);
}

/* Under ts->mu: *at (a link of a chain) is unlinked and freed, its figures going to the
 * shared "other" ones. */
static void drop(pt_tenants *ts, pt_tenant **at)
{
    pt_tenant *t = *at;
    *at = t->next;
    ts->gone_accepted += atomic_load(&t->accepted);
    ts->gone_rejected += atomic_load(&t->rejected);
    ts->gone_series += atomic_load(&t->limited_series);
    ts->gone_rate += atomic_load(&t->limited_rate);
    if (t->labelled)
        ts->labelled--;
    atomic_fetch_sub(&ts->tracked, t->active_set.n);
    tenant_free(t);
    ts->n--;
}

pt_tenant *pt_tenant_get(pt_tenants *ts, const char *id, int64_t now_ms, char *msg,
                         size_t msglen)
{
    size_t chain = pt_tenant_salt(id, strlen(id)) & ts->mask;
    pthread_mutex_lock(&ts->mu);
    for (pt_tenant *t = ts->chains[chain]; t; t = t->next) {
        if (strcmp(t->id, id) == 0) {
            t->refs++;
            t->last_ms = now_ms;
            pthread_mutex_unlock(&ts->mu);
            return t;
        }
    }
    if (ts->n >= ts->lim.max_tenants) {
        /* Full: the longest idle tenant makes room if idle for a whole bucket. */
        pt_tenant **idle = NULL;
        for (size_t i = 0; i <= ts->mask; i++)
            for (pt_tenant **at = &ts->chains[i]; *at; at = &(*at)->next)
                if ((*at)->refs == 0 && (!idle || (*at)->last_ms < (*idle)->last_ms))
                    idle = at;
        if (!idle || now_ms - (*idle)->last_ms < ts->lim.bucket_ms) {
            pthread_mutex_unlock(&ts->mu);
            snprintf(msg, msglen, "tenant \"%s\": limit tenancy.max_tenants (%zu) reached: as "
                     "many tenants are active (each wrote within index.bucket)",
                     id, ts->lim.max_tenants);
            return NULL;
        }
        drop(ts, idle);
    }
    pt_tenant *t = calloc(1, sizeof(*t));
    if (!t || pthread_mutex_init(&t->mu, NULL) != 0) {
        pthread_mutex_unlock(&ts->mu);
        free(t);
        snprintf(msg, msglen, "out of memory");
        return NULL;
    }
    snprintf(t->id, sizeof(t->id), "%s", id);
    t->refs = 1;
    t->last_ms = now_ms;
    t->ts = ts;
    t->tokens = (double)ts->lim.max_samples_per_s;
    t->tokens_ms = now_ms;
    t->bucket = INT64_MIN;
    if (ts->labelled < ts->lim.metrics_tenants) {
        t->labelled = 1;
        ts->labelled++;
    }
    t->next = ts->chains[chain];
    ts->chains[chain] = t;
    ts->n++;
    pthread_mutex_unlock(&ts->mu);
    return t;
}

void pt_tenant_put(pt_tenants *ts, pt_tenant *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&ts->mu);
    t->refs--;
    pthread_mutex_unlock(&ts->mu);
}

const char *pt_tenant_id(const pt_tenant *t)
{
    return t->id;
}

int pt_tenant_take(pt_tenant *t, uint64_t n, int64_t now_ms, char *msg, size_t msglen)
{
    uint64_t rate = t->ts->lim.max_samples_per_s;
    if (rate == 0 || n == 0)
        return 1;
    double cap = (double)rate;
    pthread_mutex_lock(&t->mu);
    if (now_ms > t->tokens_ms) {
        t->tokens += (double)(now_ms - t->tokens_ms) * cap / 1000.0;
        if (t->tokens > cap)
            t->tokens = cap;
    }
    t->tokens_ms = now_ms;
    /* A request larger than a second's worth passes on a full bucket and leaves it in
     * debt: the average still holds, and no request size is refused for ever. */
    double need = (double)n < cap ? (double)n : cap;
    int ok = t->tokens >= need;
    if (ok)
        t->tokens -= (double)n;
    pthread_mutex_unlock(&t->mu);
    if (!ok) {
        atomic_fetch_add(&t->limited_rate, 1);
        atomic_fetch_add(&t->rejected, n);
        snprintf(msg, msglen, "tenant \"%s\": limit tenancy.max_samples_per_second (%" PRIu64
                 ") exceeded: %" PRIu64 " samples refused, retry later", t->id, rate, n);
    }
    return ok;
}

/* Under t->mu: 1 when h is in the set, else adds it when room allows (1) or not (0). */
static int set_admit(pt_tenant *t, uint64_t h, size_t max, int *grew_fail)
{
    if (pt_set64_has(&t->active_set, h))
        return 1;
    if (t->active_set.n >= max)
        return 0;
    if (pt_set64_add(&t->active_set, h) < 0) {
        *grew_fail = 1;
        return 0;
    }
    return 1;
}

size_t pt_tenant_gate(void *tenant, const uint64_t *series, size_t n, uint8_t *ok, char *msg,
                      size_t msglen)
{
    pt_tenant *t = tenant;
    pt_tenants *ts = t->ts;
    const pt_tenant_limits *lim = &ts->lim;
    size_t refused = 0;
    int nomem = 0;
    int64_t now_ms = pt_wall_ms();
    int64_t bucket = now_ms - now_ms % lim->bucket_ms;
    pthread_mutex_lock(&t->mu);
    if (bucket != t->bucket) { /* a new bucket: nothing is active yet */
        atomic_fetch_sub(&ts->tracked, t->active_set.n);
        pt_set64_clear(&t->active_set);
        t->bucket = bucket;
    }
    for (size_t i = 0; i < n; i++) {
        uint64_t h = series[i] ? series[i] : 1;
        /* With a limit, the set holds up to it; without, all sets together hold up to
         * track_max. */
        size_t tracked = atomic_load(&ts->tracked), before = t->active_set.n;
        size_t limit = lim->max_series ? lim->max_series
                       : tracked < lim->track_max ? before + 1 : before;
        ok[i] = (uint8_t)set_admit(t, h, limit, &nomem);
        if (t->active_set.n != before)
            atomic_fetch_add(&ts->tracked, 1);
        /* Without a limit the set only stops counting. */
        if (!ok[i] && !lim->max_series)
            ok[i] = 1;
        refused += !ok[i];
    }
    atomic_store(&t->active, t->active_set.n);
    pthread_mutex_unlock(&t->mu);
    if (refused) {
        atomic_fetch_add(&t->limited_series, 1);
        snprintf(msg, msglen, "tenant \"%s\": limit tenancy.max_series (%zu active series) "
                 "reached: %zu new series refused%s", t->id, lim->max_series, refused,
                 nomem ? " (out of memory)" : "");
    }
    return refused;
}

void pt_tenant_count(pt_tenant *t, uint64_t accepted, uint64_t rejected)
{
    atomic_fetch_add(&t->accepted, accepted);
    atomic_fetch_add(&t->rejected, rejected);
}

/* Appends printf output to b: 0 or PT_ENOMEM. */
static int bprintf(pt_buf *b, const char *fmt, ...)
{
    for (size_t want = 256;;) {
        char *p = (char *)pt_buf_room(b, want);
        if (!p)
            return PT_ENOMEM;
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(p, room, fmt, ap);
        va_end(ap);
        if (n < 0)
            return PT_ENOMEM;
        if ((size_t)n < room) {
            pt_buf_commit(b, (size_t)n);
            return 0;
        }
        want = (size_t)n + 1;
    }
}

/* A tenant's figures: accepted, rejected, max_series 429s, rate 429s, active series. */
static void figures(pt_tenant *t, uint64_t v[5])
{
    v[0] = atomic_load(&t->accepted);
    v[1] = atomic_load(&t->rejected);
    v[2] = atomic_load(&t->limited_series);
    v[3] = atomic_load(&t->limited_rate);
    v[4] = atomic_load(&t->active);
}

/* The line(s) of family f (pt_tenants_render's order) for one tenant label value. */
static int family_lines(pt_buf *b, const char *name, size_t f, const char *tenant,
                        const uint64_t v[5])
{
    if (f == 2)
        return bprintf(b, "%s{tenant=\"%s\",limit=\"max_series\"} %" PRIu64 "\n"
                          "%s{tenant=\"%s\",limit=\"max_samples_per_second\"} %" PRIu64 "\n",
                       name, tenant, v[2], name, tenant, v[3]);
    return bprintf(b, "%s{tenant=\"%s\"} %" PRIu64 "\n", name, tenant, v[f == 3 ? 4 : f]);
}

/* Label values are tenant ids (no '"' or '\\') or "~other", which no id can be. */
size_t pt_tenants_ids(pt_tenants *ts, char (*ids)[PT_TENANT_MAX + 1], size_t max)
{
    size_t n = 0;
    pthread_mutex_lock(&ts->mu);
    for (size_t i = 0; i <= ts->mask; i++)
        for (pt_tenant *t = ts->chains[i]; t && n < max; t = t->next)
            memcpy(ids[n++], t->id, sizeof(t->id));
    pthread_mutex_unlock(&ts->mu);
    return n;
}

long pt_tenants_render(pt_tenants *ts, pt_arena *a, const char **out)
{
    static const struct {
        const char *name, *help, *type;
    } fams[] = {
        {"promtable_tenant_samples_accepted_total",
         "Samples, histograms and exemplars stored, by tenant.", "counter"},
        {"promtable_tenant_samples_rejected_total",
         "Samples refused (invalid, or over a tenant limit), by tenant.", "counter"},
        {"promtable_tenant_limit_rejections_total",
         "Write requests answered 429 by a tenant limit, by tenant and limit.", "counter"},
        {"promtable_tenant_active_series",
         "Distinct series a tenant wrote in the current index bucket.", "gauge"},
    };
    pt_buf b;
    pt_buf_init_arena(&b, a, 0);
    pthread_mutex_lock(&ts->mu);
    uint64_t other[5] = {ts->gone_accepted, ts->gone_rejected, ts->gone_series, ts->gone_rate, 0};
    for (size_t i = 0; i <= ts->mask; i++)
        for (pt_tenant *t = ts->chains[i]; t; t = t->next) {
            uint64_t v[5];
            figures(t, v);
            for (int k = 0; k < 5 && !t->labelled; k++)
                other[k] += v[k];
        }
    int rv = 0;
    for (size_t f = 0; f < sizeof(fams) / sizeof(fams[0]) && rv == 0; f++) {
        rv = bprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", fams[f].name, fams[f].help,
                     fams[f].name, fams[f].type);
        for (size_t i = 0; i <= ts->mask; i++)
            for (pt_tenant *t = ts->chains[i]; t && rv == 0; t = t->next) {
                uint64_t v[5];
                figures(t, v);
                if (t->labelled)
                    rv = family_lines(&b, fams[f].name, f, t->id, v);
            }
        if (rv == 0)
            rv = family_lines(&b, fams[f].name, f, "~other", other);
    }
    size_t n = ts->n;
    pthread_mutex_unlock(&ts->mu);
    if (rv == 0)
        rv = bprintf(&b, "# HELP promtable_tenants Tenants kept (tenancy.max_tenants).\n"
                           "# TYPE promtable_tenants gauge\npromtable_tenants %zu\n", n);
    if (rv != 0)
        return -1;
    *out = (const char *)b.p;
    return (long)b.len;
}
