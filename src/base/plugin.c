/*
 * Braid: plugin library opening and plugin logging. See plugin.h.
 */
#include <dlfcn.h>
#include <link.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/debug.h"
#include "base/plugin.h"

/* See plugin.h. */
void *brd_plugin_open(const char *spec, const char *kind, char *missing, size_t mlen,
                      char *err, size_t elen) {
  char deflt[64], alt[PATH_MAX];
  snprintf(deflt, sizeof(deflt), "libnccl-%s.so", kind);
  const char *name = spec != NULL ? spec : deflt;
  const char *tries[2] = {name, NULL};
  size_t len = strlen(name);
  int full_lib = strncmp(name, "lib", 3) == 0 && len >= 3 && strcmp(name + len - 3, ".so") == 0;
  if (spec != NULL && strchr(spec, '/') == NULL && !full_lib) {
    snprintf(alt, sizeof(alt), "libnccl-%s-%s.so", kind, spec);
    tries[1] = alt;
  }
  for (int i = 0; i < 2 && tries[i] != NULL; i++) {
    const char *file = strncasecmp(tries[i], "STATIC_PLUGIN", strlen(tries[i])) == 0
                           ? NULL : tries[i];
    void *h = dlopen(file, RTLD_NOW | RTLD_LOCAL);
    if (h != NULL) return h;
    const char *e = dlerror();
    if (e != NULL && strstr(e, "No such file or directory") != NULL) {
      size_t used = strlen(missing);
      snprintf(missing + used, mlen - used, " %s", tries[i]);
    } else {
      snprintf(err, elen, "%s", e != NULL ? e : "unknown dlopen error");
    }
  }
  return NULL;
}

/* Closes the library and forgets it. lib->mu held. */
static void lib_close_locked(brd_plugin_lib_t *lib) {
  if (lib->dl != NULL) dlclose(lib->dl);
  lib->dl = NULL;
  lib->sym = NULL;
  lib->version = 0;
  lib->status = 0;
}

/* See plugin.h. */
int brd_plugin_lib_acquire(brd_plugin_lib_t *lib, int (*load)(brd_plugin_lib_t *lib)) {
  pthread_mutex_lock(&lib->mu);
  if (lib->status == 0) lib->status = load(lib) ? 1 : -1;
  int ok = lib->status == 1;
  if (ok) lib->refs++;
  pthread_mutex_unlock(&lib->mu);
  return ok;
}

/* See plugin.h. */
void brd_plugin_lib_release(brd_plugin_lib_t *lib, void (*on_close)(void)) {
  pthread_mutex_lock(&lib->mu);
  if (--lib->refs == 0) {
    if (on_close != NULL) on_close();
    lib_close_locked(lib);
  }
  pthread_mutex_unlock(&lib->mu);
}

/* See plugin.h. */
void brd_plugin_lib_reset(brd_plugin_lib_t *lib) {
  pthread_mutex_lock(&lib->mu);
  if (lib->refs == 0) lib_close_locked(lib);
  pthread_mutex_unlock(&lib->mu);
}

/* See plugin.h. */
void brd_plugin_path(void *dl, const char *fallback, char *out, size_t n) {
  struct link_map *lm = NULL;
  if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) == 0 && lm != NULL && lm->l_name && lm->l_name[0])
    snprintf(out, n, "%s", lm->l_name);
  else
    snprintf(out, n, "%s", fallback);
}

/* See plugin.h. */
void brd_plugin_vlog(int level, unsigned long flags, const char *file, int line,
                     const char *fmt, va_list ap) {
  char msg[1024];
  if (level <= BRD_LOG_NONE || level > BRD_LOG_TRACE || fmt == NULL) return;
  if (level != BRD_LOG_WARN && !brd_log_on((brd_log_level_t)level, flags)) return;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  (void)vsnprintf(msg, sizeof(msg), fmt, ap);
#pragma GCC diagnostic pop
  brd_log((brd_log_level_t)level, level == BRD_LOG_WARN ? BRD_SUBSYS_ALL : flags, file, line,
          "%s", msg);
}

/* See plugin.h. */
const void *brd_plugin_find_versioned(void *dl, const char *prefix, int newest, int oldest,
                                      int (*usable)(const void *sym), int *version_out) {
  char symname[64];
  for (int v = newest; v >= oldest; v--) {
    snprintf(symname, sizeof(symname), "%s%d", prefix, v);
    const void *sym = dlsym(dl, symname);
    if (sym != NULL && (usable == NULL || usable(sym))) {
      *version_out = v;
      return sym;
    }
  }
  return NULL;
}

/* See plugin.h. */
const char *brd_plugin_spec(const char *env, const char *value, unsigned long subsys,
                            int *none_out) {
  *none_out = 0;
  if (value == NULL || value[0] == '\0') return NULL;
  INFO(subsys, "%s set by environment to %s", env, value);
  *none_out = strcasecmp(value, "none") == 0;
  return value;
}
