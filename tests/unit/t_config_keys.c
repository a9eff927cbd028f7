/* Every key of every configuration table (the daemon's and each backend's fragment), taken
 * from the tables themselves, so a key added later is covered without touching this file:
 * values below the minimum, above the maximum and malformed ones are refused, from a flag
 * and from YAML, by the former name too, with a message that names the key and without
 * changing the setting; the bounds, the default and other good values are accepted and
 * land in the field. */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"
#include "config.h"
#include "tap.h"

#define MAX_VALUES 40

typedef struct values {
    char v[MAX_VALUES][96];
    int range[MAX_VALUES]; /* a bound crossed: the message says "out of range" */
    size_t n;
} values;

static void add(values *vs, int range, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add(values *vs, int range, const char *fmt, ...)
{
    va_list ap;
    if (vs->n == MAX_VALUES)
        return;
    va_start(ap, fmt);
    vsnprintf(vs->v[vs->n], sizeof(vs->v[0]), fmt, ap);
    va_end(ap);
    vs->range[vs->n++] = range;
}

/* Adds each value of a NULL-terminated list as it is, none of them crossing a bound. */
static void add_all(values *vs, const char *const *list)
{
    for (; *list; list++)
        add(vs, 0, "%s", *list);
}

static char good_file[64] = "";

/* Values every key of type e->type must refuse. Returns 0 for a type this test does not
 * know, so that a new type cannot slip through untested. */
static int bad_values(const pt_conf_key *e, values *vs)
{
    vs->n = 0;
    switch (e->type) {
    case PT_CONF_STR: /* free text: only empty can be wrong */
        if (e->def[0])
            add(vs, 0, "%s", "");
        if (strcmp(e->key, "tenancy.header") == 0) { /* but this one is a header name */
            add(vs, 0, "%s", "X Scope");
            add(vs, 0, "%s", "Authorization");
        }
        if (strcmp(e->key, "storage.retention_rules") == 0) { /* and this one holds rules */
            add(vs, 0, "%s", "x");
            add(vs, 0, "%s", "7d {");
            add(vs, 0, "%s", "0s up");
        }
        if (strcmp(e->key, "storage.rollups") == 0) { /* and this one stages */
            add(vs, 0, "%s", "x");
            add(vs, 0, "%s", "7m 1y");
            add(vs, 0, "%s", "5m");
        }
        return 1;
    case PT_CONF_LONG:
        if (e->min > LLONG_MIN)
            add(vs, 1, "%lld", e->min - 1);
        if (e->max < LLONG_MAX)
            add(vs, 1, "%lld", e->max + 1);
        add(vs, 1, "99999999999999999999999");
        add(vs, 1, "-99999999999999999999999");
        add_all(vs, (const char *const[]){"", "12x", "x12", "-", " 1", "+1", "1 ", "0x10", "1e3",
                                            "1.5", "5MiB", NULL});
        return 1;
    case PT_CONF_DURATION:
        if (e->min > 0)
            add(vs, 1, "%lldms", e->min - 1);
        add(vs, 1, "%lldms", e->max + 1);
        add_all(vs, (const char *const[]){"", "12x", "-1", "-1s", "5", "1.5h", "1h ", " 1h", "h",
                                            "99999999999999999999999ms", "300000000y",
                                            "9223372036854775807ms1ms", NULL});
        return 1;
    case PT_CONF_BYTES:
        if (e->min > 0)
            add(vs, 1, "%lld", e->min - 1);
        add(vs, 1, "%lld", e->max + 1);
        add_all(vs, (const char *const[]){"", "12x", "-1", "1.5MiB", "1XB", " 1MiB", "1MiB ",
                                            "99999999999999999999999", "17179869184GiB", NULL});
        return 1;
    case PT_CONF_BOOL:
        add_all(vs, (const char *const[]){"", "2", "-1", "maybe", "truex", "TRUE ", NULL});
        return 1;
    case PT_CONF_ADDR:
        if (e->min > 0)
            add(vs, 1, ":%lld", e->min - 1);
        add(vs, 1, ":%lld", e->max + 1);
        add(vs, 1, "127.0.0.1:%lld", e->max + 1);
        add(vs, 1, "[::1]:99999");
        add(vs, 1, ":999999999999999999999999");
        if (e->def[0])
            add(vs, 0, "%s", "");
        add_all(vs, (const char *const[]){"12x", "localhost", ":", "localhost:", ":-1", ":+80",
                                            ":80x", ": 80", "::1:80", "[::1]", "[::1]80", "[]:80",
                                            "[127.0.0.1]:80", "[::1:80", "a b:80",
                                            "http://localhost:80", NULL});
        return 1;
    case PT_CONF_ENUM: {
        size_t l = strcspn(e->def, "|");
        add(vs, 0, "%s", "");
        add(vs, 0, "bogus");
        add(vs, 0, "%.*sx", (int)l, e->def);
        add(vs, 0, " %.*s", (int)l, e->def);
        add(vs, 0, "%s", e->def);
        if (e->def[0] >= 'a' && e->def[0] <= 'z')
            add(vs, 0, "%c%.*s", e->def[0] - 'a' + 'A', (int)l - 1, e->def + 1);
        return 1;
    }
    case PT_CONF_FILE:
        add(vs, 0, "/nonexistent-promtable-test/file");
        add(vs, 0, "/");
        return 1;
    case PT_CONF_DIR: /* any path, and empty (off): nothing to refuse when it is set */
        return 1;
    }
    return 0;
}

/* Values every key of type e->type must accept. */
static void good_values(const pt_conf_key *e, values *vs)
{
    vs->n = 0;
    switch (e->type) {
    case PT_CONF_STR:
        if (strcmp(e->key, "storage.retention_rules") != 0 && strcmp(e->key, "storage.rollups") != 0)
            add(vs, 0, "x");
        if (strcmp(e->key, "tenancy.header") == 0)
            add(vs, 0, "X-Tenant_1.b");
        else if (strcmp(e->key, "storage.retention_rules") == 0)
            add(vs, 0, "7d {__name__=~\"debug_.*\", job='a b'}");
        else if (strcmp(e->key, "storage.rollups") == 0)
            add(vs, 0, "5m 1y");
        else
            add(vs, 0, "a value with spaces, 'quotes' and \"more\"");
        if (!e->def[0])
            add(vs, 0, "%s", "");
        break;
    case PT_CONF_LONG:
    case PT_CONF_BYTES:
        add(vs, 0, "%lld", e->min);
        add(vs, 0, "%lld", e->max);
        break;
    case PT_CONF_DURATION:
        add(vs, 0, "%lldms", e->min);
        add(vs, 0, "%lldms", e->max);
        break;
    case PT_CONF_BOOL:
        add_all(vs, (const char *const[]){"true", "false", "yes", "no", "1", "0", NULL});
        break;
    case PT_CONF_ADDR:
        add(vs, 0, ":%lld", e->min);
        add(vs, 0, "127.0.0.1:%lld", e->max);
        add(vs, 0, "[::1]:%lld", e->max);
        add(vs, 0, "localhost:%lld", e->min);
        add(vs, 0, "my-host.example.com:%lld", e->max);
        add(vs, 0, "[fe80::1%%eth0]:%lld", e->max);
        if (!e->def[0])
            add(vs, 0, "%s", "");
        break;
    case PT_CONF_ENUM:
        for (const char *p = e->def; *p;) {
            size_t l = strcspn(p, "|");
            add(vs, 0, "%.*s", (int)l, p);
            p += l + (p[l] == '|');
        }
        break;
    case PT_CONF_FILE:
        add(vs, 0, "%s", good_file);
        add(vs, 0, "%s", "");
        break;
    case PT_CONF_DIR: /* empty too, whatever the default: it turns the feature off */
        add(vs, 0, "%s", "/var/lib/promtable/x");
        add(vs, 0, "%s", "relative/dir");
        add(vs, 0, "%s", "");
        break;
    }
}

/* The struct a key's entry fills inside c: the config, or a backend's settings. */
static char *base_of(pt_config *c, const pt_conf_key *e)
{
    size_t nb;
    const pt_backend_ops *const *all = pt_backend_list(&nb);
    for (size_t b = 0; b < nb; b++)
        if (all[b]->conf && e >= all[b]->conf && e < all[b]->conf + all[b]->nconf)
            return (char *)pt_config_backend(c, all[b]);
    return (char *)c;
}

/* The field of e in c as text, for comparing settings. */
static void field_text(pt_config *c, const pt_conf_key *e, char *out, size_t cap)
{
    char *f = base_of(c, e) + e->off;
    switch (e->type) {
    case PT_CONF_STR:
    case PT_CONF_ADDR:
    case PT_CONF_FILE:
    case PT_CONF_ENUM:
    case PT_CONF_DIR:
        snprintf(out, cap, "%s", *(char **)f ? *(char **)f : "(null)");
        break;
    case PT_CONF_LONG:
    case PT_CONF_DURATION:
        snprintf(out, cap, "%ld", *(long *)f);
        break;
    case PT_CONF_BYTES:
        snprintf(out, cap, "%zu", *(size_t *)f);
        break;
    case PT_CONF_BOOL:
        snprintf(out, cap, "%d", *(int *)f);
        break;
    }
}

/* What a good value must leave in the field: its number in the field's unit. */
static void expected_text(const pt_conf_key *e, const char *v, char *out, size_t cap)
{
    switch (e->type) {
    case PT_CONF_LONG:
    case PT_CONF_DURATION:
    case PT_CONF_BYTES:
        snprintf(out, cap, "%lld", strtoll(v, NULL, 10));
        break;
    case PT_CONF_BOOL:
        snprintf(out, cap, "%d", !strcmp(v, "true") || !strcmp(v, "yes") || !strcmp(v, "1"));
        break;
    default:
        snprintf(out, cap, "%s", v);
        break;
    }
}

/* "a.b.c" = v as nested YAML, the value single-quoted. */
static void yaml_for(const char *key, const char *v, char *out, size_t cap)
{
    size_t o = 0;
    int depth = 0;
    for (const char *p = key;; p++, depth++) {
        const char *dot = strchr(p, '.');
        int l = dot ? (int)(dot - p) : (int)strlen(p);
        o += (size_t)snprintf(out + o, cap - o, "%*s%.*s:%s", depth * 2, "", l, p,
                              dot ? "\n" : " '");
        if (!dot)
            break;
        p = dot;
    }
    for (; *v && o + 4 < cap; v++) {
        if (*v == '\'')
            out[o++] = '\'';
        out[o++] = *v;
    }
    snprintf(out + o, cap - o, "'\n");
}

/* name = v on a fresh default configuration, as the flag --name (yaml 0) or in a YAML
 * file, then the start-up check. 0 when accepted, else -1 and err. field gets the
 * setting afterwards. */
static int try_value(int yaml, const char *name, const pt_conf_key *e, const char *v,
                     char *err, size_t errlen, char *field, size_t fieldcap)
{
    pt_config c;
    int rv = -1;
    err[0] = '\0';
    if (pt_config_defaults(&c) != 0) {
        snprintf(err, errlen, "out of memory");
        goto out;
    }
    if (yaml) {
        char doc[512];
        yaml_for(name, v, doc, sizeof(doc));
        rv = pt_config_load_yaml(&c, doc, strlen(doc), err, errlen);
    } else {
        char flag[192];
        size_t i = 0;
        for (; name[i] && i + 1 < sizeof(flag); i++)
            flag[i] = name[i] == '_' ? '-' : name[i];
        flag[i] = '\0';
        rv = pt_config_set_flag(&c, flag, v, err, errlen);
    }
    if (rv == 0)
        rv = pt_config_check(&c, err, errlen);
    field_text(&c, e, field, fieldcap);
out:
    pt_config_free(&c);
    return rv;
}

typedef struct stats {
    size_t keys, types[16];
    int unknown_type;
} stats;

/* Whether err is about the value of key itself, not about a key it goes together with
 * ("web.tls_cert_file is set without web.tls_key_file"). */
static int refuses_value(const char *err, const char *key)
{
    size_t n = strlen(key);
    const char *k = strstr(err, key);
    return k && k[n] == ':';
}

static int test_key(void *ud, const char *key, const pt_conf_key *e)
{
    stats *st = ud;
    values bad, good;
    char err[512], field[256], want[256], def[256];
    st->keys++;
    if ((size_t)e->type < sizeof(st->types) / sizeof(st->types[0]))
        st->types[e->type]++;
    if (!bad_values(e, &bad)) {
        ok(0, "%s: type %d has probes in this test", key, (int)e->type);
        st->unknown_type = 1;
        return 0;
    }
    good_values(e, &good);
    {
        /* The default as a fresh configuration holds it. */
        pt_config c;
        pt_config_defaults(&c);
        field_text(&c, e, def, sizeof(def));
        pt_config_free(&c);
    }
    const char *names[2] = {key, e->alias};
    for (int ni = 0; ni < 2 && names[ni]; ni++) {
        for (int yaml = 0; yaml < 2; yaml++) {
            const char *how = yaml ? "YAML" : "flag";
            int fails = 0;
            for (size_t i = 0; i < bad.n; i++) {
                const char *v = bad.v[i];
                int rv = try_value(yaml, names[ni], e, v, err, sizeof(err), field, sizeof(field));
                const char *why = rv == 0                             ? "accepted"
                                  : !strstr(err, key)                 ? "message lacks the key"
                                  : bad.range[i] && !strstr(err, "out of range")
                                      ? "message does not say out of range"
                                  /* a file is looked at once everything is set */
                                  : e->type != PT_CONF_FILE && strcmp(field, def) != 0
                                      ? "the setting changed"
                                                            : NULL;
                if (why) {
                    diag("%s = \"%s\" (%s): %s; message: %s; field: %s", names[ni], v, how, why,
                         err, field);
                    fails++;
                }
            }
            ok(fails == 0, "%s%s%s (%s): %zu bad values refused, naming the key", names[ni],
               ni ? " for " : "", ni ? key : "", how, bad.n);
            fails = 0;
            for (size_t i = 0; i < good.n; i++) {
                const char *v = good.v[i];
                int rv = try_value(yaml, names[ni], e, v, err, sizeof(err), field, sizeof(field));
                expected_text(e, v, want, sizeof(want));
                /* A key set alone may break a rule of keys that go together (tested in
                 * test_pairs); the value itself is fine. */
                int pair_only = rv != 0 && !refuses_value(err, key) && strstr(err, "without");
                if ((rv != 0 && !pair_only) || strcmp(field, want) != 0) {
                    diag("%s = \"%s\" (%s): %s; field %s, want %s", names[ni], v, how,
                         rv ? err : "accepted", field, want);
                    fails++;
                }
            }
            ok(fails == 0, "%s (%s): %zu good values accepted and set", names[ni], how, good.n);
        }
    }
    return 0;
}

static int write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    return fclose(f);
}

