/*
 * braid-simulate: the cost model's predictions for a cluster described on
 * the command line.
 *
 *   braid-simulate [--nodes N] [--gpus-per-node L] [--gpu h100|h200|pcie]
 *                  [--nics K] [--nic-gbps G] [--coll allreduce|allgather|
 *                  reducescatter|broadcast|reduce] [--min BYTES] [--max BYTES]
 *                  [--step F] [--local R] [--constants]
 *
 * For each size from --min to --max (8 B to 8 GiB by default, times --step,
 * 4 by default) it prints every algorithm's predicted time (its best
 * protocol) and bus bandwidth (Hier, Braid's hierarchical AllReduce,
 * among them), the choice among the algorithms Braid can generate, and
 * the choice among all of NCCL's (which have no Hier). --local R also
 * builds R host-mode ranks in this process and prints what
 * ncclGroupSimulateEnd estimates for them: that is the runtime's own
 * topology (one host), not the cluster above. --constants prints the
 * hardware table with its sources.
 *
 * Linked against the static library: it reads the internal tuner API.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "nccl.h"
#include "core/plans.h"
#include "plan/tune.h"
#include "size.h"

static const char *const coll_names[] = {"allreduce", "allgather", "reducescatter",
                                         "broadcast", "reduce"};
static const brd_coll_t coll_codes[] = {BRD_COLL_ALLREDUCE, BRD_COLL_ALLGATHER,
                                        BRD_COLL_REDUCESCATTER, BRD_COLL_BROADCAST,
                                        BRD_COLL_REDUCE};

static void usage(void) {
  fprintf(stderr,
          "usage: braid-simulate [--nodes N] [--gpus-per-node L] [--gpu h100|h200|pcie]\n"
          "                      [--nics K] [--nic-gbps G] [--coll NAME] [--min BYTES]\n"
          "                      [--max BYTES] [--step F] [--local R] [--constants]\n");
}

/* b as "8", "64K", "8G" (powers of 1024), the largest unit that divides it. */
static void size_str(size_t b, char *buf, size_t n) {
  if (b >= (1ull << 30) && b % (1ull << 30) == 0) snprintf(buf, n, "%zuG", b >> 30);
  else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, n, "%zuM", b >> 20);
  else if (b >= 1024 && b % 1024 == 0) snprintf(buf, n, "%zuK", b >> 10);
  else snprintf(buf, n, "%zu", b);
}

/* busbw / algbw, as nccl-tests defines it. */
static double bus_factor(brd_coll_t c, int n) {
  if (c == BRD_COLL_ALLREDUCE) return 2.0 * (n - 1) / n;
  if (c == BRD_COLL_ALLGATHER || c == BRD_COLL_REDUCESCATTER) return (double)(n - 1) / n;
  return 1.0;
}

/* Best time of algorithm a over the protocols, or -1. */
static double best_time(const brd_tune_topo_t *t, brd_coll_t c, size_t bytes, int a,
                        brd_proto_t *proto_out) {
  double best = -1.0;
  for (int p = 0; p < BRD_PROTO_COUNT; p++) {
    if (p == BRD_PROTO_LL128 && !t->ll128_ok) continue;
    double e = brd_tune_estimate(t, c, bytes, (brd_algo_t)a, (brd_proto_t)p);
    if (e >= 0.0 && (best < 0.0 || e < best)) {
      best = e;
      *proto_out = (brd_proto_t)p;
    }
  }
  return best;
}

