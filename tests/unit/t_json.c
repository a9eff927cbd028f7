/* json.c: pt_json_str over every control byte, the bytes it leaves alone, invalid UTF-8
 * (each byte that starts no valid sequence becomes U+FFFD, valid sequences around it
 * stay), appending after what the buffer holds, and the buffer's ceiling. t_api.c has
 * more cases through the same function. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "tap.h"

#define FFFD "\xef\xbf\xbd"

/* pt_json_str of in[0, n) into a fresh buffer, as a NUL-terminated string in got ("" on
 * an error, which is returned). */
static int encode(const char *in, size_t n, char *got, size_t cap)
{
    pt_buf b = PT_BUF_INIT(0);
    int rv = pt_json_str(&b, (pt_slice){(const uint8_t *)in, n});
    got[0] = '\0';
    if (rv == 0 && b.len < cap)
        memcpy(got, b.p, b.len), got[b.len] = '\0';
    pt_buf_free(&b);
    return rv;
}

/* Every byte below 0x20 alone, and 0x7f: the five short escapes, else \u00XX in
 * lowercase hex. */
static void test_control_bytes(void)
{
    static const char *const shortc[0x20] = {
        ['\b'] = "\\b", ['\t'] = "\\t", ['\n'] = "\\n", ['\f'] = "\\f", ['\r'] = "\\r"};
    int all = 1;
    for (int c = 0; c <= 0x20; c++) {
        int byte = c == 0x20 ? 0x7f : c;
        char in[1] = {(char)byte}, want[16], got[32];
        if (byte < 0x20 && shortc[byte])
            snprintf(want, sizeof(want), "\"%s\"", shortc[byte]);
        else
            snprintf(want, sizeof(want), "\"\\u%04x\"", (unsigned)byte);
        if (encode(in, 1, got, sizeof(got)) != 0 || strcmp(got, want) != 0) {
            all = 0;
            diag("byte 0x%02x: got '%s', expected '%s'", (unsigned)byte, got, want);
        }
    }
    ok(all, "every control byte and 0x7f escaped");
}

static void test_strings(void)
{
    static const struct {
        const char *what, *in;
        size_t n;
        const char *want;
    } cases[] = {
        {"printable ASCII as it is, '/' unescaped", " ~/:{}[],", 9, "\" ~/:{}[],\""},
        {"quote and backslash", "\"\\", 2, "\"\\\"\\\\\""},
        {"valid UTF-8 with a control byte", "\xc3\xa9\n\xe2\x82\xac", 6,
         "\"\xc3\xa9\\n\xe2\x82\xac\""},
        {"a lone continuation byte", "a\x80z", 3, "\"a" FFFD "z\""},
        {"an overlong '/' (two bytes, neither starts a valid sequence)", "\xc0\xaf", 2,
         "\"" FFFD FFFD "\""},
        {"a sequence cut by the end", "a\xe6\x97", 3, "\"a" FFFD FFFD "\""},
        {"past U+10FFFF", "\xf4\x90\x80\x80", 4, "\"" FFFD FFFD FFFD FFFD "\""},
        {"valid sequences kept beside invalid bytes", "\xff\xe6\x97\xa5\xf0\x9f\x98\x80", 8,
         "\"" FFFD "\xe6\x97\xa5\xf0\x9f\x98\x80\""},
        {"escapes and U+FFFD together", "\xfe\t\"", 3, "\"" FFFD "\\t\\\"\""},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char got[256];
        int rv = encode(cases[i].in, cases[i].n, got, sizeof(got));
        ok(rv == 0, "%s: 0 (got %d)", cases[i].what, rv);
        is_str(got, cases[i].want, "%s", cases[i].what);
    }
}

static void test_buffer(void)
{
    pt_buf b = PT_BUF_INIT(0);
    int rv = pt_buf_append(&b, "x:", 2);
    rv = rv ? rv : pt_json_str(&b, PT_SLICE_LIT("v"));
    ok(rv == 0 && b.len == 5 && memcmp(b.p, "x:\"v\"", 5) == 0,
       "the string is appended after what the buffer holds");
    pt_buf_free(&b);

    pt_buf fits = PT_BUF_INIT(4);
    ok(pt_json_str(&fits, PT_SLICE_LIT("ab")) == 0 && fits.len == 4,
       "a string exactly at the ceiling fits");
    pt_buf_free(&fits);

    pt_buf over = PT_BUF_INIT(4);
    ok(pt_json_str(&over, PT_SLICE_LIT("abc")) == PT_ETOOLARGE,
       "one byte past the ceiling: PT_ETOOLARGE");
    ok(over.len <= 4, "the buffer stays within its ceiling (len %zu)", over.len);
    pt_buf_free(&over);
}

int main(void)
{
    test_control_bytes();
    test_strings();
    test_buffer();
    return done_testing();
}
