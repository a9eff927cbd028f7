/* loadgen: the request bodies, built before the run, and --check (loadgen.h). */
#include "loadgen.h"

/* ------------------------------------------------------------------------------------ */
/* Request bodies                                                                       */

/* Per-thread scratch: the uncompressed body and the snappy output. */
typedef struct packer {
    uint8_t *raw;
    size_t rawcap;
    char *z;
    size_t zcap;
    /* remote write 2.0: churned label copies, label slices, refs, the symbol table */
    uint8_t *lab, *ts;
    size_t labcap, tscap;
    const uint8_t **sp;
    uint32_t *sn, *refs, *first;
    size_t spcap, sncap, refcap, firstcap;
    uint32_t *slot;
    size_t slotcap;
} packer;

static void grow(void *pp, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    free(*(void **)pp);
    *(void **)pp = lg_xmalloc(need);
    *cap = need;
}

/* Largest encoding of one Sample message: fixed64 value + varint timestamp, tagged. */
#define SAMPLE_MAX (1 + 8 + 1 + 10)
/* Largest growth of a series' labels by churn: the suffix and three longer varints. */
#define CHURN_MAX (GEN_SUFFIX_MAX + 3)

/* Body bi holds entries [bi*E, (bi+1)*E) of one endless stream: entry e is series
 * e % N carrying scrapes (e / N) * M .. + M-1, so each pass over all series is one
 * (or M) scrape interval(s) later than the previous pass.
 *
 * Encoding: a protobuf message may be sent as concatenated parts that a parser merges
 * (repeated fields append), so a TimeSeries is the series' pre-packed labels followed
 * by its samples; only the samples are encoded here, by hand, since running protobuf-c's
 * reflective packer over every label of every entry made building the pool (not the
 * run) take minutes. --check decodes the result with protobuf-c and compares.
 *
 * Returns how many entries carry a series no earlier body carried: a first pass, or a
 * generation churn gave the series since the previous pass. */
static void packer_free(packer *pk)
{
    free(pk->raw), free(pk->z), free(pk->lab), free(pk->ts), free(pk->sp), free(pk->sn);
    free(pk->refs), free(pk->first), free(pk->slot);
}

static void seal_body(pool *pl, packer *pk, uint64_t bi, size_t raw)
{
    size_t zmax = snappy_max_compressed_length(raw);
    grow(&pk->z, &pk->zcap, zmax);
    size_t zlen = zmax;
    if (snappy_compress((const char *)pk->raw, raw, pk->z, &zlen) != SNAPPY_OK) {
        fprintf(stderr, "loadgen: snappy_compress failed\n");
        exit(2);
    }
    pl->b[bi].p = lg_xmalloc(zlen);
    memcpy(pl->b[bi].p, pk->z, zlen);
    pl->b[bi].n = zlen;
    atomic_fetch_add(&pl->bytes, zlen);
    atomic_fetch_add(&pl->raw_bytes, raw);
}

static void grow_n(void *pp, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = realloc(*(void **)pp, c * size);
    if (!n) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(2);
    }
    *(void **)pp = n;
    *cap = c;
}

static uint64_t slice_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return lg_mix(h);
}

/* Entry e of the stream: its series, scrape group and generation suffix (*sl bytes in
 * sfx); *fresh counts it when its series is new to the receiver. */
static const series *entry(const opts *o, const model *m, uint64_t e, uint64_t *group,
                           char sfx[GEN_SUFFIX_MAX], size_t *sl, uint64_t *fresh)
{
    *group = e / m->n;
    uint64_t gen = lg_generation(o, m, e % m->n, *group);
    if (!*group || gen != lg_generation(o, m, e % m->n, *group - 1))
        (*fresh)++;
    *sl = lg_gen_suffix(gen, sfx);
    return &m->s[e % m->n];
}

/* An entry's samples as TimeSeries.samples (field 2 in both versions): their length,
 * then writing them. */
static size_t samples_len(const opts *o, const pool *pl, const series *s, uint64_t group)
{
    size_t n = 0;
    for (uint64_t k = 0; k < o->samples_per_entry; k++) {
        uint64_t round = group * o->samples_per_entry + k;
        int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
        n += 2 + 9 + 1 + pt_uvarint_size((uint64_t)t); /* field 2 tag, len < 128 */
    }
    return n;
}

