/* Configuration: the key tables (config_keys.c and each backend's fragment) parse the YAML
 * file and the flags, validate the values and print --help. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "buf.h"
#include "config_int.h"
#include "retention.h"

/* tenancy.header: an HTTP field name (RFC 9110 token) of at most 100 bytes, and none of
 * the headers promtable reads for themselves. */
static int check_tenant_header(const char *h, char *err, size_t errlen)
{
    static const char *const taken[] = {"content-type", "content-encoding", "content-length",
                                        "authorization", "transfer-encoding", "host",
                                        "connection", "user-agent",
                                        "x-prometheus-remote-write-version"};
    size_t n = strlen(h);
    if (n == 0 || n > 100 || strspn(h, "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz"
                                       "ABCDEFGHIJKLMNOPQRSTUVWXYZ") != n) {
        snprintf(err, errlen, "tenancy.header: \"%.100s\" is not an HTTP header name (1 to 100 "
                 "letters, digits and !#$%%&'*+-.^_`|~)", h);
        return -1;
    }
    for (size_t i = 0; i < sizeof(taken) / sizeof(taken[0]); i++)
        if (strcasecmp(h, taken[i]) == 0) {
            snprintf(err, errlen, "tenancy.header: %s is a header promtable reads for itself",
                     h);
            return -1;
        }
    return 0;
}

int pt_parse_duration_ms(const char *s, long *out)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
                 {"w", 604800000}, {"y", 31536000000LL}};
    long long total = 0;
    const char *p = s;
    if (!*p)
        return -1;
    if (strcmp(p, "0") == 0) {
        *out = 0;
        return 0;
    }
    while (*p) {
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno)
            return -1;
        size_t best = 0, ul = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t l = strlen(units[i].unit);
            if (strncmp(end, units[i].unit, l) == 0 && l > ul) {
                /* "m" must not eat the "m" of "ms" */
                best = i;
                ul = l;
            }
        }
        if (!ul)
            return -1;
        if (v > LLONG_MAX / units[best].ms || total > LLONG_MAX - v * units[best].ms)
            return -1;
        total += v * units[best].ms;
        p = end + ul;
    }
    if (total > LONG_MAX)
        return -1;
    *out = (long)total;
    return 0;
}

int pt_parse_bytes(const char *s, size_t *out)
{
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},           {"B", 1},
                 {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},
                 {"KB", 1000},      {"MB", 1000000},   {"GB", 1000000000}};
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v > SIZE_MAX / units[i].mul)
                return -1;
            *out = (size_t)(v * units[i].mul);
            return 0;
        }
    }
    return -1;
}

/* A key of the configuration: its table entry, its full dotted name, and the struct it
 * fills (the pt_config itself, or a backend's own settings). */
typedef struct conf_ref {
    const pt_conf_key *e;
    char *base;
    const char *backend; /* the backend whose fragment holds the key, NULL for the daemon's */
    char key[192];
} conf_ref;

/* Calls fn for every key, the daemon's then each backend's, until fn returns non-zero.
 * With c NULL, bases are NULL (for listing the keys). */
static int each_backend_key(pt_config *c, int (*fn)(void *ud, conf_ref *r), void *ud)
{
    conf_ref r;
    size_t nb;
    const pt_backend_ops *const *all = pt_backend_list(&nb);
    for (size_t b = 0; b < nb && b < PT_MAX_BACKENDS; b++) {
        for (size_t i = 0; i < all[b]->nconf; i++) {
            r.e = &all[b]->conf[i];
            r.base = c ? c->backend_conf[b] : NULL;
            r.backend = all[b]->name;
            snprintf(r.key, sizeof(r.key), "storage.%s.%s", all[b]->name, r.e->key);
            int rv = r.base || !c ? fn(ud, &r) : 0;
            if (rv)
                return rv;
        }
    }
    return 0;
}

/* Calls fn for every key until fn returns non-zero: the daemon's, with the backends'
 * fragments after its own storage.* keys. With c NULL, bases are NULL (for listing). */
