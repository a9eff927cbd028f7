/*
 * A run of one row's cells as one value, a chunk: the stored form of the embedded store's
 * points (its key there: row || 0x00 || the chunk's first qualifier, 4 bytes). No I/O.
 *
 *     value = fmt (1 byte) || count (4 bytes BE) || body
 *             fmt 3: the Gorilla / XOR stream of base/gorilla.h, count samples whose
 *                    timestamp is the qualifier and whose value is the 8 value bytes read
 *                    as a big-endian integer (a float64's bits); the stream fills the rest
 *                    of the value exactly, its padding bits zero
 *             fmt 4: decimal samples: mode (1 byte: k = bits 0-3, k <= 9; bit 4: values as
 *                    delta-of-delta; bit 5: corrections follow each value) || tlen (4
 *                    bytes BE) || the timestamps as a fmt 3 stream of tlen bytes whose values
 *                    are all 0 || per sample a zig-zag varint of m (the first), of its
 *                    difference from the previous m (the second, and the others without bit
 *                    4) or of the difference of differences (the others with bit 4), all
 *                    modulo 2^64, then with bit 5 a zig-zag varint c; the value's bits are
 *                    those of the float64 m / 10^k plus c (|m| <= 2^53)
 *             fmt 2: count qualifiers (4 bytes BE each, strictly increasing), count value
 *                    lengths (4 bytes BE each), then the values back to back
 *             fmt 1: count qualifiers, then count values of exactly 8 bytes
 *             fmt 5: native histograms: parts back to back, in qualifier order, whose
 *                    samples add up to count; a part is
 *                      0 (1 byte) || n (4 bytes BE, n >= 1) || n cells as in fmt 2
 *                    or
 *                      encoding (1 byte: 2 integer, 3 float) || hints (1 byte) ||
 *                      len (4 bytes BE) || len bytes of a histogram chunk (base/hchunk.h,
 *                      its timestamps the qualifiers; its own header counts its samples,
 *                      at least 1)
 *                    a histogram sample's cell value is the cell pt_histogram_cell_encode
 *                    writes for it (reset hint as the hints byte says)
 *
 * Flushes write fmt 3 when every value of the chunk has 8 bytes (a sample: about 1-2 bytes
 * where fmt 1 takes 12), fmt 4 instead when every value lies within 2^20 units in the last
 * place of a decimal with at most 9 digits after the point and fmt 4 comes out shorter
 * (values parsed from text, or sums of them: XOR of such floats leaves 5-7 bytes, a varint
 * difference 1-3); otherwise fmt 5 when some values are histogram cells (20-24 bytes a
 * 20-bucket sample where fmt 2 takes about 60): each run of them in histogram chunks, cut where
 * pt_hchunk_enc_add says, and what no histogram chunk holds (a float, a stale marker with
 * other fields, a cell not in its canonical form) as fmt 2 cells between them; the chunk
 * is decoded again before it is kept and must give back every cell byte for byte, else
 * it is written as fmt 2, which is also the form of every other chunk. fmt 1 is read
 * only, and fmt 2 chunks of histograms stay readable, so stores written before fmt 3 or
 * fmt 5 open unchanged and their chunks take the new forms as merges rewrite them.
 *
 * The chunks of one row never overlap: every qualifier of a row is in at most one chunk, so
 * "last write wins" needs no versions (flush.c keeps that true). Logically the table still
 * holds the cells (row, qualifier, value) of docs/storage-format.md; scans return exactly
 * those, so data copies cell by cell between backends.
 */
#ifndef PT_CELLCHUNK_H
#define PT_CELLCHUNK_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "buf.h"
#include "slice.h"

/* A cell seen by merges and the codec: a value of up to 8 bytes is held inline (a decoded
 * fmt 3 value has no bytes to point to), a longer one points into memory the holder keeps
 * alive, or, for a histogram decoded from a fmt 5 chunk, into the pt_vcells' own arena. */
typedef struct pt_vcell {
    uint32_t q;
    uint32_t vlen;
    union {
        uint8_t in[8];
        const uint8_t *p;
    } v;
} pt_vcell;

static inline const uint8_t *pt_vcell_val(const pt_vcell *c)
{
    return c->vlen <= 8 ? c->v.in : c->v.p;
}

typedef struct pt_vcells {
    pt_vcell *c;
    size_t n, cap;
    pt_arena own; /* values the cells' decoding made (fmt 5 histograms); zeroed = none */
} pt_vcells;

