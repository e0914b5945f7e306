/*
 * Braid: ncclMemAlloc's memory. In host mode a block is shared memory of
 * its own (a memfd), so ranks in other processes can map it once it is
 * registered; CUDA mode allocates through the P2P transport.
 */
#ifndef BRD_CORE_MEM_H
#define BRD_CORE_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "transport/transport.h"

/* Host mode: when [ptr, ptr + size) lies in a live ncclMemAlloc block,
 * starts a server handing the block's memfd to other processes (*srv_out,
 * the caller's), fills *handle_out (this process, the server's serial, the
 * block's address and size) and *offset_out (ptr within the block), and
 * sets *found_out 1; else *found_out is 0. An error (WARN) only when the
 * server cannot start. Any thread. */
ncclResult_t brd_mem_host_export(const char *ptr, size_t size, brd_seg_handle_t *handle_out,
                                 uint64_t *offset_out, brd_ipc_fdsrv_t **srv_out,
                                 int *found_out);

#endif /* BRD_CORE_MEM_H */
