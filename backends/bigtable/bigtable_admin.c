/*
 * Table admin for the Bigtable backend (google.bigtable.admin.v2.BigtableTableAdmin):
 * init creates both tables, each with the one family and its GC rule; GetTable renders
 * a schema for tests. Contracts in bigtable_int.h.
 *
 * GC rule (docs/storage-format.md): "max versions 1", or "max versions 1 OR older than the
 * retention" when a retention is set (a union: either rule deletes a cell).
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "bigtable_int.h"
#include "error.h"

#define M_CREATE_TABLE "/google.bigtable.admin.v2.BigtableTableAdmin/CreateTable"
#define M_GET_TABLE "/google.bigtable.admin.v2.BigtableTableAdmin/GetTable"

static char family[] = PT_BT_FAMILY; /* protobuf-c wants a char *; never written */

static Bigtable__GcRule *new_rule(pt_arena *a)
{
    Bigtable__GcRule *r = pt_arena_alloc(a, sizeof(*r));
    if (r)
        protobuf_c_message_init(&bigtable__gc_rule__descriptor, r);
    return r;
}

static Bigtable__GcRule *gc_rule(pt_arena *a, long retention_s)
{
    Bigtable__GcRule *versions = new_rule(a);
    if (!versions)
        return NULL;
    versions->rule_case = BIGTABLE__GC_RULE__RULE_MAX_NUM_VERSIONS;
    versions->max_num_versions = 1;
    if (retention_s <= 0)
        return versions;
    Bigtable__GcRule *age = new_rule(a), *both = new_rule(a);
    Bigtable__Duration *d = pt_arena_alloc(a, sizeof(*d));
    Bigtable__GcRule__Union *u = pt_arena_alloc(a, sizeof(*u));
    Bigtable__GcRule **rules = pt_arena_alloc(a, 2 * sizeof(*rules));
    if (!age || !both || !d || !u || !rules)
        return NULL;
    bigtable__duration__init(d);
    d->seconds = retention_s;
    age->rule_case = BIGTABLE__GC_RULE__RULE_MAX_AGE;
    age->max_age = d;
    protobuf_c_message_init(&bigtable__gc_rule__union__descriptor, u);
    rules[0] = versions;
    rules[1] = age;
    u->n_rules = 2;
    u->rules = rules;
    both->rule_case = BIGTABLE__GC_RULE__RULE_UNION_RULES;
    both->union_rules = u;
    return both;
}

static int create_table(pt_bt *bt, int t, pt_arena *a, char *err, size_t errlen)
{
    Bigtable__ColumnFamily cf;
    Bigtable__Table__ColumnFamiliesEntry entry;
    Bigtable__Table__ColumnFamiliesEntry *entries[1] = {&entry};
    Bigtable__Table table;
    Bigtable__CreateTableRequest req;
    bigtable__column_family__init(&cf);
    protobuf_c_message_init(&bigtable__table__column_families_entry__descriptor, &entry);
    bigtable__table__init(&table);
    bigtable__create_table_request__init(&req);
    if (!(cf.gc_rule = gc_rule(a, bt->retention_s)))
        return PT_ENOMEM;
    entry.key = family;
    entry.value = &cf;
    table.n_column_families = 1;
    table.column_families = entries;
    req.parent = bt->parent;
    req.table_id = (char *)bt->table_id[t];
    req.table = &table;

    char details[256];
    ProtobufCMessage *resp;
    grpc_status_code st =
        pt_bt_rpc_unary_retried(bt, bt->admin, M_CREATE_TABLE, bt->parent_params, &req.base, a,
                                &bigtable__table__descriptor, &resp, details, sizeof(details));
    if (st == GRPC_STATUS_OK || st == GRPC_STATUS_ALREADY_EXISTS)
        return 0;
    snprintf(err, errlen, "bigtable: CreateTable %s: %s: %s", bt->table[t],
             pt_bt_rpc_status_name(st), details);
    return pt_bt_rpc_error(st);
}

