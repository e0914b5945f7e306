/*
 * Prints every fact of nccl.h that a compiled program depends on: sizes,
 * alignments and offsets of the types, every enumerator, every macro's value
 * and type, and what the initializers fill in.
 *
 * run.sh builds this against Braid's header and against NVIDIA's, as C and
 * as C++, with and without CUDA, and requires identical output (and output
 * identical to layout.expected, recorded from NVIDIA's 2.30.7 header).
 * gen-layout adds a generated list of the same kind of facts.
 * Nothing printed may depend on the language: no enumerator or NULL types.
 */
#include <nccl.h>

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#ifndef NCCL_H_
#error "nccl.h must keep the include guard NCCL_H_"
#endif

#ifdef __cplusplus
#define ALIGNOF(t) alignof(t)
inline const char *type_name(int) { return "int"; }
inline const char *type_name(unsigned) { return "unsigned"; }
inline const char *type_name(long) { return "long"; }
inline const char *type_name(unsigned long) { return "unsigned long"; }
inline const char *type_name(long long) { return "long long"; }
inline const char *type_name(float) { return "float"; }
inline const char *type_name(double) { return "double"; }
inline const char *type_name(const char *) { return "char *"; }
#define TYPE_NAME(x) type_name(x)
#else
#define ALIGNOF(t) _Alignof(t)
#define TYPE_NAME(x)                                                          \
  _Generic((x), int: "int", unsigned: "unsigned", long: "long",               \
           unsigned long: "unsigned long", long long: "long long",            \
           float: "float", double: "double", char *: "char *",                \
           const char *: "char *", default: "other")
#endif

#define SIZE(t) printf("sizeof %s %zu align %zu\n", #t, sizeof(t), (size_t)ALIGNOF(t))
#define FIELD(t, f)                                                           \
  printf("field %s.%s offset %zu size %zu\n", #t, #f, offsetof(t, f),         \
         sizeof(((t *)0)->f))
#define ENUMV(e) printf("enum %s %lld\n", #e, (long long)(e))
#define MACRO_INT(m) printf("macro %s %lld %s\n", #m, (long long)(m), TYPE_NAME(m))
#define EXPR_INT(e) printf("expr %s %lld %s\n", #e, (long long)(e), TYPE_NAME(e))

/* Compile-time checks: these fail to build when a name or tag is wrong. */
static struct ncclConfig_v23000 *const config_tag_check = (ncclConfig_t *)0;
static struct ncclSimInfo_v22200 *const siminfo_tag_check = (ncclSimInfo_t *)0;
static const ncclComm_t comm_tag_check = (struct ncclComm *)0;
static const ncclWindow_t window_tag_check = (struct ncclWindow_vidmem *)0;

static void print_sizes(void) {
  SIZE(ncclComm_t);
  SIZE(ncclWindow_t);
  SIZE(ncclUniqueId);
  FIELD(ncclUniqueId, internal);
  SIZE(ncclResult_t);
  SIZE(ncclRedOp_dummy_t);
  SIZE(ncclRedOp_t);
  SIZE(ncclDataType_t);
  SIZE(ncclScalarResidence_t);
  SIZE(cudaStream_t);

  SIZE(ncclConfig_t);
  FIELD(ncclConfig_t, size);
  FIELD(ncclConfig_t, magic);
  FIELD(ncclConfig_t, version);
  FIELD(ncclConfig_t, blocking);
  FIELD(ncclConfig_t, cgaClusterSize);
  FIELD(ncclConfig_t, minCTAs);
  FIELD(ncclConfig_t, maxCTAs);
  FIELD(ncclConfig_t, netName);
  FIELD(ncclConfig_t, splitShare);
  FIELD(ncclConfig_t, trafficClass);
  FIELD(ncclConfig_t, commName);
  FIELD(ncclConfig_t, collnetEnable);
  FIELD(ncclConfig_t, CTAPolicy);
  FIELD(ncclConfig_t, shrinkShare);
  FIELD(ncclConfig_t, nvlsCTAs);
  FIELD(ncclConfig_t, nChannelsPerNetPeer);
  FIELD(ncclConfig_t, nvlinkCentricSched);
  FIELD(ncclConfig_t, graphUsageMode);
  FIELD(ncclConfig_t, numRmaCtx);
  FIELD(ncclConfig_t, maxP2pPeers);
  FIELD(ncclConfig_t, graphStreamOrdering);

  SIZE(ncclSimInfo_t);
  FIELD(ncclSimInfo_t, size);
  FIELD(ncclSimInfo_t, magic);
  FIELD(ncclSimInfo_t, version);
  FIELD(ncclSimInfo_t, estimatedTime);

  SIZE(ncclCommMemStat_t);
  SIZE(ncclWaitSignalDesc_t);
  FIELD(ncclWaitSignalDesc_t, opCnt);
  FIELD(ncclWaitSignalDesc_t, peer);
  FIELD(ncclWaitSignalDesc_t, sigIdx);
  FIELD(ncclWaitSignalDesc_t, ctx);
  SIZE(ncclParamHandle_t);
}

