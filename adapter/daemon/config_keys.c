/* The daemon's configuration keys: name, type, default, bounds, field and help string of
 * each (config_int.h). Parsing, validation and --help are config.c's; each backend brings
 * its own fragment (storage.<backend>.*) in its ops table. */
#include <limits.h>
#include <stddef.h>

#include "config_int.h"

#define F(field) offsetof(pt_config, field)
#define MiB (1024LL * 1024)

/* The daemon's own keys; each backend adds its fragment under storage.<backend>. */
const pt_conf_key pt_config_keys[] = {
    {"web.listen_address", NULL, PT_CONF_ADDR, ":9201", 0, 65535, F(listen_address),
     "Address to listen on for remote write/read, metrics and health (port 0 = any free)."},
    {"web.tls_cert_file", NULL, PT_CONF_FILE, "", 0, 0, F(tls_cert_file),
     "TLS certificate (PEM). With the key: TLS only, ALPN h2 and http/1.1."},
    {"web.tls_key_file", NULL, PT_CONF_FILE, "", 0, 0, F(tls_key_file), "TLS private key (PEM)."},
    {"web.bearer_token_file", NULL, PT_CONF_FILE, "", 0, 0, F(bearer_token_file),
     "File holding a token: write, read and the browsing API then need \"Authorization: "
     "Bearer <token>\" (401 otherwise)."},
    {"web.basic_auth_username", NULL, PT_CONF_STR, "", 0, 0, F(basic_auth_username),
     "With the password file: write, read and the browsing API need this basic auth."},
    {"web.basic_auth_password_file", NULL, PT_CONF_FILE, "", 0, 0, F(basic_auth_password_file),
     "File holding the basic auth password."},
    /* Client certificates, credentials per route (docs/operations.md, Security). */
    {"web.tls_client_ca_file", NULL, PT_CONF_FILE, "", 0, 0, F(tls_client_ca_file),
     "CA certificates (PEM): with TLS, every client must present a certificate they sign."},
    {"web.write_bearer_token_file", NULL, PT_CONF_FILE, "", 0, 0, F(write_bearer_token_file),
     "Token for remote write only; write's own credentials replace the shared ones."},
    {"web.write_basic_auth_username", NULL, PT_CONF_STR, "", 0, 0, F(write_basic_auth_username),
     "With the write password file: basic auth for remote write only."},
    {"web.write_basic_auth_password_file", NULL, PT_CONF_FILE, "", 0, 0,
     F(write_basic_auth_password_file), "File holding the remote write basic auth password."},
    {"web.read_bearer_token_file", NULL, PT_CONF_FILE, "", 0, 0, F(read_bearer_token_file),
     "Token for remote read and the browsing API only; read's own credentials replace the "
     "shared ones."},
    {"web.read_basic_auth_username", NULL, PT_CONF_STR, "", 0, 0, F(read_basic_auth_username),
     "With the read password file: basic auth for remote read and the browsing API only."},
    {"web.read_basic_auth_password_file", NULL, PT_CONF_FILE, "", 0, 0,
     F(read_basic_auth_password_file), "File holding the remote read basic auth password."},
    {"web.workers", NULL, PT_CONF_LONG, "0", 0, 256, F(workers),
     "Worker threads running requests (0 = 2 per CPU the process may run on: its affinity, "
     "as taskset or a container's cpuset sets it)."},
    {"web.max_connections", NULL, PT_CONF_LONG, "4096", 1, 1000000, F(max_connections),
     "Open client connections at most."},
    {"web.idle_timeout", NULL, PT_CONF_DURATION, "5m", 0, 86400000LL, F(idle_timeout_ms),
     "Close a connection on which no byte moved this long while none of its requests is "
     "being processed, whatever HTTP/2 streams it has open (0 = never)."},
    {"web.max_body_bytes", NULL, PT_CONF_BYTES, "32MiB", 1024, 1024 * MiB, F(max_body_bytes),
     "Largest compressed request body; larger gets 413."},
    {"web.max_body_memory", NULL, PT_CONF_BYTES, "1GiB", MiB, 1048576 * MiB, F(max_body_memory),
     "Request bodies held in memory at once over all connections and HTTP/2 streams; a body "
     "that would pass it gets 503 (Prometheus retries)."},
    {"web.max_decoded_bytes", NULL, PT_CONF_BYTES, "64MiB", 1024, 4096 * MiB,
     F(max_decoded_bytes), "Largest declared snappy-decoded size; larger gets 413."},
    {"web.max_request_memory", NULL, PT_CONF_BYTES, "512MiB", MiB, 65536 * MiB,
     F(max_request_memory), "Memory one request may use to decode and answer; over it 413."},
    /* Overload: past these a request gets 503 with Retry-After (docs/operations.md, Overload). */
    {"web.max_inflight_requests", NULL, PT_CONF_LONG, "128", 1, 1000000, F(max_inflight_requests),
     "Requests queued for or running on workers at once; a complete request past it gets 503 "
     "with Retry-After without being run."},
    {"web.max_connection_body_memory", NULL, PT_CONF_BYTES, "64MiB", MiB, 1048576 * MiB,
     F(max_connection_body_memory),
     "Request bodies one connection (all its HTTP/2 streams) holds at once; past it 503 "
     "(at least web.max_body_bytes, at most web.max_body_memory)."},
    {"web.overload_retry_after", NULL, PT_CONF_DURATION, "1s", 1000, 3600000LL,
     F(overload_retry_after_ms), "Retry-After of a 503 for overload (whole seconds, rounded up)."},
    /* Hostile clients: deadlines and what one connection may hold (docs/operations.md,
     * Hostile clients). */
    {"web.header_timeout", NULL, PT_CONF_DURATION, "30s", 0, 3600000LL, F(header_timeout_ms),
     "A request's headers (a new connection's first: from its accept) must be complete this "
     "long after their first byte; past it 408 and the connection closes (0 = never)."},
    {"web.body_timeout", NULL, PT_CONF_DURATION, "30s", 0, 3600000LL, F(body_timeout_ms),
     "A request body that moves no byte this long is ended (HTTP/1.1: 408 and close; "
     "HTTP/2: the stream is reset) (0 = never)."},
    {"web.body_min_rate", NULL, PT_CONF_BYTES, "1KiB", 0, 1024 * MiB, F(body_min_rate),
     "Bytes a second a request body must average once web.body_timeout has passed since its "
     "headers; slower is ended like a stalled body (0 = no minimum)."},
    {"web.write_timeout", NULL, PT_CONF_DURATION, "1m", 0, 3600000LL, F(write_timeout_ms),
     "An answer the client reads nothing of this long (HTTP/2: its window stays shut) ends "
     "its stream or connection (0 = never)."},
    {"web.reserved_connections", NULL, PT_CONF_LONG, "4", 1, 1000, F(reserved_connections),
     "Connections accepted past web.max_connections for /-/healthy, /-/ready and /metrics "
     "only (one request each, within 2s)."},
    {"web.max_connection_body_streams", NULL, PT_CONF_LONG, "100", 1, 100,
     F(max_connection_body_streams),
     "HTTP/2 streams of one connection receiving a body at once; more get 503 on their "
     "stream before their body. The default is the 100 concurrent streams every HTTP/2 "
     "connection is offered, so a client that keeps to them never meets it."},
    {"web.max_connection_response_memory", NULL, PT_CONF_BYTES, "256MiB", MiB, 1048576 * MiB,
     F(max_connection_response_memory),
     "Answers one connection holds unread; past it its new requests get 503."},
    {"web.max_response_memory", NULL, PT_CONF_BYTES, "1GiB", MiB, 1048576 * MiB,
     F(max_response_memory), "Answers all connections hold unread; past it new requests get 503."},
    {"web.enable_admin_api", NULL, PT_CONF_BOOL, "false", 0, 0, F(enable_admin_api),
     "Serve POST /api/v1/admin/tsdb/snapshot (the embedded store's snapshots), with the "
     "write credentials (web.write_* or the shared ones)."},
    {"web.metrics_auth", NULL, PT_CONF_BOOL, "false", 0, 0, F(metrics_auth),
     "/metrics demands the read credentials (web.read_* or the shared ones) too: it names "
     "tenants and HA pairs."},
    /* Label limits (docs/operations.md, Label limits); Prometheus' own scrape limits and
     * Mimir's ingester limits are of this kind. */
    {"write.max_label_name_length", NULL, PT_CONF_BYTES, "1KiB", 0, MiB,
     F(write_max_label_name_length),
     "Longest label name a series may have; a series with a longer one gets 400 naming "
     "it, the rest stored (0 = no limit)."},
    {"write.max_label_value_length", NULL, PT_CONF_BYTES, "16KiB", 0, 64 * MiB,
     F(write_max_label_value_length),
     "Longest label value a series may have; a series with a longer one gets 400 naming "
     "it, the rest stored (0 = no limit)."},
    {"write.max_labels_per_series", NULL, PT_CONF_LONG, "128", 0, 1000000,
     F(write_max_labels_per_series),
     "Labels a series may have (__name__ included); a series with more gets 400, the rest "
     "stored (0 = no limit)."},
    {"storage.backend", NULL, PT_CONF_ENUM, "embedded|bigtable", 0, 0, F(backend),
     "Where samples go: embedded = RocksDB in storage.embedded.path, bigtable = Bigtable."},
    {"storage.retention", NULL, PT_CONF_DURATION, "0", 0, 100 * 31536000000LL, F(retention_ms),
     "Keep samples this long (0 = forever): reads start at now - retention; embedded: "
     "compactions delete older data; Bigtable: init sets the GC rule."},
    {"storage.retention_rules", NULL, PT_CONF_STR, "", 0, 0, F(retention_rules),
     "Retention per series selector, the first matching rule deciding, others keeping "
     "storage.retention: in YAML a list of {match: SELECTOR, retention: DURATION}; as a "
     "flag one rule a line, \"DURATION SELECTOR\". No rule may be longer than "
     "storage.retention."},
    {"storage.rollups", NULL, PT_CONF_STR, "", 0, 0, F(rollups),
     "Roll-up stages, downsampled copies of the data for long-range reads: in YAML a list "
     "of {resolution: DURATION, retention: DURATION}; as a flag one stage a line, "
     "\"RESOLUTION RETENTION\". A resolution is whole seconds, at least 1m, and divides a "
     "day; a retention of 0 keeps the stage forever, and may be longer than "
     "storage.retention. Served to remote reads that ask (?resolution=auto) when "
     "read.rollups is on."},
    {"storage.rollups_delay", NULL, PT_CONF_DURATION, "10m", 0, 86400000LL,
     F(rollups_delay_ms),
     "A roll-up window is built once it ended this long ago; samples that arrive later for "
     "it have it built again."},
    {"index.bucket", NULL, PT_CONF_DURATION, "1d", 3600000LL, 49LL * 86400000LL,
     F(index_bucket_ms), "Index bucket length: series are listed per bucket."},
    {"index.cache_entries", NULL, PT_CONF_LONG, "4000000", 1024, 1000000000LL,
     F(index_cache_entries),
     "(series, bucket) pairs and label values rows remembered as indexed (about 22 to 43 "
     "bytes each)."},
    {"read.max_series", NULL, PT_CONF_LONG, "500000", 0, LONG_MAX, F(read_max_series),
     "Series one remote read query may return (0 = no limit)."},
    {"read.rollups", NULL, PT_CONF_BOOL, "false", 0, 0, F(read_rollups),
     "Answer remote reads that ask for it (the read URL's ?resolution=auto) from a "
     "storage.rollups stage wherever a query's hints allow (docs/http-api.md)."},
    {"read.max_samples", NULL, PT_CONF_LONG, "50000000", 0, LONG_MAX, F(read_max_samples),
     "Samples one remote read query may return (0 = no limit)."},
    {"read.timeout", NULL, PT_CONF_DURATION, "2m", 0, 86400000LL, F(read_timeout_ms),
     "A remote read running longer ends with 503 naming this setting (0 = no deadline); "
     "Prometheus' own remote read timeout is 1m."},
    {"read.max_matchers", NULL, PT_CONF_LONG, "1000", 0, 1000000000LL, F(read_max_matchers),
     "Label matchers one remote read or API request may carry, over all its queries or "
     "match[] selectors (0 = no limit); past it 400, before any is compiled."},
    {"read.regex_match_limit", NULL, PT_CONF_LONG, "1000000", 1000, 4294967295LL,
     F(read_regex_match_limit),
     "Steps a regex matcher may take on one label value (PCRE2's match limit); past it the "
     "query ends with 422 naming the matcher."},
    {"read.regex_heap_limit", NULL, PT_CONF_BYTES, "8MiB", 65536, 1024 * MiB,
     F(read_regex_heap_limit),
     "Backtracking memory a regex matcher may use on one label value (PCRE2's heap limit); "
     "past it 422."},
    {"read.series_cache", NULL, PT_CONF_BYTES, "64MiB", 0, 1048576 * MiB, F(read_series_cache),
     "Memory for series rows read before, so a reference resolves without a seek (embedded "
     "store only; 0 = none)."},
    {"read.list_cache", NULL, PT_CONF_BYTES, "16MiB", 0, 1048576 * MiB, F(read_list_cache),
     "Memory for index lists read before, so a repeated selector lists its candidates "
     "without a scan (embedded store only; 0 = none)."},
    {"api.max_results", NULL, PT_CONF_LONG, "100000", 1, 100000000LL, F(api_max_results),
     "Most label names, label values, series or metric families one /api/v1/labels, "
     "label values, series or metadata request answers (past it: truncated with a warning, "
     "or 422 for match[] selecting more series)."},
    /* Tenants (docs/operations.md, Tenants). */
    {"tenancy.enabled", NULL, PT_CONF_BOOL, "false", 0, 0, F(tenancy_enabled),
     "Multi-tenancy: writes, reads and the browsing API need a tenant id header; each "
     "tenant has its own series."},
    {"tenancy.header", NULL, PT_CONF_STR, "X-Scope-OrgID", 0, 0, F(tenancy_header),
     "The header naming the tenant: an HTTP field name, not one promtable reads for itself "
     "(Authorization, Content-Type, ...)."},
    {"tenancy.max_series", NULL, PT_CONF_LONG, "0", 0, 1000000000LL, F(tenancy_max_series),
     "Active series per tenant (distinct series written in the current index bucket); "
     "past it new series get 429 (0 = no limit)."},
    {"tenancy.max_samples_per_second", NULL, PT_CONF_LONG, "0", 0, 1000000000000LL,
     F(tenancy_max_samples_per_second),
     "Samples, histograms and exemplars per second per tenant; past it 429 (0 = no limit)."},
    {"tenancy.max_tenants", NULL, PT_CONF_LONG, "10000", 1, 1000000, F(tenancy_max_tenants),
     "Tenants kept at once (only a write makes one); a new one past it replaces one idle for "
     "an index bucket, else gets 429."},
    {"tenancy.metrics_tenants", NULL, PT_CONF_LONG, "100", 0, 10000, F(tenancy_metrics_tenants),
     "Tenants with their own tenant label values on /metrics; the others are summed as "
     "tenant=\"~other\"."},
    /* HA pairs (docs/operations.md, HA pairs). */
    {"ha.enabled", NULL, PT_CONF_BOOL, "false", 0, 1, F(ha_enabled),
     "Deduplicate HA pairs: per cluster label value, store only the elected replica's samples "
     "(the others are answered 2xx and dropped) and remove the replica label."},
    {"ha.cluster_label", NULL, PT_CONF_STR, "cluster", 0, 0, F(ha_cluster_label),
     "Label naming an HA pair's cluster (kept when stored)."},
    {"ha.replica_label", NULL, PT_CONF_STR, "__replica__", 0, 0, F(ha_replica_label),
     "Label naming the replica within the cluster (removed before storing)."},
    {"ha.failover_timeout", NULL, PT_CONF_DURATION, "30s", 100, 86400000LL,
     F(ha_failover_timeout_ms),
     "Elect another replica when the elected one has sent nothing for longer than this."},
    {"ha.update_interval", NULL, PT_CONF_DURATION, "15s", 0, 3600000LL, F(ha_update_interval_ms),
     "Bigtable: the elected replica's lease row is refreshed (another replica's re-read) at "
     "most this often; less than ha.failover_timeout (0 = at every write)."},
    {"ha.max_clusters", NULL, PT_CONF_LONG, "1000", 1, 1000000, F(ha_max_clusters),
     "HA (tenant, cluster) pairs tracked at most (about 2 KiB each); a series of a new one "
     "past it gets 429 (pairs idle longer than ha.failover_timeout are forgotten to make room)."},
    {"ha.max_clusters_per_tenant", NULL, PT_CONF_LONG, "100", 1, 1000000,
     F(ha_max_clusters_per_tenant),
     "With tenancy: HA pairs one tenant may have tracked at most; past it 429."},
    {"log.level", NULL, PT_CONF_ENUM, "info|debug|warn|error", 0, 0, F(log_level),
     "Log level (logfmt on stderr)."},
};

const size_t pt_config_nkeys = sizeof(pt_config_keys) / sizeof(pt_config_keys[0]);