static int each_key(pt_config *c, int (*fn)(void *ud, conf_ref *r), void *ud)
{
    conf_ref r;
    for (size_t i = 0; i < pt_config_nkeys; i++) {
        r.e = &pt_config_keys[i];
        r.base = (char *)c;
        r.backend = NULL;
        snprintf(r.key, sizeof(r.key), "%s", pt_config_keys[i].key);
        int rv = fn(ud, &r);
        if (rv)
            return rv;
        const pt_conf_key *next = i + 1 < pt_config_nkeys ? &pt_config_keys[i + 1] : NULL;
        int storage = strncmp(pt_config_keys[i].key, "storage.", 8) == 0;
        if (storage && (!next || strncmp(next->key, "storage.", 8) != 0) &&
            (rv = each_backend_key(c, fn, ud)) != 0)
            return rv;
    }
    return 0;
}

/* Whether flag (without "--") names key: the key with '_' written '-'. */
static int flag_names(const char *flag, const char *key)
{
    for (; *flag && *key; flag++, key++)
        if (*flag != (*key == '_' ? '-' : *key))
            return 0;
    return *flag == *key;
}

/* n in the units of the key's type: "86400000" ms is "1d", 1073741824 bytes "1GiB". */
static const char *fmt_value(pt_conf_type t, long long n, char *buf, size_t cap)
{
    static const struct {
        const char *unit;
        long long mul;
    } dur[] = {{"y", 31536000000LL}, {"w", 604800000}, {"d", 86400000}, {"h", 3600000},
               {"m", 60000},         {"s", 1000}},
      size[] = {{"TiB", 1LL << 40}, {"GiB", 1LL << 30}, {"MiB", 1LL << 20}, {"KiB", 1LL << 10}};
    const char *unit = t == PT_CONF_DURATION ? "ms" : "";
    long long mul = 1;
    if (n > 0 && (t == PT_CONF_DURATION || t == PT_CONF_BYTES)) {
        size_t nu = t == PT_CONF_DURATION ? sizeof(dur) / sizeof(dur[0])
                                          : sizeof(size) / sizeof(size[0]);
        for (size_t i = 0; i < nu; i++) {
            long long m = t == PT_CONF_DURATION ? dur[i].mul : size[i].mul;
            if (n % m == 0) {
                unit = t == PT_CONF_DURATION ? dur[i].unit : size[i].unit;
                mul = m;
                break;
            }
        }
    }
    if (n == 0 && t == PT_CONF_DURATION)
        unit = "";
    snprintf(buf, cap, "%lld%s", n / mul, unit);
    return buf;
}

static int out_of_range(const conf_ref *r, const char *what, const char *v, char *err,
                        size_t errlen)
{
    char lo[32], hi[32];
    pt_conf_type t = r->e->type == PT_CONF_ADDR ? PT_CONF_LONG : r->e->type;
    snprintf(err, errlen, "%s: %s%s is out of range [%s, %s]", r->key, what, v,
             fmt_value(t, r->e->min, lo, sizeof(lo)), fmt_value(t, r->e->max, hi, sizeof(hi)));
    return -1;
}

/* Whether word is one of the '|'-separated words of list. */
static int enum_has(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list;; p++) {
        const char *bar = strchr(p, '|');
        size_t l = bar ? (size_t)(bar - p) : strlen(p);
        if (l == n && n > 0 && strncmp(p, word, n) == 0)
            return 1;
        if (!bar)
            return 0;
        p = bar;
    }
}

/* The default of a key as text: an ENUM's first word. */
static const char *default_of(const pt_conf_key *e, char *buf, size_t cap)
{
    if (e->type != PT_CONF_ENUM)
        return e->def;
    size_t l = strcspn(e->def, "|");
    snprintf(buf, cap, "%.*s", (int)(l < cap ? l : cap - 1), e->def);
    return buf;
}

/* "host:port", ":port" or "[v6]:port", as the HTTP server's listener takes it; the port
 * decimal in [min, max]. IPv6 must be in brackets, or its last group would read as a port. */
