/* Exemplars written and read as SAMPLES on the embedded store (before and after its
 * flush): tests/unit/exemplar_conformance.h. */
#include "exemplar_conformance.h"

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
    pt_exemplar_conformance(&s.faulty, flush_embedded, &s.emb, "embedded");
    tstore_close(&s);
    return done_testing();
}
