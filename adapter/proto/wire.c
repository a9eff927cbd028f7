/* The zero-copy remote write decoder (wire.h). Two passes over the body: the first, shallow
 * one counts the elements of each kind (reading the request's and each series' fields,
 * not inside labels, samples, histograms and metadata), the second checks everything and
 * fills arrays of exactly that size. Both run the same code: the first skips what it need
 * not read, only the second stores. */
#include "wire.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "bytes.h"
#include "error.h"

static const uint8_t empty_bytes[1] = {0};
#define EMPTY ((pt_slice){empty_bytes, 0})

typedef struct dec {
    const uint8_t *base; /* the body, for offsets in messages */
    int fill;            /* second pass: check everything, store */
    int v2;
    int err;
    char *msg;
    size_t msglen;
    /* Counts (first pass), then fill positions (second). */
    size_t nseries, nlabels, nsamples, nex, nexlabels, nhist, nmeta, nsym, nsrefs, nxrefs;
    pt_wseries *series;
    pt_label *labels, *exlabels;
    pt_wsample *samples;
    pt_wexemplar *ex;
    pt_whist *hist;
    pt_wmeta *meta;
    pt_slice *sym;
    uint32_t *srefs, *xrefs; /* 2.0 labels_refs of series and of exemplars, in wire order */
} dec;

typedef struct field {
    uint32_t num;
    unsigned wt;
    uint64_t v; /* varint value, fixed64 or fixed32 bits */
    pt_slice s; /* length-delimited content */
    const uint8_t *at;
} field;

enum { WT_VARINT = 0, WT_I64 = 1, WT_LEN = 2, WT_I32 = 5 };

static int fail(dec *d, const uint8_t *at, int code, const char *fmt, ...)
{
    if (!d->err) {
        char what[256];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(what, sizeof(what), fmt, ap);
        va_end(ap);
        snprintf(d->msg, d->msglen, "body is not a valid protobuf %s: %s (at byte %zu)",
                 d->v2 ? "io.prometheus.write.v2.Request" : "prometheus.WriteRequest", what,
                 (size_t)(at - d->base));
        d->err = code;
    }
    return -1;
}

/* A varint of at most 10 bytes, as protobuf-c reads it; bits past 64 are dropped. */
static size_t varint(const uint8_t *p, size_t rem, uint64_t *v)
{
    size_t max = rem < 10 ? rem : 10;
    uint64_t x = 0;
    for (size_t i = 0; i < max; i++) {
        x |= (uint64_t)(p[i] & 0x7f) << (7 * i);
        if (!(p[i] & 0x80)) {
            *v = x;
            return i + 1;
        }
    }
    return 0;
}

/* next_field for any field: every tag, length and varint size. */
static int next_field_any(dec *d, const uint8_t **pp, const uint8_t *e, field *f)
{
    const uint8_t *p = *pp;
    size_t rem = (size_t)(e - p);
    f->at = p;
    /* The tag: at most 5 bytes, low 32 bits kept; a first byte naming field 0 is refused. */
    if ((p[0] & 0xf8) == 0)
        return fail(d, p, PT_WIRE_EPROTO, "field number 0");
    f->wt = p[0] & 7;
    uint32_t tag = (uint32_t)(p[0] & 0x7f) >> 3;
    size_t used = 1;
    if (p[0] & 0x80) {
        size_t max = rem < 5 ? rem : 5, i;
        unsigned shift = 4;
        for (i = 1; i < max; i++) {
            tag |= (uint32_t)(p[i] & 0x7f) << shift;
            shift += 7;
            if (!(p[i] & 0x80))
                break;
        }
        if (i == max)
            return fail(d, p, PT_WIRE_EPROTO, "unterminated field tag");
        used = i + 1;
    }
    f->num = tag;
    p += used;
    rem -= used;
    switch (f->wt) {
    case WT_VARINT: {
        size_t n = varint(p, rem, &f->v);
        if (n == 0)
            return fail(d, p, PT_WIRE_EPROTO, "unterminated or overlong varint in field %u", tag);
        p += n;
        break;
    }
    case WT_I64:
        if (rem < 8)
            return fail(d, p, PT_WIRE_EPROTO, "field %u: 64-bit value cut short", tag);
        memcpy(&f->v, p, 8);
        p += 8;
        break;
    case WT_I32: {
        if (rem < 4)
            return fail(d, p, PT_WIRE_EPROTO, "field %u: 32-bit value cut short", tag);
        uint32_t w;
        memcpy(&w, p, 4);
        f->v = w;
        p += 4;
        break;
    }
    case WT_LEN: {
        /* At most 5 bytes of length, low 32 bits kept. */
        size_t max = rem < 5 ? rem : 5, i;
        uint32_t len = 0;
        for (i = 0; i < max; i++) {
            len |= (uint32_t)(p[i] & 0x7f) << (7 * i);
            if (!(p[i] & 0x80))
                break;
        }
        if (i == max)
            return fail(d, p, PT_WIRE_EPROTO, "field %u: bad length", tag);
        size_t hdr = i + 1;
        if ((uint64_t)len + hdr > 0xffffffffu)
            return fail(d, p, PT_WIRE_EHUGELEN, "field %u: length %u past the end", tag, len);
        if (len > rem - hdr)
            return fail(d, p, PT_WIRE_EPROTO,
                        "field %u: length %u past the end of its message (%zu bytes left)", tag,
                        len, rem - hdr);
        f->s = (pt_slice){p + hdr, len};
        p += hdr + len;
        break;
    }
    default: return fail(d, p, PT_WIRE_EPROTO, "field %u has wire type %u", tag, f->wt);
    }
    *pp = p;
    return 1;
}

