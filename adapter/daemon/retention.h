/*
 * Retention per selector (storage.retention_rules; docs/operations.md, "Retention"): rules
 * of a series selector and a retention each, the first whose selector matches a series
 * deciding how long its samples are kept; a series no rule matches keeps
 * storage.retention. The store asks with a series' labels (reads start at now minus the
 * answer), the backends with a row key (what their compactions remove).
 */
#ifndef PT_RETENTION_H
#define PT_RETENTION_H

#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "slice.h"

typedef struct pt_retention_rules pt_retention_rules;

/* Parses the rules' text: one rule a line, "<retention> <selector>" ("7d
 * {__name__=~\"debug_.*\"}"), blank lines skipped. global_ms is storage.retention (0 =
 * forever): a rule longer than it is refused, as is one of 0. Regexes run under the
 * given limits (matcher.h), a value that runs into them counting as no match (the
 * longer retention). 0 with *out set (NULL when text holds no rule), or -1 with err
 * naming the rule (1-based) and what is wrong. */
int pt_retention_rules_parse(const char *text, int64_t global_ms, uint32_t match_limit,
                             size_t heap_limit, pt_retention_rules **out, char *err,
                             size_t errlen);
void pt_retention_rules_free(pt_retention_rules *r);

/* The shortest retention of a rule, in ms. */
int64_t pt_retention_rules_shortest(const pt_retention_rules *r);

/* How long the series of labels[0, n) keeps its samples: ms, 0 = forever. Thread-safe
 * (ud is the rules). */
int64_t pt_retention_keep(void *ud, const pt_label *labels, size_t n);

/* The same for the series of a points-table row key (data or exemplar row, a tenant's
 * prefix ignored); a key whose labels cannot be read back from it (a hashed long series,
 * not a data row) keeps storage.retention. */
int64_t pt_retention_keep_row(void *ud, pt_slice row);

#endif
