/* What the embedded store's test programs share (t_backend_conformance.c and
 * t_embedded_*.c): temp directories, opening a store, cell counts, the points logs on
 * disk, and a fixed sequence of random numbers. */
#ifndef PT_TEST_EMBEDDED_HELPERS_H
#define PT_TEST_EMBEDDED_HELPERS_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tap.h"
#include "conformance.h"
#include "embedded.h"
#include "embedded_int.h"
#include "error.h"

extern const pt_backend_ops pt_backend_embedded;

static inline int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static inline void rm_rf(const char *dir)
{
    if (nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS) != 0)
        diag("could not remove %s", dir);
}

static inline int open_embedded(pt_backend *b, const char *path, char *err, size_t errlen)
{
    pt_embedded_conf ec = {.path = (char *)path};
    pt_backend_config cfg = {.own = &ec};
    return pt_backend_open(b, &pt_backend_embedded, &cfg, err, errlen);
}

/* Opens an embedded store with settings ec; says why in a diagnostic when it fails. */
static inline int open_conf(pt_backend *b, pt_embedded_conf ec)
{
    char err[256] = "";
    pt_backend_config cfg = {.own = &ec};
    int rv = pt_backend_open(b, &pt_backend_embedded, &cfg, err, sizeof(err));
    if (rv != 0)
        diag("open %s: %s", ec.path, err);
    return rv;
}

/* Opens an embedded store in tmp/name for a test of its own; a failure is a failed test. */
static inline int open_named(pt_backend *b, const char *tmp, const char *name, const char *label)
{
    char path[512], err[256] = "";
    snprintf(path, sizeof(path), "%s/%s", tmp, name);
    if (open_embedded(b, path, err, sizeof(err)) == 0)
        return 0;
    ok(0, "%s: open: %s", label, err);
    return -1;
}

/* A scan callback counting cells into *(size_t *)ud. */
static inline int count_cell(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)row;
    (void)qual;
    (void)value;
    ++*(size_t *)ud;
    return 0;
}

/* Files in dir named points.<digits>.wal (points logs). */
static inline int log_files(const char *dir)
{
    uint64_t *seqs;
    size_t n;
    if (pt_emb_wal_logs(dir, &seqs, &n) != 0)
        return -1;
    free(seqs);
    return (int)n;
}

/* The path of the log with records that is numbered highest, in p (a store makes the log
 * after its current one ahead of time, empty). */
static inline int current_log(const char *dir, char *p, size_t n)
{
    uint64_t *seqs;
    size_t nl;
    if (pt_emb_wal_logs(dir, &seqs, &nl) != 0)
        return -1;
    int rv = -1;
    for (size_t i = nl; i-- > 0 && rv != 0;) {
        struct stat st;
        snprintf(p, n, "%s/points.%llu.wal", dir, (unsigned long long)seqs[i]);
        if (stat(p, &st) == 0 && st.st_size > 0)
            rv = 0;
    }
    free(seqs);
    return rv;
}

/* xorshift64: the same numbers, below n, on every run. */
static uint64_t rnd_state = 88172645463325252ull;

static inline uint32_t rnd(uint32_t n)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 7;
    rnd_state ^= rnd_state << 17;
    return (uint32_t)(rnd_state % n);
}

/* A new temp directory for a program's stores in t ("/tmp/pt-...-XXXXXX"); a failure is a
 * failed test. */
static inline int emb_tmpdir(char *t)
{
    if (mkdtemp(t))
        return 0;
    ok(0, "mkdtemp %s", t);
    return -1;
}

typedef void emb_test_fn(const char *dir);

/* A test program's main: each of the n tests in turn over one fresh directory
 * /tmp/pt-<name>-XXXXXX, removed at the end; the TAP result. */
static inline int emb_main(const char *name, emb_test_fn *const *tests, size_t n)
{
    char t[64];
    snprintf(t, sizeof(t), "/tmp/pt-%s-XXXXXX", name);
    if (emb_tmpdir(t) != 0)
        return done_testing();
    for (size_t i = 0; i < n; i++)
        tests[i](t);
    rm_rf(t);
    return done_testing();
}

#endif
