/* Native histograms written, read as SAMPLES and streamed, on the embedded store (before
 * and after its flush): tests/unit/hist_conformance.h. */
#include "hist_conformance.h"

static int flush_embedded(void *be)
{
    return pt_embedded_flush(be);
}

/* Head bytes per sample: 10,000 samples of one series, histograms (20 buckets, schema 3,
 * integer, as a scrape makes them) or floats; printed, not asserted (a measurement). */
static double head_cost(int hist)
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
            h->zero_threshold = hc_bits(0x3800000000000000ULL);
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
    tstore_close(&s);
    return (double)(after.head_bytes - before.head_bytes) / (double)n;
}

int main(void)
{
    tstore s;
    if (tstore_open(&s) != 0) {
        printf("Bail out! cannot open an embedded store\n");
        return 1;
    }
    pt_hist_conformance(&s.faulty, flush_embedded, &s.emb, "embedded");
    tstore_close(&s);
    double hb = head_cost(1), fb = head_cost(0);
    ok(hb > 0 && fb > 0, "measured the embedded head's memory per sample");
    diag("embedded head, one series of 10,000 samples: %.1f bytes a histogram sample "
         "(20 integer buckets, schema 3; its cell value is %zu bytes), %.1f bytes a float sample",
         hb, pt_histogram_cell_size(&hc_want[0]), fb);
    for (size_t i = 0; i < HC_N; i++)
        pt_histogram_free(&hc_want[i]);
    return done_testing();
}
