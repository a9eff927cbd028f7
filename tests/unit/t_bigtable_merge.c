/*
 * The ReadRows chunk merger against Google's 48 conformance cases (googleapis'
 * conformance-tests bigtable/v2/readrows.json, as the text file CHUNKS_FILE), plus what the
 * backend adds around it: the resume point (last_scanned_row_key, abandon), the row
 * ceiling, callback stops, the clipping of row ranges when a broken stream is resumed, and
 * the cut points of a wide range among sampled keys.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tap.h"
#include "bigtable_int.h"
#include "error.h"

#define CHUNKS_FILE PT_SHARED_TESTDATA "/bigtable-readrows-chunks.txt"

/* ---- base64 (the test file's encoding) ---- */

static int b64val(int c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+' || c == '-')
        return 62;
    if (c == '/' || c == '_')
        return 63;
    return -1;
}

/* Decodes s ("-" = empty) into a malloc'd buffer; NULL on bad input. */
static uint8_t *b64dec(const char *s, size_t *n)
{
    size_t len = strlen(s);
    uint8_t *out = malloc(len + 1);
    unsigned acc = 0;
    int bits = 0;
    *n = 0;
    if (!out)
        return NULL;
    if (strcmp(s, "-") == 0)
        return out;
    for (size_t i = 0; i < len && s[i] != '='; i++) {
        int v = b64val((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (unsigned)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[(*n)++] = (uint8_t)(acc >> bits);
        }
    }
    return out;
}

/* ---- rendering cells as text, for comparison ---- */

typedef struct text {
    char *p;
    size_t n, cap;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        t->cap = (t->n + n + 1) * 2;
        t->p = realloc(t->p, t->cap);
        if (!t->p)
            abort();
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = '\0';
}

static void put_bytes(text *t, const uint8_t *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char buf[8];
        if (p[i] >= 0x20 && p[i] < 0x7f && p[i] != '\\' && p[i] != '|' && p[i] != ';')
            put(t, (const char *)&p[i], 1);
        else
            put(t, buf, (size_t)snprintf(buf, sizeof(buf), "\\x%02x", p[i]));
    }
}

static void put_cell(text *t, pt_slice rk, pt_slice fam, pt_slice qual, long long ts,
                     pt_slice value, pt_slice label)
{
    char buf[32];
    put_bytes(t, rk.p, rk.n);
    put(t, "|", 1);
    put_bytes(t, fam.p, fam.n);
    put(t, "|", 1);
    put_bytes(t, qual.p, qual.n);
    put(t, buf, (size_t)snprintf(buf, sizeof(buf), "|%lld|", ts));
    put_bytes(t, value.p, value.n);
    put(t, "|", 1);
    put_bytes(t, label.p, label.n);
    put(t, ";", 1);
}

/* ---- the conformance cases ---- */

typedef struct tcase {
    char desc[256];
    Bigtable__ReadRowsResponse__CellChunk **chunks;
    size_t nchunks;
    text want;
    int want_error;
} tcase;

static int parse_r_line(tcase *c, char *line)
{
    char *f[6];
    size_t n[6];
    uint8_t *d[6] = {0};
    char *save = NULL;
    for (int i = 0; i < 6; i++)
        if (!(f[i] = strtok_r(i ? NULL : line, " \n", &save)))
            return -1;
    for (int i = 0; i < 6; i++) {
        if (i == 3)
            continue; /* the timestamp is decimal */
        if (!(d[i] = b64dec(f[i], &n[i])))
            return -1;
    }
    put_cell(&c->want, (pt_slice){d[0], n[0]}, (pt_slice){d[1], n[1]}, (pt_slice){d[2], n[2]},
             atoll(f[3]), (pt_slice){d[4], n[4]}, (pt_slice){d[5], n[5]});
    for (int i = 0; i < 6; i++)
        free(d[i]);
    return 0;
}

