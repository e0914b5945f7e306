/*
 * Braid topology: what this host offers, discovered once per process with
 * hwloc. The cost model and the host executor size themselves from it.
 */
#ifndef BRD_PLAN_TOPO_H
#define BRD_PLAN_TOPO_H

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

#endif /* BRD_PLAN_TOPO_H */
