/*
 * Braid: the one set of error-check macros used everywhere.
 *
 * Every function that can fail returns ncclResult_t. These macros propagate
 * a failure to the caller (CHECK) or to a cleanup label (CHECK_GOTO). The
 * SYS_ and PTHREAD_ variants turn an errno/pthread failure into
 * ncclSystemError with a WARN that names the call and the errno text; the
 * SYS_ variants retry EINTR.
 */
#ifndef BRD_CORE_CHECK_H
#define BRD_CORE_CHECK_H

#include <errno.h>
#include <string.h>

#include "nccl.h"
#include "base/debug.h"

#define CHECK(call)                                                           \
  do {                                                                        \
    ncclResult_t chk_res_ = (call);                                           \
    if (chk_res_ != ncclSuccess) return chk_res_;                             \
  } while (0)

#define CHECK_GOTO(call, res, label)                                          \
  do {                                                                        \
    (res) = (call);                                                           \
    if ((res) != ncclSuccess) goto label;                                     \
  } while (0)

/* A NULL argument check with NCCL's wording and error code. */
#define ARG_NOT_NULL(ptr, fn)                                                 \
  do {                                                                        \
    if ((ptr) == NULL) {                                                      \
      WARN("%s : %s argument is NULL", (fn), #ptr);                          \
      return ncclInvalidArgument;                                             \
    }                                                                         \
  } while (0)

/* The rules the SYS_ and PTHREAD_ checks share, as expressions: a system
 * call's -1 (errno set) or a pthread call's nonzero result becomes
 * ncclSystemError with a WARN naming the call; anything else ncclSuccess.
 * SYS_RETRY_ runs call into out again while it fails with EINTR. */
#define SYS_RETRY_(call, out)                                                 \
  do {                                                                        \
    (out) = (call);                                                           \
  } while ((out) == -1 && errno == EINTR)
#define SYS_RESULT_(ret, what)                                                \
  ((ret) != -1 ? ncclSuccess                                                  \
               : (WARN("%s failed: %s", (what), strerror(errno)), ncclSystemError))
#define PTHREAD_RESULT_(ret, what)                                            \
  ((ret) == 0 ? ncclSuccess                                                   \
              : (WARN("%s failed: %s", (what), strerror(ret)), ncclSystemError))

/* Retry a system call on EINTR; a -1 result becomes ncclSystemError. */
#define SYS_CHECK_VAL(call, what, out)                                        \
  do {                                                                        \
    SYS_RETRY_(call, out);                                                    \
    CHECK(SYS_RESULT_(out, what));                                            \
  } while (0)

#define SYS_CHECK_GOTO(call, what, res, label)                                \
  do {                                                                        \
    int sys_ret_;                                                             \
    SYS_RETRY_((int)(call), sys_ret_);                                        \
    CHECK_GOTO(SYS_RESULT_(sys_ret_, what), res, label);                      \
  } while (0)

#define PTHREAD_CHECK(call, what)                                             \
  do {                                                                        \
    int pt_ret_ = (call);                                                     \
    CHECK(PTHREAD_RESULT_(pt_ret_, what));                                    \
  } while (0)

#define PTHREAD_CHECK_GOTO(call, what, res, label)                            \
  do {                                                                        \
    int pt_ret_ = (call);                                                     \
    CHECK_GOTO(PTHREAD_RESULT_(pt_ret_, what), res, label);                   \
  } while (0)

/* calloc with a WARN naming the size and what it was for. */
#define BRD_CALLOC(ptr, n, what)                                              \
  do {                                                                        \
    (ptr) = calloc((n), sizeof(*(ptr)));                                      \
    if ((ptr) == NULL) {                                                      \
      WARN("out of host memory allocating %zu bytes for %s",                 \
           (size_t)(n) * sizeof(*(ptr)), (what));                            \
      return ncclSystemError;                                                 \
    }                                                                         \
  } while (0)

/* BRD_CALLOC that sets res and goes to label instead of returning. */
#define BRD_CALLOC_GOTO(ptr, n, what, res, label)                             \
  do {                                                                        \
    (ptr) = calloc((n), sizeof(*(ptr)));                                      \
    if ((ptr) == NULL) {                                                      \
      WARN("out of host memory allocating %zu bytes for %s",                 \
           (size_t)(n) * sizeof(*(ptr)), (what));                            \
      (res) = ncclSystemError;                                                \
      goto label;                                                             \
    }                                                                         \
  } while (0)

/* A failing CUDA runtime call: WARN with CUDA's text, clear CUDA's last
 * error, res = ncclUnhandledCudaError, go to label. It expands to CUDA
 * runtime calls, so only files that include the CUDA headers use it. */
#define CUDA_CHECK_GOTO(call, what, res, label)                               \
  do {                                                                        \
    cudaError_t cuda_err_ = (call);                                           \
    if (cuda_err_ != cudaSuccess) {                                           \
      WARN("CUDA: %s failed: %s (CUDA error %d)", (what),                     \
           cudaGetErrorString(cuda_err_), (int)cuda_err_);                    \
      (void)cudaGetLastError();                                               \
      (res) = ncclUnhandledCudaError;                                         \
      goto label;                                                             \
    }                                                                         \
  } while (0)

#endif /* BRD_CORE_CHECK_H */
