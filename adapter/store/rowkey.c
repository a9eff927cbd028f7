#include "rowkey.h"

#include <openssl/evp.h>
#include <string.h>
#include <xxhash.h>

#include "bytes.h"
#include "error.h"

static const char hexdig[] = "0123456789abcdef";

/* Extra bytes each input byte takes when escaped: 3 for control bytes ("\xHH"), 1 for
 * \ , = @, 0 otherwise. */
static const uint8_t extra[256] = {
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3,
    [','] = 1, ['='] = 1, ['@'] = 1, ['\\'] = 1,
};

/* pt_text_flags looks at eight bytes at a time (escaping itself is rare and goes byte by
 * byte): nonzero when one of them is a control byte or one of \ , = @.
 * (v - 0x01..) & ~v & 0x80.. is nonzero exactly when a byte of v is zero, and
 * (w - 0x20..) & ~w & 0x80.. exactly when a byte of w is below 0x20.) */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t has_zero(uint64_t v) { return (v - ONES) & ~v & HIGHS; }

static inline uint64_t load8(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

static inline uint64_t needs_escape8(const uint8_t *p)
{
    uint64_t w = load8(p);
    return ((w - ONES * 0x20) & ~w & HIGHS) | has_zero(w ^ (ONES * ',')) |
           has_zero(w ^ (ONES * '=')) | has_zero(w ^ (ONES * '@')) |
           has_zero(w ^ (ONES * '\\'));
}

size_t pt_escaped_len(pt_slice s)
{
    size_t n = s.n;
    for (size_t i = 0; i < s.n; i++)
        n += extra[s.p[i]];
    return n;
}

uint8_t *pt_escape(uint8_t *dst, pt_slice s)
{
    size_t i = 0;
    while (i < s.n) {
        /* Copy the run that needs no escaping in one go. */
        size_t j = i;
        while (j < s.n && !extra[s.p[j]])
            j++;
        memcpy(dst, s.p + i, j - i);
        dst += j - i;
        if (j == s.n)
            break;
        uint8_t c = s.p[j];
        *dst++ = '\\';
        if (c < 0x20) {
            *dst++ = 'x';
            *dst++ = (uint8_t)hexdig[c >> 4];
            *dst++ = (uint8_t)hexdig[c & 15];
        } else {
            *dst++ = c;
        }
        i = j + 1;
    }
    return dst;
}

/* Writes "\#" and the 64 hex digits of SHA-256(data); returns the end or NULL. */
static uint8_t *put_digest(uint8_t *dst, const uint8_t *data, size_t n)
{
    uint8_t md[32];
    unsigned mdlen = 0;
    if (!EVP_Digest(data, n, md, &mdlen, EVP_sha256(), NULL) || mdlen != 32)
        return NULL;
    *dst++ = '\\';
    *dst++ = '#';
    for (int i = 0; i < 32; i++) {
        *dst++ = (uint8_t)hexdig[md[i] >> 4];
        *dst++ = (uint8_t)hexdig[md[i] & 15];
    }
    return dst;
}

static int hexval(uint8_t c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1;
}

long pt_unescape(uint8_t *dst, pt_slice src)
{
    size_t o = 0;
    for (size_t i = 0; i < src.n; i++) {
        uint8_t c = src.p[i];
        if (c != '\\') {
            dst[o++] = c;
            continue;
        }
        if (++i >= src.n)
            return -1;
        c = src.p[i];
        if (c == 'x') {
            if (i + 2 >= src.n)
                return -1;
            int h = hexval(src.p[i + 1]), l = hexval(src.p[i + 2]);
            if (h < 0 || l < 0 || (h << 4 | l) >= 0x20)
                return -1;
            dst[o++] = (uint8_t)(h << 4 | l);
            i += 2;
        } else if (c == '\\' || c == ',' || c == '=' || c == '@') {
            dst[o++] = c;
        } else {
            return -1;
        }
    }
    return (long)o;
}

static pt_slice metric_of(const pt_label *labels, size_t n, size_t *name_idx)
{
    for (size_t i = 0; i < n; i++) {
        if (labels[i].name.n == 8 && memcmp(labels[i].name.p, "__name__", 8) == 0) {
            *name_idx = i;
            return labels[i].value;
        }
    }
    *name_idx = n;
    return (pt_slice){(const uint8_t *)"", 0};
}

unsigned pt_text_flags(pt_slice s)
{
    uint64_t high = 0, esc = 0;
    if (s.n < 8) {
        for (size_t i = 0; i < s.n; i++) {
            high |= s.p[i] & 0x80;
            esc |= extra[s.p[i]];
        }
    } else {
        /* Whole words, then the last eight bytes (overlapping) instead of a byte loop. */
        for (size_t i = 0; i + 8 <= s.n; i += 8) {
            high |= load8(s.p + i);
            esc |= needs_escape8(s.p + i);
        }
        high |= load8(s.p + s.n - 8);
        esc |= needs_escape8(s.p + s.n - 8);
        high &= HIGHS;
    }
    return (high ? PT_TEXT_NONASCII : 0) | (esc ? PT_TEXT_ESCAPE : 0);
}

/* Copies s to dst and returns the end when no byte of s needs escaping; NULL otherwise. */
static uint8_t *copy_plain(uint8_t *dst, pt_slice s, int check)
{
    if (check && (pt_text_flags(s) & PT_TEXT_ESCAPE))
        return NULL;
    memcpy(dst, s.p, s.n);
    return dst + s.n;
}

/* Writes the escaped series id of labels (metric = labels[ni].value) to dst, which holds
 * its escaped length; returns the end of the metric part in *metric_end. */
static uint8_t *put_sid(uint8_t *dst, const pt_label *labels, size_t n, size_t ni,
                        pt_slice metric, uint8_t **metric_end)
{
    uint8_t *p = pt_escape(dst, metric);
    *metric_end = p;
    for (size_t i = 0; i < n; i++) {
        if (i == ni)
            continue;
        *p++ = ',';
        p = pt_escape(p, labels[i].name);
        *p++ = '=';
        p = pt_escape(p, labels[i].value);
    }
    return p;
}

int pt_series_id(pt_arena *a, const pt_label *labels, size_t n, size_t key_limit,
                 pt_slice *sid)
{
    return pt_series_id_checked(a, labels, n, 1, key_limit, sid);
}

int pt_series_id_checked(pt_arena *a, const pt_label *labels, size_t n, int check,
                         size_t key_limit, pt_slice *sid)
{
    size_t ni;
    pt_slice metric = metric_of(labels, n, &ni);
    /* Labels almost never need escaping: copy them in one pass into a buffer of the raw
     * length, and only when a byte needs escaping measure and escape them after all. */
    size_t len = metric.n;
    for (size_t i = 0; i < n; i++)
        if (i != ni)
            len += 2 + labels[i].name.n + labels[i].value.n;
    uint8_t *buf = pt_arena_alloc(a, len);
    if (!buf)
        return PT_ENOMEM;
    uint8_t *p = copy_plain(buf, metric, check), *metric_end = p;
    for (size_t i = 0; i < n && p; i++) {
        if (i == ni)
            continue;
        *p++ = ',';
        if ((p = copy_plain(p, labels[i].name, check)) == NULL)
            break;
        *p++ = '=';
        p = copy_plain(p, labels[i].value, check);
    }
    if (!p) {
        len = pt_escaped_len(metric);
        for (size_t i = 0; i < n; i++)
            if (i != ni)
                len += 2 + pt_escaped_len(labels[i].name) + pt_escaped_len(labels[i].value);
        if ((buf = pt_arena_alloc(a, len)) == NULL)
            return PT_ENOMEM;
        put_sid(buf, labels, n, ni, metric, &metric_end);
    }
    size_t metric_len = (size_t)(metric_end - buf);
    if (PT_ROW_KEY_LEN(len) <= key_limit) {
        *sid = (pt_slice){buf, len};
        return 0;
    }

    /* Too long for a row key: keep the metric (when short) and a digest of the whole sid. */
    size_t keep = metric_len <= PT_HASHED_METRIC_MAX ? metric_len : 0;
    uint8_t *h = pt_arena_alloc(a, keep + 1 + PT_DIGEST_LEN);
    if (!h)
        return PT_ENOMEM;
    memcpy(h, buf, keep);
    p = h + keep;
    if (keep)
        *p++ = ',';
    p = put_digest(p, buf, len);
    if (!p)
        return PT_EINTERNAL;
    *sid = (pt_slice){h, (size_t)(p - h)};
    return 0;
}

/* Length of the escaped token starting at s[i], ending before an unescaped ',' or '='. */
static size_t token_end(pt_slice s, size_t i)
{
    while (i < s.n) {
        if (s.p[i] == '\\') {
            if (i + 1 < s.n && s.p[i + 1] == 'x')
                i += 4;
            else
                i += 2;
            continue;
        }
        if (s.p[i] == ',' || s.p[i] == '=')
            break;
        i++;
    }
    return i > s.n ? s.n : i;
}

/* The unescaped token: esc itself when it holds no escape, else a copy in a. */
static int unescape_into(pt_arena *a, pt_slice esc, pt_slice *out)
{
    if (!esc.n || !memchr(esc.p, '\\', esc.n)) {
        *out = esc;
        return 0;
    }
    uint8_t *d = pt_arena_alloc(a, esc.n ? esc.n : 1);
    if (!d)
        return PT_ENOMEM;
    long n = pt_unescape(d, esc);
    if (n < 0)
        return PT_EINTERNAL;
    *out = (pt_slice){d, (size_t)n};
    return 0;
}

long pt_series_id_parse(pt_arena *a, pt_slice sid, pt_label **labels)
{
    size_t count = 1;
    for (size_t i = 0; i < sid.n; i++) {
        if (sid.p[i] == '\\') {
            if (i + 1 < sid.n && sid.p[i + 1] == '#')
                return PT_EINTERNAL; /* hashed: labels live in the index */
            i++;
        } else if (sid.p[i] == ',') {
            count++;
        }
    }
    pt_label *ls = pt_arena_alloc(a, count * sizeof(*ls));
    if (!ls)
        return PT_ENOMEM;
    size_t e = token_end(sid, 0);
    if (e < sid.n && sid.p[e] != ',')
        return PT_EINTERNAL;
    ls[0].name = PT_SLICE_LIT("__name__");
    if (unescape_into(a, (pt_slice){sid.p, e}, &ls[0].value) != 0)
        return PT_EINTERNAL;
    size_t k = 1, i = e;
    while (i < sid.n) {
        size_t ns = i + 1, ne = token_end(sid, ns);
        if (ne >= sid.n || sid.p[ne] != '=')
            return PT_EINTERNAL;
        size_t vs = ne + 1, ve = token_end(sid, vs);
        if (ve < sid.n && sid.p[ve] != ',')
            return PT_EINTERNAL;
        if (k >= count)
            return PT_EINTERNAL;
        if (unescape_into(a, (pt_slice){sid.p + ns, ne - ns}, &ls[k].name) != 0 ||
            unescape_into(a, (pt_slice){sid.p + vs, ve - vs}, &ls[k].value) != 0)
            return PT_EINTERNAL;
        k++;
        i = ve;
    }
    *labels = ls;
    return (long)k;
}

static uint8_t *put_digits13(uint8_t *dst, int64_t v)
{
    for (int i = PT_BASE_DIGITS - 1; i >= 0; i--) {
        dst[i] = (uint8_t)('0' + v % 10);
        v /= 10;
    }
    return dst + PT_BASE_DIGITS;
}

uint8_t *pt_row_key(uint8_t *dst, pt_slice sid, int64_t base)
{
    memcpy(dst, sid.p, sid.n);
    dst += sid.n;
    *dst++ = ',';
    *dst++ = '@';
    return put_digits13(dst, base);
}

int64_t pt_row_key_base(pt_slice row)
{
    return pt_row_key_base_marked(row, '@');
}

int64_t pt_row_key_base_marked(pt_slice row, uint8_t marker)
{
    if (row.n < 2 + PT_BASE_DIGITS)
        return -1;
    const uint8_t *d = row.p + row.n - PT_BASE_DIGITS;
    if (d[-2] != ',' || d[-1] != marker)
        return -1;
    return pt_key_digits(d);
}

void pt_cell_encode(int64_t t, double v, uint8_t qual[PT_QUAL_LEN], uint8_t val[PT_VALUE_LEN])
{
    pt_put_be32(qual, (uint32_t)(t - pt_bucket_base(t)));
    uint64_t bits;
    memcpy(&bits, &v, 8);
    pt_put_be64(val, bits);
}

int pt_cell_decode(int64_t base, pt_slice qual, pt_slice val, int64_t *t, double *v)
{
    if (qual.n != PT_QUAL_LEN || val.n != PT_VALUE_LEN)
        return PT_EINTERNAL;
    uint64_t bits = pt_get_be64(val.p);
    *t = base + pt_get_be32(qual.p);
    memcpy(v, &bits, 8);
    return 0;
}

static uint8_t *day_tail(uint8_t *p, int64_t day)
{
    *p++ = ',';
    *p++ = '@';
    p = put_digits13(p, day);
    *p++ = ',';
    return p;
}

uint8_t *pt_index_part(uint8_t *dst, pt_slice s)
{
    size_t n = pt_escaped_len(s);
    if (n <= PT_INDEX_PART_MAX)
        return pt_escape(dst, s);
    uint8_t *e = put_digest(dst, s.p, s.n);
    return e ? e : pt_escape(dst, s); /* digest failure cannot happen with OpenSSL's sha256 */
}

uint8_t *pt_index_metric_prefix(uint8_t *dst, pt_slice metric, int64_t day)
{
    return day_tail(pt_index_part(dst, metric), day);
}

uint8_t *pt_index_posting_prefix(uint8_t *dst, pt_slice name, pt_slice value, int64_t day)
{
    *dst++ = '~';
    dst = pt_index_part(dst, name);
    *dst++ = '=';
    dst = pt_index_part(dst, value);
    return day_tail(dst, day);
}

uint8_t *pt_index_values_prefix(uint8_t *dst, pt_slice name, int64_t day)
{
    *dst++ = '=';
    return day_tail(pt_index_part(dst, name), day);
}

uint8_t *pt_index_ref(uint8_t *dst, size_t prefix_len, pt_slice sid, size_t key_limit)
{
    if (prefix_len + sid.n <= key_limit) {
        memcpy(dst, sid.p, sid.n);
        return dst + sid.n;
    }
    uint8_t *e = put_digest(dst, sid.p, sid.n);
    return e ? e : dst;
}

uint64_t pt_series_ref(pt_slice sid, unsigned bits)
{
    uint64_t h = XXH3_64bits(sid.p, sid.n);
    return bits == 0 || bits >= 64 ? h : h & ((UINT64_C(1) << bits) - 1);
}

uint8_t *pt_ref_hex(uint8_t *dst, uint64_t ref)
{
    for (int i = PT_REF_HEX - 1; i >= 0; i--, ref >>= 4)
        dst[i] = (uint8_t)hexdig[ref & 15];
    return dst + PT_REF_HEX;
}

int pt_ref_parse(const uint8_t *p, uint64_t *ref)
{
    uint64_t v = 0;
    for (int i = 0; i < PT_REF_HEX; i++) {
        uint8_t c = p[i];
        if (c >= '0' && c <= '9')
            v = v << 4 | (uint64_t)(c - '0');
        else if (c >= 'a' && c <= 'f')
            v = v << 4 | (uint64_t)(c - 'a' + 10);
        else
            return -1;
    }
    *ref = v;
    return 0;
}

uint64_t pt_label_mask_add(uint64_t mask, pt_slice name, pt_slice value)
{
    /* name ‖ 0xff ‖ value, hashed without copying: 0xff never occurs in UTF-8 text, but
     * this is only a filter, so any collision merely keeps a candidate. */
    XXH64_hash_t h = XXH3_64bits_withSeed(value.p, value.n, XXH3_64bits(name.p, name.n));
    return mask | UINT64_C(1) << (h & 63) | UINT64_C(1) << ((h >> 6) & 63);
}

uint8_t *pt_index_series_prefix(uint8_t *dst, const uint8_t *ref16, int64_t day)
{
    *dst++ = '=';
    *dst++ = '=';
    memcpy(dst, ref16, PT_REF_HEX);
    return day_tail(dst + PT_REF_HEX, day);
}

int pt_index_is_digest(pt_slice s)
{
    return s.n == PT_DIGEST_LEN && s.p[0] == '\\' && s.p[1] == '#';
}

void pt_prefix_end(uint8_t *dst, pt_slice prefix, pt_slice *end)
{
    size_t n = prefix.n;
    memcpy(dst, prefix.p, n);
    while (n > 0 && dst[n - 1] == 0xff)
        n--;
    if (n == 0) {
        *end = (pt_slice){dst, 0};
        return;
    }
    dst[n - 1]++;
    *end = (pt_slice){dst, n};
}

static int get_uvarint(pt_slice b, size_t *i, size_t *v)
{
    uint64_t r;
    if (pt_get_uvarint(b.p, b.n, i, &r) != 0 || r > SIZE_MAX)
        return -1;
    *v = (size_t)r;
    return 0;
}

size_t pt_labels_encoded_len(const pt_label *labels, size_t n)
{
    size_t len = 0;
    for (size_t i = 0; i < n; i++)
        len += pt_uvarint_size(labels[i].name.n) + labels[i].name.n +
               pt_uvarint_size(labels[i].value.n) + labels[i].value.n;
    return len;
}

uint8_t *pt_labels_encode(uint8_t *dst, const pt_label *labels, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        dst = pt_put_uvarint(dst, labels[i].name.n);
        memcpy(dst, labels[i].name.p, labels[i].name.n);
        dst += labels[i].name.n;
        dst = pt_put_uvarint(dst, labels[i].value.n);
        memcpy(dst, labels[i].value.p, labels[i].value.n);
        dst += labels[i].value.n;
    }
    return dst;
}

long pt_labels_decode(pt_arena *a, pt_slice buf, pt_label **labels)
{
    size_t count = 0, i = 0, len;
    while (i < buf.n) {
        for (int k = 0; k < 2; k++) {
            if (get_uvarint(buf, &i, &len) != 0 || len > buf.n - i)
                return PT_EINTERNAL;
            i += len;
        }
        count++;
    }
    pt_label *ls = pt_arena_alloc(a, (count ? count : 1) * sizeof(*ls));
    if (!ls)
        return PT_ENOMEM;
    i = 0;
    for (size_t k = 0; k < count; k++) {
        get_uvarint(buf, &i, &len);
        ls[k].name = (pt_slice){buf.p + i, len};
        i += len;
        get_uvarint(buf, &i, &len);
        ls[k].value = (pt_slice){buf.p + i, len};
        i += len;
    }
    *labels = ls;
    return (long)count;
}

int pt_labels_cmp(const pt_label *a, size_t na, const pt_label *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; i++) {
        int c = pt_slice_cmp(a[i].name, b[i].name);
        if (c)
            return c;
        c = pt_slice_cmp(a[i].value, b[i].value);
        if (c)
            return c;
    }
    return (na > nb) - (na < nb);
}
