/* rwtool: remote write and read bodies for the shell tests (curl carries them).
 *
 *   rwtool write 1|2 OUT SPEC...      snappy(WriteRequest 1.0 or Request 2.0) into OUT
 *   rwtool readreq OUT START END NAME=VALUE...   snappy(ReadRequest), one SAMPLES query;
 *                                     NAME!=VALUE, NAME=~RE, NAME!~RE for the other types
 *   rwtool readresp FILE              prints a SAMPLES ReadResponse, one sample a line:
 *                                     {labels} TS VALUE-BITS-HEX
 *                                     and one native histogram a line:
 *                                     {labels} TS h COUNT SUM-BITS SCHEMA ZT-BITS ZC
 *                                       pos:OFFSET/LENGTH,... d:DELTA,... hint:H
 *                                     and one exemplar a line:
 *                                     {labels} TS x NAME=VALUE,... VALUE-BITS-HEX
 *   rwtool bits NUMBER...             prints each number's float64 bits (16 hex digits),
 *                                     as strtod reads it (Go's and JSON's number forms,
 *                                     "+Inf", "-Inf")
 *
 * SPEC tokens (labels stay in the order given, so unsorted sets can be sent):
 *   s                 a new series
 *   l NAME VALUE      a label of the current series
 *   v VALUE TS        a sample; VALUE is 0x<16 hex digits> (the bits) or a number
 *   st TS             start timestamp of the last sample (2.0 Sample field 3)
 *   ct TS             created timestamp of the series (2.0 TimeSeries field 6)
 *   x NAME VALUE V TS an exemplar (NAME - for none)
 *   m TYPE HELP UNIT  metadata of the series (2.0)
 *   h TS              an integer native histogram (count 3, sum 4.5, schema 0, zero
 *                     threshold 1e-128, positive span 0/2, deltas 1 1), 1.0 and 2.0
 *   hb TS B           the same with B buckets (span 0/B, every delta 1)
 *   sym0 TEXT         symbols[0] is TEXT instead of "" (2.0)
 *   ref N             one raw extra labels_ref N (2.0)
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "decode.h"
#include "histpb.h"
#include "readresp.h"
#include "remote.pb-c.h"
#include "write_v2.pb-c.h"

enum { MAX_SERIES = 64, MAX_ITEMS = 16 };

typedef struct series {
    const char *ln[MAX_ITEMS], *lv[MAX_ITEMS];
    size_t nl;
    double v[MAX_ITEMS];
    int64_t t[MAX_ITEMS], st[MAX_ITEMS];
    size_t ns;
    int64_t ct;
    const char *xn[MAX_ITEMS], *xv[MAX_ITEMS];
    double xval[MAX_ITEMS];
    int64_t xt[MAX_ITEMS];
    size_t nx;
    int has_meta, mtype;
    const char *help, *unit;
    int64_t ht[MAX_ITEMS];
    uint32_t hb[MAX_ITEMS]; /* buckets of each histogram */
    size_t nh;
    uint32_t extra[MAX_ITEMS];
    size_t nextra;
} series;

static series S[MAX_SERIES];
static size_t NS;
static const char *sym0 = "";
static pt_arena A;

static double value_of(const char *s)
{
    if (strncmp(s, "0x", 2) == 0) {
        uint64_t b = strtoull(s + 2, NULL, 16);
        double d;
        memcpy(&d, &b, 8);
        return d;
    }
    return strtod(s, NULL);
}