/* Reads the field at *pp: 1, 0 at the end, -1 on error. Most fields of a remote write
 * body have a one-byte tag and a one-byte length or varint: those are read here, the rest
 * by next_field_any. */
static inline int next_field(dec *d, const uint8_t **pp, const uint8_t *e, field *f)
{
    const uint8_t *p = *pp;
    if (p == e)
        return 0;
    size_t rem = (size_t)(e - p);
    uint8_t b0 = p[0];
    f->at = p;
    f->num = b0 >> 3;
    f->wt = b0 & 7;
    if (rem >= 2 && b0 < 0x80 && (b0 & 0xf8)) {
        if (f->wt == WT_LEN && p[1] < 0x80 && p[1] <= rem - 2) {
            f->s = (pt_slice){p + 2, p[1]};
            *pp = p + 2 + p[1];
            return 1;
        }
        if (f->wt == WT_I64 && rem >= 9) {
            memcpy(&f->v, p + 1, 8);
            *pp = p + 9;
            return 1;
        }
        if (f->wt == WT_VARINT && p[1] < 0x80) {
            f->v = p[1];
            *pp = p + 2;
            return 1;
        }
    }
    return next_field_any(d, pp, e, f);
}

static int want(dec *d, const field *f, unsigned wt, const char *msg_name)
{
    if (f->wt == wt)
        return 0;
    return fail(d, f->at, PT_WIRE_EPROTO, "field %u of %s has wire type %u, expected %u", f->num,
                msg_name, f->wt, wt);
}


static int32_t unzigzag32(uint32_t v)
{
    return (int32_t)(v >> 1) ^ -(int32_t)(v & 1);
}

/* A packed run of varints: every element complete and at most 10 bytes. Counts them into
 * *n; with refs (not NULL) also stores each as uint32 from refs[*n] on. */
static int packed_varints(dec *d, const field *f, uint32_t *n, uint32_t *refs)
{
    const uint8_t *p = f->s.p, *e = p + f->s.n;
    while (p < e) {
        uint64_t v;
        size_t k = varint(p, (size_t)(e - p), &v);
        if (k == 0)
            return fail(d, p, PT_WIRE_EPROTO, "field %u: bad packed varint", f->num);
        if (refs)
            refs[*n] = (uint32_t)v;
        (*n)++;
        p += k;
    }
    return 0;
}

/* One element or one packed run of a repeated scalar into the view r. */
static int rep_scalar(dec *d, const field *f, pt_wrep *r, int fixed, const char *msg_name)
{
    r->field = f->num;
    if (f->wt == WT_LEN) {
        if (fixed) {
            if (f->s.n % 8)
                return fail(d, f->at, PT_WIRE_EPROTO, "field %u of %s: packed doubles of %zu bytes",
                            f->num, msg_name, f->s.n);
            r->n += (uint32_t)(f->s.n / 8);
            return 0;
        }
        return packed_varints(d, f, &r->n, NULL);
    }
    if (want(d, f, fixed ? WT_I64 : WT_VARINT, msg_name))
        return -1;
    r->n++;
    return 0;
}

