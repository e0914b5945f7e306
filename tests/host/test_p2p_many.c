/*
 * Groups with more sends and receives than one point-to-point work carries,
 * end to end, in the mode BRAID_DEVICE names (host when unset; CUDA mode
 * in a CUDA build, which the simulator runs): every rank's transfers are
 * batched per pair (src/core/works.h), 4096 per rank and work in host
 * mode, 48 in CUDA mode.
 *
 * Three ranks, one thread driving all of them in one group: rank r sends
 * S_NEXT buffers to r + 1, S_PREV to r - 1 and S_SELF to itself, with the
 * three streams and the receives interleaved call by call; sizes vary
 * from 1 to 13 elements, and one send of the second batch is long enough
 * for several rounds. Every received element is compared with the
 * sender's formula. Host mode: 10,000 sends and receives per rank (30,000
 * calls); CUDA mode (or BRAID_TEST_QUICK): 1,000 per rank, which is still
 * about 20 batches of 16 per pair there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "nccl.h"
#include "tdev.h"

#define NCCL_OK(call)                                                         \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess)                                                    \
      fail_msg("%s failed: %s (%s)", #call, ncclGetErrorString(r_),          \
               ncclGetLastError(NULL));                                       \
  } while (0)

#define NR 3
#define SYNC_TIMEOUT_S 300.0

static int s_next, s_prev, s_self, long_i; /* per rank: sends to r+1, r-1, r */
static size_t long_n;                      /* elements of send long_i to r + 1 */

static int nsends(int from, int to) {
  return to == from ? s_self : to == (from + 1) % NR ? s_next : s_prev;
}

static size_t count_of(int from, int to, int i) {
  if (i == long_i && to == (from + 1) % NR) return long_n;
  return 1 + (size_t)((i * 7 + from * 3 + to) % 13);
}

/* Element e of send i from `from` to `to`: no two alike. */
static int32_t value_of(int from, int to, int i, size_t e) {
  return (int32_t)(((uint32_t)from * 7919u + (uint32_t)to * 104729u + (uint32_t)i * 31u +
                    (uint32_t)e * 3u + 1u) & 0x7fffffffu);
}

static void *xalloc(size_t n) {
  void *p = tdev_alloc(n);
  if (p == NULL) fail_msg("%s", tdev_last_error());
  return p;
}

static void test_many(void **state) {
  (void)state;
  ncclComm_t c[NR];
  cudaStream_t st[NR];
  if (tdev_kind() == TDEV_HOST) {
    NCCL_OK(ncclCommInitAll(c, NR, NULL));
  } else {
    ncclUniqueId id;
    NCCL_OK(ncclGetUniqueId(&id));
    NCCL_OK(ncclGroupStart());
    for (int r = 0; r < NR; r++) NCCL_OK(ncclCommInitRank(&c[r], NR, id, r));
    NCCL_OK(ncclGroupEnd());
  }
  for (int r = 0; r < NR; r++)
    if (tdev_stream_create(&st[r]) != 0) fail_msg("%s", tdev_last_error());
  int32_t *sbuf[NR], *rbuf[NR];
  size_t *soff[NR][NR], *roff[NR][NR]; /* [rank][peer][i] */
  for (int r = 0; r < NR; r++) {
    size_t sn = 0, rn = 0;
    for (int p = 0; p < NR; p++) {
      soff[r][p] = calloc((size_t)nsends(r, p), sizeof(size_t));
      roff[r][p] = calloc((size_t)nsends(p, r), sizeof(size_t));
      assert_non_null(soff[r][p]);
      assert_non_null(roff[r][p]);
      for (int i = 0; i < nsends(r, p); i++) {
        soff[r][p][i] = sn;
        sn += count_of(r, p, i);
      }
      for (int i = 0; i < nsends(p, r); i++) {
        roff[r][p][i] = rn;
        rn += count_of(p, r, i);
      }
    }
    sbuf[r] = xalloc(sn * sizeof(int32_t));
    rbuf[r] = xalloc(rn * sizeof(int32_t));
    for (size_t e = 0; e < rn; e++) rbuf[r][e] = -1;
    for (int p = 0; p < NR; p++)
      for (int i = 0; i < nsends(r, p); i++)
        for (size_t e = 0; e < count_of(r, p, i); e++)
          sbuf[r][soff[r][p][i] + e] = value_of(r, p, i, e);
  }
  NCCL_OK(ncclGroupStart());
  int calls = 0;
  for (int r = 0; r < NR; r++) {
    const int peers[3] = {(r + 1) % NR, (r + NR - 1) % NR, r};
    for (int i = 0; i < s_next; i++) {
      for (int k = 0; k < 3; k++) {
        int p = peers[k];
        if (i < nsends(r, p)) {
          NCCL_OK(ncclSend(sbuf[r] + soff[r][p][i], count_of(r, p, i), ncclInt32, p, c[r],
                           st[r]));
          calls++;
        }
        if (i < nsends(p, r)) {
          NCCL_OK(ncclRecv(rbuf[r] + roff[r][p][i], count_of(p, r, i), ncclInt32, p, c[r],
                           st[r]));
          calls++;
        }
      }
    }
  }
  assert_int_equal(calls, NR * 2 * (s_next + s_prev + s_self));
  NCCL_OK(ncclGroupEnd());
  for (int r = 0; r < NR; r++)
    if (tdev_stream_sync(st[r], SYNC_TIMEOUT_S) != 0)
      fail_msg("rank %d's stream: %s (%s)", r, tdev_last_error(), ncclGetLastError(NULL));
  size_t bad = 0;
  for (int r = 0; r < NR; r++)
    for (int p = 0; p < NR; p++)
      for (int i = 0; i < nsends(p, r); i++)
        for (size_t e = 0; e < count_of(p, r, i); e++)
          if (rbuf[r][roff[r][p][i] + e] != value_of(p, r, i, e) && bad++ < 5)
            print_error("rank %d: receive %d from rank %d, element %zu: %d, expected %d\n", r,
                        i, p, e, rbuf[r][roff[r][p][i] + e], value_of(p, r, i, e));
  assert_int_equal(bad, 0);
  for (int r = 0; r < NR; r++) {
    for (int p = 0; p < NR; p++) {
      free(soff[r][p]);
      free(roff[r][p]);
    }
    tdev_free(sbuf[r]);
    tdev_free(rbuf[r]);
    NCCL_OK(ncclCommDestroy(c[r]));
    tdev_stream_destroy(st[r]);
  }
}

int main(void) {
  setenv("BRAID_DEVICE", "host", 0);
  setenv("BRAID_TIMEOUT", "120", 0);
  char why[256];
  if (!tdev_usable(why, sizeof(why))) {
    printf("SKIP: BRAID_DEVICE=%s: %s\n", getenv("BRAID_DEVICE"), why);
    return TDEV_EXIT_SKIP;
  }
  if (tdev_kind() == TDEV_HOST && !tdev_quick()) {
    s_next = 3000, s_prev = 1950, s_self = 50; /* 5000 sends, 5000 receives */
    long_i = 1400, long_n = 3000000;          /* batch 2 of 1365 per pair */
  } else {
    s_next = 300, s_prev = 195, s_self = 5;   /* 500 and 500 */
    long_i = 40, long_n = 300000;             /* batch 3 of 16 per pair in CUDA mode */
  }
  printf("# %s mode, %d sends and receives per rank\n", tdev_kind_name(),
         2 * (s_next + s_prev + s_self));
  const struct CMUnitTest tests[] = {cmocka_unit_test(test_many)};
  return cmocka_run_group_tests(tests, NULL, NULL);
}