static int check_addr(const conf_ref *r, const char *v, char *err, size_t errlen)
{
    const char *port;
    if (!v[0]) {
        if (!r->e->def[0])
            return 0;
        snprintf(err, errlen, "%s: empty (want host:port, :port or [v6]:port)", r->key);
        return -1;
    }
    if (v[0] == '[') {
        const char *rb = strchr(v, ']');
        size_t colons = 0;
        if (!rb || rb == v + 1 || rb[1] != ':')
            goto bad;
        for (const char *h = v + 1; h < rb; h++) {
            colons += *h == ':';
            if (!isalnum((unsigned char)*h) && !strchr(":.%-_", *h))
                goto bad;
        }
        if (!colons)
            goto bad;
        port = rb + 2;
    } else {
        const char *colon = strchr(v, ':');
        if (!colon)
            goto bad;
        if (strchr(colon + 1, ':')) {
            snprintf(err, errlen, "%s: \"%s\": write an IPv6 address in brackets, [::1]:9201",
                     r->key, v);
            return -1;
        }
        for (const char *h = v; h < colon; h++)
            if (!isalnum((unsigned char)*h) && !strchr(".-_", *h))
                goto bad;
        port = colon + 1;
    }
    if ((size_t)(port - v) > 256)
        goto bad;
    size_t digits = strspn(port, "0123456789");
    if (digits == 0 || port[digits] != '\0') {
        snprintf(err, errlen, "%s: \"%s\": the port must be a decimal number", r->key, v);
        return -1;
    }
    long long pn = digits > 6 ? LLONG_MAX : strtoll(port, NULL, 10);
    if (pn < r->e->min || pn > r->e->max)
        return out_of_range(r, "port ", port, err, errlen);
    return 0;
bad:
    snprintf(err, errlen, "%s: \"%s\" is not an address (want host:port, :port or [v6]:port)",
             r->key, v);
    return -1;
}

static int set_string(const conf_ref *r, const char *v)
{
    char *dup = strdup(v);
    if (!dup)
        return -1;
    char **slot = (char **)(r->base + r->e->off);
    free(*slot);
    *slot = dup;
    return 0;
}

static int set_value(const conf_ref *r, const char *v, char *err, size_t errlen)
{
    const pt_conf_key *e = r->e;
    char *base = r->base;
    long long n = 0;
    switch (e->type) {
    case PT_CONF_ADDR:
        if (check_addr(r, v, err, errlen) != 0)
            return -1;
        return set_string(r, v);
    case PT_CONF_ENUM:
        if (!enum_has(e->def, v)) {
            char words[256];
            size_t o = 0;
            for (const char *p = e->def; *p && o + 3 < sizeof(words); p++)
                o += (size_t)snprintf(words + o, sizeof(words) - o, *p == '|' ? ", " : "%c", *p);
            snprintf(err, errlen, "%s: \"%s\" is not one of %s", r->key, v, words);
            return -1;
        }
        return set_string(r, v);
    case PT_CONF_STR:
        if (!v[0] && e->def[0]) {
            snprintf(err, errlen, "%s: cannot be empty (default %s)", r->key, e->def);
            return -1;
        }
        if (strcmp(r->key, "tenancy.header") == 0 && check_tenant_header(v, err, errlen) != 0)
            return -1;
        if (strcmp(r->key, "storage.retention_rules") == 0) {
            /* The rules' form here; their length against storage.retention, which may come
             * later, in pt_config_check. */
            pt_retention_rules *rules;
            if (pt_retention_rules_parse(v, 0, NULL, 0, 0, 0, &rules, err, errlen) != 0)
                return -1;
            pt_retention_rules_free(rules);
        }
        if (strcmp(r->key, "storage.rollups") == 0) {
            pt_rollup_stage st[PT_ROLLUP_MAX_STAGES];
            size_t nst;
            if (pt_rollups_parse(v, st, &nst, err, errlen) != 0)
                return -1;
        }
        return set_string(r, v);
    case PT_CONF_FILE:
    case PT_CONF_DIR:
        return set_string(r, v);
    case PT_CONF_BOOL:
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0)
            *(int *)(base + e->off) = 1;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0)
            *(int *)(base + e->off) = 0;
        else
            goto bad;
        return 0;
    case PT_CONF_LONG: {
        char *end;
        /* strtoll would also take leading blanks and a '+' */
        if (!isdigit((unsigned char)v[v[0] == '-']))
            goto bad;
        errno = 0;
        n = strtoll(v, &end, 10);
        if (*end)
            goto bad;
        if (errno == ERANGE)
            return out_of_range(r, "", v, err, errlen);
        break;
    }
    case PT_CONF_DURATION: {
        long ms;
        if (pt_parse_duration_ms(v, &ms) != 0)
            goto bad;
        n = ms;
        break;
    }
    case PT_CONF_BYTES: {
        size_t b;
        if (pt_parse_bytes(v, &b) != 0)
            goto bad;
        if (b > (size_t)LLONG_MAX)
            return out_of_range(r, "", v, err, errlen);
        n = (long long)b;
        break;
    }
    }
    if (n < e->min || n > e->max)
        return out_of_range(r, "", v, err, errlen);
    if (e->type == PT_CONF_BYTES)
        *(size_t *)(base + e->off) = (size_t)n;
    else
        *(long *)(base + e->off) = (long)n;
    return 0;