static int parse(int argc, char **argv)
{
    series *c = NULL;
    for (int i = 0; i < argc; i++) {
        const char *t = argv[i];
#define NEED(k)                                                                                    \
    do {                                                                                           \
        if (i + (k) >= argc || (!c && strcmp(t, "s") && strcmp(t, "sym0"))) {                      \
            fprintf(stderr, "rwtool: %s needs %d arguments and a series\n", t, k);                 \
            return -1;                                                                             \
        }                                                                                          \
    } while (0)
        if (strcmp(t, "s") == 0) {
            if (NS == MAX_SERIES)
                return -1;
            c = &S[NS++];
        } else if (strcmp(t, "l") == 0) {
            NEED(2);
            c->ln[c->nl] = argv[++i], c->lv[c->nl++] = argv[++i];
        } else if (strcmp(t, "v") == 0) {
            NEED(2);
            c->v[c->ns] = value_of(argv[++i]);
            c->t[c->ns++] = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(t, "st") == 0) {
            NEED(1);
            c->st[c->ns ? c->ns - 1 : 0] = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(t, "ct") == 0) {
            NEED(1);
            c->ct = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(t, "x") == 0) {
            NEED(4);
            c->xn[c->nx] = argv[++i], c->xv[c->nx] = argv[++i];
            c->xval[c->nx] = value_of(argv[++i]);
            c->xt[c->nx++] = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(t, "m") == 0) {
            NEED(3);
            c->has_meta = 1;
            c->mtype = atoi(argv[++i]);
            c->help = argv[++i], c->unit = argv[++i];
        } else if (strcmp(t, "h") == 0) {
            NEED(1);
            c->hb[c->nh] = 2;
            c->ht[c->nh++] = strtoll(argv[++i], NULL, 10);
        } else if (strcmp(t, "hb") == 0) {
            NEED(2);
            c->ht[c->nh] = strtoll(argv[++i], NULL, 10);
            c->hb[c->nh++] = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else if (strcmp(t, "sym0") == 0) {
            NEED(1);
            sym0 = argv[++i];
        } else if (strcmp(t, "ref") == 0) {
            NEED(1);
            c->extra[c->nextra++] = (uint32_t)strtoul(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "rwtool: unknown token %s\n", t);
            return -1;
        }
        if (c && (c->nl >= MAX_ITEMS || c->ns >= MAX_ITEMS || c->nx >= MAX_ITEMS ||
                  c->nh >= MAX_ITEMS || c->nextra >= MAX_ITEMS))
            return -1;
    }
    return 0;
}

static void *alloc(size_t n)
{
    return pt_arena_calloc(&A, n ? n : 1);
}

static ProtobufCBinaryData bin(const char *s)
{
    return (ProtobufCBinaryData){strlen(s), (uint8_t *)s};
}

/* ---- 2.0 ---- */

static const char *syms[4096];
static size_t nsyms;

static uint32_t sym(const char *s)
{
    for (size_t i = 0; i < nsyms; i++)
        if (strcmp(syms[i], s) == 0)
            return (uint32_t)i;
    syms[nsyms] = s;
    return (uint32_t)nsyms++;
}

static Io__Prometheus__Write__V2__Histogram *histogram_v2(int64_t ts, uint32_t nb)
{
    Io__Prometheus__Write__V2__Histogram *h = alloc(sizeof(*h));
    io__prometheus__write__v2__histogram__init(h);
    h->count_case = IO__PROMETHEUS__WRITE__V2__HISTOGRAM__COUNT_COUNT_INT;
    h->count_int = (uint64_t)nb * (nb + 1) / 2;
    h->sum = 4.5;
    h->schema = 0;
    h->zero_threshold = 1e-128;
    h->timestamp = ts;
    Io__Prometheus__Write__V2__BucketSpan *sp = alloc(sizeof(*sp));
    io__prometheus__write__v2__bucket_span__init(sp);
    sp->offset = 0, sp->length = nb;
    h->n_positive_spans = 1;
    h->positive_spans = alloc(sizeof(void *));
    h->positive_spans[0] = sp;
    h->n_positive_deltas = nb;
    h->positive_deltas = alloc(nb * sizeof(int64_t));
    for (uint32_t k = 0; k < nb; k++)
        h->positive_deltas[k] = 1;
    return h;
}

static ProtobufCMessage *build_v2(void)
{
    Io__Prometheus__Write__V2__Request *r = alloc(sizeof(*r));
    io__prometheus__write__v2__request__init(r);
    syms[nsyms++] = sym0;
    r->n_timeseries = NS;
    r->timeseries = alloc(NS * sizeof(void *));
    for (size_t i = 0; i < NS; i++) {
        series *c = &S[i];
        Io__Prometheus__Write__V2__TimeSeries *t = alloc(sizeof(*t));
        io__prometheus__write__v2__time_series__init(t);
        t->labels_refs = alloc((2 * c->nl + c->nextra) * sizeof(uint32_t));
        for (size_t j = 0; j < c->nl; j++) {
            t->labels_refs[t->n_labels_refs++] = sym(c->ln[j]);
            t->labels_refs[t->n_labels_refs++] = sym(c->lv[j]);
        }
        for (size_t j = 0; j < c->nextra; j++)
            t->labels_refs[t->n_labels_refs++] = c->extra[j];
        t->n_samples = c->ns;
        t->samples = alloc(c->ns * sizeof(void *));
        for (size_t j = 0; j < c->ns; j++) {
            Io__Prometheus__Write__V2__Sample *s = alloc(sizeof(*s));
            io__prometheus__write__v2__sample__init(s);
            s->value = c->v[j], s->timestamp = c->t[j], s->start_timestamp = c->st[j];
            t->samples[j] = s;
        }
        t->created_timestamp = c->ct;
        t->n_exemplars = c->nx;
        t->exemplars = alloc(c->nx * sizeof(void *));
        for (size_t j = 0; j < c->nx; j++) {
            Io__Prometheus__Write__V2__Exemplar *x = alloc(sizeof(*x));
            io__prometheus__write__v2__exemplar__init(x);
            if (strcmp(c->xn[j], "-") != 0) {
                x->n_labels_refs = 2;
                x->labels_refs = alloc(2 * sizeof(uint32_t));
                x->labels_refs[0] = sym(c->xn[j]), x->labels_refs[1] = sym(c->xv[j]);
            }
            x->value = c->xval[j], x->timestamp = c->xt[j];
            t->exemplars[j] = x;
        }
        t->n_histograms = c->nh;
        t->histograms = alloc(c->nh * sizeof(void *));
        for (size_t j = 0; j < c->nh; j++)
            t->histograms[j] = histogram_v2(c->ht[j], c->hb[j]);
        if (c->has_meta) {
            Io__Prometheus__Write__V2__Metadata *m = alloc(sizeof(*m));
            io__prometheus__write__v2__metadata__init(m);
            m->type = (Io__Prometheus__Write__V2__Metadata__MetricType)c->mtype;
            m->help_ref = sym(c->help), m->unit_ref = sym(c->unit);
            t->metadata = m;
        }
        r->timeseries[i] = t;
    }
    r->n_symbols = nsyms;
    r->symbols = alloc(nsyms * sizeof(ProtobufCBinaryData));
    for (size_t i = 0; i < nsyms; i++)
        r->symbols[i] = bin(syms[i]);
    return &r->base;
}

/* ---- 1.0 ---- */

/* The 1.0 form of histogram_v2's histogram. */
static Prometheus__Histogram *histogram_v1(int64_t ts, uint32_t nb)
{
    pt_histogram h = PT_HISTOGRAM_INIT;
    if (pt_histogram_reserve(&h, 0, 1, 0, nb, 0) != 0)
        return NULL;
    h.t = ts, h.count_int = (uint64_t)nb * (nb + 1) / 2, h.sum = 4.5, h.zero_threshold = 1e-128;
    h.pos_spans[0] = (pt_hist_span){0, nb};
    for (uint32_t k = 0; k < nb; k++)
        h.pos_deltas[k] = 1;
    Prometheus__Histogram *m = pt_histpb_from(&A, &h);
    pt_histogram_free(&h);
    return m;
}

static ProtobufCMessage *build_v1(void)
{
    Prometheus__WriteRequest *r = alloc(sizeof(*r));
    prometheus__write_request__init(r);
    r->n_timeseries = NS;
    r->timeseries = alloc(NS * sizeof(void *));
    for (size_t i = 0; i < NS; i++) {
        series *c = &S[i];
        Prometheus__TimeSeries *t = alloc(sizeof(*t));
        prometheus__time_series__init(t);
        t->n_labels = c->nl;
        t->labels = alloc(c->nl * sizeof(void *));
        for (size_t j = 0; j < c->nl; j++) {
            Prometheus__Label *l = alloc(sizeof(*l));
            prometheus__label__init(l);
            l->name = bin(c->ln[j]), l->value = bin(c->lv[j]);
            t->labels[j] = l;
        }
        t->n_samples = c->ns;
        t->samples = alloc(c->ns * sizeof(void *));
        for (size_t j = 0; j < c->ns; j++) {
            Prometheus__Sample *s = alloc(sizeof(*s));
            prometheus__sample__init(s);
            s->value = c->v[j], s->timestamp = c->t[j];
            t->samples[j] = s;
        }
        t->n_histograms = c->nh;
        t->histograms = alloc(c->nh * sizeof(void *));
        for (size_t j = 0; j < c->nh; j++)
            if (!(t->histograms[j] = histogram_v1(c->ht[j], c->hb[j])))
                return NULL;
        r->timeseries[i] = t;
    }
    return &r->base;
}

static int write_body(const char *path, const ProtobufCMessage *m)
{
    size_t n = protobuf_c_message_get_packed_size(m);
    uint8_t *raw = alloc(n);
    protobuf_c_message_pack(m, raw);
    pt_slice z;
    if (pt_snappy_encode(raw, n, &A, &z) != 0)
        return 1;
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(z.p, 1, z.n, f) != z.n) {
        perror(path);
        return 1;
    }
    fclose(f);
    return 0;
}

