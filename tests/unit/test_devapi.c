/*
 * Unit tests for the device API's host entry points (src/core/devapi.c):
 * team arithmetic, requirement sizes and argument checks, against tables
 * worked out by hand from NCCL's definitions.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "core/comm.h"
#include "core/devapi.h"
#include "core/gpu.h"

/* A live communicator as init would leave it, for the fields the device
 * API reads. */
static struct ncclComm make_comm(int rank, int nranks, int local_rank,
                                 int local_nranks) {
  struct ncclComm c;
  memset(&c, 0, sizeof(c));
  c.magic = BRD_COMM_MAGIC;
  c.rank = rank;
  c.nranks = nranks;
  c.local_rank = local_rank;
  c.local_nranks = local_nranks;
  atomic_init(&c.abort_flag, 0);
  atomic_init(&c.async_error, ncclSuccess);
  return c;
}

/* A peer table whose rank r runs on host host_of_rank[r]. */
#define MAX_PEERS 16
static brd_peer_info_t peer_table[MAX_PEERS];
static brd_peer_info_t *make_peers(const int *host_of_rank, int nranks) {
  assert_true(nranks <= MAX_PEERS);
  memset(peer_table, 0, sizeof(peer_table));
  for (int r = 0; r < nranks; r++) {
    /* Hash-like values, so nothing depends on them being small. */
    peer_table[r].host_hash = 0x9e3779b97f4a7c15ull * (uint64_t)(host_of_rank[r] + 1);
    peer_table[r].pid = 1000 + r;
  }
  return peer_table;
}

static void assert_team(ncclTeam_t t, int nRanks, int rank, int stride) {
  assert_int_equal(t.nRanks, nRanks);
  assert_int_equal(t.rank, rank);
  assert_int_equal(t.stride, stride);
}

/* 15 ranks, 5 hosts of 3, filled host by host. */
static void test_teams_5x3(void **state) {
  /* Per world rank: lsa index, rail index. */
  static const int lsa_rank[15] = {0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2};
  static const int rail_rank[15] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4};
  (void)state;
  for (int r = 0; r < 15; r++) {
    struct ncclComm c = make_comm(r, 15, lsa_rank[r], 3);
    assert_team(ncclTeamWorld(&c), 15, r, 1);
    assert_team(ncclTeamLsa(&c), 3, lsa_rank[r], 1);
    assert_team(ncclTeamRail(&c), 5, rail_rank[r], 3);
  }
}

/* 7 ranks on one host: lsa is everyone, each rail has one member. */
static void test_teams_one_host(void **state) {
  (void)state;
  for (int r = 0; r < 7; r++) {
    struct ncclComm c = make_comm(r, 7, r, 7);
    assert_team(ncclTeamWorld(&c), 7, r, 1);
    assert_team(ncclTeamLsa(&c), 7, r, 1);
    assert_team(ncclTeamRail(&c), 1, 0, 7);
  }
}

/* 6 ranks, one per host: lsa is the rank alone, the rail is everyone. */
static void test_teams_one_per_host(void **state) {
  (void)state;
  for (int r = 0; r < 6; r++) {
    struct ncclComm c = make_comm(r, 6, 0, 1);
    assert_team(ncclTeamLsa(&c), 1, 0, 1);
    assert_team(ncclTeamRail(&c), 6, r, 1);
  }
}

/* Hosts of unequal size (4 + 2): the lsa team falls back to the rank. */
static void test_teams_unequal_hosts(void **state) {
  (void)state;
  struct ncclComm c = make_comm(2, 6, 2, 4);
  assert_team(ncclTeamLsa(&c), 1, 0, 1);
  assert_team(ncclTeamRail(&c), 6, 2, 1);
  /* Right count but not consecutive: local rank 1 at world rank 3 of 2+2+2. */
  c = make_comm(3, 6, 0, 2);
  assert_team(ncclTeamLsa(&c), 1, 0, 1);
}

