/* Matcher semantics (Prometheus 2.x) and the configuration table. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "bigtable.h"
#include "embedded.h"
#include "error.h"
#include "matcher.h"
#include "tap.h"

static int m(int type, const char *pattern, const char *value)
{
    pt_matcher mt;
    char msg[256];
    if (pt_matcher_init(&mt, type, pt_slice_str("l"), pt_slice_str(pattern), msg, sizeof(msg)))
        return -1;
    int r = pt_matcher_match(&mt, pt_slice_str(value));
    pt_matcher_free(&mt);
    return r;
}

/* The end of the first "name:" at or after from that starts a YAML key, or NULL. */
static const char *find_key(const char *from, const char *doc, const char *name)
{
    size_t n = strlen(name);
    for (const char *h = strstr(from, name); h; h = strstr(h + 1, name))
        if (h[n] == ':' && (h == doc || h[-1] == ' ' || h[-1] == '\n'))
            return h + n;
    return NULL;
}

/* configs/promtable.yml is the reference: every key of the configuration table (as
 * --help prints them, "(YAML: a.b.c)") appears in it as "c:" after its sections. */
static void test_reference_config(void)
{
    char path[512], *help = NULL, *yml = NULL;
    size_t helplen = 0;
    snprintf(path, sizeof(path), "%s/../../configs/promtable.yml", PT_TESTDATA);
    FILE *f = open_memstream(&help, &helplen);
    pt_config_usage(f, "promtable");
    fclose(f);
    FILE *y = fopen(path, "r");
    size_t ylen = 0;
    if (y) {
        yml = calloc(1, 1 << 16);
        ylen = fread(yml, 1, (1 << 16) - 1, y);
        fclose(y);
    }
    ok(yml && ylen > 0, "configs/promtable.yml reads");
    size_t keys = 0, missing = 0;
    for (const char *p = help; yml && (p = strstr(p, "(YAML: ")) != NULL; keys++) {
        p += 7;
        const char *e = strchr(p, ')');
        char key[128];
        snprintf(key, sizeof(key), "%.*s", (int)(e - p), p);
        /* Each section must appear, in order, before the leaf. */
        const char *at = yml;
        for (char *part = strtok(key, "."); part && at; part = strtok(NULL, "."))
            at = find_key(at, yml, part);
        if (!at) {
            diag("configs/promtable.yml lacks %.*s", (int)(e - p), p);
            missing++;
        }
        p = e;
    }
    ok(keys > 20 && missing == 0, "configs/promtable.yml lists all %zu keys of the table", keys);
    free(help);
    free(yml);
}

