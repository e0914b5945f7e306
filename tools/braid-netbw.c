/*
 * braid-netbw: the built-in socket net alone, one way, between two
 * processes (e.g. in two network namespaces), driven the way the proxy
 * drives it: messages of 256 KiB, up to 8 sends in flight, 4 receives
 * posted, sched_yield when a request is not done yet. No executor, no
 * proxy copies: the net's own cost.
 *
 *   braid-netbw recv <handle-file> [MiB [reps]]   listens, writes its handle
 *   braid-netbw send <handle-file> [MiB [reps]]   waits for the file, sends
 *   braid-netbw pong <handle-file> [iterations]   latency: answers each message
 *   braid-netbw ping <handle-file> [iterations]   latency: sends, waits, repeats
 *
 * The receiver prints, per repetition, MiB/s and Gbit/s from its first
 * byte's arrival to its last (so connection setup is not timed). ping and
 * pong (a connection each way: each listens, writes its handle to
 * <handle-file>.ping or .pong and connects to the other's) bounce an 8-byte
 * message `iterations` times (default 1000, after 50 not timed), with 4
 * receives posted ahead and each posted again after the answer to it was
 * sent, as the proxy keeps them; ping prints the average
 * one-way time (half a round trip) in us, as ib_write_lat reports it. Interface:
 * NCCL_SOCKET_IFNAME as for the library. BRAID_NETBW_NET=ib drives the
 * built-in IB verbs net instead (its first device after NCCL_IB_HCA;
 * tests/rxe/guest.sh runs it on soft-RoCE). Exit status 0 on success, 1 on
 * a net failure or timeout (60 s), 2 for bad arguments.
 */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/time.h"
#include "transport/net.h"
#include "transport/net_ib.h"

#define MSG ((size_t)256 << 10)
#define NSEND 8
#define NRECV 4
#define DEADLINE_NS (60LL * 1000000000LL)

static const brd_net_ops_t *net = &brd_net_socket; /* or brd_net_ib: BRAID_NETBW_NET */

static int fail(const char *what, ncclResult_t r) {
  fprintf(stderr, "braid-netbw: %s failed (%d)\n", what, (int)r);
  return 1;
}

/* Receives reps x total bytes; prints the rate of each repetition. */
static int run_recv(void *rc, char *buf, void *mh, size_t total, int reps) {
  void *req[NRECV] = {0};
  for (int rep = 0; rep < reps; rep++) {
    size_t got = 0, posted = 0;
    uint64_t next = 0, post = 0;
    int64_t t0 = 0, deadline = brd_time_now_ns() + DEADLINE_NS;
    while (got < total) {
      while (post - next < NRECV && posted < total) {
        void *data = buf + (post % NRECV) * MSG;
        size_t size = MSG;
        int tag = 0;
        void *r = NULL;
        ncclResult_t res = net->irecv(rc, 1, &data, &size, &tag, &mh, NULL, &r);
        if (res != ncclSuccess) return fail("irecv", res);
        if (r == NULL) break;
        req[post % NRECV] = r;
        post++;
        posted += MSG;
      }
      /* A net may refuse a request for now (the IB net until its CTS
       * slots free up): test only what was posted. */
      int done = 0, size = 0;
      ncclResult_t res = next < post ? net->test(req[next % NRECV], &done, &size) : ncclSuccess;
      if (res != ncclSuccess) return fail("test (receive)", res);
      if (done) {
        if (t0 == 0) t0 = brd_time_now_ns();
        got += (size_t)size;
        next++;
      } else if (brd_time_now_ns() > deadline) {
        fprintf(stderr, "braid-netbw: receive timed out\n");
        return 1;
      } else {
        sched_yield(); /* as the proxy does when a pass made no progress */
      }
    }
    double s = (double)(brd_time_now_ns() - t0) / 1e9;
    /* The first message's bytes arrived before t0: leave them out. */
    double bytes = (double)(total - MSG);
    printf("recv %zu MiB: %.1f MiB/s %.2f Gbit/s\n", total >> 20, bytes / s / 1048576.0,
           bytes * 8 / s / 1e9);
  }
  return 0;
}

