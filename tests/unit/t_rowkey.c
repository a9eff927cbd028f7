/* Row keys, cells and index keys (docs/storage-format.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "index.h"
#include "rowkey.h"
#include "tap.h"

static pt_slice S(const char *s) { return pt_slice_str(s); }

static int sid_of(pt_arena *a, const char *const *kv, size_t n, pt_slice *sid)
{
    pt_label ls[16];
    for (size_t i = 0; i < n; i++) {
        ls[i].name = S(kv[2 * i]);
        ls[i].value = S(kv[2 * i + 1]);
    }
    return pt_series_id(a, ls, n, PT_MAX_ROW_KEY, sid);
}

static int has_prefix(pt_slice s, pt_slice p) { return s.n >= p.n && memcmp(s.p, p.p, p.n) == 0; }

/* Random label values drawn from the bytes that matter to the escaping. */
static void random_value(char *buf, size_t max, unsigned *seed)
{
    static const char *const parts[] = {",", "=", "@", "\\", ",@", "\\,", "a", "b", "\x01",
                                        "\x1f", "\xc3\xbc", "\xf0\x9f\x98\x80", "@1", " ", ""};
    size_t n = (size_t)(rand_r(seed) % 6), o = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p = parts[rand_r(seed) % (sizeof(parts) / sizeof(parts[0]))];
        size_t l = strlen(p);
        if (o + l + 1 >= max)
            break;
        memcpy(buf + o, p, l);
        o += l;
    }
    buf[o] = '\0';
}

/* pt_text_flags against a byte-by-byte reading, for every byte value at every position of
 * names of 0..24 bytes (the paths: under 8 bytes, whole words, tails). The bytes past the
 * name are ',' and 0x80, which set both flags if read. */
static void test_text_flags(void)
{
    uint8_t buf[32]; /* names up to 24 bytes, then bytes that must not be read */
    int bad = 0;
    for (size_t n = 0; n <= 24 && !bad; n++) {
        for (size_t pos = 0; pos < (n ? n : 1) && !bad; pos++) {
            for (int b = 0; b < 256 && !bad; b++) {
                memset(buf, 'a', n);
                for (size_t i = n; i < sizeof(buf); i++)
                    buf[i] = i % 2 ? ',' : 0x80;
                if (n)
                    buf[pos] = (uint8_t)b;
                unsigned want = 0;
                for (size_t i = 0; i < n; i++) {
                    if (buf[i] >= 0x80)
                        want |= PT_TEXT_NONASCII;
                    if (buf[i] < 0x20 || (buf[i] && strchr(",=@\\", buf[i])))
                        want |= PT_TEXT_ESCAPE;
                }
                unsigned got = pt_text_flags((pt_slice){buf, n});
                if (got != want) {
                    diag("length %zu, byte 0x%02x at %zu: flags %u, want %u", n, b, pos, got,
                         want);
                    bad = 1;
                }
            }
        }
    }
    ok(!bad, "pt_text_flags finds non-ASCII and escaped bytes at every position and length");
}

/* The series-row cache: entries, empty entries, epochs, invalidation, its memory bound. */
/* The key time base/schema.h reads for the backends, against the keys rowkey.c builds. */
static void test_key_time(void)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_label ls[] = {{S("__name__"), S("up")}, {S("job"), S("a,@0000000000001\\")}};
    pt_slice sid;
    ok(pt_series_id(&a, ls, 2, PT_MAX_ROW_KEY, &sid) == 0, "sid of a value holding \",@\" and a backslash");
    uint8_t key[256];
    int64_t base = 3 * PT_BUCKET_MS;
    size_t n = (size_t)(pt_row_key(key, sid, base) - key), end = 0;
    is((long long)pt_key_time(key, n, "@#", &end), (long long)base,
       "pt_key_time reads the base after the first unescaped \",@\", not the escaped one");
    is((int)end, (int)n, "... and its digits end the key");
    is((long long)pt_key_time(key, n - 1, "@", &end), -1LL, "a key cut inside its digits: -1");
    is((long long)pt_key_time((const uint8_t *)"up,#00000000000x7", 17, "#", &end), -1LL,
       "a marker followed by something else than digits: -1");
    is((long long)pt_key_time((const uint8_t *)"up,#0000000004096", 17, "@", &end), -1LL,
       "a marker not asked for is not a time");
    is((long long)pt_key_time((const uint8_t *)"up,#0000000004096", 17, "@#", &end), 4096LL,
       "an exemplar row's base after \",#\"");
    pt_arena_free(&a);
}