static int local_simulate(int nranks, brd_coll_t coll, size_t min, size_t max, double step) {
  ncclComm_t *comms = calloc((size_t)nranks, sizeof(*comms));
  int *devs = calloc((size_t)nranks, sizeof(*devs));
  size_t cap = max < ((size_t)16 << 20) ? max : ((size_t)16 << 20);
  char *buf = malloc(cap * (size_t)nranks);
  int rc = 1;
  if (comms == NULL || devs == NULL || buf == NULL) goto out;
  setenv("BRAID_DEVICE", "host", 0);
  for (int i = 0; i < nranks; i++) devs[i] = i;
  if (ncclCommInitAll(comms, nranks, devs) != ncclSuccess) {
    fprintf(stderr, "braid-simulate: ncclCommInitAll(%d) failed: %s\n", nranks,
            ncclGetLastError(NULL));
    goto out;
  }
  printf("\nncclGroupSimulateEnd, %d host-mode ranks in this process (the runtime's own "
         "topology: one host, host mode; sizes up to 16M)\n%10s %12s\n", nranks, "size",
         "time(us)");
  for (double b = (double)min; b <= (double)cap; b *= step) {
    size_t bytes = (size_t)b & ~(size_t)3;
    if (bytes == 0) continue;
    size_t count = bytes / 4;
    if (coll == BRD_COLL_ALLGATHER || coll == BRD_COLL_REDUCESCATTER) count /= (size_t)nranks;
    if (count == 0) continue;
    ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;
    ncclGroupStart();
    for (int r = 0; r < nranks; r++) {
      char *p = buf + (size_t)r * cap;
      switch (coll) {
        case BRD_COLL_ALLGATHER:
          ncclAllGather(p, p, count, ncclFloat32, comms[r], NULL);
          break;
        case BRD_COLL_REDUCESCATTER:
          ncclReduceScatter(p, p, count, ncclFloat32, ncclSum, comms[r], NULL);
          break;
        case BRD_COLL_BROADCAST:
          ncclBroadcast(p, p, count, ncclFloat32, 0, comms[r], NULL);
          break;
        case BRD_COLL_REDUCE:
          ncclReduce(p, p, count, ncclFloat32, ncclSum, 0, comms[r], NULL);
          break;
        default:
          ncclAllReduce(p, p, count, ncclFloat32, ncclSum, comms[r], NULL);
          break;
      }
    }
    if (ncclGroupSimulateEnd(&sim) != ncclSuccess) {
      fprintf(stderr, "braid-simulate: ncclGroupSimulateEnd: %s\n", ncclGetLastError(NULL));
      goto out_destroy;
    }
    char s[32];
    size_str(bytes, s, sizeof(s));
    printf("%10s %12.2f\n", s, (double)sim.estimatedTime);
  }
  rc = 0;
out_destroy:
  for (int i = 0; i < nranks; i++) ncclCommDestroy(comms[i]);
out:
  free(buf);
  free(devs);
  free(comms);
  return rc;
}

