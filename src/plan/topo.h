/*
 * Braid topology: what this host offers, discovered once per process with
 * hwloc. The cost model and the host executor size themselves from it.
 */
#ifndef BRD_PLAN_TOPO_H
#define BRD_PLAN_TOPO_H

#include <stdint.h>

#include "nccl.h"

typedef struct brd_topo_host {
  int cores;       /* physical cores (>= 1) */
  int pus;         /* hardware threads (>= cores) */
  int numa_nodes;  /* >= 1 */
} brd_topo_host_t;

/* This host's cores, hardware threads and NUMA nodes, discovered with hwloc
 * on first use and cached. If hwloc fails the answer falls back to
 * sysconf(_SC_NPROCESSORS_ONLN) with one NUMA node (INFO says so); it never
 * fails. Any thread. */
void brd_topo_host(brd_topo_host_t *out);

/* ---- PCI paths and the NICs near a rank -------------------------------- */

/* How far apart two devices are, nearest first, with NCCL's names: LOC the
 * same device; PIX through at most one PCIe switch; PXB through several
 * switches but no host bridge; PHB through the host bridge (root complex)
 * both sit under; NODE through two host bridges of one NUMA node (NCCL
 * counts this as PHB; nvidia-smi calls it NODE); SYS across the link
 * between NUMA nodes (QPI, UPI, xGMI). */
typedef enum {
  BRD_TOPO_PATH_LOC = 0,
  BRD_TOPO_PATH_PIX,
  BRD_TOPO_PATH_PXB,
  BRD_TOPO_PATH_PHB,
  BRD_TOPO_PATH_NODE,
  BRD_TOPO_PATH_SYS,
  BRD_TOPO_PATH_COUNT
} brd_topo_path_t;

/* "LOC", "PIX", ... "SYS"; "?" out of range. Static strings. */
const char *brd_topo_path_name(brd_topo_path_t p);

/* The path type between two endpoints, each a sysfs device path
 * ("/sys/devices/pci0000:17/0000:17:01.0/0000:18:00.0[/...]": only the
 * root "pciDDDD:BB" and the bus ids after it count) and its NUMA node (-1
 * unknown, which matches any). A NULL or non-PCI path is a CPU socket
 * itself (host mode has no GPU; a virtual NIC hangs off the CPU): PHB to
 * anything of its NUMA node, SYS beyond. Pure; any thread. */
brd_topo_path_t brd_topo_path_classify(const char *a_path, int a_numa,
                                       const char *b_path, int b_numa);

#define BRD_TOPO_NICS_MAX 32
#define BRD_TOPO_STR_MAX 256

/* One NIC as this rank sees it. */
typedef struct {
  char name[64];                 /* "eth0", "mlx5_0" */
  char pci_path[BRD_TOPO_STR_MAX]; /* sysfs path; "" for a virtual NIC */
  char busid[16];                /* "0000:17:00.0"; "" when not on PCI */
  int numa;                      /* NUMA node, -1 unknown */
  int dev;                       /* the net's device index; -1: hwloc only */
  int speed_mbps;                /* the net's figure (Mbit/s); 0 unknown */
  int port;
  uint64_t guid;
  int maxconn;
  int gdr;                       /* 1: the net can reach GPU memory */
  brd_topo_path_t path;          /* from this rank's GPU (or CPU) */
} brd_topo_nic_t;

/* What one rank finds about its own host: caller's memory, plain data. */
typedef struct {
  uint64_t host_hash;
  int numa;                      /* NUMA node this process runs on, -1 unknown */
  int numa_nodes;                /* of the host */
  char cpu_affinity[BRD_TOPO_STR_MAX]; /* cpulist of the process's NUMA node */
  int has_gpu;                   /* 0 in host mode: paths start at the CPU */
  char gpu_busid[16];
  char gpu_pci_path[BRD_TOPO_STR_MAX];
  int gpu_numa;
  char net_name[32];             /* the chosen net, "" when none */
  int nnics;
  brd_topo_nic_t nics[BRD_TOPO_NICS_MAX]; /* the net's devices, then NICs
                                            hwloc found that the net has not */
} brd_topo_rank_t;

/* Fills *out for this process: NUMA node and cpus (hwloc), the GPU with
 * bus id gpu_busid (NULL or "" in host mode), the chosen net's devices
 * (brd_net_get, then init/getProperties/finalize) and the network and
 * OpenFabrics devices hwloc sees, each with its path type from the GPU, or
 * from the CPU in host mode. Never fails: what cannot be read is left
 * unknown and INFO says why. May dlopen a net plugin; blocks on sysfs. */
void brd_topo_rank_discover(uint64_t host_hash, const char *gpu_busid,
                            brd_topo_rank_t *out);

/* The nearest NIC of r (lowest path type, the net's devices first), or -1. */
int brd_topo_rank_nearest_nic(const brd_topo_rank_t *r);

/* Whether a NIC reaches GPU memory directly, NCCL's topology `gdr`: its
 * net takes CUDA pointers (BRD_NET_PTR_CUDA in ptr_support: nvidia-peermem),
 * or takes DMA-BUF (BRD_NET_PTR_DMABUF) and DMA-BUF is usable here
 * (dmabuf_ok: NCCL_DMABUF_ENABLE, the net's regMrDmaBuf, a GPU and driver
 * that export DMA-BUF). Pure; any thread. */
int brd_topo_nic_gdr(int ptr_support, int dmabuf_ok);

/* One host of the communicator, for the dump's header. */
typedef struct {
  uint64_t hash;
  int nranks;
  int first_rank;
} brd_topo_host_ref_t;

/* Writes an XML file in the spirit of NCCL's NCCL_TOPO_DUMP_FILE to path:
 * <system> with one <host> per entry of hosts, then this rank's <cpu>
 * (numaid, affinity, host_hash) holding <pci>/<gpu> and <pci>/<nic>/<net>
 * elements (name, dev, speed, port, guid, maxconn, gdr, pciPath) with the
 * path type to the GPU (or CPU). rank is the writer. Returns ncclSystemError
 * with a WARN naming the file and errno when it cannot be written. Any
 * thread; blocks on the file system. */
ncclResult_t brd_topo_dump_write(const char *path, int rank, const brd_topo_rank_t *r,
                                 const brd_topo_host_ref_t *hosts, int nhosts);

#endif /* BRD_PLAN_TOPO_H */
