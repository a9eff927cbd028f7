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
#include "rollup.h"
#include "slice.h"

typedef struct pt_retention_rules pt_retention_rules;

/* Parses the rules' text: one rule a line, "<retention> <selector>" ("7d
 * {__name__=~\"debug_.*\"}"), blank lines skipped. global_ms is storage.retention (0 =
 * forever): a rule longer than it is refused, as is one of 0. Regexes run under the
 * given limits (matcher.h), a value that runs into them counting as no match (the
 * longer retention). stages[0, nstages): storage.rollups, whose rows keep their stage's
 * retention (copied). 0 with *out set (NULL when there is neither a rule nor a stage),
 * or -1 with err naming the rule (1-based) and what is wrong. */
int pt_retention_rules_parse(const char *text, int64_t global_ms, const pt_rollup_stage *stages,
                             size_t nstages, uint32_t match_limit, size_t heap_limit,
                             pt_retention_rules **out, char *err, size_t errlen);
void pt_retention_rules_free(pt_retention_rules *r);

/* The shortest retention of a rule, a stage or storage.retention, in ms (0: all forever). */
int64_t pt_retention_rules_shortest(const pt_retention_rules *r);

/* What the backends keep at most, in ms (0 = forever): storage.retention, or a longer
 * stage's retention. */
int64_t pt_retention_longest(int64_t global_ms, const pt_rollup_stage *stages, size_t n);

/* Parses storage.rollups' text form, one "RESOLUTION RETENTION" line a stage ("5m 1y"),
 * into out (at most PT_ROLLUP_MAX_STAGES), sorted by resolution. 0, or -1 with err set:
 * a resolution under a minute, not whole seconds or not dividing a day; two stages of
 * one resolution; a retention that is no duration. */
int pt_rollups_parse(const char *text, pt_rollup_stage *out, size_t *n, char *err,
                     size_t errlen);

/* How long the series of labels[0, n) keeps its samples: ms, 0 = forever. Thread-safe
 * (ud is the rules). */
int64_t pt_retention_keep(void *ud, const pt_label *labels, size_t n);

/* The same for the series of a points-table row key (data or exemplar row, a tenant's
 * prefix ignored); a key whose labels cannot be read back from it (a hashed long series,
 * not a data row) keeps storage.retention. A roll-up row keeps its stage's retention, or
 * its series' rule's where that rule is shorter than storage.retention; one of a stage no
 * longer configured keeps storage.retention. */
int64_t pt_retention_keep_row(void *ud, pt_slice row);

#endif