bad:
    snprintf(err, errlen, "%s: cannot parse \"%s\" (want %s)", r->key, v,
             e->type == PT_CONF_BOOL       ? "true or false"
             : e->type == PT_CONF_LONG     ? "a decimal integer"
             : e->type == PT_CONF_DURATION ? "a duration: 250ms, 30s, 5m, 1h30m, 2d, 1w, 1y or 0"
                                           : "a size: 4096, 512KiB, 64MiB, 1GiB or 1GB");
    return -1;
}

static int set_default(void *ud, conf_ref *r)
{
    char err[256], def[64];
    (void)ud;
    return set_value(r, default_of(r->e, def, sizeof(def)), err, sizeof(err)) != 0;
}

int pt_config_defaults(pt_config *c)
{
    memset(c, 0, sizeof(*c));
    size_t nb;
    const pt_backend_ops *const *all = pt_backend_list(&nb);
    for (size_t b = 0; b < nb && b < PT_MAX_BACKENDS; b++) {
        if (!all[b]->conf_size)
            continue;
        c->backend_conf[b] = calloc(1, all[b]->conf_size);
        if (!c->backend_conf[b])
            return -1;
    }
    return each_key(c, set_default, NULL) ? -1 : 0;
}

static int is_string(pt_conf_type t)
{
    return t == PT_CONF_STR || t == PT_CONF_ADDR || t == PT_CONF_FILE || t == PT_CONF_ENUM ||
           t == PT_CONF_DIR;
}

static int free_string(void *ud, conf_ref *r)
{
    (void)ud;
    if (is_string(r->e->type)) {
        char **slot = (char **)(r->base + r->e->off);
        free(*slot);
        *slot = NULL;
    }
    return 0;
}

void pt_config_free(pt_config *c)
{
    each_key(c, free_string, NULL);
    for (size_t b = 0; b < PT_MAX_BACKENDS; b++) {
        free(c->backend_conf[b]);
        c->backend_conf[b] = NULL;
    }
}

const void *pt_config_backend(const pt_config *c, const pt_backend_ops *ops)
{
    size_t nb;
    const pt_backend_ops *const *all = pt_backend_list(&nb);
    for (size_t b = 0; b < nb && b < PT_MAX_BACKENDS; b++)
        if (all[b] == ops)
            return c->backend_conf[b];
    return NULL;
}

typedef struct setting {
    const char *name; /* a key, or a flag without "--" */
    int is_flag;
    const char *value;
    char *err;
    size_t errlen;
    int rv;
} setting;

static int apply(void *ud, conf_ref *r)
{
    setting *s = ud;
    int hit = s->is_flag ? flag_names(s->name, r->key) ||
                               (r->e->alias && flag_names(s->name, r->e->alias))
                         : strcmp(s->name, r->key) == 0 ||
                               (r->e->alias && strcmp(s->name, r->e->alias) == 0);
    if (!hit)
        return 0;
    s->rv = set_value(r, s->value, s->err, s->errlen);
    return 1;
}

int pt_config_set_flag(pt_config *c, const char *flag, const char *value, char *err,
                       size_t errlen)
{
    setting s = {.name = flag, .is_flag = 1, .value = value, .err = err, .errlen = errlen};
    if (each_key(c, apply, &s))
        return s.rv;
    snprintf(err, errlen, "unknown flag --%s", flag);
    return -1;
}

static int bool_flag(void *ud, conf_ref *r)
{
    const char *flag = ud;
    return r->e->type == PT_CONF_BOOL &&
           (flag_names(flag, r->key) || (r->e->alias && flag_names(flag, r->e->alias)));
}