int pt_bt_admin_init(void *state, char *err, size_t errlen)
{
    pt_bt *bt = state;
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    int rv = 0;
    for (int t = 0; t < PT_TABLE_COUNT && rv == 0; t++) {
        rv = create_table(bt, t, &a, err, errlen);
        pt_arena_reset(&a);
    }
    pt_arena_free(&a);
    return rv;
}

/* Appends to out[0..n) at *o; output past the end is dropped, *o counts it anyway. */
static void appendf(char *out, size_t n, size_t *o, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void appendf(char *out, size_t n, size_t *o, const char *fmt, ...)
{
    char tmp[1];
    va_list ap;
    va_start(ap, fmt);
    int k = *o < n ? vsnprintf(out + *o, n - *o, fmt, ap) : vsnprintf(tmp, 0, fmt, ap);
    va_end(ap);
    *o += k > 0 ? (size_t)k : 0;
}

static void render_rule(const Bigtable__GcRule *r, char *out, size_t n, size_t *o)
{
    switch (r ? r->rule_case : BIGTABLE__GC_RULE__RULE__NOT_SET) {
    case BIGTABLE__GC_RULE__RULE_MAX_NUM_VERSIONS:
        appendf(out, n, o, "versions>%d", r->max_num_versions);
        break;
    case BIGTABLE__GC_RULE__RULE_MAX_AGE:
        appendf(out, n, o, "age>%" PRId64 "s", r->max_age ? r->max_age->seconds : 0);
        break;
    case BIGTABLE__GC_RULE__RULE_UNION_RULES:
    case BIGTABLE__GC_RULE__RULE_INTERSECTION: {
        int u = r->rule_case == BIGTABLE__GC_RULE__RULE_UNION_RULES;
        size_t nr = u ? r->union_rules->n_rules : r->intersection->n_rules;
        Bigtable__GcRule **rules = u ? r->union_rules->rules : r->intersection->rules;
        appendf(out, n, o, "(");
        for (size_t i = 0; i < nr; i++) {
            appendf(out, n, o, "%s", i == 0 ? "" : u ? " || " : " && ");
            render_rule(rules[i], out, n, o);
        }
        appendf(out, n, o, ")");
        break;
    }
    default: appendf(out, n, o, "never"); break;
    }
}

int pt_bt_describe_table(void *state, int t, char *out, size_t outlen)
{
    pt_bt *bt = state;
    if (t < 0 || t >= PT_TABLE_COUNT || outlen == 0)
        return PT_EINTERNAL;
    Bigtable__GetTableRequest req;
    bigtable__get_table_request__init(&req);
    req.name = bt->table[t];
    req.view = 2; /* SCHEMA_VIEW */
    char *params = pt_bt_rpc_params("name", bt->table[t]);
    if (!params)
        return PT_ENOMEM;
    pt_arena a;
    pt_arena_init(&a, 4096, 0);
    ProtobufCMessage *resp;
    char details[256];
    grpc_status_code st =
        pt_bt_rpc_unary(bt->admin, M_GET_TABLE, params, &req.base, bt->write_ms, &a,
                        &bigtable__table__descriptor, &resp, details, sizeof(details));
    int rv = pt_bt_rpc_error(st);
    size_t o = 0;
    out[0] = '\0';
    if (st == GRPC_STATUS_OK) {
        const Bigtable__Table *tb = (const Bigtable__Table *)resp;
        for (size_t i = 0; i < tb->n_column_families; i++) {
            const Bigtable__Table__ColumnFamiliesEntry *e = tb->column_families[i];
            appendf(out, outlen, &o, "%s%s: ", i ? "; " : "", e->key);
            render_rule(e->value ? e->value->gc_rule : NULL, out, outlen, &o);
        }
    } else {
        snprintf(out, outlen, "%s: %s", pt_bt_rpc_status_name(st), details);
    }
    pt_arena_free(&a);
    free(params);
    return rv;
}
