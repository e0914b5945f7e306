/*
 * Braid: the hardware figures of the cluster cost model, one table with
 * each figure's source, and the model topology built from them (tune.h).
 *
 * Sources are NCCL's code (nccl:path at v2.28.9), NVIDIA's issue threads
 * (nccl#N, nccl-tests#N) and the notes that collect them (nvls-ib.md,
 * nccl-2.28.md, section and line). docs/perf/cost-model.md compares the
 * predictions with the published figures.
 */
#include <strings.h>

#include "base/check.h"
#include "plan/tune.h"

/* See tune.h. */
const brd_hw_const_t brd_hw_consts[BRD_HW_COUNT] = {
    [BRD_HW_NVLINK4_LINK_BW] = {"nvlink4.link_bw", 20.6, "GB/s",
                                "nccl:src/graph/topo.h SM90_NVLINK_BW"},
    [BRD_HW_H100_NVLINKS] = {"h100.nvlinks", 18, "links",
                             "H100 SXM has 18 NVLink 4 links (18 x 20.6 = 370.8 GB/s)"},
    [BRD_HW_H100_RING_BUSBW] = {"h100.ring_busbw", 370, "GB/s",
                                "nccl#1442 (app-level NVLink bw 370 GB/s per direction), "
                                "nccl#1455 (ring 365-370); nvls-ib.md 1.6 lines 149-150"},
    [BRD_HW_H100_NVLS_BUSBW] = {"h100.nvls_busbw_8gpu", 480, "GB/s",
                                "nccl-tests#212 (NVLS AllReduce ~480 GB/s at >= 1 GiB), "
                                "nccl#1455; nvls-ib.md 1.6 lines 148-149"},
    [BRD_HW_H200_NVLS_BUSBW] = {"h200.nvls_busbw_8gpu", 475, "GB/s",
                                "nccl-tests#272; nvls-ib.md 1.6 line 151"},
    [BRD_HW_H100_NVLS_BUSBW_2_4] = {"h100.nvls_busbw_2to4gpu", 367, "GB/s",
                                    "nccl#1455 (NVLS busbw 365-370 on 2-4 H100s, the same "
                                    "as ring); nvls-ib.md 1.6"},
    [BRD_HW_H100_NVLS_BUSBW_5] = {"h100.nvls_busbw_5gpu", 420, "GB/s",
                                  "nccl#1455 (420/440/460/480 for 5/6/7/8 GPUs); "
                                  "nvls-ib.md 1.6"},
    [BRD_HW_H100_NVLS_BUSBW_6] = {"h100.nvls_busbw_6gpu", 440, "GB/s",
                                  "nccl#1455; nvls-ib.md 1.6"},
    [BRD_HW_H100_NVLS_BUSBW_7] = {"h100.nvls_busbw_7gpu", 460, "GB/s",
                                  "nccl#1455; nvls-ib.md 1.6"},
    [BRD_HW_LAT_NVLS_BARRIER] = {"lat.nvls_barrier", 1.5, "us",
                                 "fit: MSCCL++ NVLS all-reduce ~6.5 us for 1-64 KiB on "
                                 "H100 (mscclpp docs/dsl/results.md; nvls-ib.md 1.6) less "
                                 "the model's 5 us base; a multimem.red release plus a local "
                                 "acquire spin"},
    [BRD_HW_PCI_BW] = {"pcie.gen3x16_bw", 12.0, "GB/s", "nccl:src/graph/topo.h PCI_BW"},
    [BRD_HW_NIC_EFF] = {"nic.efficiency", 0.94, "ratio",
                        "46-48 GB/s per 400G NIC through NCCL (nccl-tests#290): 47/50; "
                        "nvls-ib.md 4.3 lines 410, 419"},
    [BRD_HW_LAT_NVLINK] = {"lat.nvlink", 0.6, "us/hop",
                           "nccl:src/graph/tuning.cc hwLat NVLink Ring LL; nccl-2.28.md cost "
                           "model table"},
    [BRD_HW_LAT_PCI] = {"lat.pci", 1.0, "us/hop",
                        "nccl:src/graph/tuning.cc hwLat PCI Ring LL; nccl-2.28.md"},
    [BRD_HW_LAT_NET] = {"lat.net", 2.7, "us/hop",
                        "nccl:src/graph/tuning.cc hwLat NET Ring LL (x5 for Simple = 13.5 vs "
                        "NCCL's 14); nccl-2.28.md, nvls-ib.md 4.1 line 374"},
    [BRD_HW_PUB_MULTI_LO] = {"pub.h100x8_8x400g.busbw_lo", 350, "GB/s",
                             "nccl-tests#283 (~350 typical, 248 nodes x 8 H200); "
                             "nvls-ib.md 4.3 lines 414, 419"},
    [BRD_HW_PUB_MULTI_HI] = {"pub.h100x8_8x400g.busbw_hi", 385, "GB/s",
                             "flat NIC ceiling 8 x 46-48 = 370-385 GB/s; nvls-ib.md 4.3 "
                             "line 419"},
    [BRD_HW_PUB_2NODE_NVLSTREE] = {"pub.h100x8_8x400g.2node_nvlstree", 470, "GB/s",
                                   "nccl#2409 citing nccl-tests#309 (~470 expected), "
                                   "nccl#1221 (430); nvls-ib.md 4.3 lines 411-412"},
    /* Host mode: see docs/perf/cost-model.md, "Host mode: the model against
     * measurements" (tools/calibrate-host.sh). Least-squares fit of the
     * log of the median times (5 runs on a quiet host), AllReduce at 4 and
     * 8 ranks, 8 B to 64 MiB. */
    [BRD_HW_HOST_LAUNCH_US] = {"host.launch_per_rank2", 0.82, "us/rank^2",
                               "fit, 2-vCPU VM, 2026-11-26 (quiet): a launch wakes every "
                               "rank's threads, which take turns on the host's cores; "
                               "L^2 fits (a free exponent gives 1.93-1.99)"},
    [BRD_HW_HOST_BLOCK_US] = {"host.block2_per_rank", 77, "us/rank",
                              "fit, same: a second worker thread per rank (from 256 KiB)"},
    [BRD_HW_HOST_HOP_US] = {"host.hop_per_rank", 0.80, "us/hop/rank",
                            "fit, same: a wait spins, yields, then naps 20 us; the peer runs "
                            "when the cores get to it"},
    [BRD_HW_HOST_COPY_GBPS] = {"host.copy_bw", 3.45, "GB/s",
                               "fit, same: the bytes the host's ranks move together "
                               "(each rank gets its share)"},
    [BRD_HW_HOST_LL_STEP] = {"host.ll_step", 1.0, "ratio",
                             "fit, 2026-11-26 (loaded host): an LL hop against a Simple one "
                             "(a free fit gives 0.96)"},
    [BRD_HW_HOST_LL_EFF] = {"host.ll_eff", 0.116, "ratio",
                            "fit, same: LL's payload rate against Simple's (a flag and a "
                            "poll per 8-byte line)"},
    [BRD_HW_HOST_TREE_HOPS] = {"host.tree_hops_per_level", 7, "hops",
                               "braid-plan -a tree -n 4|8 -s 8: the plan's critical path is "
                               "14 and 21 sync hops (NCCL's formula: 2 per level)"},
    [BRD_HW_HOST_FAN_US] = {"host.fan_per_peer", 0.125, "us/hop/peer/rank",
                            "fit, same: a direct pattern's wait is on every other rank, "
                            "each of which the cores must get to"},
    [BRD_HW_HOST_FIT_RING] = {"host.fit_ring", 0.79, "ratio",
                              "fit, same: Ring's copy rate against OneShot's (a ring step "
                              "reduces into the next rank's slot and waits for it)"},
    [BRD_HW_HOST_FIT_TREE] = {"host.fit_tree", 1.02, "ratio",
                              "fit, same: Tree's copy rate against OneShot's"},
    [BRD_HW_HOST_FIT_TWOSHOT] = {"host.fit_twoshot", 0.95, "ratio",
                                 "fit, same: TwoShot's copy rate against OneShot's"},
};

