#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

enum type { T_STR, T_LONG, T_BYTES, T_BOOL, T_DURATION };

typedef struct entry {
    const char *key;  /* YAML path, dotted */
    const char *flag; /* command-line flag without "--" */
    enum type type;
    const char *def;
    long long min, max;
    size_t off;
    const char *help;
} entry;

#define F(field) offsetof(pt_config, field)
#define MiB (1024LL * 1024)

static const entry table[] = {
    {"web.listen_address", "web.listen-address", T_STR, ":9201", 0, 0, F(listen_address),
     "Address to listen on for remote write/read, metrics and health."},
    {"web.tls_cert_file", "web.tls-cert-file", T_STR, "", 0, 0, F(tls_cert_file),
     "TLS certificate (PEM). With the key: TLS only, ALPN h2 and http/1.1."},
    {"web.tls_key_file", "web.tls-key-file", T_STR, "", 0, 0, F(tls_key_file),
     "TLS private key (PEM)."},
    {"web.bearer_token_file", "web.bearer-token-file", T_STR, "", 0, 0, F(bearer_token_file),
     "File holding a token: write and read then need \"Authorization: Bearer <token>\"."},
    {"web.basic_auth_username", "web.basic-auth-username", T_STR, "", 0, 0,
     F(basic_auth_username), "With the password file: write and read need this basic auth."},
    {"web.basic_auth_password_file", "web.basic-auth-password-file", T_STR, "", 0, 0,
     F(basic_auth_password_file), "File holding the basic auth password."},
    {"web.workers", "web.workers", T_LONG, "0", 0, 256, F(workers),
     "Worker threads running requests (0 = 2 per CPU)."},
    {"web.max_connections", "web.max-connections", T_LONG, "4096", 1, 1000000,
     F(max_connections), "Open client connections at most."},
    {"web.idle_timeout", "web.idle-timeout", T_DURATION, "5m", 0, 86400000LL,
     F(idle_timeout_ms), "Close keep-alive connections idle this long (0 = never)."},
    {"web.max_body_bytes", "web.max-body-bytes", T_BYTES, "32MiB", 1024, 1024 * MiB,
     F(max_body_bytes), "Largest compressed request body; larger gets 413."},
    {"web.max_body_memory", "web.max-body-memory", T_BYTES, "1GiB", MiB, 1048576 * MiB,
     F(max_body_memory), "Request bodies held at once, all connections; past it 503."},
    {"web.max_decoded_bytes", "web.max-decoded-bytes", T_BYTES, "64MiB", 1024, 4096 * MiB,
     F(max_decoded_bytes), "Largest declared snappy-decoded size; larger gets 413."},
    {"web.max_request_memory", "web.max-request-memory", T_BYTES, "512MiB", MiB, 65536 * MiB,
     F(max_request_memory), "Memory one request may use to decode and answer; over it 413."},
    {"storage.backend", "storage.backend", T_STR, "embedded", 0, 0, F(backend),
     "Backend: embedded (RocksDB in storage.path) or bigtable."},
    {"storage.path", "storage.path", T_STR, "./data", 0, 0, F(storage_path),
     "Data directory of the embedded store."},
    {"storage.sync", "storage.sync", T_BOOL, "false", 0, 1, F(storage_sync),
     "fsync the embedded store's WAL before acknowledging each write."},
    {"storage.head_memory", "storage.head-memory", T_BYTES, "256MiB", MiB, 1048576 * MiB,
     F(head_memory), "Embedded store: samples held in memory (16 B each) before a flush."},
    {"storage.table_prefix", "storage.table-prefix", T_STR, "", 0, 0, F(table_prefix),
     "Bigtable: tables are <prefix>points and <prefix>index."},
    {"storage.bigtable.project", "storage.bigtable.project", T_STR, "", 0, 0, F(bt_project),
     "Bigtable: project ID."},
    {"storage.bigtable.instance", "storage.bigtable.instance", T_STR, "", 0, 0, F(bt_instance),
     "Bigtable: instance ID."},
    {"storage.bigtable.endpoint", "storage.bigtable.endpoint", T_STR, "", 0, 0, F(bt_endpoint),
     "Bigtable: emulator host:port (plaintext); empty = $BIGTABLE_EMULATOR_HOST, else Cloud "
     "Bigtable with application default credentials."},
    {"storage.retention", "storage.retention", T_DURATION, "0", 0, 100 * 31536000000LL,
     F(retention_ms), "Bigtable: GC cells older than this, set by init (0 = keep forever)."},
    {"index.bucket", "index.bucket", T_DURATION, "1d", 3600000LL, 49LL * 86400000LL,
     F(index_bucket_ms), "Index bucket length: series are listed per bucket."},
    {"index.cache_entries", "index.cache-entries", T_LONG, "4000000", 1024, 1000000000LL,
     F(index_cache_entries), "(series, bucket) pairs remembered as indexed (~32 B each)."},
    {"read.max_series", "read.max-series", T_LONG, "500000", 0, LONG_MAX, F(read_max_series),
     "Series one remote read query may return (0 = no limit)."},
    {"read.max_samples", "read.max-samples", T_LONG, "50000000", 0, LONG_MAX,
     F(read_max_samples), "Samples one remote read query may return (0 = no limit)."},
    {"log.level", "log.level", T_STR, "info", 0, 0, F(log_level),
     "Log level: debug, info, warn, error."},
};

