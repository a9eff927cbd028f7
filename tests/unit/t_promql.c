/* promql.c: series selectors (the matchers made, the exact error messages, the request's
 * matcher limit, memory), timestamps (Unix seconds and RFC 3339 at their edges) and label
 * names escaped for URL paths. t_api.c has more selector and timestamp cases through the
 * same functions. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "promql.h"
#include "tap.h"

typedef struct want_m {
    const char *name;
    int type;
    const char *value;
} want_m;

enum { EQ = PT_MATCH_EQ, NEQ = PT_MATCH_NEQ, RE = PT_MATCH_RE, NRE = PT_MATCH_NRE };

/* Parses in from a copy of exactly its length in arena a (a read past n is an ASan
 * error; the matchers may point into the copy, which lives as long as they do). */
static int parse(pt_arena *a, pt_matcher_env *env, const char *in, pt_matcher **ms, size_t *n,
                 char *msg, size_t cap)
{
    size_t len = strlen(in);
    char *exact = pt_arena_alloc(a, len ? len : 1);
    msg[0] = '\0';
    if (!exact) {
        *ms = NULL, *n = 0;
        return PT_ENOMEM;
    }
    memcpy(exact, in, len);
    return pt_selector_parse(a, exact, len, env, ms, n, msg, cap);
}

static int same(pt_slice s, const char *want)
{
    return s.n == strlen(want) && memcmp(s.p, want, s.n) == 0;
}

/* Each selector parses to its matchers (name, type, value, a regex compiled for =~ and
 * !~ only), or fails with PT_EBADREQ and its message. */
