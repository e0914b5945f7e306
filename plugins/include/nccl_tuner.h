/*
 * nccl_tuner.h: the tuner plugin ABI (ncclTuner_v2 .. ncclTuner_v6), as
 * loaded by Braid and by NCCL.
 *
 * A tuner is a shared library exporting one or more of the structs
 * ncclTunerPlugin_vN; the loader takes the newest version it finds. Build
 * it against this header and nccl.h only:
 *
 *   cc -shared -fPIC -I<braid>/include -I<braid>/plugins/include my_tuner.c
 *
 * The member order and the argument lists are the ABI; each was checked
 * against NCCL's definitions, and the sizes are pinned by the
 * _Static_asserts at the end (LP64).
 *
 * The cost table (v3 and later) is one contiguous float[numAlgo][numProto]
 * passed as float**: cast it back with
 *   float (*table)[NCCL_NUM_PROTOCOLS] = (float (*)[NCCL_NUM_PROTOCOLS])collCostTable;
 * and never index collCostTable[a][p] directly. Entries hold the core's
 * predicted time in microseconds, or NCCL_ALGO_PROTO_IGNORE (-1.0) for
 * pairs that cannot run; the plugin may lower an entry (0.0: "use this"),
 * or set it to -1.0 to forbid it. The core then runs the smallest entry
 * that is not negative. plugins/README.md says what Braid calls and when.
 */
#ifndef NCCL_TUNER_H_
#define NCCL_TUNER_H_

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "nccl_common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Indices of the cost table ---- */
#define NCCL_ALGO_UNDEF -1
#define NCCL_ALGO_TREE 0
#define NCCL_ALGO_RING 1
#define NCCL_ALGO_COLLNET_DIRECT 2
#define NCCL_ALGO_COLLNET_CHAIN 3
#define NCCL_ALGO_NVLS 4
#define NCCL_ALGO_NVLS_TREE 5
#define NCCL_ALGO_PAT 6
#define NCCL_NUM_ALGORITHMS 7

#define NCCL_PROTO_UNDEF -1
#define NCCL_PROTO_LL 0
#define NCCL_PROTO_LL128 1
#define NCCL_PROTO_SIMPLE 2
#define NCCL_NUM_PROTOCOLS 3

/* A pair the core cannot run, or the plugin forbids. */
#define NCCL_ALGO_PROTO_IGNORE -1.0

/* Indices of the constants' tables (v5, v6). */
#define NCCL_HW_NVLINK 0
#define NCCL_HW_PCI 1
#define NCCL_HW_NET 2
#define NCCL_NUM_HW_LINKS 3

#define NCCL_VOLTA_COMPCAP_IDX 0
#define NCCL_AMPERE_COMPCAP_IDX 1
#define NCCL_HOPPER_COMPCAP_IDX 2
#define NCCL_BLACKWELL_COMPCAP_IDX 3
#define NCCL_NUM_COMPCAPS 4

#define NCCL_TUNING_SCALE_1NODE 0
#define NCCL_TUNING_SCALE_2NODES 1
#define NCCL_TUNING_SCALE_4NODES 2
#define NCCL_NUM_TUNING_SCALES 3

/* ---- v5 / v6 supporting structs ---- */

/* The communicator's NVLink domains (ranks that share NVLink). */
typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;
typedef ncclNvlDomainInfo_v5_t ncclNvlDomainInfo_v6_t;

/* The core's time-model constants, in microseconds and GB/s; init may
 * rewrite them in place. The core allocates all five bandwidth tables
 * (1152 bytes); a plugin built against a header without the last one
 * sees a prefix, which is safe. */
typedef struct {
  double baseLatencies[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  double hwLatencies[NCCL_NUM_HW_LINKS][NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
  double llMaxBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxRingLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxTreeLL128Bws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
  double perChMaxNVLSTreeBws[NCCL_NUM_COMPCAPS][NCCL_NUM_TUNING_SCALES];
} ncclTunerConstants_v5_t;
typedef ncclTunerConstants_v5_t ncclTunerConstants_v6_t;

/* ---- The tables, oldest first ---- */

/* v2 (NCCL 2.21): the plugin returns an (algorithm, protocol) pair; no
 * cost table. collNetSupport / nvlsSupport say whether those algorithms
 * can run this call. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int collNetSupport, int nvlsSupport, int numPipeOps,
                              int *algorithm, int *protocol, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v2_t;

/* v3 (NCCL 2.22): the cost table. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v3_t;

/* v4 (NCCL 2.24): regBuff, 1 when the user buffers are registered. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction,
                       void **context);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*destroy)(void *context);
} ncclTuner_v4_t;

/* v5 (NCCL 2.28): init takes the communicator id, the NVLink domains and
 * the constants; destroy becomes finalize. */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t *nvlDomainInfo,
                       ncclTunerConstants_v5_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *context);
} ncclTuner_v5_t;

/* v6 (NCCL 2.30): an optional getChunkSize (may be NULL). */
typedef struct {
  const char *name;
  ncclResult_t (*init)(void **ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v6_t *nvlDomainInfo,
                       ncclTunerConstants_v6_t *constants);
  ncclResult_t (*getCollInfo)(void *context, ncclFunc_t collType, size_t nBytes,
                              int numPipeOps, float **collCostTable, int numAlgo,
                              int numProto, int regBuff, int *nChannels);
  ncclResult_t (*finalize)(void *context);
  ncclResult_t (*getChunkSize)(void *context, ncclFunc_t collType, size_t nBytes, int algo,
                               int proto, int nChannels, size_t *chunkSize);
} ncclTuner_v6_t;

/* The newest version, unversioned. */
typedef ncclTuner_v6_t ncclTuner_t;
typedef ncclTunerConstants_v6_t ncclTunerConstants_t;
typedef ncclNvlDomainInfo_v6_t ncclNvlDomainInfo_t;
#define NCCL_TUNER_PLUGIN_SYMBOL "ncclTunerPlugin_v6"

/* ---- Layout pins (LP64) ---- */
#if defined(__LP64__) && !defined(__cplusplus)
_Static_assert(sizeof(ncclNvlDomainInfo_v5_t) == 12, "ncclNvlDomainInfo_v5_t is 12 bytes");
_Static_assert(sizeof(ncclTunerConstants_v5_t) == 1152, "ncclTunerConstants_v5_t is 1152 bytes");
_Static_assert(offsetof(ncclTunerConstants_v5_t, hwLatencies) == 168, "hwLatencies at 168");
_Static_assert(offsetof(ncclTunerConstants_v5_t, llMaxBws) == 672, "llMaxBws at 672");
_Static_assert(offsetof(ncclTunerConstants_v5_t, perChMaxNVLSTreeBws) == 1056,
               "perChMaxNVLSTreeBws at 1056");
_Static_assert(sizeof(ncclTuner_v2_t) == 32, "ncclTuner_v2_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v3_t) == 32, "ncclTuner_v3_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v4_t) == 32, "ncclTuner_v4_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v5_t) == 32, "ncclTuner_v5_t is 32 bytes");
_Static_assert(sizeof(ncclTuner_v6_t) == 40, "ncclTuner_v6_t is 40 bytes");
_Static_assert(offsetof(ncclTuner_v5_t, finalize) == 24, "ncclTuner_v5_t.finalize at 24");
_Static_assert(offsetof(ncclTuner_v6_t, getChunkSize) == 32, "ncclTuner_v6_t.getChunkSize at 32");
#endif

#ifdef __cplusplus
}
#endif

#endif /* NCCL_TUNER_H_ */
