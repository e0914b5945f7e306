/*
 * Host topology: hwloc's answer agrees with what the kernel reports
 * independently (/sys and sysconf), and is cached; a NIC's gdr flag follows
 * NCCL's rule (brd_topo_nic_gdr).
 */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "plan/topo.h"
#include "transport/net.h"

/* Distinct (package, core) pairs of online CPUs, from /sys. */
static int sys_cores(void) {
  int seen[4096][2], n = 0;
  long ncpu = sysconf(_SC_NPROCESSORS_CONF);
  for (long c = 0; c < ncpu && c < 4096; c++) {
    char path[128];
    int core = -1, pkg = -1, online = 1;
    FILE *f;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%ld/online", c);
    if ((f = fopen(path, "r")) != NULL) {
      if (fscanf(f, "%d", &online) != 1) online = 1;
      fclose(f);
    }
    if (!online) continue;
    snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%ld/topology/core_id", c);
    if ((f = fopen(path, "r")) == NULL) return -1;
    if (fscanf(f, "%d", &core) != 1) core = -1;
    fclose(f);
    snprintf(path, sizeof(path),
             "/sys/devices/system/cpu/cpu%ld/topology/physical_package_id", c);
    if ((f = fopen(path, "r")) == NULL) return -1;
    if (fscanf(f, "%d", &pkg) != 1) pkg = -1;
    fclose(f);
    int dup = 0;
    for (int i = 0; i < n; i++) dup |= seen[i][0] == pkg && seen[i][1] == core;
    if (!dup) { seen[n][0] = pkg; seen[n][1] = core; n++; }
  }
  return n;
}

static void test_matches_kernel(void **state) {
  (void)state;
  brd_topo_host_t h;
  brd_topo_host(&h);
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  assert_true(h.cores >= 1);
  assert_true(h.numa_nodes >= 1);
  assert_true(h.cores <= h.pus);
  /* hwloc sees the CPUs this process may use; the kernel's online count
   * bounds it. */
  assert_true(h.pus <= online);
  int cores = sys_cores();
  if (cores > 0 && h.pus == online) assert_int_equal(h.cores, cores);
}

static void test_cached(void **state) {
  (void)state;
  brd_topo_host_t a, b;
  brd_topo_host(&a);
  brd_topo_host(&b);
  assert_memory_equal(&a, &b, sizeof(a));
}

/* A NIC's gdr flag against NCCL's rule (graph/topo.cc: CUDA pointers, or
 * DMA-BUF pointers where the communicator has DMA-BUF support), written
 * out by hand: a DMA-BUF NIC without nvidia-peermem reaches GPU memory. */
static void test_nic_gdr(void **state) {
  (void)state;
  static const struct {
    int ptr, dmabuf_ok, want;
  } rows[] = {
      {BRD_NET_PTR_HOST, 0, 0},
      {BRD_NET_PTR_HOST, 1, 0},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA, 0, 1},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA, 1, 1},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_DMABUF, 0, 0},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_DMABUF, 1, 1},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA | BRD_NET_PTR_DMABUF, 0, 1},
      {BRD_NET_PTR_HOST | BRD_NET_PTR_CUDA | BRD_NET_PTR_DMABUF, 1, 1},
      {BRD_NET_PTR_DMABUF, 1, 1},
  };
  for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
    int got = brd_topo_nic_gdr(rows[i].ptr, rows[i].dmabuf_ok);
    if (got != rows[i].want)
      fail_msg("ptrSupport 0x%x, DMA-BUF %s here: gdr %d, want %d", (unsigned)rows[i].ptr,
               rows[i].dmabuf_ok ? "usable" : "not usable", got, rows[i].want);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_matches_kernel),
      cmocka_unit_test(test_cached),
      cmocka_unit_test(test_nic_gdr),
  };
  return cmocka_run_group_tests_name("topo", tests, NULL, NULL);
}
