/*
 * Braid P2P path checks: whether two ranks may reach each other's GPU
 * memory directly (brd_transport_p2p.can_connect), as NCCL decides it.
 *
 * The rules, cheapest first: one host, both ranks on the CUDA executor,
 * P2P not disabled on either side, then the path between the two GPUs
 * against NCCL_P2P_LEVEL (NCCL's path types; the default depends on the
 * CPU). The path comes from the PCI tree in sysfs, raised to NVLink when
 * CUDA reports native peer atomics; without an explicit level, GPUs behind
 * one PCIe switch in different IOMMU groups with DMA translation on (ACS
 * suspected) are refused. Nothing here talks to peers.
 */
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if BRAID_CUDA
#include <cuda_runtime.h>
#endif

#include "base/check.h"
#include "base/param.h"
#include "transport/transport.h"

/* NCCL's path types, in NCCL's order; NCCL_P2P_LEVEL names one of them. */
enum {
  PATH_LOC = 0, PATH_NVL, PATH_NVB, PATH_C2C, PATH_PIX, PATH_PXB, PATH_P2C,
  PATH_PXN, PATH_PHB, PATH_SYS, PATH_COUNT
};
static const char *const path_names[PATH_COUNT] = {
    "LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS"};

/* NCCL_P2P_LEVEL as a path type, or -1 when unset or not understood (NCCL
 * ignores a value it cannot read). Old numeric levels map as NCCL maps
 * them. */
static int user_level(void) {
  static const int old_levels[] = {PATH_LOC, PATH_PIX, PATH_PXB, PATH_PHB, PATH_SYS,
                                   PATH_SYS};
  const char *s = brd_param_str(BRD_P_P2P_LEVEL);
  if (s == NULL || s[0] == '\0') return -1;
  for (int i = 0; i < PATH_COUNT; i++)
    if (strcmp(s, path_names[i]) == 0) return i;
  if (s[0] >= '0' && s[0] <= '9') {
    long v = strtol(s, NULL, 0);
    int max = (int)(sizeof(old_levels) / sizeof(old_levels[0])) - 1;
    return old_levels[v > max ? max : v];
  }
  INFO(BRD_SUBSYS_P2P | BRD_SUBSYS_ENV, "NCCL_P2P_LEVEL=%s is not a path type "
       "(LOC, NVL, NVB, C2C, PIX, PXB, P2C, PXN, PHB, SYS); ignored", s);
  return -1;
}

/* ---- topology from sysfs (CUDA builds only use it) ------------------------ */
#if BRAID_CUDA

static pthread_once_t cpu_once = PTHREAD_ONCE_INIT;
static int cpu_default_level = PATH_SYS;

/* NCCL's default level: P2P through any path, except PXB at most on Intel
 * (and Zhaoxin) x86 CPUs and on ARM, whose root complexes forward peer
 * traffic poorly. */
static void cpu_level_init(void) {
#if defined(__aarch64__)
  cpu_default_level = PATH_PXB;
#else
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[256];
  if (f == NULL) return;
  while (fgets(line, sizeof(line), f) != NULL) {
    if (strncmp(line, "vendor_id", 9) != 0) continue;
    if (strstr(line, "GenuineIntel") != NULL || strstr(line, "CentaurHauls") != NULL ||
        strstr(line, "Shanghai") != NULL)
      cpu_default_level = PATH_PXB;
    break;
  }
  fclose(f);
#endif
}

/* Resolves /sys/bus/pci/devices/<bus> to its place in the PCI tree. */
static int pci_realpath(const char *bus, char *out) {
  char p[128];
  snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s", bus);
  return realpath(p, out) != NULL;
}

/* Splits a sysfs device path below /sys/devices into components. */
static int pci_split(char *path, char **comp, int max) {
  const char *pre = "/sys/devices/";
  if (strncmp(path, pre, strlen(pre)) != 0) return 0;
  int n = 0;
  for (char *save = NULL, *t = strtok_r(path + strlen(pre), "/", &save);
       t != NULL && n < max; t = strtok_r(NULL, "/", &save))
    comp[n++] = t;
  return n;
}

