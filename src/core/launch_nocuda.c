/*
 * Braid: the CUDA backend of a build without CUDA (CUDA=0). Every
 * communicator chooses its backend once (backend.c); in such a build a
 * CUDA-mode communicator gets this table, whose caps and begin refuse with
 * ncclInvalidUsage and a message saying how to run (BRAID_DEVICE=host).
 * The real backend is launch_cuda.c.
 */
#include <stdint.h>
#include <stdio.h>

#include "base/check.h"
#include "core/backend.h"
#include "core/comm.h"

#if !BRAID_CUDA

static ncclResult_t no_cuda(void) {
  WARN("no CUDA backend in this build (CUDA=0): a CUDA-mode collective cannot run; set "
       "BRAID_DEVICE=host");
  return ncclInvalidUsage;
}

static ncclResult_t cuda_caps(struct ncclComm *comm, brd_backend_caps_t *caps_out, char *why,
                              size_t nwhy) {
  (void)comm, (void)caps_out, (void)why, (void)nwhy;
  return no_cuda();
}

static ncclResult_t cuda_window_create(struct ncclComm *comm, const brd_transport_ops_t *t,
                                       int p2p, size_t bytes, brd_seg_handle_t *handle_out,
                                       char **base_out, struct brd_backend **b_out) {
  (void)comm, (void)t, (void)p2p, (void)bytes, (void)handle_out, (void)base_out, (void)b_out;
  return no_cuda();
}

static ncclResult_t cuda_begin(struct ncclComm *comm, struct brd_backend *b,
                               brd_backend_launch_t *l) {
  (void)comm, (void)b, (void)l;
  return no_cuda();
}

static void cuda_nothing(struct brd_backend *b) { (void)b; }

static ncclResult_t cuda_reg_export(const struct ncclComm *comm, const char *ptr, size_t size,
                                    brd_seg_handle_t *handle_out, uint64_t *offset_out,
                                    brd_p2p_export_t *ex, char *why, size_t nwhy, int *ok_out) {
  (void)comm, (void)ptr, (void)size, (void)handle_out, (void)offset_out, (void)ex;
  snprintf(why, nwhy, "no CUDA backend in this build");
  *ok_out = 0;
  return no_cuda();
}

static ncclResult_t cuda_reg_import(struct ncclComm *comm, const brd_seg_handle_t *h,
                                    uint64_t offset, brd_seg_t *imp, char **addr_out) {
  (void)comm, (void)h, (void)offset, (void)imp, (void)addr_out;
  return no_cuda();
}

/* caps refuses, so nothing else is ever called. */
#define CUDA_OPS_RUN                                                                     \
  .window_create = cuda_window_create, .begin = cuda_begin, .end = NULL, .poll = NULL,   \
  .abort = NULL, .destroy = cuda_nothing,                                                \
  .reg_export = cuda_reg_export, .reg_import = cuda_reg_import

static void cuda_topo(const struct ncclComm *comm, int p2p, brd_tune_topo_t *t) {
  (void)comm, (void)p2p, (void)t;
}

const brd_backend_ops_t brd_backend_cuda = {
    .name = "CUDA",
    .topo = cuda_topo,
    .caps = cuda_caps,
    CUDA_OPS_RUN,
};

#endif /* !BRAID_CUDA */
