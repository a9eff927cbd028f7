/* The Bigtable backend's settings, keys storage.bigtable.* (cfg->own at open). */
#ifndef PT_BIGTABLE_H
#define PT_BIGTABLE_H

#include "backend.h"

extern const pt_backend_ops pt_backend_bigtable;

typedef struct pt_bigtable_conf {
    char *project;
    char *instance;
    char *endpoint;     /* emulator host:port; "" = $BIGTABLE_EMULATOR_HOST or Cloud Bigtable */
    char *table_prefix; /* tables are <prefix>points and <prefix>index */
    long read_streams;  /* concurrent ReadRows streams of one scan; <= 0 = the default */
    char *buffer_path;  /* write-back directory; "" = every write goes straight to Bigtable */
    size_t buffer_memory; /* samples held before a flush (the write-back head's budget) */
    long flush_interval_ms; /* longest a sample waits in the write-back buffer */
    int buffer_sync;    /* fdatasync the write-back logs before acknowledging */
    long compaction_interval_ms; /* between compaction passes; 0 = no compaction */
} pt_bigtable_conf;

#endif
