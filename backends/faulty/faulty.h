/*
 * The fault-injecting backend ("faulty"): wraps another open backend (cfg->inner, a
 * pt_backend *) and passes every call through, except when a fault plan says otherwise.
 * It exists so tests can show that an outage mid-request turns into a retryable error and
 * that retrying a batch leaves exactly the intended cells (SQLite's test_vfs idea).
 *
 * The wrapper does not own the inner backend: close the wrapper first, then the inner.
 *
 * Every function below takes the wrapper's pt_backend (ops == &pt_backend_faulty) and is
 * thread-safe. Random faults come from a seeded PRNG, so a given plan, seed and sequence
 * of calls always fails the same calls.
 */
#ifndef PT_FAULTY_H
#define PT_FAULTY_H

#include <stdint.h>

#include "backend.h"

extern const pt_backend_ops pt_backend_faulty;

typedef struct pt_faulty_plan {
    unsigned latency_ms; /* added to every write and scan, faulted or not */
    uint64_t seed;       /* PRNG seed for fail_prob; 0 picks a fixed default */
    struct {
        unsigned fail_next; /* fail the next n writes */
        double fail_prob;   /* after those, fail each write with this probability */
        int code;           /* negative pt code a failed write returns; 0 = PT_EUNAVAIL */
        /* A failed write first applies the first ceil(n/2) mutations of its batch to the
         * inner backend (an outage mid-batch), then returns the code. */
        int partial;
    } write;
    struct {
        unsigned fail_next; /* fail the next n scans */
        double fail_prob;   /* after those, fail each scan with this probability */
        int code;           /* negative pt code a failed scan returns; 0 = PT_EUNAVAIL */
        /* A failed scan first delivers up to this many cells, then returns the code
         * (a stream cut mid-way); 0 = fail before the first cell. */
        unsigned after_cells;
    } scan;
} pt_faulty_plan;

typedef struct pt_faulty_stats {
    uint64_t writes;          /* write calls seen */
    uint64_t write_faults;    /* writes failed by injection */
    uint64_t partial_writes;  /* of those, how many applied half a batch */
    uint64_t scans;           /* scan calls seen */
    uint64_t scan_faults;     /* scans failed by injection */
} pt_faulty_stats;

/* Replaces the plan (a NULL plan clears every fault) and reseeds the PRNG. The counters
 * are kept. */
void pt_faulty_set(pt_backend *b, const pt_faulty_plan *plan);

/* Copies the counters into *out. */
void pt_faulty_get_stats(pt_backend *b, pt_faulty_stats *out);

/* Zeroes the counters. */
void pt_faulty_reset_stats(pt_backend *b);

#endif