static int run_send(void *sc, char *buf, void *mh, size_t total, int reps) {
  void *req[NSEND] = {0};
  for (int rep = 0; rep < reps; rep++) {
    size_t sent = 0;
    uint64_t post = 0, tail = 0, nmsg = total / MSG;
    int64_t deadline = brd_time_now_ns() + DEADLINE_NS;
    while (tail < nmsg) {
      while (post < nmsg && post - tail < NSEND) {
        void *r = NULL;
        ncclResult_t res = net->isend(sc, buf + (post % NSEND) * MSG, MSG, 0, mh, NULL, &r);
        if (res != ncclSuccess) return fail("isend", res);
        if (r == NULL) break;
        req[post % NSEND] = r;
        post++;
      }
      /* isend returns NULL until the receiver's CTS is in (IB net). */
      int done = 0, size = 0;
      ncclResult_t res = tail < post ? net->test(req[tail % NSEND], &done, &size) : ncclSuccess;
      if (res != ncclSuccess) return fail("test (send)", res);
      if (done) {
        sent += MSG;
        tail++;
      } else if (brd_time_now_ns() > deadline) {
        fprintf(stderr, "braid-netbw: send timed out\n");
        return 1;
      } else {
        sched_yield(); /* as the proxy does when a pass made no progress */
      }
    }
  }
  return 0;
}

/* Writes handle to path atomically (a temporary file renamed); 0 on success. */
static int handle_write(const char *path, const char *handle) {
  char tmp[4200];
  snprintf(tmp, sizeof(tmp), "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  if (f == NULL || fwrite(handle, 1, BRD_NET_HANDLE_BYTES, f) != BRD_NET_HANDLE_BYTES ||
      fclose(f) != 0 || rename(tmp, path) != 0)
    return fail("writing the handle file", ncclSystemError);
  return 0;
}

/* Waits (until deadline) for path, then reads a handle from it; 0 on success. */
static int handle_read(const char *path, char *handle, int64_t deadline) {
  FILE *f = NULL;
  while ((f = fopen(path, "rb")) == NULL) {
    if (brd_time_now_ns() > deadline) return fail("waiting for the handle file", ncclSystemError);
    usleep(10000);
  }
  size_t n = fread(handle, 1, BRD_NET_HANDLE_BYTES, f);
  fclose(f);
  if (n != BRD_NET_HANDLE_BYTES) return fail("reading the handle file", ncclSystemError);
  return 0;
}

/* Whether deadline has passed, reading the clock once per 256 calls: the
 * latency loops poll far more often than that, and a clock read costs
 * 1.7 us where the clock source is the HPET (under TCG), which would time
 * the tool instead of the net. */
static int past(int64_t deadline, unsigned *calls) {
  return ++*calls % 256 == 0 && brd_time_now_ns() > deadline;
}

/* Waits for req, yielding as the proxy does; 0 when done. */
static int wait_req(void *req, const char *what, int64_t deadline) {
  int done = 0, size = 0;
  unsigned calls = 0;
  while (!done) {
    ncclResult_t res = net->test(req, &done, &size);
    if (res != ncclSuccess) return fail(what, res);
    if (!done && past(deadline, &calls)) {
      fprintf(stderr, "braid-netbw: %s timed out\n", what);
      return 1;
    }
    if (!done) sched_yield();
  }
  return 0;
}

/* Posts an 8-byte receive into buf (retrying while the net is full). */
static int post_small_recv(void *rc, char *buf, void *mh, void **req_out, int64_t deadline) {
  *req_out = NULL;
  unsigned calls = 0;
  while (*req_out == NULL) {
    void *data = buf;
    size_t size = 8;
    int tag = 0;
    ncclResult_t res = net->irecv(rc, 1, &data, &size, &tag, &mh, NULL, req_out);
    if (res != ncclSuccess) return fail("irecv", res);
    if (*req_out == NULL && past(deadline, &calls)) return fail("irecv (timeout)", res);
  }
  return 0;
}

/* The latency modes: `iters` timed round trips of 8 bytes (after 50), the
 * net used as the proxy uses it: PP_POSTED receives stay posted (8 bytes
 * each, at buf + 8 (1 + slot)), and a completed receive is posted again
 * only after the message that answers it has been sent (the proxy's pass
 * runs its sends before it reposts receives), so a receive's
 * clear-to-send is never between a message's arrival and its answer. */
