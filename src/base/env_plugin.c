/*
 * Braid: env plugin loader and the reads through it (env_plugin.h).
 *
 * Locking: env_mu serialises the load. The loading thread marks itself
 * (loading_here) so that what the load triggers on that thread (the
 * plugin's init logging, the logger reading NCCL_DEBUG) reads the process
 * environment instead of waiting on itself. Messages of the load are kept
 * in a small buffer and logged after env_mu is released.
 */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/debug.h"
#include "base/env_plugin.h"
#include "base/plugin.h"
#include "base/param.h"
#include "nccl_env.h"

#define MSG_MAX 4
#define MSG_LEN 640

enum { ENV_READY = 0, ENV_DONE = 1 };

static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER;
static int env_state;                    /* atomic: ENV_READY, ENV_DONE */
static _Thread_local int loading_here;   /* this thread is loading */
static void *env_dl;                     /* dlopen handle, owned */
static const ncclEnv_v1_t *env_v1;       /* the plugin's table (v1) */
static const ncclEnv_v2_t *env_v2;       /* the plugin's table (v2) */
static const char *(*env_getter)(const char *); /* atomic; NULL: getenv */
static int env_version;
static int atexit_set;

/* Messages of the load: (level, text), logged after it. */
static struct {
  int warn;
  char text[MSG_LEN];
} msgs[MSG_MAX];
static int nmsgs;

__attribute__((format(printf, 2, 3)))
static void note(int warn, const char *fmt, ...) {
  if (nmsgs >= MSG_MAX) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msgs[nmsgs].text, MSG_LEN, fmt, ap);
  va_end(ap);
  msgs[nmsgs++].warn = warn;
}

/* The logger a v2 plugin gets: NCCL's prototype. */
static void plugin_log(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                       const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  brd_plugin_vlog((int)level, flags, file, line, fmt, ap);
  va_end(ap);
}

static void finalize_at_exit(void) {
  pthread_mutex_lock(&env_mu);
  if (env_dl != NULL) {
    __atomic_store_n(&env_getter, NULL, __ATOMIC_RELEASE);
    ncclResult_t (*fin)(void) = env_v2 != NULL ? env_v2->finalize : env_v1->finalize;
    if (fin != NULL) (void)fin();
  }
  pthread_mutex_unlock(&env_mu);
}

/* The load itself; env_mu held, loading_here set. */
static void load_locked(void) {
  char missing[2 * PATH_MAX] = "", err[512] = "", path[PATH_MAX];
  const char *spec = brd_param_getenv("NCCL_ENV_PLUGIN");
  int requested = spec != NULL && spec[0] != '\0';
  if (!requested) spec = NULL;
  if (requested) {
    note(0, "NCCL_ENV_PLUGIN set by environment to %s", spec);
    if (strcasecmp(spec, "none") == 0) return;
  }
  void *dl = brd_plugin_open(spec, "env", missing, sizeof(missing), err, sizeof(err));
  if (dl == NULL) {
    if (requested)
      note(1, "ENV/Plugin: cannot load NCCL_ENV_PLUGIN=%s: %s%s%s. Give it a path, put the "
           "library on LD_LIBRARY_PATH, or set NCCL_ENV_PLUGIN=none; parameters come from "
           "the environment", spec, missing[0] ? "could not find" : "", missing, err);
    return;
  }
  brd_plugin_path(dl, spec ? spec : "libnccl-env.so", path, sizeof(path));
  const ncclEnv_v2_t *v2 = dlsym(dl, "ncclEnvPlugin_v2");
  const ncclEnv_v1_t *v1 = v2 == NULL ? dlsym(dl, "ncclEnvPlugin_v1") : NULL;
  int version = v2 != NULL ? 2 : v1 != NULL ? 1 : 0;
  const char *name = v2 != NULL ? v2->name : v1 != NULL ? v1->name : NULL;
  const char *(*get)(const char *) = v2 != NULL ? v2->getEnv : v1 != NULL ? v1->getEnv : NULL;
  if (version == 0 || name == NULL || get == NULL ||
      (v2 != NULL ? v2->init == NULL : v1->init == NULL)) {
    note(requested, "External env plugin %s is unsupported: it exports no usable "
         "ncclEnvPlugin_v2 or ncclEnvPlugin_v1%s", path,
         requested ? "; parameters come from the environment" : "");
    dlclose(dl);
    return;
  }
  note(0, "ENV/Plugin: Using %s (v%d)", name, version);
  ncclResult_t r = v2 != NULL ? v2->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX,
                                         plugin_log)
                              : v1->init(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, NCCL_SUFFIX);
  if (r != ncclSuccess) {
    note(1, "ENV/Plugin: %s (v%d) init failed: error %d; parameters come from the environment "
         "(fix the plugin, or set NCCL_ENV_PLUGIN=none)", name, version, (int)r);
    dlclose(dl);
    return;
  }
  note(0, "Successfully loaded external env plugin %s", path);
  env_dl = dl;
  env_v1 = v1;
  env_v2 = v2;
  env_version = version;
  __atomic_store_n(&env_getter, get, __ATOMIC_RELEASE);
  if (!atexit_set) atexit_set = atexit(finalize_at_exit) == 0;
}

void brd_env_plugin_init(void) {
  if (__atomic_load_n(&env_state, __ATOMIC_ACQUIRE) == ENV_DONE || loading_here) return;
  pthread_mutex_lock(&env_mu);
  int loaded_now = 0;
  if (env_state != ENV_DONE) {
    loading_here = 1;
    nmsgs = 0;
    load_locked();
    loading_here = 0;
    __atomic_store_n(&env_state, ENV_DONE, __ATOMIC_RELEASE);
    loaded_now = 1;
  }
  int n = loaded_now ? nmsgs : 0;
  pthread_mutex_unlock(&env_mu);
  if (!loaded_now) return;
  /* The log may have read its settings from the raw environment while the
   * plugin loaded (the plugin logged from init): read them again. */
  if (env_dl != NULL) brd_log_reset();
  for (int i = 0; i < n; i++) {
    if (msgs[i].warn)
      WARN("%s", msgs[i].text);
    else
      INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_ENV, "%s", msgs[i].text);
  }
}

const char *brd_env_get(const char *name) {
  brd_env_plugin_init();
  const char *(*get)(const char *) = __atomic_load_n(&env_getter, __ATOMIC_ACQUIRE);
  if (get == NULL || loading_here) return getenv(name);
  return get(name);
}

const char *brd_env_plugin_name(void) {
  return env_v2 != NULL ? env_v2->name : env_v1 != NULL ? env_v1->name : NULL;
}

int brd_env_plugin_version(void) { return env_version; }

void brd_env_plugin_reset(void) {
  finalize_at_exit();
  pthread_mutex_lock(&env_mu);
  if (env_dl != NULL) {
    INFO(BRD_SUBSYS_ENV, "ENV/Plugin: Closing env plugin %s", brd_env_plugin_name());
    dlclose(env_dl);
  }
  env_dl = NULL;
  env_v1 = NULL;
  env_v2 = NULL;
  env_version = 0;
  __atomic_store_n(&env_getter, NULL, __ATOMIC_RELEASE);
  __atomic_store_n(&env_state, ENV_READY, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&env_mu);
}
