/*
 * `promtable delete SELECTOR... [--start T] [--end T] [--tenant ID]`: the samples of the
 * series the selectors match in [start, end] deleted from a store no running promtable
 * holds (a running one is asked over HTTP: POST /api/v1/admin/tsdb/delete_series), as
 * the API does it (adapter/store/delete.c).
 */
#ifndef PT_DELETE_H
#define PT_DELETE_H

#include <stdint.h>
#include <stdio.h>

#include "backend.h"
#include "config.h"

typedef struct pt_delete_args {
    const char *const *selectors;
    size_t nselectors;
    int64_t start, end; /* ms; the whole of time by default */
    const char *tenant; /* NULL: without tenancy */
} pt_delete_args;

/* Deletes from the open backend be; prints a line of what it did to out, errors to
 * stderr. The exit status. */
int pt_delete_main(const pt_config *cfg, pt_backend *be, const pt_delete_args *d, FILE *out);

#endif
