/*
 * Braid host topology through hwloc (see topo.h).
 */
#include <hwloc.h>
#include <pthread.h>
#include <unistd.h>

#include "base/check.h"
#include "plan/topo.h"

static pthread_once_t topo_once = PTHREAD_ONCE_INIT;
static brd_topo_host_t topo_cached;

static int count_type(hwloc_topology_t t, hwloc_obj_type_t type) {
  int n = hwloc_get_nbobjs_by_type(t, type);
  return n > 0 ? n : 0;
}

static void topo_discover(void) {
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  brd_topo_host_t h = {.cores = online > 0 ? (int)online : 1,
                       .pus = online > 0 ? (int)online : 1,
                       .numa_nodes = 1};
  hwloc_topology_t t;
  if (hwloc_topology_init(&t) != 0) {
    INFO(BRD_SUBSYS_GRAPH, "hwloc could not start; assuming %d cores, one "
         "NUMA node", h.cores);
    topo_cached = h;
    return;
  }
  if (hwloc_topology_load(t) == 0) {
    int cores = count_type(t, HWLOC_OBJ_CORE);
    int pus = count_type(t, HWLOC_OBJ_PU);
    int numa = count_type(t, HWLOC_OBJ_NUMANODE);
    if (pus > 0) h.pus = pus;
    if (cores > 0) h.cores = cores;
    if (h.cores > h.pus) h.cores = h.pus;
    if (numa > 0) h.numa_nodes = numa;
  } else {
    INFO(BRD_SUBSYS_GRAPH, "hwloc could not load this host's topology; "
         "assuming %d cores, one NUMA node", h.cores);
  }
  hwloc_topology_destroy(t);
  INFO(BRD_SUBSYS_GRAPH, "Topology: %d cores, %d hardware threads, %d NUMA "
       "node(s)", h.cores, h.pus, h.numa_nodes);
  topo_cached = h;
}

void brd_topo_host(brd_topo_host_t *out) {
  pthread_once(&topo_once, topo_discover);
  *out = topo_cached;
}
