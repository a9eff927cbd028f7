/*
 * Exemplars in the points table (README "Storage schema", Exemplars): one row per series
 * and bucket, row key = the data row's key with ",#" in place of ",@"; one cell per
 * PT_EXEMPLAR_SLOT_MS window of the bucket (qualifier = the window's first offset), so a
 * series keeps at most one exemplar per window: the cap.
 */
#ifndef PT_EXEMPLAR_H
#define PT_EXEMPLAR_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "rowkey.h"
#include "slice.h"

/* The window one exemplar cell covers: 2^14 ms = 16.384 s. */
#define PT_EXEMPLAR_SLOT_MS ((int64_t)1 << 14)
/* OpenMetrics: an exemplar's label names and values hold at most 128 UTF-8 runes together. */
#define PT_EXEMPLAR_MAX_RUNES 128

/* Writes the exemplar row key of sid at base (PT_ROW_KEY_LEN(sid.n) bytes). */
void pt_exemplar_row_key(uint8_t *dst, pt_slice sid, int64_t base);

/* The window qualifier of an exemplar at offset off of its bucket. */
static inline uint32_t pt_exemplar_slot(uint32_t off)
{
    return off & ~(uint32_t)(PT_EXEMPLAR_SLOT_MS - 1);
}

/* Checks labels (UTF-8, non-empty unique names, the rune limit); 0, or -1 with why set. */
int pt_exemplar_labels_check(const pt_label *ls, size_t n, char *why, size_t whylen);

/* Cell value: 4-byte big-endian offset, the value's 8 IEEE-754 bytes big-endian, then
 * pt_labels_encode of the labels. Never 8 bytes long. */
size_t pt_exemplar_cell_size(const pt_label *ls, size_t n);
void pt_exemplar_cell_encode(uint8_t *dst, uint32_t off, double v, const pt_label *ls, size_t n);
/* Labels point into val; 0 or PT_EINTERNAL for a malformed cell. */
int pt_exemplar_cell_decode(pt_arena *a, int64_t base, pt_slice val, int64_t *t, double *v,
                            pt_label **ls, size_t *n);

#endif