static void test_ref_cache(void)
{
    pt_ref_cache *c = pt_ref_cache_new(1 << 20);
    pt_buf b;
    pt_buf_init(&b, 0);
    ok(pt_ref_cache_get(c, 7, 100, &b) == 0, "ref cache: a miss");
    uint32_t e = pt_ref_cache_epoch(c, 7, 100);
    pt_ref_cache_put(c, 7, 100, e, (const uint8_t *)"abc", 3);
    pt_ref_cache_put(c, 7, 200, pt_ref_cache_epoch(c, 7, 200), NULL, 0);
    ok(pt_ref_cache_get(c, 7, 100, &b) == 1 && b.len == 3 && memcmp(b.p, "abc", 3) == 0,
       "ref cache: an entry comes back");
    pt_buf_reset(&b);
    ok(pt_ref_cache_get(c, 7, 200, &b) == 1 && b.len == 0 && pt_ref_cache_get(c, 8, 100, &b) == 0,
       "ref cache: an empty entry is a hit; another reference misses");
    pt_ref_cache_invalidate(c, 7, 100);
    ok(pt_ref_cache_get(c, 7, 100, &b) == 0, "ref cache: a written series row drops its entry");
    pt_ref_cache_put(c, 7, 100, e, (const uint8_t *)"old", 3);
    ok(pt_ref_cache_get(c, 7, 100, &b) == 0,
       "ref cache: a fill that began before the write is not kept");
    size_t most = 0;
    static uint8_t row[1000];
    for (uint64_t r = 0; r < 20000; r++) {
        pt_ref_cache_put(c, r, 0, pt_ref_cache_epoch(c, r, 0), row, sizeof(row));
        size_t now = pt_ref_cache_bytes(c);
        most = now > most ? now : most;
    }
    pt_buf_reset(&b);
    ok(most <= (1 << 20) && pt_ref_cache_get(c, 19999, 0, &b) == 1,
       "ref cache: 20 MB of entries held in at most 1 MiB (%zu B); the newest kept", most);
    pt_buf_free(&b);
    pt_ref_cache_free(c);
}