static uint8_t *put_samples(uint8_t *p, const opts *o, const pool *pl, const series *s,
                            uint64_t group)
{
    for (uint64_t k = 0; k < o->samples_per_entry; k++) {
        uint64_t round = group * o->samples_per_entry + k;
        int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
        double v = lg_sample_value(s, round);
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        uint8_t smp[SAMPLE_MAX], *q = smp;
        *q++ = 0x09; /* Sample.value = 1, fixed64 little-endian */
        for (int i = 0; i < 8; i++)
            *q++ = (uint8_t)(bits >> (8 * i));
        *q++ = 0x10; /* Sample.timestamp = 2, varint */
        q = pt_put_uvarint(q, (uint64_t)t);
        *p++ = 0x12; /* TimeSeries.samples = 2 */
        *p++ = (uint8_t)(q - smp);
        memcpy(p, smp, (size_t)(q - smp));
        p += q - smp;
    }
    return p;
}

/* The 2.0 form of the same stream of entries as pack_body: a symbol table per body (each
 * distinct name and value once, "" first), every entry's labels as refs, packed, then its
 * samples. Prometheus builds its 2.0 requests the same way. */
static uint64_t pack_body_v2(const opts *o, const model *m, pool *pl, packer *pk, uint64_t bi)
{
    uint64_t E = pl->entries_per_body, M = o->samples_per_entry, fresh = 0;
    grow(&pk->lab, &pk->labcap, (size_t)(E * (m->max_blob + CHURN_MAX + 1)));
    size_t nsl = 0, nsym = 1, lo = 0;
    grow_n(&pk->first, &pk->firstcap, E + 1, sizeof(*pk->first));
    /* Every entry's label names and values, in order, as slices. */
    for (uint64_t j = 0; j < E; j++) {
        uint64_t group;
        char sfx[GEN_SUFFIX_MAX];
        size_t sl;
        const series *s = entry(o, m, bi * E + j, &group, sfx, &sl, &fresh);
        uint8_t *lb = pk->lab + lo, *le = lg_put_labels(lb, s, sfx, sl);
        lo += (size_t)(le - lb);
        pk->first[j] = (uint32_t)nsl;
        while (lb < le) { /* 0x0a len { 0x0a nlen name 0x12 vlen value } */
            uint64_t len, n;
            lb = (uint8_t *)lg_get_varint(lb + 1, &len);
            const uint8_t *f = lb, *fe = lb + len;
            while (f < fe) {
                f = lg_get_varint(f + 1, &n);
                grow_n(&pk->sp, &pk->spcap, nsl + 1, sizeof(*pk->sp));
                grow_n(&pk->sn, &pk->sncap, nsl + 1, sizeof(*pk->sn));
                pk->sp[nsl] = f, pk->sn[nsl++] = (uint32_t)n;
                f += n;
            }
            lb = (uint8_t *)fe;
        }
    }
    pk->first[E] = (uint32_t)nsl;
    /* Symbols: an open-addressed table of indexes into sp/sn; refs[i] for slice i. */
    size_t slots = 16;
    while (slots < 2 * (nsl + 1))
        slots <<= 1;
    grow_n(&pk->slot, &pk->slotcap, slots, sizeof(*pk->slot));
    memset(pk->slot, 0xff, slots * sizeof(*pk->slot));
    grow_n(&pk->refs, &pk->refcap, nsl + 1, sizeof(*pk->refs));
    size_t symbytes = 2;
    uint32_t *sym_of = lg_xmalloc((nsl + 1) * sizeof(*sym_of)); /* symbol k -> first slice */
    for (size_t i = 0; i < nsl; i++) {
        if (pk->sn[i] == 0) {
            pk->refs[i] = 0;
            continue;
        }
        size_t h = (size_t)slice_hash(pk->sp[i], pk->sn[i]) & (slots - 1);
        for (;; h = (h + 1) & (slots - 1)) {
            uint32_t k = pk->slot[h];
            if (k == UINT32_MAX) {
                pk->slot[h] = (uint32_t)i;
                pk->refs[i] = (uint32_t)nsym;
                sym_of[nsym++] = (uint32_t)i;
                symbytes += 1 + pt_uvarint_size(pk->sn[i]) + pk->sn[i];
                break;
            }
            if (pk->sn[k] == pk->sn[i] && memcmp(pk->sp[k], pk->sp[i], pk->sn[i]) == 0) {
                pk->refs[i] = pk->refs[k];
                break;
            }
        }
    }
    size_t bound = symbytes + (size_t)(E * (16 + 5 * (m->max_blob + 8) + M * (2 + SAMPLE_MAX)));
    grow(&pk->raw, &pk->rawcap, bound);
    uint8_t *p = pk->raw;
    *p++ = 0x22, *p++ = 0x00; /* Request.symbols = 4: "" first */
    for (size_t k = 1; k < nsym; k++) {
        uint32_t i = sym_of[k];
        *p++ = 0x22;
        p = pt_put_uvarint(p, pk->sn[i]);
        memcpy(p, pk->sp[i], pk->sn[i]);
        p += pk->sn[i];
    }
    free(sym_of);
    for (uint64_t j = 0; j < E; j++) {
        uint64_t e = bi * E + j, group = e / m->n;
        const series *s = &m->s[e % m->n];
        size_t refs_len = 0;
        for (uint32_t i = pk->first[j]; i < pk->first[j + 1]; i++)
            refs_len += pt_uvarint_size(pk->refs[i]);
        size_t ts_len = 1 + pt_uvarint_size(refs_len) + refs_len + samples_len(o, pl, s, group);
        *p++ = 0x2a; /* Request.timeseries = 5 */
        p = pt_put_uvarint(p, ts_len);
        *p++ = 0x0a; /* TimeSeries.labels_refs = 1, packed */
        p = pt_put_uvarint(p, refs_len);
        for (uint32_t i = pk->first[j]; i < pk->first[j + 1]; i++)
            p = pt_put_uvarint(p, pk->refs[i]);
        p = put_samples(p, o, pl, s, group);
    }
    seal_body(pl, pk, bi, (size_t)(p - pk->raw));
    return fresh;
}

