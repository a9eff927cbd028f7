/*
 * The storage schema of docs/storage-format.md: label sets → series ids → row keys, samples
 * → cells, and the index row keys. Everything here is pure computation; nothing allocates
 * except through a caller's arena.
 *
 * Series id (sid): the escaped metric name, then for every other label in byte order of
 * name ",name=value" (escaped). In names and values the bytes \ , = @ are written as
 * '\' + byte and bytes < 0x20 as "\xHH", so a sid never contains an unescaped ",@" and never
 * the byte 0x00. A data row key is sid ",@" base, base being 13 zero-padded decimal digits.
 *
 * Long series: when sid ",@" base would exceed PT_MAX_ROW_KEY bytes (Bigtable's cap is 4 KiB)
 * the sid is replaced by a hashed sid: escaped metric ",\#" + 64 hex digits of SHA-256 over
 * the full sid (or just "\#" + hex when the metric alone is too long). "\#" never occurs in
 * an escaped string, so hashed and plain sids cannot collide or prefix each other. The full
 * label set of every series is stored in its index rows, so hashed series read back exactly.
 */
#ifndef PT_ROWKEY_H
#define PT_ROWKEY_H

#include <stddef.h>
#include <stdint.h>

#include "arena.h"
#include "model.h"
#include "schema.h"
#include "slice.h"

/* A key limit, the longest data or series row key to build: PT_MAX_ROW_KEY, less the room
 * a tenant's prefix takes when tenancy is on (PT_TENANT_KEY_LIMIT, tenant.h). The limit
 * only changes with tenancy, whose rows are in spaces of their own, so no series is ever
 * stored under both limits. */
/* The longest escaped metric kept in front of a hashed sid. */
#define PT_HASHED_METRIC_MAX 1024

/* Escaping of one name or value. */
size_t pt_escaped_len(pt_slice s);
uint8_t *pt_escape(uint8_t *dst, pt_slice s);
/* Reverses pt_escape; returns the length written or -1 on a malformed escape. dst must hold
 * src.n bytes. */
long pt_unescape(uint8_t *dst, pt_slice src);

/* Builds the sid of a validated label set (sorted by name, unique names, no empty values,
 * containing __name__). The sid is allocated from the arena. Returns 0, or PT_ENOMEM. */
int pt_series_id(pt_arena *a, const pt_label *labels, size_t n, size_t key_limit,
                 pt_slice *sid);
/* The same; check = 0 promises that no name or value needs escaping (pt_text_flags said
 * so for each), which skips looking at their bytes again. */
int pt_series_id_checked(pt_arena *a, const pt_label *labels, size_t n, int check,
                         size_t key_limit, pt_slice *sid);

/* What a name or value holds, found in one pass: PT_TEXT_NONASCII when a byte is >= 0x80
 * (so it must be checked as UTF-8), PT_TEXT_ESCAPE when a byte needs escaping. */
enum { PT_TEXT_NONASCII = 1, PT_TEXT_ESCAPE = 2 };
unsigned pt_text_flags(pt_slice s);

/* Splits a plain (not hashed) sid back into labels, __name__ first as in the sid: the
 * array and the unescaped copies of names and values with escapes are arena-allocated,
 * the others point into sid, which must outlive them. Returns the count, or a negative
 * error for a hashed or malformed sid. */
long pt_series_id_parse(pt_arena *a, pt_slice sid, pt_label **labels);

/* Writes sid ",@" base13 into dst (sid.n + 2 + 13 bytes); returns the end. */
uint8_t *pt_row_key(uint8_t *dst, pt_slice sid, int64_t base);
#define PT_ROW_KEY_LEN(sid_n) ((sid_n) + 2 + PT_BASE_DIGITS)

/* 4-byte big-endian offset qualifier and 8-byte big-endian IEEE-754 value. */
void pt_cell_encode(int64_t t, double v, uint8_t qual[PT_QUAL_LEN], uint8_t val[PT_VALUE_LEN]);
/* Decodes a data cell; returns 0 or PT_EINTERNAL when the cell is not a sample. */
int pt_cell_decode(int64_t base, pt_slice qual, pt_slice val, int64_t *t, double *v);
/* Parses the 13-digit base at the end of a row key; -1 when the key has none. */
int64_t pt_row_key_base(pt_slice row);
/* The same for a key ending in "," marker base ('#': an exemplar row, exemplar.h). */
int64_t pt_row_key_base_marked(pt_slice row, uint8_t marker);