int pt_config_flag_is_bool(const char *flag)
{
    return each_key(NULL, bool_flag, (void *)(uintptr_t)flag);
}

static int set_key(pt_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    setting s = {.name = key, .value = value, .err = err, .errlen = errlen};
    if (each_key(c, apply, &s))
        return s.rv;
    snprintf(err, errlen, "unknown configuration key \"%s\"", key);
    return -1;
}

#define MAX_DEPTH 8
#define MAX_KEY 256

/* A list of the configuration (storage.retention_rules, storage.rollups): a sequence of
 * mappings of two keys, read from the parser (after its sequence start) into the key's text
 * form, one "<lead's value> <rest's value>" line an item. 0 or -1 with err set. */
typedef struct yaml_list {
    const char *key, *item; /* the list's key and what an item is called */
    const char *lead, *rest; /* the items' keys, in the order of a line */
} yaml_list;

static const yaml_list yaml_lists[] = {
    {"retention_rules", "rule", "retention", "match"},
    {"rollups", "stage", "resolution", "retention"},
};

static int load_list(yaml_parser_t *p, const yaml_list *l, pt_buf *out, char *err,
                     size_t errlen)
{
    yaml_event_t ev;
    char match[4096], keep[64], key[16];
    int in_item = 0, rv = 0, nrule = 0;
    for (;;) {
        if (!yaml_parser_parse(p, &ev)) {
            snprintf(err, errlen, "YAML error at line %zu: %s", p->problem_mark.line + 1,
                     p->problem ? p->problem : "syntax");
            return -1;
        }
        size_t line = ev.start_mark.line + 1;
        if (ev.type == YAML_SEQUENCE_END_EVENT && !in_item) {
            yaml_event_delete(&ev);
            return pt_buf_append(out, "", 1) == 0 ? 0 : (snprintf(err, errlen, "out of memory"), -1);
        }
        if (ev.type == YAML_MAPPING_START_EVENT && !in_item) {
            in_item = 1;
            nrule++;
            match[0] = keep[0] = key[0] = '\0';
        } else if (ev.type == YAML_MAPPING_END_EVENT && in_item) {
            in_item = 0;
            if (!match[0] || !keep[0]) {
                snprintf(err, errlen, "line %zu: storage.%s, %s %d: both %s and %s are needed",
                         line, l->key, l->item, nrule, l->rest, l->lead);
                rv = -1;
            } else if (pt_buf_append(out, keep, strlen(keep)) != 0 ||
                       pt_buf_append(out, " ", 1) != 0 ||
                       pt_buf_append(out, match, strlen(match)) != 0 ||
                       pt_buf_append(out, "\n", 1) != 0) {
                snprintf(err, errlen, "out of memory");
                rv = -1;
            }
        } else if (ev.type == YAML_SCALAR_EVENT && in_item) {
            const char *v = (const char *)ev.data.scalar.value;
            size_t n = ev.data.scalar.length;
            if (!key[0]) {
                if (strcmp(v, l->rest) != 0 && strcmp(v, l->lead) != 0) {
                    snprintf(err, errlen, "line %zu: storage.%s, %s %d: unknown key \"%.20s\" "
                             "(%s, %s)", line, l->key, l->item, nrule, v, l->rest, l->lead);
                    rv = -1;
                } else {
                    snprintf(key, sizeof(key), "%s", v);
                }
            } else {
                int is_match = strcmp(key, l->rest) == 0;
                size_t cap = is_match ? sizeof(match) : sizeof(keep);
                if (n >= cap || memchr(v, '\n', n)) {
                    snprintf(err, errlen, "line %zu: storage.%s, %s %d: %s is too long or "
                             "holds a line break", line, l->key, l->item, nrule, key);
                    rv = -1;
                } else {
                    memcpy(is_match ? match : keep, v, n + 1);
                }
                key[0] = '\0';
            }
        } else {
            snprintf(err, errlen, "line %zu: storage.%s is a list of {%s: ..., %s: ...}", line,
                     l->key, l->rest, l->lead);
            rv = -1;
        }
        yaml_event_delete(&ev);
        if (rv)
            return rv;
    }
}