#define PP_POSTED 4
static int run_pingpong(int is_ping, void *sc, void *rc, char *buf, void *smh, void *rmh,
                        int iters) {
  const int warm = 50;
  int64_t t0 = 0, deadline = brd_time_now_ns() + DEADLINE_NS;
  void *rreq[PP_POSTED] = {0}, *sreq = NULL;
  /* One message each way at once first: a net may finish setting up a
   * connection only as its sender calls isend or test (the IB net), so
   * neither side may wait on a receive before it has sent. */
  while (rreq[0] == NULL || sreq == NULL) {
    ncclResult_t res = ncclSuccess;
    if (rreq[0] == NULL) {
      void *data = buf + 8;
      size_t size = 8;
      int tag = 0;
      res = net->irecv(rc, 1, &data, &size, &tag, &rmh, NULL, &rreq[0]);
    }
    if (res == ncclSuccess && sreq == NULL) res = net->isend(sc, buf, 8, 0, smh, NULL, &sreq);
    if (res != ncclSuccess) return fail("the first exchange", res);
    if (brd_time_now_ns() > deadline) return fail("the first exchange (timeout)", res);
  }
  if (wait_req(sreq, "send", deadline) || wait_req(rreq[0], "receive", deadline)) return 1;
  /* Message i arrives in slot i % PP_POSTED. */
  for (int k = 0; k < PP_POSTED; k++)
    if (post_small_recv(rc, buf + 8 * (1 + k), rmh, &rreq[k], deadline)) return 1;
  int repost = -1; /* the slot to post again after the next send */
  for (int i = 0; i < warm + iters; i++) {
    int slot = i % PP_POSTED;
    if (i == warm) t0 = brd_time_now_ns();
    if (!is_ping) {
      if (wait_req(rreq[slot], "receive", deadline)) return 1;
      repost = slot;
    }
    memcpy(buf, &i, sizeof(i));
    sreq = NULL;
    unsigned calls = 0;
    while (sreq == NULL) {
      ncclResult_t res = net->isend(sc, buf, 8, 0, smh, NULL, &sreq);
      if (res != ncclSuccess) return fail("isend", res);
      if (sreq == NULL && past(deadline, &calls)) return fail("isend (timeout)", res);
    }
    if (repost >= 0 && post_small_recv(rc, buf + 8 * (1 + repost), rmh, &rreq[repost], deadline))
      return 1;
    repost = -1;
    if (wait_req(sreq, "send", deadline)) return 1;
    if (is_ping) {
      if (wait_req(rreq[slot], "receive", deadline)) return 1;
      int got = -1;
      memcpy(&got, buf + 8 * (1 + slot), sizeof(got));
      if (got != i) {
        fprintf(stderr, "braid-netbw: round trip %d came back as %d\n", i, got);
        return 1;
      }
      repost = slot;
    }
  }
  if (is_ping)
    printf("ping 8 B: %.2f us one way (average of %d round trips)\n",
           (double)(brd_time_now_ns() - t0) / 1e3 / (2.0 * iters), iters);
  return 0;
}

/* Both directions for ping/pong: listen, publish the handle at
 * <path>.<mine>, read <path>.<theirs>, connect and accept. */
static int connect_both(void *ctx, const char *path, int is_ping, void **sc_out, void **rc_out,
                        void **lc_out) {
  char mine[4096], theirs[4096], handle[BRD_NET_HANDLE_BYTES], peer[BRD_NET_HANDLE_BYTES];
  snprintf(mine, sizeof(mine), "%s.%s", path, is_ping ? "ping" : "pong");
  snprintf(theirs, sizeof(theirs), "%s.%s", path, is_ping ? "pong" : "ping");
  int64_t deadline = brd_time_now_ns() + DEADLINE_NS;
  ncclResult_t res = net->listen(ctx, 0, handle, lc_out);
  if (res != ncclSuccess) return fail("listen", res);
  if (handle_write(mine, handle) || handle_read(theirs, peer, deadline)) return 1;
  *sc_out = *rc_out = NULL;
  while (*sc_out == NULL || *rc_out == NULL) {
    if (*sc_out == NULL && (res = net->connect(ctx, 0, peer, sc_out, NULL)) != ncclSuccess)
      return fail("connect", res);
    if (*rc_out == NULL && (res = net->accept(*lc_out, rc_out, NULL)) != ncclSuccess)
      return fail("accept", res);
    if (brd_time_now_ns() > deadline) return fail("connect/accept (timeout)", ncclSystemError);
  }
  return 0;
}

