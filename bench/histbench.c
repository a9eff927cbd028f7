/* histbench: CPU cost of native histogram samples in base/histogram.h and base/hchunk.h —
 * chunk encoding and decoding (120-sample chunks) and cell encoding and decoding — and the
 * bytes each form takes, on a scraped-like integer histogram: schema 3, one span of B
 * buckets each growing by 0-3 a scrape, a two-decimal sum, 15 s apart.
 *
 * usage: histbench [BUCKETS [SAMPLES]]   (default 20 buckets, 1,200,000 samples)
 * Run it under `flock /tmp/pt-bench.lock` (docs/benchmarks.md). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hchunk.h"
#include "histogram.h"

#include "../tests/unit/rnd.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    size_t nb = argc > 1 ? strtoul(argv[1], NULL, 10) : 20;
    size_t n = argc > 2 ? strtoul(argv[2], NULL, 10) : 1200000;
    if (nb == 0 || nb > 10000 || n < 120) {
        fprintf(stderr, "usage: histbench [BUCKETS 1..10000 [SAMPLES >= 120]]\n");
        return 2;
    }
    n -= n % 120;
    pt_histogram *s = calloc(120, sizeof(*s)), got = PT_HISTOGRAM_INIT;
    int64_t *c = calloc(nb, sizeof(*c));
    uint8_t *cell = malloc(120 * (64 + 10 * nb));
    size_t at[121];
    double sum = 0, t_enc = 0, t_dec = 0, t_cenc = 0, t_cdec = 0;
    size_t chunk_bytes = 0, cell_bytes = 0, bad = 0;
    pt_hchunk_enc e;
    pt_hchunk_enc_init(&e, 1 << 24);
    for (size_t done = 0; done < n; done += 120) {
        for (size_t i = 0; i < 120; i++) {
            pt_histogram *h = &s[i];
            if (pt_histogram_reserve(h, 0, 1, 0, nb, 0) != 0)
                return 1;
            h->schema = 3;
            h->zero_threshold = ldexp(1, -128);
            h->pos_spans[0] = (pt_hist_span){-(int32_t)(nb / 2), (uint32_t)nb};
            h->t = 1700000000000LL + 15000 * (int64_t)(done + i);
            h->zero_count_int = (i ? s[i - 1].zero_count_int : 0) + rnd64() % 2;
            h->count_int = h->zero_count_int;
            int64_t last = 0;
            for (size_t k = 0; k < nb; k++) {
                c[k] += (int64_t)(rnd64() % 4);
                h->pos_deltas[k] = c[k] - last;
                last = c[k];
                h->count_int += (uint64_t)c[k];
            }
            sum += (double)(rnd64() % 10000) / 100;
            h->sum = sum;
        }
        double t0 = now();
        pt_hchunk_enc_next(&e);
        for (size_t i = 0; i < 120; i++)
            bad += pt_hchunk_enc_add(&e, &s[i]) != 0;
        double t1 = now();
        pt_slice ch = pt_hchunk_enc_bytes(&e);
        pt_hchunk_dec d;
        pt_hchunk_dec_init(&d, PT_HCHUNK_HISTOGRAM, ch.p, ch.n, pt_hchunk_enc_hints(&e));
        while (pt_hchunk_dec_next(&d, &got) == 1)
            ;
        pt_hchunk_dec_free(&d);
        double t2 = now();
        at[0] = 0;
        for (size_t i = 0; i < 120; i++)
            at[i + 1] = at[i] + pt_histogram_cell_encode(&s[i], cell + at[i]);
        cell_bytes += at[120];
        double t3 = now();
        for (size_t i = 0; i < 120; i++)
            bad += pt_histogram_cell_decode(cell + at[i], at[i + 1] - at[i], &got) != 0;
        double t4 = now();
        chunk_bytes += ch.n;
        t_enc += t1 - t0;
        t_dec += t2 - t1;
        t_cenc += t3 - t2;
        t_cdec += t4 - t3;
        c[0] = 0; /* a counter reset between chunks keeps values small */
        for (size_t k = 1; k < nb; k++)
            c[k] = 0;
    }
    printf("histbench: %zu buckets, %zu samples: chunk %.2f bytes/sample, encode %.0f ns, "
           "decode %.0f ns; cell %.2f bytes/sample, encode %.0f ns, decode %.0f ns%s\n",
           nb, n, (double)chunk_bytes / (double)n, t_enc / (double)n * 1e9, t_dec / (double)n * 1e9,
           (double)cell_bytes / (double)n, t_cenc / (double)n * 1e9, t_cdec / (double)n * 1e9,
           bad ? " (ERRORS)" : "");
    for (size_t i = 0; i < 120; i++)
        pt_histogram_free(&s[i]);
    pt_histogram_free(&got);
    pt_hchunk_enc_free(&e);
    free(s);
    free(c);
    free(cell);
    return bad != 0;
}