/* The rules pt_config_check adds over single values: keys that go together. */
static void test_pairs(void)
{
    static const char *const pairs[][2] = {
        {"web.tls-cert-file", "web.tls-key-file"},
        {"web.basic-auth-username", "web.basic-auth-password-file"},
    };
    char err[512];
    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        for (int mask = 1; mask <= 3; mask++) {
            pt_config c;
            pt_config_defaults(&c);
            int rv = 0;
            for (int j = 0; j < 2; j++)
                if (mask & (1 << j))
                    rv |= pt_config_set_flag(&c, pairs[i][j],
                                             strstr(pairs[i][j], "file") ? good_file : "u", err,
                                             sizeof(err));
            int checked = rv == 0 ? pt_config_check(&c, err, sizeof(err)) : -2;
            if (mask == 3)
                ok(checked == 0, "--%s with --%s is accepted", pairs[i][0], pairs[i][1]);
            else
                ok(checked == -1 && strstr(err, "without"), "--%s alone is refused: %s",
                   pairs[i][mask == 1 ? 0 : 1], err);
            pt_config_free(&c);
        }
    }
}

/* storage.backend offers exactly the backends a deployment may use. */
static void test_backend_choices(void)
{
    size_t nb;
    const pt_backend_ops *const *all = pt_backend_list(&nb);
    char err[512];
    for (size_t b = 0; b < nb; b++) {
        pt_config c;
        pt_config_defaults(&c);
        int rv = pt_config_set_flag(&c, "storage.backend", all[b]->name, err, sizeof(err));
        if (all[b]->caps & PT_BACKEND_CAP_TEST)
            ok(rv != 0, "storage.backend refuses %s, a backend for tests only", all[b]->name);
        else
            ok(rv == 0, "storage.backend accepts the registered backend %s", all[b]->name);
        pt_config_free(&c);
    }
}

int main(void)
{
    snprintf(good_file, sizeof(good_file), "/tmp/t_config_keys.%ld", (long)getpid());
    if (write_file(good_file, "secret\n") != 0) {
        ok(0, "cannot write %s", good_file);
        return done_testing();
    }
    stats st = {0};
    pt_config_each_key(test_key, &st);
    ok(st.keys >= 30, "%zu keys walked (the daemon's and every backend's)", st.keys);
    ok(!st.unknown_type, "every key's type has probes here");
    /* Every value type is exercised by at least one key, so its checks above ran. */
    for (int t = PT_CONF_STR; t <= PT_CONF_ENUM; t++)
        ok(st.types[t] > 0, "type %d: %zu keys", t, st.types[t]);
    test_pairs();
    test_backend_choices();
    unlink(good_file);
    return done_testing();
}