static uint64_t pack_body(const opts *o, const model *m, pool *pl, packer *pk, uint64_t bi)
{
    if (o->protocol == 2)
        return pack_body_v2(o, m, pl, pk, bi);
    uint64_t E = pl->entries_per_body, M = o->samples_per_entry, fresh = 0;
    size_t bound = (size_t)(E * (m->max_blob + CHURN_MAX + 1 + 10 + M * (2 + SAMPLE_MAX)));
    grow(&pk->raw, &pk->rawcap, bound);
    uint8_t *p = pk->raw;
    for (uint64_t j = 0; j < E; j++) {
        uint64_t group;
        char sfx[GEN_SUFFIX_MAX];
        size_t sl;
        const series *s = entry(o, m, bi * E + j, &group, sfx, &sl, &fresh);
        size_t ts_len = lg_labels_len(s, sl) + samples_len(o, pl, s, group);
        *p++ = 0x0a; /* WriteRequest.timeseries = 1, length-delimited */
        p = pt_put_uvarint(p, ts_len);
        p = lg_put_labels(p, s, sfx, sl);
        p = put_samples(p, o, pl, s, group);
    }
    seal_body(pl, pk, bi, (size_t)(p - pk->raw));
    return fresh;
}

typedef struct build_arg {
    const opts *o;
    const model *m;
    pool *pl;
} build_arg;