/* Rank 7 of 15 (5 hosts of 3): rail {5, 2, 3}, lsa {3, 1, 1}. */
static void test_rank_mapping(void **state) {
  static const int rail_to_world[5] = {1, 4, 7, 10, 13};
  static const int lsa_to_world[3] = {6, 7, 8};
  /* World rank -> lsa index for the world team; -1 outside the host. */
  static const int world_to_lsa[15] = {-1, -1, -1, -1, -1, -1, 0, 1, 2,
                                       -1, -1, -1, -1, -1, -1};
  (void)state;
  struct ncclComm c = make_comm(7, 15, 1, 3);
  ncclTeam_t world = ncclTeamWorld(&c);
  ncclTeam_t lsa = ncclTeamLsa(&c);
  ncclTeam_t rail = ncclTeamRail(&c);

  for (int i = 0; i < 5; i++)
    assert_int_equal(ncclTeamRankToWorld(&c, rail, i), rail_to_world[i]);
  for (int i = 0; i < 3; i++) {
    assert_int_equal(ncclTeamRankToWorld(&c, lsa, i), lsa_to_world[i]);
    assert_int_equal(ncclTeamRankToLsa(&c, lsa, i), i);
  }
  for (int w = 0; w < 15; w++) {
    assert_int_equal(ncclTeamRankToWorld(&c, world, w), w);
    assert_int_equal(ncclTeamRankToLsa(&c, world, w), world_to_lsa[w]);
  }
  /* Only the caller's own rail member is on its host. */
  assert_int_equal(ncclTeamRankToLsa(&c, rail, 2), 1);
  assert_int_equal(ncclTeamRankToLsa(&c, rail, 1), -1);
  assert_int_equal(ncclTeamRankToLsa(&c, rail, 3), -1);
  /* Members beyond the team land outside the world. */
  assert_int_equal(ncclTeamRankToWorld(&c, rail, 5), -1);
  assert_int_equal(ncclTeamRankToWorld(&c, rail, -1), -1);
  assert_int_equal(ncclTeamRankToWorld(&c, world, 15), -1);
}

/* NCCL's lsa size: gcd of the run lengths of equal consecutive hosts. */
static void test_lsa_size_rule(void **state) {
  static const int h_4_2[] = {0, 0, 0, 0, 1, 1};
  static const int h_2_4_6[] = {0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2};
  static const int h_3_5[] = {0, 0, 0, 1, 1, 1, 1, 1};
  static const int h_3_3[] = {5, 5, 5, 9, 9, 9};
  static const int h_alt[] = {0, 1, 0, 1};
  static const int h_aba[] = {0, 0, 1, 1, 0, 0};
  static const int h_6_9[] = {3, 3, 3, 3, 3, 3, 4, 4, 4, 4, 4, 4, 4, 4, 4};
  static const int h_one[] = {7};
  (void)state;
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_4_2, 6), 6), 2);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_2_4_6, 12), 12), 2);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_3_5, 8), 8), 1);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_3_3, 6), 6), 3);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_alt, 4), 4), 1);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_aba, 6), 6), 2);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_6_9, 15), 15), 3);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_one, 1), 1), 1);
  assert_int_equal(brd_devapi_lsa_size(NULL, 4), 0);
  assert_int_equal(brd_devapi_lsa_size(make_peers(h_one, 1), 0), 0);
}

/* With the peer table, unequal hosts get NCCL's common lsa size. */
static void test_teams_from_peers(void **state) {
  /* Hosts of 2 and 4 ranks: lsa size 2 everywhere. Per rank: local rank
   * and host size (what init records), lsa index, rail size and index. */
  static const int h_2_4[] = {0, 0, 1, 1, 1, 1};
  static const int local_2_4[] = {0, 1, 0, 1, 2, 3};
  static const int hostn_2_4[] = {2, 2, 4, 4, 4, 4};
  static const int lsa_2_4[] = {0, 1, 0, 1, 0, 1};
  static const int rail_2_4[] = {0, 0, 1, 1, 2, 2};
  /* Hosts of 3 and 5: lsa size 1, the rail is everyone. */
  static const int h_3_5[] = {0, 0, 0, 1, 1, 1, 1, 1};
  /* Hosts of 2, 2 and 4 (the 4 alone would divide 8 but is not NCCL's
   * answer). */
  static const int h_2_2_4[] = {0, 0, 1, 1, 2, 2, 2, 2};
  (void)state;
  for (int r = 0; r < 6; r++) {
    struct ncclComm c = make_comm(r, 6, local_2_4[r], hostn_2_4[r]);
    c.peers = make_peers(h_2_4, 6);
    assert_team(ncclTeamLsa(&c), 2, lsa_2_4[r], 1);
    assert_team(ncclTeamRail(&c), 3, rail_2_4[r], 2);
  }
  for (int r = 0; r < 8; r++) {
    struct ncclComm c = make_comm(r, 8, r < 3 ? r : r - 3, r < 3 ? 3 : 5);
    c.peers = make_peers(h_3_5, 8);
    assert_team(ncclTeamLsa(&c), 1, 0, 1);
    assert_team(ncclTeamRail(&c), 8, r, 1);
  }
  {
    struct ncclComm c = make_comm(5, 8, 1, 4);
    c.peers = make_peers(h_2_2_4, 8);
    assert_team(ncclTeamLsa(&c), 2, 1, 1);
    assert_team(ncclTeamRail(&c), 4, 2, 2);
    assert_int_equal(ncclTeamRankToWorld(&c, ncclTeamRail(&c), 0), 1);
    assert_int_equal(ncclTeamRankToLsa(&c, ncclTeamWorld(&c), 4), 0);
    assert_int_equal(ncclTeamRankToLsa(&c, ncclTeamWorld(&c), 6), -1);
  }
}

