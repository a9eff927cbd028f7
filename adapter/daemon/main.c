/* promtable: flags and configuration, backend, HTTP server, signals. */
#include <malloc.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app.h"
#include "backend.h"
#include "check.h"
#include "config.h"
#include "copy.h"
#include "delete.h"
#include "error.h"
#include "ha.h"
#include "log.h"
#include "metrics.h"
#include "promql.h"
#include "retention.h"
#include "rollups.h"

/* Applies --config.file first, then every other flag over it. */
/* Subcommands: none runs the server. */
enum { CMD_SERVE, CMD_INIT, CMD_CHECK, CMD_SNAPSHOT, CMD_DELETE };

static int is_bool_word(const char *s)
{
    static const char *const words[] = {"true", "false", "1", "0", "yes", "no"};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (strcmp(s, words[i]) == 0)
            return 1;
    return 0;
}

/* `promtable delete`'s own arguments (in parse_args' first pass): its selectors, --start,
 * --end, --tenant. 1 when argv[*i] was one (*i moved past a flag's value), 0 when not, -1
 * on an error. */
static int delete_arg(int argc, char **argv, int *i, pt_delete_args *d, const char **sel)
{
    const char *a = argv[*i];
    if (strncmp(a, "--", 2) != 0) {
        sel[d->nselectors++] = a;
        return 1;
    }
    static const char *const own[] = {"--start", "--end", "--tenant"};
    for (int k = 0; k < 3; k++) {
        size_t n = strlen(own[k]);
        if (strncmp(a, own[k], n) != 0 || (a[n] != '=' && a[n] != '\0'))
            continue;
        const char *v = a[n] == '=' ? a + n + 1 : *i + 1 < argc ? argv[++*i] : NULL;
        if (!v) {
            fprintf(stderr, "promtable: %s needs a value\n", own[k]);
            return -1;
        }
        if (k == 2) {
            d->tenant = v;
        } else if (pt_api_time(v, k ? &d->end : &d->start) != 0) {
            fprintf(stderr, "promtable: %s: cannot parse \"%s\" (Unix seconds or RFC 3339)\n",
                    own[k], v);
            return -1;
        }
        return 1;
    }
    return 0;
}

/* dir: `promtable snapshot DIR`'s directory; d: `promtable delete`'s arguments, sel room
 * for argc selectors. */
static int parse_args(int argc, char **argv, pt_config *cfg, int *cmd, const char **dir,
                      pt_delete_args *d, const char **sel)
{
    char err[512];
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 1; i < argc; i++) {
            const char *a = argv[i];
            if (strcmp(a, "init") == 0 || strcmp(a, "check") == 0) {
                *cmd = a[0] == 'i' ? CMD_INIT : CMD_CHECK;
                continue;
            }
            if (strcmp(a, "delete") == 0 && *cmd == CMD_SERVE) {
                *cmd = CMD_DELETE;
                continue;
            }
            if (*cmd == CMD_DELETE) {
                /* The second pass only steps over them, into a scratch copy. */
                pt_delete_args scratch = *d;
                int r = delete_arg(argc, argv, &i, pass ? &scratch : d, sel + (pass ? argc : 0));
                if (r < 0)
                    return -1;
                if (r > 0)
                    continue;
            }
            if (strcmp(a, "snapshot") == 0 && (*cmd == CMD_SERVE || *cmd == CMD_SNAPSHOT) &&
                (!*dir || *dir != a)) {
                *cmd = CMD_SNAPSHOT;
                continue;
            }
            if (*cmd == CMD_SNAPSHOT && (!*dir || *dir == a) && strncmp(a, "--", 2) != 0) {
                *dir = a; /* the first argument after it that is no flag */
                continue;
            }
            if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
                pt_config_usage(stdout, argv[0]);
                exit(0);
            }
            if (strcmp(a, "--help=markdown") == 0) {
                pt_config_usage_markdown(stdout);
                exit(0);
            }
            if (strcmp(a, "--version") == 0) {
                printf("promtable %s\n", PT_VERSION);
                exit(0);
            }
            if (strncmp(a, "--", 2) != 0) {
                fprintf(stderr, "promtable: unexpected argument \"%s\" (see --help)\n", a);
                return -1;
            }
            char name[256];
            const char *eq = strchr(a + 2, '='), *value;
            size_t nl = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            if (nl >= sizeof(name)) {
                fprintf(stderr, "promtable: flag too long\n");
                return -1;
            }
            memcpy(name, a + 2, nl);
            name[nl] = '\0';
            if (eq) {
                value = eq + 1;
            } else if (pt_config_flag_is_bool(name) &&
                       !is_bool_word(i + 1 < argc ? argv[i + 1] : "")) {
                value = "true"; /* a boolean flag alone: --ha.enabled */
            } else if (i + 1 < argc) {
                value = argv[++i];
            } else {
                fprintf(stderr, "promtable: flag --%s needs a value\n", name);
                return -1;
            }
            int is_file = strcmp(name, "config.file") == 0;
            if (pass == 0 && is_file) {
                if (pt_config_load_file(cfg, value, err, sizeof(err)) != 0) {
                    fprintf(stderr, "promtable: %s\n", err);
                    return -1;
                }
            } else if (pass == 1 && !is_file) {
                if (pt_config_set_flag(cfg, name, value, err, sizeof(err)) != 0) {
                    fprintf(stderr, "promtable: %s\n", err);
                    return -1;
                }
            }
        }
    }
    return 0;
}

