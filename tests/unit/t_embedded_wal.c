/*
 * The embedded store's points logs: replay order across log names and versions, a
 * damaged record skipped, a full disk under the log, and a close with index cells only.
 */
#include "embedded_helpers.h"

/* A copy of the records a store has logged. */
static char *read_log(const char *dir, size_t *n)
{
    char p[600];
    if (current_log(dir, p, sizeof(p)) != 0)
        return NULL;
    FILE *f = fopen(p, "rb");
    if (!f)
        return NULL;
    char *buf = malloc(1 << 20);
    *n = buf ? fread(buf, 1, 1 << 20, f) : 0;
    fclose(f);
    return buf;
}

/* The points log of a store that got the cells "row=value" (qualifier 1) in one batch. */
static char *log_of(const char *tmp, const char *name, const char *const *cells, size_t ncells,
                    size_t *n)
{
    pt_backend b;
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/%s", tmp, name);
    if (open_named(&b, tmp, name, name) != 0)
        return NULL;
    ct_batch bt = {0};
    for (size_t i = 0; i < ncells; i += 2)
        ct_add(&bt, PT_TABLE_POINTS, cells[i], 1, cells[i + 1]);
    char *log = ct_write(&b, &bt) == 0 ? read_log(dir, n) : NULL;
    pt_backend_close(&b);
    return log;
}

