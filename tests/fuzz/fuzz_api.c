/* libFuzzer: what a client of the browsing API controls: series selectors, timestamps,
 * and the JSON string writer over any bytes (the output must be valid JSON text: checked
 * by re-reading the escapes). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Walks a JSON string: every byte below 0x20 and every '"' inside must be escaped, and
 * the text must be UTF-8. */
static void check_json(const uint8_t *p, size_t n)
{
    if (n < 2 || p[0] != '"' || p[n - 1] != '"' || !pt_utf8_valid((pt_slice){p, n}))
        __builtin_trap();
    for (size_t i = 1; i + 1 < n; i++) {
        if (p[i] < 0x20 || p[i] == '"')
            __builtin_trap();
        if (p[i] == '\\') {
            i++;
            if (i + 1 >= n || !strchr("\"\\/bfnrtu", p[i]))
                __builtin_trap();
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    pt_matcher *ms;
    size_t n;
    char msg[512];
    pt_selector_parse(&a, (const char *)data, size, NULL, &ms, &n, msg, sizeof(msg));
    pt_selector_free(ms, n);
    char *s = pt_arena_strndup(&a, (const char *)data, size);
    int64_t t;
    if (s)
        pt_api_time(s, &t);
    pt_buf b = PT_BUF_INIT(0);
    if (pt_json_str(&b, (pt_slice){data, size}) == 0)
        check_json(b.p, b.len);
    pt_buf_free(&b);
    pt_arena_free(&a);
    return 0;
}
