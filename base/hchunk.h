/*
 * Prometheus' native histogram chunks (tsdb/chunkenc histogram.go, float_histogram.go):
 * `Chunk.Encoding` HISTOGRAM (2) and FLOAT_HISTOGRAM (3) of streamed remote reads, bit for
 * bit, and the compact form of histogram samples in promtable's own stores.
 *
 *     bytes 0-1   samples, big-endian
 *     byte 2      counter-reset header in its top two bits: 00 unknown, 10 reset,
 *                 01 not a reset, 11 gauge histogram
 *     then a bit stream (MSB first, last byte zero-padded):
 *       layout    zero threshold (a byte b: 0 for +0, 1..254 for 0.5 x 2^(b-243), 255 then
 *                 the 64 bits otherwise), schema (varbit int), positive then negative
 *                 spans (varbit uint count, then per span length varbit uint and offset
 *                 varbit int), schema -53: custom bounds (varbit uint count, then each as
 *                 varbit uint 1000 x bound + 1 when that is exact and <= 33554431, else a
 *                 0 bit and the 64 bits)
 *     varbit: 0 for 0, else 10, 110, 1110, 11110, 111110, 1111110 or 11111110 then 3, 6,
 *             9, 12, 18, 25 or 56 bits (two's complement for ints, the smallest that holds
 *             the value, range -(2^(k-1)-1)..2^(k-1)), or 11111111 then 64 bits
 *       sample 0  t varbit int; integer: count and zero count varbit uint, sum 64 bits,
 *                 each positive then negative bucket (its delta) varbit int; float: count,
 *                 zero count, sum and every bucket 64 bits
 *       sample n  t as delta of delta (varbit int); integer: count and zero count as delta
 *                 of delta, sum XOR'ed, each bucket's delta as delta of delta; float: count,
 *                 zero count, sum and every bucket XOR'ed (each its own window); a sample
 *                 whose sum is the staleness marker carries no buckets
 *
 * A chunk holds one bucket layout (schema, zero threshold, spans, custom bounds) and no
 * counter reset: the encoder says when a sample needs a new chunk, and sets the new chunk's
 * header as Prometheus would (a reset, a gauge, not a reset, or unknown when the layout
 * changed). Unlike Prometheus it never re-codes a chunk to widen its spans: a sample with
 * other spans starts a new chunk (header unknown, so a reader checks for a reset itself).
 *
 * Prometheus keeps per-sample reset hints only as that header. So that a store gives back
 * every hint exactly, the encoder also returns a hints byte (the first sample's hint in
 * bits 0-1, every later sample's in bits 2-3: a later sample with another hint than the
 * second starts a new chunk); the decoder given that byte returns the hints as written,
 * given -1 returns them as Prometheus' iterator does.
 *
 * Every field round-trips bit-exactly, -0 and NaN payloads included (where Prometheus'
 * encoder would turn a -0 zero threshold or custom bound into +0, this one writes the
 * 64-bit form Prometheus also reads). Not representable, and refused: a staleness-marker
 * sample with any other field set (Prometheus drops them); such samples stay cells.
 */
#ifndef PT_HCHUNK_H
#define PT_HCHUNK_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "gorilla.h"
#include "histogram.h"
#include "slice.h"

enum { PT_HCHUNK_HISTOGRAM = 2, PT_HCHUNK_FLOAT_HISTOGRAM = 3 }; /* Chunk.Encoding */

enum {
    PT_HCHUNK_HDR_UNKNOWN = 0x00,
    PT_HCHUNK_HDR_RESET = 0x80,
    PT_HCHUNK_HDR_NOT_RESET = 0x40,
    PT_HCHUNK_HDR_GAUGE = 0xc0,
};

#define PT_HCHUNK_MAX_SAMPLES 65535
enum { PT_HCHUNK_CUT = 1 };

/* What the next sample is encoded against (scalars; the buckets' follow in arrays). */
typedef struct pt_hchunk_state {
    uint64_t t, tdelta, cnt, zcnt, cntdelta, zcntdelta;
    pt_gorilla_xor sum, fcnt, fzcnt;
} pt_hchunk_state;

