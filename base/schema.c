#include "schema.h"

#include <string.h>

int64_t pt_key_digits(const uint8_t *p)
{
    int64_t v = 0;
    for (int i = 0; i < PT_BASE_DIGITS; i++) {
        if (p[i] < '0' || p[i] > '9')
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

int64_t pt_key_time(const uint8_t *key, size_t n, const char *markers, size_t *end)
{
    for (size_t i = 0; i + 1 < n; i++) {
        if (key[i] == PT_KEY_ESCAPE) {
            i++;
            continue;
        }
        if (key[i] != ',' || !key[i + 1] || !strchr(markers, key[i + 1]))
            continue;
        if (n - i - 2 < PT_BASE_DIGITS)
            return -1;
        *end = i + 2 + PT_BASE_DIGITS;
        return pt_key_digits(key + i + 2);
    }
    return -1;
}

int64_t pt_points_row_base(const uint8_t *key, size_t n)
{
    size_t end;
    int64_t v = pt_key_time(key, n, "@#%", &end);
    return v >= 0 && end == n ? pt_bucket_base(v) : -1;
}
