/* Snapshots of the embedded store (snapshot.c): a snapshot opens as a store holding
 * exactly what was acknowledged before it (the head's cells too, unless without the
 * head), later writes stay out of it, writes going on meanwhile lose nothing, and bad or
 * taken names are refused. Stores are compared cell by cell (conformance.h's digests)
 * with reference stores written the same cells. */
#include <stdatomic.h>

#include "embedded_helpers.h"

enum { ROWS = 50, CELLS = 40, SETS = 3, STEP = 60000 };

static char rows[ROWS][16], irows[SETS][ROWS][16];
static char vals[SETS][ROWS][CELLS][9];

/* Set s: CELLS cells in each data row (qualifiers of its own) and an index row per row. */
static int write_set(pt_backend *b, int s)
{
    int fails = 0;
    ct_batch bt = {0};
    for (int r = 0; r < ROWS; r++) {
        for (int c = 0; c < CELLS; c++) {
            if (bt.n == CT_BATCH_MAX) {
                fails += ct_write(b, &bt) != 0;
                bt.n = 0;
            }
            ct_add(&bt, PT_TABLE_POINTS, rows[r], (uint32_t)(s * CELLS + c) * STEP, vals[s][r][c]);
        }
        if (bt.n == CT_BATCH_MAX) {
            fails += ct_write(b, &bt) != 0;
            bt.n = 0;
        }
        ct_add(&bt, PT_TABLE_INDEX, irows[s][r], 7, vals[s][r][0]);
    }
    if (bt.n)
        fails += ct_write(b, &bt) != 0;
    return fails;
}

/* Both tables' digests of the store in dir/name. */
static int digests(const char *dir, const char *name, digest out[2])
{
    pt_backend b;
    if (open_named(&b, dir, name, "snapshot") != 0)
        return -1;
    out[0] = table_digest(&b, PT_TABLE_POINTS);
    out[1] = table_digest(&b, PT_TABLE_INDEX);
    pt_backend_close(&b);
    return 0;
}

/* A reference store dir/name holding sets [0, n). */
static int reference(const char *dir, const char *name, int n, digest out[2])
{
    pt_backend b;
    if (open_named(&b, dir, name, "snapshot reference") != 0)
        return -1;
    int fails = 0;
    for (int s = 0; s < n; s++)
        fails += write_set(&b, s);
    pt_backend_close(&b);
    return fails ? -1 : digests(dir, name, out);
}

static int same(const digest a[2], const digest b[2])
{
    return a[0].cells == b[0].cells && a[0].h == b[0].h && a[1].cells == b[1].cells &&
           a[1].h == b[1].h;
}

static int snap(pt_backend *b, const char *name, int with_head, char *err, size_t errlen)
{
    return b->ops->snapshot(b->state, name, with_head, err, errlen);
}

static void snapshots(const char *dir)
{
    digest ref1[2], ref2[2], got[2];
    if (reference(dir, "ref1", 1, ref1) != 0 || reference(dir, "ref2", 2, ref2) != 0) {
        ok(0, "snapshot: reference stores");
        return;
    }
    pt_backend b;
    if (open_named(&b, dir, "store", "snapshot") != 0)
        return;
    char err[512] = "";
    ok(write_set(&b, 0) == 0, "snapshot: set 0 written (in the head)");
    int rv = snap(&b, "one", 1, err, sizeof(err));
    ok(rv == 0, "snapshot: made with the head %s", err);
    ok(write_set(&b, 1) == 0, "snapshot: set 1 written after it");
    is(snap(&b, "one", 1, err, sizeof(err)), PT_EBADREQ, "snapshot: a name taken: %s", err);
    is(snap(&b, "..", 1, err, sizeof(err)), PT_EBADREQ, "snapshot: not a plain name: %s", err);
    char path[600];
    snprintf(path, sizeof(path), "%s/elsewhere", dir);
    err[0] = '\0';
    rv = snap(&b, path, 1, err, sizeof(err));
    ok(rv == 0, "snapshot: made in a directory named by its path %s", err);
    pt_backend_close(&b);
    rv = digests(dir, "elsewhere", got);
    ok(rv == 0 && same(got, ref2), "snapshot: ... holding sets 0 and 1");
    rv = digests(dir, "store/snapshots/one", got);
    ok(rv == 0 && same(got, ref1),
       "snapshot: opens as a store of set 0 exactly (%zu points cells, %zu index cells)",
       rv == 0 ? got[0].cells : 0, rv == 0 ? got[1].cells : 0);
    rv = digests(dir, "store", got);
    ok(rv == 0 && same(got, ref2), "snapshot: the store itself holds sets 0 and 1");

    /* Without the head: what RocksDB holds (sets 0 and 1, flushed at the close), not
     * set 2, which the head holds. */
    if (open_named(&b, dir, "store", "snapshot") != 0)
        return;
    ok(write_set(&b, 2) == 0, "snapshot: set 2 written (in the head)");
    err[0] = '\0';
    rv = snap(&b, "two", 0, err, sizeof(err));
    pt_backend_close(&b);
    ok(rv == 0 && digests(dir, "store/snapshots/two", got) == 0 && same(got, ref2),
       "snapshot: without the head, sets 0 and 1 only %s", err);
}

