/*
 * A program built against NVIDIA's NCCL 2.28.9 nccl.h (an 80-byte
 * ncclConfig_t, version 22809) creating one-rank communicators on Braid
 * (host mode). Braid's config is 96 bytes; it must read only the 80 the
 * program's struct has.
 *
 *   1. The config sits in a buffer whose next 16 bytes hold values that
 *      would be invalid as the 2.30 fields (graphStreamOrdering 7, ...).
 *      Init succeeds: those bytes were not read. Its blocking = 0 (a field
 *      of the 80) is honoured: init answers ncclInProgress and completes.
 *   2. Control: the same bytes presented as a 2.30 struct (size 96,
 *      version 23007) are read, and graphStreamOrdering 7 is rejected with
 *      ncclInvalidArgument and a message naming the field. So step 1 would
 *      have failed had Braid read past the program's struct.
 *
 * Prints one line per check; exits 1 if any failed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <nccl.h>

#if NCCL_VERSION_CODE >= 22900
#error "build this against the 2.28 header (its ncclConfig_t is 80 bytes)"
#endif

static int failures;

static void check(int ok, const char *what) {
  printf("  %s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) failures++;
}

/* The 2.30 fields as NVIDIA places them, after the 80 bytes. */
struct tail_v23000 {
  int graphUsageMode, numRmaCtx, maxP2pPeers, graphStreamOrdering;
};

static ncclResult_t init_one(ncclConfig_t *config, ncclComm_t *comm) {
  ncclUniqueId id;
  ncclResult_t res = ncclGetUniqueId(&id);
  if (res != ncclSuccess) return res;
  return ncclCommInitRankConfig(comm, 1, id, 0, config);
}

int main(void) {
  union {
    unsigned char bytes[sizeof(ncclConfig_t) + sizeof(struct tail_v23000)];
    ncclConfig_t config;
  } buf;
  struct tail_v23000 bad = {-5, -3, -2, 7};
  ncclConfig_t init = NCCL_CONFIG_INITIALIZER;
  ncclComm_t comm = NULL;
  ncclResult_t res, async = ncclInProgress;

  check(sizeof(ncclConfig_t) == 80 && init.size == 80, "the old header's config is 80 bytes");
  check(init.version == 22809, "its initializer says version 22809");

  memcpy(&buf.config, &init, sizeof(init));
  memcpy(buf.bytes + sizeof(ncclConfig_t), &bad, sizeof(bad));
  buf.config.blocking = 0;
  buf.config.commName = "old-header";
  res = init_one(&buf.config, &comm);
  check(res == ncclSuccess || res == ncclInProgress,
        "an 80-byte config followed by invalid 2.30 fields initialises");
  check(res == ncclInProgress, "its blocking = 0 is honoured (init returns ncclInProgress)");
  if (res != ncclSuccess && res != ncclInProgress)
    printf("    result %d: %s\n", (int)res, ncclGetLastError(NULL));
  if (comm != NULL) {
    /* Up to 60 s, in 1 ms steps. */
    for (int i = 0; i < 60000 && async == ncclInProgress; i++) {
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) break;
      if (async == ncclInProgress) nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
    check(async == ncclSuccess, "the nonblocking init completes");
    int count = 0;
    check(ncclCommCount(comm, &count) == ncclSuccess && count == 1, "the communicator has 1 rank");
    check(ncclCommDestroy(comm) == ncclSuccess, "ncclCommDestroy succeeds");
  }

  /* Control: the same bytes as a 2.30 struct. */
  memcpy(&buf.config, &init, sizeof(init));
  memcpy(buf.bytes + sizeof(ncclConfig_t), &bad, sizeof(bad));
  buf.config.size = sizeof(buf.bytes);
  buf.config.version = 23007;
  comm = NULL;
  res = init_one(&buf.config, &comm);
  check(res == ncclInvalidArgument, "as a 96-byte 2.30 config, the same bytes are rejected");
  check(strstr(ncclGetLastError(NULL), "graphUsageMode") != NULL ||
            strstr(ncclGetLastError(NULL), "numRmaCtx") != NULL ||
            strstr(ncclGetLastError(NULL), "maxP2pPeers") != NULL ||
            strstr(ncclGetLastError(NULL), "graphStreamOrdering") != NULL,
        "the message names a 2.30 field");
  printf("    last error: %s\n", ncclGetLastError(NULL));
  if (comm != NULL) ncclCommDestroy(comm);

  printf("%s\n", failures ? "FAILED" : "PASSED");
  return failures ? 1 : 0;
}
