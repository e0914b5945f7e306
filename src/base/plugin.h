/*
 * Braid: what every plugin loader shares (env, tuner; base so that the
 * env plugin, which serves every parameter read, can use it): opening a
 * plugin library by NCCL's naming rules, and forwarding a plugin's log
 * lines, written with NCCL's logger prototype, to Braid's log.
 */
#ifndef BRD_BASE_PLUGIN_H
#define BRD_BASE_PLUGIN_H

#include <pthread.h>
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

/* The newest plugin table dl exports as <prefix>N (prefix
 * "ncclTunerPlugin_v"), N from newest down to oldest, that usable accepts
 * (usable NULL: the newest present), with N in *version_out; NULL when
 * there is none. Any thread. */
const void *brd_plugin_find_versioned(void *dl, const char *prefix, int newest, int oldest,
                                      int (*usable)(const void *sym), int *version_out);

/* The library a plugin variable asks for, value being the variable env's
 * value: NULL when it is unset or empty (the default library), with
 * *none_out 1 when it is "none" (no plugin at all). A set value is logged
 * under subsys, as NCCL does. Any thread. */
const char *brd_plugin_spec(const char *env, const char *value, unsigned long subsys,
                            int *none_out);

/* A plugin library a process shares among its communicators (tuner,
 * profiler): loaded at the first acquire, closed with the last release,
 * after which the next acquire loads it again. A load that finds none is
 * not retried until brd_plugin_lib_reset. */
typedef struct brd_plugin_lib {
  pthread_mutex_t mu;
  int status;       /* 0 not tried, 1 loaded, -1 none */
  int refs;         /* holders */
  void *dl;         /* dlopen handle, owned while loaded */
  const void *sym;  /* the exported table */
  int version;
} brd_plugin_lib_t;
#define BRD_PLUGIN_LIB_INIT {PTHREAD_MUTEX_INITIALIZER, 0, 0, NULL, NULL, 0}

/* Takes a reference, running load (under lib->mu; it sets dl, sym and
 * version and returns 1, or returns 0 when there is no library) if the
 * library is not loaded and no load failed. Returns 1 with a reference
 * taken, 0 without. Any thread. */
int brd_plugin_lib_acquire(brd_plugin_lib_t *lib, int (*load)(brd_plugin_lib_t *lib));

/* Drops a reference; the last one calls on_close (under lib->mu; may be
 * NULL) and closes the library. Any thread. */
void brd_plugin_lib_release(brd_plugin_lib_t *lib, void (*on_close)(void));

/* With no reference held: closes the library and forgets a failed load,
 * so the next acquire loads anew (tests that change the environment). */
void brd_plugin_lib_reset(brd_plugin_lib_t *lib);

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