static int readreq(int argc, char **argv)
{
    Prometheus__ReadRequest *r = alloc(sizeof(*r));
    prometheus__read_request__init(r);
    Prometheus__Query *q = alloc(sizeof(*q));
    prometheus__query__init(q);
    q->start_timestamp_ms = strtoll(argv[1], NULL, 10);
    q->end_timestamp_ms = strtoll(argv[2], NULL, 10);
    q->n_matchers = (size_t)(argc - 3);
    q->matchers = alloc(q->n_matchers * sizeof(void *));
    for (int i = 3; i < argc; i++) {
        Prometheus__LabelMatcher *lm = alloc(sizeof(*lm));
        prometheus__label_matcher__init(lm);
        char *op = strpbrk(argv[i], "=!");
        if (!op || (op[0] == '!' && op[1] != '=' && op[1] != '~'))
            return 2;
        int re = op[1] == '~', neg = op[0] == '!';
        lm->type =
            (Prometheus__LabelMatcher__Type)(re ? (neg ? PROMETHEUS__LABEL_MATCHER__TYPE__NRE
                                                       : PROMETHEUS__LABEL_MATCHER__TYPE__RE)
                                                : (neg ? PROMETHEUS__LABEL_MATCHER__TYPE__NEQ
                                                       : PROMETHEUS__LABEL_MATCHER__TYPE__EQ));
        *op = 0;
        lm->name = bin(argv[i]), lm->value = bin(op + (re || neg ? 2 : 1));
        q->matchers[i - 3] = lm;
    }
    r->n_queries = 1;
    r->queries = alloc(sizeof(void *));
    r->queries[0] = q;
    return write_body(argv[0], &r->base);
}


