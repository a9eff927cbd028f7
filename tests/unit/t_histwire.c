/* Native histograms written, read as SAMPLES and streamed, on the embedded store (before
 * and after its flush): tests/unit/hist_conformance.h. */
#include "hist_conformance.h"

static int flush_embedded(void *be)
{
    return pt_embedded_flush(be);
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
    return done_testing();
}