static int parse_span(dec *d, pt_slice s, int32_t *offset, uint32_t *length)
{
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    *offset = 0, *length = 0;
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1) {
            if (want(d, &f, WT_VARINT, "a BucketSpan"))
                return -1;
            *offset = unzigzag32((uint32_t)f.v);
        } else if (f.num == 2) {
            if (want(d, &f, WT_VARINT, "a BucketSpan"))
                return -1;
            *length = (uint32_t)f.v;
        }
    }
    return rv;
}

static int parse_histogram(dec *d, pt_slice s)
{
    static const char name[] = "a Histogram";
    pt_whist h;
    memset(&h, 0, sizeof(h));
    pt_wrep *reps[] = {&h.negative_spans, &h.negative_deltas, &h.negative_counts,
                       &h.positive_spans, &h.positive_deltas, &h.positive_counts};
    for (size_t i = 0; i < sizeof(reps) / sizeof(reps[0]); i++)
        *reps[i] = (pt_wrep){s.p, (uint32_t)s.n, 0, (uint32_t)(8 + i)};
    h.custom_values = (pt_wrep){s.p, (uint32_t)s.n, 0, 16};
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        switch (f.num) {
        case 1:
        case 6:
            if (want(d, &f, WT_VARINT, name))
                return -1;
            if (f.num == 1)
                h.count_int = f.v, h.count_float = 0, h.count_case = PT_WCASE_INT;
            else
                h.zero_count_int = f.v, h.zero_count_float = 0, h.zero_count_case = PT_WCASE_INT;
            break;
        case 2:
        case 7:
            if (want(d, &f, WT_I64, name))
                return -1;
            if (f.num == 2)
                h.count_float = pt_bits_f64(f.v), h.count_int = 0, h.count_case = PT_WCASE_FLOAT;
            else
                h.zero_count_float = pt_bits_f64(f.v), h.zero_count_int = 0,
                h.zero_count_case = PT_WCASE_FLOAT;
            break;
        case 3:
        case 5:
            if (want(d, &f, WT_I64, name))
                return -1;
            *(f.num == 3 ? &h.sum : &h.zero_threshold) = pt_bits_f64(f.v);
            break;
        case 4:
            if (want(d, &f, WT_VARINT, name))
                return -1;
            h.schema = unzigzag32((uint32_t)f.v);
            break;
        case 8:
        case 11: {
            if (want(d, &f, WT_LEN, name))
                return -1;
            int32_t o;
            uint32_t l;
            if (parse_span(d, f.s, &o, &l) < 0)
                return -1;
            reps[f.num - 8]->n++;
            break;
        }
        case 9:
        case 12:
            if (rep_scalar(d, &f, reps[f.num - 8], 0, name))
                return -1;
            break;
        case 10:
        case 13:
            if (rep_scalar(d, &f, reps[f.num - 8], 1, name))
                return -1;
            break;
        case 14:
            if (want(d, &f, WT_VARINT, name))
                return -1;
            h.reset_hint = (int32_t)(uint32_t)f.v;
            break;
        case 15:
            if (want(d, &f, WT_VARINT, name))
                return -1;
            h.timestamp = (int64_t)f.v;
            break;
        case 16:
            if (rep_scalar(d, &f, &h.custom_values, 1, name))
                return -1;
            break;
        case 17:
            if (!d->v2)
                break; /* not a 1.0 field */
            if (want(d, &f, WT_VARINT, name))
                return -1;
            h.start_timestamp = (int64_t)f.v;
            break;
        default: break;
        }
    }
    if (rv < 0)
        return -1;
    if (d->fill)
        d->hist[d->nhist] = h;
    d->nhist++;
    return 0;
}

static int parse_label(dec *d, pt_slice s, pt_label *out)
{
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    pt_label l = {EMPTY, EMPTY};
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1 || f.num == 2) {
            if (want(d, &f, WT_LEN, "a Label"))
                return -1;
            *(f.num == 1 ? &l.name : &l.value) = f.s;
        }
    }
    if (rv < 0)
        return -1;
    *out = l;
    return 0;
}