static void print_labels(const Prometheus__TimeSeries *t)
{
    printf("{");
    for (size_t k = 0; k < t->n_labels; k++)
        printf("%s%.*s=\"%.*s\"", k ? "," : "", (int)t->labels[k]->name.len,
               (const char *)t->labels[k]->name.data, (int)t->labels[k]->value.len,
               (const char *)t->labels[k]->value.data);
    printf("}");
}

/* An integer histogram's positive side and scalars (what the `h` token sends). */
static void print_histogram(const Prometheus__Histogram *h)
{
    printf(" %" PRId64 " h %" PRIu64 " %016" PRIx64 " %d %016" PRIx64 " %" PRIu64 " pos:",
           h->timestamp, h->count_int, pt_f64_bits(h->sum), (int)h->schema,
           pt_f64_bits(h->zero_threshold), h->zero_count_int);
    for (size_t k = 0; k < h->n_positive_spans; k++)
        printf("%s%d/%u", k ? "," : "", (int)h->positive_spans[k]->offset,
               (unsigned)h->positive_spans[k]->length);
    printf(" d:");
    for (size_t k = 0; k < h->n_positive_deltas; k++)
        printf("%s%" PRId64, k ? "," : "", h->positive_deltas[k]);
    printf(" hint:%d\n", (int)h->reset_hint);
}

