/*
 * Braid: ncclMemAlloc/ncclMemFree, buffer and window registration, and
 * user-defined reduction operators.
 *
 * Host mode allocates page-aligned host memory and remembers each block so
 * ncclMemFree can tell it from device memory. CUDA mode allocates through
 * the P2P transport: cuMem memory that can be shared with peers where the
 * driver supports it, cudaMalloc otherwise.
 *
 * Registration (ncclCommRegister) is bookkeeping for now, in both modes:
 * each communicator keeps the page-aligned ranges it was given, with
 * NCCL's reference counting (registering a range inside a registered one
 * returns that one's handle). Plans do not read peers' registered buffers
 * directly yet; they go through the channel windows whatever is
 * registered.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api.h"
#include "check.h"
#include "comm.h"
#include "enqueue.h"
#include "launch.h"
#include "param.h"
#include "transport/transport.h"

struct host_block {
  void *ptr;
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
  struct host_block *b = malloc(sizeof(*b));
  void *p = NULL;
  if (b == NULL || posix_memalign(&p, 4096, size) != 0) {
    free(b);
    WARN("ncclMemAlloc : out of host memory allocating %zu bytes", size);
    return ncclSystemError;
  }
  b->ptr = p;
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
    free(found->ptr);
    free(found);
    return ncclSuccess;
  }
  if (!host_memory()) return brd_p2p_mem_free(ptr);
  WARN("ncclMemFree : %p was not allocated by ncclMemAlloc", ptr);
  return ncclInvalidArgument;
}

/* One registered range; its address is the handle the user holds. */
struct brd_reg {
  uintptr_t beg, end;       /* page-aligned [beg, end) */
  int refs;                 /* ncclCommRegister calls not yet deregistered */
  struct brd_reg *next;     /* ordered by beg */
};

struct brd_regs {
  pthread_mutex_t lock;
  struct brd_reg *list;     /* owned */
};

/* See comm.h. */
void brd_mem_regs_destroy(struct brd_regs *regs) {
  if (regs == NULL) return;
  while (regs->list != NULL) {
    struct brd_reg *r = regs->list;
    regs->list = r->next;
    free(r);
  }
  pthread_mutex_destroy(&regs->lock);
  free(regs);
}

BRD_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff,
        size_t size, void **handle)
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                               void **handle) {
  CHECK(brd_comm_check(comm, "ncclCommRegister"));
  ARG_NOT_NULL(buff, "ncclCommRegister");
  ARG_NOT_NULL(handle, "ncclCommRegister");
  if (comm->regs == NULL) {
    struct brd_regs *regs;
    BRD_CALLOC(regs, 1, "the registration table");
    int err = pthread_mutex_init(&regs->lock, NULL);
    if (err != 0) {
      free(regs);
      WARN("ncclCommRegister : pthread_mutex_init failed: %s", strerror(err));
      return ncclSystemError;
    }
    comm->regs = regs;
  }
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t beg = (uintptr_t)buff & ~(page - 1);
  uintptr_t end = ((uintptr_t)buff + size + page - 1) & ~(page - 1);
  struct brd_regs *regs = comm->regs;
  ncclResult_t res = ncclSuccess;
  pthread_mutex_lock(&regs->lock);
  struct brd_reg **pp = &regs->list;
  for (; *pp != NULL && (*pp)->beg <= beg; pp = &(*pp)->next) {
    if ((*pp)->end >= end) {
      /* Inside a registered range: share its record, as NCCL does. */
      (*pp)->refs++;
      *handle = *pp;
      goto out;
    }
  }
  struct brd_reg *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    WARN("ncclCommRegister : out of host memory registering %zu bytes", size);
    res = ncclSystemError;
    goto out;
  }
  r->beg = beg;
  r->end = end;
  r->refs = 1;
  r->next = *pp;
  *pp = r;
  *handle = r;
out:
  pthread_mutex_unlock(&regs->lock);
  if (res == ncclSuccess)
    INFO(BRD_SUBSYS_REG, "register comm %p buffer %p size %zu handle %p",
         (void *)comm, buff, size, *handle);
  return res;
}