#define NENTRIES (sizeof(table) / sizeof(table[0]))

int pt_parse_duration_ms(const char *s, long *out)
{
    static const struct {
        const char *unit;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000},
                 {"w", 604800000}, {"y", 31536000000LL}};
    long long total = 0;
    const char *p = s;
    if (!*p)
        return -1;
    if (strcmp(p, "0") == 0) {
        *out = 0;
        return 0;
    }
    while (*p) {
        if (*p < '0' || *p > '9')
            return -1;
        errno = 0;
        char *end;
        long long v = strtoll(p, &end, 10);
        if (errno)
            return -1;
        size_t best = 0, ul = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
            size_t l = strlen(units[i].unit);
            if (strncmp(end, units[i].unit, l) == 0 && l > ul) {
                /* "m" must not eat the "m" of "ms" */
                best = i;
                ul = l;
            }
        }
        if (!ul)
            return -1;
        if (v > LLONG_MAX / units[best].ms || total > LLONG_MAX - v * units[best].ms)
            return -1;
        total += v * units[best].ms;
        p = end + ul;
    }
    if (total > LONG_MAX)
        return -1;
    *out = (long)total;
    return 0;
}

int pt_parse_bytes(const char *s, size_t *out)
{
    static const struct {
        const char *unit;
        unsigned long long mul;
    } units[] = {{"", 1},           {"B", 1},
                 {"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},
                 {"KB", 1000},      {"MB", 1000000},   {"GB", 1000000000}};
    if (*s < '0' || *s > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno)
        return -1;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcmp(end, units[i].unit) == 0) {
            if (v > SIZE_MAX / units[i].mul)
                return -1;
            *out = (size_t)(v * units[i].mul);
            return 0;
        }
    }
    return -1;
}

static int set_value(pt_config *c, const entry *e, const char *v, char *err, size_t errlen)
{
    char *base = (char *)c;
    long long n = 0;
    switch (e->type) {
    case T_STR: {
        char *dup = strdup(v);
        if (!dup)
            return -1;
        char **slot = (char **)(base + e->off);
        free(*slot);
        *slot = dup;
        return 0;
    }
    case T_BOOL:
        if (strcmp(v, "true") == 0 || strcmp(v, "1") == 0 || strcmp(v, "yes") == 0)
            *(int *)(base + e->off) = 1;
        else if (strcmp(v, "false") == 0 || strcmp(v, "0") == 0 || strcmp(v, "no") == 0)
            *(int *)(base + e->off) = 0;
        else
            goto bad;
        return 0;
    case T_LONG: {
        char *end;
        errno = 0;
        n = strtoll(v, &end, 10);
        if (errno || *end || end == v)
            goto bad;
        break;
    }
    case T_DURATION: {
        long ms;
        if (pt_parse_duration_ms(v, &ms) != 0)
            goto bad;
        n = ms;
        break;
    }
    case T_BYTES: {
        size_t b;
        if (pt_parse_bytes(v, &b) != 0 || b > (size_t)LLONG_MAX)
            goto bad;
        n = (long long)b;
        break;
    }
    }
    if (n < e->min || n > e->max) {
        snprintf(err, errlen, "%s: %s is out of range [%lld, %lld]", e->key, v, e->min, e->max);
        return -1;
    }
    if (e->type == T_BYTES)
        *(size_t *)(base + e->off) = (size_t)n;
    else
        *(long *)(base + e->off) = (long)n;
    return 0;
bad:
    snprintf(err, errlen, "%s: cannot parse \"%s\"", e->key, v);
    return -1;
}

void pt_config_defaults(pt_config *c)
{
    char err[256];
    memset(c, 0, sizeof(*c));
    for (size_t i = 0; i < NENTRIES; i++)
        set_value(c, &table[i], table[i].def, err, sizeof(err));
}

void pt_config_free(pt_config *c)
{
    for (size_t i = 0; i < NENTRIES; i++) {
        if (table[i].type == T_STR) {
            char **slot = (char **)((char *)c + table[i].off);
            free(*slot);
            *slot = NULL;
        }
    }
}

int pt_config_set_flag(pt_config *c, const char *flag, const char *value, char *err,
                       size_t errlen)
{
    for (size_t i = 0; i < NENTRIES; i++)
        if (strcmp(table[i].flag, flag) == 0)
            return set_value(c, &table[i], value, err, errlen);
    snprintf(err, errlen, "unknown flag --%s", flag);
    return -1;
}

