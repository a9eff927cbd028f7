/* A tiny TAP producer for the unit tests: ok(), is(), skip(), diag(), done_testing(). */
#ifndef PT_TAP_H
#define PT_TAP_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int tap_n, tap_failed;

__attribute__((unused)) static int tap_ok(int cond, const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    tap_n++;
    printf("%sok %d - ", cond ? "" : "not ", tap_n);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    if (!cond) {
        tap_failed++;
        printf("#   Failed at %s line %d\n", file, line);
    }
    fflush(stdout);
    return cond;
}

#define ok(cond, ...) tap_ok(!!(cond), __FILE__, __LINE__, __VA_ARGS__)
#define is(got, want, ...)                                                                  \
    do {                                                                                    \
        long long g_ = (long long)(got), w_ = (long long)(want);                            \
        if (!ok(g_ == w_, __VA_ARGS__))                                                     \
            printf("#   got: %lld\n#   expected: %lld\n", g_, w_);                          \
    } while (0)
#define is_str(got, want, ...)                                                              \
    do {                                                                                    \
        const char *g_ = (got), *w_ = (want);                                               \
        if (!ok(g_ && w_ && strcmp(g_, w_) == 0, __VA_ARGS__))                              \
            printf("#   got: '%s'\n#   expected: '%s'\n", g_ ? g_ : "(null)", w_);           \
    } while (0)

/* Counts n tests as passed without running them, saying why (TAP's SKIP directive). */
__attribute__((unused)) static void skip(int n, const char *why)
{
    for (int i = 0; i < n; i++)
        printf("ok %d # skip %s\n", ++tap_n, why);
    fflush(stdout);
}

/* Stops the test program: a broken setup, not a failed check. */
#define BAIL_OUT(...)                                                                       \
    do {                                                                                    \
        printf("Bail out! ");                                                               \
        printf(__VA_ARGS__);                                                                \
        printf("\n");                                                                       \
        fflush(stdout);                                                                     \
        exit(1);                                                                            \
    } while (0)

__attribute__((unused)) static void diag(const char *fmt, ...)
{
    va_list ap;
    printf("# ");
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
}

__attribute__((unused)) static int done_testing(void)
{
    printf("1..%d\n", tap_n);
    return tap_failed ? 1 : 0;
}

#endif