/* Index row keys (docs/storage-format.md, "Index rows"), index format 2:
 *   series by metric:  <metric> ",@" day13 "," ref16         qualifier: label mask
 *   postings:          "~" <name> "=" <value> ",@" day13 "," ref16   qualifier: label mask
 *   label values:      "=" <name> ",@" day13 "," <value>
 *   series:            "==" ref16 ",@" day13 "," <sid>    value: labels when needed
 * ref16 is the series reference, 16 lowercase hex digits of a 64-bit hash of the sid: the
 * lists name a series in 16 bytes, and the series row maps a reference back to its sid.
 * Two series may share a reference; the series rows then list both (one row each), and
 * every candidate is checked against the query's matchers, so a collision costs a row,
 * never a wrong answer. The label mask (pt_label_mask_add) lets a read drop most candidates
 * of a list without resolving them.
 * Every name, value or metric is a "part": escaped as in row keys, or, when the escaped
 * form is over PT_INDEX_PART_MAX bytes, "\#" + 64 hex digits of its SHA-256 (the index cell
 * then holds what was hashed). In series rows the sid is replaced by "\#" + SHA-256(sid)
 * when the key would be over PT_MAX_ROW_KEY; that row's cell and the cell of a row for a
 * hashed sid hold the label set. So no index key exceeds Bigtable's 4 KiB whatever the
 * labels are. The prefix functions write the part up to and including the last ',' before
 * the ref or value; a scan of [prefix, pt_prefix_end(prefix)) lists one day. */
#define PT_INDEX_PART_MAX 1024
#define PT_DIGEST_LEN 66 /* "\#" + 64 hex digits */
#define PT_REF_HEX 16
/* The series reference of a sid; 0 < bits < 64 keeps only the low bits (tests force
 * collisions with it). */
uint64_t pt_series_ref(pt_slice sid, unsigned bits);
uint8_t *pt_ref_hex(uint8_t *dst, uint64_t ref);
/* Parses 16 hex digits; -1 when they are not. */
int pt_ref_parse(const uint8_t *p, uint64_t *ref);
/* Two bits per label (name and value hashed together): mask(query) & ~mask(series) != 0
 * proves a series lacks one of the query's name=value pairs. */
uint64_t pt_label_mask_add(uint64_t mask, pt_slice name, pt_slice value);
/* "==" ref16 ",@" day13 ",": what precedes the sid in a series row. */
uint8_t *pt_index_series_prefix(uint8_t *dst, const uint8_t *ref16, int64_t day);
#define PT_INDEX_SERIES_PREFIX_LEN (2 + PT_REF_HEX + 3 + PT_BASE_DIGITS)
uint8_t *pt_index_part(uint8_t *dst, pt_slice s);
/* Writes the series reference after a prefix of prefix_len bytes. */
uint8_t *pt_index_ref(uint8_t *dst, size_t prefix_len, pt_slice sid, size_t key_limit);
/* 1 when a part or ref is a digest (its original is in the index cell). */
int pt_index_is_digest(pt_slice s);
uint8_t *pt_index_metric_prefix(uint8_t *dst, pt_slice metric, int64_t day);
uint8_t *pt_index_posting_prefix(uint8_t *dst, pt_slice name, pt_slice value, int64_t day);
uint8_t *pt_index_values_prefix(uint8_t *dst, pt_slice name, int64_t day);
/* Upper bound on the bytes any of the prefix functions writes. */
#define PT_INDEX_PREFIX_MAX(name_n, value_n) (4 * ((name_n) + (value_n)) + 6 + PT_BASE_DIGITS)

/* Sets *end to the smallest key greater than every key starting with prefix; end.n == 0
 * (unbounded) when the prefix is all 0xff. dst holds prefix.n bytes. */
void pt_prefix_end(uint8_t *dst, pt_slice prefix, pt_slice *end);

/* Label-set encoding stored in index cells: for each label uvarint(len) name uvarint(len)
 * value. */
size_t pt_labels_encoded_len(const pt_label *labels, size_t n);
uint8_t *pt_labels_encode(uint8_t *dst, const pt_label *labels, size_t n);
/* Labels point into buf (valid while buf is); returns the count or PT_EINTERNAL. */
long pt_labels_decode(pt_arena *a, pt_slice buf, pt_label **labels);

/* labels.Compare of Prometheus: pairwise names then values, shorter set first. */
int pt_labels_cmp(const pt_label *a, size_t na, const pt_label *b, size_t nb);

#endif