static int readresp(const char *path)
{
    Prometheus__ReadResponse *r = pt_tool_read_response("rwtool", path, &A);
    if (!r)
        return 1;
    for (size_t q = 0; q < r->n_results; q++)
        for (size_t i = 0; i < r->results[q]->n_timeseries; i++) {
            const Prometheus__TimeSeries *t = r->results[q]->timeseries[i];
            for (size_t j = 0; j < t->n_samples; j++) {
                print_labels(t);
                printf(" %" PRId64 " %016" PRIx64 "\n", t->samples[j]->timestamp,
                       pt_f64_bits(t->samples[j]->value));
            }
            for (size_t j = 0; j < t->n_histograms; j++) {
                print_labels(t);
                print_histogram(t->histograms[j]);
            }
            for (size_t j = 0; j < t->n_exemplars; j++) {
                const Prometheus__Exemplar *x = t->exemplars[j];
                print_labels(t);
                printf(" %" PRId64 " x", x->timestamp);
                for (size_t k = 0; k < x->n_labels; k++)
                    printf("%s%.*s=%.*s", k ? "," : " ", (int)x->labels[k]->name.len,
                           (const char *)x->labels[k]->name.data, (int)x->labels[k]->value.len,
                           (const char *)x->labels[k]->value.data);
                printf(" %016" PRIx64 "\n", pt_f64_bits(x->value));
            }
        }
    protobuf_c_message_free_unpacked(&r->base, NULL);
    return 0;
}

int main(int argc, char **argv)
{
    pt_arena_init(&A, 1 << 16, 0);
    int rv = 2;
    if (argc >= 4 && strcmp(argv[1], "write") == 0) {
        if (parse(argc - 4, argv + 4) == 0) {
            ProtobufCMessage *m = argv[2][0] == '2' ? build_v2() : build_v1();
            rv = m ? write_body(argv[3], m) : 1;
        }
    } else if (argc >= 5 && strcmp(argv[1], "readreq") == 0) {
        rv = readreq(argc - 2, argv + 2);
    } else if (argc == 3 && strcmp(argv[1], "readresp") == 0) {
        rv = readresp(argv[2]);
    } else if (argc >= 3 && strcmp(argv[1], "bits") == 0) {
        rv = 0;
        for (int i = 2; i < argc; i++) {
            char *end;
            double v = strtod(argv[i], &end);
            if (*end || end == argv[i])
                rv = 2;
            else
                printf("%016" PRIx64 "\n", pt_f64_bits(v));
        }
    }
    if (rv == 2)
        fprintf(stderr, "usage: rwtool write 1|2 OUT SPEC... | readreq OUT START END "
                        "NAME=VALUE... | readresp FILE\n");
    pt_arena_free(&A);
    return rv;
}
