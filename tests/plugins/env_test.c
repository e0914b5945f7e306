/*
 * A test env plugin, compiled per ABI version (-DENV_VERSION=1 or 2; both
 * in one library for the "newest wins" case). getEnv(NAME) answers with
 * the process's ENVTEST_NAME, so a test can tell a value read through the
 * plugin from the process's own NAME. ENVTEST_FAULT=init makes init fail.
 * It records its calls in envtest_state_vN (env_test.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nccl_env.h"
#include "env_test.h"

#ifndef ENV_VERSION
#error "build with -DENV_VERSION=N"
#endif

#define EXPORT __attribute__((visibility("default")))
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)
#define STATE CAT(envtest_state_v, ENV_VERSION)
#define SYM CAT(ncclEnvPlugin_v, ENV_VERSION)

EXPORT envtest_state_t STATE;

static ncclResult_t common_init(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix) {
  __atomic_fetch_add(&STATE.inits, 1, __ATOMIC_RELAXED);
  STATE.major = major;
  STATE.minor = minor;
  STATE.patch = patch;
  STATE.suffix_ok = suffix != NULL;
  const char *f = getenv("ENVTEST_FAULT");
  return f != NULL && strcmp(f, "init") == 0 ? ncclSystemError : ncclSuccess;
}

static ncclResult_t fin(void) {
  __atomic_fetch_add(&STATE.finalizes, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}

static const char *get(const char *name) {
  __atomic_fetch_add(&STATE.gets, 1, __ATOMIC_RELAXED);
  char key[256];
  snprintf(key, sizeof(key), "ENVTEST_%s", name);
  return getenv(key);
}

#if ENV_VERSION == 1
static ncclResult_t init_v1(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix) {
  return common_init(major, minor, patch, suffix);
}
EXPORT const ncclEnv_v1_t SYM = {"EnvTest_v1", init_v1, fin, get};
#else
static ncclResult_t init_v2(uint8_t major, uint8_t minor, uint8_t patch, const char *suffix,
                            ncclDebugLogger_t log) {
  if (log != NULL) {
    log(NCCL_LOG_INFO, NCCL_ENV, __FILE__, __LINE__, "env test v2: init");
    STATE.logged = 1;
  }
  return common_init(major, minor, patch, suffix);
}
EXPORT const ncclEnv_v2_t SYM = {"EnvTest_v2", init_v2, fin, get};
#endif