static void *build_thread(void *arg)
{
    build_arg *a = arg;
    packer pk = {0};
    for (;;) {
        uint64_t bi = atomic_fetch_add(&a->pl->next, 1);
        if (bi >= a->pl->n)
            break;
        a->pl->fresh[bi + 1] = pack_body(a->o, a->m, a->pl, &pk, bi);
    }
    packer_free(&pk);
    return NULL;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sizes the pool from the first body: as many bodies as --pool-mb holds, fewer when the
 * run is a known number of requests, and never past the present (VictoriaMetrics, for
 * one, drops samples from the future). Builds on every CPU this process may use. */
void lg_build_pool(const opts *o, const model *m, pool *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->samples_per_body = o->samples_per_request;
    pl->entries_per_body = o->samples_per_request / o->samples_per_entry;
    int64_t now = wall_ms();
    pl->start_ms = o->start_ms >= 0 ? o->start_ms : (now - 86400000) / 3600000 * 3600000;

    packer pk = {0};
    body first;
    pl->b = &first;
    uint64_t fresh0 = pack_body(o, m, pl, &pk, 0);
    packer_free(&pk);

    uint64_t n = (o->pool_mb << 20) / first.n;
    if (n < 1)
        n = 1;
    if (o->requests && o->warmup_s == 0 && n > o->requests)
        n = o->requests;
    if (pl->start_ms + (int64_t)o->interval_ms < now) {
        /* Last scrape round body n-1 reaches must end before now. */
        uint64_t rounds = (uint64_t)(now - pl->start_ms) / o->interval_ms - 1;
        uint64_t groups = rounds / o->samples_per_entry;
        uint64_t max_entries = groups * m->n;
        uint64_t max_n = max_entries / pl->entries_per_body;
        if (max_n >= 1 && n > max_n)
            n = max_n;
    }
    pl->n = n;
    pl->b = lg_xmalloc(sizeof(*pl->b) * n);
    pl->b[0] = first;
    pl->fresh = lg_xmalloc(sizeof(*pl->fresh) * (n + 1));
    pl->fresh[0] = 0;
    pl->fresh[1] = fresh0;
    atomic_store(&pl->next, 1);

    cpu_set_t cs;
    int nthreads = 1;
    if (sched_getaffinity(0, sizeof cs, &cs) == 0)
        nthreads = CPU_COUNT(&cs);
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > 16)
        nthreads = 16;
    pthread_t th[16];
    build_arg a = {o, m, pl};
    int started = 0;
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&th[started], NULL, build_thread, &a) == 0)
            started++;
    build_thread(&a);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (uint64_t i = 1; i <= n; i++)
        pl->fresh[i] += pl->fresh[i - 1];
}

/* Distinct series in the first `bodies` bodies of the stream. A run longer than the
 * pool sends it again from the start, which adds none. */
uint64_t lg_series_sent(const pool *pl, uint64_t bodies)
{
    return pl->fresh[bodies < pl->n ? bodies : pl->n];
}

