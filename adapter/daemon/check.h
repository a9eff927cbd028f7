/* `promtable check`: verifies a store (docs/operations.md, "Checking a store"). */
#ifndef PT_CHECK_H
#define PT_CHECK_H

#include <stdio.h>

#include "backend.h"
#include "config.h"

/* Exit statuses of `promtable check`. */
enum { PT_CHECK_OK = 0, PT_CHECK_DAMAGED = 1, PT_CHECK_FAILED = 2 };

/* Checks the store cfg names with backend ops, writing the report to out: the backend's
 * own check before open (ops->verify with no state), then open, index/data consistency
 * over full scans of both tables, and the backend's own check of the open store. Returns
 * PT_CHECK_OK, PT_CHECK_DAMAGED (a problem found) or PT_CHECK_FAILED (could not check:
 * the store is in use, cannot be opened or read). */
int pt_check_store(const pt_config *cfg, const pt_backend_ops *ops, const pt_backend_config *bc,
                   FILE *out);

#endif
