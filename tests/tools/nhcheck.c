/*
 * nhcheck: compares integer native histograms read back from promtable (a remote read
 * SAMPLES answer, TimeSeries.histograms) with what the writer Prometheus answers through
 * its query API, for tests/e2e/native_histograms.sh.
 *
 *   nhcheck count ANSWER               prints how many histogram samples ANSWER holds
 *   nhcheck compare ANSWER WRITER      TAP lines, exit 1 when one is `not ok`
 *
 * ANSWER is the snappy ReadResponse; series are told apart by their `case` label. WRITER
 * holds lines the test made with jq from the writer's answers, numbers as the writer wrote
 * them (strings, read here with strtod, which is exact for Go's shortest round-trip form):
 *
 *   raw CASE TS COUNT SUM N [RULE LOWER UPPER COUNT]*N   a raw sample of a range selector
 *   at CASE T FUNC VALUE                                 FUNC(test_native_seconds) at T ms,
 *                                  FUNC count, sum, q0.5 or q0.9 (histogram_quantile)
 *
 * The buckets of a raw sample are derived here from promtable's spans, deltas and schema
 * in the order and shape Prometheus' query API writes them (empty buckets left out;
 * negative buckets from the lowest, boundary rule 1; the zero bucket [-z, z], rule 3;
 * positive buckets, rule 0) and must be the writer's: counts and rules exactly, bounds to
 * within 1e-13 relative. (Bounds are computed here from the bucket index as powers of two
 * or 2^(j/2^schema) with libm; Prometheus takes 2^(j/2^schema) from a table of decimal
 * constants that can be an ulp off the correctly rounded value, e.g. 2^-0.5. A wrong index
 * is off by a factor of at least 2^(1/256), so the tolerance cannot hide one.) count and
 * sum at an instant must be the writer's exactly; the quantiles are Prometheus 2.42's
 * interpolation (promql/quantile.go) evaluated here on promtable's bucket counts with the
 * writer's own bound values of that sample, and must also be the writer's exactly.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "readresp.h"

typedef struct {
    int rule;
    double lower, upper, count;
} bucket;

enum { MAX_BUCKETS = 4096 };

static pt_arena A;

static const char *case_of(const Prometheus__TimeSeries *t)
{
    static char v[64];
    for (size_t k = 0; k < t->n_labels; k++)
        if (t->labels[k]->name.len == 4 && memcmp(t->labels[k]->name.data, "case", 4) == 0) {
            snprintf(v, sizeof(v), "%.*s", (int)t->labels[k]->value.len,
                     (const char *)t->labels[k]->value.data);
            return v;
        }
    return "";
}

/* The upper bound of bucket idx (Prometheus' getBound). */
static double bound(int32_t idx, int32_t schema)
{
    if (schema <= 0)
        return ldexp(1.0, idx * (1 << -schema));
    int32_t per = 1 << schema;
    int32_t e = idx >= 0 ? idx / per : -((-idx + per - 1) / per);
    int32_t j = idx - e * per;
    return ldexp(exp2((double)j / per - 1.0), e + 1);
}

/* Absolute counts by bucket index of one side; returns how many. */
static size_t side(Prometheus__BucketSpan **spans, size_t ns, const int64_t *d, size_t nd,
                   int32_t *idx, double *cnt)
{
    size_t n = 0;
    int32_t at = 0;
    int64_t c = 0;
    for (size_t s = 0; s < ns; s++) {
        at += spans[s]->offset;
        for (uint32_t k = 0; k < spans[s]->length && n < nd && n < MAX_BUCKETS; k++) {
            c += d[n];
            idx[n] = at++;
            cnt[n++] = (double)c;
        }
    }
    return n;
}

/* The buckets as the query API writes them. */
static size_t buckets_of(const Prometheus__Histogram *h, bucket *out)
{
    static int32_t idx[MAX_BUCKETS];
    static double cnt[MAX_BUCKETS];
    size_t n = 0;
    size_t m = side(h->negative_spans, h->n_negative_spans, h->negative_deltas,
                    h->n_negative_deltas, idx, cnt);
    for (size_t i = m; i-- > 0;)
        if (cnt[i] != 0)
            out[n++] = (bucket){1, -bound(idx[i], h->schema), -bound(idx[i] - 1, h->schema),
                                cnt[i]};
    if (h->zero_count_int)
        out[n++] = (bucket){3, -h->zero_threshold, h->zero_threshold, (double)h->zero_count_int};
    m = side(h->positive_spans, h->n_positive_spans, h->positive_deltas, h->n_positive_deltas,
             idx, cnt);
    for (size_t i = 0; i < m; i++)
        if (cnt[i] != 0)
            out[n++] = (bucket){0, bound(idx[i] - 1, h->schema), bound(idx[i], h->schema),
                                cnt[i]};
    return n;
}

