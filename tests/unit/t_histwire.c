/* Native histograms written, read as SAMPLES and streamed, on the embedded store (before
 * and after its flush): tests/unit/hist_conformance.h. */
#include "chunk_helpers.h"
#include "hist_conformance.h"

static int flush_embedded(void *be)
{
    return pt_embedded_flush(be);
}

/* What the points table holds once flushed and compacted whole: its chunks' keys and
 * values (before RocksDB's block compression) and its table files. */
typedef struct disk_cost {
    uint64_t chunk_bytes, sst_bytes, chunks;
    unsigned fmts; /* bit f: a chunk of fmt f was seen */
} disk_cost;

static int measure_disk(pt_backend *b, disk_cost *d)
{
    embedded *e = b->state;
    if (pt_embedded_flush(b) != 0)
        return -1;
    pt_embedded_compact(b, 0);
    char *sst = rocksdb_property_value_cf(e->r.db, e->r.cf[CF_POINTS],
                                          "rocksdb.total-sst-files-size");
    *d = (disk_cost){.sst_bytes = sst ? strtoull(sst, NULL, 10) : 0};
    rocksdb_free(sst);
    chunk_census cc = chunk_census_of(b);
    d->chunk_bytes = cc.bytes;
    d->chunks = cc.chunks;
    d->fmts = cc.fmts;
    return 0;
}

/* Head bytes per sample: 10,000 samples of one series, histograms (20 buckets, schema 3,
 * integer, as a scrape makes them) or floats; printed, not asserted (a measurement). Then
 * flushed: what the samples take on disk, in *d. */
static double head_cost(int hist, disk_cost *d)
{
    tstore s;
    if (tstore_open(&s) != 0)
        return -1;
    hc_st = &s.st;
    pt_arena_init(&hc_a, 0, 0);
    pt_embedded_stats before, after;
    pt_embedded_get_stats(&s.emb, &before);
    size_t n = 0;
    for (size_t r = 0; r < 25; r++) {
        for (size_t i = 0; i < HC_N; i++, n++) {
            pt_histogram *h = &hc_want[i];
            *h = (pt_histogram){.mem = h->mem, .mem_cap = h->mem_cap};
            if (pt_histogram_reserve(h, 0, 1, 0, 20, 0) != 0)
                return -1;
            h->t = hc_t0 + (int64_t)n * 15000;
            h->schema = 3;
            h->reset_hint = PT_HIST_RESET_NO;
            h->zero_threshold = pt_bits_f64(0x3800000000000000ULL);
            h->sum = (double)n * 3.17;
            h->pos_spans[0] = (pt_hist_span){-10, 20};
            for (int b = 0; b < 20; b++)
                h->pos_deltas[b] = b == 0 ? (int64_t)n : (int64_t)(n % 3);
            h->count_int = 0;
            int64_t c = 0;
            for (int b = 0; b < 20; b++)
                c += h->pos_deltas[b], h->count_int += (uint64_t)c;
        }
        pt_write_result res;
        pt_slice body = hist ? hc_body_v1(0, HC_N, "cost", 0, 0)
                             : hc_body_v1(0, 0, "cost", HC_N, hc_t0 + (int64_t)n * 15000);
        if (hc_write(body, 1, &res) != 0 || res.histograms_written + res.samples_written != HC_N)
            return -1;
        pt_arena_reset(&hc_a);
    }
    pt_embedded_get_stats(&s.emb, &after);
    pt_arena_free(&hc_a);
    int rv = measure_disk(&s.emb, d);
    tstore_close(&s);
    return rv == 0 ? (double)(after.head_bytes - before.head_bytes) / (double)n : -1;
}

int main(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        BAIL_OUT("cannot open an embedded store");
    }
    pt_hist_conformance(&s.faulty, flush_embedded, &s.emb, "embedded");
    disk_cost cd = {0};
    int measured = measure_disk(&s.emb, &cd) == 0;
    ok(measured && (cd.fmts & 1u << 5),
       "the suite's flushed histograms are in fmt 5 chunks (fmt mask 0x%x)", cd.fmts);
    tstore_close(&s);
    disk_cost hd, fd;
    double hb = head_cost(1, &hd), fb = head_cost(0, &fd);
    ok(hb > 0 && fb > 0, "measured the embedded head's memory per sample");
    diag("embedded head, one series of 10,000 samples: %.1f bytes a histogram sample "
         "(20 integer buckets, schema 3; its cell value is %zu bytes), %.1f bytes a float sample",
         hb, pt_histogram_cell_size(&hc_want[0]), fb);
    ok(hd.chunks > 0 && fd.chunks > 0, "measured the embedded store's bytes per sample on disk");
    diag("embedded store, the same samples flushed and compacted: histograms %.1f bytes a "
         "sample in chunks (fmt mask 0x%x, %llu chunks), %.1f in table files; floats %.1f in "
         "chunks, %.1f in table files",
         (double)hd.chunk_bytes / (25.0 * HC_N), hd.fmts, (unsigned long long)hd.chunks,
         (double)hd.sst_bytes / (25.0 * HC_N), (double)fd.chunk_bytes / (25.0 * HC_N),
         (double)fd.sst_bytes / (25.0 * HC_N));
    for (size_t i = 0; i < HC_N; i++)
        pt_histogram_free(&hc_want[i]);
    return done_testing();
}