/* Requirement outputs are pre-filled with this byte so untouched fields and
 * the clearing of the rest both show. */
#define JUNK 0xa5

static void test_lsa_barrier_requirement(void **state) {
  ncclLsaBarrierHandle_t h;
  ncclDevResourceRequirements_t req;
  ncclTeam_t team = {5, 2, 3};
  (void)state;
  memset(&h, JUNK, sizeof(h));
  memset(&req, JUNK, sizeof(req));
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 3, &h, &req), ncclSuccess);
  /* 3 barriers * (3 + 5 members) words of 4 bytes. */
  assert_int_equal(req.bufferSize, 96);
  assert_int_equal(req.bufferAlign, 4);
  assert_ptr_equal(req.outBufferHandle, &h.bufHandle);
  assert_null(req.next);
  assert_int_equal(req.ginSignalCount, 0);
  assert_int_equal(req.ginCounterCount, 0);
  assert_null(req.outGinSignalStart);
  assert_null(req.outGinCounterStart);
  assert_int_equal(h.nBarriers, 3);

  team.nRanks = 7;
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 1, &h, &req), ncclSuccess);
  assert_int_equal(req.bufferSize, 40);
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 0, &h, &req), ncclSuccess);
  assert_int_equal(req.bufferSize, 0);
  assert_int_equal(h.nBarriers, 0);
}

static void test_gin_barrier_requirement(void **state) {
  struct ncclComm c = make_comm(1, 4, 1, 2);
  ncclGinBarrierHandle_t h;
  ncclDevResourceRequirements_t req;
  ncclTeam_t team = {2, 0, 2};
  (void)state;
  memset(&h, JUNK, sizeof(h));
  memset(&req, JUNK, sizeof(req));
  assert_int_equal(ncclGinBarrierCreateRequirement(&c, team, 3, &h, &req), ncclSuccess);
  /* 3 barriers * 4 contexts * 4 bytes, one signal per barrier. */
  assert_int_equal(req.bufferSize, 48);
  assert_int_equal(req.bufferAlign, 4);
  assert_ptr_equal(req.outBufferHandle, &h.unused);
  assert_int_equal(req.ginSignalCount, 3);
  assert_ptr_equal(req.outGinSignalStart, &h.signal0);
  assert_int_equal(req.ginCounterCount, 0);
  assert_null(req.outGinCounterStart);
  assert_null(req.next);
}

static void test_lla2a(void **state) {
  ncclLLA2AHandle_t h;
  ncclDevResourceRequirements_t req;
  (void)state;
  assert_int_equal(ncclLLA2ACalcSlots(5, 12), 10);
  assert_int_equal(ncclLLA2ACalcSlots(7, 8), 7);
  assert_int_equal(ncclLLA2ACalcSlots(3, 1), 3);
  assert_int_equal(ncclLLA2ACalcSlots(9, 17), 27);
  assert_int_equal(ncclLLA2ACalcSlots(0, 100), 0);
  assert_int_equal(ncclLLA2ACalcSlots(11, 0), 0);
  assert_int_equal(ncclLLA2ACalcSlots(-1, 4), -1);
  assert_int_equal(ncclLLA2ACalcSlots(4, -8), -1);
  assert_int_equal(ncclLLA2ACalcSlots(INT_MAX, 16), -1);

  memset(&h, JUNK, sizeof(h));
  memset(&req, JUNK, sizeof(req));
  assert_int_equal(ncclLLA2ACreateRequirement(3, 10, &h, &req), ncclSuccess);
  /* 3 blocks * (1 + 2*10) lines of 16 bytes. */
  assert_int_equal(req.bufferSize, 1008);
  assert_int_equal(req.bufferAlign, 16);
  assert_ptr_equal(req.outBufferHandle, &h.bufHandle);
  assert_int_equal(h.nSlots, 10);
  assert_int_equal(req.ginSignalCount, 0);
  assert_null(req.next);
}

