/*
 * The parts of the storage schema (docs/storage-format.md) that both the adapter, which
 * builds keys, and the backends, which expire rows by their keys, must agree on: the
 * bucket a data row covers, how a time is written in a key, and how a key is escaped.
 */
#ifndef PT_SCHEMA_H
#define PT_SCHEMA_H

#include <stddef.h>
#include <stdint.h>

#define PT_MAX_ROW_KEY 4096 /* Bigtable's cap on a row key */
#define PT_BASE_DIGITS 13   /* a time in a key: 13 zero-padded decimal digits of ms */
#define PT_BUCKET_MS ((int64_t)1 << 32) /* the span of one data row (about 49.7 days) */
#define PT_QUAL_LEN 4       /* a sample cell's qualifier: big-endian offset from the base */
#define PT_VALUE_LEN 8      /* a sample cell's value: big-endian IEEE-754 bits */
/* Sample times must be in [0, PT_MAX_TIME_MS] so every base fits 13 decimal digits. */
#define PT_MAX_TIME_MS ((int64_t)9999999999999 - PT_BUCKET_MS)
/* The index table's row of the Bigtable backend's compaction lease: "==" then a letter no
 * hex digit is, so no series, metadata, HA or format row has it; `promtable check` skips it. */
#define PT_COMPACT_LEASE_ROW "==compact"
/* In keys, '\' escapes the byte after it. */
#define PT_KEY_ESCAPE '\\'

/* Bucket base of a sample time (t >= 0). */
static inline int64_t pt_bucket_base(int64_t t)
{
    return t & ~(PT_BUCKET_MS - 1);
}

/* The base of a points row key: a data row's (sid ",@" base), an exemplar row's (",#") or
 * a roll-up row's (",%" base + code, the code below PT_BUCKET_MS); -1 for another key. */
int64_t pt_points_row_base(const uint8_t *key, size_t n);

/* The PT_BASE_DIGITS decimal digits at p as a number; -1 when one is not a digit. */
int64_t pt_key_digits(const uint8_t *p);

/* The time written after the first unescaped ',' + marker (a byte of markers) in key[0, n),
 * with *end set to just past its digits; -1 when there is none, or when digits do not
 * follow it. Data rows hold their base after ",@", exemplar rows after ",#", index rows
 * their day after ",@". */
int64_t pt_key_time(const uint8_t *key, size_t n, const char *markers, size_t *end);

#endif
