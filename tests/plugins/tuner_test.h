/*
 * The test tuner plugin's record (tuner_test.c), shared with the tests
 * that read it. A library built with -DTUNER_VERSION=N exports
 * `ncclTunerPlugin_vN` and `tunertest_state_t tunertest_state_vN`.
 *
 * Environment, read at each call:
 *   TUNERTEST_FORCE     "a,p" (NCCL indices): v3+ set table[a][p] = 0.0,
 *                       v2 return that algorithm and protocol
 *   TUNERTEST_FAULT     init         init fails (ncclSystemError)
 *                       getcollinfo  getCollInfo fails (ncclInternalError)
 *                       ignore_all   every entry set to -1 (v3+)
 *   TUNERTEST_NCHANNELS nChannels to return (default: leave it)
 */
#ifndef BRD_TESTS_TUNER_TEST_H
#define BRD_TESTS_TUNER_TEST_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
  int inits, finalizes, calls;
  int bad_ctx;          /* getCollInfo/finalize got a context init did not make */
  int logged;           /* init's logger was called */
  size_t nranks, nnodes;
  uint64_t comm_id;     /* v5+ */
  int nvl[3];           /* v5+: nNvlDomains, min, max */
  int constants_whole;  /* v5+: the last constant (offset 1144) was writable */
  double base_latency;  /* v5+: constants.baseLatencies[RING][SIMPLE] */
  int func;
  size_t bytes;
  int pipe_ops, num_algo, num_proto, reg_buff, nch_in;
  int v2_collnet, v2_nvls;
  float table[7][3];    /* the table as the plugin received it (v3+) */
} tunertest_state_t;

#endif
