/* ptdamage: damages an embedded store on purpose, for the tests of `promtable check`.
 * usage: ptdamage DIR delete-points PREFIX   every chunk of the first points row whose key
 *                                            starts with PREFIX
 *        ptdamage DIR delete-index PREFIX    the first index cell whose row starts with PREFIX
 *        ptdamage DIR corrupt-chunk PREFIX   rewrites the first chunk of such a points row
 *                                            with its sample count one higher
 *        ptdamage DIR points-sst             prints the points table's files, one a line
 * Prints the row it changed. Exits 1 when nothing matched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embedded.h"
#include "embedded_int.h"

static int starts(const char *k, size_t kn, const char *prefix)
{
    size_t n = strlen(prefix);
    return kn >= n && memcmp(k, prefix, n) == 0;
}

/* The row part of an entry's key (before the 0x00 that starts its qualifier). */
static size_t row_len(const char *k, size_t kn)
{
    const char *z = memchr(k, 0, kn);
    return z ? (size_t)(z - k) : kn;
}

static int damage(embedded *e, const char *what, const char *prefix)
{
    int cf = strcmp(what, "delete-index") == 0 ? CF_INDEX : CF_POINTS;
    rocksdb_readoptions_t *ro = rocksdb_readoptions_create();
    rocksdb_readoptions_set_total_order_seek(ro, 1);
    rocksdb_writeoptions_t *wo = rocksdb_writeoptions_create();
    rocksdb_writeoptions_set_sync(wo, 1);
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(e->r.db, ro, e->r.cf[cf]);
    char *row = NULL, *err = NULL;
    size_t rn = 0, changed = 0;
    for (rocksdb_iter_seek(it, prefix, strlen(prefix)); rocksdb_iter_valid(it) && !err;
         rocksdb_iter_next(it)) {
        size_t kn, vn;
        const char *k = rocksdb_iter_key(it, &kn);
        if (!starts(k, kn, prefix) || (row && (row_len(k, kn) != rn || memcmp(k, row, rn))))
            break;
        if (!row) {
            rn = row_len(k, kn);
            row = malloc(rn + 1);
            memcpy(row, k, rn);
            row[rn] = '\0';
        }
        if (strcmp(what, "corrupt-chunk") == 0) {
            const char *v = rocksdb_iter_value(it, &vn);
            char *bad = malloc(vn);
            memcpy(bad, v, vn);
            if (vn >= 5)
                bad[4] = (char)(bad[4] + 1); /* the low byte of the big-endian count */
            rocksdb_put_cf(e->r.db, wo, e->r.cf[cf], k, kn, bad, vn, &err);
            free(bad);
            changed++;
            break;
        }
        rocksdb_delete_cf(e->r.db, wo, e->r.cf[cf], k, kn, &err);
        changed++;
        if (cf == CF_INDEX)
            break;
    }
    rocksdb_iter_destroy(it);
    rocksdb_readoptions_destroy(ro);
    rocksdb_writeoptions_destroy(wo);
    if (err) {
        fprintf(stderr, "ptdamage: %s\n", err);
        free(err);
        free(row);
        return 1;
    }
    if (changed)
        printf("%s\n", row);
    free(row);
    return changed ? 0 : 1;
}

static int points_files(embedded *e)
{
    const rocksdb_livefiles_t *lf = rocksdb_livefiles(e->r.db);
    int n = rocksdb_livefiles_count(lf), found = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(rocksdb_livefiles_column_family_name(lf, i), "points.v2") != 0)
            continue;
        printf("%s\n", rocksdb_livefiles_name(lf, i));
        found = 1;
    }
    rocksdb_livefiles_destroy(lf);
    return found ? 0 : 1;
}

int main(int argc, char **argv)
{
    if (argc < 3 || (strcmp(argv[2], "points-sst") != 0 && argc != 4)) {
        fprintf(stderr, "usage: ptdamage DIR delete-points|delete-index|corrupt-chunk PREFIX\n"
                        "       ptdamage DIR points-sst\n");
        return 2;
    }
    pt_embedded_conf ec = {.path = argv[1]};
    pt_backend_config c = {.own = &ec};
    pt_backend be;
    char err[512];
    if (pt_backend_open(&be, &pt_backend_embedded, &c, err, sizeof(err)) != 0) {
        fprintf(stderr, "ptdamage: %s\n", err);
        return 2;
    }
    int rv = strcmp(argv[2], "points-sst") == 0 ? points_files(be.state)
                                                : damage(be.state, argv[2], argv[3]);
    pt_backend_close(&be);
    return rv;
}
