/*
 * Configuration is one table (config.c) of pt_conf_key entries (base/conf.h), plus the
 * fragment each backend's ops table brings (keys storage.<backend>.*). The same tables
 * parse the YAML file and the flags, print --help and are checked against the example
 * files in configs/ by the tests.
 */
#ifndef PT_CONFIG_H
#define PT_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#include "backend.h"

typedef struct pt_config {
    char *listen_address;
    char *tls_cert_file;
    char *tls_key_file;
    char *bearer_token_file;
    char *basic_auth_username;
    char *basic_auth_password_file;
    char *tls_client_ca_file;
    char *write_bearer_token_file;
    char *write_basic_auth_username;
    char *write_basic_auth_password_file;
    char *read_bearer_token_file;
    char *read_basic_auth_username;
    char *read_basic_auth_password_file;
    long workers;
    long max_connections;
    long idle_timeout_ms;
    size_t max_body_bytes;
    size_t max_body_memory;
    size_t max_decoded_bytes;
    size_t write_max_label_name_length;
    size_t write_max_label_value_length;
    long write_max_labels_per_series;
    size_t max_request_memory;
    long max_inflight_requests;
    size_t max_connection_body_memory;
    long overload_retry_after_ms;
    long header_timeout_ms;
    long body_timeout_ms;
    size_t body_min_rate;
    long write_timeout_ms;
    long reserved_connections;
    long max_connection_body_streams;
    size_t max_connection_response_memory;
    size_t max_response_memory;
    int metrics_auth;
    int enable_admin_api; /* /api/v1/admin/tsdb/snapshot */

    char *backend;
    long retention_ms;
    char *retention_rules; /* storage.retention_rules' text (retention.h); "" = none */
    char *rollups;         /* storage.rollups' text (retention.h, pt_rollups_parse); "" = none */
    long rollups_delay_ms;
    int read_rollups;
    /* Each registered backend's own settings (its ops->conf keys), by registry order. */
    void *backend_conf[PT_MAX_BACKENDS];

    long index_bucket_ms;
    long index_cache_entries;

    long read_max_series;
    long read_max_samples;
    long read_timeout_ms;
    long read_max_matchers;
    long read_regex_match_limit;
    size_t read_regex_heap_limit;
    size_t read_series_cache;
    size_t read_list_cache;

    long api_max_results; /* /api/v1/labels, label values, series, metadata */

    int tenancy_enabled;
    char *tenancy_header;
    long tenancy_max_series;
    long tenancy_max_samples_per_second;
    long tenancy_max_tenants;
    long tenancy_metrics_tenants;
    int ha_enabled;
    char *ha_cluster_label;
    char *ha_replica_label;
    long ha_failover_timeout_ms;
    long ha_update_interval_ms;
    long ha_max_clusters;
    long ha_max_clusters_per_tenant;

    char *log_level;
} pt_config;

/* Fills every field, and every backend's settings, with its default. 0, or -1 when out of
 * memory (pt_config_free still applies). */
int pt_config_defaults(pt_config *c);
/* The settings of backend ops (the struct its ops->conf keys fill), NULL when it has none. */
const void *pt_config_backend(const pt_config *c, const pt_backend_ops *ops);
/* Applies a YAML file; unknown keys and out-of-range values are errors. 0 or -1 (err set). */
int pt_config_load_file(pt_config *c, const char *path, char *err, size_t errlen);
/* Same, from a buffer (tests, fuzzing). */
int pt_config_load_yaml(pt_config *c, const char *buf, size_t len, char *err, size_t errlen);
/* Applies one "--flag=value" / "--flag value" style setting by flag name (without --). */
int pt_config_set_flag(pt_config *c, const char *flag, const char *value, char *err,
                       size_t errlen);
/* 1 when flag (without --) sets a boolean key, which may then stand alone: --ha.enabled. */
int pt_config_flag_is_bool(const char *flag);
/* What flags and YAML cannot check one value at a time, run once all are applied, before
 * anything starts: every file key (of the daemon and of the selected backend) names a
 * readable regular file, and keys that only work together are set together. 0, or -1 with
 * err naming the key. */
int pt_config_check(pt_config *c, char *err, size_t errlen);
/* Calls fn with every key (full dotted name) and its table entry, the daemon's and every
 * backend's, in --help order, until fn returns non-zero; returns that value or 0. */
int pt_config_each_key(int (*fn)(void *ud, const char *key, const pt_conf_key *e), void *ud);
void pt_config_usage(FILE *f, const char *argv0);
/* The keys as one Markdown table (key, flag, default, meaning): docs/configuration.md. */
void pt_config_usage_markdown(FILE *f);
void pt_config_free(pt_config *c);

/* Parses "30s", "5m", "1d", "2w", "1y", "250ms" (Prometheus duration syntax) into ms. */
int pt_parse_duration_ms(const char *s, long *out);
/* Parses "32MiB", "1GB", "4096" into bytes. */
int pt_parse_bytes(const char *s, size_t *out);

#endif