int main(void)
{
    test_key_time();
    test_text_flags();
    test_ref_cache();
    pt_arena a;
    pt_arena_init(&a, 0, 0);

    /* A worked example of a row key. */
    const char *kv[] = {"__name__", "node_cpu_seconds_total", "cpu", "0", "instance", "a:9100",
                        "mode", "idle"};
    pt_slice sid;
    ok(sid_of(&a, kv, 4, &sid) == 0, "series id builds");
    uint8_t row[256];
    uint8_t *e = pt_row_key(row, sid, pt_bucket_base(1297080123392 + 5));
    is_str(pt_arena_strndup(&a, (const char *)row, (size_t)(e - row)),
           "node_cpu_seconds_total,cpu=0,instance=a:9100,mode=idle,@1297080123392",
           "row key matches the worked example");
    is(pt_row_key_base((pt_slice){row, (size_t)(e - row)}), 1297080123392, "base parses back");

    /* __name__ is not necessarily first in sorted order: "A" < "_". */
    const char *kv2[] = {"Zone", "z", "__name__", "m", "job", "j"};
    ok(sid_of(&a, kv2, 3, &sid) == 0 && pt_slice_eq(sid, S("m,Zone=z,job=j")),
       "metric first, then the other labels in name order");

    /* Escaping. */
    const char *nasty[] = {"__name__", "m\\,=@", "a", "x,@1297080123392", "b", "\x01\n\x1f"};
    ok(sid_of(&a, nasty, 3, &sid) == 0 &&
           pt_slice_eq(sid, S("m\\\\\\,\\=\\@,a=x\\,\\@1297080123392,b=\\x01\\x0a\\x1f")),
       "\\ , = @ and control bytes are escaped");
    ok(memchr(sid.p, 0, sid.n) == NULL, "no 0x00 byte in a series id");
    pt_label *back;
    long nb = pt_series_id_parse(&a, sid, &back);
    ok(nb == 3 && pt_slice_eq(back[0].value, S("m\\,=@")) &&
           pt_slice_eq(back[1].value, S("x,@1297080123392")) &&
           pt_slice_eq(back[2].value, S("\x01\n\x1f")),
       "series id parses back to the same labels");

    /* Bases and offsets. */
    int64_t t = 1700000000123;
    int64_t base = pt_bucket_base(t);
    ok(base % PT_BUCKET_MS == 0 && t - base < PT_BUCKET_MS, "base is a multiple of 2^32 ms");
    is(pt_bucket_base(0), 0, "base of t=0");
    is(pt_bucket_base(PT_BUCKET_MS), PT_BUCKET_MS, "base at a bucket boundary");
    is(pt_bucket_base(PT_BUCKET_MS - 1), 0, "base just before a boundary");

    /* Cells: bit-exact values, the staleness marker above all. */
    const uint64_t bits[] = {0x7ff0000000000002ULL, 0x7ff8000000000001ULL, 0x8000000000000000ULL,
                             0x0000000000000001ULL, 0x7ff0000000000000ULL, 0xfff0000000000000ULL,
                             0x3ff0000000000000ULL};
    int exact = 1;
    for (size_t i = 0; i < sizeof(bits) / sizeof(bits[0]); i++) {
        double v, got;
        memcpy(&v, &bits[i], 8);
        uint8_t q[4], val[8];
        int64_t tt;
        pt_cell_encode(t, v, q, val);
        pt_cell_decode(base, (pt_slice){q, 4}, (pt_slice){val, 8}, &tt, &got);
        uint64_t gb;
        memcpy(&gb, &got, 8);
        exact &= gb == bits[i] && tt == t;
    }
    ok(exact, "values round-trip bit-exactly (StaleNaN 0x7ff0000000000002, -0, denormals, inf)");
    {
        double v;
        uint64_t stale = 0x7ff0000000000002ULL;
        memcpy(&v, &stale, 8);
        uint8_t q[4], val[8];
        pt_cell_encode(PT_BUCKET_MS + 0x01020304, v, q, val);
        ok(memcmp(q, "\x01\x02\x03\x04", 4) == 0, "qualifier is the 4-byte big-endian offset");
        ok(memcmp(val, "\x7f\xf0\x00\x00\x00\x00\x00\x02", 8) == 0,
           "value is the 8-byte big-endian IEEE-754 pattern");
    }

    /* Long series: hashed ids stay under the Bigtable cap, distinct and prefix-free. */
    char *big = malloc(5000);
    memset(big, 'v', 4999);
    big[4999] = '\0';
    const char *longkv[] = {"__name__", "long_metric", "big", big};
    pt_slice h1, h2;
    ok(sid_of(&a, longkv, 2, &h1) == 0 && PT_ROW_KEY_LEN(h1.n) <= PT_MAX_ROW_KEY,
       "a 5000-byte label value gives a row key under 4 KiB");
    ok(has_prefix(h1, S("long_metric,\\#")), "hashed id keeps the metric name");
    big[0] = 'w';
    ok(sid_of(&a, longkv, 2, &h2) == 0 && !pt_slice_eq(h1, h2), "different long series differ");
    ok(pt_series_id_parse(&a, h1, &back) < 0, "a hashed id does not parse as labels");
    memset(big, 'n', 4999);
    const char *longname[] = {"__name__", big};
    ok(sid_of(&a, longname, 1, &h2) == 0 && has_prefix(h2, S("\\#")) &&
           PT_ROW_KEY_LEN(h2.n) <= PT_MAX_ROW_KEY,
       "a 5000-byte metric name is hashed whole");
    free(big);

    /* Property: the rows of one series form one contiguous range that no other series
     * interleaves, and series ids with their ",@" are prefix-free. */
    unsigned seed = 42;
    enum { NSER = 300 };
    static char vals[NSER][2][64];
    static pt_slice sids[NSER];
    for (int i = 0; i < NSER; i++) {
        random_value(vals[i][0], 64, &seed);
        random_value(vals[i][1], 64, &seed);
        const char *k[] = {"__name__", vals[i][0][0] ? vals[i][0] : "m", "a", vals[i][1]};
        pt_label ls[2] = {{S(k[0]), S(k[1])}, {S(k[2]), S(k[3])}};
        pt_series_id(&a, ls, vals[i][1][0] ? 2 : 1, PT_MAX_ROW_KEY, &sids[i]);
    }
    int interleave = 0, prefix = 0, roundtrip = 1;
    for (int i = 0; i < NSER; i++) {
        uint8_t *pi = pt_arena_alloc(&a, sids[i].n + 2);
        memcpy(pi, sids[i].p, sids[i].n);
        memcpy(pi + sids[i].n, ",@", 2);
        pt_slice si = {pi, sids[i].n + 2};
        pt_label *ls;
        long nl = pt_series_id_parse(&a, sids[i], &ls);
        roundtrip &= nl >= 1 && pt_slice_eq(ls[0].value, S(vals[i][0][0] ? vals[i][0] : "m"));
        if (nl == 2)
            roundtrip &= pt_slice_eq(ls[1].value, S(vals[i][1]));
        for (int j = 0; j < NSER; j++) {
            if (pt_slice_eq(sids[i], sids[j]))
                continue;
            uint8_t lo[128], hi[128];
            /* Rows of j at the lowest and highest bases must not fall inside i's range. */
            pt_slice lj = {lo, (size_t)(pt_row_key(lo, sids[j], 0) - lo)};
            pt_slice hj = {hi, (size_t)(pt_row_key(hi, sids[j], PT_MAX_TIME_MS) - hi)};
            prefix |= has_prefix(lj, si);
            interleave |= has_prefix(hj, si);
        }
    }
    ok(roundtrip, "random nasty label values round-trip through the series id");
    ok(!prefix && !interleave, "no series' rows fall inside another series' key range");

    /* Label-set encoding used in index cells. */
    pt_label ls[3] = {{S("__name__"), S("m")}, {S("a"), S("")}, {S("b"), S("\x00x")}};
    ls[2].value.n = 2;
    uint8_t enc[64];
    size_t el = (size_t)(pt_labels_encode(enc, ls, 3) - enc);
    is(el, pt_labels_encoded_len(ls, 3), "encoded length is predicted");
    pt_label *dec;
    long nd = pt_labels_decode(&a, (pt_slice){enc, el}, &dec);
    ok(nd == 3 && pt_labels_cmp(dec, 3, ls, 3) == 0, "label sets round-trip (NUL inside)");
    ok(pt_labels_decode(&a, (pt_slice){enc, el - 1}, &dec) < 0, "truncated encoding is refused");

    /* labels.Compare order. */
    pt_label x[2] = {{S("__name__"), S("a")}, {S("b"), S("1")}};
    pt_label y[1] = {{S("__name__"), S("a")}};
    ok(pt_labels_cmp(y, 1, x, 2) < 0, "a prefix label set sorts first");
    ok(pt_labels_cmp(x, 2, x, 2) == 0, "equal sets compare equal");

    /* Prefix successor. */
    uint8_t pe[8];
    pt_slice end;
    pt_prefix_end(pe, S("ab\xff"), &end);
    ok(end.n == 2 && memcmp(end.p, "ac", 2) == 0, "prefix end skips trailing 0xff");

    /* Index keys: a metric scan never sees postings or value rows. */
    uint8_t k1[128], k2[128];
    size_t l1 = (size_t)(pt_index_metric_prefix(k1, S("~a"), 0) - k1);
    size_t l2 = (size_t)(pt_index_posting_prefix(k2, S("a"), S("b"), 0) - k2);
    ok(!has_prefix((pt_slice){k2, l2}, (pt_slice){k1, l1}) &&
           !has_prefix((pt_slice){k1, l1}, (pt_slice){k2, l2}),
       "metric \"~a\" rows and postings of a=b do not share a prefix");
    l2 = (size_t)(pt_index_values_prefix(k2, S("a"), 0) - k2);
    ok(k2[0] == '=' && l2 == 1 + 1 + 2 + 13 + 1, "label values key layout");

    pt_arena_free(&a);
    return done_testing();
}