/* Bad arguments get ncclInvalidArgument and leave the outputs untouched. */
static void test_requirement_bad_args(void **state) {
  struct ncclComm c = make_comm(0, 2, 0, 2);
  struct ncclComm dead = make_comm(0, 2, 0, 2);
  ncclTeam_t team = {2, 0, 1};
  ncclLsaBarrierHandle_t lh;
  ncclGinBarrierHandle_t gh;
  ncclLLA2AHandle_t ah;
  ncclDevResourceRequirements_t req;
  unsigned char junk[sizeof(req)];
  (void)state;
  dead.magic = 0;
  memset(&req, JUNK, sizeof(req));
  memset(junk, JUNK, sizeof(junk));
  memset(&lh, JUNK, sizeof(lh));
  memset(&ah, JUNK, sizeof(ah));

  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 2, NULL, &req), ncclInvalidArgument);
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 2, &lh, NULL), ncclInvalidArgument);
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, -1, &lh, &req), ncclInvalidArgument);
  team.nRanks = -3;
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, 2, &lh, &req), ncclInvalidArgument);
  team.nRanks = INT_MAX;
  assert_int_equal(ncclLsaBarrierCreateRequirement(team, INT_MAX, &lh, &req), ncclInvalidArgument);
  team.nRanks = 2;

  assert_int_equal(ncclGinBarrierCreateRequirement(NULL, team, 1, &gh, &req), ncclInvalidArgument);
  assert_int_equal(ncclGinBarrierCreateRequirement(&dead, team, 1, &gh, &req), ncclInvalidArgument);
  assert_int_equal(ncclGinBarrierCreateRequirement(&c, team, 1, NULL, &req), ncclInvalidArgument);
  assert_int_equal(ncclGinBarrierCreateRequirement(&c, team, 1, &gh, NULL), ncclInvalidArgument);
  assert_int_equal(ncclGinBarrierCreateRequirement(&c, team, -2, &gh, &req), ncclInvalidArgument);

  assert_int_equal(ncclLLA2ACreateRequirement(1, 1, NULL, &req), ncclInvalidArgument);
  assert_int_equal(ncclLLA2ACreateRequirement(1, 1, &ah, NULL), ncclInvalidArgument);
  assert_int_equal(ncclLLA2ACreateRequirement(-1, 1, &ah, &req), ncclInvalidArgument);
  assert_int_equal(ncclLLA2ACreateRequirement(1, -1, &ah, &req), ncclInvalidArgument);
  assert_int_equal(ncclLLA2ACreateRequirement(INT_MAX, INT_MAX, &ah, &req), ncclInvalidArgument);

  assert_memory_equal(&req, junk, sizeof(req));
  assert_memory_equal(&lh, junk, sizeof(lh));
  assert_memory_equal(&ah, junk, sizeof(ah));
}

/* Team calls cannot return an error: a bad comm yields a zeroed team or -1,
 * and the last-error text names the call. */
static void test_team_bad_comm(void **state) {
  struct ncclComm dead = make_comm(1, 4, 1, 4);
  ncclTeam_t team = {4, 1, 1};
  (void)state;
  dead.magic = 0;
  assert_team(ncclTeamWorld(NULL), 0, 0, 0);
  assert_non_null(strstr(ncclGetLastError(NULL), "ncclTeamWorld"));
  assert_team(ncclTeamLsa(NULL), 0, 0, 0);
  assert_team(ncclTeamRail(NULL), 0, 0, 0);
  assert_team(ncclTeamWorld(&dead), 0, 0, 0);
  assert_team(ncclTeamLsa(&dead), 0, 0, 0);
  assert_team(ncclTeamRail(&dead), 0, 0, 0);
  assert_int_equal(ncclTeamRankToWorld(NULL, team, 0), -1);
  assert_int_equal(ncclTeamRankToLsa(NULL, team, 0), -1);
  assert_int_equal(ncclTeamRankToWorld(&dead, team, 0), -1);
  assert_int_equal(ncclTeamRankToLsa(&dead, team, 0), -1);
}

