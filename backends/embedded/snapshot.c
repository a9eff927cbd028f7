/*
 * Snapshots of the embedded store (pt_backend_ops.snapshot): <path>/snapshots/<name>, or
 * a directory named by its path, a store of its own that promtable opens like any other.
 *
 * With the head, every shard is flushed first and the index head drained, so every cell
 * acknowledged before the call is in RocksDB; then RocksDB's checkpoint flushes its
 * memtables and hard-links the table files (a copy where links cannot be made) into a
 * consistent store. Writes go on meanwhile, into the head and its logs, which the
 * snapshot does not hold: it needs no log. RocksDB makes the checkpoint as <name>.tmp and
 * renames it once complete, so a crash mid-way never leaves a directory that looks whole.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "embedded_int.h"
#include "error.h"

/* A name for a file in a directory: no "." or "..", not empty. */
static int plain_name(const char *name)
{
    return name[0] && strcmp(name, ".") != 0 && strcmp(name, "..") != 0;
}

int pt_emb_snapshot(void *state, const char *name, int with_head, char *err, size_t errlen)
{
    embedded *e = state;
    if (e->sink) {
        snprintf(err, errlen, "a write-back store keeps its data in its sink backend; "
                              "snapshot that backend instead");
        return PT_EBADREQ;
    }
    int path = strchr(name, '/') != NULL;
    if (!path && !plain_name(name)) {
        snprintf(err, errlen, "snapshot name \"%s\" is not a plain file name", name);
        return PT_EBADREQ;
    }
    int rv = 0;
    if (with_head && (rv = pt_emb_flusher_sync(e)) == 0)
        rv = pt_emb_ihead_drain(&e->ix);
    if (rv != 0) {
        snprintf(err, errlen, "flushing the head for the snapshot failed: %s", pt_strerror(rv));
        return rv;
    }
    size_t n = strlen(e->w.dir) + strlen(name) + 32;
    char *dir = malloc(n);
    if (!dir)
        return PT_ENOMEM;
    snprintf(dir, n, "%s/snapshots", e->w.dir);
    if (!path && mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "cannot make %s: %s", dir, strerror(errno));
        rv = PT_EIO;
    }
    if (path)
        snprintf(dir, n, "%s", name);
    else
        snprintf(dir, n, "%s/snapshots/%s", e->w.dir, name);
    struct stat st;
    if (rv == 0 && stat(dir, &st) == 0) {
        snprintf(err, errlen, "%s exists already", dir);
        rv = PT_EBADREQ;
    }
    if (rv == 0 && (rv = pt_emb_rocks_enter(&e->r)) != 0)
        snprintf(err, errlen, "the store is not open: %s", pt_strerror(rv));
    if (rv == 0) {
        char *msg = NULL;
        rocksdb_checkpoint_t *cp = rocksdb_checkpoint_object_create(e->r.db, &msg);
        if (cp) {
            /* 0: RocksDB flushes its memtables first (the index family's writes). */
            rocksdb_checkpoint_create(cp, dir, 0, &msg);
            rocksdb_checkpoint_object_destroy(cp);
        }
        pt_emb_rocks_leave(&e->r);
        if (msg) {
            snprintf(err, errlen, "RocksDB checkpoint into %s failed: %s", dir, msg);
            rocksdb_free(msg);
            rv = PT_EIO;
        }
    }
    free(dir);
    return rv;
}
