/*
 * Braid: argument checking for every collective and point-to-point call,
 * with NCCL's codes and wording, plus Braid's stricter buffer rules (NULL
 * buffers and illegal overlaps are always rejected, not only under
 * NCCL_CHECK_POINTERS).
 *
 * NCCL_CHECK_POINTERS=1 makes NCCL ask CUDA whether each buffer is device
 * memory of the communicator's GPU. Host mode has no devices; there it
 * probes the first and last byte of every buffer the call reads (and
 * writes) with process_vm_readv/process_vm_writev on this process, so an
 * unmapped or read-only buffer is ncclInvalidArgument with a message
 * instead of a crash inside the group. Writability is probed by writing
 * back the byte just read, before the call runs. Where the kernel refuses
 * those system calls the probe is skipped and says so at INFO.
 */
#include <stdint.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "core/api.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/enqueue.h"
#include "core/group.h"
#include "core/redop.h"
#include "base/param.h"

/* See enqueue.h. */
size_t brd_dtype_size(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2:
    return 1;
  case ncclFloat16: case ncclBfloat16:
    return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32:
    return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64:
    return 8;
  case ncclNumTypes: break;
  }
  return 0;
}

/* Send and receive name a peer; rooted collectives a root. */
static int has_root(brd_coll_t coll) {
  return coll == BRD_COLL_SEND || coll == BRD_COLL_RECV || brd_ir_coll_traits(coll).rooted;
}

static int is_reduction(brd_coll_t coll) { return brd_ir_coll_traits(coll).reduction; }

/* Which buffers this rank reads or writes, and how many elements each
 * (the IR's traits: segments, root-only buffers). */
static void buffer_extents(const brd_call_t *c, int rank, int nranks,
                           size_t *send_n, size_t *recv_n) {
  size_t n = c->count, all = c->count * (size_t)nranks;
  brd_ir_coll_traits_t t = brd_ir_coll_traits(c->coll);
  *send_n = *recv_n = 0;
  if (c->coll == BRD_COLL_SEND) *send_n = n;
  if (c->coll == BRD_COLL_RECV) *recv_n = n;
  if (!brd_coll_is_ir(c->coll)) return;
  if (brd_ir_coll_has_input(c->coll, rank, c->root)) *send_n = t.in_segs_all ? all : n;
  if (brd_ir_coll_has_output(c->coll, rank, c->root)) *recv_n = t.out_segs_all ? all : n;
}

/* The one legal overlap for each collective: where recvbuff must sit
 * relative to sendbuff for the call to be in place, in bytes. A return of
 * INTPTR_MAX means no overlap is legal. */
static intptr_t inplace_offset(const brd_call_t *c, int rank, size_t esize) {
  size_t n = c->count * esize;
  switch (c->coll) {
  case BRD_COLL_ALLREDUCE: case BRD_COLL_BROADCAST: case BRD_COLL_REDUCE:
    return 0;
  case BRD_COLL_ALLGATHER: /* sendbuff == recvbuff + rank*sendcount */
    return -(intptr_t)(n * (size_t)rank);
  case BRD_COLL_REDUCESCATTER: /* recvbuff == sendbuff + rank*recvcount */
    return (intptr_t)(n * (size_t)rank);
  case BRD_COLL_GATHER: /* on the root: sendbuff == recvbuff + root*count */
    return -(intptr_t)(n * (size_t)c->root);
  case BRD_COLL_SCATTER: /* on the root: recvbuff == sendbuff + root*count */
    return (intptr_t)(n * (size_t)c->root);
  default:
    return INTPTR_MAX;
  }
}

/* Counts: no buffer a call touches can be larger than what a process can
 * address. 2^47 bytes (128 TiB) is the user address space of x86-64 with
 * 4-level paging and of 48-bit aarch64, and the CUDA unified address range
 * on both; a count past it is a corrupted or uninitialised argument, and
 * taking it at face value would split the call into billions of pieces.
 * A separate check (not folded into the per-collective tables) so it
 * stays the same whatever the collective numbering. */
#define BRD_MAX_BUFFER_BYTES ((size_t)1 << 47)

/* count x element size (x nranks where the call covers every rank's
 * share), overflow-checked, against BRD_MAX_BUFFER_BYTES for both
 * buffers. Before any allocation or buffer check. */
