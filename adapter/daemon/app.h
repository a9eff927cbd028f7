/* Routes and handlers: the only code that sees both HTTP requests and the store. */
#ifndef PT_APP_H
#define PT_APP_H

#include <stdatomic.h>

#include "config.h"
#include "decode.h"
#include "ha.h"
#include "http.h"
#include "store.h"
#include "tenant.h"

typedef struct pt_app {
    const pt_config *cfg;
    pt_store store; /* store.ha: ha's hooks (pt_ha_store_hooks) */
    pt_ha *ha;      /* ha.enabled: the HA pairs' tracker; NULL when off */
    pt_server *srv;  /* for the connection gauge; may be NULL in tests */
    pt_decode_limits lim;
    /* Credentials the write and read routes demand (NULL: none). Either a bearer token, or
     * the expected "user:password" of basic auth. */
    const char *bearer_token;
    const char *basic_credentials;
    /* A route's own credentials, [0] write and [1] read (web.write_*, web.read_*): when
     * either is set they replace the shared ones above for that route. */
    struct pt_app_creds {
        const char *bearer_token;
        const char *basic_credentials;
    } route_creds[2];
    _Atomic int ready;
    /* tenancy.enabled: the tenants (limits, counters); NULL when tenancy is off. */
    pt_tenants *tenants;
} pt_app;

/*
 * What a request of a store route works on, passed to its handler: the store (the
 * tenant's view of app->store with tenancy on, else app->store itself) and the tenant.
 * With tenancy on, the handler of a write, read or browsing request runs only with a
 * valid tenant: tenant is its id (from the tenancy.header header, NUL-terminated) and tn
 * its limits and counters. Without tenancy, tenant is "" and tn NULL.
 */
typedef struct pt_ctx {
    pt_app *app;
    pt_store *store;
    const char *tenant;
    pt_tenant *tn;
} pt_ctx;

/* Reads the credential files named in cfg into app (malloc'd; freed by pt_app_free_auth).
 * Returns 0, or -1 with err set. */
int pt_app_load_auth(pt_app *app, const pt_config *cfg, char *err, size_t errlen);
void pt_app_free_auth(pt_app *app);

/* The pt_dispatch_fn of the daemon (ud = pt_app *). */
/* pt_server_opts.on_loop: 1 for the routes answered without the store (health,
 * readiness, metrics, 404/405). */
int pt_app_on_loop(void *ud, const pt_req *req);
/* pt_server_opts.heavy: 1 for remote reads, which may not take the last worker. */
int pt_app_heavy(void *ud, const pt_req *req);
void pt_app_dispatch(void *ud, pt_req *req, pt_resp *resp);
/* pt_server_opts.admit: the route, method, credentials and tenant header of a request
 * whose body has not been read yet; 0, or resp holds the refusal. */
int pt_app_admit(void *ud, pt_req *req, pt_resp *resp);

#endif