/* `promtable snapshot DIR`: a snapshot of the store (not open in a running promtable:
 * that one is asked over HTTP) made in the new directory DIR. The exit status. */
static int snapshot_main(pt_backend *be, const char *dir, FILE *out)
{
    char err[512] = "";
    if (!be->ops->snapshot) {
        fprintf(stderr, "promtable: the %s backend makes no snapshots: use its own backups\n",
                be->ops->name);
        return 1;
    }
    /* A path (with a '/'), not a name among the store's own snapshots. */
    char path[4096];
    snprintf(path, sizeof(path), "%s%s", strchr(dir, '/') ? "" : "./", dir);
    if (be->ops->snapshot(be->state, path, 1, err, sizeof(err)) != 0) {
        fprintf(stderr, "promtable: snapshot failed: %s\n", err);
        return 1;
    }
    fprintf(out, "snapshot made in %s\n", dir);
    return 0;
}

/* The CPUs this process may run on (taskset, a container's cpuset), not every CPU online:
 * workers beyond what the CPUs run only wait, some of them holding a lock another needs. */
static long usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

/* glibc serves a large allocation from its heap once a block of that size has been freed
 * (the mmap threshold rises to it, up to 32 MiB). The big short-lived blocks here --
 * RocksDB's table-file buffers, the head's growing tables -- then leave holes its heaps
 * keep, a large share of the resident memory under pod churn. A fixed threshold gives
 * every block past it its own mapping, returned when freed (requests' large pieces stay
 * pooled: base/arena.c); docs/benchmarks.md, "Why the embedded store's settings", has the
 * figures. An operator's own MALLOC_MMAP_THRESHOLD_ or GLIBC_TUNABLES is left alone. */
static void large_blocks_mapped(void)
{
#ifdef M_MMAP_THRESHOLD
    const char *t = getenv("GLIBC_TUNABLES");
    if (getenv("MALLOC_MMAP_THRESHOLD_") || (t && strstr(t, "mmap_threshold")))
        return;
    mallopt(M_MMAP_THRESHOLD, 128 << 10);
#endif
}