static ncclResult_t count_check(const brd_call_t *c, int nranks, size_t esize) {
  brd_call_t unit = *c;
  size_t send_m, recv_m, m, elems, bytes;
  /* With count 1 the extents are the multiplicities: 0, 1 or nranks
   * (the root's share on a rooted call, so take every rank as root). */
  unit.count = 1;
  unit.root = 0;
  buffer_extents(&unit, 0, nranks, &send_m, &recv_m);
  m = send_m > recv_m ? send_m : recv_m;
  if (m == 0) m = 1;
  if (__builtin_mul_overflow(c->count, m, &elems) ||
      __builtin_mul_overflow(elems, esize, &bytes) || bytes > BRD_MAX_BUFFER_BYTES) {
    if (m > 1)
      WARN("%s : count %zu is too large: %zu elements of %zu bytes for each of "
           "%zu ranks exceed the limit of %zu bytes for one buffer (the address "
           "space); pass the number of elements, not bytes, and check that the "
           "count is initialised", c->fn, c->count, c->count, esize, m,
           BRD_MAX_BUFFER_BYTES);
    else
      WARN("%s : count %zu is too large: %zu elements of %zu bytes exceed the "
           "limit of %zu bytes for one buffer (the address space); pass the "
           "number of elements, not bytes, and check that the count is "
           "initialised", c->fn, c->count, c->count, esize, BRD_MAX_BUFFER_BYTES);
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* NCCL_CHECK_POINTERS in host mode: can this process read (and, with
 * `write`, write) the bytes at p and p + len - 1? */
static ncclResult_t probe(const brd_call_t *c, const void *p, size_t len,
                          int write, const char *what) {
  const char *at[2] = {p, (const char *)p + len - 1};
  for (int i = 0; i < 2; i++) {
    char byte;
    struct iovec local = {&byte, 1}, remote = {(void *)(uintptr_t)at[i], 1};
    ssize_t n = process_vm_readv(getpid(), &local, 1, &remote, 1, 0);
    if (n == 1 && write) n = process_vm_writev(getpid(), &local, 1, &remote, 1, 0);
    if (n == 1) continue;
    if (errno == ENOSYS || errno == EPERM) {
      INFO(BRD_SUBSYS_COLL, "%s : NCCL_CHECK_POINTERS cannot probe buffers "
           "here (%s); skipped", c->fn, strerror(errno));
      return ncclSuccess;
    }
    WARN("%s : %s %p is not a valid pointer: byte %zu of %zu cannot be %s "
         "(%s)", c->fn, what, p, i ? len - 1 : 0, len,
         write ? "written" : "read", strerror(errno));
    return ncclInvalidArgument;
  }
  return ncclSuccess;
}

/* See enqueue.h. */
ncclResult_t brd_call_check(const brd_call_t *c) {
  CHECK(brd_comm_check(c->comm, c->fn));
  const struct ncclComm *comm = c->comm;
  if (has_root(c->coll) && (c->root < 0 || c->root >= comm->nranks)) {
    WARN("%s : invalid %s %d (%s should be in the 0..%d range)", c->fn,
         c->coll >= BRD_COLL_SEND ? "peer" : "root", c->root,
         c->coll >= BRD_COLL_SEND ? "peer" : "root", comm->nranks - 1);
    return ncclInvalidArgument;
  }
  if ((int)c->dtype < 0 || c->dtype >= ncclNumTypes) {
    WARN("%s : invalid type %d", c->fn, (int)c->dtype);
    return ncclInvalidArgument;
  }
  if (is_reduction(c->coll)) {
    if ((int)c->op < 0 || (int)c->op > (int)ncclMaxRedOp) {
      WARN("%s : invalid reduction operation %d", c->fn, (int)c->op);
      return ncclInvalidArgument;
    }
    const brd_redop_slot_t *user = brd_redop_find(comm, c->op);
    if (c->op >= ncclNumOps && user == NULL) {
      WARN("%s : reduction operation %d unknown to this communicator "
           "(create it with ncclRedOpCreatePreMulSum on this communicator)",
           c->fn, (int)c->op);
      return ncclInvalidArgument;
    }
    if (user != NULL && user->dtype != c->dtype) {
      WARN("%s : reduction operation %d was created for datatype %d, not %d",
           c->fn, (int)c->op, (int)user->dtype, (int)c->dtype);
      return ncclInvalidArgument;
    }
  }
  if (c->count == 0) return ncclSuccess;

  size_t send_n, recv_n, esize = brd_dtype_size(c->dtype);
  CHECK(count_check(c, comm->nranks, esize));
  buffer_extents(c, comm->rank, comm->nranks, &send_n, &recv_n);
  if (send_n > 0 && c->sendbuff == NULL) {
    WARN("%s : sendbuff argument is NULL with count %zu on rank %d", c->fn,
         c->count, comm->rank);
    return ncclInvalidArgument;
  }
  if (recv_n > 0 && c->recvbuff == NULL) {
    WARN("%s : recvbuff argument is NULL with count %zu on rank %d", c->fn,
         c->count, comm->rank);
    return ncclInvalidArgument;
  }
  if (brd_param_int(BRD_P_CHECK_POINTERS) != 0) {
    if (send_n > 0) CHECK(probe(c, c->sendbuff, send_n * esize, 0, "sendbuff"));
    if (recv_n > 0) CHECK(probe(c, c->recvbuff, recv_n * esize, 1, "recvbuff"));
  }
  if (send_n > 0 && recv_n > 0) {
    uintptr_t s = (uintptr_t)c->sendbuff, r = (uintptr_t)c->recvbuff;
    uintptr_t s_end = s + send_n * esize, r_end = r + recv_n * esize;
    intptr_t legal = inplace_offset(c, comm->rank, esize);
    int overlap = s < r_end && r < s_end;
    if (overlap && (legal == INTPTR_MAX || (intptr_t)(r - s) != legal)) {
      /* Lead with the count: far more often it is wrong (larger than the
       * buffers) than the buffers' layout is. */
      WARN("%s : with count %zu, sendbuff %p (%zu bytes) and recvbuff %p (%zu "
           "bytes) overlap but are not in place (rank %d): check that count is "
           "the number of elements of each buffer, then use separate buffers or "
           "the in-place layout NCCL documents for this call", c->fn, c->count,
           c->sendbuff, send_n * esize, c->recvbuff, recv_n * esize, comm->rank);
      return ncclInvalidArgument;
    }
  }
  return ncclSuccess;
}

/* NCCL's ncclCommEnsureReady: an aborted communicator passes (its calls
 * fail fast); one still busy with a nonblocking operation (init or group)
 * is ncclInvalidArgument; one in error returns the error. */
static ncclResult_t ensure_ready(const brd_call_t *c) {
  struct ncclComm *comm = c->comm;
  /* A rank found gone (comm.h, liveness): fail now, not at BRAID_TIMEOUT. */
  CHECK(brd_comm_live_check(comm, c->fn));
  if (atomic_load_explicit(&comm->abort_flag, memory_order_acquire)) return ncclSuccess;
  int r = atomic_load_explicit(&comm->async_error, memory_order_acquire);
  if (r == ncclInProgress) {
    WARN("%s : rank %d: attempt to use the communicator before the previous "
         "operation returned ncclSuccess; poll ncclCommGetAsyncError until "
         "it does", c->fn, comm->rank);
    return ncclInvalidArgument;
  }
  return (ncclResult_t)r;
}

/* The call, checked, with its user operator resolved, into the group. */
static ncclResult_t enqueue_checked(const brd_call_t *call) {
  CHECK(brd_call_check(call));
  if (call->count == 0) return ncclSuccess;
  brd_call_t c = *call;
  const brd_redop_slot_t *user = brd_redop_find(c.comm, c.op);
  if (user != NULL && is_reduction(c.coll)) {
    c.premul = 1;
    memcpy(c.premul_value, user->host_scalar, sizeof(c.premul_value));
    c.premul_scalar = user->residence == ncclScalarHostImmediate ? NULL
                                                                 : user->dev_scalar;
  }
  return brd_group_add(&c);
}

/* See enqueue.h. */
ncclResult_t brd_enqueue(const brd_call_t *call) {
  ncclResult_t res = brd_comm_check(call->comm, call->fn);
  if (res != ncclSuccess) return brd_group_error(res);
  struct ncclComm *comm = call->comm;
  /* Read now: an abort on another thread may free comm once its launch
   * has returned. */
  int blocking = comm->config.blocking != 0;
  if (comm->revoked) {
    WARN("%s : rank %d: the communicator was revoked (ncclCommRevoke); only "
         "ncclCommDestroy or ncclCommAbort may follow", call->fn, comm->rank);
    return brd_group_error(ncclInvalidUsage);
  }
  if (atomic_load(&comm->suspended)) {
    WARN("%s : rank %d: the communicator is suspended (ncclCommSuspend); call "
         "ncclCommResume first", call->fn, comm->rank);
    return brd_group_error(ncclInvalidUsage);
  }
  /* Every call is a group of its own inside whatever group is open, as in
   * NCCL: outside a group this runs it at once. */
  brd_group_start();
  res = ensure_ready(call);
  if (res == ncclSuccess) {
    res = enqueue_checked(call);
    /* A nonblocking communicator keeps a failed call's error as its state
     * (NCCL's rule); one busy or already failed keeps the state it has. */
    if (res != ncclSuccess && !blocking)
      atomic_store_explicit(&comm->async_error, (int)res, memory_order_release);
  }
  brd_group_error(res);
  ncclResult_t end = brd_group_end();
  if (res != ncclSuccess) return res;
  /* A nonblocking communicator reports its state: ncclInProgress while
   * its launch runs, its result once done. */
  if (!blocking)
    return (ncclResult_t)atomic_load_explicit(&comm->async_error, memory_order_acquire);
  return end;
}
