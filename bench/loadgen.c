/*
 * loadgen: a Prometheus remote_write 1.0 load generator for the ingest benchmark.
 *
 * It models what a Prometheus server scraping node_exporter and kubelet/cAdvisor targets
 * puts on the wire (reference §1.7): realistic, sorted label sets from ~60 metric names,
 * one sample per TimeSeries entry by default, every series scraped every 15 s with a
 * per-target phase, batches of 2000 samples.
 *
 * Every request body is built (protobuf, snappy block compression) before the timed
 * phase, so the generator's own CPU never limits the figure; runs are reproducible: the
 * same options give the same bodies, except that timestamps start from the current day. During a phase each
 * of C threads owns one keep-alive HTTP/1.1 connection, takes the next body of one shared
 * sequence (so warm-up and timed phase continue the same stream of timestamps) and
 * measures latency from the first byte sent to the last byte of the response.
 *
 * Series churn (--churn-percent P --churn-every-ms M) models pods being replaced, as a
 * Kubernetes rollout or autoscaling does: the active set stays --series series, but at
 * every M ms of sample time (the generator's own timestamps, which advance one scrape
 * interval per pass over the series, much faster than wall time) the next P % of the
 * series in model order, round robin, are replaced by new ones: their `pod` label (or
 * `instance`, when a series has no `pod`) gets a generation suffix "-g<n>". Consecutive
 * series belong to one target, so pods are mostly replaced whole. The distinct series
 * a receiver must store grow with every step while the active count stays constant.
 * Churn changes no body's size much and adds no memory beyond one counter per body, but
 * a churn run must not outrun the pool: a run that sends the pool again re-sends old
 * series and old timestamps, so size --pool-mb for warm-up + timed phase at the
 * expected rate (the startup line says how much sample time and how many churn steps
 * the pool holds). Without the churn options the bodies are byte for byte those of a
 * build without churn support.
 *
 * Output: progress on stderr; one "result:" line of key=value pairs on stdout, which
 * bench/run.sh parses. Exit status 0 when every request got a 2xx, 1 when some failed,
 * 2 on bad usage or setup failure.
 */
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

/* ------------------------------------------------------------------------------------ */
/* Options                                                                              */

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

static void usage(FILE *f)
{
    static const char text[] =
        "usage: loadgen [options]\n"
        "  --url URL                remote_write endpoint\n"
        "                           (default http://127.0.0.1:9201/api/v1/write)\n"
        "  --series N               distinct series (default 100000)\n"
        "  --samples-per-request N  samples per request (default 2000)\n"
        "  --samples-per-series N   samples per TimeSeries entry: consecutive scrapes of\n"
        "                           one series (default 1, as Prometheus sends)\n"
        "  --connections N          concurrent keep-alive connections (default 8)\n"
        "  --duration S             timed phase length in seconds (default 30)\n"
        "  --requests N             timed phase length in requests instead\n"
        "  --warmup S               untimed warm-up before the timed phase; when > 0 it\n"
        "                           also covers every series once (default 0)\n"
        "  --labels N               labels per series incl. __name__ (default 10); a floor:\n"
        "                           a series keeps the labels that make it unique\n"
        "  --interval-ms N          scrape interval (default 15000)\n"
        "  --start-ms T             first scrape, ms since the epoch\n"
        "                           (default: now - 24h, rounded down to the hour)\n"
        "  --pool-mb N              memory for pre-built bodies (default 1024); a run that\n"
        "                           needs more sends the pool again from the start\n"
        "  --timeout S              per-request socket timeout (default 60)\n"
        "  --server-pid PID         also report the CPU time that process used per phase\n"
        "  --churn-percent P        series churn: replace P %% of the series (their pod\n"
        "                           label gets a new generation) at every churn step\n"
        "  --churn-every-ms M       sample time between churn steps (needed with\n"
        "                           --churn-percent)\n"
        "  --rate R                 open loop in the timed phase: start request i at\n"
        "                           i / R s (over all connections); default 0 = closed loop\n"
        "  --integers               every value a whole number (counters of events,\n"
        "                           bytes), instead of two decimals\n"
        "  --retry-503              a body answered 503 is sent again, on the same\n"
        "                           connection, at its next turn (Prometheus retries 5xx)\n"
        "  --protocol 1|2           remote write 1.0 (default) or 2.0 (symbol table, labels\n"
        "                           as refs; Content-Type ...;proto=io.prometheus.write.v2.Request)\n"
        "  --tenants N              send each body as one of N tenants (X-Scope-OrgID: t0 ..;\n"
        "                           a body keeps its tenant; default 0 = no header)\n"
        "  --check                  build the bodies, decode and verify some, send nothing\n";
    fputs(text, f);
}

/* --integers: sample values are whole numbers (set once, before any body is built). */
static int integer_values;

static int parse_u64(const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || s[0] == '-' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_secs(const char *s, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= 0) || v > 1e7)
        return -1;
    *out = v;
    return 0;
}

