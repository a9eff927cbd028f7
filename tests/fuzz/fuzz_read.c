/* libFuzzer: a remote read body through snappy, protobuf and matcher compilation. */
#include <stdint.h>

#include "decode.h"
#include "matcher.h"
#include "store.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    pt_arena a;
    pt_arena_init(&a, 4096, 64u << 20);
    pt_decode_limits lim = {8u << 20};
    char msg[PT_MSG_MAX];
    pt_read_request rr;
    pt_matcher_env env;
    if (pt_decode_read(data, size, &lim, &a, &rr, msg, sizeof(msg)) == 0 &&
        pt_matcher_env_init(&env, &a, 100000, 1u << 20, 32) == 0) {
        for (size_t i = 0; i < rr.nqueries && i < 4; i++) {
            const pt_query *q = &rr.queries[i];
            for (size_t j = 0; j < q->nms && j < 8; j++) {
                pt_matcher m;
                const pt_query_matcher *lm = &q->ms[j];
                if (pt_matcher_init(&m, lm->type, lm->name, lm->value, &env, msg, sizeof(msg)) ==
                    0) {
                    pt_matcher_match(&m, lm->value);
                    pt_matcher_free(&m);
                }
            }
        }
        pt_matcher_env_free(&env);
    }
    pt_arena_free(&a);
    return 0;
}
