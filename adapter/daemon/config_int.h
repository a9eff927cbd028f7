/*
 * Internals of the configuration, shared by config_keys.c (the daemon's key table) and
 * config.c (parsing, validation, --help).
 */
#ifndef PT_CONFIG_INT_H
#define PT_CONFIG_INT_H

#include <stddef.h>

#include "config.h"

/* The daemon's own keys, in --help order; the storage.* keys are contiguous (each
 * backend's fragment is listed after them). */
extern const pt_conf_key pt_config_keys[];
extern const size_t pt_config_nkeys;

#endif
