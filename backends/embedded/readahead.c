/*
 * Read-ahead for scans of many rows. A read of many series is one scan of many one-row
 * ranges, and each row is a seek: on a cold store every seek waits for the disk (an index
 * partition, a filter partition and a data block, in each level holding the row), one
 * after the other, while the disk could serve many at once. Once the scan's own thread
 * has had to wait for the disk, a few threads seek the rows ahead of it on iterators of
 * their own: their reads overlap, and the scan finds the blocks in the block cache.
 *
 * A warm scan never starts it, and it changes no answer: the threads only read, and what
 * they leave behind is blocks in the cache. They stay at most RA_WINDOW rows ahead of
 * the scan, so what they bring in is still cached when the scan gets there.
 *
 * A read is several scans one after the other (series rows, then the data rows of each
 * base period). Once one of them has waited for the disk (pt_scan.cold), the next ones
 * are read ahead of from their second row on, while the scan's own thread waits for the
 * first, instead of finding out on that row.
 */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "embedded_int.h"

enum {
    RA_MIN_ROWS = 8, /* fewer rows are not worth waking anybody */
    RA_WINDOW = 64,  /* rows ahead of the scan that the threads may be reading */
    RA_CHECK = 16,   /* a scan warm so far asks whether it waited every this many rows */
};

/* Blocks this thread had to read from the disk so far (page-cache hits do not count). */
static long blocks_read(void)
{
#ifdef RUSAGE_THREAD
    struct rusage ru;
    if (getrusage(RUSAGE_THREAD, &ru) == 0)
        return ru.ru_inblock;
#endif
    return 0;
}

/* Reads what the scan's seek onto range i will need: for one row, the block of the chunk
 * holding the window's start, sought as the scan seeks it (points), or of the row's first
 * cell in the window (index); for a range of rows, the block of its first key. ro[1]:
 * one-row options, ro[0]: total order, as the scan's iterators. */
static void read_row(rocks *r, rocksdb_readoptions_t *const ro[2], ra_job *j, size_t i,
                     pt_buf *key)
{
    const pt_scan *s = j->s;
    const pt_row_range *range = &s->ranges[i];
    int one_row = pt_emb_rocks_one_row(range);
    pt_slice row = range->start;
    rocksdb_iterator_t *it = rocksdb_create_iterator_cf(r->db, ro[one_row], r->cf[j->cf]);
    if (!it)
        return;
    if (one_row && j->cf == CF_POINTS) {
        int young = 0;
        pt_emb_seek_chunks(it, key, row, s->qual_start,
                           atomic_load_explicit(&j->span, memory_order_relaxed), &young);
    } else if ((one_row ? pt_emb_rocks_key(key, row.p, row.n, 0, s->qual_start.p,
                                           s->qual_start.n)
                        : pt_emb_rocks_row_bound(key, row)) == 0) {
        rocksdb_iter_seek(it, (const char *)key->p, key->len);
    }
    rocksdb_iter_destroy(it);
}

/* The next row of a job that may be read now, taken (j->workers counts the taker). */
static ra_job *take_locked(ra_pool *ra, size_t *row)
{
    for (ra_job *j = ra->jobs; j; j = j->next_job) {
        if (j->next < j->limit) {
            *row = j->next++;
            j->workers++;
            return j;
        }
    }
    return NULL;
}

static void *ra_main(void *arg)
{
    ra_pool *ra = arg;
    /* As the scan's iterators, so the same filter partitions come in. */
    rocksdb_readoptions_t *ro[2] = {rocksdb_readoptions_create(), rocksdb_readoptions_create()};
    int ok = ro[0] && ro[1];
    if (ok) {
        rocksdb_readoptions_set_total_order_seek(ro[0], 1);
        rocksdb_readoptions_set_prefix_same_as_start(ro[1], 1);
    }
    pt_buf key;
    pt_buf_init(&key, 0);
    pthread_mutex_lock(&ra->mu);
    while (!ra->stop) {
        size_t i;
        ra_job *j = ok ? take_locked(ra, &i) : NULL;
        if (!j) {
            pthread_cond_wait(&ra->work, &ra->mu);
            continue;
        }
        pthread_mutex_unlock(&ra->mu);
        read_row(ra->r, ro, j, i, &key);
        pthread_mutex_lock(&ra->mu);
        ra->rows++;
        if (--j->workers == 0 && j->ending)
            pthread_cond_broadcast(&ra->left);
    }
    pthread_mutex_unlock(&ra->mu);
    pt_buf_free(&key);
    for (int k = 0; k < 2; k++)
        if (ro[k])
            rocksdb_readoptions_destroy(ro[k]);
    return NULL;
}