int pt_config_load_yaml(pt_config *c, const char *buf, size_t len, char *err, size_t errlen)
{
    yaml_parser_t p;
    yaml_event_t ev;
    /* Path of mapping keys; expect_key[d] says whether the next scalar at depth d is a key. */
    char path[MAX_DEPTH][MAX_KEY];
    int expect_key[MAX_DEPTH + 1];
    int depth = 0, rv = 0, done = 0;

    if (!yaml_parser_initialize(&p)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    while (!done) {
        if (!yaml_parser_parse(&p, &ev)) {
            snprintf(err, errlen, "YAML error at line %zu: %s", p.problem_mark.line + 1,
                     p.problem ? p.problem : "syntax");
            rv = -1;
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_MAPPING_START_EVENT:
            if (depth >= MAX_DEPTH) {
                snprintf(err, errlen, "configuration nested too deeply");
                rv = -1;
                break;
            }
            if (depth > 0 && expect_key[depth]) {
                snprintf(err, errlen, "line %zu: a mapping cannot be a key",
                         ev.start_mark.line + 1);
                rv = -1;
                break;
            }
            depth++;
            expect_key[depth] = 1;
            break;
        case YAML_MAPPING_END_EVENT:
            depth--;
            if (depth > 0)
                expect_key[depth] = 1;
            break;
        case YAML_SEQUENCE_START_EVENT: {
            const yaml_list *l = NULL;
            for (size_t i = 0; i < sizeof(yaml_lists) / sizeof(yaml_lists[0]); i++)
                if (depth == 2 && !expect_key[depth] && strcmp(path[0], "storage") == 0 &&
                    strcmp(path[1], yaml_lists[i].key) == 0)
                    l = &yaml_lists[i];
            if (!l) {
                snprintf(err, errlen, "line %zu: lists are not used in this configuration "
                         "(but for storage.retention_rules and storage.rollups)",
                         ev.start_mark.line + 1);
                rv = -1;
                break;
            }
            pt_buf text = PT_BUF_INIT(1u << 20);
            char full[64];
            snprintf(full, sizeof(full), "storage.%s", l->key);
            rv = load_list(&p, l, &text, err, errlen);
            if (rv == 0 && set_key(c, full, (const char *)text.p, err, errlen) != 0)
                rv = -1;
            pt_buf_free(&text);
            expect_key[depth] = 1;
            break;
        }
        case YAML_ALIAS_EVENT:
            snprintf(err, errlen, "line %zu: aliases are not supported", ev.start_mark.line + 1);
            rv = -1;
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (depth == 0) {
                /* An empty document or a bare scalar: only an empty file is fine. */
                if (ev.data.scalar.length) {
                    snprintf(err, errlen, "the configuration must be a mapping");
                    rv = -1;
                }
                break;
            }
            if (expect_key[depth]) {
                if (ev.data.scalar.length >= MAX_KEY) {
                    snprintf(err, errlen, "line %zu: key too long", ev.start_mark.line + 1);
                    rv = -1;
                    break;
                }
                memcpy(path[depth - 1], v, ev.data.scalar.length + 1);
                expect_key[depth] = 0;
            } else {
                char key[MAX_DEPTH * MAX_KEY];
                size_t o = 0;
                for (int i = 0; i < depth; i++)
                    o += (size_t)snprintf(key + o, sizeof(key) - o, "%s%s", i ? "." : "", path[i]);
                if (set_key(c, key, v, err, errlen) != 0)
                    rv = -1;
                expect_key[depth] = 1;
            }
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rv)
            break;
    }
    yaml_parser_delete(&p);
    return rv;
}

int pt_config_load_file(pt_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    pt_buf buf = PT_BUF_INIT(16u << 20);
    int rv = -1;
    for (;;) {
        uint8_t *room = pt_buf_room(&buf, 4096);
        if (!room) {
            snprintf(err, errlen, "%s: file too large (16 MiB at most)", path);
            goto out;
        }
        size_t n = fread(room, 1, 4096, f);
        if (n == 0)
            break;
        pt_buf_commit(&buf, n);
    }
    char inner[384];
    rv = pt_config_load_yaml(c, buf.p ? (const char *)buf.p : "", buf.len, inner, sizeof(inner));
    if (rv)
        snprintf(err, errlen, "%s: %s", path, inner);
out:
    pt_buf_free(&buf);
    fclose(f);
    return rv;
}

/* What --help says of a key after its help text: its words, its range, its former name. */
static const char *key_notes(const conf_ref *r, char *buf, size_t cap)
{
    size_t o = 0;
    buf[0] = '\0';
    if (r->e->type == PT_CONF_ENUM) {
        o += (size_t)snprintf(buf + o, cap - o, " One of: ");
        for (const char *p = r->e->def; *p && o < cap; p++)
            o += (size_t)snprintf(buf + o, cap - o, *p == '|' ? ", " : "%c", *p);
        if (o < cap)
            o += (size_t)snprintf(buf + o, cap - o, ".");
    }
    if (o < cap && (r->e->type == PT_CONF_LONG || r->e->type == PT_CONF_BYTES ||
                    r->e->type == PT_CONF_DURATION || r->e->type == PT_CONF_ADDR)) {
        char lo[32], hi[32];
        pt_conf_type t = r->e->type == PT_CONF_ADDR ? PT_CONF_LONG : r->e->type;
        o += (size_t)snprintf(buf + o, cap - o, " %s %s to %s.",
                              r->e->type == PT_CONF_ADDR ? "Port" : "Range",
                              fmt_value(t, r->e->min, lo, sizeof(lo)),
                              fmt_value(t, r->e->max, hi, sizeof(hi)));
    }
    if (o < cap && r->e->alias)
        snprintf(buf + o, cap - o, " Formerly %s.", r->e->alias);
    return buf;
}

static void print_flag(FILE *f, const char *key)
{
    fputs("--", f);
    for (const char *k = key; *k; k++)
        fputc(*k == '_' ? '-' : *k, f);
}

static int print_usage(void *ud, conf_ref *r)
{
    FILE *f = ud;
    fputs("  ", f);
    print_flag(f, r->key);
    char def[64];
    const char *d = default_of(r->e, def, sizeof(def));
    char notes[512];
    fprintf(f, "=%s\n      %s%s (YAML: %s)\n", d[0] ? d : "\"\"", r->e->help,
            key_notes(r, notes, sizeof(notes)), r->key);
    return 0;
}

/* Text in a Markdown table cell: the characters Markdown or HTML would read escaped. */
static void put_md(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else {
            if (strchr("\\|*`[]", *s))
                fputc('\\', f);
            fputc(*s, f);
        }
    }
}