static int parse_sample(dec *d, pt_slice s)
{
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    pt_wsample x = {0, 0, 0};
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1) {
            if (want(d, &f, WT_I64, "a Sample"))
                return -1;
            x.value = pt_bits_f64(f.v);
        } else if (f.num == 2 || (f.num == 3 && d->v2)) {
            if (want(d, &f, WT_VARINT, "a Sample"))
                return -1;
            *(f.num == 2 ? &x.timestamp : &x.start_timestamp) = (int64_t)f.v;
        }
    }
    if (rv < 0)
        return -1;
    if (d->fill)
        d->samples[d->nsamples] = x;
    d->nsamples++;
    return 0;
}

/* labels_refs of a 2.0 series or exemplar: one ref or a packed run, into refs (second
 * pass) at *pos; *n counts them. */
static int refs_field(dec *d, const field *f, uint32_t *refs, size_t *pos, uint32_t *n,
                      const char *msg_name)
{
    uint32_t k = 0;
    if (f->wt == WT_LEN && !d->fill) {
        for (size_t i = 0; i < f->s.n; i++) /* a bound; the second pass checks them */
            k += !(f->s.p[i] & 0x80);
    } else if (f->wt == WT_LEN) {
        if (packed_varints(d, f, &k, refs + *pos))
            return -1;
    } else {
        if (want(d, f, WT_VARINT, msg_name))
            return -1;
        if (d->fill)
            refs[*pos] = (uint32_t)f->v;
        k = 1;
    }
    *pos += k;
    *n += k;
    return 0;
}

static int parse_exemplar(dec *d, pt_slice s)
{
    static const char name[] = "an Exemplar";
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    pt_wexemplar x = {.labels = d->fill ? d->exlabels + d->nexlabels : NULL};
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1) {
            if (d->v2) {
                /* refs now, resolved with the symbols at the end; nlabels counts refs */
                if (refs_field(d, &f, d->xrefs, &d->nxrefs, &x.nlabels, name))
                    return -1;
                continue;
            }
            if (want(d, &f, WT_LEN, name))
                return -1;
            pt_label l;
            if (parse_label(d, f.s, &l))
                return -1;
            if (d->fill)
                d->exlabels[d->nexlabels] = l;
            d->nexlabels++;
            x.nlabels++;
        } else if (f.num == 2) {
            if (want(d, &f, WT_I64, name))
                return -1;
            x.value = pt_bits_f64(f.v);
        } else if (f.num == 3) {
            if (want(d, &f, WT_VARINT, name))
                return -1;
            x.timestamp = (int64_t)f.v;
        }
    }
    if (rv < 0)
        return -1;
    if (d->fill)
        d->ex[d->nex] = x;
    d->nex++;
    return 0;
}

/* 2.0 Metadata: type and the help and unit refs (resolved at the end). */
static int parse_meta_v2(dec *d, pt_slice s, pt_wmeta *m)
{
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    /* A repeated singular message merges in protobuf-c such that the last one's scalars
     * win whole, sent or not: start from zero each time. */
    *m = (pt_wmeta){0, EMPTY, {NULL, 0}, {NULL, 0}};
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1 || f.num == 3 || f.num == 4) {
            if (want(d, &f, WT_VARINT, "a Metadata"))
                return -1;
            if (f.num == 1)
                m->type = (int32_t)(uint32_t)f.v;
            else
                (f.num == 3 ? &m->help : &m->unit)->n = (uint32_t)f.v;
        }
    }
    return rv;
}

