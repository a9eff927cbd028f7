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
    if (pt_matcher_init(&mt, type, pt_slice_str("l"), pt_slice_str(pattern), NULL, msg,
                        sizeof(msg)))
        return -1;
    int r = pt_matcher_match(&mt, pt_slice_str(value));
    pt_matcher_free(&mt);
    return r;
}

/* A request's regex limits (matcher.h): a value a regex cannot decide within them is an
 * error, for =~ and !~ alike, never a non-match; the matcher count and the compiled
 * regexes' memory count against the request. */
static void test_limits(void)
{
    static const char slow[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1c"; /* (a|a)*c: 2^30 paths */
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_matcher_env env;
    ok(pt_matcher_env_init(&env, &a, 10000, 1u << 20, 0) == 0, "an environment on an arena");
    for (int type = PT_MATCH_RE; type <= PT_MATCH_NRE; type++) {
        pt_matcher mt;
        char msg[512] = "";
        int rv = pt_matcher_init(&mt, type, pt_slice_str("v"), pt_slice_str("(a|a)*c"), &env, msg,
                                 sizeof(msg));
        int fast = rv == 0 ? pt_matcher_match(&mt, pt_slice_str("aac")) : -1;
        int got = rv == 0 ? pt_matcher_match(&mt, pt_slice_str(slow)) : rv;
        if (got == PT_EREGEXLIMIT)
            pt_matcher_limit_msg(&mt, msg, sizeof(msg));
        ok(fast == (type == PT_MATCH_RE) && got == PT_EREGEXLIMIT &&
               strstr(msg, type == PT_MATCH_RE ? "v=~\"(a|a)*c\"" : "v!~\"(a|a)*c\"") &&
               strstr(msg, "read.regex_match_limit = 10000"),
           "%s: a value past the match limit is an error naming matcher and limit (%d: %s)",
           type == PT_MATCH_RE ? "=~" : "!~", got, msg);
        pt_matcher_free(&mt);
    }
    {
        /* A value deeper than the JIT's stack goes to the interpreter, whose backtracking
         * memory is limited by heap_limit. */
        size_t n = 200000;
        char *deep = malloc(n + 1);
        memset(deep, 'a', n);
        deep[n] = '\0';
        pt_matcher mt;
        char msg[512] = "";
        int big = -9, small = -9;
        if (pt_matcher_init(&mt, PT_MATCH_RE, pt_slice_str("v"), pt_slice_str("(a|b)*"), &env, msg,
                            sizeof(msg)) == 0) {
            pt_matcher_env wide, narrow;
            pt_matcher_env_init(&wide, &a, 100000000, 256u << 20, 0);
            pt_matcher_env_init(&narrow, &a, 100000000, 64u << 10, 0);
            /* Narrow first: the match data keeps the frames a wide match grew. */
            mt.env = &narrow;
            small = pt_matcher_match(&mt, pt_slice_str(deep));
            if (small == PT_EREGEXLIMIT)
                pt_matcher_limit_msg(&mt, msg, sizeof(msg));
            mt.env = &wide;
            big = pt_matcher_match(&mt, pt_slice_str(deep));
            pt_matcher_free(&mt);
        }
        ok(big == 1 && small == PT_EREGEXLIMIT && strstr(msg, "read.regex_heap_limit"),
           "a deep value: a match with room, the heap limit's error without (%d %d: %s)", big,
           small, msg);
        free(deep);
    }
    pt_matcher_env_free(&env);
    pt_arena_free(&a);

    /* read.max_matchers: counted before compiling. */
    pt_arena_init(&a, 0, 0);
    pt_matcher_env_init(&env, &a, 0, 0, 2);
    pt_matcher ms[3];
    char msg[512] = "";
    int r0 = pt_matcher_init(&ms[0], PT_MATCH_EQ, pt_slice_str("a"), pt_slice_str("1"), &env, msg,
                             sizeof(msg));
    int r1 = pt_matcher_init(&ms[1], PT_MATCH_RE, pt_slice_str("b"), pt_slice_str("x.*"), &env, msg,
                             sizeof(msg));
    int r2 = pt_matcher_init(&ms[2], PT_MATCH_RE, pt_slice_str("c"), pt_slice_str("y.*"), &env, msg,
                             sizeof(msg));
    ok(r0 == 0 && r1 == 0 && r2 == PT_EBADREQ && strstr(msg, "read.max_matchers") && !ms[2].re,
       "a matcher past max_matchers: 400 naming the limit, nothing compiled (%s)", msg);
    ok(pt_matcher_env_check(&env, 1, msg, sizeof(msg)) == PT_EBADREQ &&
           pt_matcher_env_check(&env, 0, msg, sizeof(msg)) == 0,
       "the check counts what is already compiled");
    pt_matcher_free(&ms[0]);
    pt_matcher_free(&ms[1]);
    pt_matcher_env_free(&env);
    pt_arena_free(&a);

    /* Compiling charges the request's arena: a big regex set fails cleanly in a small one. */
    char *alt = malloc(64 * 1024);
    size_t k = 0;
    for (int i = 0; i < 2000; i++)
        k += (size_t)sprintf(alt + k, "%sword%d", i ? "|" : "", i);
    pt_arena_init(&a, 4096, 0);
    pt_matcher_env_init(&env, &a, 0, 0, 0);
    size_t before = a.used_total;
    pt_matcher big;
    int rb = pt_matcher_init(&big, PT_MATCH_RE, pt_slice_str("w"), (pt_slice){(uint8_t *)alt, k},
                             &env, msg, sizeof(msg));
    int hit = rb == 0 ? pt_matcher_match(&big, pt_slice_str("word1999")) : rb;
    ok(rb == 0 && a.used_total - before > k && hit == 1,
       "a %zu-byte regex compiles into the request's arena (%zu bytes charged; %d %d %s)", k,
       a.used_total - before, rb, hit, rb ? msg : "");
    pt_matcher_free(&big);
    pt_matcher_env_free(&env);
    pt_arena_free(&a);
    pt_arena_init(&a, 4096, 64 * 1024);
    pt_matcher_env_init(&env, &a, 0, 0, 0);
    int rs = 0;
    for (int i = 0; i < 8 && rs == 0; i++) {
        rs = pt_matcher_init(&big, PT_MATCH_RE, pt_slice_str("w"), (pt_slice){(uint8_t *)alt, k},
                             &env, msg, sizeof(msg));
        if (rs == 0)
            pt_matcher_free(&big);
    }
    ok(rs == PT_ENOMEM && a.exhausted, "past the request's memory: PT_ENOMEM, the arena exhausted");
    pt_matcher_env_free(&env);
    pt_arena_free(&a);
    free(alt);
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
                int rv = pt_matcher_init(&mt, cases[i].type, pt_slice_str("l"), v, NULL, msg,
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
        pt_matcher_init(&mt, PT_MATCH_NEQ, pt_slice_str("l"), pt_slice_str(""), NULL, msg,
                        sizeof(msg));
        ok(!mt.matches_empty, "l!=\"\" does not match a missing label");
        pt_matcher_free(&mt);
        pt_matcher_init(&mt, PT_MATCH_NRE, pt_slice_str("l"), pt_slice_str("x"), NULL, msg,
                        sizeof(msg));
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
    test_limits();
    return done_testing();
}