static void print_enums(void) {
  ENUMV(ncclSuccess);
  ENUMV(ncclUnhandledCudaError);
  ENUMV(ncclSystemError);
  ENUMV(ncclInternalError);
  ENUMV(ncclInvalidArgument);
  ENUMV(ncclInvalidUsage);
  ENUMV(ncclRemoteError);
  ENUMV(ncclInProgress);
  ENUMV(ncclTimeout);
  ENUMV(ncclNumResults);

  ENUMV(ncclStatGpuMemSuspend);
  ENUMV(ncclStatGpuMemSuspended);
  ENUMV(ncclStatGpuMemPersist);
  ENUMV(ncclStatGpuMemTotal);

  ENUMV(ncclNumOps_dummy);
  ENUMV(ncclSum);
  ENUMV(ncclProd);
  ENUMV(ncclMax);
  ENUMV(ncclMin);
  ENUMV(ncclAvg);
  ENUMV(ncclNumOps);
  ENUMV(ncclMaxRedOp);

  ENUMV(ncclInt8);
  ENUMV(ncclChar);
  ENUMV(ncclUint8);
  ENUMV(ncclInt32);
  ENUMV(ncclInt);
  ENUMV(ncclUint32);
  ENUMV(ncclInt64);
  ENUMV(ncclUint64);
  ENUMV(ncclFloat16);
  ENUMV(ncclHalf);
  ENUMV(ncclFloat32);
  ENUMV(ncclFloat);
  ENUMV(ncclFloat64);
  ENUMV(ncclDouble);
  ENUMV(ncclBfloat16);
  ENUMV(ncclFloat8e4m3);
  ENUMV(ncclFloat8e5m2);
  ENUMV(ncclNumTypes);

  ENUMV(ncclScalarDevice);
  ENUMV(ncclScalarHostImmediate);
}