/* histogram_quantile(q, h) as Prometheus 2.42 computes it for a native histogram. */
static double quantile(double q, const Prometheus__Histogram *h, const bucket *bounds)
{
    static bucket b[MAX_BUCKETS];
    double total = (double)h->count_int;
    if (q < 0)
        return -INFINITY;
    if (q > 1)
        return INFINITY;
    if (total == 0 || isnan(q))
        return NAN;
    size_t n = buckets_of(h, b);
    if (n == 0)
        return NAN;
    for (size_t i = 0; bounds && i < n; i++)
        b[i].lower = bounds[i].lower, b[i].upper = bounds[i].upper;
    double rank = q * total, count = 0;
    bucket k = b[0];
    for (size_t i = 0; i < n; i++) {
        k = b[i];
        count += k.count;
        if (count >= rank)
            break;
    }
    if (k.lower < 0 && k.upper > 0) {
        if (h->n_negative_deltas == 0 && h->n_positive_deltas > 0)
            k.lower = 0;
        else if (h->n_positive_deltas == 0 && h->n_negative_deltas > 0)
            k.upper = 0;
    }
    if (count > total)
        count = total;
    if (count < rank)
        return k.upper;
    rank -= count - k.count;
    return k.lower + (k.upper - k.lower) * (rank / k.count);
}

static int tap_n, tap_bad;

static void tap(int cond, const char *what)
{
    printf("%sok %d - %s\n", cond ? "" : "not ", ++tap_n, what);
    tap_bad += !cond;
}