static int parse_series(dec *d, pt_slice s)
{
    static const char name[] = "a TimeSeries";
    pt_wseries ts;
    memset(&ts, 0, sizeof(ts));
    if (d->fill) {
        ts.labels = d->labels + d->nlabels;
        ts.samples = d->samples + d->nsamples;
        ts.exemplars = d->ex + d->nex;
        ts.histograms = d->hist + d->nhist;
    }
    ts.meta = (pt_wmeta){0, EMPTY, {NULL, 0}, {NULL, 0}};
    size_t s0 = d->nsamples, x0 = d->nex, h0 = d->nhist;
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    /* 1.0: 1 labels, 2 samples, 3 exemplars, 4 histograms; 2.0: 1 labels_refs, 2 samples,
     * 3 histograms, 4 exemplars, 5 metadata, 6 created_timestamp. */
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        unsigned kind = f.num;
        if (d->v2 && (kind == 3 || kind == 4))
            kind = 7 - kind;
        if (kind == 1 && d->v2) {
            if (refs_field(d, &f, d->srefs, &d->nsrefs, &ts.nlabels, name))
                return -1;
            continue;
        }
        if (kind == 6 && d->v2) {
            if (want(d, &f, WT_VARINT, name))
                return -1;
            ts.created_timestamp = (int64_t)f.v;
            continue;
        }
        if (kind < 1 || kind > 5 || (kind == 5 && !d->v2))
            continue;
        if (want(d, &f, WT_LEN, name))
            return -1;
        if (!d->fill && kind != 3) { /* counting: labels, samples, histograms, metadata */
            ts.nlabels += kind == 1;
            d->nlabels += kind == 1;
            d->nsamples += kind == 2;
            d->nhist += kind == 4;
            continue;
        }
        switch (kind) {
        case 1: {
            pt_label l;
            if (parse_label(d, f.s, &l))
                return -1;
            if (d->fill)
                d->labels[d->nlabels] = l;
            d->nlabels++;
            ts.nlabels++;
            break;
        }
        case 2: rv = parse_sample(d, f.s); break;
        case 3: rv = parse_exemplar(d, f.s); break;
        case 4: rv = parse_histogram(d, f.s); break;
        case 5:
            rv = parse_meta_v2(d, f.s, &ts.meta);
            ts.has_meta = 1;
            break;
        }
        if (rv < 0)
            return -1;
    }
    if (rv < 0)
        return -1;
    ts.nsamples = d->nsamples - s0;
    ts.nexemplars = d->nex - x0;
    ts.nhistograms = d->nhist - h0;
    if (d->fill)
        d->series[d->nseries] = ts;
    d->nseries++;
    return 0;
}

static int parse_meta_v1(dec *d, pt_slice s)
{
    static const char name[] = "a MetricMetadata";
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    pt_wmeta m = {.family = EMPTY, .help = EMPTY, .unit = EMPTY};
    if (!d->fill) {
        d->nmeta++;
        return 0;
    }
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (f.num == 1) {
            if (want(d, &f, WT_VARINT, name))
                return -1;
            m.type = (int32_t)(uint32_t)f.v;
        } else if (f.num == 2 || f.num == 4 || f.num == 5) {
            if (want(d, &f, WT_LEN, name))
                return -1;
            *(f.num == 2 ? &m.family : f.num == 4 ? &m.help : &m.unit) = f.s;
        }
    }
    if (rv < 0)
        return -1;
    if (d->fill)
        d->meta[d->nmeta] = m;
    d->nmeta++;
    return 0;
}

static int parse_request(dec *d, pt_slice s)
{
    const uint8_t *p = s.p, *e = s.p + s.n;
    field f;
    int rv;
    const char *name = d->v2 ? "the Request" : "the WriteRequest";
    while ((rv = next_field(d, &p, e, &f)) > 0) {
        if (d->v2 ? f.num == 5 : f.num == 1) {
            if (want(d, &f, WT_LEN, name) || parse_series(d, f.s))
                return -1;
        } else if (!d->v2 && f.num == 3) {
            if (want(d, &f, WT_LEN, name) || parse_meta_v1(d, f.s))
                return -1;
        } else if (d->v2 && f.num == 4) {
            if (want(d, &f, WT_LEN, name))
                return -1;
            if (d->fill)
                d->sym[d->nsym] = f.s;
            d->nsym++;
        }
    }
    return rv;
}

static void *take(pt_arena *a, size_t n, size_t size)
{
    return pt_arena_alloc(a, (n ? n : 1) * size);
}

/* Resolves a run of 2.0 refs into labels; returns the PT_WREF_* problem, *bad the ref. */
static uint8_t resolve(const dec *d, const uint32_t *refs, uint32_t n, pt_label *out, uint32_t *bad)
{
    if (n % 2)
        return PT_WREF_ODD;
    for (uint32_t i = 0; i < n; i++)
        if (refs[i] >= d->nsym) {
            *bad = refs[i];
            return PT_WREF_RANGE;
        }
    for (uint32_t i = 0; i < n / 2; i++)
        out[i] = (pt_label){d->sym[refs[2 * i]], d->sym[refs[2 * i + 1]]};
    return PT_WREF_OK;
}

static int meta_ref(const dec *d, pt_slice *s, uint32_t *bad)
{
    uint32_t ref = (uint32_t)s->n;
    if (ref >= d->nsym) {
        *bad = ref;
        *s = EMPTY;
        return 0;
    }
    *s = d->sym[ref];
    return 1;
}