int main(int argc, char **argv) {
  int nodes = 2, gpn = 8, nics = 8, local = 0, constants = 0;
  double gbps = 400.0, step = 4.0;
  brd_hw_gpu_t gpu = BRD_HW_GPU_H100;
  brd_coll_t coll = BRD_COLL_ALLREDUCE;
  size_t min = 8, max = (size_t)8 << 30;

  for (int i = 1; i < argc; i++) {
    const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (strcmp(o, "--constants") == 0) { constants = 1; continue; }
    if (v == NULL) { usage(); return 2; }
    if (strcmp(o, "--nodes") == 0) nodes = atoi(v);
    else if (strcmp(o, "--gpus-per-node") == 0) gpn = atoi(v);
    else if (strcmp(o, "--nics") == 0) nics = atoi(v);
    else if (strcmp(o, "--nic-gbps") == 0) gbps = atof(v);
    else if (strcmp(o, "--step") == 0) ok = (step = atof(v)) > 1.0;
    else if (strcmp(o, "--local") == 0) ok = (local = atoi(v)) > 0;
    else if (strcmp(o, "--gpu") == 0) ok = brd_hw_gpu_parse(v, &gpu);
    else if (strcmp(o, "--min") == 0) ok = brd_tool_size_parse(v, &min);
    else if (strcmp(o, "--max") == 0) ok = brd_tool_size_parse(v, &max);
    else if (strcmp(o, "--coll") == 0) {
      ok = 0;
      for (int c = 0; c < 5; c++)
        if (strcasecmp(v, coll_names[c]) == 0) { coll = coll_codes[c]; ok = 1; }
    } else ok = 0;
    if (!ok) {
      fprintf(stderr, "braid-simulate: bad option %s %s\n", o, v);
      usage();
      return 2;
    }
    i++;
  }
  if (constants) {
    printf("%-34s %10s %-7s %s\n", "constant", "value", "unit", "source");
    for (int k = 0; k < BRD_HW_COUNT; k++)
      printf("%-34s %10.2f %-7s %s\n", brd_hw_consts[k].name, brd_hw_consts[k].value,
             brd_hw_consts[k].unit, brd_hw_consts[k].source);
    return 0;
  }

  brd_tune_topo_t t;
  if (brd_hw_topo(gpu, nodes, gpn, nics, gbps, &t) != ncclSuccess) {
    fprintf(stderr, "braid-simulate: %s\n", ncclGetLastError(NULL));
    return 2;
  }
  brd_tune_mask_t mask;
  if (brd_tune_parse(NULL, NULL, &mask) != ncclSuccess) return 1;
  uint32_t braid_avail = brd_plans_available((uint8_t)coll, 0);
  const char *cname = coll_names[0];
  for (int c = 0; c < 5; c++) if (coll_codes[c] == coll) cname = coll_names[c];

  printf("# %s on %d node(s) x %d GPU(s), %s: intra %.1f GB/s %.2f us/hop%s", cname, nodes,
         gpn, argc > 0 ? (gpu == BRD_HW_GPU_PCIE ? "PCIe" : gpu == BRD_HW_GPU_H200 ? "H200"
                                                                             : "H100")
                       : "", (double)t.intra_bw, (double)t.intra_lat, t.nvls ? ", NVLS" : "");
  if (t.nvls) printf(" %.1f GB/s", (double)t.nvls_bw);
  if (nodes > 1)
    printf("; %d NIC(s) x %.0f Gbit/s -> %.1f GB/s each, %.1f per node, %.2f us/hop",
           t.inter_nics, gbps, (double)t.inter_bw, (double)t.inter_bw * t.inter_nics,
           (double)t.inter_lat);
  printf("\n# per algorithm: time(us) with its best protocol, busbw(GB/s); Hier is\n"
         "# Braid's hierarchical AllReduce (NCCL has none);\n"
         "# Braid = the tuner's choice among Braid's generators, NCCL = among NCCL's.\n");

  int cols[BRD_ALGO_COUNT], ncols = 0;
  brd_proto_t pr;
  for (int a = 0; a < BRD_ALGO_COUNT; a++)
    if (best_time(&t, coll, (size_t)1 << 20, a, &pr) >= 0.0) cols[ncols++] = a;

  printf("%8s", "size");
  for (int k = 0; k < ncols; k++)
    printf(" | %-22s", brd_algo_name((brd_algo_t)cols[k]));
  printf(" | %-28s | %-28s\n", "Braid", "NCCL");
  double factor = bus_factor(coll, t.nranks);
  for (double b = (double)min; b <= (double)max * 1.0000001; b *= step) {
    size_t bytes = (size_t)b;
    char s[32];
    size_str(bytes, s, sizeof(s));
    printf("%8s", s);
    for (int k = 0; k < ncols; k++) {
      double e = best_time(&t, coll, bytes, cols[k], &pr);
      if (e < 0.0) printf(" | %-22s", "-");
      else printf(" | %10.1f %-6s %4.0f", e, brd_proto_name(pr), bytes / (e * 1000.0) * factor);
    }
    uint32_t avails[2] = {braid_avail, BRD_ALGO_ALL & ~BRD_ALGO_BIT(BRD_ALGO_HIER)};
    for (int w = 0; w < 2; w++) {
      brd_tune_choice_t ch;
      if (brd_tune_select(&t, coll, bytes, avails[w], &mask, &ch) != ncclSuccess) {
        printf(" | %-28s", "none");
        continue;
      }
      char cell[64];
      snprintf(cell, sizeof(cell), "%s/%s %.1f us %.0f GB/s", brd_algo_name(ch.algo),
               brd_proto_name(ch.proto), (double)ch.time_us,
               bytes / ((double)ch.time_us * 1000.0) * factor);
      printf(" | %-28s", cell);
    }
    printf("\n");
  }
  return local > 0 ? local_simulate(local, coll, min, max, step) : 0;
}