static int same(double a, double b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

static int near(double a, double b)
{
    return a == b || fabs(a - b) <= 1e-13 * fmax(fabs(a), fabs(b));
}

enum { MAX_CASES = 16, FUNCS = 4 };
static const char *const func_names[FUNCS] = {"count", "sum", "q0.5", "q0.9"};

typedef struct {
    char name[64];
    const Prometheus__TimeSeries *ts;
    bucket **bounds; /* per sample of ts: the writer's buckets, when they matched */
    size_t raw_seen, raw_bad, raw_next;
    size_t at_seen[FUNCS], at_bad[FUNCS];
} case_state;

static case_state cases[MAX_CASES];
static size_t ncases;

static case_state *find_case(const char *name)
{
    for (size_t i = 0; i < ncases; i++)
        if (strcmp(cases[i].name, name) == 0)
            return &cases[i];
    if (ncases == MAX_CASES)
        return NULL;
    snprintf(cases[ncases].name, sizeof(cases[ncases].name), "%s", name);
    return &cases[ncases++];
}

/* The raw line (after "raw CASE") against promtable's next sample of the case. */
static void check_raw(case_state *c, char *rest)
{
    static bucket mine[MAX_BUCKETS];
    c->raw_seen++;
    char *save = NULL;
    char *tok[4 * MAX_BUCKETS + 4];
    size_t nt = 0;
    for (char *t = strtok_r(rest, " \n", &save); t && nt < sizeof(tok) / sizeof(*tok);
         t = strtok_r(NULL, " \n", &save))
        tok[nt++] = t;
    const Prometheus__TimeSeries *ts = c->ts;
    if (nt < 4 || !ts || c->raw_next >= ts->n_histograms) {
        c->raw_bad++;
        printf("# %s: writer sample %s has no counterpart in promtable's answer\n", c->name,
               nt ? tok[0] : "?");
        return;
    }
    const Prometheus__Histogram *h = ts->histograms[c->raw_next++];
    int64_t t = strtoll(tok[0], NULL, 10);
    size_t nb = buckets_of(h, mine), wn = (size_t)strtoul(tok[3], NULL, 10);
    int good = t == h->timestamp && same(strtod(tok[1], NULL), (double)h->count_int) &&
               same(strtod(tok[2], NULL), h->sum) && wn == nb && nt == 4 + 4 * wn;
    for (size_t i = 0; good && i < nb; i++) {
        char **w = tok + 4 + 4 * i;
        good = atoi(w[0]) == mine[i].rule && near(strtod(w[1], NULL), mine[i].lower) &&
               near(strtod(w[2], NULL), mine[i].upper) && strtod(w[3], NULL) == mine[i].count;
        if (!good)
            printf("# %s at %" PRId64 ": bucket %zu: writer %s %s %s %s, promtable %d %.17g "
                   "%.17g %.17g\n",
                   c->name, t, i, w[0], w[1], w[2], w[3], mine[i].rule, mine[i].lower,
                   mine[i].upper, mine[i].count);
    }
    if (good) {
        bucket *keep = calloc(nb ? nb : 1, sizeof(*keep));
        for (size_t i = 0; keep && i < nb; i++)
            keep[i] = (bucket){mine[i].rule, strtod(tok[5 + 4 * i], NULL),
                               strtod(tok[6 + 4 * i], NULL), mine[i].count};
        c->bounds[c->raw_next - 1] = keep;
    } else {
        c->raw_bad++;
        printf("# %s: writer %s count %s sum %s, %zu buckets; promtable %" PRId64 " count %" PRIu64
               " sum %.17g, %zu buckets\n",
               c->name, tok[0], tok[1], tok[2], wn, h->timestamp, h->count_int, h->sum, nb);
    }
}

/* The at line (after "at CASE"): FUNC at T from promtable's latest sample at or before T. */
static void check_at(case_state *c, char *rest)
{
    char fn[16];
    long long t;
    char val[64];
    if (sscanf(rest, "%lld %15s %63s", &t, fn, val) != 3)
        return;
    int f = 0;
    while (f < FUNCS && strcmp(func_names[f], fn) != 0)
        f++;
    if (f == FUNCS)
        return;
    c->at_seen[f]++;
    const Prometheus__Histogram *h = NULL;
    const bucket *bounds = NULL;
    for (size_t i = 0; c->ts && i < c->ts->n_histograms; i++)
        if (c->ts->histograms[i]->timestamp <= t && c->ts->histograms[i]->timestamp > t - 300000)
            h = c->ts->histograms[i], bounds = c->bounds[i];
    double mine = NAN;
    if (h)
        mine = f == 0 ? (double)h->count_int
               : f == 1 ? h->sum
                        : quantile(f == 2 ? 0.5 : 0.9, h, bounds);
    if (!h || !same(mine, strtod(val, NULL))) {
        c->at_bad[f]++;
        printf("# %s: %s at %lld: writer %s, promtable %.17g%s\n", c->name, fn, t, val, mine,
               h ? "" : " (no sample)");
    }
}

static int compare(const Prometheus__ReadResponse *r, const char *writer)
{
    for (size_t q = 0; q < r->n_results; q++)
        for (size_t i = 0; i < r->results[q]->n_timeseries; i++) {
            case_state *c = find_case(case_of(r->results[q]->timeseries[i]));
            if (c) {
                c->ts = r->results[q]->timeseries[i];
                c->bounds = calloc(c->ts->n_histograms + 1, sizeof(*c->bounds));
            }
        }
    FILE *f = fopen(writer, "r");
    if (!f) {
        perror(writer);
        return 1;
    }
    static char line[1 << 20];
    while (fgets(line, sizeof(line), f)) {
        char kind[8], name[64];
        int off = 0;
        if (sscanf(line, "%7s %63s %n", kind, name, &off) != 2)
            continue;
        case_state *c = find_case(name);
        if (!c)
            continue;
        if (strcmp(kind, "raw") == 0)
            check_raw(c, line + off);
        else if (strcmp(kind, "at") == 0)
            check_at(c, line + off);
    }
    fclose(f);
    char what[256];
    for (size_t i = 0; i < ncases; i++) {
        case_state *c = &cases[i];
        size_t have = c->ts ? c->ts->n_histograms : 0;
        snprintf(what, sizeof(what),
                 "case=%.40s: promtable's %zu histograms are the writer's %zu raw samples, "
                 "bucket for bucket",
                 c->name, have, c->raw_seen);
        tap(c->raw_seen > 0 && c->raw_bad == 0 && have == c->raw_seen, what);
        for (size_t k = 0; k < have; k++)
            free(c->bounds[k]);
        free(c->bounds);
        for (int k = 0; k < FUNCS; k++) {
            snprintf(what, sizeof(what),
                     "case=%.40s: %s from promtable's histograms is the writer's at %zu instants",
                     c->name, func_names[k], c->at_seen[k]);
            tap(c->at_seen[k] > 0 && c->at_bad[k] == 0, what);
        }
    }
    /* What the exporter is meant to produce, so the comparison above covers it. */
    size_t spans = 0, negs = 0, zeros = 0;
    for (size_t i = 0; i < ncases; i++)
        for (size_t k = 0; cases[i].ts && k < cases[i].ts->n_histograms; k++) {
            const Prometheus__Histogram *h = cases[i].ts->histograms[k];
            spans += h->n_positive_spans > 1 && h->n_negative_spans > 1;
            negs += h->n_negative_deltas > 0;
            zeros += h->zero_count_int > 0;
        }
    snprintf(what, sizeof(what),
             "the read-back covers several spans a side (%zu samples), negative buckets (%zu "
             "samples), a populated zero bucket (%zu samples)",
             spans, negs, zeros);
    tap(spans && negs && zeros, what);
    printf("1..%d\n", tap_n);
    return tap_bad != 0;
}

int main(int argc, char **argv)
{
    pt_arena_init(&A, 1 << 16, 0);
    int rv = 2;
    if ((argc == 3 && strcmp(argv[1], "count") == 0) ||
        (argc == 4 && strcmp(argv[1], "compare") == 0)) {
        Prometheus__ReadResponse *r = pt_tool_read_response("nhcheck", argv[2], &A);
        if (!r) {
            rv = 1;
        } else if (argc == 3) {
            size_t n = 0;
            for (size_t q = 0; q < r->n_results; q++)
                for (size_t i = 0; i < r->results[q]->n_timeseries; i++)
                    n += r->results[q]->timeseries[i]->n_histograms;
            printf("%zu\n", n);
            rv = 0;
        } else {
            rv = compare(r, argv[3]);
        }
        if (r)
            protobuf_c_message_free_unpacked(&r->base, NULL);
    } else {
        fprintf(stderr, "usage: nhcheck count ANSWER | nhcheck compare ANSWER WRITER\n");
    }
    pt_arena_free(&A);
    return rv;
}