int pt_emb_readahead_start(ra_pool *ra, rocks *r, unsigned threads)
{
    memset(ra, 0, sizeof(*ra));
    ra->r = r;
    if (threads == 0)
        return 0;
    if (pthread_mutex_init(&ra->mu, NULL) != 0)
        return PT_ENOMEM;
    if (pthread_cond_init(&ra->work, NULL) != 0) {
        pthread_mutex_destroy(&ra->mu);
        return PT_ENOMEM;
    }
    if (pthread_cond_init(&ra->left, NULL) != 0) {
        pthread_cond_destroy(&ra->work);
        pthread_mutex_destroy(&ra->mu);
        return PT_ENOMEM;
    }
    ra->init = 1;
    if (!(ra->threads = calloc(threads, sizeof(*ra->threads))))
        return PT_ENOMEM;
    for (; ra->nthreads < threads; ra->nthreads++)
        if (pthread_create(&ra->threads[ra->nthreads], NULL, ra_main, ra) != 0)
            return PT_ENOMEM;
    return 0;
}

void pt_emb_readahead_stop(ra_pool *ra)
{
    if (!ra->init)
        return;
    pthread_mutex_lock(&ra->mu);
    ra->stop = 1;
    pthread_cond_broadcast(&ra->work);
    pthread_mutex_unlock(&ra->mu);
    for (unsigned i = 0; i < ra->nthreads; i++)
        pthread_join(ra->threads[i], NULL);
    free(ra->threads);
    pthread_cond_destroy(&ra->left);
    pthread_cond_destroy(&ra->work);
    pthread_mutex_destroy(&ra->mu);
    memset(ra, 0, sizeof(*ra));
}

/* Puts j on the pool's list, the threads to read its rows from next on. Under ra->mu. */
static void list_locked(ra_pool *ra, ra_job *j, size_t next)
{
    j->next = next;
    j->next_job = ra->jobs;
    ra->jobs = j;
    j->listed = 1;
    ra->scans++;
}

/* Lets the threads read up to RA_WINDOW rows past the done ones. Under ra->mu. */
static void window_locked(ra_pool *ra, ra_job *j, size_t done)
{
    size_t limit = done + RA_WINDOW < j->s->nranges ? done + RA_WINDOW : j->s->nranges;
    if (j->next < done)
        j->next = done; /* the scan passed them: they are read already */
    if (limit > j->limit) {
        j->limit = limit;
        if (j->next < limit)
            pthread_cond_broadcast(&ra->work);
    }
}

void pt_emb_readahead_begin(ra_pool *ra, ra_job *j, int cf, const pt_scan *s, uint32_t span)
{
    memset(j, 0, sizeof(*j));
    atomic_init(&j->span, span);
    if (!ra || !ra->nthreads || s->nranges < RA_MIN_ROWS)
        return;
    j->ra = ra;
    j->cf = cf;
    j->s = s;
    j->inblock = blocks_read();
    if (s->cold && *s->cold) {
        pthread_mutex_lock(&ra->mu);
        list_locked(ra, j, 1); /* the first row is the scan's own */
        window_locked(ra, j, 0);
        pthread_mutex_unlock(&ra->mu);
    }
}

void pt_emb_readahead_at(ra_job *j, size_t done)
{
    ra_pool *ra = j->ra;
    if (!ra)
        return;
    if (!j->listed) {
        /* Asking costs about 0.4 us: every row at first, then every RA_CHECK-th. */
        if ((done > RA_CHECK && done % RA_CHECK != 0) || blocks_read() == j->inblock)
            return; /* warm so far */
        pthread_mutex_lock(&ra->mu);
        list_locked(ra, j, done);
    } else {
        pthread_mutex_lock(&ra->mu);
    }
    window_locked(ra, j, done);
    pthread_mutex_unlock(&ra->mu);
}

void pt_emb_readahead_end(ra_job *j)
{
    ra_pool *ra = j->ra;
    if (!ra)
        return;
    if (!j->listed)
        return;
    if (j->s->cold)
        *j->s->cold = 1;
    pthread_mutex_lock(&ra->mu);
    for (ra_job **p = &ra->jobs; *p; p = &(*p)->next_job) {
        if (*p == j) {
            *p = j->next_job;
            break;
        }
    }
    j->ending = 1;
    while (j->workers > 0)
        pthread_cond_wait(&ra->left, &ra->mu);
    pthread_mutex_unlock(&ra->mu);
}

void pt_emb_readahead_stats(ra_pool *ra, uint64_t *scans, uint64_t *rows)
{
    *scans = *rows = 0;
    if (!ra->init)
        return;
    pthread_mutex_lock(&ra->mu);
    *scans = ra->scans;
    *rows = ra->rows;
    pthread_mutex_unlock(&ra->mu);
}