static void print_macros(void) {
  MACRO_INT(NCCL_MAJOR);
  MACRO_INT(NCCL_MINOR);
  MACRO_INT(NCCL_PATCH);
  printf("macro NCCL_SUFFIX \"%s\" size %zu\n", NCCL_SUFFIX, sizeof(NCCL_SUFFIX));
  MACRO_INT(NCCL_VERSION_CODE);
  MACRO_INT(NCCL_UNIQUE_ID_BYTES);
  MACRO_INT(NCCL_CONFIG_UNDEF_INT);
  printf("macro NCCL_CONFIG_UNDEF_PTR is-null %d size %zu\n",
         NCCL_CONFIG_UNDEF_PTR == 0, sizeof(NCCL_CONFIG_UNDEF_PTR));
  printf("macro NCCL_COMM_NULL is-null %d size %zu\n", NCCL_COMM_NULL == 0,
         sizeof(NCCL_COMM_NULL));
  MACRO_INT(NCCL_SPLIT_NOCOLOR);
  printf("macro NCCL_UNDEF_FLOAT %a %s\n", (double)NCCL_UNDEF_FLOAT,
         TYPE_NAME(NCCL_UNDEF_FLOAT));
  MACRO_INT(NCCL_WIN_DEFAULT);
  MACRO_INT(NCCL_WIN_COLL_SYMMETRIC);
  MACRO_INT(NCCL_WIN_STRICT_ORDERING);
  MACRO_INT(NCCL_API_MAGIC);
  MACRO_INT(NCCL_SUSPEND_MEM);
  MACRO_INT(NCCL_WIN_REQUIRED_ALIGNMENT);
  MACRO_INT(NCCL_CTA_POLICY_DEFAULT);
  MACRO_INT(NCCL_CTA_POLICY_EFFICIENCY);
  MACRO_INT(NCCL_CTA_POLICY_ZERO);
  MACRO_INT(NCCL_SHRINK_DEFAULT);
  MACRO_INT(NCCL_SHRINK_ABORT);
  MACRO_INT(NCCL_REVOKE_DEFAULT);

  /* NCCL_VERSION on both sides of the 2.8 boundary, and with arguments
   * that only give the right answer when the macro parenthesises them. */
  EXPR_INT(NCCL_VERSION(2, 28, 9));
  EXPR_INT(NCCL_VERSION(2, 8, 0));
  EXPR_INT(NCCL_VERSION(2, 8, 9));
  EXPR_INT(NCCL_VERSION(2, 9, 0));
  EXPR_INT(NCCL_VERSION(2, 7, 8));
  EXPR_INT(NCCL_VERSION(1, 9, 9));
  EXPR_INT(NCCL_VERSION(3, 0, 0));
  EXPR_INT(NCCL_VERSION(3, 1, 2));
  EXPR_INT(NCCL_VERSION(0, 0, 0));
  EXPR_INT(NCCL_VERSION(1 + 1, 20 + 8, 4 + 5));
  EXPR_INT(NCCL_VERSION(3 - 1, 2 * 4, 1 ? 7 : 0));
  EXPR_INT(2 * NCCL_VERSION(2, 28, 9));
  EXPR_INT(NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH) == NCCL_VERSION_CODE);
  EXPR_INT(-NCCL_SPLIT_NOCOLOR * 3);
  EXPR_INT(NCCL_CONFIG_UNDEF_INT + 1);
  EXPR_INT(NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_DEFAULT);
}

static void print_initializers(void) {
  ncclConfig_t c = NCCL_CONFIG_INITIALIZER;
  ncclSimInfo_t s = NCCL_SIM_INFO_INITIALIZER;
  printf("config.size %zu\n", c.size);
  printf("config.magic %#x\n", c.magic);
  printf("config.version %u\n", c.version);
  printf("config.blocking %d\n", c.blocking);
  printf("config.cgaClusterSize %d\n", c.cgaClusterSize);
  printf("config.minCTAs %d\n", c.minCTAs);
  printf("config.maxCTAs %d\n", c.maxCTAs);
  printf("config.netName is-null %d\n", c.netName == NULL);
  printf("config.splitShare %d\n", c.splitShare);
  printf("config.trafficClass %d\n", c.trafficClass);
  printf("config.commName is-null %d\n", c.commName == NULL);
  printf("config.collnetEnable %d\n", c.collnetEnable);
  printf("config.CTAPolicy %d\n", c.CTAPolicy);
  printf("config.shrinkShare %d\n", c.shrinkShare);
  printf("config.nvlsCTAs %d\n", c.nvlsCTAs);
  printf("config.nChannelsPerNetPeer %d\n", c.nChannelsPerNetPeer);
  printf("config.nvlinkCentricSched %d\n", c.nvlinkCentricSched);
  printf("config.graphUsageMode %d\n", c.graphUsageMode);
  printf("config.numRmaCtx %d\n", c.numRmaCtx);
  printf("config.maxP2pPeers %d\n", c.maxP2pPeers);
  printf("config.graphStreamOrdering %d\n", c.graphStreamOrdering);
  printf("siminfo.size %zu\n", s.size);
  printf("siminfo.magic %#x\n", s.magic);
  printf("siminfo.version %u\n", s.version);
  printf("siminfo.estimatedTime %a\n", (double)s.estimatedTime);
}

int main(void) {
  /* Use the tag checks so no compiler calls them unused. */
  if (config_tag_check || siminfo_tag_check || comm_tag_check ||
      window_tag_check)
    return 1;
  print_sizes();
  print_enums();
  print_macros();
  print_initializers();
  return 0;
}