static size_t load_cases(tcase *cases, size_t max)
{
    FILE *f = fopen(CHUNKS_FILE, "r");
    if (!f) {
        diag("cannot open %s", CHUNKS_FILE);
        return 0;
    }
    char line[16384];
    size_t n = 0;
    tcase *c = NULL;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == 'T' && line[1] == ' ') {
            if (n == max)
                break;
            c = &cases[n++];
            memset(c, 0, sizeof(*c));
            snprintf(c->desc, sizeof(c->desc), "%.200s", line + 2);
            c->desc[strcspn(c->desc, "\n")] = '\0';
            put(&c->want, "", 0);
        } else if (c && line[0] == 'C') {
            size_t len;
            line[strcspn(line, "\n")] = '\0';
            uint8_t *bytes = b64dec(line + 2, &len);
            ProtobufCMessage *m =
                bytes ? protobuf_c_message_unpack(
                            &bigtable__read_rows_response__cell_chunk__descriptor, NULL, len, bytes)
                      : NULL;
            free(bytes);
            if (!m) {
                diag("%s: a chunk does not decode", c->desc);
                continue;
            }
            c->chunks = realloc(c->chunks, (c->nchunks + 1) * sizeof(*c->chunks));
            c->chunks[c->nchunks++] = (Bigtable__ReadRowsResponse__CellChunk *)m;
        } else if (c && line[0] == 'R') {
            if (parse_r_line(c, line + 2) != 0)
                diag("%s: bad result line", c->desc);
        } else if (c && line[0] == 'E') {
            c->want_error = 1;
        }
    }
    fclose(f);
    return n;
}

static void free_case(tcase *c)
{
    for (size_t i = 0; i < c->nchunks; i++)
        protobuf_c_message_free_unpacked(&c->chunks[i]->base, NULL);
    free(c->chunks);
    free(c->want.p);
}

typedef struct sink {
    text got;
    size_t rows;
    int stop_after; /* return 1 after this many rows; 0 = never */
    int fail_code;  /* return this on the first row, when non-zero */
} sink;

static int on_row(void *ud, pt_slice key, const pt_bt_cell *cells, size_t n)
{
    sink *s = ud;
    s->rows++;
    for (size_t i = 0; i < n; i++)
        put_cell(&s->got, key, cells[i].family, cells[i].qualifier, (long long)cells[i].ts,
                 cells[i].value, cells[i].label);
    if (s->fail_code)
        return s->fail_code;
    return s->stop_after && s->rows == (size_t)s->stop_after ? 1 : 0;
}

/* Runs a case, each chunk in its own response (one_response = 0) or all chunks in one.
 * Returns the rendered cells, then "ERROR" if the merge failed. */
static char *run_case(const tcase *c, int one_response, char *err, size_t errlen)
{
    sink s = {0};
    put(&s.got, "", 0);
    pt_bt_merger m;
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    int rv = 0;
    if (one_response) {
        Bigtable__ReadRowsResponse r;
        bigtable__read_rows_response__init(&r);
        r.n_chunks = c->nchunks;
        r.chunks = c->chunks;
        rv = pt_bt_merger_response(&m, &r);
    } else {
        for (size_t i = 0; i < c->nchunks && rv == 0; i++) {
            Bigtable__ReadRowsResponse r;
            bigtable__read_rows_response__init(&r);
            r.n_chunks = 1;
            r.chunks = &c->chunks[i];
            rv = pt_bt_merger_response(&m, &r);
        }
    }
    if (rv == 0)
        rv = pt_bt_merger_end(&m);
    if (rv != 0) {
        put(&s.got, "ERROR", 5);
        snprintf(err, errlen, "%d %s", rv, m.err);
    }
    pt_bt_merger_free(&m);
    return s.got.p;
}

