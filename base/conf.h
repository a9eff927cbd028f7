/*
 * One entry of a configuration table (the shape of redis' static_configs[]): key, type,
 * default, bounds, and the offset of the field it fills. The daemon's own table and every
 * backend's fragment (backend.h) are arrays of these; adapter/config.c parses YAML and
 * flags with them, validates, prints --help, and the tests check configs/ against them.
 *
 * The flag of a key is the key with '_' written '-': web.listen_address is
 * --web.listen-address.
 */
#ifndef PT_CONF_H
#define PT_CONF_H

#include <stddef.h>

typedef enum pt_conf_type {
    PT_CONF_STR,      /* char *, malloc'd and owned by the configuration */
    PT_CONF_LONG,     /* long */
    PT_CONF_BYTES,    /* size_t, "32MiB" */
    PT_CONF_BOOL,     /* int, 0 or 1 */
    PT_CONF_DURATION, /* long milliseconds, "5m" */
} pt_conf_type;

typedef struct pt_conf_key {
    const char *key;   /* dotted YAML path; in a backend fragment, the part after
                          storage.<backend>. */
    const char *alias; /* a former key that still sets it (full dotted path), or NULL */
    pt_conf_type type;
    const char *def;
    long long min, max; /* bounds of numeric values */
    size_t off;         /* offset of the field in the struct the table fills */
    const char *help;
} pt_conf_key;

#endif
