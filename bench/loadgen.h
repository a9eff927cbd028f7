/*
 * loadgen's modules (loadgen.c has what the tool does and how to run it):
 *
 *     loadgen_model.c  small helpers; the series model (targets, label sets, values);
 *                      series churn (generations, rewritten labels)
 *     loadgen_body.c   request bodies: the pool, built before the run, 1.0 and 2.0
 *                      encodings, --check's decoding
 *     loadgen_http.c   the HTTP/1.1 client: URL, connections, one exchange
 *     loadgen_run.c    phases: worker threads, latency and CPU figures, the result line
 *     loadgen.c        options and main
 */
#ifndef PT_BENCH_LOADGEN_H
#define PT_BENCH_LOADGEN_H

#include <assert.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <http_parser.h>
#include <snappy-c.h>
#include <xxhash.h>

#include "bytes.h"
#include "decode.h"
#include "remote.pb-c.h"
#include "wire.h"

#ifndef PT_VERSION /* set by CMake */
#define PT_VERSION "dev"
#endif

#define MAX_LABELS 64
#define ERRBODY_MAX 1024
#define GEN_SUFFIX_MAX 24

typedef struct opts {
    const char *url;
    uint64_t series;
    uint64_t samples_per_request;
    uint64_t samples_per_entry; /* samples per TimeSeries entry; Prometheus sends 1 */
    uint64_t connections;
    double duration_s;          /* 0: use requests */
    uint64_t requests;          /* 0: use duration */
    double warmup_s;
    uint64_t labels;            /* labels per series, __name__ included (a floor) */
    uint64_t interval_ms;
    int64_t start_ms;           /* -1: now - 24 h, rounded down to the hour */
    uint64_t pool_mb;
    double timeout_s;
    long server_pid;            /* 0: none; else report its CPU time per phase */
    double churn_percent;       /* of --series replaced per churn step; 0: no churn */
    uint64_t churn_every_ms;    /* sample time between churn steps */
    double rate;                /* timed phase: requests/s over all connections; 0: closed loop */
    int retry_503;              /* send a body answered 503 again (as Prometheus does) */
    int check;
    int protocol;               /* remote write 1 (1.0) or 2 (2.0) */
    uint64_t tenants;           /* X-Scope-OrgID t0..t<n-1> by body; 0 = no header */
} opts;

/* Bump allocator for everything that lives as long as the process: label strings,
 * protobuf-c label structs. Never freed piecemeal. */
typedef struct bump {
    char *p;
    size_t left;
    void *chunks; /* each chunk starts with a pointer to the previous one */
} bump;

typedef struct series {
    /* The series' labels packed once by protobuf-c as a TimeSeries holding only
     * labels: a body splices it with the samples (see pack_body). */
    uint8_t *blob;
    size_t blob_len;
    /* The label churn renames, inside blob: its TimeSeries.labels field starts at
     * churn_at and is churn_len bytes long; its Label.name field starts at churn_name;
     * its value (Label's last field) is the last churn_vlen bytes of the field. */
    uint32_t churn_at, churn_len, churn_name, churn_vlen;
    unsigned char kind;
    uint32_t phase_ms;
    double base, step;
    uint64_t seed;
} series;

typedef struct model {
    series *s;
    uint64_t n;
    uint64_t total_labels;
    uint64_t max_blob;
    uint64_t targets;
    uint64_t churn_step; /* series replaced per churn step; 0: no churn */
    bump mem;
} model;

typedef struct body {
    uint8_t *p;
    size_t n;
} body;

typedef struct pool {
    body *b;
    uint64_t n;
    uint64_t entries_per_body;
    uint64_t samples_per_body;
    int64_t start_ms;
    /* fresh[b]: distinct series in bodies [0, b) (b <= n): the series a receiver has
     * seen once it got those bodies. */
    uint64_t *fresh;
    _Atomic uint64_t next;      /* next body to build */
    _Atomic uint64_t bytes, raw_bytes;
} pool;

typedef struct endpoint {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int family;
    char hostport[256];
    char path[1024];
} endpoint;

typedef struct conn {
    int fd;
    int used;  /* has carried a request: the peer may have closed it while idle */
    http_parser hp;
    int done;  /* final (non-1xx) response complete */
    int keep;  /* the response allows another request on this connection */
    size_t errlen;
    char errbody[ERRBODY_MAX + 1];
    char err[160]; /* transport or protocol failure */
    char buf[65536];
} conn;

/* ---- loadgen_model.c ---- */

/* --integers: sample values are whole numbers (set once, before any body is built). */
extern int lg_integer_values;

uint64_t lg_now_ns(void);
/* splitmix64's finaliser: cheap, stateless, good enough to derive values from indices. */
uint64_t lg_mix(uint64_t x);
const uint8_t *lg_get_varint(const uint8_t *p, uint64_t *v);
/* malloc that exits (status 2) when out of memory. */
void *lg_xmalloc(size_t n);
void lg_bump_free(bump *b);
/* The --series series of the model, in model order, their labels packed once. */
void lg_build_model(const opts *o, model *m);
/* The value of series s at scrape round `round`. */
double lg_sample_value(const series *s, uint64_t round);
/* Series churn: the generation of series i at pass `pass` over all series, its label
 * value suffix, and the packed labels with it (see loadgen_model.c). */
uint64_t lg_generation(const opts *o, const model *m, uint64_t i, uint64_t pass);
size_t lg_gen_suffix(uint64_t gen, char out[GEN_SUFFIX_MAX]);
size_t lg_labels_len(const series *s, size_t sl);
uint8_t *lg_put_labels(uint8_t *p, const series *s, const char *sfx, size_t sl);

/* ---- loadgen_body.c ---- */

/* Builds every body of the pool (on every CPU this process may use), sized by --pool-mb. */
void lg_build_pool(const opts *o, const model *m, pool *pl);
/* Distinct series in the first `bodies` bodies of the stream. */
uint64_t lg_series_sent(const pool *pl, uint64_t bodies);
/* Decodes body bi as a receiver would and checks it against the model (0: as it must be). */
int lg_check_body(const opts *o, const model *m, const pool *pl, uint64_t bi, int verbose);
void lg_free_pool(pool *pl);

/* ---- loadgen_http.c ---- */

int lg_parse_url(const char *url, endpoint *ep);
void lg_conn_close(conn *c);
int lg_conn_open(conn *c, const endpoint *ep, double timeout_s);
/* One request/response exchange on an open connection. Returns the HTTP status, or -1
 * with c->err set; *got tells whether any response byte arrived. */
int lg_exchange(conn *c, const char *hdr, size_t hdrlen, const body *b, int *got);

/* ---- loadgen_run.c ---- */

/* Sends the pool: an optional warm-up, then the timed phase. Returns the exit status. */
int lg_send_load(const opts *o, const endpoint *ep, const model *m, const pool *pl);

#endif