static int put_file(const char *dir, const char *name, const char *p, size_t n)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(p, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

/* A bit flipped in the first of five records of a log: open skips that record and
 * replays the four intact ones after it (each defines its own row), and counts the
 * damaged bytes, instead of dropping all five as a torn tail. */
static void test_embedded_replay_damage(const char *tmp)
{
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/replay-damage", tmp);
    pt_backend b;
    if (open_named(&b, tmp, "replay-damage", "embedded(replay damage)") != 0)
        return;
    static const char *const rows[] = {"d/1", "d/2", "d/3", "d/4", "d/5"};
    int rv = 0;
    for (int i = 0; i < 5 && rv == 0; i++) {
        ct_batch bt = {0};
        ct_add(&bt, PT_TABLE_POINTS, rows[i], 1, "v");
        rv = ct_write(&b, &bt);
    }
    size_t n = 0;
    char *log = rv == 0 ? read_log(dir, &n) : NULL;
    pt_backend_close(&b);
    ok(log && n > 100, "replay damage: five records logged (%zu bytes)", n);
    if (!log)
        return;
    /* Into a store that never had those cells (the first one flushed them at close). */
    log[26] ^= 0x10; /* in the first record's payload */
    snprintf(dir, sizeof(dir), "%s/replay-damage-2", tmp);
    int put = open_named(&b, tmp, "replay-damage-2", "embedded(replay damage): new store") == 0;
    if (put)
        pt_backend_close(&b);
    ok(put && log_files(dir) == 0 && put_file(dir, "points.7.wal", log, n) == 0,
       "replay damage: the log with a flipped bit in record 1 put in a new store");
    free(log);
    if (open_named(&b, tmp, "replay-damage-2", "embedded(replay damage): reopen") != 0)
        return;
    pt_row_range all[] = {CT_RANGE("d/", "d/\xff")};
    is_str(ct_show(&b, PT_TABLE_POINTS, all, 1),
           "d/2:00000001=v;d/3:00000001=v;d/4:00000001=v;d/5:00000001=v;",
           "replay damage: records 2 to 5 replayed, the damaged one skipped");
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    ok(st.wal_damaged_bytes > 0 && st.wal_damaged_bytes < n,
       "replay damage: the damaged bytes counted (%llu)",
       (unsigned long long)st.wal_damaged_bytes);
    pt_backend_close(&b);
}

/* ---- a full disk under the points log ---- */

/* The points log's write seam (wal.c): a disk with room_left bytes free takes what fits
 * of a record and then says ENOSPC, as write(2) does on a full file system. */
static size_t room_left;

static ssize_t room_write(int fd, const void *p, size_t n)
{
    if (room_left == 0) {
        errno = ENOSPC;
        return -1;
    }
    ssize_t w = write(fd, p, n < room_left ? n : room_left);
    if (w > 0)
        room_left -= (size_t)w;
    return w;
}

static void set_room(embedded *e, int full, size_t room)
{
    pthread_mutex_lock(&e->mu);
    e->w.write_fn = full ? room_write : NULL;
    room_left = room;
    pthread_mutex_unlock(&e->mu);
}

/* Whether the log file holds exactly the records the log counts (no partial record). */
static int log_whole(embedded *e)
{
    struct stat st;
    pthread_mutex_lock(&e->mu);
    int whole = fstat(e->w.fd, &st) == 0 && (uint64_t)st.st_size == e->w.size && e->w.size > 0;
    pthread_mutex_unlock(&e->mu);
    return whole;
}

/* open_named, with the store's directory in dir. */
static int open_dir(pt_backend *b, const char *tmp, const char *name, const char *label, char *dir,
                    size_t dirlen)
{
    snprintf(dir, dirlen, "%s/%s", tmp, name);
    return open_named(b, tmp, name, label);
}

/* The store's points ("n/") and index ("x/") cells, as "points | index". */
static const char *enospc_show(pt_backend *b)
{
    static char out[2048];
    pt_row_range p[] = {CT_RANGE("n/", "n0")}, x[] = {CT_RANGE("x/", "x0")};
    int len = snprintf(out, sizeof(out), "%s | ", ct_show(b, PT_TABLE_POINTS, p, 1));
    snprintf(out + len, sizeof(out) - (size_t)len, "%s", ct_show(b, PT_TABLE_INDEX, x, 1));
    return out;
}

/* A points log append that runs out of disk space (ENOSPC after part of the record):
 * the write fails with PT_ENOSPACE (503), the partial record is cut off and nothing of
 * the batch is acknowledged or visible; the store reports the full disk until its flush
 * thread sees space. Once writes get through, the same batch and one that uses the rows
 * it defined succeed, and every acknowledged cell reads back, from the head, from the
 * log replayed (pt_emb_reload_logs) and after a close and reopen. */
static void test_embedded_wal_enospc(const char *tmp)
{
    const char *L = "embedded(full disk under the log)";
    char dir[512];
    pt_backend b;
    if (open_dir(&b, tmp, "wal-enospc", L, dir, sizeof(dir)) != 0)
        return;
    embedded *e = b.state;
    ct_batch a = {0}, bb = {0}, c = {0};
    ct_add(&a, PT_TABLE_POINTS, "n/a", 1, "a1");
    ct_add(&a, PT_TABLE_POINTS, "n/a", 2, "a2");
    ct_add(&a, PT_TABLE_INDEX, "x/a", 1, "A");
    /* A new row (its definition is in the record) and a known one. */
    ct_add(&bb, PT_TABLE_POINTS, "n/a", 3, "b3");
    ct_add(&bb, PT_TABLE_POINTS, "n/b", 1, "b1");
    ct_add(&bb, PT_TABLE_INDEX, "x/b", 1, "B");
    /* Rows the batch after the refused one defined. */
    ct_add(&c, PT_TABLE_POINTS, "n/a", 4, "c4");
    ct_add(&c, PT_TABLE_POINTS, "n/b", 2, "c2");
    is(ct_write(&b, &a), 0, "%s: a batch acknowledged", L);
    const char *want_a = "n/a:00000001=a1;n/a:00000002=a2; | x/a:00000001=A;";

    set_room(e, 1, 7); /* less than a record header */
    int rv = ct_write(&b, &bb);
    is(rv, PT_ENOSPACE, "%s: a write that finds the disk full fails with PT_ENOSPACE", L);
    is(pt_error_http_status(rv), 503, "%s: ... answered 503", L);
    ok(room_left == 0 && log_whole(e), "%s: the part of the record that fit is cut off", L);
    is(ct_write(&b, &bb), PT_ENOSPACE, "%s: a retry on the full disk: PT_ENOSPACE again", L);
    char msg[256] = "";
    is(b.ops->health(b.state, msg, sizeof(msg)), PT_ENOSPACE, "%s: health says the disk is full",
       L);
    ok(strstr(msg, "no space left on the disk holding") && strstr(msg, dir),
       "%s: ... naming the disk (%s)", L, msg);
    is_str(enospc_show(&b), want_a, "%s: nothing of the refused batch is visible", L);

    set_room(e, 0, 0);
    is(ct_write(&b, &bb), 0, "%s: with space again, the batch is acknowledged", L);
    is(ct_write(&b, &c), 0, "%s: ... and one on the rows it defined", L);
    ok(log_whole(e), "%s: the log holds whole records", L);
    int healthy = 0;
    for (int i = 0; i < 1000 && !healthy; i++) { /* the flush thread looks each second */
        healthy = b.ops->health(b.state, msg, sizeof(msg)) == 0;
        if (!healthy)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    ok(healthy, "%s: health is good again once the flush thread sees space", L);
    const char *want = "n/a:00000001=a1;n/a:00000002=a2;n/a:00000003=b3;n/a:00000004=c4;"
                       "n/b:00000001=b1;n/b:00000002=c2; | x/a:00000001=A;x/b:00000001=B;";
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back", L);

    /* The log, the only place the points are: the head is dropped and the log replayed. */
    char err[256] = "";
    is(pt_emb_reload_logs(e, err, sizeof(err)), 0, "%s: the log replayed %s", L, err);
    pt_embedded_stats st;
    pt_embedded_get_stats(&b, &st);
    is(st.wal_damaged_bytes, (uint64_t)0, "%s: ... with no damaged bytes", L);
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back after the replay", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: no log left after a close", L);
    if (open_named(&b, tmp, "wal-enospc", L) != 0)
        return;
    is_str(enospc_show(&b), want, "%s: every acknowledged cell reads back after a reopen", L);
    pt_backend_close(&b);
}

/* A store whose log got index cells only (a new store's format row is such a batch) and
 * no points: a close drains them into RocksDB and leaves no log, as after points. */
static void test_embedded_index_only_close(const char *tmp)
{
    const char *L = "embedded(index cells only)";
    char dir[512];
    pt_backend b;
    if (open_dir(&b, tmp, "index-only", L, dir, sizeof(dir)) != 0)
        return;
    ct_batch bt = {0};
    ct_add(&bt, PT_TABLE_INDEX, "x/format", 1, "2");
    is(ct_write(&b, &bt), 0, "%s: a batch of index cells acknowledged", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: no log left after a close", L);
    if (open_named(&b, tmp, "index-only", L) != 0)
        return;
    pt_row_range x[] = {CT_RANGE("x/", "x0")};
    is_str(ct_show(&b, PT_TABLE_INDEX, x, 1), "x/format:00000001=2;",
           "%s: the index cell reads back after a reopen", L);
    pt_backend_close(&b);
    is(log_files(dir), 0, "%s: a close with nothing written leaves no log either", L);
}

/* Open replays the logs of older versions (the frozen one, then points.wal), then the
 * numbered logs in the order of their numbers (not of their names: 7 before 12); the
 * newest write of a cell wins, and every log is gone once its cells are in RocksDB. */
static void test_embedded_replay_order(const char *tmp)
{
    static const char *const frozen[] = {"o/a", "frozen", "o/b", "frozen", "o/c", "frozen",
                                          "o/d", "frozen"},
                             *old[] = {"o/b", "wal", "o/c", "wal", "o/d", "wal"},
                             *s7[] = {"o/c", "log7", "o/d", "log7"},
                             *s12[] = {"o/d", "log12"};
    size_t n[4];
    char *logs[4] = {log_of(tmp, "ro-1", frozen, 8, &n[0]), log_of(tmp, "ro-2", old, 6, &n[1]),
                     log_of(tmp, "ro-3", s7, 4, &n[2]), log_of(tmp, "ro-4", s12, 2, &n[3])};
    char dir[512];
    snprintf(dir, sizeof(dir), "%s/replay-order", tmp);
    pt_backend b;
    int made = logs[0] && logs[1] && logs[2] && logs[3] &&
               open_named(&b, tmp, "replay-order", "embedded(replay order)") == 0;
    if (made) {
        pt_backend_close(&b);
        made = log_files(dir) == 0 &&
               put_file(dir, "points.frozen.wal", logs[0], n[0]) == 0 &&
               put_file(dir, "points.wal", logs[1], n[1]) == 0 &&
               put_file(dir, "points.7.wal", logs[2], n[2]) == 0 &&
               put_file(dir, "points.12.wal", logs[3], n[3]) == 0;
    }
    ok(made, "embedded(replay order): logs of four stores put in place");
    if (made && open_named(&b, tmp, "replay-order", "embedded(replay order)") == 0) {
        pt_row_range all[] = {CT_RANGE("o/", "o0")};
        is_str(ct_show(&b, PT_TABLE_POINTS, all, 1),
               "o/a:00000001=frozen;o/b:00000001=wal;o/c:00000001=log7;o/d:00000001=log12;",
               "embedded(replay order): the newest write of each cell wins");
        char p[600], q[600];
        snprintf(p, sizeof(p), "%s/points.frozen.wal", dir);
        snprintf(q, sizeof(q), "%s/points.wal", dir);
        uint64_t *seqs;
        size_t nl = 0;
        int listed = pt_emb_wal_logs(dir, &seqs, &nl) == 0;
        ok(access(p, F_OK) != 0 && access(q, F_OK) != 0 && listed && nl == 2 &&
               seqs[0] == 13 && seqs[1] == 14,
           "embedded(replay order): the replayed logs are gone; records go to log 13");
        if (listed)
            free(seqs);
        pt_backend_close(&b);
    }
    for (int i = 0; i < 4; i++)
        free(logs[i]);
}

int main(void)
{
    static emb_test_fn *const tests[] = {test_embedded_replay_order, test_embedded_replay_damage,
                                         test_embedded_wal_enospc, test_embedded_index_only_close};
    return emb_main("emb-wal", tests, CT_N(tests));
}