static int print_markdown_row(void *ud, conf_ref *r)
{
    FILE *f = ud;
    char def[64], notes[512];
    const char *d = default_of(r->e, def, sizeof(def));
    fprintf(f, "| `%s` | `", r->key);
    print_flag(f, r->key);
    fputs(d[0] ? "` | `" : "` | ", f);
    put_md(f, d);
    fputs(d[0] ? "` | " : " | ", f);
    put_md(f, r->e->help);
    put_md(f, key_notes(r, notes, sizeof(notes)));
    fputs(" |\n", f);
    return 0;
}

void pt_config_usage_markdown(FILE *f)
{
    fputs("| YAML key | flag | default | meaning |\n| --- | --- | --- | --- |\n", f);
    each_key(NULL, print_markdown_row, f);
}

void pt_config_usage(FILE *f, const char *argv0)
{
    fprintf(f,
            "usage: %s [flags]\n       %s init [flags]   (create tables on backends that need it)\n"
            "       %s check [flags]  (verify a store no server has open; exit 1 on damage)\n"
            "       %s snapshot DIR [flags]  (a copy of an embedded store no server has open,\n"
            "                         made in the new directory DIR; docs/operations.md)\n"
            "       %s delete SELECTOR... [--start=TIME] [--end=TIME] [--tenant=ID] [flags]\n"
            "                         (delete series from a store no server has open)\n"
            "       %s copy --from=CONFIG --to=CONFIG [--match=SELECTOR]... [--start=TIME]\n"
            "                         [--end=TIME] [--checkpoint=FILE] [--verify|--verify-only]\n"
            "                         (copy one store into another; docs/operations.md)\n\n"
            "Prometheus remote storage adapter on a wide-column store.\n\nFlags:\n"
            "  --help                 Show this help.\n"
            "  --help=markdown        Show the keys below as a Markdown table.\n"
            "  --version              Show the version.\n"
            "  --config.file=FILE     YAML configuration file (keys below, dotted = nested).\n",
            argv0, argv0, argv0, argv0, argv0, argv0);
    each_key(NULL, print_usage, f);
}