/* Byte order of two label fields, shorter first on a common prefix. */
static int bin_cmp(ProtobufCBinaryData a, ProtobufCBinaryData b)
{
    int c = memcmp(a.data, b.data, a.len < b.len ? a.len : b.len);
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

/* Decodes a body the way a receiver would and checks the invariants the spec asks of a
 * sender (sorted, unique, non-empty label names and values) and that every entry carries
 * exactly the series, timestamps and value bits the model says. */
/* The 2.0 body decoded by promtable's own decoder must carry, entry by entry, the labels
 * and samples of the 1.0 body of the same index. */
static int check_body_v2(const opts *o, const model *m, const pool *pl, uint64_t bi)
{
    const body *b = &pl->b[bi];
    pt_arena a;
    pt_arena_init(&a, 1 << 20, 0);
    pt_slice raw;
    pt_wreq w;
    char msg[256];
    int rv = -1;
    if (pt_snappy_decode(b->p, b->n, 1u << 30, &a, &raw, msg, sizeof(msg)) != 0 ||
        pt_wire_decode(raw.p, raw.n, 2, &a, &w, msg, sizeof(msg)) != 0 ||
        w.nseries != pl->entries_per_body || w.nsymbols == 0 || w.symbols[0].n != 0)
        goto out;
    for (size_t i = 0; i < w.nseries; i++) {
        const pt_wseries *ts = &w.series[i];
        uint64_t e = bi * pl->entries_per_body + i;
        const series *s = &m->s[e % m->n];
        char sfx[GEN_SUFFIX_MAX];
        size_t sl = lg_gen_suffix(lg_generation(o, m, e % m->n, e / m->n), sfx);
        uint8_t want[4096], *q = want, *we;
        if (ts->ref_problem || ts->nsamples != o->samples_per_entry || lg_labels_len(s, sl) > sizeof want)
            goto out;
        we = lg_put_labels(want, s, sfx, sl);
        for (uint32_t j = 0; j < ts->nlabels; j++) { /* re-encode as 1.0 Label fields */
            const pt_label *l = &ts->labels[j];
            size_t inner = 2 + pt_uvarint_size(l->name.n) + l->name.n + pt_uvarint_size(l->value.n) + l->value.n;
            uint8_t enc[4096], *x = enc;
            *x++ = 0x0a, x = pt_put_uvarint(x, inner);
            *x++ = 0x0a, x = pt_put_uvarint(x, l->name.n), memcpy(x, l->name.p, l->name.n), x += l->name.n;
            *x++ = 0x12, x = pt_put_uvarint(x, l->value.n), memcpy(x, l->value.p, l->value.n), x += l->value.n;
            if ((size_t)(we - q) < (size_t)(x - enc) || memcmp(q, enc, (size_t)(x - enc)))
                goto out;
            q += x - enc;
        }
        if (q != we)
            goto out;
        for (size_t j = 0; j < ts->nsamples; j++) {
            uint64_t round = e / m->n * o->samples_per_entry + j;
            double v = lg_sample_value(s, round);
            int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
            if (memcmp(&v, &ts->samples[j].value, sizeof v) || ts->samples[j].timestamp != t)
                goto out;
        }
    }
    rv = 0;
out:
    pt_arena_free(&a);
    return rv;
}

int lg_check_body(const opts *o, const model *m, const pool *pl, uint64_t bi,
                      int verbose)
{
    if (o->protocol == 2)
        return check_body_v2(o, m, pl, bi);
    const body *b = &pl->b[bi];
    size_t raw;
    if (snappy_uncompressed_length((const char *)b->p, b->n, &raw) != SNAPPY_OK)
        return -1;
    char *buf = lg_xmalloc(raw);
    int rv = -1;
    Prometheus__WriteRequest *req = NULL;
    if (snappy_uncompress((const char *)b->p, b->n, buf, &raw) != SNAPPY_OK)
        goto out;
    req = prometheus__write_request__unpack(NULL, raw, (const uint8_t *)buf);
    if (!req || req->n_timeseries != pl->entries_per_body)
        goto out;
    for (size_t i = 0; i < req->n_timeseries; i++) {
        const Prometheus__TimeSeries *ts = req->timeseries[i];
        if (ts->n_samples != o->samples_per_entry || ts->n_labels < 1 ||
            ts->labels[0]->name.len != 8 || memcmp(ts->labels[0]->name.data, "__name__", 8))
            goto out;
        for (size_t j = 0; j < ts->n_labels; j++) {
            if (!ts->labels[j]->name.len || !ts->labels[j]->value.len)
                goto out;
            if (j && bin_cmp(ts->labels[j - 1]->name, ts->labels[j]->name) >= 0)
                goto out;
        }
        uint64_t e = bi * pl->entries_per_body + i;
        const series *s = &m->s[e % m->n];
        char sfx[GEN_SUFFIX_MAX];
        size_t sl = lg_gen_suffix(lg_generation(o, m, e % m->n, e / m->n), sfx);
        Prometheus__TimeSeries lo = PROMETHEUS__TIME_SERIES__INIT;
        lo.n_labels = ts->n_labels;
        lo.labels = ts->labels;
        uint8_t again[4096], want[4096];
        size_t want_len = lg_labels_len(s, sl);
        if (prometheus__time_series__get_packed_size(&lo) != want_len || want_len > sizeof again)
            goto out;
        prometheus__time_series__pack(&lo, again);
        lg_put_labels(want, s, sfx, sl);
        if (memcmp(again, want, want_len))
            goto out;
        for (size_t j = 0; j < ts->n_samples; j++) {
            uint64_t round = e / m->n * o->samples_per_entry + j;
            double v = lg_sample_value(s, round);
            int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
            if (memcmp(&v, &ts->samples[j]->value, sizeof v) || ts->samples[j]->timestamp != t)
                goto out;
        }
    }
    if (verbose) {
        const Prometheus__TimeSeries *ts = req->timeseries[0];
        fprintf(stderr, "body %llu: %zu entries, %zu bytes raw, %zu compressed; first: {",
                (unsigned long long)bi, req->n_timeseries, raw, b->n);
        for (size_t j = 0; j < ts->n_labels; j++)
            fprintf(stderr, "%s%.*s=\"%.*s\"", j ? ", " : "",
                    (int)ts->labels[j]->name.len, (const char *)ts->labels[j]->name.data,
                    (int)ts->labels[j]->value.len, (const char *)ts->labels[j]->value.data);
        fprintf(stderr, "} %.17g @%lld\n", ts->samples[0]->value,
                (long long)ts->samples[0]->timestamp);
    }
    rv = 0;
out:
    if (req)
        prometheus__write_request__free_unpacked(req, NULL);
    free(buf);
    return rv;
}

void lg_free_pool(pool *pl)
{
    for (uint64_t i = 0; i < pl->n; i++)
        free(pl->b[i].p);
    free(pl->b);
    free(pl->fresh);
}

