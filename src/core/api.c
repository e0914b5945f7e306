/*
 * Braid: entry points that need no communicator state — version, error
 * strings, the last-error text, debug reset — and the shared
 * "not implemented" path.
 */
/* nccl.h declares ncclResetDebugInit only on Linux, as NCCL does; this
 * library defines it, so it asks for the declaration. */
#define NCCL_OS_LINUX 1

#include <stddef.h>

/* ncclResetDebugInit is declared deprecated for users; we define it. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

#include "core/api.h"
#include "base/check.h"
#include "base/param.h"

ncclResult_t brd_api_not_implemented(const char *fn) {
  WARN("%s is not implemented in braid %s", fn, BRAID_VERSION);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclGetVersion, int *version)
ncclResult_t pncclGetVersion(int *version) {
  ARG_NOT_NULL(version, "ncclGetVersion");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

/* NCCL's texts, so log scrapers and users see familiar wording. */
BRD_API(const char *, ncclGetErrorString, ncclResult_t result)
const char *pncclGetErrorString(ncclResult_t result) {
  switch (result) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the Braid developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  case ncclTimeout: return "timeout";
  case ncclNumResults: break;
  }
  return "unknown result code";
}

/* The comm argument is ignored, as in NVIDIA's library: the text is the last
 * WARN of the whole process. */
BRD_API(const char *, ncclGetLastError, ncclComm_t comm)
const char *pncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return brd_log_last_error();
}

/* Re-read the logging environment at the next message. */
BRD_API(void, ncclResetDebugInit, void)
void pncclResetDebugInit(void) {
  brd_param_reload();
  brd_log_reset();
}

/* NVIDIA exports this strong symbol alone (no pnccl twin); some tools call it. */
BRD_EXPORT void ncclResetDebugInitInternal(void);
void ncclResetDebugInitInternal(void) { pncclResetDebugInit(); }