/* A communicator still inside a nonblocking operation is not ready. */
static void test_comm_in_progress(void **state) {
  struct ncclComm c = make_comm(1, 4, 1, 4);
  ncclDevCommRequirements_t reqs;
  unsigned char storage[256];
  (void)state;
  memset(&reqs, 0, sizeof(reqs));
  atomic_store(&c.async_error, ncclInProgress);
  assert_team(ncclTeamWorld(&c), 0, 0, 0);
  assert_non_null(strstr(ncclGetLastError(NULL), "ncclCommGetAsyncError"));
  assert_team(ncclTeamLsa(&c), 0, 0, 0);
  assert_team(ncclTeamRail(&c), 0, 0, 0);
  assert_int_equal(ncclTeamRankToWorld(&c, ncclTeamWorld(&c), 0), -1);
  assert_int_equal(ncclDevCommCreate(&c, &reqs, (ncclDevComm_t *)(void *)storage),
                   ncclInvalidArgument);
  atomic_store(&c.async_error, ncclSuccess);
  assert_team(ncclTeamWorld(&c), 4, 1, 1);
}

static void test_dev_comm(void **state) {
  struct ncclComm c = make_comm(0, 2, 0, 2);
  struct ncclComm dead = make_comm(0, 2, 0, 2);
  ncclDevCommRequirements_t reqs;
  /* The device communicator's layout is opaque here; any storage will do,
   * since nothing may be written to it. */
  unsigned char storage[256], junk[256];
  ncclDevComm_t *dc = (ncclDevComm_t *)(void *)storage;
  (void)state;
  dead.magic = 0;
  memset(&reqs, 0, sizeof(reqs));
  memset(storage, JUNK, sizeof(storage));
  memset(junk, JUNK, sizeof(junk));

  assert_int_equal(ncclDevCommCreate(NULL, &reqs, dc), ncclInvalidArgument);
  assert_int_equal(ncclDevCommCreate(&dead, &reqs, dc), ncclInvalidArgument);
  assert_int_equal(ncclDevCommCreate(&c, NULL, dc), ncclInvalidArgument);
  assert_int_equal(ncclDevCommCreate(&c, &reqs, NULL), ncclInvalidArgument);
  assert_int_equal(ncclDevCommCreate(&c, &reqs, dc), ncclInvalidUsage);
  assert_non_null(strstr(ncclGetLastError(NULL), "ncclDevCommCreate"));
  assert_non_null(strstr(ncclGetLastError(NULL), "not implemented"));
  assert_memory_equal(storage, junk, sizeof(storage));

  assert_int_equal(ncclDevCommDestroy(NULL, NULL), ncclInvalidArgument);
  assert_int_equal(ncclDevCommDestroy(&dead, dc), ncclInvalidArgument);
  assert_int_equal(ncclDevCommDestroy(&c, NULL), ncclSuccess);
  assert_int_equal(ncclDevCommDestroy(&c, dc), ncclInvalidUsage);
}

/* The pnccl twins are the same functions. */
static void test_pnccl_twins(void **state) {
  struct ncclComm c = make_comm(4, 9, 1, 3);
  (void)state;
  assert_team(pncclTeamRail(&c), 3, 1, 3);
  assert_team(pncclTeamLsa(&c), 3, 1, 1);
  assert_int_equal(pncclLLA2ACalcSlots(2, 24), 6);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_teams_5x3),
      cmocka_unit_test(test_teams_one_host),
      cmocka_unit_test(test_teams_one_per_host),
      cmocka_unit_test(test_teams_unequal_hosts),
      cmocka_unit_test(test_rank_mapping),
      cmocka_unit_test(test_lsa_size_rule),
      cmocka_unit_test(test_teams_from_peers),
      cmocka_unit_test(test_comm_in_progress),
      cmocka_unit_test(test_lsa_barrier_requirement),
      cmocka_unit_test(test_gin_barrier_requirement),
      cmocka_unit_test(test_lla2a),
      cmocka_unit_test(test_requirement_bad_args),
      cmocka_unit_test(test_team_bad_comm),
      cmocka_unit_test(test_dev_comm),
      cmocka_unit_test(test_pnccl_twins),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
