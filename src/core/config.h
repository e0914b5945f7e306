/*
 * Braid communicator configuration: turns the ncclConfig_t an application
 * passes (any NCCL version's layout, or none) into the settings a
 * communicator runs with, by NCCL 2.30.7's rules.
 *
 * Old headers: a program built against NCCL 2.28 passes an 80-byte
 * ncclConfig_t (size 80, version 228xx); 2.29 an 88-byte one. Only the
 * bytes its size names are read, and fields newer than its version take
 * their defaults, so such programs run unchanged.
 *
 * The 2.29/2.30 fields:
 *   graphUsageMode      accepted and kept; Braid's launches are the same
 *                       inside and outside CUDA graph capture, so it changes
 *                       nothing.
 *   numRmaCtx           the contexts of ncclPutSignal/ncclSignal/
 *                       ncclWaitSignal (default 1; rma.c uses at most 16).
 *   maxP2pPeers         accepted and kept (default: no limit); Braid does not
 *                       bound its point-to-point peers, so it has no effect.
 *   graphStreamOrdering accepted and kept (default 0); captured launches
 *                       already follow their stream's order.
 * Each must be NCCL_CONFIG_UNDEF_INT or valid (numRmaCtx, maxP2pPeers
 * positive; graphStreamOrdering 0 or 1; graphUsageMode not negative).
 */
#ifndef BRD_CORE_CONFIG_H
#define BRD_CORE_CONFIG_H

#include "nccl.h"

/* Upper bounds NCCL applies to configuration fields. */
#define BRD_CONFIG_MAX_CTAS 64          /* minCTAs, maxCTAs, nChannelsPerNetPeer */
#define BRD_CONFIG_MAX_CGA_CLUSTER 8    /* cgaClusterSize */

/* Resolves a communicator configuration into *config_out.
 *
 * user: the application's config, or NULL. Only min(user->size,
 * sizeof(ncclConfig_t)) bytes are read; a magic other than 0xcafebeef is
 * ncclInvalidArgument. Fields newer than user->version take their defaults.
 * Values the application set are checked (ncclInvalidArgument with a WARN
 * naming the field and what is allowed); undefined ones take NCCL's
 * defaults.
 * inherit: the parent's resolved config for ncclCommSplit/ncclCommShrink, or
 * NULL. As in NCCL it is used only when user is NULL: the child then starts
 * from the parent's settings. A child given its own config starts from that
 * config and the defaults, not from the parent.
 * Then, in every case, the NCCL_* variables that are set override the
 * result (NCCL_COMM_BLOCKING, NCCL_CGA_CLUSTER_SIZE, NCCL_MIN_CTAS,
 * NCCL_MAX_CTAS, NCCL_NET, NCCL_COMM_SPLIT_SHARE_RESOURCES,
 * NCCL_COMM_SHRINK_SHARE_RESOURCES, NCCL_COLLNET_ENABLE, NCCL_CTA_POLICY,
 * NCCL_NVLS_NCHANNELS, NCCL_NCHANNELS_PER_NET_PEER,
 * NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE), and out-of-range results are
 * clamped with an INFO/ENV line, as NCCL does.
 *
 * On success *config_out has size, magic and version of this library;
 * blocking, cgaClusterSize, minCTAs, maxCTAs, splitShare, collnetEnable,
 * CTAPolicy, shrinkShare and nvlinkCentricSched are defined; trafficClass,
 * nvlsCTAs, nChannelsPerNetPeer, graphUsageMode and maxP2pPeers may stay
 * NCCL_CONFIG_UNDEF_INT
 * ("automatic"); netName and commName are NULL or heap copies owned by
 * *config_out (release with brd_config_fini). Nothing is written on failure.
 * Any thread; does not block.
 */
ncclResult_t brd_config_resolve(const ncclConfig_t *user, const ncclConfig_t *inherit,
                                ncclConfig_t *config_out);

/* Frees the strings a resolved config owns and clears those fields.
 * NULL is a no-op. */
void brd_config_fini(ncclConfig_t *config);

#endif /* BRD_CORE_CONFIG_H */
