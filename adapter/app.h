/* Routes and handlers: the only code that sees both HTTP requests and the store. */
#ifndef PT_APP_H
#define PT_APP_H

#include <stdatomic.h>

#include "config.h"
#include "decode.h"
#include "http.h"
#include "store.h"

typedef struct pt_app {
    const pt_config *cfg;
    pt_store store;
    pt_server *srv;  /* for the connection gauge; may be NULL in tests */
    pt_decode_limits lim;
    _Atomic int ready;
} pt_app;

/* The pt_dispatch_fn of the daemon (ud = pt_app *). */
void pt_app_dispatch(void *ud, pt_req *req, pt_resp *resp);

#endif
