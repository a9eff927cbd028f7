/* The JSON writer: strings escaped for JSON text. */
#include "json.h"

#include <string.h>

#include "store.h" /* pt_utf8_valid */

int pt_json_str(pt_buf *b, pt_slice s)
{
    static const char hex[] = "0123456789abcdef";
    int rv = pt_buf_append(b, "\"", 1);
    int valid = pt_utf8_valid(s);
    size_t i = 0, run = 0; /* bytes [run, i) go out as they are */
    while (rv == 0 && i < s.n) {
        uint8_t c = s.p[i];
        char esc[8];
        size_t en = 0, skip = 1;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, en = 2;
        } else if (c < 0x20 || c == 0x7f) {
            const char *shortc = c == '\n'   ? "n"
                                 : c == '\r' ? "r"
                                 : c == '\t' ? "t"
                                 : c == '\b' ? "b"
                                 : c == '\f' ? "f"
                                             : NULL;
            if (shortc) {
                esc[0] = '\\', esc[1] = shortc[0], en = 2;
            } else {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4], esc[5] = hex[c & 15], en = 6;
            }
        } else if (c >= 0x80 && !valid) {
            size_t len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
            if (len > 1 && len <= s.n - i && pt_utf8_valid((pt_slice){s.p + i, len})) {
                i += len;
                continue;
            }
            memcpy(esc, "\xef\xbf\xbd", 3), en = 3; /* U+FFFD */
        } else {
            i++;
            continue;
        }
        rv = pt_buf_append(b, s.p + run, i - run);
        if (rv == 0)
            rv = pt_buf_append(b, esc, en);
        i += skip;
        run = i;
    }
    if (rv == 0)
        rv = pt_buf_append(b, s.p + run, s.n - run);
    return rv ? rv : pt_buf_append(b, "\"", 1);
}
