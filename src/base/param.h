/*
 * Braid parameters: one table (param_table.h) of every knob, with its name,
 * kind, default and a one-line description.
 *
 * Resolution order for a value: the process environment (or, when
 * NCCL_ENV_PLUGIN loaded an env plugin, its getEnv: base/env_plugin.h), then
 * NCCL_CONF_FILE (or ~/.nccl.conf when it is unset), then /etc/nccl.conf,
 * then the table default. A malformed integer WARNs once and falls back to
 * the default. With NCCL_DEBUG=INFO and ENV in NCCL_DEBUG_SUBSYS, every
 * value set explicitly is logged once per process (brd_param_log_all).
 */
#ifndef BRD_CORE_PARAM_H
#define BRD_CORE_PARAM_H

#include <stdint.h>
#include <stdio.h>

typedef enum { BRD_PARAM_INT, BRD_PARAM_STR } brd_param_kind_t;

typedef enum {
#define BRD_PARAM(id, name, kind, def, desc) BRD_P_##id,
#include "base/param_table.h"
#undef BRD_PARAM
  BRD_P_COUNT
} brd_param_id_t;

typedef struct {
  const char *name;       /* environment name, e.g. "NCCL_BUFFSIZE" */
  brd_param_kind_t kind;
  const char *def;        /* default as text; NULL means unset */
  const char *desc;       /* one line */
} brd_param_info_t;

/* The static table, BRD_P_COUNT entries. */
extern const brd_param_info_t brd_param_table[BRD_P_COUNT];

/* What brd_param_int returns for a knob that is neither set nor given a
 * default (NCCL's "undefined": the caller decides). */
#define BRD_PARAM_UNSET INT64_MIN

/* Integer value in force (env > conf files > default). Loads the table on
 * first use; any thread. Accepts what strtoll(base 0) reads in full: decimal,
 * 0x hex, leading 0 octal, a sign; an empty value counts as unset. Anything
 * else (trailing junk, overflow) WARNs once naming the variable and gives the
 * default. BRD_PARAM_UNSET when unset without default. */
int64_t brd_param_int(brd_param_id_t id);

/* String value in force, or NULL when unset and without default. Cached
 * like the integers; the string stays readable for the life of the process
 * (a reload retires it, never frees it). Any thread. */
const char *brd_param_str(brd_param_id_t id);

/* Value of any variable by name, with the same env > conf-file order (used
 * for names outside the table, e.g. NCCL_DEBUG before params exist). Returns
 * NULL when unset. The environment is read at each call; conf files once.
 * Never logs, so the logger may call it. An environment value is getenv's
 * pointer (valid until that variable changes); a conf value lives as long as
 * the process. */
const char *brd_param_getenv(const char *name);

/* Drops cached values and conf-file contents; the next query re-reads
 * everything. For tests and ncclResetDebugInit. A query running meanwhile
 * gets the old or the new value; strings handed out before stay readable. */
void brd_param_reload(void);

/* Prints, at INFO/ENV, "NAME set by environment to VALUE" for every table
 * parameter set in the environment or a conf file (NCCL's wording, whichever
 * the source). Prints each time it is called; brd_log_banner calls it once
 * per process. Any thread. */
void brd_param_log_all(void);

/* Writes the whole table to f: name, default, value in force and where it
 * came from, description. For tools and documentation. Any thread. */
void brd_param_table_print(FILE *f);

/* Replaces the system-wide conf file (default /etc/nccl.conf; NULL restores
 * it). Takes effect at the next load, i.e. after brd_param_reload. For
 * tests; not concurrent with queries. */
void brd_param_sysconf_set(const char *path);

#endif /* BRD_CORE_PARAM_H */
