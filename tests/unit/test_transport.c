/*
 * Transport choice: each transport's can_connect for hand-built rank
 * identities, and brd_transport_choose over whole communicators (the one
 * place core picks a transport), against tables written out by hand.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/param.h"
#include "transport/transport.h"

/* A rank's identity as init publishes it. host and proc are hashes; bus is
 * the PCI bus of its GPU (0000:bb:00.0), or -1 for the host executor. */
static brd_peer_info_t peer(uint64_t host, uint64_t proc, int bus) {
  brd_peer_info_t p;
  memset(&p, 0, sizeof(p));
  p.host_hash = host;
  p.pid_hash = proc;
  p.pid = (int32_t)(proc & 0x7fffffff);
  if (bus < 0) {
    p.bus_id = -1;
    p.backend = BRD_DEVICE_HOST;
    snprintf(p.bus_id_str, sizeof(p.bus_id_str), "host");
  } else {
    p.bus_id = (int64_t)bus << 12;
    p.dev = bus;
    p.cuda_cc = 90;
    p.p2p = 1;
    p.backend = BRD_DEVICE_CUDA;
    snprintf(p.bus_id_str, sizeof(p.bus_id_str), "0000:%02x:00.0", bus);
  }
  return p;
}

static void env_set(const char *name, const char *value) {
  if (value != NULL)
    setenv(name, value, 1);
  else
    unsetenv(name);
  brd_param_reload();
}

/* Every transport has the op, and it is symmetric on these pairs. */
static void test_every_transport_has_can_connect(void **state) {
  (void)state;
  const brd_transport_ops_t *all[] = {&brd_transport_host, &brd_transport_shm,
                                      &brd_transport_p2p};
  brd_peer_info_t ids[] = {peer(1, 10, -1), peer(1, 11, -1), peer(2, 20, -1),
                           peer(1, 10, 0x3b), peer(3, 30, 0x3b)};
  for (size_t t = 0; t < sizeof(all) / sizeof(all[0]); t++) {
    assert_non_null(all[t]->can_connect);
    for (size_t i = 0; i < 5; i++)
      for (size_t j = 0; j < 5; j++)
        assert_int_equal(all[t]->can_connect(&ids[i], &ids[j], NULL, 0),
                         all[t]->can_connect(&ids[j], &ids[i], NULL, 0));
  }
}

static void test_host_connects_one_process(void **state) {
  (void)state;
  brd_peer_info_t a = peer(5, 0x1234, -1), b = peer(5, 0x1234, -1), c = peer(5, 0x99, -1);
  char why[128] = "x";
  assert_int_equal(brd_transport_host.can_connect(&a, &b, why, sizeof(why)), 1);
  assert_int_equal(brd_transport_host.can_connect(&a, &c, why, sizeof(why)), 0);
  assert_non_null(strstr(why, "different processes"));
  /* The pid alone is not the process: same pid in another namespace. */
  brd_peer_info_t d = peer(5, 0x4321, -1);
  d.pid = a.pid;
  assert_int_equal(brd_transport_host.can_connect(&a, &d, NULL, 0), 0);
}

static void test_shm_connects_one_host(void **state) {
  (void)state;
  brd_peer_info_t a = peer(5, 10, -1), b = peer(5, 11, -1), c = peer(6, 10, -1);
  char why[8]; /* too short: cut, still terminated */
  assert_int_equal(brd_transport_shm.can_connect(&a, &b, NULL, 0), 1);
  assert_int_equal(brd_transport_shm.can_connect(&a, &a, NULL, 0), 1);
  assert_int_equal(brd_transport_shm.can_connect(&a, &c, why, sizeof(why)), 0);
  assert_int_equal(strlen(why), sizeof(why) - 1);
  char full[128];
  assert_int_equal(brd_transport_shm.can_connect(&c, &a, full, sizeof(full)), 0);
  assert_non_null(strstr(full, "different hosts"));
}

/* P2P's op is the GPU-pair rule (its own cases are in test_p2p.c). */
static void test_p2p_op_is_the_pair_rule(void **state) {
  (void)state;
  brd_peer_info_t a = peer(7, 10, 0x3b), b = peer(7, 20, 0x3b), h = peer(7, 20, -1);
  assert_ptr_equal(brd_transport_p2p.can_connect, brd_p2p_usable);
  assert_int_equal(brd_transport_p2p.can_connect(&a, &b, NULL, 0), 1);
  assert_int_equal(brd_transport_p2p.can_connect(&a, &h, NULL, 0), 0);
}

