/*
 * Braid: what every plugin loader shares (env, tuner; base so that the
 * env plugin, which serves every parameter read, can use it): opening a
 * plugin library by NCCL's naming rules, and forwarding a plugin's log
 * lines, written with NCCL's logger prototype, to Braid's log.
 */
#ifndef BRD_BASE_PLUGIN_H
#define BRD_BASE_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>

/* dlopen(RTLD_NOW | RTLD_LOCAL) by NCCL's rules for plugin kind `kind`
 * ("env", "tuner"): spec NULL tries libnccl-<kind>.so; a spec is tried as
 * given, then, when it has no '/' and is not already lib*.so, as
 * libnccl-<kind>-<spec>.so; "STATIC_PLUGIN" opens this program. Returns
 * the handle, or NULL with the names not found appended to missing (mlen
 * bytes) and the last other dlerror in err (elen bytes). Any thread. */
void *brd_plugin_open(const char *spec, const char *kind, char *missing, size_t mlen,
                      char *err, size_t elen);

/* The file dl was loaded from (its link map's name), or fallback when the
 * loader does not say, into out (n bytes). Any thread. */
void brd_plugin_path(void *dl, const char *fallback, char *out, size_t n);

/* Logs one line a plugin wrote through NCCL's logger (level: NCCL's
 * ncclDebugLogLevel numbers, flags its subsystem bits). Filtered INFO and
 * TRACE lines cost no formatting; a WARN always counts (it becomes the
 * last error). Any thread. */
void brd_plugin_vlog(int level, unsigned long flags, const char *file, int line,
                     const char *fmt, va_list ap);

#endif /* BRD_BASE_PLUGIN_H */