static int read_int_file(const char *path, int def) {
  FILE *f = fopen(path, "r");
  int v = def;
  if (f == NULL) return def;
  if (fscanf(f, "%d", &v) != 1) v = def;
  fclose(f);
  return v;
}

/* PCI distance between two GPUs from the sysfs tree: PIX when they share
 * one PCIe switch (at most two levels below the common bridge), PXB when
 * they share deeper bridges, PHB when they meet only at the host bridge or
 * under different host bridges of one NUMA node, SYS across NUMA nodes or
 * when sysfs cannot tell. */
static int pci_path(const char *bus_a, const char *bus_b, char *detail, size_t n) {
  char pa[PATH_MAX], pb[PATH_MAX];
  char *ca[32], *cb[32];
  if (!pci_realpath(bus_a, pa) || !pci_realpath(bus_b, pb)) {
    snprintf(detail, n, "PCI path unknown (no sysfs entry)");
    return PATH_SYS;
  }
  int na = pci_split(pa, ca, 32), nb = pci_split(pb, cb, 32);
  if (na < 2 || nb < 2) {
    snprintf(detail, n, "PCI path unknown (unexpected sysfs layout)");
    return PATH_SYS;
  }
  int m = 0;
  while (m < na - 1 && m < nb - 1 && strcmp(ca[m], cb[m]) == 0) m++;
  if (m == 0) {
    char p[128];
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/numa_node", bus_a);
    int numa_a = read_int_file(p, -1);
    snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/numa_node", bus_b);
    int numa_b = read_int_file(p, -1);
    snprintf(detail, n, "different host bridges, NUMA nodes %d and %d", numa_a, numa_b);
    return numa_a >= 0 && numa_a == numa_b ? PATH_PHB : PATH_SYS;
  }
  if (m == 1) {
    snprintf(detail, n, "host bridge %s", ca[0]);
    return PATH_PHB;
  }
  snprintf(detail, n, "common PCI bridge %s", ca[m - 1]);
  return na - m <= 2 && nb - m <= 2 ? PATH_PIX : PATH_PXB;
}

/* The IOMMU group of a PCI device, or -1 when the IOMMU is off. */
static int iommu_group(const char *bus) {
  char p[128], link[PATH_MAX];
  snprintf(p, sizeof(p), "/sys/bus/pci/devices/%s/iommu_group", bus);
  ssize_t k = readlink(p, link, sizeof(link) - 1);
  if (k <= 0) return -1;
  link[k] = '\0';
  const char *base = strrchr(link, '/');
  return atoi(base != NULL ? base + 1 : link);
}

/* GPUs behind one PCIe switch share an IOMMU group unless the switch
 * enforces ACS, which redirects peer traffic to the root complex; with DMA
 * translation on (group type other than "identity") that traffic faults or
 * crawls. */
static int acs_suspected(const char *bus_a, const char *bus_b, char *why, size_t n) {
  int ga = iommu_group(bus_a), gb = iommu_group(bus_b);
  if (ga < 0 || gb < 0 || ga == gb) return 0;
  char p[128], type[64] = "";
  snprintf(p, sizeof(p), "/sys/kernel/iommu_groups/%d/type", ga);
  FILE *f = fopen(p, "r");
  if (f == NULL) return 0;
  if (fgets(type, sizeof(type), f) == NULL) type[0] = '\0';
  fclose(f);
  type[strcspn(type, "\n")] = '\0';
  if (type[0] == '\0' || strcmp(type, "identity") == 0) return 0;
  snprintf(why, n, "GPUs %s and %s share a PCIe switch but sit in IOMMU groups %d and "
      "%d with DMA translation on (%s): ACS is probably enabled on the switch, "
      "which breaks or slows peer traffic; disable ACS or boot with iommu=pt, "
      "or set NCCL_P2P_LEVEL to use P2P anyway", bus_a, bus_b, ga, gb, type);
  return 1;
}

