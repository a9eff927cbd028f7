/* Label sets as a write receives them: validated, sorted and checked against the limits
 * (store.h, pt_labels_validate), with messages that name the series. Pure functions: no
 * store, no allocation. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "store.h"

int pt_utf8_valid(pt_slice s)
{
    size_t i = 0;
    while (i < s.n) {
        /* Label text is almost always ASCII: skip it eight bytes at a time. */
        while (s.n - i >= 8) {
            uint64_t w;
            memcpy(&w, s.p + i, 8);
            if (w & 0x8080808080808080ULL)
                break;
            i += 8;
        }
        if (i >= s.n)
            break;
        uint8_t c = s.p[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) {
            len = 2, cp = c & 0x1f, min = 0x80;
        } else if ((c & 0xf0) == 0xe0) {
            len = 3, cp = c & 0x0f, min = 0x800;
        } else if ((c & 0xf8) == 0xf0) {
            len = 4, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (s.n - i < len)
            return 0;
        for (size_t k = 1; k < len; k++) {
            if ((s.p[i + k] & 0xc0) != 0x80)
                return 0;
            cp = cp << 6 | (s.p[i + k] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += len;
    }
    return 1;
}

/* Appends `name{a="b",...}` for messages, cut at a readable length. */
static void describe(char *buf, size_t cap, const pt_label *ls, size_t n)
{
    size_t o = 0;
    const char *metric = NULL;
    int metric_len = 0;
    for (size_t i = 0; i < n; i++)
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0) {
            metric = (const char *)ls[i].value.p;
            metric_len = (int)(ls[i].value.n > 100 ? 100 : ls[i].value.n);
        }
    o += (size_t)snprintf(buf + o, cap - o, "%.*s{", metric_len, metric ? metric : "");
    int first = 1;
    for (size_t i = 0; i < n && o < cap; i++) {
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0)
            continue;
        int nl = (int)(ls[i].name.n > 60 ? 60 : ls[i].name.n);
        int vl = (int)(ls[i].value.n > 60 ? 60 : ls[i].value.n);
        o += (size_t)snprintf(buf + o, cap - o, "%s%.*s=\"%.*s%s\"", first ? "" : ", ", nl,
                              (const char *)ls[i].name.p, vl, (const char *)ls[i].value.p,
                              ls[i].value.n > 60 ? "..." : "");
        first = 0;
        if (o > 300) {
            snprintf(buf + (o < cap ? o : cap - 1), cap - (o < cap ? o : cap - 1), ", ...");
            o = cap;
        }
    }
    if (o < cap)
        snprintf(buf + o, cap - o, "}");
}

static long label_error(char *msg, size_t msglen, const pt_label *in, size_t n,
                        const char *fmt, ...)
{
    char what[256], series[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof(what), fmt, ap);
    va_end(ap);
    describe(series, sizeof(series), in, n);
    snprintf(msg, msglen, "invalid label set %s: %s", series, what);
    return PT_ELABELS;
}

/* Sorts by name, stable; senders send labels sorted, so this is one pass for them. */
static void sort_labels(pt_label *ls, size_t n)
{
    for (size_t i = 1; i < n; i++) {
        if (pt_slice_cmp(ls[i - 1].name, ls[i].name) <= 0)
            continue;
        pt_label x = ls[i];
        size_t j = i;
        while (j > 0 && pt_slice_cmp(ls[j - 1].name, x.name) > 0) {
            ls[j] = ls[j - 1];
            j--;
        }
        ls[j] = x;
    }
}

long pt_labels_validate(pt_label *ls, size_t n, const pt_label_limits *lim, int *plain,
                        char *msg, size_t msglen)
{
    static const pt_label_limits none = {0, 0, 0};
    if (!lim)
        lim = &none;
    /* Before sorting: an insertion sort of a huge unsorted set would be the cost. */
    if (lim->labels && n > lim->labels)
        return label_error(msg, msglen, ls, n, "%zu labels, more than "
                           "write.max_labels_per_series (%zu)", n, lim->labels);
    unsigned text = 0;
    sort_labels(ls, n);
    size_t k = 0;
    int has_name = 0;
    for (size_t i = 0; i < n; i++) {
        pt_slice name = ls[i].name, value = ls[i].value;
        if (name.n == 0)
            return label_error(msg, msglen, ls, n, "a label has an empty name");
        if (lim->name_len && name.n > lim->name_len)
            return label_error(msg, msglen, ls, n,
                               "label name \"%.*s...\" is %zu bytes long, "
                               "more than write.max_label_name_length (%zu)",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p, name.n,
                               lim->name_len);
        if (lim->value_len && value.n > lim->value_len)
            return label_error(msg, msglen, ls, n, "value of label \"%.*s\" is %zu bytes long, "
                               "more than write.max_label_value_length (%zu)",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p, value.n,
                               lim->value_len);
        unsigned f = pt_text_flags(name) | pt_text_flags(value);
        text |= f;
        if ((f & PT_TEXT_NONASCII) && !pt_utf8_valid(name))
            return label_error(msg, msglen, ls, n, "a label name is not valid UTF-8");
        if ((f & PT_TEXT_NONASCII) && !pt_utf8_valid(value))
            return label_error(msg, msglen, ls, n, "value of label \"%.*s\" is not valid UTF-8",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
        if (i > 0 && pt_slice_eq(ls[i - 1].name, name))
            return label_error(msg, msglen, ls, n, "duplicate label name \"%.*s\"",
                               (int)(name.n > 60 ? 60 : name.n), (const char *)name.p);
    }
    for (size_t i = 0; i < n; i++) {
        if (ls[i].value.n == 0)
            continue; /* an empty value is the same as no label */
        if (ls[i].name.n == 8 && memcmp(ls[i].name.p, "__name__", 8) == 0)
            has_name = 1;
        ls[k++] = ls[i];
    }
    if (!has_name)
        return label_error(msg, msglen, ls, k, "no metric name (label __name__)");
    if (plain)
        *plain = !(text & PT_TEXT_ESCAPE);
    return (long)k;
}