/* See the header comment. */
int main(int argc, char **argv) {
  int lat = argc >= 3 && (strcmp(argv[1], "ping") == 0 || strcmp(argv[1], "pong") == 0);
  if (argc < 3 || (!lat && strcmp(argv[1], "send") != 0 && strcmp(argv[1], "recv") != 0)) {
    fprintf(stderr, "usage: %s send|recv <handle-file> [MiB [reps]]\n"
            "       %s ping|pong <handle-file> [iterations]\n", argv[0], argv[0]);
    return 2;
  }
  int is_send = strcmp(argv[1], "send") == 0;
  const char *which = getenv("BRAID_NETBW_NET");
  if (which != NULL && strcmp(which, "ib") == 0) net = &brd_net_ib;
  else if (which != NULL && which[0] != '\0' && strcmp(which, "socket") != 0) {
    fprintf(stderr, "braid-netbw: BRAID_NETBW_NET=%s; use socket or ib\n", which);
    return 2;
  }
  const char *path = argv[2];
  if (lat) {
    int iters = argc > 3 ? atoi(argv[3]) : 1000;
    if (iters < 1) {
      fprintf(stderr, "braid-netbw: at least 1 iteration\n");
      return 2;
    }
    void *ctx = NULL, *sc = NULL, *rc = NULL, *lc = NULL, *smh = NULL, *rmh = NULL;
    brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
    ncclResult_t res = net->init(&ctx, 1, &cfg, brd_net_log, NULL);
    if (res != ncclSuccess) return fail("init", res);
    int ndev = 0;
    if (net->devices(&ndev) != ncclSuccess || ndev < 1) return fail("devices", ncclSystemError);
    char *buf = aligned_alloc(4096, 4096);
    if (buf == NULL) return fail("allocation", ncclSystemError);
    memset(buf, 0, 4096);
    int is_ping = strcmp(argv[1], "ping") == 0;
    int rc_ = connect_both(ctx, path, is_ping, &sc, &rc, &lc);
    if (rc_ == 0 && ((res = net->regMr(sc, buf, 8, BRD_NET_PTR_HOST, &smh)) != ncclSuccess ||
                     (res = net->regMr(rc, buf + 8, 8, BRD_NET_PTR_HOST, &rmh)) != ncclSuccess))
      rc_ = fail("regMr", res);
    if (rc_ == 0) rc_ = run_pingpong(is_ping, sc, rc, buf, smh, rmh, iters);
    if (smh != NULL) net->deregMr(sc, smh);
    if (rmh != NULL) net->deregMr(rc, rmh);
    if (sc != NULL) net->closeSend(sc);
    if (rc != NULL) net->closeRecv(rc);
    if (lc != NULL) net->closeListen(lc);
    char mine[4096];
    snprintf(mine, sizeof(mine), "%s.%s", path, is_ping ? "ping" : "pong");
    unlink(mine);
    net->finalize(ctx);
    free(buf);
    return rc_;
  }
  size_t total = (argc > 3 ? (size_t)atol(argv[3]) : 64) << 20;
  int reps = argc > 4 ? atoi(argv[4]) : 5;
  if (total < MSG || reps < 1) {
    fprintf(stderr, "braid-netbw: at least 1 MiB and 1 repetition\n");
    return 2;
  }
  total -= total % MSG;
  void *ctx = NULL;
  brd_net_config_t cfg = {BRD_NET_TRAFFIC_CLASS_UNDEF};
  ncclResult_t res = net->init(&ctx, 1, &cfg, brd_net_log, NULL);
  if (res != ncclSuccess) return fail("init", res);
  int ndev = 0;
  if (net->devices(&ndev) != ncclSuccess || ndev < 1) {
    fprintf(stderr, "braid-netbw: the %s net found no device (%s?)\n", net->name,
            net == &brd_net_ib ? "NCCL_IB_HCA" : "NCCL_SOCKET_IFNAME");
    return 1;
  }
  size_t nslots = is_send ? NSEND : NRECV;
  char *buf = aligned_alloc(4096, nslots * MSG);
  if (buf == NULL) return fail("allocation", ncclSystemError);
  memset(buf, 1, nslots * MSG);
  char handle[BRD_NET_HANDLE_BYTES];
  void *comm = NULL, *lc = NULL, *mh = NULL;
  int64_t deadline = brd_time_now_ns() + DEADLINE_NS;
  if (!is_send) {
    res = net->listen(ctx, 0, handle, &lc);
    if (res != ncclSuccess) return fail("listen", res);
    if (handle_write(path, handle)) return 1;
    while (comm == NULL) {
      res = net->accept(lc, &comm, NULL);
      if (res != ncclSuccess) return fail("accept", res);
      if (brd_time_now_ns() > deadline) return fail("accept (timeout)", ncclSystemError);
    }
  } else {
    if (handle_read(path, handle, deadline)) return 1;
    while (comm == NULL) {
      res = net->connect(ctx, 0, handle, &comm, NULL);
      if (res != ncclSuccess) return fail("connect", res);
      if (brd_time_now_ns() > deadline) return fail("connect (timeout)", ncclSystemError);
    }
  }
  res = net->regMr(comm, buf, nslots * MSG, BRD_NET_PTR_HOST, &mh);
  if (res != ncclSuccess) return fail("regMr", res);
  int rc = is_send ? run_send(comm, buf, mh, total, reps) : run_recv(comm, buf, mh, total, reps);
  net->deregMr(comm, mh);
  if (is_send) net->closeSend(comm);
  else {
    net->closeRecv(comm);
    net->closeListen(lc);
    unlink(path);
  }
  net->finalize(ctx);
  free(buf);
  return rc;
}