BRD_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle) {
  CHECK(brd_comm_check(comm, "ncclCommDeregister"));
  /* NCCL accepts the NULL handle a skipped registration returns. */
  if (handle == NULL) return ncclSuccess;
  struct brd_regs *regs = comm->regs;
  struct brd_reg *gone = NULL;
  int found = 0;
  if (regs != NULL) {
    pthread_mutex_lock(&regs->lock);
    /* The handle is compared, never dereferenced, until it is found. */
    for (struct brd_reg **pp = &regs->list; *pp != NULL; pp = &(*pp)->next) {
      if (*pp != handle) continue;
      found = 1;
      if (--(*pp)->refs == 0) {
        gone = *pp;
        *pp = gone->next;
      }
      break;
    }
    pthread_mutex_unlock(&regs->lock);
  }
  if (!found) {
    WARN("ncclCommDeregister : handle %p is not registered with this "
         "communicator (deregistered already, or from ncclCommRegister on "
         "another communicator)", handle);
    return ncclInvalidUsage;
  }
  free(gone);
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff,
        size_t size, ncclWindow_t *win, int winFlags)
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                     ncclWindow_t *win, int winFlags) {
  CHECK(brd_comm_check(comm, "ncclCommWindowRegister"));
  ARG_NOT_NULL(buff, "ncclCommWindowRegister");
  ARG_NOT_NULL(win, "ncclCommWindowRegister");
  (void)size;
  (void)winFlags;
  return brd_api_not_implemented("ncclCommWindowRegister");
}

BRD_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm,
        ncclWindow_t win)
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  CHECK(brd_comm_check(comm, "ncclCommWindowDeregister"));
  ARG_NOT_NULL(win, "ncclCommWindowDeregister");
  return brd_api_not_implemented("ncclCommWindowDeregister");
}

BRD_API(ncclResult_t, ncclRedOpCreatePreMulSum, ncclRedOp_t *op, void *scalar,
        ncclDataType_t datatype, ncclScalarResidence_t residence,
        ncclComm_t comm)
ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                       ncclDataType_t datatype,
                                       ncclScalarResidence_t residence,
                                       ncclComm_t comm) {
  CHECK(brd_comm_check(comm, "ncclRedOpCreatePreMulSum"));
  ARG_NOT_NULL(op, "ncclRedOpCreatePreMulSum");
  ARG_NOT_NULL(scalar, "ncclRedOpCreatePreMulSum");
  size_t esize = brd_dtype_size(datatype);
  if (esize == 0) {
    WARN("ncclRedOpCreatePreMulSum : invalid type %d", (int)datatype);
    return ncclInvalidArgument;
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    WARN("ncclRedOpCreatePreMulSum : invalid residence %d", (int)residence);
    return ncclInvalidArgument;
  }
  if (comm->redops == NULL) {
    comm->redops = calloc(1, sizeof(*comm->redops));
    if (comm->redops == NULL) {
      WARN("ncclRedOpCreatePreMulSum : out of host memory");
      return ncclSystemError;
    }
  }
  for (int i = 0; i < BRD_REDOPS_MAX; i++) {
    brd_redop_slot_t *s = &comm->redops->slot[i];
    if (s->used) continue;
    memset(s, 0, sizeof(*s));
    s->used = 1;
    s->dtype = datatype;
    s->residence = residence;
    if (residence == ncclScalarHostImmediate)
      memcpy(s->host_scalar, scalar, esize);
    else
      s->dev_scalar = scalar;
    *op = (ncclRedOp_t)((int)ncclNumOps + i);
    return ncclSuccess;
  }
  WARN("ncclRedOpCreatePreMulSum : this communicator already holds %d "
       "operators; destroy some with ncclRedOpDestroy", BRD_REDOPS_MAX);
  return ncclInvalidUsage;
}

BRD_API(ncclResult_t, ncclRedOpDestroy, ncclRedOp_t op, ncclComm_t comm)
ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  CHECK(brd_comm_check(comm, "ncclRedOpDestroy"));
  if (op < ncclNumOps) {
    WARN("ncclRedOpDestroy : operator %d is built in and cannot be destroyed",
         (int)op);
    return ncclInvalidArgument;
  }
  if (brd_redop_find(comm, op) == NULL) {
    WARN("ncclRedOpDestroy : operator %d unknown to this communicator",
         (int)op);
    return ncclInvalidArgument;
  }
  comm->redops->slot[(int)op - (int)ncclNumOps].used = 0;
  return ncclSuccess;
}