typedef struct key_walk {
    int (*fn)(void *ud, const char *key, const pt_conf_key *e);
    void *ud;
} key_walk;

static int walk_key(void *ud, conf_ref *r)
{
    key_walk *w = ud;
    return w->fn(w->ud, r->key, r->e);
}

int pt_config_each_key(int (*fn)(void *ud, const char *key, const pt_conf_key *e), void *ud)
{
    key_walk w = {fn, ud};
    return each_key(NULL, walk_key, &w);
}

typedef struct check {
    const char *backend;
    char *err;
    size_t errlen;
} check;

static int check_file(void *ud, conf_ref *r)
{
    check *ck = ud;
    if (r->e->type != PT_CONF_FILE || (r->backend && strcmp(r->backend, ck->backend) != 0))
        return 0;
    const char *path = *(char **)(r->base + r->e->off);
    if (!path || !path[0])
        return 0;
    struct stat st;
    if (stat(path, &st) != 0 || access(path, R_OK) != 0) {
        snprintf(ck->err, ck->errlen, "%s: %s: %s", r->key, path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(ck->err, ck->errlen, "%s: %s is not a regular file", r->key, path);
        return -1;
    }
    return 0;
}

int pt_config_check(pt_config *c, char *err, size_t errlen)
{
    check ck = {c->backend, err, errlen};
    if (each_key(c, check_file, &ck) != 0)
        return -1;
    if (!c->tls_cert_file[0] != !c->tls_key_file[0]) {
        snprintf(err, errlen, "%s is set without %s: TLS needs both",
                 c->tls_cert_file[0] ? "web.tls_cert_file" : "web.tls_key_file",
                 c->tls_cert_file[0] ? "web.tls_key_file" : "web.tls_cert_file");
        return -1;
    }
    static const char *const pre[] = {"", "write_", "read_"};
    const char *const user[] = {c->basic_auth_username, c->write_basic_auth_username,
                                c->read_basic_auth_username};
    const char *const pw[] = {c->basic_auth_password_file, c->write_basic_auth_password_file,
                              c->read_basic_auth_password_file};
    for (int i = 0; i < 3; i++) {
        if (!user[i][0] != !pw[i][0]) {
            snprintf(err, errlen, "web.%sbasic_auth_%s is set without web.%sbasic_auth_%s: "
                     "basic auth needs both", pre[i], user[i][0] ? "username" : "password_file",
                     pre[i], user[i][0] ? "password_file" : "username");
            return -1;
        }
    }
    if (c->ha_enabled && c->ha_update_interval_ms >= c->ha_failover_timeout_ms) {
        snprintf(err, errlen, "ha.update_interval (%ld ms) must be less than "
                 "ha.failover_timeout (%ld ms): the elected replica's lease would expire "
                 "before it is refreshed", c->ha_update_interval_ms, c->ha_failover_timeout_ms);
        return -1;
    }
    if (c->ha_enabled && strcmp(c->ha_cluster_label, c->ha_replica_label) == 0) {
        snprintf(err, errlen, "ha.cluster_label and ha.replica_label are both \"%s\"",
                 c->ha_cluster_label);
        return -1;
    }
    pt_retention_rules *rules;
    if (pt_retention_rules_parse(c->retention_rules, c->retention_ms, NULL, 0, 0, 0, &rules,
                                 err, errlen) != 0)
        return -1;
    pt_retention_rules_free(rules);
    pt_rollup_stage stages[PT_ROLLUP_MAX_STAGES];
    size_t nstages;
    if (pt_rollups_parse(c->rollups, stages, &nstages, err, errlen) != 0)
        return -1;
    if (nstages && c->index_bucket_ms % PT_ROLLUP_DAY_MS != 0 &&
        PT_ROLLUP_DAY_MS % c->index_bucket_ms != 0) {
        snprintf(err, errlen, "storage.rollups needs an index.bucket that divides a day or is "
                 "whole days (it is %ld ms)", c->index_bucket_ms);
        return -1;
    }
    if (c->tls_client_ca_file[0] && !c->tls_cert_file[0]) {
        snprintf(err, errlen, "web.tls_client_ca_file is set without web.tls_cert_file: "
                              "client certificates need TLS");
        return -1;
    }
    return 0;
}