static void test_conformance(void)
{
    static tcase cases[64];
    size_t n = load_cases(cases, 64);
    is(n, 48, "the conformance file holds 48 cases");
    size_t errors = 0, passed = 0;
    for (size_t i = 0; i < n; i++) {
        tcase *c = &cases[i];
        errors += c->want_error;
        if (c->want_error)
            put(&c->want, "ERROR", 5);
        char err[256] = "";
        char *got = run_case(c, 0, err, sizeof(err));
        int good = strcmp(got, c->want.p) == 0;
        passed += good;
        is_str(got, c->want.p, "readrows: %s", c->desc);
        if (err[0])
            diag("  merge error: %s", err);
        free(got);
        got = run_case(c, 1, err, sizeof(err));
        is_str(got, c->want.p, "readrows, one response: %s", c->desc);
        free(got);
        free_case(c);
    }
    is(errors, 14, "14 cases expect an error");
    is(passed, 48, "all 48 conformance cases pass");
}

/* ---- the resume point, limits and callbacks ---- */

static Bigtable__ReadRowsResponse__CellChunk *
mk_chunk(const char *rk, const char *fam, const char *qual, const char *value, int commit)
{
    Bigtable__ReadRowsResponse__CellChunk *c = calloc(1, sizeof(*c));
    Bigtable__StringValue *f = calloc(1, sizeof(*f));
    Bigtable__BytesValue *q = calloc(1, sizeof(*q));
    protobuf_c_message_init(&bigtable__read_rows_response__cell_chunk__descriptor, c);
    bigtable__string_value__init(f);
    bigtable__bytes_value__init(q);
    if (rk)
        c->row_key = (ProtobufCBinaryData){strlen(rk), (uint8_t *)rk};
    if (fam) {
        f->value = (char *)fam;
        c->family_name = f;
    } else {
        free(f);
    }
    if (qual) {
        q->value = (ProtobufCBinaryData){strlen(qual), (uint8_t *)qual};
        c->qualifier = q;
    } else {
        free(q);
    }
    c->value = (ProtobufCBinaryData){strlen(value), (uint8_t *)value};
    if (commit) {
        c->row_status_case = BIGTABLE__READ_ROWS_RESPONSE__CELL_CHUNK__ROW_STATUS_COMMIT_ROW;
        c->commit_row = 1;
    }
    return c;
}

static void free_chunk(Bigtable__ReadRowsResponse__CellChunk *c)
{
    free(c->family_name);
    free(c->qualifier);
    free(c);
}

static int feed(pt_bt_merger *m, Bigtable__ReadRowsResponse__CellChunk *c)
{
    int rv = pt_bt_merger_chunk(m, c);
    free_chunk(c);
    return rv;
}

static int feed_scanned(pt_bt_merger *m, const char *key)
{
    Bigtable__ReadRowsResponse r;
    bigtable__read_rows_response__init(&r);
    r.last_scanned_row_key = (ProtobufCBinaryData){strlen(key), (uint8_t *)key};
    return pt_bt_merger_response(m, &r);
}

static int last_is(const pt_bt_merger *m, const char *key)
{
    pt_slice last;
    return pt_bt_merger_last(m, &last) && pt_slice_eq(last, pt_slice_str(key));
}

static void test_resume_point(void)
{
    sink s = {0};
    pt_bt_merger m;
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    is(feed(&m, mk_chunk("b", "p", "q", "1", 1)), 0, "row b");
    ok(last_is(&m, "b"), "the resume point is b");
    is(feed_scanned(&m, "d"), 0, "last_scanned_row_key d");
    ok(last_is(&m, "d"), "the resume point moves to d");
    is(s.rows, 1, "a scan marker is not a row");
    is(feed(&m, mk_chunk("c", "p", "q", "1", 1)), PT_EINTERNAL, "a row before the marker fails");

    pt_bt_merger_free(&m);
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    is(feed(&m, mk_chunk("e", "p", "q", "1", 0)), 0, "half a row e");
    is(feed_scanned(&m, "f"), PT_EINTERNAL, "a scan marker inside a row fails");
    pt_bt_merger_abandon(&m);
    is(feed_scanned(&m, "f"), 0, "after abandoning the partial row the marker is fine");
    is(feed_scanned(&m, "f"), PT_EINTERNAL, "a marker must move forward");
    is(feed(&m, mk_chunk("f", "p", "q", "1", 1)), PT_EINTERNAL, "row f is not after f");
    pt_bt_merger_abandon(&m);
    is(feed(&m, mk_chunk("g", "p", "q", "1", 0)), 0, "half a row g");
    pt_bt_merger_abandon(&m);
    s.rows = 0;
    is(feed(&m, mk_chunk("g", "p", "q", "1", 1)), 0, "after a broken stream g may come again");
    is(s.rows, 1, "and is delivered once");
    is(pt_bt_merger_end(&m), 0, "the stream ends cleanly");
    free(s.got.p);
    pt_bt_merger_free(&m);
}

