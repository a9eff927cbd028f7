/* Matcher semantics (Prometheus 2.x) and the configuration table. */
#include <stdio.h>
#include <string.h>

#include "config.h"
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
    pt_config_defaults(&c);
    ok(strcmp(c.listen_address, ":9201") == 0 && strcmp(c.backend, "embedded") == 0 &&
           strcmp(c.storage_path, "./data") == 0 && c.index_bucket_ms == 86400000,
       "defaults");
    const char *y = "web:\n  listen_address: 127.0.0.1:9999\nstorage:\n  path: /tmp/x\n"
                    "  sync: true\nindex:\n  bucket: 2d\nread:\n  max_series: 10\n";
    ok(pt_config_load_yaml(&c, y, strlen(y), err, sizeof(err)) == 0 &&
           strcmp(c.listen_address, "127.0.0.1:9999") == 0 && strcmp(c.storage_path, "/tmp/x") == 0 &&
           c.storage_sync == 1 && c.index_bucket_ms == 2 * 86400000L && c.read_max_series == 10,
       "YAML sections map to dotted keys");
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
                                           "promtable-compose.yml"};
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
    return done_testing();
}