int main(int argc, char **argv)
{
    pt_config cfg;
    int cmd = CMD_SERVE, status = 1;
    char err[512] = "";
    pt_backend be = {0};
    pt_retention_rules *rules = NULL;
    const char **sel = NULL; /* promtable delete's selectors */
    pt_delete_args del = {.start = -PT_API_TIME_LIMIT_MS, .end = PT_API_TIME_LIMIT_MS};
    pt_server *srv = NULL;

    large_blocks_mapped();
    /* `promtable copy` takes two configuration files, not the daemon's flags. */
    if (argc > 1 && strcmp(argv[1], "copy") == 0)
        return pt_copy_main(argc - 1, argv + 1, stdout);
    if (pt_config_defaults(&cfg) != 0) {
        fprintf(stderr, "promtable: out of memory\n");
        goto fail_config;
    }
    const char *snap_dir = NULL;
    sel = calloc(2 * (size_t)argc + 1, sizeof(*sel));
    del.selectors = sel;
    if (!sel || parse_args(argc, argv, &cfg, &cmd, &snap_dir, &del, sel) != 0)
        goto fail_config;
    if (cmd == CMD_DELETE && del.nselectors == 0) {
        fprintf(stderr, "promtable: delete needs a series selector (promtable delete "
                        "'{job=\"x\"}' [--start T] [--end T] [--tenant ID] [flags])\n");
        goto fail_config;
    }
    if (cmd == CMD_SNAPSHOT && !snap_dir) {
        fprintf(stderr, "promtable: snapshot needs the directory to make (promtable snapshot "
                        "DIR [flags])\n");
        goto fail_config;
    }
    if (pt_config_check(&cfg, err, sizeof(err)) != 0) {
        fprintf(stderr, "promtable: %s\n", err);
        goto fail_config;
    }
    if (pt_log_set_level(cfg.log_level) != 0) {
        fprintf(stderr, "promtable: unknown log.level \"%s\"\n", cfg.log_level);
        goto fail_config;
    }

    const pt_backend_ops *ops = pt_backend_find(cfg.backend);
    if (!ops) {
        fprintf(stderr, "promtable: unknown storage.backend \"%s\"\n", cfg.backend);
        goto fail_config;
    }
    if (ops->caps & PT_BACKEND_CAP_TEST) {
        fprintf(stderr, "promtable: storage.backend \"%s\" is for tests only\n", cfg.backend);
        goto fail_config;
    }
    pt_rollup_stage stages[PT_ROLLUP_MAX_STAGES];
    size_t nstages = 0;
    if (pt_rollups_parse(cfg.rollups, stages, &nstages, err, sizeof(err)) != 0) {
        fprintf(stderr, "promtable: %s\n", err);
        goto fail_config;
    }
    /* The backend keeps what the longest stage needs (its rows and the index that finds
     * them); the raw rows go at storage.retention through keep_row_ms. */
    int64_t longest = pt_retention_longest(cfg.retention_ms, stages, nstages);
    pt_backend_config bc = {
        .own = pt_config_backend(&cfg, ops),
        .retention_seconds = (longest + 999) / 1000,
        .index_span_ms = cfg.index_bucket_ms,
        .retention_dropped = &pt_m.retention_dropped,
        .direct = cmd == CMD_INIT,
        .no_background = cmd == CMD_CHECK || cmd == CMD_DELETE,
    };
    if (pt_retention_rules_parse(cfg.retention_rules, cfg.retention_ms, stages, nstages,
                                 (uint32_t)cfg.read_regex_match_limit, cfg.read_regex_heap_limit,
                                 &rules, err, sizeof(err)) != 0) {
        fprintf(stderr, "promtable: %s\n", err);
        goto fail_config;
    }
    if (rules) {
        bc.keep_row_ms = pt_retention_keep_row;
        bc.keep_ud = rules;
        bc.shortest_keep_ms = pt_retention_rules_shortest(rules);
    }
    if (cmd == CMD_CHECK) {
        status = pt_check_store(&cfg, ops, &bc, stdout);
        goto fail_config;
    }
    int rv = pt_backend_open(&be, ops, &bc, err, sizeof(err));
    if (rv != 0) {
        pt_log(PT_LOG_ERROR, "cannot open storage", "backend=%s err=\"%s\"", cfg.backend, err);
        if (cmd == CMD_SNAPSHOT)
            fprintf(stderr, "promtable: a store a running promtable holds is snapshotted by "
                            "that promtable: POST /api/v1/admin/tsdb/snapshot\n");
        if (cmd == CMD_DELETE)
            fprintf(stderr, "promtable: in a store a running promtable holds, that promtable "
                            "deletes: POST /api/v1/admin/tsdb/delete_series\n");
        goto fail_config;
    }
    if (cmd == CMD_SNAPSHOT) {
        status = snapshot_main(&be, snap_dir, stdout);
        goto fail_backend;
    }
    if (cmd == CMD_DELETE) {
        status = pt_delete_main(&cfg, &be, &del, stdout);
        goto fail_backend;
    }
    if (cmd == CMD_INIT) {
        /* The tables, then the index format row of a new store: a promtable still running
         * against tables made again (a Bigtable instance wiped) writes index rows into
         * them, and without the row the next start would take them for format 1. */
        pt_store fresh = {.be = &be};
        if ((ops->init && ops->init(be.state, err, sizeof(err)) != 0) ||
            pt_store_check_index(&fresh, err, sizeof(err)) != 0) {
            pt_log(PT_LOG_ERROR, "init failed", "backend=%s err=\"%s\"", cfg.backend, err);
            goto fail_backend;
        }
        pt_log(PT_LOG_INFO, "storage initialised", "backend=%s", cfg.backend);
        status = 0;
        goto fail_backend;
    }

    static pt_app app;
    app.cfg = &cfg;
    if (cfg.tenancy_enabled) {
        pt_tenant_limits tl = {
            .max_series = (size_t)cfg.tenancy_max_series,
            .max_samples_per_s = (uint64_t)cfg.tenancy_max_samples_per_second,
            .max_tenants = (size_t)cfg.tenancy_max_tenants,
            .metrics_tenants = (size_t)cfg.tenancy_metrics_tenants,
            .track_max = (size_t)cfg.index_cache_entries,
            .bucket_ms = cfg.index_bucket_ms,
        };
        if (!(app.tenants = pt_tenants_new(&tl))) {
            pt_log_msg(PT_LOG_ERROR, "out of memory for the tenants");
            goto fail_cache;
        }
    }
    /* Only a store no other process writes keeps the series-row and list caches exact. */
    int exclusive = (ops->caps & PT_BACKEND_CAP_EXCLUSIVE) != 0;
    pt_store_caches caches = {
        .index_entries = (size_t)cfg.index_cache_entries,
        .series_bytes = exclusive ? (size_t)cfg.read_series_cache : 0,
        .list_bytes = exclusive ? (size_t)cfg.read_list_cache : 0,
        .hints = 1,
        .exemplars = 1,
        .stats = &pt_m.store,
    };
    if (pt_store_open(&app.store, &be, &caches) != 0) {
        pt_log_msg(PT_LOG_ERROR, "out of memory for the index cache");
        goto fail_cache;
    }
    pt_store *st = &app.store;
    st->index_bucket_ms = cfg.index_bucket_ms;
    st->max_series = (size_t)cfg.read_max_series;
    st->max_samples = (size_t)cfg.read_max_samples;
    st->read_timeout_ms = cfg.read_timeout_ms;
    st->max_matchers = (size_t)cfg.read_max_matchers;
    st->regex_match_limit = (uint32_t)cfg.read_regex_match_limit;
    st->regex_heap_limit = cfg.read_regex_heap_limit;
    st->retention_ms = cfg.retention_ms;
    if (rules) {
        st->keep_ms = pt_retention_keep;
        st->keep_ud = rules;
    }
    static pt_rollup_late late = {.floor = 0, .late = INT64_MAX};
    if (nstages) {
        st->rollups = stages;
        st->nrollups = nstages;
        st->late = &late;
    }
    /* Room for a tenant's prefix in every key (tenant.h). */
    st->key_limit = cfg.tenancy_enabled ? PT_TENANT_KEY_LIMIT : PT_MAX_ROW_KEY;
    st->label_limits = (pt_label_limits){.name_len = cfg.write_max_label_name_length,
                                         .value_len = cfg.write_max_label_value_length,
                                         .labels = (size_t)cfg.write_max_labels_per_series};
    if (cfg.ha_enabled) {
        pt_ha_opts ho = {
            .cluster_label = cfg.ha_cluster_label,
            .replica_label = cfg.ha_replica_label,
            .failover_timeout_ms = cfg.ha_failover_timeout_ms,
            .update_interval_ms = cfg.ha_update_interval_ms,
            .max_clusters = (size_t)cfg.ha_max_clusters,
            .be = &be,
            /* Without tenancy every pair is of the one tenant "". */
            .max_per_tenant = cfg.tenancy_enabled ? (size_t)cfg.ha_max_clusters_per_tenant : 0,
        };
        if (!(app.ha = pt_ha_new(&ho))) {
            pt_log_msg(PT_LOG_ERROR, "out of memory for the HA tracker");
            goto fail_cache;
        }
        app.store.ha = pt_ha_store_hooks(app.ha);
        pt_log(PT_LOG_INFO, "HA pairs deduplicated", "cluster_label=%s replica_label=%s "
               "failover_timeout_ms=%ld election=%s", cfg.ha_cluster_label, cfg.ha_replica_label,
               cfg.ha_failover_timeout_ms, pt_ha_shared(app.ha) ? "lease_rows" : "local");
    }
    app.lim.max_decoded = cfg.max_decoded_bytes;
    rv = pt_store_check_index(&app.store, err, sizeof(err));
    if (rv == PT_EINTERNAL) {
        pt_log(PT_LOG_ERROR, "cannot use this store", "backend=%s err=\"%s\"", cfg.backend, err);
        goto fail_cache;
    }
    if (rv != 0) /* an outage: the store may still be fine; writes and reads report it */
        pt_log(PT_LOG_WARN, "index format not checked", "err=\"%s\"", err);
    if (pt_app_load_auth(&app, &cfg, err, sizeof(err)) != 0) {
        pt_log(PT_LOG_ERROR, "cannot load credentials", "err=\"%s\"", err);
        goto fail_cache;
    }

    long ncpu = usable_cpus();
    pt_server_opts so = {
        .listen_address = cfg.listen_address,
        .workers = cfg.workers ? (int)cfg.workers : (int)(ncpu > 0 ? 2 * ncpu : 4),
        .max_body = cfg.max_body_bytes,
        .max_body_total = cfg.max_body_memory,
        .max_header_bytes = 64 * 1024,
        .max_inflight = (int)cfg.max_inflight_requests,
        .max_conn_body = cfg.max_connection_body_memory,
        .retry_after_s = (int)((cfg.overload_retry_after_ms + 999) / 1000),
        .idle_timeout_ms = (int)cfg.idle_timeout_ms,
        .header_timeout_ms = (int)cfg.header_timeout_ms,
        .body_timeout_ms = (int)cfg.body_timeout_ms,
        .body_min_rate = cfg.body_min_rate,
        .write_timeout_ms = (int)cfg.write_timeout_ms,
        .reserved_connections = (int)cfg.reserved_connections,
        .max_conn_body_streams = (int)cfg.max_connection_body_streams,
        .max_conn_resp = cfg.max_connection_response_memory,
        .max_resp_total = cfg.max_response_memory,
        .admit = pt_app_admit,
        .max_connections = (int)cfg.max_connections,
        .tls_cert_file = cfg.tls_cert_file[0] ? cfg.tls_cert_file : NULL,
        .tls_key_file = cfg.tls_key_file[0] ? cfg.tls_key_file : NULL,
        .tls_client_ca_file = cfg.tls_client_ca_file[0] ? cfg.tls_client_ca_file : NULL,
        .tenant_header = cfg.tenancy_enabled ? cfg.tenancy_header : NULL,
        .on_loop = pt_app_on_loop,
        .heavy = pt_app_heavy,
        .stats = &pt_m.http,
    };
    /* Requests' arena blocks (64 KiB) come back to a pool of at most 32 MiB (arena.h). */
    pt_arena_pool_init(64 << 10, 32u << 20);
    srv = pt_server_new(&so, pt_app_dispatch, &app, err, sizeof(err));
    if (!srv) {
        pt_log(PT_LOG_ERROR, "cannot start the HTTP server", "address=%s err=\"%s\"",
               cfg.listen_address, err);
        goto fail_cache;
    }
    app.srv = srv;
    pt_server_signals(srv);

    pt_rollup_job *job = NULL;
    if (nstages) {
        pt_rollup_job_opts jo = {.store = st,
                                 .tenants = app.tenants,
                                 .stages = stages,
                                 .nstages = nstages,
                                 .delay_ms = cfg.rollups_delay_ms};
        if (!(job = pt_rollup_job_new(&jo)) || pt_rollup_job_run(job) != 0) {
            pt_log_msg(PT_LOG_ERROR, "cannot start the roll-up builder");
            pt_rollup_job_free(job);
            goto fail_server;
        }
    }
    atomic_store(&app.ready, 1);
    pt_log(PT_LOG_INFO, "promtable started", "version=%s address=%s port=%d backend=%s tls=%s",
           PT_VERSION, cfg.listen_address, pt_server_port(srv), cfg.backend,
           so.tls_cert_file ? "true" : "false");
    status = pt_server_run(srv) == 0 ? 0 : 1;
    atomic_store(&app.ready, 0);
    pt_log_msg(PT_LOG_INFO, "promtable stopping: requests finished, closing storage");
    pt_rollup_job_free(job);
fail_server:
    pt_server_signals(NULL);
    pt_server_free(srv);
fail_cache:
    pt_ha_free(app.ha);
    pt_app_free_auth(&app);
    pt_tenants_free(app.tenants);
    pt_store_close(&app.store);
    pt_arena_pool_drain();
fail_backend:
    pt_backend_close(&be);
fail_config:
    free(sel);
    pt_retention_rules_free(rules);
    pt_config_free(&cfg);
    return status;
}