static void resolve_v2(dec *d)
{
    size_t so = 0, lo = 0, xo = 0, xl = 0;
    for (size_t i = 0; i < d->nseries; i++) {
        pt_wseries *ts = &d->series[i];
        uint32_t n = ts->nlabels;
        ts->labels = d->labels + lo;
        ts->ref_problem = resolve(d, d->srefs + so, n, ts->labels, &ts->bad_ref);
        so += n;
        ts->nlabels = ts->ref_problem ? 0 : n / 2;
        lo += ts->nlabels;
        if (ts->has_meta && !ts->ref_problem) {
            if (!meta_ref(d, &ts->meta.help, &ts->bad_ref) ||
                !meta_ref(d, &ts->meta.unit, &ts->bad_ref))
                ts->ref_problem = PT_WREF_RANGE;
        }
        if (!ts->has_meta)
            ts->meta.help = ts->meta.unit = EMPTY;
        for (size_t j = 0; j < ts->nexemplars; j++) {
            pt_wexemplar *x = &ts->exemplars[j];
            uint32_t k = x->nlabels;
            x->labels = d->exlabels + xl;
            uint32_t bad;
            x->ref_problem = resolve(d, d->xrefs + xo, k, x->labels, &bad);
            xo += k;
            x->nlabels = x->ref_problem ? 0 : k / 2;
            xl += x->nlabels;
        }
    }
}

int pt_wire_decode(const uint8_t *buf, size_t len, int version, pt_arena *a, pt_wreq *out,
                   char *msg, size_t msglen)
{
    dec d;
    memset(&d, 0, sizeof(d));
    d.base = buf;
    d.v2 = version == 2;
    d.msg = msg;
    d.msglen = msglen;
    pt_slice body = {len ? buf : empty_bytes, len};
    if (parse_request(&d, body) < 0)
        return d.err;
    dec c = d; /* the counts */
    memset(&d, 0, sizeof(d));
    d.base = buf, d.v2 = c.v2, d.msg = msg, d.msglen = msglen, d.fill = 1;
    d.series = take(a, c.nseries, sizeof(*d.series));
    d.samples = take(a, c.nsamples, sizeof(*d.samples));
    d.ex = take(a, c.nex, sizeof(*d.ex));
    d.hist = take(a, c.nhist, sizeof(*d.hist));
    d.meta = take(a, c.nmeta, sizeof(*d.meta));
    d.sym = take(a, c.nsym, sizeof(*d.sym));
    d.srefs = take(a, c.nsrefs, sizeof(*d.srefs));
    d.xrefs = take(a, c.nxrefs, sizeof(*d.xrefs));
    d.labels = take(a, c.nlabels + c.nsrefs / 2, sizeof(*d.labels));
    d.exlabels = take(a, c.nexlabels + c.nxrefs / 2, sizeof(*d.exlabels));
    if (!d.series || !d.samples || !d.ex || !d.hist || !d.meta || !d.sym || !d.srefs || !d.xrefs ||
        !d.labels || !d.exlabels) {
        snprintf(msg, msglen,
                 "decoding the request (%zu series, %zu samples) needs more memory "
                 "than the per-request limit",
                 c.nseries, c.nsamples);
        return PT_WIRE_ENOMEM;
    }
    if (parse_request(&d, body) < 0)
        return d.err;
    if (d.v2)
        resolve_v2(&d);
    *out = (pt_wreq){d.v2 ? 2 : 1, d.series, d.nseries,  d.meta, d.nmeta,
                     d.sym,        d.nsym,   d.nsamples, d.nex,  d.nhist};
    return 0;
}

/* ---- views ---- */

void pt_wrep_iter(const pt_wrep *r, pt_wrep_it *it)
{
    it->p = r->msg;
    it->e = r->msg + (r->n ? r->len : 0);
    it->rp = it->re = NULL;
    it->field = r->field;
}

/* The next field of it's message with its number (the message is known to be valid). */
static int rep_field(pt_wrep_it *it, field *f)
{
    dec d;
    memset(&d, 0, sizeof(d));
    char m[8];
    d.msg = m, d.msglen = sizeof(m), d.base = it->p;
    while (next_field(&d, &it->p, it->e, f) > 0)
        if (f->num == it->field)
            return 1;
    return 0;
}