static const char *const gpu_names[BRD_HW_GPU_COUNT] = {
    [BRD_HW_GPU_H100] = "h100", [BRD_HW_GPU_H200] = "h200", [BRD_HW_GPU_PCIE] = "pcie"};

/* See tune.h. */
int brd_hw_gpu_parse(const char *name, brd_hw_gpu_t *out) {
  for (int g = 0; name != NULL && g < BRD_HW_GPU_COUNT; g++) {
    if (strcasecmp(name, gpu_names[g]) == 0) {
      *out = (brd_hw_gpu_t)g;
      return 1;
    }
  }
  return 0;
}

#define HW(id) (brd_hw_consts[id].value)

/* See tune.h. */
ncclResult_t brd_hw_topo(brd_hw_gpu_t gpu, int nodes, int gpus_per_node, int nics,
                         double nic_gbps, brd_tune_topo_t *out) {
  if (nodes < 1 || gpus_per_node < 1 || (unsigned)gpu >= BRD_HW_GPU_COUNT ||
      (nodes > 1 && (nics < 1 || !(nic_gbps > 0.0)))) {
    WARN("cluster model: %d nodes of %d GPUs with %d NICs of %.0f Gbit/s is not a "
         "topology; give at least one node and GPU, and NICs with a positive speed "
         "when there are several nodes", nodes, gpus_per_node, nics, nic_gbps);
    return ncclInvalidArgument;
  }
  brd_tune_topo_t t = {0};
  int L = gpus_per_node;
  t.nranks = nodes * L;
  t.nnodes = nodes;
  t.local_nranks = L;
  t.ranks_per_device = 1;
  t.ll128_ok = gpu != BRD_HW_GPU_PCIE; /* NCCL: LL128 on NVLink paths only */
  if (gpu == BRD_HW_GPU_PCIE) {
    t.intra_bw = (float)HW(BRD_HW_PCI_BW);
    t.intra_lat = (float)HW(BRD_HW_LAT_PCI);
  } else {
    /* Ring busbw over NVLink is what one GPU's links carry per direction. */
    t.intra_bw = (float)HW(BRD_HW_H100_RING_BUSBW);
    t.intra_lat = (float)HW(BRD_HW_LAT_NVLINK);
    t.nvls = L > 1;
    /* Published NVLS all-reduce busbw by GPU count (H100; H200 scaled by
     * its 8-GPU figure), as algbw = busbw x L / (2 (L - 1)); more than 8
     * GPUs per node (NVL72) take the 8-GPU figure. */
    double busbw = L <= 4   ? HW(BRD_HW_H100_NVLS_BUSBW_2_4)
                   : L == 5 ? HW(BRD_HW_H100_NVLS_BUSBW_5)
                   : L == 6 ? HW(BRD_HW_H100_NVLS_BUSBW_6)
                   : L == 7 ? HW(BRD_HW_H100_NVLS_BUSBW_7)
                            : HW(BRD_HW_H100_NVLS_BUSBW);
    if (gpu == BRD_HW_GPU_H200) busbw *= HW(BRD_HW_H200_NVLS_BUSBW) / HW(BRD_HW_H100_NVLS_BUSBW);
    int Lb = L > 8 ? 8 : L;
    t.nvls_bw = L > 1 ? (float)(busbw * Lb / (2.0 * (Lb - 1))) : 0.0f;
    t.nvls_lat = (float)HW(BRD_HW_LAT_NVLS_BARRIER);
  }
  if (nodes > 1) {
    t.inter_nics = nics;
    t.inter_bw = (float)(nic_gbps / 8.0 * HW(BRD_HW_NIC_EFF));
    t.inter_lat = (float)HW(BRD_HW_LAT_NET);
  }
  *out = t;
  return ncclSuccess;
}

/* See tune.h. */
void brd_hw_host_topo(int local_nranks, size_t block2_bytes, brd_tune_topo_t *t) {
  double L = local_nranks > 1 ? local_nranks : 1;
  t->host_mode = 1;
  t->ranks_per_device = 1;
  /* The ranks of a host share its cores and its memory: what one rank
   * gets is the host's copy rate over L, and a wait or a launch costs more
   * the more ranks compete for the cores. */
  t->intra_bw = (float)(HW(BRD_HW_HOST_COPY_GBPS) / L);
  t->intra_lat = (float)(HW(BRD_HW_HOST_HOP_US) * L);
  t->launch_us = (float)(HW(BRD_HW_HOST_LAUNCH_US) * L * L);
  t->block_us = (float)(HW(BRD_HW_HOST_BLOCK_US) * L);
  t->block2_bytes = block2_bytes;
}
