/*
 * Braid: ncclMemAlloc/ncclMemFree (registration is reg.c, user reduction
 * operators redop.c).
 *
 * Host mode allocates shared memory (a memfd, so ranks in other processes
 * can map a registered block) and remembers each block so ncclMemFree can
 * tell it from device memory. CUDA mode allocates through
 * the P2P transport: cuMem memory that can be shared with peers where the
 * driver supports it, cudaMalloc otherwise.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdio.h>
#include <strings.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/api.h"
#include "base/check.h"
#include "core/mem.h"
#include "base/param.h"
#include "transport/transport.h"

struct host_block {
  void *ptr;
  size_t size;     /* bytes mapped */
  int fd;          /* the memfd behind it: other processes may map it */
  struct host_block *next;
};

static pthread_mutex_t host_blocks_lock = PTHREAD_MUTEX_INITIALIZER;
static struct host_block *host_blocks; /* owned: every live host allocation */

static int host_memory(void) {
#if BRAID_CUDA
  const char *dev = brd_param_str(BRD_P_BRAID_DEVICE);
  return dev != NULL && strcasecmp(dev, "host") == 0;
#else
  return 1;
#endif
}

BRD_API(ncclResult_t, ncclMemAlloc, void **ptr, size_t size)
ncclResult_t pncclMemAlloc(void **ptr, size_t size) {
  ARG_NOT_NULL(ptr, "ncclMemAlloc");
  if (size == 0) {
    WARN("ncclMemAlloc : size argument is 0; ask for at least one byte");
    return ncclInvalidArgument;
  }
  if (!host_memory()) return brd_p2p_mem_alloc(size, ptr);
  /* Shared memory of its own (a memfd), so ranks in other processes can
   * map it when it is registered. */
  struct host_block *b = malloc(sizeof(*b));
  int fd = b != NULL ? memfd_create("braid-memalloc", MFD_CLOEXEC) : -1;
  void *p = MAP_FAILED;
  if (fd >= 0 && ftruncate(fd, (off_t)size) == 0)
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    int err = errno;
    if (fd >= 0) close(fd);
    free(b);
    WARN("ncclMemAlloc : cannot allocate %zu bytes of shared host memory: %s", size,
         strerror(err));
    return ncclSystemError;
  }
  b->ptr = p;
  b->size = size;
  b->fd = fd;
  pthread_mutex_lock(&host_blocks_lock);
  b->next = host_blocks;
  host_blocks = b;
  pthread_mutex_unlock(&host_blocks_lock);
  *ptr = p;
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclMemFree, void *ptr)
ncclResult_t pncclMemFree(void *ptr) {
  if (ptr == NULL) return ncclSuccess;
  struct host_block *found = NULL;
  pthread_mutex_lock(&host_blocks_lock);
  for (struct host_block **pp = &host_blocks; *pp != NULL; pp = &(*pp)->next) {
    if ((*pp)->ptr == ptr) {
      found = *pp;
      *pp = found->next;
      break;
    }
  }
  pthread_mutex_unlock(&host_blocks_lock);
  if (found != NULL) {
    munmap(found->ptr, found->size);
    close(found->fd);
    free(found);
    return ncclSuccess;
  }
  if (!host_memory()) return brd_p2p_mem_free(ptr);
  WARN("ncclMemFree : %p was not allocated by ncclMemAlloc", ptr);
  return ncclInvalidArgument;
}

/* See mem.h. */
ncclResult_t brd_mem_host_export(const char *ptr, size_t size, brd_seg_handle_t *handle_out,
                                 uint64_t *offset_out, brd_ipc_fdsrv_t **srv_out,
                                 int *found_out) {
  int fd = -1;
  *found_out = 0;
  pthread_mutex_lock(&host_blocks_lock);
  for (struct host_block *b = host_blocks; b != NULL; b = b->next) {
    if (ptr < (char *)b->ptr || ptr + size > (char *)b->ptr + b->size) continue;
    fd = b->fd;
    handle_out->local_addr = (uint64_t)(uintptr_t)b->ptr;
    handle_out->size = b->size;
    *offset_out = (uint64_t)(ptr - (char *)b->ptr);
    break;
  }
  /* The server duplicates fd before the lock goes, so a concurrent
   * ncclMemFree cannot close it under us. */
  ncclResult_t res = fd >= 0 ? brd_ipc_fdsrv_create(fd, srv_out) : ncclSuccess;
  pthread_mutex_unlock(&host_blocks_lock);
  if (fd < 0) return ncclSuccess;
  *found_out = 1;
  if (res != ncclSuccess) return res;
  uint32_t serial = brd_ipc_fdsrv_serial(*srv_out);
  handle_out->pid = (uint32_t)getpid();
  memcpy(handle_out->name, &serial, sizeof(serial));
  return ncclSuccess;
}