/* The GPU-dependent part of brd_p2p_usable, for two GPUs of one host. */
static int gpu_pair_usable(const brd_peer_info_t *a, const brd_peer_info_t *b,
                           int level, char *why, size_t n) {
  char detail[128];
  int path = pci_path(a->bus_id_str, b->bus_id_str, detail, sizeof(detail));
  int da = -1, db = -1;
  /* Peers of other processes may see other device numbers: map both GPUs
   * to this process's numbering by bus id; a GPU not visible here cannot be
   * queried, and its pair is judged on the PCI path alone. */
  if (cudaDeviceGetByPCIBusId(&da, a->bus_id_str) != cudaSuccess ||
      cudaDeviceGetByPCIBusId(&db, b->bus_id_str) != cudaSuccess) {
    (void)cudaGetLastError();
    da = db = -1;
  }
  if (da >= 0 && db >= 0) {
    int can = 0, atomics = 0;
    if (cudaDeviceCanAccessPeer(&can, da, db) != cudaSuccess) {
      (void)cudaGetLastError();
      can = 0;
    }
    if (!can) {
      snprintf(why, n, "CUDA reports no peer access from GPU %s to GPU %s "
          "(cudaDeviceCanAccessPeer)", a->bus_id_str, b->bus_id_str);
      return 0;
    }
    /* Native peer atomics exist over NVLink, not over PCIe: the cheapest
     * NVLink test without NVML. */
    if (cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, da,
                                  db) != cudaSuccess) {
      (void)cudaGetLastError();
      atomics = 0;
    }
    if (atomics) {
      path = PATH_NVL;
      snprintf(detail, sizeof(detail), "NVLink");
    }
  }
  pthread_once(&cpu_once, cpu_level_init);
  int max = level >= 0 ? level : cpu_default_level;
  if (path > max) {
    snprintf(why, n, "GPUs %s and %s are %s apart (%s), beyond NCCL_P2P_LEVEL=%s%s",
        a->bus_id_str, b->bus_id_str, path_names[path], detail, path_names[max],
        level >= 0 ? "" : " (NCCL's default for this CPU)");
    return 0;
  }
  if (level < 0 && (path == PATH_PIX || path == PATH_PXB) &&
      acs_suspected(a->bus_id_str, b->bus_id_str, why, n))
    return 0;
  snprintf(why, n, "GPUs %s and %s: %s (%s)", a->bus_id_str, b->bus_id_str,
      path_names[path], detail);
  return 1;
}
#endif /* BRAID_CUDA */

/* See transport.h. */
int brd_p2p_usable(const brd_peer_info_t *a, const brd_peer_info_t *b, char *why,
                   size_t n) {
  if (a->host_hash != b->host_hash) {
    snprintf(why, n, "the ranks are on different hosts");
    return 0;
  }
  if (a->backend != BRD_DEVICE_CUDA || b->backend != BRD_DEVICE_CUDA) {
    snprintf(why, n, "a rank runs on the host executor, without GPU memory");
    return 0;
  }
  if (brd_param_int(BRD_P_P2P_DISABLE) == 1) {
    snprintf(why, n, "NCCL_P2P_DISABLE=1");
    return 0;
  }
  if (!a->p2p || !b->p2p) {
    snprintf(why, n, "NCCL_P2P_DISABLE=1 on the rank using GPU %s",
        !a->p2p ? a->bus_id_str : b->bus_id_str);
    return 0;
  }
  if (a->bus_id == b->bus_id) {
    snprintf(why, n, "both ranks use GPU %s", a->bus_id_str);
    return 1;
  }
  int level = user_level();
  if (level == PATH_LOC) {
    snprintf(why, n, "NCCL_P2P_LEVEL=LOC allows P2P only between ranks on one GPU");
    return 0;
  }
#if BRAID_CUDA
  return gpu_pair_usable(a, b, level, why, n);
#else
  snprintf(why, n, "this library was built without CUDA (CUDA=0)");
  return 0;
#endif
}

