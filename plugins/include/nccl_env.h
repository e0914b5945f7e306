/*
 * nccl_env.h: the env plugin ABI (ncclEnv_v1, ncclEnv_v2), as loaded by
 * Braid and by NCCL.
 *
 * An env plugin is a shared library exporting ncclEnvPlugin_v2 and/or
 * ncclEnvPlugin_v1; the loader takes the newest. Once loaded, every
 * parameter the library reads (NCCL_* and BRAID_* alike) is asked of
 * getEnv instead of the process environment. Build it against this header
 * and nccl.h only:
 *
 *   cc -shared -fPIC -I<braid>/include -I<braid>/plugins/include my_env.c
 *
 * getEnv returns the value, or NULL for "not set". The string must stay
 * valid until the next getEnv of the same name or finalize. The member
 * order and argument lists are the ABI (checked against NCCL's); sizes
 * are pinned below (LP64). plugins/README.md says when Braid calls what.
 */
#ifndef NCCL_ENV_H_
#define NCCL_ENV_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* v1 (NCCL 2.28): init gets the library's version. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch,
                       const char *suffix);
  ncclResult_t (*finalize)(void);
  const char *(*getEnv)(const char *name);
} ncclEnv_v1_t;

/* v2 (NCCL 2.30): init also gets the logger. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(uint8_t ncclMajor, uint8_t ncclMinor, uint8_t ncclPatch,
                       const char *suffix, ncclDebugLogger_t logFunction);
  ncclResult_t (*finalize)(void);
  const char *(*getEnv)(const char *name);
} ncclEnv_v2_t;

typedef ncclEnv_v2_t ncclEnv_t;
#define NCCL_ENV_PLUGIN_SYMBOL "ncclEnvPlugin_v2"

#if defined(__LP64__) && !defined(__cplusplus)
_Static_assert(sizeof(ncclEnv_v1_t) == 32, "ncclEnv_v1_t is 32 bytes");
_Static_assert(sizeof(ncclEnv_v2_t) == 32, "ncclEnv_v2_t is 32 bytes");
_Static_assert(offsetof(ncclEnv_v2_t, getEnv) == 24, "ncclEnv_v2_t.getEnv at 24");
#endif

#ifdef __cplusplus
}
#endif

#endif /* NCCL_ENV_H_ */