static int set_key(pt_config *c, const char *key, const char *value, char *err, size_t errlen)
{
    for (size_t i = 0; i < NENTRIES; i++)
        if (strcmp(table[i].key, key) == 0)
            return set_value(c, &table[i], value, err, errlen);
    snprintf(err, errlen, "unknown configuration key \"%s\"", key);
    return -1;
}

#define MAX_DEPTH 8
#define MAX_KEY 256

int pt_config_load_yaml(pt_config *c, const char *buf, size_t len, char *err, size_t errlen)
{
    yaml_parser_t p;
    yaml_event_t ev;
    /* Path of mapping keys; expect_key[d] says whether the next scalar at depth d is a key. */
    char path[MAX_DEPTH][MAX_KEY];
    int expect_key[MAX_DEPTH + 1];
    int depth = 0, rv = 0, done = 0;

    if (!yaml_parser_initialize(&p)) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    yaml_parser_set_input_string(&p, (const unsigned char *)buf, len);
    while (!done) {
        if (!yaml_parser_parse(&p, &ev)) {
            snprintf(err, errlen, "YAML error at line %zu: %s", p.problem_mark.line + 1,
                     p.problem ? p.problem : "syntax");
            rv = -1;
            break;
        }
        switch (ev.type) {
        case YAML_STREAM_END_EVENT:
            done = 1;
            break;
        case YAML_MAPPING_START_EVENT:
            if (depth >= MAX_DEPTH) {
                snprintf(err, errlen, "configuration nested too deeply");
                rv = -1;
                break;
            }
            if (depth > 0 && expect_key[depth]) {
                snprintf(err, errlen, "line %zu: a mapping cannot be a key",
                         ev.start_mark.line + 1);
                rv = -1;
                break;
            }
            depth++;
            expect_key[depth] = 1;
            break;
        case YAML_MAPPING_END_EVENT:
            depth--;
            if (depth > 0)
                expect_key[depth] = 1;
            break;
        case YAML_SEQUENCE_START_EVENT:
            snprintf(err, errlen, "line %zu: lists are not used in this configuration",
                     ev.start_mark.line + 1);
            rv = -1;
            break;
        case YAML_ALIAS_EVENT:
            snprintf(err, errlen, "line %zu: aliases are not supported", ev.start_mark.line + 1);
            rv = -1;
            break;
        case YAML_SCALAR_EVENT: {
            const char *v = (const char *)ev.data.scalar.value;
            if (depth == 0) {
                /* An empty document or a bare scalar: only an empty file is fine. */
                if (ev.data.scalar.length) {
                    snprintf(err, errlen, "the configuration must be a mapping");
                    rv = -1;
                }
                break;
            }
            if (expect_key[depth]) {
                if (ev.data.scalar.length >= MAX_KEY) {
                    snprintf(err, errlen, "line %zu: key too long", ev.start_mark.line + 1);
                    rv = -1;
                    break;
                }
                memcpy(path[depth - 1], v, ev.data.scalar.length + 1);
                expect_key[depth] = 0;
            } else {
                char key[MAX_DEPTH * MAX_KEY];
                size_t o = 0;
                for (int i = 0; i < depth; i++)
                    o += (size_t)snprintf(key + o, sizeof(key) - o, "%s%s", i ? "." : "", path[i]);
                if (set_key(c, key, v, err, errlen) != 0)
                    rv = -1;
                expect_key[depth] = 1;
            }
            break;
        }
        default:
            break;
        }
        yaml_event_delete(&ev);
        if (rv)
            break;
    }
    yaml_parser_delete(&p);
    return rv;
}

int pt_config_load_file(pt_config *c, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "%s: %s", path, strerror(errno));
        return -1;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rv = -1;
    for (;;) {
        if (len == cap) {
            if (cap > 16 * 1024 * 1024) {
                snprintf(err, errlen, "%s: file too large", path);
                goto out;
            }
            cap = cap ? cap * 2 : 4096;
            char *nb = realloc(buf, cap);
            if (!nb)
                goto out;
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    char inner[384];
    rv = pt_config_load_yaml(c, buf ? buf : "", len, inner, sizeof(inner));
    if (rv)
        snprintf(err, errlen, "%s: %s", path, inner);
out:
    free(buf);
    fclose(f);
    return rv;
}

void pt_config_usage(FILE *f, const char *argv0)
{
    fprintf(f, "usage: %s [flags]\n       %s init [flags]   (create tables on backends that need it)\n\n"
               "Prometheus remote storage adapter on a wide-column store.\n\nFlags:\n"
               "  --help                 Show this help.\n"
               "  --version              Show the version.\n"
               "  --config.file=FILE     YAML configuration file (keys below, dotted = nested).\n",
            argv0, argv0);
    for (size_t i = 0; i < NENTRIES; i++)
        fprintf(f, "  --%s=%s\n      %s (YAML: %s)\n", table[i].flag,
                table[i].def[0] ? table[i].def : "\"\"", table[i].help, table[i].key);
}