/* Host memory: HOST when every rank is a thread of this process, else SHM
 * when all share the host, else none. */
static void test_choose_host_memory(void **state) {
  (void)state;
  char why[256];
  brd_peer_info_t threads[3] = {peer(1, 10, -1), peer(1, 10, -1), peer(1, 10, -1)};
  for (int me = 0; me < 3; me++) {
    strcpy(why, "stale");
    assert_ptr_equal(brd_transport_choose(threads, 3, me, BRD_TRANSPORT_MEM_HOST, why,
                                          sizeof(why)),
                     &brd_transport_host);
    assert_string_equal(why, "");
  }
  /* One rank in another process of the host: SHM, for every rank. */
  brd_peer_info_t procs[5] = {peer(1, 10, -1), peer(1, 10, -1), peer(1, 10, -1),
                              peer(1, 11, -1), peer(1, 10, -1)};
  for (int me = 0; me < 5; me++)
    assert_ptr_equal(brd_transport_choose(procs, 5, me, BRD_TRANSPORT_MEM_HOST, NULL, 0),
                     &brd_transport_shm);
  /* Rank 3 on another host: nothing; why names the first rank refused. */
  brd_peer_info_t hosts[5] = {peer(1, 10, -1), peer(1, 10, -1), peer(1, 12, -1),
                              peer(2, 11, -1), peer(2, 11, -1)};
  assert_null(brd_transport_choose(hosts, 5, 0, BRD_TRANSPORT_MEM_HOST, why, sizeof(why)));
  assert_non_null(strstr(why, "rank 3: "));
  assert_non_null(strstr(why, "different hosts"));
  assert_null(brd_transport_choose(hosts, 5, 4, BRD_TRANSPORT_MEM_HOST, why, sizeof(why)));
  assert_non_null(strstr(why, "rank 0: "));
  /* A communicator of one: HOST, and peers is not read. */
  assert_ptr_equal(brd_transport_choose(NULL, 1, 0, BRD_TRANSPORT_MEM_HOST, NULL, 0),
                   &brd_transport_host);
}

/* GPU memory: P2P when it connects me with every rank, else none. */
static void test_choose_gpu_memory(void **state) {
  (void)state;
  char why[256];
  /* Three ranks on one GPU, two of them in one process. */
  brd_peer_info_t one_gpu[3] = {peer(4, 10, 0x3b), peer(4, 10, 0x3b), peer(4, 30, 0x3b)};
  for (int me = 0; me < 3; me++)
    assert_ptr_equal(brd_transport_choose(one_gpu, 3, me, BRD_TRANSPORT_MEM_GPU, why,
                                          sizeof(why)),
                     &brd_transport_p2p);
  env_set("NCCL_P2P_DISABLE", "1");
  assert_null(brd_transport_choose(one_gpu, 3, 1, BRD_TRANSPORT_MEM_GPU, why, sizeof(why)));
  assert_non_null(strstr(why, "rank 0: NCCL_P2P_DISABLE=1"));
  env_set("NCCL_P2P_DISABLE", NULL);
  /* Rank 2 disabled P2P on its side: every rank finds out from its identity;
   * rank 2 itself names the first peer it checked. */
  one_gpu[2].p2p = 0;
  assert_null(brd_transport_choose(one_gpu, 3, 0, BRD_TRANSPORT_MEM_GPU, why, sizeof(why)));
  assert_non_null(strstr(why, "rank 2: "));
  assert_null(brd_transport_choose(one_gpu, 3, 2, BRD_TRANSPORT_MEM_GPU, why, sizeof(why)));
  assert_non_null(strstr(why, "rank 0: "));
  /* The same GPU memory question for host-executor ranks: never P2P. */
  brd_peer_info_t host_ranks[2] = {peer(4, 10, -1), peer(4, 10, -1)};
  assert_null(brd_transport_choose(host_ranks, 2, 0, BRD_TRANSPORT_MEM_GPU, why,
                                   sizeof(why)));
  assert_non_null(strstr(why, "host executor"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_every_transport_has_can_connect),
      cmocka_unit_test(test_host_connects_one_process),
      cmocka_unit_test(test_shm_connects_one_host),
      cmocka_unit_test(test_p2p_op_is_the_pair_rule),
      cmocka_unit_test(test_choose_host_memory),
      cmocka_unit_test(test_choose_gpu_memory),
  };
  return cmocka_run_group_tests_name("transport", tests, NULL, NULL);
}