int pt_wrep_next(pt_wrep_it *it, uint64_t *raw)
{
    int fixed = it->field == 10 || it->field == 13 || it->field == 16;
    for (;;) {
        if (it->rp < it->re) {
            if (fixed) {
                memcpy(raw, it->rp, 8);
                it->rp += 8;
            } else {
                it->rp += varint(it->rp, (size_t)(it->re - it->rp), raw);
            }
            return 1;
        }
        field f;
        if (!rep_field(it, &f))
            return 0;
        if (f.wt == WT_LEN) {
            it->rp = f.s.p, it->re = f.s.p + f.s.n;
            continue;
        }
        *raw = f.v;
        return 1;
    }
}

int pt_wspan_next(pt_wrep_it *it, int32_t *offset, uint32_t *length)
{
    field f;
    if (!rep_field(it, &f))
        return 0;
    dec d;
    memset(&d, 0, sizeof(d));
    char m[8];
    d.msg = m, d.msglen = sizeof(m), d.base = f.s.p;
    parse_span(&d, f.s, offset, length);
    return 1;
}

/* Reads the spans of one span field into sp. */
static void read_spans(const pt_wrep *r, pt_hist_span *sp)
{
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    int32_t off;
    uint32_t len;
    for (size_t i = 0; pt_wspan_next(&it, &off, &len); i++)
        sp[i] = (pt_hist_span){off, len};
}

/* Reads a repeated sint64 (zig-zag) or double field as 8-byte elements into out. */
static void read_elems(const pt_wrep *r, int zigzag, void *out)
{
    pt_wrep_it it;
    pt_wrep_iter(r, &it);
    uint64_t raw;
    for (uint8_t *p = out; pt_wrep_next(&it, &raw); p += 8) {
        if (zigzag) {
            int64_t d = pt_wire_unzigzag64(raw);
            memcpy(p, &d, 8);
        } else {
            memcpy(p, &raw, 8);
        }
    }
}

int pt_wire_histogram(const pt_whist *w, pt_histogram *h, char *why, size_t whylen)
{
    int is_float = w->count_case == PT_WCASE_FLOAT;
    if (w->zero_count_case != PT_WCASE_NONE &&
        (w->zero_count_case == PT_WCASE_FLOAT) != is_float) {
        snprintf(why, whylen, "%s count with a %s zero count", is_float ? "float" : "integer",
                 is_float ? "integer" : "float");
        return PT_EBADREQ;
    }
    const pt_wrep *neg = is_float ? &w->negative_counts : &w->negative_deltas;
    const pt_wrep *pos = is_float ? &w->positive_counts : &w->positive_deltas;
    const pt_wrep *neg_other = is_float ? &w->negative_deltas : &w->negative_counts;
    const pt_wrep *pos_other = is_float ? &w->positive_deltas : &w->positive_counts;
    if (neg_other->n || pos_other->n) {
        snprintf(why, whylen, "%s histogram with bucket %s", is_float ? "float" : "integer",
                 is_float ? "deltas" : "counts");
        return PT_EBADREQ;
    }
    h->is_float = (uint8_t)is_float;
    int rv = pt_histogram_reserve(h, w->negative_spans.n, w->positive_spans.n, neg->n, pos->n,
                                  w->custom_values.n);
    if (rv == PT_ETOOLARGE) {
        snprintf(why, whylen, "more than %zu spans, buckets and custom values",
                 (size_t)PT_HIST_MAX_ELEMS);
        return PT_EBADREQ;
    }
    if (rv != 0)
        return rv;
    h->t = w->timestamp;
    h->schema = w->schema;
    h->reset_hint = (uint8_t)(w->reset_hint >= 0 && w->reset_hint <= 255 ? w->reset_hint : 255);
    h->count_int = is_float ? 0 : w->count_int;
    h->zero_count_int = is_float ? 0 : w->zero_count_int;
    h->count_float = is_float ? w->count_float : 0;
    h->zero_count_float = is_float ? w->zero_count_float : 0;
    h->sum = w->sum;
    h->zero_threshold = w->zero_threshold;
    read_spans(&w->negative_spans, h->neg_spans);
    read_spans(&w->positive_spans, h->pos_spans);
    read_elems(neg, !is_float, is_float ? (void *)h->neg_counts : (void *)h->neg_deltas);
    read_elems(pos, !is_float, is_float ? (void *)h->pos_counts : (void *)h->pos_deltas);
    read_elems(&w->custom_values, 0, h->custom_values);
    return pt_histogram_validate(h, why, whylen);
}