static int parse_opts(int argc, char **argv, opts *o)
{
    enum {
        O_URL = 1,
        O_SERIES,
        O_SPR,
        O_SPS,
        O_CONN,
        O_DUR,
        O_REQ,
        O_WARM,
        O_LABELS,
        O_INTERVAL,
        O_START,
        O_POOL,
        O_TIMEOUT,
        O_SERVER_PID,
        O_CHURN_PCT,
        O_CHURN_EVERY,
        O_RATE,
        O_RETRY_503,
        O_CHECK,
        O_PROTOCOL,
        O_TENANTS,
        O_INTEGERS,
        O_HELP
    };
    static const struct option lo[] = {
        {"url", required_argument, 0, O_URL},
        {"series", required_argument, 0, O_SERIES},
        {"samples-per-request", required_argument, 0, O_SPR},
        {"samples-per-series", required_argument, 0, O_SPS},
        {"connections", required_argument, 0, O_CONN},
        {"duration", required_argument, 0, O_DUR},
        {"requests", required_argument, 0, O_REQ},
        {"warmup", required_argument, 0, O_WARM},
        {"labels", required_argument, 0, O_LABELS},
        {"interval-ms", required_argument, 0, O_INTERVAL},
        {"start-ms", required_argument, 0, O_START},
        {"pool-mb", required_argument, 0, O_POOL},
        {"timeout", required_argument, 0, O_TIMEOUT},
        {"server-pid", required_argument, 0, O_SERVER_PID},
        {"churn-percent", required_argument, 0, O_CHURN_PCT},
        {"churn-every-ms", required_argument, 0, O_CHURN_EVERY},
        {"rate", required_argument, 0, O_RATE},
        {"retry-503", no_argument, 0, O_RETRY_503},
        {"check", no_argument, 0, O_CHECK},
        {"protocol", required_argument, 0, O_PROTOCOL},
        {"tenants", required_argument, 0, O_TENANTS},
        {"integers", no_argument, 0, O_INTEGERS},
        {"help", no_argument, 0, O_HELP},
        {0, 0, 0, 0},
    };
    *o = (opts){
        .url = "http://127.0.0.1:9201/api/v1/write",
        .series = 100000,
        .samples_per_request = 2000,
        .samples_per_entry = 1,
        .connections = 8,
        .labels = 10,
        .interval_ms = 15000,
        .start_ms = -1,
        .pool_mb = 1024,
        .timeout_s = 60,
        .protocol = 1,
    };
    int c, bad = 0;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case O_URL: o->url = optarg; break;
        case O_SERIES: bad |= parse_u64(optarg, 1, 100000000, &o->series); break;
        case O_SPR: bad |= parse_u64(optarg, 1, 1000000, &o->samples_per_request); break;
        case O_SPS: bad |= parse_u64(optarg, 1, 100000, &o->samples_per_entry); break;
        case O_CONN: bad |= parse_u64(optarg, 1, 4096, &o->connections); break;
        case O_DUR: bad |= parse_secs(optarg, &o->duration_s); break;
        case O_REQ: bad |= parse_u64(optarg, 1, UINT64_MAX / 2, &o->requests); break;
        case O_WARM: bad |= parse_secs(optarg, &o->warmup_s); break;
        case O_LABELS: bad |= parse_u64(optarg, 1, MAX_LABELS, &o->labels); break;
        case O_INTERVAL: bad |= parse_u64(optarg, 1, 86400000, &o->interval_ms); break;
        case O_START:
            bad |= parse_u64(optarg, 0, INT64_MAX / 2, &v);
            o->start_ms = (int64_t)v;
            break;
        case O_POOL: bad |= parse_u64(optarg, 1, 1 << 20, &o->pool_mb); break;
        case O_TIMEOUT: bad |= parse_secs(optarg, &o->timeout_s); break;
        case O_SERVER_PID:
            bad |= parse_u64(optarg, 1, INT32_MAX, &v);
            o->server_pid = (long)v;
            break;
        case O_CHURN_PCT:
            bad |= parse_secs(optarg, &o->churn_percent) || o->churn_percent > 100;
            break;
        case O_CHURN_EVERY: bad |= parse_u64(optarg, 1, 86400000, &o->churn_every_ms); break;
        case O_RATE: bad |= parse_secs(optarg, &o->rate); break;
        case O_RETRY_503: o->retry_503 = 1; break;
        case O_INTEGERS: integer_values = 1; break;
        case O_CHECK: o->check = 1; break;
        case O_PROTOCOL:
            bad |= parse_u64(optarg, 1, 2, &v);
            o->protocol = (int)v;
            break;
        case O_TENANTS: bad |= parse_u64(optarg, 0, 1000000, &o->tenants); break;
        case O_HELP: usage(stdout); exit(0);
        default: bad = 1;
        }
        if (bad) {
            if (c != '?')
                fprintf(stderr, "loadgen: bad value for --%s: %s\n", lo[c - 1].name, optarg);
            return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "loadgen: unexpected argument %s\n", argv[optind]);
        return -1;
    }
    if (o->duration_s > 0 && o->requests) {
        fprintf(stderr, "loadgen: give --duration or --requests, not both\n");
        return -1;
    }
    if (o->duration_s == 0 && o->requests == 0)
        o->duration_s = 30;
    if ((o->churn_percent > 0) != (o->churn_every_ms > 0)) {
        fprintf(stderr, "loadgen: give --churn-percent and --churn-every-ms together\n");
        return -1;
    }
    if (o->samples_per_request % o->samples_per_entry) {
        fprintf(stderr, "loadgen: --samples-per-request must be a multiple of "
                        "--samples-per-series\n");
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64's finaliser: cheap, stateless, good enough to derive values from indices. */
static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* FNV-1a: a deterministic hash of a string's bytes (never of its address). */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

static const uint8_t *get_varint(const uint8_t *p, uint64_t *v)
{
    uint64_t x = 0;
    int shift = 0;
    for (; *p & 0x80; shift += 7)
        x |= (uint64_t)(*p++ & 0x7f) << shift;
    *v = x | (uint64_t)*p++ << shift;
    return p;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "loadgen: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* Bump allocator for everything that lives as long as the process: label strings,
 * protobuf-c label structs. Never freed piecemeal. */
typedef struct bump {
    char *p;
    size_t left;
    void *chunks; /* each chunk starts with a pointer to the previous one */
} bump;

static void *bump_alloc(bump *b, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > b->left) {
        size_t size = n > (1u << 20) ? n : (1u << 20);
        char *chunk = xmalloc(sizeof(void *) + size);
        memcpy(chunk, &b->chunks, sizeof(void *));
        b->chunks = chunk;
        b->p = chunk + sizeof(void *);
        b->left = size;
    }
    void *r = b->p;
    b->p += n;
    b->left -= n;
    return r;
}

static void bump_free(bump *b)
{
    while (b->chunks) {
        void *prev;
        memcpy(&prev, b->chunks, sizeof prev);
        free(b->chunks);
        b->chunks = prev;
    }
    b->p = NULL;
    b->left = 0;
}

static char *bump_printf(bump *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static char *bump_printf(bump *b, const char *fmt, ...)
{
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof tmp)
        n = (int)sizeof tmp - 1;
    char *s = bump_alloc(b, (size_t)n + 1);
    memcpy(s, tmp, (size_t)n + 1);
    return s;
}

/* ------------------------------------------------------------------------------------ */
/* The series model                                                                     */

enum { GAUGE, COUNTER };
enum { D_NONE, D_CPU_MODE, D_CPU_GUEST, D_DISK, D_NETDEV, D_FS, D_CCPU, D_IFACE, D_CDEV,
       D_PHASE, D_RESOURCE };

typedef struct mdef {
    const char *name;
    unsigned char kind, dim;
} mdef;

/* What one node_exporter target exposes (166 series). */
static const mdef node_metrics[] = {
    {"node_cpu_seconds_total", COUNTER, D_CPU_MODE},
    {"node_cpu_guest_seconds_total", COUNTER, D_CPU_GUEST},
    {"node_disk_read_bytes_total", COUNTER, D_DISK},
    {"node_disk_written_bytes_total", COUNTER, D_DISK},
    {"node_disk_reads_completed_total", COUNTER, D_DISK},
    {"node_disk_writes_completed_total", COUNTER, D_DISK},
    {"node_disk_io_time_seconds_total", COUNTER, D_DISK},
    {"node_network_receive_bytes_total", COUNTER, D_NETDEV},
    {"node_network_transmit_bytes_total", COUNTER, D_NETDEV},
    {"node_network_receive_packets_total", COUNTER, D_NETDEV},
    {"node_network_transmit_packets_total", COUNTER, D_NETDEV},
    {"node_network_receive_errs_total", COUNTER, D_NETDEV},
    {"node_network_transmit_drop_total", COUNTER, D_NETDEV},
    {"node_filesystem_avail_bytes", GAUGE, D_FS},
    {"node_filesystem_size_bytes", GAUGE, D_FS},
    {"node_filesystem_free_bytes", GAUGE, D_FS},
    {"node_filesystem_files_free", GAUGE, D_FS},
    {"node_memory_MemAvailable_bytes", GAUGE, D_NONE},
    {"node_memory_MemFree_bytes", GAUGE, D_NONE},
    {"node_memory_MemTotal_bytes", GAUGE, D_NONE},
    {"node_memory_Cached_bytes", GAUGE, D_NONE},
    {"node_memory_Buffers_bytes", GAUGE, D_NONE},
    {"node_memory_Active_bytes", GAUGE, D_NONE},
    {"node_memory_Inactive_bytes", GAUGE, D_NONE},
    {"node_memory_Dirty_bytes", GAUGE, D_NONE},
    {"node_load1", GAUGE, D_NONE},
    {"node_load5", GAUGE, D_NONE},
    {"node_load15", GAUGE, D_NONE},
    {"node_context_switches_total", COUNTER, D_NONE},
    {"node_intr_total", COUNTER, D_NONE},
    {"node_forks_total", COUNTER, D_NONE},
    {"node_procs_running", GAUGE, D_NONE},
    {"node_procs_blocked", GAUGE, D_NONE},
    {"node_boot_time_seconds", GAUGE, D_NONE},
    {"node_time_seconds", GAUGE, D_NONE},
    {"node_entropy_available_bits", GAUGE, D_NONE},
    {"node_filefd_allocated", GAUGE, D_NONE},
    {"node_sockstat_TCP_inuse", GAUGE, D_NONE},
    {"node_netstat_Tcp_CurrEstab", GAUGE, D_NONE},
    {"node_vmstat_pgfault", COUNTER, D_NONE},
    {"up", GAUGE, D_NONE},
    {"scrape_duration_seconds", GAUGE, D_NONE},
    {"scrape_samples_scraped", GAUGE, D_NONE},
};

/* Per container of a pod (cAdvisor via the kubelet, kube-state-metrics). */
static const mdef container_metrics[] = {
    {"container_cpu_usage_seconds_total", COUNTER, D_CCPU},
    {"container_cpu_cfs_throttled_periods_total", COUNTER, D_NONE},
    {"container_memory_working_set_bytes", GAUGE, D_NONE},
    {"container_memory_rss", GAUGE, D_NONE},
    {"container_memory_cache", GAUGE, D_NONE},
    {"container_spec_memory_limit_bytes", GAUGE, D_NONE},
    {"container_network_receive_bytes_total", COUNTER, D_IFACE},
    {"container_network_transmit_bytes_total", COUNTER, D_IFACE},
    {"container_fs_reads_bytes_total", COUNTER, D_CDEV},
    {"container_fs_writes_bytes_total", COUNTER, D_CDEV},
    {"kube_pod_container_status_restarts_total", COUNTER, D_NONE},
    {"kube_pod_container_resource_requests", GAUGE, D_RESOURCE},
    {"kube_pod_container_resource_limits", GAUGE, D_RESOURCE},
};

/* Per pod, without a container label. */
static const mdef pod_metrics[] = {
    {"kube_pod_status_phase", GAUGE, D_PHASE},
    {"kube_pod_info", GAUGE, D_NONE},
    {"kube_pod_start_time", GAUGE, D_NONE},
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

static const char *const cpu_modes[] = {"idle", "iowait", "irq", "nice",
                                        "softirq", "steal", "system", "user"};
static const char *const cpu_ids[] = {"0", "1", "2", "3", "4", "5", "6", "7"};
static const char *const guest_modes[] = {"nice", "user"};
static const char *const disks[] = {"nvme0n1", "nvme1n1", "sda", "sdb"};
static const char *const netdevs[] = {"docker0", "eth0", "eth1", "lo"};
static const char *const fs[][3] = {
    {"/dev/nvme0n1p1", "ext4", "/"},
    {"/dev/nvme1n1", "xfs", "/var/lib/docker"},
    {"/dev/sda1", "vfat", "/boot/efi"},
    {"tmpfs", "tmpfs", "/run"},
};
static const char *const phases[] = {"Failed", "Pending", "Running", "Succeeded", "Unknown"};
static const char *const resources[][2] = {{"cpu", "core"}, {"memory", "byte"}};
static const char *const zones[] = {"eu-west-1a", "eu-west-1b", "eu-west-1c"};
static const char *const deploys[][3] = { /* deployment, namespace, team */
    {"api-gateway", "edge", "platform"},     {"auth", "identity", "identity"},
    {"cart", "shop", "checkout"},            {"catalog", "shop", "catalog"},
    {"checkout", "shop", "checkout"},        {"coredns", "kube-system", "platform"},
    {"email", "notifications", "growth"},    {"frontend", "web", "web"},
    {"image-resizer", "media", "media"},     {"inventory", "shop", "catalog"},
    {"kafka-connect", "data", "data"},       {"ledger", "payments", "payments"},
    {"loki-ingester", "logging", "observability"},
    {"nginx-ingress", "ingress", "platform"},
    {"orders", "shop", "checkout"},          {"payments", "payments", "payments"},
    {"pricing", "shop", "catalog"},          {"recommendations", "ml", "ml"},
    {"search", "search", "search"},          {"sessions", "identity", "identity"},
    {"shipping", "logistics", "logistics"},  {"thanos-store", "monitoring", "observability"},
    {"user-profile", "identity", "identity"},
};
/* Kubernetes' pod-name suffix alphabet (no vowels, no look-alikes): 27 letters. */
static const char kube_alnum[] = "bcdfghjklmnpqrstvwxz2456789";

/* Everything that is constant for one scrape target. */
typedef struct target {
    int is_node;
    uint64_t id;
    const char *instance, *nodename, *zone, *podname, *ns, *deploy, *team, *uid;
    uint32_t phase_ms; /* where in the scrape interval this target is scraped */
} target;

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

typedef struct lbl {
    const char *name, *value;
} lbl;

typedef struct builder {
    model *m;
    uint64_t want;     /* series to generate */
    uint64_t k;        /* labels wanted per series */
    lbl l[MAX_LABELS];
    int nl;
} builder;

static void push(builder *b, const char *name, const char *value)
{
    if (b->nl < MAX_LABELS)
        b->l[b->nl++] = (lbl){name, value};
}

static int has_label(const builder *b, const char *name)
{
    for (int i = 0; i < b->nl; i++)
        if (!strcmp(b->l[i].name, name))
            return 1;
    return 0;
}

static int cmp_lbl(const void *a, const void *b)
{
    /* strcmp compares as unsigned char: the byte order the spec asks for (§1.3). */
    return strcmp(((const lbl *)a)->name, ((const lbl *)b)->name);
}

/* Target-level labels a real setup adds (external labels, kube service discovery),
 * in the order they are added until the series has --labels labels. */
static const char *pad_value(builder *b, const target *t, const char *container, int i,
                             const char **name)
{
    bump *m = &b->m->mem;
    static const char *const node_pad[] = {"cluster", "prometheus", "namespace", "pod",
                                           "node", "service", "endpoint", "container",
                                           "region", "zone", "env", "provider"};
    static const char *const pod_pad[] = {"cluster", "prometheus", "node", "service",
                                          "endpoint", "metrics_path", "image", "id",
                                          "name", "region", "zone", "env", "team"};
    const char *const *pad = t->is_node ? node_pad : pod_pad;
    int npad = t->is_node ? (int)COUNT(node_pad) : (int)COUNT(pod_pad);
    if (i >= npad) {
        *name = bump_printf(m, "extra_label_%02d", i - npad);
        return bump_printf(m, "value-%d-%llu", i - npad, (unsigned long long)(t->id % 97));
    }
    *name = pad[i];
    const char *n = pad[i];
    const char *c = container ? container : "POD";
    if (!strcmp(n, "cluster")) return "prod-eu-west-1";
    if (!strcmp(n, "prometheus")) return "monitoring/k8s";
    if (!strcmp(n, "namespace")) return "monitoring";
    if (!strcmp(n, "pod")) return t->podname;
    if (!strcmp(n, "node")) return t->nodename;
    if (!strcmp(n, "service")) return t->is_node ? "node-exporter" : "kubelet";
    if (!strcmp(n, "endpoint")) return t->is_node ? "metrics" : "https-metrics";
    if (!strcmp(n, "container")) return "node-exporter";
    if (!strcmp(n, "region")) return "eu-west-1";
    if (!strcmp(n, "zone")) return t->zone;
    if (!strcmp(n, "env")) return "production";
    if (!strcmp(n, "provider")) return "aws";
    if (!strcmp(n, "metrics_path")) return "/metrics/cadvisor";
    if (!strcmp(n, "team")) return t->team;
    if (!strcmp(n, "image"))
        return bump_printf(m, "registry.example.com/%s/%s:v1.%llu.%llu", t->ns, c,
                           (unsigned long long)(mix(t->id) % 40),
                           (unsigned long long)(mix(t->id + 1) % 10));
    if (!strcmp(n, "id"))
        return bump_printf(m, "/kubepods.slice/kubepods-burstable.slice/"
                              "kubepods-burstable-pod%s.slice/cri-containerd-%016llx.scope",
                           t->uid, (unsigned long long)mix(t->id ^ hash_str(c)));
    /* name */
    return bump_printf(m, "k8s_%s_%s_%s_%s_0", c, t->podname, t->ns, t->uid);
}

/* Locates label j of the series' packed labels (see series.churn_at). protobuf-c packs
 * a Label as name (field 1) then value (field 2); both are non-empty here. */
static void locate_churn_label(series *s, int j)
{
    const uint8_t *p = s->blob;
    uint64_t len, vlen;
    for (int i = 0; i < j; i++) {
        assert(*p == 0x0a);
        p = get_varint(p + 1, &len);
        p += len;
    }
    s->churn_at = (uint32_t)(p - s->blob);
    assert(*p == 0x0a);
    p = get_varint(p + 1, &len);
    const uint8_t *end = p + len;
    s->churn_name = (uint32_t)(p - s->blob);
    assert(*p == 0x0a);
    p = get_varint(p + 1, &len);
    p += len;
    assert(*p == 0x12);
    p = get_varint(p + 1, &vlen);
    assert(p + vlen == end);
    s->churn_len = (uint32_t)(end - s->blob) - s->churn_at;
    s->churn_vlen = (uint32_t)vlen;
}

/* Completes the label set of one series (core + dimension labels already pushed) and
 * stores it. Returns 1 when enough series exist. */
static int emit(builder *b, const target *t, const char *container, unsigned char kind)
{
    model *m = b->m;
    if (m->n >= b->want)
        return 1;
    for (int i = 0; (uint64_t)b->nl < b->k && b->nl < MAX_LABELS; i++) {
        const char *name, *value = pad_value(b, t, container, i, &name);
        if (!has_label(b, name))
            push(b, name, value);
    }
    qsort(b->l, (size_t)b->nl, sizeof b->l[0], cmp_lbl);

    series *s = &m->s[m->n];
    Prometheus__Label ls[MAX_LABELS], *lp[MAX_LABELS];
    for (int i = 0; i < b->nl; i++) {
        prometheus__label__init(&ls[i]);
        /* Label fields are proto bytes (same wire format as string); pack only reads. */
        ls[i].name.data = (uint8_t *)b->l[i].name;
        ls[i].name.len = strlen(b->l[i].name);
        ls[i].value.data = (uint8_t *)b->l[i].value;
        ls[i].value.len = strlen(b->l[i].value);
        lp[i] = &ls[i];
    }
    Prometheus__TimeSeries ts = PROMETHEUS__TIME_SERIES__INIT;
    ts.n_labels = (size_t)b->nl;
    ts.labels = lp;
    s->blob_len = prometheus__time_series__get_packed_size(&ts);
    s->blob = bump_alloc(&m->mem, s->blob_len);
    prometheus__time_series__pack(&ts, s->blob);
    int churned = -1;
    for (int i = 0; i < b->nl && churned < 0; i++)
        if (!strcmp(b->l[i].name, "pod"))
            churned = i;
    for (int i = 0; i < b->nl && churned < 0; i++)
        if (!strcmp(b->l[i].name, "instance"))
            churned = i;
    assert(churned >= 0); /* every target sets instance */
    locate_churn_label(s, churned);
    if (s->blob_len > m->max_blob)
        m->max_blob = s->blob_len;
    uint64_t h = mix(m->n * 0x100000001b3ull);
    s->kind = kind;
    s->phase_ms = t->phase_ms;
    s->seed = h;
    if (kind == COUNTER) {
        s->base = (double)(h % 1000000) / 100.0;
        s->step = (double)((h >> 24) % 100000) / 100.0; /* increase per scrape */
    } else {
        s->base = (double)((h >> 8) % 10000000 + 1);
        s->step = 0;
    }
    m->n++;
    m->total_labels += (uint64_t)b->nl;
    return m->n >= b->want;
}

static int node_target(builder *b, const target *t)
{
    for (size_t mi = 0; mi < COUNT(node_metrics); mi++) {
        const mdef *d = &node_metrics[mi];
        size_t combos = 1;
        switch (d->dim) {
        case D_CPU_MODE: combos = COUNT(cpu_ids) * COUNT(cpu_modes); break;
        case D_CPU_GUEST: combos = COUNT(cpu_ids) * COUNT(guest_modes); break;
        case D_DISK: combos = COUNT(disks); break;
        case D_NETDEV: combos = COUNT(netdevs); break;
        case D_FS: combos = COUNT(fs); break;
        }
        for (size_t c = 0; c < combos; c++) {
            b->nl = 0;
            push(b, "__name__", d->name);
            push(b, "instance", t->instance);
            push(b, "job", "node-exporter");
            switch (d->dim) {
            case D_CPU_MODE:
                push(b, "cpu", cpu_ids[c / COUNT(cpu_modes)]);
                push(b, "mode", cpu_modes[c % COUNT(cpu_modes)]);
                break;
            case D_CPU_GUEST:
                push(b, "cpu", cpu_ids[c / COUNT(guest_modes)]);
                push(b, "mode", guest_modes[c % COUNT(guest_modes)]);
                break;
            case D_DISK: push(b, "device", disks[c]); break;
            case D_NETDEV: push(b, "device", netdevs[c]); break;
            case D_FS:
                push(b, "device", fs[c][0]);
                push(b, "fstype", fs[c][1]);
                push(b, "mountpoint", fs[c][2]);
                break;
            }
            if (emit(b, t, NULL, d->kind))
                return 1;
        }
    }
    return 0;
}

static void pod_core(builder *b, const target *t, const mdef *d, const char *container)
{
    b->nl = 0;
    push(b, "__name__", d->name);
    if (!strncmp(d->name, "kube_", 5)) {
        push(b, "instance", "10.0.0.2:8080");
        push(b, "job", "kube-state-metrics");
    } else {
        push(b, "instance", t->instance);
        push(b, "job", "kubelet");
    }
    push(b, "namespace", t->ns);
    push(b, "pod", t->podname);
    if (container)
        push(b, "container", container);
}

static int pod_target(builder *b, const target *t)
{
    const char *containers[2] = {t->deploy, "istio-proxy"};
    for (size_t ci = 0; ci < 2; ci++) {
        for (size_t mi = 0; mi < COUNT(container_metrics); mi++) {
            const mdef *d = &container_metrics[mi];
            size_t combos = d->dim == D_RESOURCE ? COUNT(resources) : 1;
            for (size_t c = 0; c < combos; c++) {
                pod_core(b, t, d, containers[ci]);
                switch (d->dim) {
                case D_CCPU: push(b, "cpu", "total"); break;
                case D_IFACE: push(b, "interface", "eth0"); break;
                case D_CDEV: push(b, "device", "/dev/nvme0n1"); break;
                case D_RESOURCE:
                    push(b, "resource", resources[c][0]);
                    push(b, "unit", resources[c][1]);
                    break;
                }
                if (emit(b, t, containers[ci], d->kind))
                    return 1;
            }
        }
    }
    for (size_t mi = 0; mi < COUNT(pod_metrics); mi++) {
        const mdef *d = &pod_metrics[mi];
        size_t combos = d->dim == D_PHASE ? COUNT(phases) : 1;
        for (size_t c = 0; c < combos; c++) {
            pod_core(b, t, d, NULL);
            if (d->dim == D_PHASE)
                push(b, "phase", phases[c]);
            if (emit(b, t, NULL, d->kind))
                return 1;
        }
    }
    return 0;
}

/* Node n's IP as a.b.c.d parts, unique for n < 250^2 * 254. */
static void node_ip(uint64_t n, unsigned ip[3])
{
    ip[2] = (unsigned)(n % 250 + 2);
    ip[1] = (unsigned)(n / 250 % 250);
    ip[0] = (unsigned)(n / 62500 % 254 + 1);
}

/* The 5-letter random part of a pod name, as a bijection of n (mod 27^5), so pod
 * names never collide. */
static void pod_suffix(uint64_t n, char out[6])
{
    uint64_t x = (n * 7919 + 12345) % 14348907;
    for (int i = 0; i < 5; i++, x /= 27)
        out[i] = kube_alnum[x % 27];
    out[5] = 0;
}

/* Targets come in groups of one node_exporter and three pods on that node. */
static void make_target(bump *m, uint64_t tid, uint64_t interval_ms, target *t)
{
    uint64_t node = tid / 4;
    unsigned ip[3];
    node_ip(node, ip);
    memset(t, 0, sizeof *t);
    t->id = tid;
    t->is_node = tid % 4 == 0;
    t->phase_ms = (uint32_t)(mix(tid ^ 0x5eed) % interval_ms);
    t->zone = zones[node % COUNT(zones)];
    t->nodename = bump_printf(m, "ip-10-%u-%u-%u.eu-west-1.compute.internal",
                              ip[0], ip[1], ip[2]);
    char sfx[6];
    if (t->is_node) {
        t->instance = bump_printf(m, "10.%u.%u.%u:9100", ip[0], ip[1], ip[2]);
        pod_suffix(node, sfx);
        t->podname = bump_printf(m, "node-exporter-%s", sfx);
        t->ns = "monitoring";
        t->deploy = "node-exporter";
        t->team = "platform";
    } else {
        uint64_t pod = tid - node - 1; /* 0, 1, 2, 3, 4, ... over pod targets */
        size_t di = (size_t)(pod % COUNT(deploys));
        uint64_t nth = pod / COUNT(deploys);
        t->instance = bump_printf(m, "10.%u.%u.%u:10250", ip[0], ip[1], ip[2]);
        t->deploy = deploys[di][0];
        t->ns = deploys[di][1];
        t->team = deploys[di][2];
        pod_suffix(nth, sfx);
        t->podname = bump_printf(m, "%s-%08llx%02llx-%s", t->deploy,
                                 (unsigned long long)(mix(di) & 0xffffffffu),
                                 (unsigned long long)(mix(di) >> 56), sfx);
    }
    t->uid = bump_printf(m, "%08llx_%04llx_%04llx_%012llx",
                         (unsigned long long)(mix(tid) & 0xffffffffu),
                         (unsigned long long)(mix(tid + 7) & 0xffff),
                         (unsigned long long)(mix(tid + 9) & 0xffff),
                         (unsigned long long)(mix(tid + 11) & 0xffffffffffffull));
}

static void build_model(const opts *o, model *m)
{
    memset(m, 0, sizeof *m);
    m->s = xmalloc(sizeof(*m->s) * o->series);
    builder b = {.m = m, .want = o->series, .k = o->labels};
    for (uint64_t tid = 0;; tid++) {
        target t;
        make_target(&m->mem, tid, o->interval_ms, &t);
        m->targets = tid + 1;
        if (t.is_node ? node_target(&b, &t) : pod_target(&b, &t))
            break;
    }
    if (o->churn_percent > 0) {
        m->churn_step = (uint64_t)((double)m->n * o->churn_percent / 100.0 + 0.5);
        if (m->churn_step < 1)
            m->churn_step = 1;
    }
}

static double sample_value(const series *s, uint64_t round)
{
    double v;
    if (s->kind == COUNTER) {
        v = s->base + s->step * (double)round;
    } else {
        /* A gauge wobbles within +-10 % of its level, with two decimals. */
        double f = 0.9 + (double)(mix(s->seed ^ round) % 2001) / 10000.0;
        v = floor(s->base * f * 100.0 + 0.5) / 100.0;
    }
    return integer_values ? floor(v) : v;
}

/* ------------------------------------------------------------------------------------ */
/* Series churn                                                                         */

#define GEN_SUFFIX_MAX 24

/* How many times churn has replaced series i by the time of pass `pass` over all series
 * (that pass's first scrape, without the target's phase, so a pass sees one set). Step k
 * happens at k * --churn-every-ms of sample time and replaces the next churn_step series
 * in model order, round robin: after k steps, positions [0, k * churn_step) of the
 * endless cycle over the series have been replaced. */
static uint64_t generation(const opts *o, const model *m, uint64_t i, uint64_t pass)
{
    if (!m->churn_step)
        return 0;
    uint64_t k = pass * o->samples_per_entry * o->interval_ms / o->churn_every_ms;
    uint64_t done = k * m->churn_step;
    return done > i ? (done - 1 - i) / m->n + 1 : 0;
}

/* What generation gen appends to the churned label's value; empty for generation 0. */
static size_t gen_suffix(uint64_t gen, char out[GEN_SUFFIX_MAX])
{
    if (!gen)
        return 0;
    return (size_t)snprintf(out, GEN_SUFFIX_MAX, "-g%llu", (unsigned long long)gen);
}

/* Length of the rewritten churn label's Label message for a suffix of sl bytes. */
static size_t churn_inner_len(const series *s, size_t sl)
{
    size_t vlen = s->churn_vlen;
    size_t name = s->churn_at + s->churn_len - vlen - pt_uvarint_size(vlen) - 1 - s->churn_name;
    return name + 1 + pt_uvarint_size(vlen + sl) + vlen + sl;
}

/* Bytes put_labels writes for the series with a value suffix of sl bytes. */
static size_t labels_len(const series *s, size_t sl)
{
    if (!sl)
        return s->blob_len;
    size_t inner = churn_inner_len(s, sl);
    return s->blob_len - s->churn_len + 1 + pt_uvarint_size(inner) + inner;
}

/* Writes the series' packed labels, the churned label's value followed by the suffix
 * sfx (sl bytes; none: the blob as it is). Returns the end of what it wrote. */
static uint8_t *put_labels(uint8_t *p, const series *s, const char *sfx, size_t sl)
{
    if (!sl) {
        memcpy(p, s->blob, s->blob_len);
        return p + s->blob_len;
    }
    const uint8_t *end = s->blob + s->churn_at + s->churn_len;
    size_t vlen = s->churn_vlen;
    const uint8_t *value = end - vlen;
    const uint8_t *name = s->blob + s->churn_name;
    size_t name_len = (size_t)(value - pt_uvarint_size(vlen) - 1 - name);
    memcpy(p, s->blob, s->churn_at);
    p += s->churn_at;
    *p++ = 0x0a; /* TimeSeries.labels = 1 */
    p = pt_put_uvarint(p, churn_inner_len(s, sl));
    memcpy(p, name, name_len);
    p += name_len;
    *p++ = 0x12; /* Label.value = 2 */
    p = pt_put_uvarint(p, vlen + sl);
    memcpy(p, value, vlen);
    p += vlen;
    memcpy(p, sfx, sl);
    p += sl;
    memcpy(p, end, (size_t)(s->blob + s->blob_len - end));
    return p + (s->blob + s->blob_len - end);
}

/* ------------------------------------------------------------------------------------ */
/* Request bodies                                                                       */

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

/* Per-thread scratch: the uncompressed body and the snappy output. */
typedef struct packer {
    uint8_t *raw;
    size_t rawcap;
    char *z;
    size_t zcap;
    /* remote write 2.0: churned label copies, label slices, refs, the symbol table */
    uint8_t *lab, *ts;
    size_t labcap, tscap;
    const uint8_t **sp;
    uint32_t *sn, *refs, *first;
    size_t spcap, sncap, refcap, firstcap;
    uint32_t *slot;
    size_t slotcap;
} packer;

static void grow(void *pp, size_t *cap, size_t need)
{
    if (need <= *cap)
        return;
    free(*(void **)pp);
    *(void **)pp = xmalloc(need);
    *cap = need;
}

/* Largest encoding of one Sample message: fixed64 value + varint timestamp, tagged. */
#define SAMPLE_MAX (1 + 8 + 1 + 10)
/* Largest growth of a series' labels by churn: the suffix and three longer varints. */
#define CHURN_MAX (GEN_SUFFIX_MAX + 3)

/* Body bi holds entries [bi*E, (bi+1)*E) of one endless stream: entry e is series
 * e % N carrying scrapes (e / N) * M .. + M-1, so each pass over all series is one
 * (or M) scrape interval(s) later than the previous pass.
 *
 * Encoding: a protobuf message may be sent as concatenated parts that a parser merges
 * (repeated fields append), so a TimeSeries is the series' pre-packed labels followed
 * by its samples; only the samples are encoded here, by hand, since running protobuf-c's
 * reflective packer over every label of every entry made building the pool (not the
 * run) take minutes. --check decodes the result with protobuf-c and compares.
 *
 * Returns how many entries carry a series no earlier body carried: a first pass, or a
 * generation churn gave the series since the previous pass. */
static void packer_free(packer *pk)
{
    free(pk->raw), free(pk->z), free(pk->lab), free(pk->ts), free(pk->sp), free(pk->sn);
    free(pk->refs), free(pk->first), free(pk->slot);
}

static void seal_body(pool *pl, packer *pk, uint64_t bi, size_t raw)
{
    size_t zmax = snappy_max_compressed_length(raw);
    grow(&pk->z, &pk->zcap, zmax);
    size_t zlen = zmax;
    if (snappy_compress((const char *)pk->raw, raw, pk->z, &zlen) != SNAPPY_OK) {
        fprintf(stderr, "loadgen: snappy_compress failed\n");
        exit(2);
    }
    pl->b[bi].p = xmalloc(zlen);
    memcpy(pl->b[bi].p, pk->z, zlen);
    pl->b[bi].n = zlen;
    atomic_fetch_add(&pl->bytes, zlen);
    atomic_fetch_add(&pl->raw_bytes, raw);
}

static void grow_n(void *pp, size_t *cap, size_t need, size_t size)
{
    if (need <= *cap)
        return;
    size_t c = *cap ? *cap : 1024;
    while (c < need)
        c *= 2;
    void *n = realloc(*(void **)pp, c * size);
    if (!n) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(2);
    }
    *(void **)pp = n;
    *cap = c;
}

static uint64_t slice_hash(const uint8_t *p, size_t n)
{
    uint64_t h = 1469598103934665603ULL;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return mix(h);
}

/* Entry e of the stream: its series, scrape group and generation suffix (*sl bytes in
 * sfx); *fresh counts it when its series is new to the receiver. */
static const series *entry(const opts *o, const model *m, uint64_t e, uint64_t *group,
                           char sfx[GEN_SUFFIX_MAX], size_t *sl, uint64_t *fresh)
{
    *group = e / m->n;
    uint64_t gen = generation(o, m, e % m->n, *group);
    if (!*group || gen != generation(o, m, e % m->n, *group - 1))
        (*fresh)++;
    *sl = gen_suffix(gen, sfx);
    return &m->s[e % m->n];
}

/* An entry's samples as TimeSeries.samples (field 2 in both versions): their length,
 * then writing them. */
static size_t samples_len(const opts *o, const pool *pl, const series *s, uint64_t group)
{
    size_t n = 0;
    for (uint64_t k = 0; k < o->samples_per_entry; k++) {
        uint64_t round = group * o->samples_per_entry + k;
        int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
        n += 2 + 9 + 1 + pt_uvarint_size((uint64_t)t); /* field 2 tag, len < 128 */
    }
    return n;
}

static uint8_t *put_samples(uint8_t *p, const opts *o, const pool *pl, const series *s,
                            uint64_t group)
{
    for (uint64_t k = 0; k < o->samples_per_entry; k++) {
        uint64_t round = group * o->samples_per_entry + k;
        int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
        double v = sample_value(s, round);
        uint64_t bits;
        memcpy(&bits, &v, sizeof bits);
        uint8_t smp[SAMPLE_MAX], *q = smp;
        *q++ = 0x09; /* Sample.value = 1, fixed64 little-endian */
        for (int i = 0; i < 8; i++)
            *q++ = (uint8_t)(bits >> (8 * i));
        *q++ = 0x10; /* Sample.timestamp = 2, varint */
        q = pt_put_uvarint(q, (uint64_t)t);
        *p++ = 0x12; /* TimeSeries.samples = 2 */
        *p++ = (uint8_t)(q - smp);
        memcpy(p, smp, (size_t)(q - smp));
        p += q - smp;
    }
    return p;
}

/* The 2.0 form of the same stream of entries as pack_body: a symbol table per body (each
 * distinct name and value once, "" first), every entry's labels as refs, packed, then its
 * samples. Prometheus builds its 2.0 requests the same way. */
static uint64_t pack_body_v2(const opts *o, const model *m, pool *pl, packer *pk, uint64_t bi)
{
    uint64_t E = pl->entries_per_body, M = o->samples_per_entry, fresh = 0;
    grow(&pk->lab, &pk->labcap, (size_t)(E * (m->max_blob + CHURN_MAX + 1)));
    size_t nsl = 0, nsym = 1, lo = 0;
    grow_n(&pk->first, &pk->firstcap, E + 1, sizeof(*pk->first));
    /* Every entry's label names and values, in order, as slices. */
    for (uint64_t j = 0; j < E; j++) {
        uint64_t group;
        char sfx[GEN_SUFFIX_MAX];
        size_t sl;
        const series *s = entry(o, m, bi * E + j, &group, sfx, &sl, &fresh);
        uint8_t *lb = pk->lab + lo, *le = put_labels(lb, s, sfx, sl);
        lo += (size_t)(le - lb);
        pk->first[j] = (uint32_t)nsl;
        while (lb < le) { /* 0x0a len { 0x0a nlen name 0x12 vlen value } */
            uint64_t len, n;
            lb = (uint8_t *)get_varint(lb + 1, &len);
            const uint8_t *f = lb, *fe = lb + len;
            while (f < fe) {
                f = get_varint(f + 1, &n);
                grow_n(&pk->sp, &pk->spcap, nsl + 1, sizeof(*pk->sp));
                grow_n(&pk->sn, &pk->sncap, nsl + 1, sizeof(*pk->sn));
                pk->sp[nsl] = f, pk->sn[nsl++] = (uint32_t)n;
                f += n;
            }
            lb = (uint8_t *)fe;
        }
    }
    pk->first[E] = (uint32_t)nsl;
    /* Symbols: an open-addressed table of indexes into sp/sn; refs[i] for slice i. */
    size_t slots = 16;
    while (slots < 2 * (nsl + 1))
        slots <<= 1;
    grow_n(&pk->slot, &pk->slotcap, slots, sizeof(*pk->slot));
    memset(pk->slot, 0xff, slots * sizeof(*pk->slot));
    grow_n(&pk->refs, &pk->refcap, nsl + 1, sizeof(*pk->refs));
    size_t symbytes = 2;
    uint32_t *sym_of = xmalloc((nsl + 1) * sizeof(*sym_of)); /* symbol k -> first slice */
    for (size_t i = 0; i < nsl; i++) {
        if (pk->sn[i] == 0) {
            pk->refs[i] = 0;
            continue;
        }
        size_t h = (size_t)slice_hash(pk->sp[i], pk->sn[i]) & (slots - 1);
        for (;; h = (h + 1) & (slots - 1)) {
            uint32_t k = pk->slot[h];
            if (k == UINT32_MAX) {
                pk->slot[h] = (uint32_t)i;
                pk->refs[i] = (uint32_t)nsym;
                sym_of[nsym++] = (uint32_t)i;
                symbytes += 1 + pt_uvarint_size(pk->sn[i]) + pk->sn[i];
                break;
            }
            if (pk->sn[k] == pk->sn[i] && memcmp(pk->sp[k], pk->sp[i], pk->sn[i]) == 0) {
                pk->refs[i] = pk->refs[k];
                break;
            }
        }
    }
    size_t bound = symbytes + (size_t)(E * (16 + 5 * (m->max_blob + 8) + M * (2 + SAMPLE_MAX)));
    grow(&pk->raw, &pk->rawcap, bound);
    uint8_t *p = pk->raw;
    *p++ = 0x22, *p++ = 0x00; /* Request.symbols = 4: "" first */
    for (size_t k = 1; k < nsym; k++) {
        uint32_t i = sym_of[k];
        *p++ = 0x22;
        p = pt_put_uvarint(p, pk->sn[i]);
        memcpy(p, pk->sp[i], pk->sn[i]);
        p += pk->sn[i];
    }
    free(sym_of);
    for (uint64_t j = 0; j < E; j++) {
        uint64_t e = bi * E + j, group = e / m->n;
        const series *s = &m->s[e % m->n];
        size_t refs_len = 0;
        for (uint32_t i = pk->first[j]; i < pk->first[j + 1]; i++)
            refs_len += pt_uvarint_size(pk->refs[i]);
        size_t ts_len = 1 + pt_uvarint_size(refs_len) + refs_len + samples_len(o, pl, s, group);
        *p++ = 0x2a; /* Request.timeseries = 5 */
        p = pt_put_uvarint(p, ts_len);
        *p++ = 0x0a; /* TimeSeries.labels_refs = 1, packed */
        p = pt_put_uvarint(p, refs_len);
        for (uint32_t i = pk->first[j]; i < pk->first[j + 1]; i++)
            p = pt_put_uvarint(p, pk->refs[i]);
        p = put_samples(p, o, pl, s, group);
    }
    seal_body(pl, pk, bi, (size_t)(p - pk->raw));
    return fresh;
}

static uint64_t pack_body(const opts *o, const model *m, pool *pl, packer *pk, uint64_t bi)
{
    if (o->protocol == 2)
        return pack_body_v2(o, m, pl, pk, bi);
    uint64_t E = pl->entries_per_body, M = o->samples_per_entry, fresh = 0;
    size_t bound = (size_t)(E * (m->max_blob + CHURN_MAX + 1 + 10 + M * (2 + SAMPLE_MAX)));
    grow(&pk->raw, &pk->rawcap, bound);
    uint8_t *p = pk->raw;
    for (uint64_t j = 0; j < E; j++) {
        uint64_t group;
        char sfx[GEN_SUFFIX_MAX];
        size_t sl;
        const series *s = entry(o, m, bi * E + j, &group, sfx, &sl, &fresh);
        size_t ts_len = labels_len(s, sl) + samples_len(o, pl, s, group);
        *p++ = 0x0a; /* WriteRequest.timeseries = 1, length-delimited */
        p = pt_put_uvarint(p, ts_len);
        p = put_labels(p, s, sfx, sl);
        p = put_samples(p, o, pl, s, group);
    }
    seal_body(pl, pk, bi, (size_t)(p - pk->raw));
    return fresh;
}

typedef struct build_arg {
    const opts *o;
    const model *m;
    pool *pl;
} build_arg;

static void *build_thread(void *arg)
{
    build_arg *a = arg;
    packer pk = {0};
    for (;;) {
        uint64_t bi = atomic_fetch_add(&a->pl->next, 1);
        if (bi >= a->pl->n)
            break;
        a->pl->fresh[bi + 1] = pack_body(a->o, a->m, a->pl, &pk, bi);
    }
    packer_free(&pk);
    return NULL;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Sizes the pool from the first body: as many bodies as --pool-mb holds, fewer when the
 * run is a known number of requests, and never past the present (VictoriaMetrics, for
 * one, drops samples from the future). Builds on every CPU this process may use. */
static void build_pool(const opts *o, const model *m, pool *pl)
{
    memset(pl, 0, sizeof *pl);
    pl->samples_per_body = o->samples_per_request;
    pl->entries_per_body = o->samples_per_request / o->samples_per_entry;
    int64_t now = wall_ms();
    pl->start_ms = o->start_ms >= 0 ? o->start_ms : (now - 86400000) / 3600000 * 3600000;

    packer pk = {0};
    body first;
    pl->b = &first;
    uint64_t fresh0 = pack_body(o, m, pl, &pk, 0);
    packer_free(&pk);

    uint64_t n = (o->pool_mb << 20) / first.n;
    if (n < 1)
        n = 1;
    if (o->requests && o->warmup_s == 0 && n > o->requests)
        n = o->requests;
    if (pl->start_ms + (int64_t)o->interval_ms < now) {
        /* Last scrape round body n-1 reaches must end before now. */
        uint64_t rounds = (uint64_t)(now - pl->start_ms) / o->interval_ms - 1;
        uint64_t groups = rounds / o->samples_per_entry;
        uint64_t max_entries = groups * m->n;
        uint64_t max_n = max_entries / pl->entries_per_body;
        if (max_n >= 1 && n > max_n)
            n = max_n;
    }
    pl->n = n;
    pl->b = xmalloc(sizeof(*pl->b) * n);
    pl->b[0] = first;
    pl->fresh = xmalloc(sizeof(*pl->fresh) * (n + 1));
    pl->fresh[0] = 0;
    pl->fresh[1] = fresh0;
    atomic_store(&pl->next, 1);

    cpu_set_t cs;
    int nthreads = 1;
    if (sched_getaffinity(0, sizeof cs, &cs) == 0)
        nthreads = CPU_COUNT(&cs);
    if (nthreads < 1)
        nthreads = 1;
    if (nthreads > 16)
        nthreads = 16;
    pthread_t th[16];
    build_arg a = {o, m, pl};
    int started = 0;
    for (int i = 1; i < nthreads; i++)
        if (pthread_create(&th[started], NULL, build_thread, &a) == 0)
            started++;
    build_thread(&a);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    for (uint64_t i = 1; i <= n; i++)
        pl->fresh[i] += pl->fresh[i - 1];
}

/* Distinct series in the first `bodies` bodies of the stream. A run longer than the
 * pool sends it again from the start, which adds none. */
static uint64_t series_sent(const pool *pl, uint64_t bodies)
{
    return pl->fresh[bodies < pl->n ? bodies : pl->n];
}

/* Byte order of two label fields, shorter first on a common prefix. */
static int bin_cmp(ProtobufCBinaryData a, ProtobufCBinaryData b)
{
    int c = memcmp(a.data, b.data, a.len < b.len ? a.len : b.len);
    return c ? c : (a.len > b.len) - (a.len < b.len);
}

/* Decodes a body the way a receiver would and checks the invariants the spec asks of a
 * sender (sorted, unique, non-empty label names and values) and that every entry carries
 * exactly the series, timestamps and value bits the model says. */
/* The 2.0 body decoded by promtable's own decoder must carry, entry by entry, the labels
 * and samples of the 1.0 body of the same index. */
static int check_body_v2(const opts *o, const model *m, const pool *pl, uint64_t bi)
{
    const body *b = &pl->b[bi];
    pt_arena a;
    pt_arena_init(&a, 1 << 20, 0);
    pt_slice raw;
    pt_wreq w;
    char msg[256];
    int rv = -1;
    if (pt_snappy_decode(b->p, b->n, 1u << 30, &a, &raw, msg, sizeof(msg)) != 0 ||
        pt_wire_decode(raw.p, raw.n, 2, &a, &w, msg, sizeof(msg)) != 0 ||
        w.nseries != pl->entries_per_body || w.nsymbols == 0 || w.symbols[0].n != 0)
        goto out;
    for (size_t i = 0; i < w.nseries; i++) {
        const pt_wseries *ts = &w.series[i];
        uint64_t e = bi * pl->entries_per_body + i;
        const series *s = &m->s[e % m->n];
        char sfx[GEN_SUFFIX_MAX];
        size_t sl = gen_suffix(generation(o, m, e % m->n, e / m->n), sfx);
        uint8_t want[4096], *q = want, *we;
        if (ts->ref_problem || ts->nsamples != o->samples_per_entry || labels_len(s, sl) > sizeof want)
            goto out;
        we = put_labels(want, s, sfx, sl);
        for (uint32_t j = 0; j < ts->nlabels; j++) { /* re-encode as 1.0 Label fields */
            const pt_label *l = &ts->labels[j];
            size_t inner = 2 + pt_uvarint_size(l->name.n) + l->name.n + pt_uvarint_size(l->value.n) + l->value.n;
            uint8_t enc[4096], *x = enc;
            *x++ = 0x0a, x = pt_put_uvarint(x, inner);
            *x++ = 0x0a, x = pt_put_uvarint(x, l->name.n), memcpy(x, l->name.p, l->name.n), x += l->name.n;
            *x++ = 0x12, x = pt_put_uvarint(x, l->value.n), memcpy(x, l->value.p, l->value.n), x += l->value.n;
            if ((size_t)(we - q) < (size_t)(x - enc) || memcmp(q, enc, (size_t)(x - enc)))
                goto out;
            q += x - enc;
        }
        if (q != we)
            goto out;
        for (size_t j = 0; j < ts->nsamples; j++) {
            uint64_t round = e / m->n * o->samples_per_entry + j;
            double v = sample_value(s, round);
            int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
            if (memcmp(&v, &ts->samples[j].value, sizeof v) || ts->samples[j].timestamp != t)
                goto out;
        }
    }
    rv = 0;
out:
    pt_arena_free(&a);
    return rv;
}

static int check_body(const opts *o, const model *m, const pool *pl, uint64_t bi,
                      int verbose)
{
    if (o->protocol == 2)
        return check_body_v2(o, m, pl, bi);
    const body *b = &pl->b[bi];
    size_t raw;
    if (snappy_uncompressed_length((const char *)b->p, b->n, &raw) != SNAPPY_OK)
        return -1;
    char *buf = xmalloc(raw);
    int rv = -1;
    Prometheus__WriteRequest *req = NULL;
    if (snappy_uncompress((const char *)b->p, b->n, buf, &raw) != SNAPPY_OK)
        goto out;
    req = prometheus__write_request__unpack(NULL, raw, (const uint8_t *)buf);
    if (!req || req->n_timeseries != pl->entries_per_body)
        goto out;
    for (size_t i = 0; i < req->n_timeseries; i++) {
        const Prometheus__TimeSeries *ts = req->timeseries[i];
        if (ts->n_samples != o->samples_per_entry || ts->n_labels < 1 ||
            ts->labels[0]->name.len != 8 || memcmp(ts->labels[0]->name.data, "__name__", 8))
            goto out;
        for (size_t j = 0; j < ts->n_labels; j++) {
            if (!ts->labels[j]->name.len || !ts->labels[j]->value.len)
                goto out;
            if (j && bin_cmp(ts->labels[j - 1]->name, ts->labels[j]->name) >= 0)
                goto out;
        }
        uint64_t e = bi * pl->entries_per_body + i;
        const series *s = &m->s[e % m->n];
        char sfx[GEN_SUFFIX_MAX];
        size_t sl = gen_suffix(generation(o, m, e % m->n, e / m->n), sfx);
        Prometheus__TimeSeries lo = PROMETHEUS__TIME_SERIES__INIT;
        lo.n_labels = ts->n_labels;
        lo.labels = ts->labels;
        uint8_t again[4096], want[4096];
        size_t want_len = labels_len(s, sl);
        if (prometheus__time_series__get_packed_size(&lo) != want_len || want_len > sizeof again)
            goto out;
        prometheus__time_series__pack(&lo, again);
        put_labels(want, s, sfx, sl);
        if (memcmp(again, want, want_len))
            goto out;
        for (size_t j = 0; j < ts->n_samples; j++) {
            uint64_t round = e / m->n * o->samples_per_entry + j;
            double v = sample_value(s, round);
            int64_t t = pl->start_ms + (int64_t)(round * o->interval_ms) + s->phase_ms;
            if (memcmp(&v, &ts->samples[j]->value, sizeof v) || ts->samples[j]->timestamp != t)
                goto out;
        }
    }
    if (verbose) {
        const Prometheus__TimeSeries *ts = req->timeseries[0];
        fprintf(stderr, "body %llu: %zu entries, %zu bytes raw, %zu compressed; first: {",
                (unsigned long long)bi, req->n_timeseries, raw, b->n);
        for (size_t j = 0; j < ts->n_labels; j++)
            fprintf(stderr, "%s%.*s=\"%.*s\"", j ? ", " : "",
                    (int)ts->labels[j]->name.len, (const char *)ts->labels[j]->name.data,
                    (int)ts->labels[j]->value.len, (const char *)ts->labels[j]->value.data);
        fprintf(stderr, "} %.17g @%lld\n", ts->samples[0]->value,
                (long long)ts->samples[0]->timestamp);
    }
    rv = 0;
out:
    if (req)
        prometheus__write_request__free_unpacked(req, NULL);
    free(buf);
    return rv;
}

/* ------------------------------------------------------------------------------------ */
/* HTTP/1.1 client                                                                      */

typedef struct endpoint {
    struct sockaddr_storage addr;
    socklen_t addrlen;
    int family;
    char hostport[256];
    char path[1024];
} endpoint;

static int parse_url(const char *url, endpoint *ep)
{
    memset(ep, 0, sizeof *ep);
    if (strncmp(url, "http://", 7)) {
        fprintf(stderr, "loadgen: only http:// URLs are supported: %s\n", url);
        return -1;
    }
    const char *hp = url + 7, *slash = strchr(hp, '/');
    size_t hplen = slash ? (size_t)(slash - hp) : strlen(hp);
    if (hplen == 0 || hplen >= sizeof ep->hostport) {
        fprintf(stderr, "loadgen: bad host in URL %s\n", url);
        return -1;
    }
    memcpy(ep->hostport, hp, hplen);
    snprintf(ep->path, sizeof ep->path, "%s", slash ? slash : "/");

    char host[256], port[16] = "80";
    const char *colon;
    if (ep->hostport[0] == '[') {
        const char *close = strchr(ep->hostport, ']');
        if (!close)
            goto bad;
        snprintf(host, sizeof host, "%.*s", (int)(close - ep->hostport - 1), ep->hostport + 1);
        colon = close[1] == ':' ? close + 1 : NULL;
    } else {
        colon = strrchr(ep->hostport, ':');
        snprintf(host, sizeof host, "%.*s",
                 (int)(colon ? (size_t)(colon - ep->hostport) : hplen), ep->hostport);
    }
    if (colon) {
        if (!colon[1] || strlen(colon + 1) >= sizeof port)
            goto bad;
        snprintf(port, sizeof port, "%s", colon + 1);
    }
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        fprintf(stderr, "loadgen: cannot resolve %s:%s: %s\n", host, port, gai_strerror(rc));
        return -1;
    }
    memcpy(&ep->addr, res->ai_addr, res->ai_addrlen);
    ep->addrlen = res->ai_addrlen;
    ep->family = res->ai_family;
    freeaddrinfo(res);
    return 0;
bad:
    fprintf(stderr, "loadgen: bad host:port in URL %s\n", url);
    return -1;
}

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

static int on_body(http_parser *p, const char *at, size_t len)
{
    conn *c = p->data;
    /* Keep the start of an error body: that is where a receiver puts the reason. */
    if (p->status_code >= 300 && c->errlen < ERRBODY_MAX) {
        size_t n = len < ERRBODY_MAX - c->errlen ? len : ERRBODY_MAX - c->errlen;
        memcpy(c->errbody + c->errlen, at, n);
        c->errlen += n;
        c->errbody[c->errlen] = 0;
    }
    return 0;
}

static int on_message_complete(http_parser *p)
{
    conn *c = p->data;
    if (p->status_code < 200) /* 1xx: an interim response; the real one follows */
        return 0;
    c->done = 1;
    c->keep = http_should_keep_alive(p);
    return 0;
}

static const http_parser_settings parser_settings = {
    .on_body = on_body,
    .on_message_complete = on_message_complete,
};

static void conn_close(conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    c->used = 0;
}

static int conn_open(conn *c, const endpoint *ep, double timeout_s)
{
    c->fd = socket(ep->family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->fd < 0)
        goto fail;
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (timeout_s > 0) {
        time_t whole = (time_t)timeout_s;
        struct timeval tv = {whole, (suseconds_t)((timeout_s - (double)whole) * 1e6)};
        setsockopt(c->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(c->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (connect(c->fd, (const struct sockaddr *)&ep->addr, ep->addrlen) < 0)
        goto fail;
    return 0;
fail:
    snprintf(c->err, sizeof c->err, "connect: %s", strerror(errno));
    conn_close(c);
    return -1;
}

static int send_all(int fd, struct iovec *iov, int iovcnt)
{
    while (iovcnt > 0) {
        ssize_t w = writev(fd, iov, iovcnt);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        size_t left = (size_t)w;
        while (iovcnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            iovcnt--;
        }
        if (iovcnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* One request/response exchange on an open connection. Returns the HTTP status, or -1
 * with c->err set; *got tells whether any response byte arrived. */
static int exchange(conn *c, const char *hdr, size_t hdrlen, const body *b, int *got)
{
    struct iovec iov[2] = {{(void *)hdr, hdrlen}, {b->p, b->n}};
    *got = 0;
    c->used = 1;
    if (send_all(c->fd, iov, 2) < 0) {
        snprintf(c->err, sizeof c->err, "send: %s", strerror(errno));
        return -1;
    }
    http_parser_init(&c->hp, HTTP_RESPONSE);
    c->hp.data = c;
    c->done = 0;
    c->keep = 0;
    c->errlen = 0;
    c->errbody[0] = 0;
    while (!c->done) {
        ssize_t n = recv(c->fd, c->buf, sizeof c->buf, 0);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            snprintf(c->err, sizeof c->err, "recv: %s",
                     errno == EAGAIN || errno == EWOULDBLOCK ? "timed out" : strerror(errno));
            return -1;
        }
        if (n == 0) {
            /* EOF ends a close-delimited body; anywhere else it is a failure. */
            http_parser_execute(&c->hp, &parser_settings, NULL, 0);
            if (c->done)
                break;
            snprintf(c->err, sizeof c->err, "connection closed by peer%s",
                     *got ? " mid-response" : " before a response");
            return -1;
        }
        *got = 1;
        size_t used = http_parser_execute(&c->hp, &parser_settings, c->buf, (size_t)n);
        if (HTTP_PARSER_ERRNO(&c->hp) != HPE_OK) {
            snprintf(c->err, sizeof c->err, "bad HTTP response: %s",
                     http_errno_description(HTTP_PARSER_ERRNO(&c->hp)));
            return -1;
        }
        if (c->done && used != (size_t)n) /* we never pipeline: nothing may follow */
            c->keep = 0;
    }
    return (int)c->hp.status_code;
}

/* ------------------------------------------------------------------------------------ */
/* Phases                                                                               */

typedef struct run {
    const opts *o;
    const endpoint *ep;
    const pool *pl;
    _Atomic uint64_t seq;   /* next body in the stream, shared by all phases */
    uint64_t seq_limit;     /* stop before this body (requests mode) */
    uint64_t deadline_ns;   /* stop starting requests after this (duration mode), 0: none */
    uint64_t min_seq;       /* ...but not before this body has been handed out */
    _Atomic uint64_t ok_samples; /* over all phases: what the receiver should now hold */
    atomic_flag reported;   /* first error printed */
    double rate;            /* this phase: requests/s (opts.rate), 0: closed loop */
    uint64_t pace_t0;       /* when the paced phase started */
    _Atomic uint64_t turns; /* requests started in this phase, retries included */
} run;

typedef struct worker {
    pthread_t th;
    run *r;
    conn *c;
    uint64_t ok, errors, samples, busy; /* busy: answered 503 (overload) */
    /* Latency of every answered request, and of the 2xx ones only. */
    struct lat {
        uint32_t *us;
        size_t n, cap;
    } all, ok_lat;
} worker;

static void record(struct lat *l, uint64_t ns)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4096;
        uint32_t *p = realloc(l->us, cap * sizeof *p);
        if (!p) /* losing latency samples beats dying mid-run */
            return;
        l->us = p;
        l->cap = cap;
    }
    uint64_t us = ns / 1000;
    l->us[l->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

static void report_error(run *r, int status, const conn *c)
{
    if (atomic_flag_test_and_set(&r->reported))
        return;
    if (status > 0)
        fprintf(stderr, "loadgen: first error: HTTP %d: %s\n", status,
                c->errlen ? c->errbody : "(empty body)");
    else
        fprintf(stderr, "loadgen: first error: %s\n", c->err);
}

static void *worker_main(void *arg)
{
    worker *w = arg;
    run *r = w->r;
    conn *c = w->c;
    char hdr[1536];
    uint64_t retry = UINT64_MAX; /* a body answered 503, to send again */
    for (;;) {
        if (r->deadline_ns && now_ns() >= r->deadline_ns && atomic_load(&r->seq) >= r->min_seq)
            break;
        uint64_t s = retry;
        if (s == UINT64_MAX && (s = atomic_fetch_add(&r->seq, 1)) >= r->seq_limit)
            break;
        retry = UINT64_MAX;
        uint64_t turn = atomic_fetch_add(&r->turns, 1);
        if (r->rate > 0) {
            uint64_t due = r->pace_t0 + (uint64_t)((double)turn * 1e9 / r->rate);
            struct timespec ts = {(time_t)(due / 1000000000u), (long)(due % 1000000000u)};
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
        }
        const body *b = &r->pl->b[s % r->pl->n];
        char tenant[48] = "";
        if (r->o->tenants)
            snprintf(tenant, sizeof tenant, "X-Scope-OrgID: t%llu\r\n",
                     (unsigned long long)(s % r->pl->n % r->o->tenants));
        int hl = snprintf(hdr, sizeof hdr,
                          "POST %s HTTP/1.1\r\n"
                          "Host: %s\r\n"
                          "User-Agent: promtable-loadgen/" PT_VERSION "\r\n"
                          "Content-Type: application/x-protobuf%s\r\n"
                          "Content-Encoding: snappy\r\n"
                          "X-Prometheus-Remote-Write-Version: %s\r\n"
                          "%s"
                          "Content-Length: %zu\r\n\r\n",
                          r->ep->path, r->ep->hostport,
                          r->o->protocol == 2 ? ";proto=io.prometheus.write.v2.Request" : "",
                          r->o->protocol == 2 ? "2.0.0" : "0.1.0", tenant, b->n);
        uint64_t t0 = now_ns();
        int status = -1, got = 0;
        /* A reused keep-alive connection may have been closed by the peer while idle;
         * like any HTTP client, retry once on a fresh one if no response byte came. */
        for (int attempt = 0; attempt < 2; attempt++) {
            int reused = c->fd >= 0 && c->used;
            if (c->fd < 0 && conn_open(c, r->ep, r->o->timeout_s) < 0)
                break;
            status = exchange(c, hdr, (size_t)hl, b, &got);
            if (status < 0 || !c->keep)
                conn_close(c);
            if (status >= 0 || got || !reused)
                break;
        }
        uint64_t t1 = now_ns();
        if (status >= 200 && status < 300) {
            w->ok++;
            w->samples += r->pl->samples_per_body;
            record(&w->all, t1 - t0);
            record(&w->ok_lat, t1 - t0);
        } else {
            w->errors++;
            w->busy += status == 503;
            if (status == 503 && r->o->retry_503)
                retry = s;
            if (status > 0)
                record(&w->all, t1 - t0);
            report_error(r, status, c);
            if (status < 0) /* do not spin on a dead server */
                usleep(10000);
        }
    }
    return NULL;
}

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile of a sorted array, in milliseconds. */
static double pct_ms(const uint32_t *v, size_t n, double p)
{
    if (!n)
        return 0;
    size_t rank = (size_t)ceil(p * (double)n);
    if (rank < 1)
        rank = 1;
    return v[rank - 1] / 1000.0;
}

/* CPU seconds (user + system, all threads) process pid has used; -1 if unknown. The
 * receiver's CPU per sample is steadier than samples/s when other work shares the host. */
static double proc_cpu_s(long pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    /* Fields after the command name, which may hold spaces and parentheses: state is
     * field 3, utime 14, stime 15. */
    char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
                     &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* Busy CPU seconds of the whole host (all CPUs), from /proc/stat; -1 if unknown. */
static double host_busy_s(void)
{
    FILE *f = fopen("/proc/stat", "r");
    if (!f)
        return -1;
    unsigned long long v[8] = {0};
    int n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                   &v[3], &v[4], &v[5], &v[6], &v[7]);
    fclose(f);
    if (n < 7)
        return -1;
    /* user nice system [idle iowait] irq softirq steal */
    unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    return (double)busy / (double)sysconf(_SC_CLK_TCK);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) < 0)
        return -1;
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The latencies of one kind (the struct lat at offset off in every worker), sorted; frees
 * the workers' arrays. */
static uint32_t *gather(worker *ws, size_t nw, size_t off, size_t *n)
{
    size_t total = 0, at = 0;
    for (size_t i = 0; i < nw; i++)
        total += ((struct lat *)(void *)((char *)&ws[i] + off))->n;
    uint32_t *v = xmalloc(sizeof(*v) * (total ? total : 1));
    for (size_t i = 0; i < nw; i++) {
        struct lat *l = (struct lat *)(void *)((char *)&ws[i] + off);
        if (l->n)
            memcpy(v + at, l->us, l->n * sizeof *v);
        at += l->n;
        free(l->us);
    }
    qsort(v, total, sizeof *v, cmp_u32);
    *n = total;
    return v;
}

/* Runs one phase on all connections; prints its line to f. Returns the error count. */
static uint64_t run_phase(run *r, conn *conns, const char *tag, FILE *f)
{
    const opts *o = r->o;
    size_t nw = (size_t)o->connections;
    worker *ws = calloc(nw, sizeof *ws);
    if (!ws) {
        fprintf(stderr, "loadgen: out of memory\n");
        exit(2);
    }
    uint64_t seq0 = atomic_load(&r->seq);
    double cpu0 = o->server_pid ? proc_cpu_s(o->server_pid) : -1;
    double host0 = host_busy_s(), self0 = self_cpu_s();
    uint64_t t0 = now_ns();
    r->pace_t0 = t0;
    atomic_store(&r->turns, 0);
    size_t started = 0;
    for (size_t i = 0; i < nw; i++) {
        ws[i].r = r;
        ws[i].c = &conns[i];
        if (pthread_create(&ws[i].th, NULL, worker_main, &ws[i]) != 0) {
            fprintf(stderr, "loadgen: pthread_create failed\n");
            break;
        }
        started++;
    }
    for (size_t i = 0; i < started; i++)
        pthread_join(ws[i].th, NULL);
    double elapsed = (double)(now_ns() - t0) / 1e9;
    double cpu1 = o->server_pid ? proc_cpu_s(o->server_pid) : -1;
    double host1 = host_busy_s(), self1 = self_cpu_s();

    uint64_t ok = 0, errors = 0, samples = 0, busy = 0;
    for (size_t i = 0; i < started; i++) {
        ok += ws[i].ok;
        errors += ws[i].errors;
        samples += ws[i].samples;
        busy += ws[i].busy;
    }
    size_t nlat, nok;
    uint32_t *lat = gather(ws, started, offsetof(worker, all), &nlat);
    uint32_t *oklat = gather(ws, started, offsetof(worker, ok_lat), &nok);
    uint64_t sent = ok + errors;
    atomic_fetch_add(&r->ok_samples, samples);
    fprintf(f,
            "%s samples_per_sec=%.0f requests_per_sec=%.1f p50_ms=%.2f p99_ms=%.2f "
            "max_ms=%.2f errors=%llu requests=%llu samples=%llu elapsed_s=%.2f "
            "pool_passes=%.2f total_ok_samples=%llu",
            tag, elapsed > 0 ? (double)samples / elapsed : 0,
            elapsed > 0 ? (double)ok / elapsed : 0, pct_ms(lat, nlat, 0.50),
            pct_ms(lat, nlat, 0.99), nlat ? lat[nlat - 1] / 1000.0 : 0.0,
            (unsigned long long)errors, (unsigned long long)sent,
            (unsigned long long)samples, elapsed,
            (double)(r->o->retry_503 ? atomic_load(&r->seq) : seq0 + sent) / (double)r->pl->n,
            (unsigned long long)atomic_load(&r->ok_samples));
    /* Series sent for the first time, counted when sent (a failed request's too). */
    uint64_t fresh = series_sent(r->pl, seq0 + sent) - series_sent(r->pl, seq0);
    fprintf(f, " series_total=%llu new_series=%llu new_series_per_sec=%.0f",
            (unsigned long long)series_sent(r->pl, seq0 + sent), (unsigned long long)fresh,
            elapsed > 0 ? (double)fresh / elapsed : 0);
    /* Under overload: the offered rate, the 503s, and the latency of the admitted (2xx). */
    fprintf(f, " offered_per_sec=%.1f rejected_503=%llu ok_p50_ms=%.2f ok_p99_ms=%.2f "
               "ok_max_ms=%.2f",
            elapsed > 0 ? (double)sent / elapsed : 0, (unsigned long long)busy,
            pct_ms(oklat, nok, 0.50), pct_ms(oklat, nok, 0.99),
            nok ? oklat[nok - 1] / 1000.0 : 0.0);
    if (cpu0 >= 0 && cpu1 >= 0) {
        double cpu = cpu1 - cpu0;
        fprintf(f, " server_cpu_s=%.2f server_cpu_util=%.2f samples_per_server_cpu_s=%.0f", cpu,
                elapsed > 0 ? cpu / elapsed : 0, cpu > 0 ? (double)samples / cpu : 0);
        /* CPU that neither the server nor we used: other work disturbing the figure. */
        if (host0 >= 0 && host1 >= 0 && self0 >= 0 && self1 >= 0 && elapsed > 0) {
            double other = (host1 - host0) - cpu - (self1 - self0);
            fprintf(f, " loadgen_cpu_util=%.2f other_cpu_util=%.2f",
                    (self1 - self0) / elapsed, other > 0 ? other / elapsed : 0);
        }
    }
    fputc('\n', f);
    fflush(f);
    free(lat);
    free(oklat);
    free(ws);
    return errors;
}

/* ------------------------------------------------------------------------------------ */

static void free_pool(pool *pl)
{
    for (uint64_t i = 0; i < pl->n; i++)
        free(pl->b[i].p);
    free(pl->b);
    free(pl->fresh);
}

/* Sends the pool: an optional warm-up, then the timed phase. Returns the exit status. */
static int send_load(const opts *o, const endpoint *ep, const model *m, const pool *pl)
{
    int rv = 2;
    uint64_t opened = 0;
    conn *conns = calloc((size_t)o->connections, sizeof *conns);
    if (!conns) {
        fprintf(stderr, "loadgen: out of memory\n");
        return 2;
    }
    for (; opened < o->connections; opened++) {
        conns[opened].fd = -1;
        if (conn_open(&conns[opened], ep, o->timeout_s) < 0) {
            fprintf(stderr, "loadgen: %s: %s\n", o->url, conns[opened].err);
            goto out;
        }
    }
    fprintf(stderr, "loadgen: POST %s, %llu connections, warm-up %.0fs, then %s %.0f%s\n",
            o->url, (unsigned long long)o->connections, o->warmup_s,
            o->requests ? "requests" : "duration",
            o->requests ? (double)o->requests : o->duration_s, o->requests ? "" : "s");

    run r = {.o = o, .ep = ep, .pl = pl, .reported = ATOMIC_FLAG_INIT};
    atomic_store(&r.seq, 0);
    atomic_store(&r.ok_samples, 0);
    r.rate = o->rate; /* paced in the warm-up too: a closed loop of refusals is no warm-up */
    if (o->warmup_s > 0) {
        /* Creating a series costs a receiver far more than appending to one: warm up
         * for at least one pass over all series, so the timed phase is steady state. */
        r.seq_limit = UINT64_MAX;
        r.min_seq = (m->n + pl->entries_per_body - 1) / pl->entries_per_body;
        r.deadline_ns = now_ns() + (uint64_t)(o->warmup_s * 1e9);
        run_phase(&r, conns, "warmup:", stderr);
    }
    r.min_seq = 0;
    r.deadline_ns = o->requests ? 0 : now_ns() + (uint64_t)(o->duration_s * 1e9);
    r.seq_limit = o->requests ? atomic_load(&r.seq) + o->requests : UINT64_MAX;
    rv = run_phase(&r, conns, "result:", stdout) ? 1 : 0;
    if (m->churn_step && atomic_load(&r.seq) > pl->n)
        fprintf(stderr, "loadgen: warning: the run sent the pool again from the start, old "
                        "series with old timestamps: churn stopped; raise --pool-mb\n");
out:
    for (uint64_t i = 0; i < opened; i++)
        conn_close(&conns[i]);
    free(conns);
    return rv;
}

int main(int argc, char **argv)
{
    opts o;
    endpoint ep;
    model m;
    pool pl;
    int rv;
    signal(SIGPIPE, SIG_IGN);
    if (parse_opts(argc, argv, &o) < 0) {
        fprintf(stderr, "loadgen: try --help\n");
        return 2;
    }
    if (!o.check && parse_url(o.url, &ep) < 0)
        return 2;

    uint64_t t0 = now_ns();
    build_model(&o, &m);
    uint64_t t1 = now_ns();
    build_pool(&o, &m, &pl);
    uint64_t t2 = now_ns();
    fprintf(stderr,
            "loadgen: %llu series from %llu targets, %.1f labels/series avg, "
            "%llu samples/request in %llu entries; model %.2fs\n",
            (unsigned long long)m.n, (unsigned long long)m.targets,
            (double)m.total_labels / (double)m.n, (unsigned long long)pl.samples_per_body,
            (unsigned long long)pl.entries_per_body, (double)(t1 - t0) / 1e9);
    fprintf(stderr,
            "loadgen: pool %llu bodies, %.1f MiB (avg %.1f KiB snappy, %.1f KiB raw), "
            "%llu samples/series, first scrape %lld; built in %.2fs\n",
            (unsigned long long)pl.n, (double)pl.bytes / 1048576.0,
            (double)pl.bytes / (double)pl.n / 1024.0,
            (double)pl.raw_bytes / (double)pl.n / 1024.0,
            (unsigned long long)(pl.n * pl.samples_per_body / m.n),
            (long long)pl.start_ms, (double)(t2 - t1) / 1e9);
    uint64_t passes = pl.n * pl.entries_per_body / m.n;
    if (m.churn_step) {
        uint64_t span_ms = passes * o.samples_per_entry * o.interval_ms;
        fprintf(stderr,
                "loadgen: churn: %llu series replaced every %llu ms of sample time; the pool "
                "spans %llu passes, %.0f s of sample time, %llu churn steps, %llu distinct "
                "series\n",
                (unsigned long long)m.churn_step, (unsigned long long)o.churn_every_ms,
                (unsigned long long)passes, (double)span_ms / 1e3,
                (unsigned long long)(span_ms / o.churn_every_ms),
                (unsigned long long)series_sent(&pl, pl.n));
    }

    if (o.check) {
        int bad = check_body(&o, &m, &pl, 0, 1) || check_body(&o, &m, &pl, pl.n - 1, 1);
        for (uint64_t i = 1; !bad && i + 1 < pl.n; i += 1 + pl.n / 64)
            bad = check_body(&o, &m, &pl, i, 0);
        /* Same options, same day: same digest. */
        uint64_t digest = 0;
        for (uint64_t i = 0; i < pl.n; i++)
            digest = XXH64(pl.b[i].p, pl.b[i].n, digest);
        fprintf(stderr, "loadgen: check %s; pool digest %016llx\n", bad ? "FAILED" : "ok",
                (unsigned long long)digest);
        rv = bad ? 1 : 0;
    } else {
        rv = send_load(&o, &ep, &m, &pl);
    }
    free_pool(&pl);
    free(m.s);
    bump_free(&m.mem);
    return rv;
}
