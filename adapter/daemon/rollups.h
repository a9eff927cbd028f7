/*
 * The roll-up builder (storage.rollups; docs/operations.md, "Roll-ups"): a thread that, for
 * the store and every tenant this process keeps, builds each stage's windows once they
 * ended storage.rollups_delay ago, a day at a time after the stage's watermark, and again
 * from the day of any sample written behind what is built (pt_rollup_late). On a store
 * several promtables share (Bigtable), the one holding the lease builds.
 */
#ifndef PT_ROLLUPS_H
#define PT_ROLLUPS_H

#include <stddef.h>
#include <stdint.h>

#include "rollup.h"
#include "store.h"
#include "tenant.h"

typedef struct pt_rollup_job pt_rollup_job;

typedef struct pt_rollup_job_opts {
    pt_store *store;      /* the daemon's; tenants' views are made from it */
    pt_tenants *tenants;  /* tenancy on: build each tenant's; NULL: the store's */
    const pt_rollup_stage *stages;
    size_t nstages;
    int64_t delay_ms;     /* storage.rollups_delay */
    int64_t interval_ms;  /* between passes; 0 = 10 s */
} pt_rollup_job_opts;

/* The builder, without its thread (pt_rollup_job_run starts one). NULL: out of memory. */
pt_rollup_job *pt_rollup_job_new(const pt_rollup_job_opts *o);
/* One pass at now_ms on the calling thread: unless another builder holds the lease (then
 * nothing), every store and stage built up to now_ms - delay (at most max_days index
 * buckets of each, 0 = all). 0, or the first error (the pass went on with the other
 * stores and stages). */
int pt_rollup_job_pass(pt_rollup_job *j, int64_t now_ms, size_t max_days);
/* Starts the thread: a pass every interval. 0 or -1. */
int pt_rollup_job_run(pt_rollup_job *j);
/* Stops the thread (a pass in progress stops at its next storage call) and frees j. */
void pt_rollup_job_free(pt_rollup_job *j);

#endif
