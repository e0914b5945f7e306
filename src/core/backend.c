/*
 * Braid: the one choice between the host and the CUDA backend (backend.h).
 */
#include "core/backend.h"
#include "core/comm.h"

/* See backend.h. */
const brd_backend_ops_t *brd_backend_choose(const struct ncclComm *comm) {
  return comm->host_mode ? &brd_backend_host : &brd_backend_cuda;
}
