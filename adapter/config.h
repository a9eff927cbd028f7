/*
 * Configuration is one table (config.c): YAML key, command-line flag, type, default,
 * bounds, help. The same table parses the YAML file, the flags, prints --help and is
 * checked against the example files in configs/ by the tests.
 */
#ifndef PT_CONFIG_H
#define PT_CONFIG_H

#include <stddef.h>
#include <stdio.h>

typedef struct pt_config {
    char *listen_address;
    char *tls_cert_file;
    char *tls_key_file;
    char *bearer_token_file;
    char *basic_auth_username;
    char *basic_auth_password_file;
    long workers;
    long max_connections;
    long idle_timeout_ms;
    size_t max_body_bytes;
    size_t max_body_memory;
    size_t max_decoded_bytes;
    size_t max_request_memory;

    char *backend;
    char *storage_path;
    int storage_sync;
    size_t head_memory;
    char *table_prefix;
    char *bt_project;
    char *bt_instance;
    char *bt_endpoint;
    long retention_ms;

    long index_bucket_ms;
    long index_cache_entries;

    long read_max_series;
    long read_max_samples;

    char *log_level;
} pt_config;

/* Fills every field with its default. */
void pt_config_defaults(pt_config *c);
/* Applies a YAML file; unknown keys and out-of-range values are errors. 0 or -1 (err set). */
int pt_config_load_file(pt_config *c, const char *path, char *err, size_t errlen);
/* Same, from a buffer (tests, fuzzing). */
int pt_config_load_yaml(pt_config *c, const char *buf, size_t len, char *err, size_t errlen);
/* Applies one "--flag=value" / "--flag value" style setting by flag name (without --). */
int pt_config_set_flag(pt_config *c, const char *flag, const char *value, char *err,
                       size_t errlen);
void pt_config_usage(FILE *f, const char *argv0);
void pt_config_free(pt_config *c);

/* Parses "30s", "5m", "1d", "2w", "1y", "250ms" (Prometheus duration syntax) into ms. */
int pt_parse_duration_ms(const char *s, long *out);
/* Parses "32MiB", "1GB", "4096" into bytes. */
int pt_parse_bytes(const char *s, size_t *out);

#endif