int main(void)
{
    is(m(PT_MATCH_EQ, "a", "a"), 1, "= equal");
    is(m(PT_MATCH_EQ, "a", "ab"), 0, "= not equal");
    is(m(PT_MATCH_NEQ, "a", "b"), 1, "!=");
    is(m(PT_MATCH_RE, "a.*", "abc"), 1, "=~ matches the whole value");
    is(m(PT_MATCH_RE, "b", "abc"), 0, "=~ is anchored at the start");
    is(m(PT_MATCH_RE, "a", "ab"), 0, "=~ is anchored at the end");
    is(m(PT_MATCH_RE, "a|ab", "ab"), 1, "alternation still has to cover the whole value");
    is(m(PT_MATCH_RE, "a$", "a\n"), 0, "$ does not match before a final newline");
    is(m(PT_MATCH_RE, ".*", "a\nb"), 0, ". does not match a newline (Prometheus 2.x)");
    is(m(PT_MATCH_RE, ".*", ""), 1, ".* matches the empty value");
    is(m(PT_MATCH_RE, ".+", ""), 0, ".+ does not");
    is(m(PT_MATCH_NRE, "a.*", "b"), 1, "!~");
    is(m(PT_MATCH_RE, "\xc3\xbc+", "\xc3\xbc\xc3\xbc"), 1, "UTF-8 aware");
    is(m(PT_MATCH_RE, "(?i)ABC", "abc"), 1, "flags");
    is(m(PT_MATCH_RE, "(", "x"), -1, "invalid regex refused");
    is(m(PT_MATCH_RE, "a)|(b", "b"), -1, "a regex cannot break out of the anchoring group");
    is(m(7, "a", "a"), -1, "unknown matcher type refused");
    {
        /* Empty values as protobuf-c hands them over: length 0, possibly a NULL pointer. */
        static const struct {
            int type;
            const char *value;
            int empty, nonempty;
        } cases[] = {
            {PT_MATCH_EQ, "", 1, 0},   {PT_MATCH_NEQ, "", 0, 1},  {PT_MATCH_RE, "", 1, 0},
            {PT_MATCH_NRE, "", 0, 1},  {PT_MATCH_RE, "a|", 1, 1}, {PT_MATCH_RE, "(a)?", 1, 1},
            {PT_MATCH_NRE, "a|", 0, 0}, {PT_MATCH_RE, "x*", 1, 0},
        };
        static const char *const tname[] = {"=", "!=", "=~", "!~"};
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
            for (int null = 0; null < (cases[i].value[0] ? 1 : 2); null++) {
                pt_matcher mt;
                char msg[256] = "";
                pt_slice v = pt_slice_str(cases[i].value);
                if (null)
                    v.p = NULL;
                int rv = pt_matcher_init(&mt, cases[i].type, pt_slice_str("l"), v, msg,
                                         sizeof(msg));
                ok(rv == 0 && mt.matches_empty == cases[i].empty &&
                       pt_matcher_match(&mt, pt_slice_str("a")) == cases[i].nonempty,
                   "l%s\"%s\"%s: missing label %s, \"a\" %s", tname[cases[i].type],
                   cases[i].value, null ? " (NULL pointer)" : "",
                   cases[i].empty ? "matches" : "does not", cases[i].nonempty ? "matches" : "does not");
                if (rv != 0)
                    diag("init: %s", msg);
                pt_matcher_free(&mt);
            }
        }
    }
    {
        pt_matcher mt;
        char msg[256];
        pt_matcher_init(&mt, PT_MATCH_NEQ, pt_slice_str("l"), pt_slice_str(""), msg, sizeof(msg));
        ok(!mt.matches_empty, "l!=\"\" does not match a missing label");
        pt_matcher_free(&mt);
        pt_matcher_init(&mt, PT_MATCH_NRE, pt_slice_str("l"), pt_slice_str("x"), msg, sizeof(msg));
        ok(mt.matches_empty, "l!~\"x\" matches a missing label");
        pt_matcher_free(&mt);
    }

    /* Durations and sizes. */
    long ms;
    ok(pt_parse_duration_ms("1d", &ms) == 0 && ms == 86400000, "1d");
    ok(pt_parse_duration_ms("1h30m", &ms) == 0 && ms == 5400000, "1h30m");
    ok(pt_parse_duration_ms("250ms", &ms) == 0 && ms == 250, "250ms");
    ok(pt_parse_duration_ms("5", &ms) != 0, "a bare number is not a duration");
    ok(pt_parse_duration_ms("-1s", &ms) != 0, "negative durations refused");
    size_t b;
    ok(pt_parse_bytes("32MiB", &b) == 0 && b == 32u << 20, "32MiB");
    ok(pt_parse_bytes("1GB", &b) == 0 && b == 1000000000u, "1GB");
    ok(pt_parse_bytes("1XB", &b) != 0, "unknown unit refused");

    /* The table: defaults, YAML, flags, errors. */
    pt_config c;
    char err[512];
    ok(pt_config_defaults(&c) == 0, "defaults allocate");
    const pt_embedded_conf *ec = pt_config_backend(&c, &pt_backend_embedded);
    const pt_bigtable_conf *bc = pt_config_backend(&c, &pt_backend_bigtable);
    ok(strcmp(c.listen_address, ":9201") == 0 && strcmp(c.backend, "embedded") == 0 && ec &&
           strcmp(ec->path, "./data") == 0 && ec->head_memory == 128u << 20 &&
           ec->head_max_age_ms == 7200000 && bc &&
           strcmp(bc->table_prefix, "") == 0 && c.index_bucket_ms == 86400000,
       "defaults, the backends' too");
    const char *y = "web:\n  listen_address: 127.0.0.1:9999\nstorage:\n  embedded:\n"
                    "    path: /tmp/x\n    sync: true\n  bigtable:\n    project: p\n"
                    "index:\n  bucket: 2d\nread:\n  max_series: 10\n";
    ok(pt_config_load_yaml(&c, y, strlen(y), err, sizeof(err)) == 0 &&
           strcmp(c.listen_address, "127.0.0.1:9999") == 0 && strcmp(ec->path, "/tmp/x") == 0 &&
           ec->sync == 1 && strcmp(bc->project, "p") == 0 && c.index_bucket_ms == 2 * 86400000L &&
           c.read_max_series == 10,
       "YAML sections map to dotted keys, backend fragments under storage.<backend>");
    const char *old = "storage:\n  path: /tmp/old\n  head_memory: 64MiB\n  table_prefix: t_\n";
    ok(pt_config_load_yaml(&c, old, strlen(old), err, sizeof(err)) == 0 &&
           strcmp(ec->path, "/tmp/old") == 0 && ec->head_memory == 64u << 20 &&
           strcmp(bc->table_prefix, "t_") == 0,
       "the former keys storage.path, storage.head_memory, storage.table_prefix still work");
    ok(pt_config_set_flag(&c, "storage.embedded.head-memory", "32MiB", err, sizeof(err)) == 0 &&
           ec->head_memory == 32u << 20 &&
           pt_config_set_flag(&c, "storage.sync", "false", err, sizeof(err)) == 0 && ec->sync == 0,
       "backend flags, new and former");
    ok(pt_config_set_flag(&c, "storage.embedded.head-memory", "1KiB", err, sizeof(err)) != 0 &&
           strstr(err, "storage.embedded.head_memory"),
       "a backend key's range is checked, naming the key");
    const char *unk = "web:\n  listen_adress: x\n";
    ok(pt_config_load_yaml(&c, unk, strlen(unk), err, sizeof(err)) != 0 &&
           strstr(err, "web.listen_adress"),
       "unknown keys are errors that name the key");
    const char *range = "index:\n  bucket: 100d\n";
    ok(pt_config_load_yaml(&c, range, strlen(range), err, sizeof(err)) != 0 &&
           strstr(err, "out of range"),
       "out-of-range values are errors");
    const char *bad = "web: [1, 2]\n";
    ok(pt_config_load_yaml(&c, bad, strlen(bad), err, sizeof(err)) != 0, "lists refused");
    const char *broken = "web:\n  listen_address: \"x\n";
    ok(pt_config_load_yaml(&c, broken, strlen(broken), err, sizeof(err)) != 0 &&
           strstr(err, "YAML"),
       "YAML syntax errors reported");
    ok(pt_config_load_yaml(&c, "", 0, err, sizeof(err)) == 0, "an empty file is fine");
    ok(pt_config_set_flag(&c, "web.listen-address", ":1234", err, sizeof(err)) == 0 &&
           strcmp(c.listen_address, ":1234") == 0,
       "flags set the same fields");
    ok(pt_config_set_flag(&c, "no.such", "1", err, sizeof(err)) != 0, "unknown flag refused");
    pt_config_free(&c);

    /* Every example configuration in configs/ loads. */
    static const char *const examples[] = {"promtable.yml", "promtable-tls.yml",
                                           "promtable-compose.yml", "promtable-bigtable.yml"};
    for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/../../configs/%s", PT_TESTDATA, examples[i]);
        pt_config_defaults(&c);
        int rv = pt_config_load_file(&c, path, err, sizeof(err));
        ok(rv == 0, "configs/%s loads", examples[i]);
        if (rv)
            diag("%s", err);
        pt_config_free(&c);
    }
    test_reference_config();
    return done_testing();
}