typedef struct pt_hchunk_enc {
    pt_buf out;  /* the chunk so far: header and stream */
    size_t max;  /* bytes a chunk may take */
    size_t bits; /* of the stream */
    uint32_t n;  /* samples in the chunk */
    uint8_t has_last, hint_first, hint_later;
    pt_histogram last;         /* the last sample added (this chunk or the one before) */
    pt_hchunk_state st, saved; /* saved: before the sample being added */
    uint64_t *bv, *bdelta;     /* integer: each bucket's value (a delta) and its last change */
    pt_gorilla_xor *bx;        /* float: each bucket's XOR stream */
    void *bsaved;              /* the three arrays before the sample being added */
    size_t nb, st_cap;
} pt_hchunk_enc;

/* A chunk of at most max_bytes (>= 3), no more than 65535 samples. */
void pt_hchunk_enc_init(pt_hchunk_enc *e, size_t max_bytes);
void pt_hchunk_enc_free(pt_hchunk_enc *e);

/* Appends h (its t included): 0; PT_HCHUNK_CUT when h belongs in a new chunk (take this
 * one, call pt_hchunk_enc_next, add h again); PT_EUNSUPPORTED when no chunk holds h exactly
 * (a stale marker with other fields set; and what pt_histogram_validate refuses: custom
 * bounds with an exponential schema, spans that do not count the buckets); PT_ETOOLARGE
 * when h alone passes max_bytes; PT_ENOMEM. The chunk is unchanged unless 0 is returned. */
int pt_hchunk_enc_add(pt_hchunk_enc *e, const pt_histogram *h);
/* Starts an empty chunk; the last sample stays known for the new chunk's header. */
void pt_hchunk_enc_next(pt_hchunk_enc *e);

/* The chunk's bytes (valid until the next add or next); empty with no sample. */
static inline pt_slice pt_hchunk_enc_bytes(const pt_hchunk_enc *e)
{
    return (pt_slice){e->out.p, e->n ? e->out.len : 0};
}

static inline int pt_hchunk_enc_encoding(const pt_hchunk_enc *e)
{
    return e->last.is_float ? PT_HCHUNK_FLOAT_HISTOGRAM : PT_HCHUNK_HISTOGRAM;
}

/* The exact reset hints of the chunk's samples (see above). */
static inline uint8_t pt_hchunk_enc_hints(const pt_hchunk_enc *e)
{
    return (uint8_t)(e->hint_first | e->hint_later << 2);
}

typedef struct pt_hchunk_dec {
    pt_gorilla_dec br;
    uint8_t is_float, header;
    int hints; /* -1: Prometheus' reading */
    uint32_t total, read;
    pt_histogram lay; /* the layout: schema, threshold, spans, custom bounds */
    uint64_t t, tdelta, cnt, zcnt, cntdelta, zcntdelta;
    pt_gorilla_xor sum, fcnt, fzcnt;
    uint64_t *bv, *bdelta; /* integer: each bucket's delta and its delta */
    pt_gorilla_xor *bx;    /* float */
    size_t nb;
} pt_hchunk_dec;

/* Reads a chunk of the given encoding (PT_HCHUNK_*) from p[0, n) (kept, not copied):
 * 0, or PT_EINTERNAL when the encoding is another or the header is cut short. */
int pt_hchunk_dec_init(pt_hchunk_dec *d, int encoding, const uint8_t *p, size_t n, int hints);
/* The next sample into h (its arrays reserved): 1; 0 when the chunk ended where its
 * header said, its padding zero; PT_EINTERNAL when it is corrupt (nothing is read past n);
 * PT_ENOMEM. */
int pt_hchunk_dec_next(pt_hchunk_dec *d, pt_histogram *h);
/* Releases what the first sample allocated (layout, bucket state); also after an error. */
void pt_hchunk_dec_free(pt_hchunk_dec *d);

#endif
