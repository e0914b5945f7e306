/*
 * Braid: how public entry points are defined.
 *
 * NVIDIA's library exports each call twice: pnccl<Name> as a strong symbol
 * and nccl<Name> as a weak alias of it, so a profiler can interpose
 * nccl<Name> and still reach the real call through pnccl<Name>. BRD_API
 * declares that pair; the definition that follows is pnccl<Name>'s body:
 *
 *   BRD_API(ncclResult_t, ncclCommCount, const ncclComm_t comm, int *count)
 *   ncclResult_t pncclCommCount(const ncclComm_t comm, int *count) { ... }
 */
#ifndef BRD_CORE_API_H
#define BRD_CORE_API_H

#include "nccl.h"

#define BRD_EXPORT __attribute__((visibility("default")))

#define BRD_API(ret, name, ...)                                               \
  BRD_EXPORT ret p##name(__VA_ARGS__);                                        \
  BRD_EXPORT ret name(__VA_ARGS__) __attribute__((weak, alias("p" #name)));

/* Marks an entry point Braid does not implement yet: WARNs
 * "<fn> is not implemented in braid <version>" (which becomes the
 * ncclGetLastError text) and returns ncclInvalidUsage. Any thread. */
ncclResult_t brd_api_not_implemented(const char *fn);

#endif /* BRD_CORE_API_H */
