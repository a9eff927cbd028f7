/* The test tools' reader of a remote read SAMPLES answer saved by curl (rwtool, nhcheck). */
#ifndef PT_TOOLS_READRESP_H
#define PT_TOOLS_READRESP_H

#include <stdio.h>

#include "decode.h"
#include "remote.pb-c.h"

/* Unsnappies and unpacks the ReadResponse in PATH (decoded bytes in a); NULL after saying
 * why on stderr as TOOL. Free with protobuf_c_message_free_unpacked. */
static inline Prometheus__ReadResponse *pt_tool_read_response(const char *tool,
                                                              const char *path, pt_arena *a)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return NULL;
    }
    static uint8_t buf[16 << 20];
    size_t n = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    pt_slice raw;
    char msg[256];
    if (pt_snappy_decode(buf, n, sizeof(buf), a, &raw, msg, sizeof(msg)) != 0) {
        fprintf(stderr, "%s: %s\n", tool, msg);
        return NULL;
    }
    Prometheus__ReadResponse *r = (Prometheus__ReadResponse *)protobuf_c_message_unpack(
        &prometheus__read_response__descriptor, NULL, raw.n, raw.p);
    if (!r)
        fprintf(stderr, "%s: %s is not a ReadResponse\n", tool, path);
    return r;
}

#endif