/* ---- writes going on ---- */

enum { BATCHES = 4000 };

typedef struct writer {
    pt_backend *b;
    atomic_int acked; /* batches acknowledged */
    atomic_int stop;
    int fails;
} writer;

static char wrows[BATCHES][16];

static void *writer_main(void *arg)
{
    writer *w = arg;
    for (int i = 0; i < BATCHES && !atomic_load(&w->stop); i++) {
        ct_batch bt = {0};
        for (int c = 0; c < 8; c++)
            ct_add(&bt, PT_TABLE_POINTS, wrows[i], (uint32_t)c * STEP, "abcdefgh");
        if (ct_write(w->b, &bt) != 0)
            w->fails++;
        else
            atomic_store(&w->acked, i + 1);
    }
    return NULL;
}

typedef struct rowset {
    char seen[BATCHES];
    size_t cells;
} rowset;

static int note_row(void *ud, pt_slice row, pt_slice qual, pt_slice value)
{
    (void)qual, (void)value;
    rowset *r = ud;
    int i;
    if (row.n == 8 && sscanf((const char *)row.p + 2, "%4d", &i) == 1 && i >= 0 && i < BATCHES)
        r->seen[i] = 1;
    r->cells++;
    return 0;
}

static void writes_go_on(const char *dir)
{
    for (int i = 0; i < BATCHES; i++)
        snprintf(wrows[i], sizeof(wrows[i]), "w/%04d/x", i);
    pt_backend b;
    if (open_named(&b, dir, "busy", "snapshot") != 0)
        return;
    writer w = {.b = &b};
    pthread_t th;
    if (pthread_create(&th, NULL, writer_main, &w) != 0) {
        ok(0, "snapshot: writer thread");
        pt_backend_close(&b);
        return;
    }
    while (atomic_load(&w.acked) < BATCHES / 20)
        usleep(1000);
    int before = atomic_load(&w.acked);
    char err[512] = "";
    int rv = snap(&b, "mid", 1, err, sizeof(err));
    int after = atomic_load(&w.acked);
    pthread_join(th, NULL);
    pt_backend_close(&b);
    ok(rv == 0 && w.fails == 0, "snapshot: made while a writer writes %s", err);
    pt_backend s;
    if (open_named(&s, dir, "busy/snapshots/mid", "snapshot") != 0)
        return;
    rowset r = {{0}, 0};
    pt_row_range all = {{0}, {0}};
    pt_scan sc = {.table = PT_TABLE_POINTS, .ranges = &all, .nranges = 1};
    rv = pt_backend_scan(&s, &sc, note_row, &r);
    pt_backend_close(&s);
    int missing = 0, whole = 1;
    for (int i = 0; i < before; i++)
        missing += !r.seen[i];
    whole = r.cells % 8 == 0;
    ok(rv == 0 && missing == 0 && whole,
       "snapshot: every batch acknowledged before it is in it (%d; %zu cells in all; %d "
       "acknowledged when it returned)",
       before, r.cells, after);
}

int main(void)
{
    for (int r = 0; r < ROWS; r++) {
        snprintf(rows[r], sizeof(rows[r]), "sn/%03d", r);
        for (int s = 0; s < SETS; s++) {
            snprintf(irows[s][r], sizeof(irows[s][r]), "ix/%d/%03d", s, r);
            for (int c = 0; c < CELLS; c++)
                snprintf(vals[s][r][c], sizeof(vals[s][r][c]), "%d%03d%04d", s, r, c);
        }
    }
    static emb_test_fn *const tests[] = {snapshots, writes_go_on};
    return emb_main("snapshot", tests, sizeof(tests) / sizeof(tests[0]));
}
