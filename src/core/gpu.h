/*
 * Braid: the GPU and the mode of a communicator. Which executor it uses
 * (BRAID_DEVICE=auto|cuda|host), the CUDA runtime calls init needs (only
 * here, and only in BRAID_CUDA=1 builds), and how a rank fills the identity
 * every rank publishes at init (brd_peer_info_t, transport/transport.h).
 */
#ifndef BRD_CORE_GPU_H
#define BRD_CORE_GPU_H

#include <stdint.h>

#include "nccl.h"

/* brd_device_backend_t and brd_peer_info_t, the per-rank identity, live in
 * the transport layer: transports decide from it which peers they reach. */
#include "transport/transport.h"

/* Resolves BRAID_DEVICE (a parameter: read once per process):
 * host -> host; cuda -> CUDA when a device is visible; auto -> CUDA when a
 * device is visible. With no visible device, cuda and auto fail with
 * ncclUnhandledCudaError (what NCCL returns when the CUDA runtime finds no
 * device) and a WARN naming BRAID_DEVICE=host. In a BRAID_CUDA=0 build,
 * auto is host (INFO once) and cuda is ncclInvalidUsage. An unknown value
 * is ncclInvalidArgument. Any thread. */
ncclResult_t brd_device_backend(brd_device_backend_t *backend_out);

/* Number of visible CUDA devices; ncclUnhandledCudaError when the runtime
 * fails (WARN), 0 in a CUDA=0 build. */
ncclResult_t brd_device_count(int *count_out);

/* The calling thread's current CUDA device (0 in a CUDA=0 build). */
ncclResult_t brd_device_current(int *dev_out);

/* Makes dev the calling thread's current CUDA device (no-op without CUDA). */
ncclResult_t brd_device_set(int dev);

/* Fills this rank's identity for backend and dev: host and process hashes,
 * pid, and in CUDA mode the PCI bus id and compute capability. */
ncclResult_t brd_device_peer_info(brd_device_backend_t backend, int dev,
                                  brd_peer_info_t *info_out);

/* The host identity hash of this process (computed once). */
uint64_t brd_device_host_hash(void);

/* The pid_hash a process with this pid in the caller's pid namespace has
 * (brd_peer_info_t.pid_hash): equal to a peer's means the peer's pid can be
 * looked up here. Any thread. */
uint64_t brd_device_pid_hash(int32_t pid);

/* NCCL's numeric form of a PCI bus id string ("0000:3b:00.0" -> 0x3b000):
 * the hex digits, ignoring ':' and '.'. */
int64_t brd_device_busid_to_int(const char *bus_id);

#endif /* BRD_CORE_GPU_H */
