/*
 * One entry of a configuration table (the shape of redis' static_configs[]): key, type,
 * default, bounds, and the offset of the field it fills. The daemon's own table and every
 * backend's fragment (backend.h) are arrays of these; adapter/daemon/config.c parses YAML and
 * flags with them, validates, prints --help, and the tests check configs/ against them.
 *
 * The flag of a key is the key with '_' written '-': web.listen_address is
 * --web.listen-address.
 */
#ifndef PT_CONF_H
#define PT_CONF_H

#include <stddef.h>

/* Every type refuses, naming the key, a value it cannot parse or one outside [min, max].
 * Strings (STR, ADDR, FILE, ENUM, DIR) are char *, malloc'd and owned by the configuration. */
typedef enum pt_conf_type {
    PT_CONF_STR,      /* any text; empty only when the default is empty */
    PT_CONF_LONG,     /* long, decimal */
    PT_CONF_BYTES,    /* size_t, "32MiB" */
    PT_CONF_BOOL,     /* int, 0 or 1 ("true"/"false", "yes"/"no", "1"/"0") */
    PT_CONF_DURATION, /* long milliseconds, "5m" */
    PT_CONF_ADDR,     /* "host:port", ":port" (all interfaces) or "[v6]:port"; the port is
                         decimal in [min, max]; empty only when the default is empty */
    PT_CONF_FILE,     /* a path; empty = not set. pt_config_check() refuses one that is not
                         a readable regular file */
    PT_CONF_ENUM,     /* one of the words of def, which lists them separated by '|'; the
                         first is the default: "info|debug|warn|error" */
    PT_CONF_DIR,      /* a directory path; empty turns off what it is for, whatever the
                         default (the directory is made when used) */
} pt_conf_type;

typedef struct pt_conf_key {
    const char *key;   /* dotted YAML path; in a backend fragment, the part after
                          storage.<backend>. */
    const char *alias; /* a former key that still sets it (full dotted path), or NULL */
    pt_conf_type type;
    const char *def;
    long long min, max; /* bounds of numeric values, of an ADDR's port */
    size_t off;         /* offset of the field in the struct the table fills */
    const char *help;
} pt_conf_key;

#endif
