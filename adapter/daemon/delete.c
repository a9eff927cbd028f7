/* `promtable delete`: deleting series from a store no running promtable holds. */
#include "delete.h"

#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "promql.h"
#include "read_int.h"
#include "retention.h"
#include "tenant.h"

int pt_delete_main(const pt_config *cfg, pt_backend *be, const pt_delete_args *d, FILE *out)
{
    pt_tenant_view view;
    if (d->tenant) {
        char msg[256];
        if (!pt_tenant_valid(d->tenant, strlen(d->tenant), msg, sizeof(msg))) {
            fprintf(stderr, "promtable: --tenant: %s\n", msg);
            return 1;
        }
        pt_tenant_view_init(&view, be, d->tenant, strlen(d->tenant));
        be = &view.be;
    }
    pt_store st = {0};
    pt_store_caches caches = {.index_entries = 1024};
    if (pt_store_open(&st, be, &caches) != 0) {
        fprintf(stderr, "promtable: out of memory\n");
        return 1;
    }
    st.index_bucket_ms = cfg->index_bucket_ms;
    st.key_limit = cfg->tenancy_enabled ? PT_TENANT_KEY_LIMIT : PT_MAX_ROW_KEY;
    /* The roll-ups' cells go with the samples (the configuration was checked). */
    pt_rollup_stage stages[PT_ROLLUP_MAX_STAGES];
    char err[256];
    if (pt_rollups_parse(cfg->rollups, stages, &st.nrollups, err, sizeof(err)) == 0)
        st.rollups = stages;
    int status = 0;
    pt_delete_result total = {0};
    for (size_t i = 0; i < d->nselectors && status == 0; i++) {
        const char *sel = d->selectors[i];
        pt_arena a;
        pt_arena_init(&a, 1 << 16, 0);
        qctx q;
        qctx_start(&q, &st, &a, NULL);
        q.deadline_ns = 0;
        int64_t start = d->start < 0 ? 0 : d->start;
        int64_t end = d->end > PT_MAX_TIME_MS ? PT_MAX_TIME_MS : d->end;
        q.day_first = start - start % st.index_bucket_ms;
        q.day_last = end - end % st.index_bucket_ms;
        char msg[512];
        int rv = pt_selector_parse(&a, sel, strlen(sel), NULL, &q.ms, &q.nms, msg, sizeof(msg));
        if (rv != 0) {
            fprintf(stderr, "promtable: selector %s: %s\n", sel, msg);
            status = 1;
        } else if (end >= start && (rv = pt_select(&q)) != 0) {
            fprintf(stderr, "promtable: selecting %s failed: %s\n", sel, pt_strerror(rv));
            status = 1;
        } else if (end >= start) {
            pt_delete_result r;
            rv = pt_store_delete(&st, q.c.v, q.c.n, d->start, d->end, &a, NULL, &r);
            if (rv != 0) {
                fprintf(stderr, "promtable: deleting %s failed part way (%s); run it again to "
                        "finish\n", sel, rv == PT_EBADREQ ? "the backend cannot delete"
                                                         : pt_strerror(rv));
                status = 1;
            }
            total.series += r.series;
            total.series_days += r.series_days;
            total.index_days_erased += r.index_days_erased;
        }
        pt_selector_free(q.ms, q.nms);
        pt_arena_free(&a);
    }
    if (status == 0)
        fprintf(out, "deleted: series=%zu series_days=%zu index_days_erased=%zu\n", total.series,
                total.series_days, total.index_days_erased);
    pt_store_close(&st);
    return status;
}