static void test_callbacks_and_limits(void)
{
    sink s = {.stop_after = 2};
    pt_bt_merger m;
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    is(feed(&m, mk_chunk("a", "p", "q", "1", 1)), 0, "row 1");
    is(feed(&m, mk_chunk("b", "p", "q", "1", 1)), 1, "the callback's stop comes back as 1");
    ok(last_is(&m, "b"), "a stopped row is still the resume point");
    pt_bt_merger_free(&m);
    free(s.got.p);

    s = (sink){.fail_code = PT_ELIMIT};
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    is(feed(&m, mk_chunk("a", "p", "q", "1", 1)), PT_ELIMIT, "a negative code comes back as is");
    pt_bt_merger_free(&m);
    free(s.got.p);

    s = (sink){0};
    pt_bt_merger_init(&m, on_row, &s, 64);
    static char big[100];
    memset(big, 'v', sizeof(big) - 1);
    is(feed(&m, mk_chunk("a", "p", "q", big, 1)), PT_ELIMIT, "a row over the ceiling fails");
    ok(strstr(m.err, "larger") != NULL, "with a reason: %s", m.err);
    pt_bt_merger_free(&m);

    /* A split cell announcing more than the ceiling fails before allocating it. */
    pt_bt_merger_init(&m, on_row, &s, 1 << 20);
    Bigtable__ReadRowsResponse__CellChunk *c = mk_chunk("a", "p", "q", "x", 0);
    c->value_size = 0x7fffffff;
    is(feed(&m, c), PT_ELIMIT, "a huge value_size is refused");
    pt_bt_merger_free(&m);
    free(s.got.p);
}

/* ---- range clipping for resumed reads ---- */

static const char *show_ranges(const pt_bt_range *r, size_t n)
{
    static char out[512];
    size_t o = 0;
    out[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%.*s,", r[i].start_open ? "(" : "[",
                              (int)r[i].start.n, (const char *)r[i].start.p);
        for (size_t j = 0; j < r[i].end.n; j++)
            o += (size_t)snprintf(out + o, sizeof(out) - o, r[i].end.p[j] ? "%c" : "\\0",
                                  r[i].end.p[j]);
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s)", r[i].end.n ? "" : "inf");
    }
    return out;
}

#define R(s, e) ((pt_row_range){PT_SLICE_LIT(s), PT_SLICE_LIT(e)})

