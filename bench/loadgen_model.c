/* loadgen: small helpers, the series model and series churn (loadgen.h). */
#include "loadgen.h"

/* --integers: sample values are whole numbers (set once, before any body is built). */
int lg_integer_values;

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                        */

uint64_t lg_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* splitmix64's finaliser: cheap, stateless, good enough to derive values from indices. */
uint64_t lg_mix(uint64_t x)
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

const uint8_t *lg_get_varint(const uint8_t *p, uint64_t *v)
{
    uint64_t x = 0;
    int shift = 0;
    for (; *p & 0x80; shift += 7)
        x |= (uint64_t)(*p++ & 0x7f) << shift;
    *v = x | (uint64_t)*p++ << shift;
    return p;
}

void *lg_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "loadgen: out of memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

static void *bump_alloc(bump *b, size_t n)
{
    n = (n + 7) & ~(size_t)7;
    if (n > b->left) {
        size_t size = n > (1u << 20) ? n : (1u << 20);
        char *chunk = lg_xmalloc(sizeof(void *) + size);
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

void lg_bump_free(bump *b)
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
                           (unsigned long long)(lg_mix(t->id) % 40),
                           (unsigned long long)(lg_mix(t->id + 1) % 10));
    if (!strcmp(n, "id"))
        return bump_printf(m, "/kubepods.slice/kubepods-burstable.slice/"
                              "kubepods-burstable-pod%s.slice/cri-containerd-%016llx.scope",
                           t->uid, (unsigned long long)lg_mix(t->id ^ hash_str(c)));
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
        p = lg_get_varint(p + 1, &len);
        p += len;
    }
    s->churn_at = (uint32_t)(p - s->blob);
    assert(*p == 0x0a);
    p = lg_get_varint(p + 1, &len);
    const uint8_t *end = p + len;
    s->churn_name = (uint32_t)(p - s->blob);
    assert(*p == 0x0a);
    p = lg_get_varint(p + 1, &len);
    p += len;
    assert(*p == 0x12);
    p = lg_get_varint(p + 1, &vlen);
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
    uint64_t h = lg_mix(m->n * 0x100000001b3ull);
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
    t->phase_ms = (uint32_t)(lg_mix(tid ^ 0x5eed) % interval_ms);
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
                                 (unsigned long long)(lg_mix(di) & 0xffffffffu),
                                 (unsigned long long)(lg_mix(di) >> 56), sfx);
    }
    t->uid = bump_printf(m, "%08llx_%04llx_%04llx_%012llx",
                         (unsigned long long)(lg_mix(tid) & 0xffffffffu),
                         (unsigned long long)(lg_mix(tid + 7) & 0xffff),
                         (unsigned long long)(lg_mix(tid + 9) & 0xffff),
                         (unsigned long long)(lg_mix(tid + 11) & 0xffffffffffffull));
}

void lg_build_model(const opts *o, model *m)
{
    memset(m, 0, sizeof *m);
    m->s = lg_xmalloc(sizeof(*m->s) * o->series);
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

double lg_sample_value(const series *s, uint64_t round)
{
    double v;
    if (s->kind == COUNTER) {
        v = s->base + s->step * (double)round;
    } else {
        /* A gauge wobbles within +-10 % of its level, with two decimals. */
        double f = 0.9 + (double)(lg_mix(s->seed ^ round) % 2001) / 10000.0;
        v = floor(s->base * f * 100.0 + 0.5) / 100.0;
    }
    return lg_integer_values ? floor(v) : v;
}

/* ------------------------------------------------------------------------------------ */
/* Series churn                                                                         */

/* How many times churn has replaced series i by the time of pass `pass` over all series
 * (that pass's first scrape, without the target's phase, so a pass sees one set). Step k
 * happens at k * --churn-every-ms of sample time and replaces the next churn_step series
 * in model order, round robin: after k steps, positions [0, k * churn_step) of the
 * endless cycle over the series have been replaced. */
uint64_t lg_generation(const opts *o, const model *m, uint64_t i, uint64_t pass)
{
    if (!m->churn_step)
        return 0;
    uint64_t k = pass * o->samples_per_entry * o->interval_ms / o->churn_every_ms;
    uint64_t done = k * m->churn_step;
    return done > i ? (done - 1 - i) / m->n + 1 : 0;
}

/* What generation gen appends to the churned label's value; empty for generation 0. */
size_t lg_gen_suffix(uint64_t gen, char out[GEN_SUFFIX_MAX])
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

/* Bytes lg_put_labels writes for the series with a value suffix of sl bytes. */
size_t lg_labels_len(const series *s, size_t sl)
{
    if (!sl)
        return s->blob_len;
    size_t inner = churn_inner_len(s, sl);
    return s->blob_len - s->churn_len + 1 + pt_uvarint_size(inner) + inner;
}

/* Writes the series' packed labels, the churned label's value followed by the suffix
 * sfx (sl bytes; none: the blob as it is). Returns the end of what it wrote. */
uint8_t *lg_put_labels(uint8_t *p, const series *s, const char *sfx, size_t sl)
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