static void test_selectors(void)
{
    static const struct {
        const char *in;
        size_t n;
        want_m m[3];
        const char *err; /* NULL: parses */
    } cases[] = {
        {"m\n{\ta = \"b\"\n}", 2, {{"__name__", EQ, "m"}, {"a", EQ, "b"}}, NULL},
        {"{\"a.b\"=\"1\", 'c'!~'d'}", 2, {{"a.b", EQ, "1"}, {"c", NRE, "d"}}, NULL},
        {"m{a=`x\ny\\n`}", 2, {{"__name__", EQ, "m"}, {"a", EQ, "x\ny\\n"}}, NULL},
        {"m{a='\\'',b=\"\\a\\v\\101\\x7e\"}",
         3,
         {{"__name__", EQ, "m"}, {"a", EQ, "'"}, {"b", EQ, "\a\vA~"}},
         NULL},
        {"{__name__=\"m\",a=~\"x|y\"}", 2, {{"__name__", EQ, "m"}, {"a", RE, "x|y"}}, NULL},
        {"_m:x_1{a!=\"\"}", 2, {{"__name__", EQ, "_m:x_1"}, {"a", NEQ, ""}}, NULL},
        {"up x123456789012345678901234",
         0,
         {{0}},
         "parse error at char 4: unexpected text after the selector, found "
         "\"x1234567890123456789\""},
        {"m{,}", 0, {{0}}, "parse error at char 3: expected a label name or '}', found \",}\""},
        {"m{a=\"x\ny\"}",
         0,
         {{0}},
         "parse error at char 5: unterminated quoted string, found \"\"x\ny\"}\""},
        {"m{a=\"\\400\"}",
         0,
         {{0}},
         "parse error at char 6: octal escape sequence out of range, found \"\\400\"}\""},
        {"m{a=\"\\08\"}",
         0,
         {{0}},
         "parse error at char 6: invalid octal escape sequence, found \"\\08\"}\""},
        {"m{a=\"\\U00110000\"}",
         0,
         {{0}},
         "parse error at char 6: invalid Unicode code point in escape sequence, found "
         "\"\\U00110000\"}\""},
        {"m{a=\"\\377\"}",
         0,
         {{0}},
         "parse error at char 5: string is not valid UTF-8, found \"\"\\377\"}\""},
        {"m{a=\"b\"", 0, {{0}}, "parse error at char 8: expected ',' or '}', found the end"},
        {"m{a=\"b\"}}",
         0,
         {{0}},
         "parse error at char 9: unexpected text after the selector, found \"}\""},
        {"{\"a\"=}", 0, {{0}}, "parse error at char 6: expected a quoted label value, found \"}\""},
        {"   ", 0, {{0}}, "parse error at char 4: expected a metric name or '{', found the end"},
        {"{a!~\"x\"}", 0, {{0}}, "vector selector must contain at least one non-empty matcher"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pt_arena a;
        pt_arena_init(&a, 0, 0);
        pt_matcher *ms;
        size_t n;
        char msg[256];
        int rv = parse(&a, NULL, cases[i].in, &ms, &n, msg, sizeof(msg));
        if (cases[i].err) {
            ok(rv == PT_EBADREQ, "selector %zu: PT_EBADREQ (got %d)", i, rv);
            is_str(msg, cases[i].err, "selector %zu: its message", i);
        } else {
            int match = rv == 0 && n == cases[i].n;
            for (size_t j = 0; match && j < n; j++) {
                const want_m *w = &cases[i].m[j];
                match = ms[j].type == w->type && same(ms[j].name, w->name) &&
                        same(ms[j].value, w->value) &&
                        (ms[j].re != NULL) == (w->type == RE || w->type == NRE);
            }
            ok(match, "selector %zu parses to its %zu matchers (rv %d, msg '%s')", i, cases[i].n,
               rv, msg);
        }
        pt_selector_free(ms, n);
        pt_arena_free(&a);
    }
}

/* The request's matcher limit counts the metric name; memory runs out as PT_ENOMEM. */
static void test_limits(void)
{
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    pt_matcher_env env;
    ok(pt_matcher_env_init(&env, &a, 0, 0, 2) == 0, "an environment of 2 matchers");
    pt_matcher *ms;
    size_t n;
    char msg[256];
    int rv = parse(&a, &env, "m{a=\"b\",c=\"d\"}", &ms, &n, msg, sizeof(msg));
    ok(rv == PT_EBADREQ && n == 0, "3 matchers over a limit of 2: PT_EBADREQ, none compiled");
    is_str(msg, "the request carries more than 2 label matchers (limit read.max_matchers)",
           "the limit's message");
    pt_selector_free(ms, n);
    rv = parse(&a, &env, "m{a=\"b\"}", &ms, &n, msg, sizeof(msg));
    ok(rv == 0 && n == 2, "2 matchers within a limit of 2");
    pt_selector_free(ms, n);
    pt_matcher_env_free(&env);
    pt_arena_free(&a);

    pt_arena tiny;
    pt_arena_init(&tiny, 0, 64);
    static const char big[] = "m{a=\"b\",c=\"d\",e=\"f\",g=\"h\"}";
    rv = pt_selector_parse(&tiny, big, sizeof(big) - 1, NULL, &ms, &n, msg, sizeof(msg));
    ok(rv == PT_ENOMEM, "an arena too small for the selector: PT_ENOMEM (got %d)", rv);
    pt_selector_free(ms, n);
    pt_arena_free(&tiny);
}

static void test_times(void)
{
    enum { UNTOUCHED = -7 }; /* *ms before the call */
    static const struct {
        const char *in;
        int rv;     /* 0, or -1: refused */
        int64_t ms; /* *ms after the call */
    } cases[] = {
        {"2000-02-29T00:00:00Z", 0, INT64_C(951782400000)},
        {"1969-12-31T23:59:59Z", 0, -1000},
        {"2023-11-14t22:13:20z", 0, INT64_C(1700000000000)},
        {"2023-11-14T22:13:20.1Z", 0, INT64_C(1700000000100)},
        {"2023-11-14T22:13:20.9999Z", 0, INT64_C(1700000000999)},
        {"2023-11-14T22:13:20-00:30", 0, INT64_C(1700001800000)},
        {"1.0006", 0, 1001},
        {"-1.0006", 0, -1001},
        {"-0.0004", 0, 0},
        {"+5", 0, 5000},
        {"1e300", 0, PT_API_TIME_LIMIT_MS},
        {"-1e300", 0, -PT_API_TIME_LIMIT_MS},
        {"2100-02-29T00:00:00Z", -1, UNTOUCHED},
        {"2023-04-31T00:00:00Z", -1, UNTOUCHED},
        {"2023-13-01T00:00:00Z", -1, UNTOUCHED},
        {"2023-11-14T22:60:00Z", -1, UNTOUCHED},
        {"2023-11-14T22:13:60Z", -1, UNTOUCHED},
        {"2023-11-14T22:13:20+24:00", -1, UNTOUCHED},
        {"2023-11-14T22:13:20+01:60", -1, UNTOUCHED},
        {"2023-11-14T22:13:20+01:00x", -1, UNTOUCHED},
        {"1e400", -1, UNTOUCHED},
        {" 5", -1, UNTOUCHED},
        {"infinity", -1, UNTOUCHED},
        {"0x1p3", -1, UNTOUCHED},
        {".", -1, UNTOUCHED},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int64_t got = UNTOUCHED;
        int rv = pt_api_time(cases[i].in, &got);
        ok(rv == cases[i].rv && got == cases[i].ms, "time \"%s\": %d, %lld (got %d, %lld)",
           cases[i].in, cases[i].rv, (long long)cases[i].ms, rv, (long long)got);
    }
}

static void test_unescape_name(void)
{
    static const struct {
        const char *in, *want; /* want NULL: in itself comes back */
    } cases[] = {
        {"plain", NULL},
        {"U__my_2e_name", "my.name"},
        {"U__a__b", "a_b"},
        {"U___1F600_", "\xf0\x9f\x98\x80"},
        {"U__", ""},
        {"U__a_zz_", NULL},
        {"U__a_0_", NULL},
        {"U__a_D800_", NULL},
        {"U__a_110000_", NULL},
        {"U__a_2e", NULL},
        {"U__a_000000041_", NULL},
    };
    pt_arena a;
    pt_arena_init(&a, 0, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        pt_slice in = pt_slice_str(cases[i].in);
        pt_slice got = pt_promql_unescape_name(&a, in);
        if (cases[i].want)
            ok(same(got, cases[i].want), "name \"%s\" decodes", cases[i].in);
        else
            ok(got.p == in.p && got.n == in.n, "name \"%s\" is taken as it is", cases[i].in);
    }
    pt_arena_free(&a);
}

int main(void)
{
    test_selectors();
    test_limits();
    test_times();
    test_unescape_name();
    return done_testing();
}