static void test_clip(void)
{
    pt_row_range in[] = {R("a", "c"), R("d", "d\0"), R("e", "e"), R("f", "h"), R("x", "")};
    pt_bt_range out[5];
    size_t n = pt_bt_clip_ranges(in, 5, NULL, out);
    is_str(show_ranges(out, n), "[a,c)[d,d\\0)[f,h)[x,inf)", "the empty range [e, e) is dropped");

    pt_slice last = PT_SLICE_LIT("b");
    n = pt_bt_clip_ranges(in, 5, &last, out);
    is_str(show_ranges(out, n), "(b,c)[d,d\\0)[f,h)[x,inf)", "resume inside the first range");
    last = (pt_slice)PT_SLICE_LIT("d");
    n = pt_bt_clip_ranges(in, 5, &last, out);
    is_str(show_ranges(out, n), "[f,h)[x,inf)", "a finished single row is dropped");
    last = (pt_slice)PT_SLICE_LIT("c");
    n = pt_bt_clip_ranges(in, 5, &last, out);
    is_str(show_ranges(out, n), "[d,d\\0)[f,h)[x,inf)", "resume at an exclusive end");
    last = (pt_slice)PT_SLICE_LIT("zz");
    n = pt_bt_clip_ranges(in, 5, &last, out);
    is_str(show_ranges(out, n), "(zz,inf)", "an unbounded range is never finished");
    pt_row_range only[] = {R("a", "c")};
    n = pt_bt_clip_ranges(only, 1, &last, out);
    is(n, 0, "nothing left: no ranges (the caller must not send an empty row set)");
    pt_row_range all[] = {R("", "")};
    n = pt_bt_clip_ranges(all, 1, NULL, out);
    is_str(show_ranges(out, n), "[,inf)", "the whole key space");
    last = (pt_slice)PT_SLICE_LIT("k");
    n = pt_bt_clip_ranges(all, 1, &last, out);
    is_str(show_ranges(out, n), "(k,inf)", "the whole key space after k");
}

/* ---- cut points for one wide range ---- */

/* The cut keys split_points picks for [start, end) (end "" = +inf), comma-separated. */
static const char *show_cuts(const pt_bt_sample *s, size_t n, int64_t total, const char *start,
                             const char *end, size_t k, int64_t min_bytes)
{
    static char out[256];
    size_t idx[16], o = 0;
    size_t m =
        pt_bt_split_points(s, n, total, pt_slice_str(start), pt_slice_str(end), k, min_bytes, idx);
    out[0] = '\0';
    for (size_t i = 0; i < m; i++)
        o += (size_t)snprintf(out + o, sizeof(out) - o, "%s%.*s", i ? "," : "",
                              (int)s[idx[i]].key.n, (const char *)s[idx[i]].key.p);
    return out;
}

static void test_split(void)
{
    static const pt_bt_sample s[] = {{PT_SLICE_LIT("b"), 0},
                                     {PT_SLICE_LIT("d"), 100},
                                     {PT_SLICE_LIT("f"), 200},
                                     {PT_SLICE_LIT("h"), 300},
                                     {PT_SLICE_LIT("j"), 400}};
    is_str(show_cuts(s, 5, 500, "a", "", 4, 0), "d,f,j",
           "4 pieces of the tail, cut near 125/250/375");
    is_str(show_cuts(s, 5, 500, "c", "i", 4, 0), "d,f,h", "a bounded range");
    is_str(show_cuts(s, 5, 500, "d", "h", 4, 0), "f",
           "keys equal to the bounds are no cuts (they would leave an empty piece)");
    is_str(show_cuts(s, 5, 500, "a", "", 4, 200), "f", "no piece under min_bytes: 2 pieces");
    is_str(show_cuts(s, 5, 500, "c", "e", 4, 300), "", "a range under min_bytes stays whole");
    is_str(show_cuts(s, 5, 500, "d", "d\x01", 4, 0), "", "no sample inside: whole");
    is_str(show_cuts(s, 5, 500, "", "", 16, 0), "b,d,f,h,j",
           "more pieces wanted than samples: every sample cuts");
    is_str(show_cuts(s, 5, 500, "", "", 1, 0), "", "one piece: no cut");
    is_str(show_cuts(s, 0, 0, "", "", 4, 0), "", "no samples: no cut");
    static const pt_bt_sample flat[] = {
        {PT_SLICE_LIT("b"), 7}, {PT_SLICE_LIT("c"), 7}, {PT_SLICE_LIT("d"), 7}};
    is_str(show_cuts(flat, 3, 7, "a", "z", 3, 100), "",
           "a small range stays whole, however many samples fall inside");
    is_str(show_cuts(flat, 3, 700, "a", "", 3, 0), "c,d", "cuts stay increasing when sizes bunch");
}

int main(void)
{
    test_conformance();
    test_resume_point();
    test_callbacks_and_limits();
    test_clip();
    test_split();
    return done_testing();
}