/* Empties vc: its cells, and the values it owns (pointers to them die). */
static inline void pt_vcells_reset(pt_vcells *vc)
{
    vc->n = 0;
    pt_arena_reset(&vc->own);
}

static inline void pt_vcells_free(pt_vcells *vc)
{
    free(vc->c);
    pt_arena_free(&vc->own);
    *vc = (pt_vcells){0};
}

static inline int pt_vcells_push(pt_vcells *vc, uint32_t q, uint32_t vlen, const uint8_t *v)
{
    if (vc->n == vc->cap) {
        int rv = pt_array_reserve(&vc->c, &vc->cap, vc->n + 1, sizeof(*vc->c), 0);
        if (rv != 0)
            return rv;
    }
    pt_vcell *c = &vc->c[vc->n++];
    c->q = q;
    c->vlen = vlen;
    if (vlen <= 8) {
        if (vlen)
            memcpy(c->v.in, v, vlen);
    } else {
        c->v.p = v;
    }
    return 0;
}

/* A parsed pt_cellchunk value; its pointers point into the value parsed. */
typedef struct pt_cellchunk {
    uint8_t fmt; /* 1: every value 8 bytes, 2: values of any length, 3: XOR'ed samples,
                    4: decimal samples, 5: histogram chunks and cells */
    uint8_t k;    /* fmt 4: values are integers / 10^k */
    uint8_t mode; /* fmt 4: delta-of-delta, corrections (chunk.c) */
    uint32_t count;
    const uint8_t *quals, *lens, *vals; /* fmt 1 and 2; fmt 4: the value varints */
    size_t vlen_total;                   /* fmt 4: bytes of the value varints */
    pt_slice stream; /* fmt 3: the sample stream; fmt 4: timestamps; fmt 5: the parts */
} pt_cellchunk;

/* Checks the chunk's framing: 0, or PT_EINTERNAL when p is not a chunk pt_cellchunk_encode
 * wrote. A fmt 3 stream is checked as pt_cellchunk_cells decodes it. */
int pt_cellchunk_parse(const uint8_t *p, size_t n, pt_cellchunk *c);
/* Appends the chunk's cells to out (values of fmt 2 longer than 8 bytes point into the
 * chunk's bytes; fmt 5's histogram values into out->own, valid until pt_vcells_reset);
 * PT_EINTERNAL, and out's cells as they were, when the chunk is corrupt (its qualifiers
 * not strictly increasing, a stream that does not decode to exactly count cells).
 * Allocates only to grow out (and, for fmt 5, to decode histograms). */
int pt_cellchunk_cells(const pt_cellchunk *c, pt_vcells *out);
/* The same for the cells whose qualifiers are in [lo, hi): a fmt 3 or 4 chunk is decoded
 * up to its first qualifier at or past hi, and what follows is not checked; *last = the
 * last qualifier decoded (that first one past the range when decoding stopped there). */
int pt_cellchunk_cells_in(const pt_cellchunk *c, uint64_t lo, uint64_t hi, pt_vcells *out,
                          uint32_t *last);
/* The chunk's last qualifier: decodes a fmt 3 chunk without storing it (PT_EINTERNAL when
 * it is corrupt), reads that of the others. */
int pt_cellchunk_last(const pt_cellchunk *c, uint32_t *q);
/* Whether every value of the chunk has 8 bytes by its format (fmt 1, 3 and 4): a chunk
 * pt_cellchunk_to_stream takes. */
static inline int pt_cellchunk_floats(const pt_cellchunk *c)
{
    return c->fmt == 1 || c->fmt == 3 || c->fmt == 4;
}

/* The chunk (pt_cellchunk_floats) as a Gorilla sample stream (gorilla.h: the qualifiers as
 * timestamps, each value's 8 bytes big-endian as its word) in *out: a fmt 3 chunk's own
 * stream (scratch left empty), else one encoded into buf (reset first) from its cells,
 * decoded into scratch (scratch->c[0].q and scratch->c[scratch->n - 1].q are its first and
 * last). PT_EINTERNAL for another format or a corrupt chunk, PT_ENOMEM. */
int pt_cellchunk_to_stream(const pt_cellchunk *c, pt_vcells *scratch, pt_buf *buf,
                           pt_slice *out);
/* out = the chunk of n cells, c strictly increasing by qualifier, n > 0: when every value
 * has 8 bytes the shorter of fmt 3 and (if the values are decimals) fmt 4; else fmt 5 when
 * some values are histogram cells an hchunk holds, fmt 2 otherwise. */
int pt_cellchunk_encode(pt_buf *out, const pt_vcell *c, size_t n);

#endif
