/*
 * Braid: buffer and window registration (ncclCommRegister,
 * ncclCommWindowRegister and their deregistration), and the lookups
 * collectives make (brd_reg_direct, brd_reg_share; reg.h).
 *
 * Each communicator keeps the page-aligned ranges it was given, with
 * NCCL's reference counting (registering a range inside a registered one
 * returns that one's handle); windows get a record each. A record the
 * ranks have exchanged (every rank maps every other rank's range) lets
 * collectives write their output in place, in the user's buffers of every
 * rank, instead of through the staging (docs/architecture.md, "Registered
 * buffers").
 */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/api.h"
#include "core/backend.h"
#include "base/check.h"
#include "core/comm.h"
#include "core/bootstrap.h"
#include "core/gpu.h"
#include "core/enqueue.h"
#include "core/group.h"
#include "core/reg.h"
#include "transport/nvls.h"
#include "core/rma.h"
#include "base/param.h"
#include "transport/transport.h"

/* One registered range; its address is the handle the user holds. */
struct brd_reg {
  uintptr_t beg, end;       /* page-aligned [beg, end) */
  char *ptr;                /* what the first registration gave */
  size_t size;
  int refs;                 /* registrations not yet deregistered */
  int window;               /* from ncclCommWindowRegister (never shared) */
  int symmetric;            /* usable by collectives directly: a buffer
                             * registered with ncclCommRegister (when
                             * BRAID_REGISTER_SYMMETRIC promises NCCL's
                             * rule), or a window with
                             * NCCL_WIN_COLL_SYMMETRIC */
  int state;                /* REG_LOCAL, REG_DIRECT or REG_STAGED */
  char **peer_base;         /* owned: [nranks] where each rank's ptr is
                             * mapped here (REG_DIRECT) */
  uint64_t *peer_size;      /* owned: [nranks] each rank's registered bytes */
  brd_seg_t *imports;       /* owned: [nranks] CUDA mode's mappings */
  /* Shared per call (ncclCommRegister without BRAID_REGISTER_SYMMETRIC):
   * pushed to every rank at its first use, see brd_reg_share. */
  uint64_t key;             /* names the range in the peers' import tables */
  int share;                /* SHARE_NONE, SHARE_OK or SHARE_LOCAL */
  uint64_t *remote;         /* owned: [nranks] ptr as each rank maps it */
  brd_reg_peer_t *pushed;   /* owned: [nranks] the service of each rank
                             * holding an import of it (pid 0: none) */
  struct brd_nvls *mc;      /* owned: a window's multicast object, or NULL
                             * (the NVLS registry says why) */
  struct brd_reg *next;     /* ordered by beg */
};

enum {
  REG_LOCAL = 0,  /* not exchanged with the other ranks yet */
  REG_DIRECT = 1, /* every rank's range is mapped here */
  REG_STAGED = 2, /* exchanged; some rank's memory cannot be shared */
};

enum {
  SHARE_NONE = 0,  /* not pushed to the other ranks yet */
  SHARE_OK = 1,    /* every rank maps it (remote) */
  SHARE_LOCAL = 2, /* some rank cannot map it: its calls stay staged */
};

/* A peer's range mapped here because the peer asked (brd_reg_share). */
struct reg_import {
  int owner;               /* the peer's rank */
  uint64_t key;            /* the peer's name for the range */
  brd_seg_t seg;           /* owned: the mapping */
  uint64_t addr;           /* the peer's registered pointer, mapped here */
  struct reg_import *next;
};

struct brd_regs {
  pthread_mutex_t lock;
  struct brd_reg *list;     /* owned */
  uint64_t next_key;        /* under lock */
  /* Separate from lock: a service thread answering a peer must never wait
   * for this rank's own pushes (two ranks pushing to each other). */
  pthread_mutex_t imports_lock;
  struct reg_import *imports; /* owned */
};

/* Unmaps one peer's range (a backend's reg_import: a host-mode mmap or a
 * P2P import). */
static void import_unmap(brd_seg_t *imp) {
  if (imp->ptr == NULL) return;
  if (imp->handle.transport == BRD_TRANSPORT_SHM)
    munmap(imp->ptr, imp->size);
  else
    brd_transport_p2p.seg_close(imp);
  memset(imp, 0, sizeof(*imp));
}

/* Unmaps the peers' ranges an exchange mapped. */
static void imports_close(const struct ncclComm *comm, struct brd_reg *r) {
  if (r->imports == NULL) return;
  for (int p = 0; p < comm->nranks; p++) import_unmap(&r->imports[p]);
}

/* Unmaps what an exchange mapped and frees the record. */
static void reg_free(const struct ncclComm *comm, struct brd_reg *r) {
  imports_close(comm, r);
  free(r->imports);
  free(r->remote);
  free(r->pushed);
  free(r->peer_base);
  free(r->peer_size);
  free(r);
}

/* See comm.h. */
void brd_regs_destroy(struct ncclComm *comm) {
  struct brd_regs *regs = comm->regs;
  if (regs == NULL) return;
  while (regs->list != NULL) {
    struct brd_reg *r = regs->list;
    regs->list = r->next;
    if (r->window) brd_rma_window_untrack((ncclWindow_t)r);
    reg_free(comm, r);
  }
  /* The service answering the peers stopped with the runtime. */
  while (regs->imports != NULL) {
    struct reg_import *im = regs->imports;
    regs->imports = im->next;
    import_unmap(&im->seg);
    free(im);
  }
  pthread_mutex_destroy(&regs->imports_lock);
  pthread_mutex_destroy(&regs->lock);
  free(regs);
  comm->regs = NULL;
}

static ncclResult_t regs_get(ncclComm_t comm, const char *fn, struct brd_regs **out) {
  if (comm->regs == NULL) {
    struct brd_regs *regs;
    BRD_CALLOC(regs, 1, "the registration table");
    int err = pthread_mutex_init(&regs->lock, NULL);
    if (err == 0) {
      err = pthread_mutex_init(&regs->imports_lock, NULL);
      if (err != 0) pthread_mutex_destroy(&regs->lock);
    }
    if (err != 0) {
      free(regs);
      WARN("%s : pthread_mutex_init failed: %s", fn, strerror(err));
      return ncclSystemError;
    }
    comm->regs = regs;
  }
  *out = comm->regs;
  return ncclSuccess;
}

/* Adds a range, or a reference to the registered range holding it (as
 * NCCL does); windows always get a record of their own. Under the lock. */
static ncclResult_t reg_add(struct brd_regs *regs, void *buff, size_t size, int window,
                            const char *fn, struct brd_reg **out) {
  uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
  uintptr_t beg = (uintptr_t)buff & ~(page - 1);
  uintptr_t end = ((uintptr_t)buff + size + page - 1) & ~(page - 1);
  struct brd_reg **pp = &regs->list;
  for (; *pp != NULL && (*pp)->beg <= beg; pp = &(*pp)->next) {
    if (!window && !(*pp)->window && (*pp)->end >= end) {
      (*pp)->refs++;
      *out = *pp;
      return ncclSuccess;
    }
  }
  struct brd_reg *r = calloc(1, sizeof(*r));
  if (r == NULL) {
    WARN("%s : out of host memory registering %zu bytes", fn, size);
    return ncclSystemError;
  }
  r->beg = beg;
  r->end = end;
  r->ptr = buff;
  r->size = size;
  r->refs = 1;
  r->window = window;
  r->symmetric = !window;
  r->key = ++regs->next_key;
  r->next = *pp;
  *pp = r;
  *out = r;
  return ncclSuccess;
}

/* What a rank publishes about one range when the ranks exchange it. */
typedef struct {
  uint32_t ok;             /* 1: peers may map it */
  uint32_t pad;
  uint64_t size;           /* registered bytes */
  uint64_t offset;         /* the registered pointer within the handle's map */
  brd_seg_handle_t handle;
  char why[160];           /* when not ok */
} reg_pub_t;

/* Exports r for ranks in other processes (the backend's way): pub->ok 1
 * with pub->handle and pub->offset, or 0 with the reason in pub->why when
 * its memory cannot be shared; an error (WARN) only when exporting
 * failed. */
static ncclResult_t reg_export(const struct ncclComm *comm, const struct brd_reg *r,
                               reg_pub_t *pub, brd_p2p_export_t *ex) {
  int ok = 0;
  ncclResult_t res = brd_backend_choose(comm)->reg_export(
      comm, r->ptr, r->size, &pub->handle, &pub->offset, ex, pub->why, sizeof(pub->why), &ok);
  pub->ok = (uint32_t)ok;
  return res;
}

/* Maps a range another rank exported (reg_export) into imp; *addr_out is
 * the registered pointer as this process addresses it. Any thread. */
static ncclResult_t reg_import(struct ncclComm *comm, const reg_pub_t *pub, brd_seg_t *imp,
                               char **addr_out) {
  return brd_backend_choose(comm)->reg_import(comm, &pub->handle, pub->offset, imp, addr_out);
}

/* Exchanges r with every rank (collective: every rank exchanges its own
 * range at the same point) and maps theirs. `fn` names the caller for
 * messages. A range some rank cannot share ends REG_STAGED on every rank;
 * only failures to talk to the peers are errors. Under the lock. */
static ncclResult_t reg_exchange(struct ncclComm *comm, struct brd_reg *r, int shareable,
                                 const char *fn) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank;
  brd_p2p_export_t ex;
  reg_pub_t *pub = calloc((size_t)n, sizeof(*pub));
  int *mapped = calloc((size_t)n, sizeof(*mapped));
  memset(&ex, 0, sizeof(ex));
  r->peer_base = calloc((size_t)n, sizeof(*r->peer_base));
  r->peer_size = calloc((size_t)n, sizeof(*r->peer_size));
  r->imports = calloc((size_t)n, sizeof(*r->imports));
  if (pub == NULL || mapped == NULL || r->peer_base == NULL || r->peer_size == NULL ||
      r->imports == NULL) {
    WARN("%s : out of host memory exchanging a registered buffer", fn);
    res = ncclSystemError;
    goto out;
  }
  reg_pub_t *mine = &pub[me];
  mine->size = r->size;
  if (!shareable) {
    snprintf(mine->why, sizeof(mine->why), "the ranks' GPUs cannot use P2P with each other");
  } else if (reg_export(comm, r, mine, &ex) != ncclSuccess) {
    /* Still take part, so the peers do not wait for this rank. */
    snprintf(mine->why, sizeof(mine->why), "exporting it failed (see the WARN above)");
  }
  CHECK_GOTO(brd_boot_allgather(comm->boot, pub, sizeof(*pub)), res, fail_exchange);
  int all_ok = 1, culprit = -1;
  for (int p = 0; p < n; p++)
    if (!pub[p].ok && all_ok) {
      all_ok = 0;
      culprit = p;
    }
  mapped[me] = all_ok;
  for (int p = 0; p < n && all_ok; p++) {
    r->peer_size[p] = pub[p].size;
    if (p == me) {
      r->peer_base[p] = r->ptr;
    } else {
      res = reg_import(comm, &pub[p], &r->imports[p], &r->peer_base[p]);
      if (res != ncclSuccess) {
        mapped[me] = 0;
        res = ncclSuccess;
        break;
      }
    }
  }
  /* Every rank learns whether every rank mapped everything; the exporters
   * stop serving only then. */
  CHECK_GOTO(brd_boot_allgather(comm->boot, mapped, sizeof(*mapped)), res, fail_exchange);
  int all_mapped = all_ok;
  for (int p = 0; p < n; p++) all_mapped &= mapped[p];
  r->state = all_mapped ? REG_DIRECT : REG_STAGED;
  if (!all_ok)
    INFO(BRD_SUBSYS_REG, "%s : rank %d: registered buffer %p stays behind staging: rank "
         "%d cannot share its range: %s", fn, me, (void *)r->ptr, culprit, pub[culprit].why);
  else if (!all_mapped)
    INFO(BRD_SUBSYS_REG, "%s : rank %d: registered buffer %p stays behind staging: a "
         "rank could not map every peer's range", fn, me, (void *)r->ptr);
  else
    INFO(BRD_SUBSYS_REG, "%s : rank %d: registered buffer %p (%zu bytes) mapped from "
         "every rank", fn, me, (void *)r->ptr, r->size);
  if (!all_mapped) imports_close(comm, r);
  goto out;

fail_exchange:
  /* Not again at the next call: that would wait as long once more. */
  r->state = REG_STAGED;
  if (r->window)
    WARN("%s : rank %d could not exchange its window %p with the other ranks: "
         "ncclCommWindowRegister is collective, so every rank must call it, in the "
         "same order", fn, me, (void *)r->ptr);
  else
    WARN("%s : rank %d could not exchange its registered buffer %p with the other "
         "ranks. A buffer registered with ncclCommRegister is used directly only when "
         "every rank passes registered buffers to the same call, at the same offset "
         "from the start of its registration (NCCL's rule, promised by "
         "BRAID_REGISTER_SYMMETRIC=1); register on every rank, or unset "
         "BRAID_REGISTER_SYMMETRIC", fn, me, (void *)r->ptr);
out:
  brd_p2p_export_seal(&ex);
  free(pub);
  free(mapped);
  return res;
}

/* ---- per-call sharing (ncclCommRegister without the symmetric promise) ---- */

/* What a rank asks of another rank's registration service. */
enum { REG_REQ_IMPORT = 1, REG_REQ_RELEASE = 2 };
#define REG_REQ_MAGIC 0x42524547u

typedef struct {
  uint32_t magic;          /* REG_REQ_MAGIC */
  uint32_t op;             /* REG_REQ_* */
  uint32_t owner;          /* the asking rank */
  uint32_t pad;
  uint64_t key;            /* the asking rank's name for the range */
  reg_pub_t pub;           /* REG_REQ_IMPORT: how to map it */
} reg_req_t;

typedef struct {
  uint32_t ok;
  uint32_t pad;
  uint64_t addr;           /* the registered pointer, as the service's process
                            * maps it */
  char why[160];           /* when not ok */
} reg_rep_t;

/* comm's registration service (brd_ipc_svc_fn_t), on its thread: maps a
 * peer's range on request, or drops the mapping. */
static void reg_serve(void *ctx, const void *req, void *rep_out) {
  struct ncclComm *comm = ctx;
  const reg_req_t *q = req;
  reg_rep_t *rep = rep_out;
  struct brd_regs *regs = comm->regs;
  if (q->magic != REG_REQ_MAGIC || q->owner >= (uint32_t)comm->nranks) {
    snprintf(rep->why, sizeof(rep->why), "rank %d got a malformed request", comm->rank);
    return;
  }
  pthread_mutex_lock(&regs->imports_lock);
  struct reg_import **pp = &regs->imports;
  while (*pp != NULL && !((*pp)->owner == (int)q->owner && (*pp)->key == q->key))
    pp = &(*pp)->next;
  if (q->op == REG_REQ_RELEASE) {
    struct reg_import *im = *pp;
    if (im != NULL) {
      *pp = im->next;
      import_unmap(&im->seg);
      free(im);
    }
    rep->ok = 1;
  } else if (*pp != NULL) {
    rep->ok = 1;
    rep->addr = (*pp)->addr;
  } else {
    struct reg_import *im = calloc(1, sizeof(*im));
    char *addr = NULL;
    ncclResult_t res = im != NULL ? reg_import(comm, &q->pub, &im->seg, &addr)
                                  : ncclSystemError;
    if (res == ncclSuccess) {
      im->owner = (int)q->owner;
      im->key = q->key;
      im->addr = (uint64_t)(uintptr_t)addr;
      im->next = regs->imports;
      regs->imports = im;
      rep->ok = 1;
      rep->addr = im->addr;
    } else {
      free(im);
      snprintf(rep->why, sizeof(rep->why), "rank %d could not map it (see its WARN)",
               comm->rank);
    }
  }
  pthread_mutex_unlock(&regs->imports_lock);
}

/* See comm.h. */
ncclResult_t brd_reg_svc_create(struct ncclComm *comm, brd_ipc_svc_t **svc_out) {
  struct brd_regs *regs;
  CHECK(regs_get(comm, "ncclCommRegister", &regs));
  return brd_ipc_svc_create(sizeof(reg_req_t), sizeof(reg_rep_t), reg_serve, comm, svc_out);
}

/* Whether rank p's service is in this process (or absent: every rank is). */
static int svc_local(const brd_reg_peer_t *svc, int p) {
  return svc[p].pid == 0 || svc[p].pid == (uint32_t)getpid();
}

static double reg_timeout(void) {
  double t = (double)brd_param_int(BRD_P_BRAID_BOOTSTRAP_TIMEOUT);
  return t > 0 ? t : 300.0;
}

/* Asks every rank in another process to map r, through its service in
 * svc: SHARE_OK with r->remote filled, or SHARE_LOCAL (INFO) when some
 * rank cannot map it. Errors only for failures to reach a rank. Under
 * the lock; blocks on the services. */
static ncclResult_t reg_share(struct ncclComm *comm, struct brd_reg *r,
                              const brd_reg_peer_t *svc, int shareable, const char *fn) {
  ncclResult_t res = ncclSuccess;
  int n = comm->nranks, me = comm->rank, exported = 0;
  char why[200] = "";
  brd_p2p_export_t ex;
  reg_req_t req;
  memset(&ex, 0, sizeof(ex));
  memset(&req, 0, sizeof(req));
  r->remote = calloc((size_t)n, sizeof(*r->remote));
  r->pushed = calloc((size_t)n, sizeof(*r->pushed));
  if (r->remote == NULL || r->pushed == NULL) {
    WARN("%s : out of host memory sharing a registered buffer", fn);
    return ncclSystemError;
  }
  r->share = SHARE_LOCAL;
  if (!shareable) {
    snprintf(why, sizeof(why), "the ranks' GPUs cannot use P2P with each other");
    goto out;
  }
  if (comm->n_nodes > 1) {
    snprintf(why, sizeof(why), "some ranks are on other hosts");
    goto out;
  }
  for (int p = 0; p < n; p++) {
    if (svc_local(svc, p)) {
      r->remote[p] = (uint64_t)(uintptr_t)r->ptr; /* same address space */
      continue;
    }
    if (!exported) {
      req.magic = REG_REQ_MAGIC;
      req.op = REG_REQ_IMPORT;
      req.owner = (uint32_t)me;
      req.key = r->key;
      req.pub.size = r->size;
      CHECK_GOTO(reg_export(comm, r, &req.pub, &ex), res, out);
      if (!req.pub.ok) {
        snprintf(why, sizeof(why), "%s", req.pub.why);
        goto out;
      }
      exported = 1;
    }
    reg_rep_t rep;
    CHECK_GOTO(brd_ipc_svc_call(svc[p].pid, svc[p].serial, &req, sizeof(req), &rep,
                                sizeof(rep), reg_timeout(), &comm->abort_flag), res, out);
    if (!rep.ok) {
      rep.why[sizeof(rep.why) - 1] = '\0';
      snprintf(why, sizeof(why), "%s", rep.why);
      goto out;
    }
    r->pushed[p] = svc[p];
    r->remote[p] = rep.addr;
  }
  r->share = SHARE_OK;
out:
  brd_p2p_export_seal(&ex);
  if (r->share == SHARE_OK)
    INFO(BRD_SUBSYS_REG, "%s : rank %d: registered buffer %p (%zu bytes) shared with "
         "every rank", fn, me, (void *)r->ptr, r->size);
  else if (res == ncclSuccess)
    INFO(BRD_SUBSYS_REG, "%s : rank %d: registered buffer %p stays behind staging: %s",
         fn, me, (void *)r->ptr, why);
  return res;
}

/* Asks the ranks that mapped r to drop it (at deregistration). A rank
 * already gone has dropped it with its communicator. Blocks on the
 * services. */
static void reg_unshare(struct ncclComm *comm, struct brd_reg *r) {
  if (r->pushed == NULL) return;
  reg_req_t req;
  memset(&req, 0, sizeof(req));
  req.magic = REG_REQ_MAGIC;
  req.op = REG_REQ_RELEASE;
  req.owner = (uint32_t)comm->rank;
  req.key = r->key;
  for (int p = 0; p < comm->nranks; p++) {
    if (r->pushed[p].pid == 0) continue;
    reg_rep_t rep;
    if (brd_ipc_svc_call(r->pushed[p].pid, r->pushed[p].serial, &req, sizeof(req), &rep,
                         sizeof(rep), 10.0, &comm->abort_flag) != ncclSuccess)
      INFO(BRD_SUBSYS_REG, "ncclCommDeregister : rank %d could not ask rank %d to unmap "
           "buffer %p; it unmaps it when its communicator goes", comm->rank, p,
           (void *)r->ptr);
  }
}

/* See comm.h. */
ncclResult_t brd_reg_share(struct ncclComm *comm, const void *buf, size_t bytes,
                           const brd_reg_peer_t *svc, int shareable, const char *fn,
                           uint64_t *remote_out, int *state_out) {
  ncclResult_t res = ncclSuccess;
  struct brd_regs *regs = comm->regs;
  *state_out = BRD_REG_NONE;
  if (regs == NULL || buf == NULL || brd_param_int(BRD_P_LOCAL_REGISTER) == 0 ||
      brd_param_int(BRD_P_BRAID_REGISTER_SYMMETRIC) != 0)
    return ncclSuccess;
  const char *b = buf;
  pthread_mutex_lock(&regs->lock);
  struct brd_reg *r = regs->list;
  for (; r != NULL; r = r->next)
    if (!r->window && b >= r->ptr && b + bytes <= r->ptr + r->size) break;
  if (r == NULL) goto out;
  if (r->share == SHARE_NONE) CHECK_GOTO(reg_share(comm, r, svc, shareable, fn), res, out);
  *state_out = BRD_REG_LOCAL;
  if (r->share != SHARE_OK) goto out;
  for (int p = 0; p < comm->nranks; p++)
    remote_out[p] = r->remote[p] + (uint64_t)(b - r->ptr);
  *state_out = BRD_REG_SHARED;
out:
  pthread_mutex_unlock(&regs->lock);
  return res;
}

/* See comm.h. */
ncclResult_t brd_reg_direct(struct ncclComm *comm, const void *buf, size_t bytes,
                            int shareable, const char *fn, char **peer_out, int *ok_out) {
  ncclResult_t res = ncclSuccess;
  struct brd_regs *regs = comm->regs;
  *ok_out = 0;
  if (regs == NULL || buf == NULL || brd_param_int(BRD_P_LOCAL_REGISTER) == 0)
    return ncclSuccess;
  const char *b = buf;
  pthread_mutex_lock(&regs->lock);
  struct brd_reg *r = regs->list;
  int reg_symmetric = brd_param_int(BRD_P_BRAID_REGISTER_SYMMETRIC) != 0;
  for (; r != NULL; r = r->next)
    if (r->symmetric && (r->window || reg_symmetric) && b >= r->ptr &&
        b + bytes <= r->ptr + r->size)
      break;
  if (r == NULL) goto out;
  if (r->state == REG_LOCAL) CHECK_GOTO(reg_exchange(comm, r, shareable, fn), res, out);
  if (r->state != REG_DIRECT) goto out;
  size_t off = (size_t)(b - r->ptr);
  for (int p = 0; p < comm->nranks; p++)
    if (off + bytes > r->peer_size[p]) goto out; /* same answer on every rank */
  for (int p = 0; p < comm->nranks; p++) peer_out[p] = r->peer_base[p] + off;
  *ok_out = 1;
out:
  pthread_mutex_unlock(&regs->lock);
  return res;
}

/* See reg.h. */
void brd_reg_switch(struct ncclComm *comm, const void *buf, size_t bytes, void **mc_out,
                    char *why, size_t why_len) {
  struct brd_regs *regs = comm->regs;
  const char *b = buf;
  const char *reason = "it lies in no registered window";
  *mc_out = NULL;
  if (regs != NULL && buf != NULL) {
    pthread_mutex_lock(&regs->lock);
    for (struct brd_reg *r = regs->list; r != NULL; r = r->next) {
      if (!r->window || b < r->ptr || b + bytes > r->ptr + r->size) continue;
      if (r->mc == NULL) {
        reason = "its window is not bound to a multicast object (ncclMemAlloc memory of "
                 "one size on every rank, NVLS on)";
        continue;
      }
      *mc_out = (char *)brd_nvls_mc_ptr(r->mc) + (b - r->ptr);
      break;
    }
    pthread_mutex_unlock(&regs->lock);
  }
  if (*mc_out == NULL && why != NULL && why_len > 0) snprintf(why, why_len, "%s", reason);
}

BRD_API(ncclResult_t, ncclCommRegister, const ncclComm_t comm, void *buff,
        size_t size, void **handle)
ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                               void **handle) {
  struct brd_regs *regs;
  struct brd_reg *r = NULL;
  CHECK(brd_comm_check(comm, "ncclCommRegister"));
  ARG_NOT_NULL(buff, "ncclCommRegister");
  ARG_NOT_NULL(handle, "ncclCommRegister");
  CHECK(regs_get(comm, "ncclCommRegister", &regs));
  pthread_mutex_lock(&regs->lock);
  ncclResult_t res = reg_add(regs, buff, size, 0, "ncclCommRegister", &r);
  pthread_mutex_unlock(&regs->lock);
  if (res != ncclSuccess) return res;
  *handle = r;
  INFO(BRD_SUBSYS_REG, "register comm %p buffer %p size %zu handle %p",
       (void *)comm, buff, size, *handle);
  return ncclSuccess;
}

/* Drops one reference to record `handle` of the given kind; frees it at
 * the last. ncclInvalidUsage (WARN) for an unknown handle. */
static ncclResult_t reg_release(ncclComm_t comm, void *handle, int window, const char *fn) {
  struct brd_regs *regs = comm->regs;
  struct brd_reg *gone = NULL;
  int found = 0;
  if (regs != NULL) {
    pthread_mutex_lock(&regs->lock);
    /* The handle is compared, never dereferenced, until it is found. */
    for (struct brd_reg **pp = &regs->list; *pp != NULL; pp = &(*pp)->next) {
      if (*pp != handle || (*pp)->window != window) continue;
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
    WARN("%s : handle %p is not registered with this communicator (deregistered "
         "already, or from %s on another communicator)", fn, handle,
         window ? "ncclCommWindowRegister" : "ncclCommRegister");
    return ncclInvalidUsage;
  }
  if (gone != NULL) {
    if (window) {
      brd_rma_window_untrack((ncclWindow_t)gone);
      brd_nvls_window_forget(gone);
      brd_nvls_destroy(gone->mc);
      gone->mc = NULL;
    }
    reg_unshare(comm, gone);
    reg_free(comm, gone);
  }
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommDeregister, const ncclComm_t comm, void *handle)
ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle) {
  CHECK(brd_comm_check(comm, "ncclCommDeregister"));
  /* NCCL accepts the NULL handle a skipped registration returns. */
  if (handle == NULL) return ncclSuccess;
  CHECK(brd_group_check_teardown(comm, "ncclCommDeregister"));
  return reg_release(comm, handle, 0, "ncclCommDeregister");
}

/* A window registration waiting for its group's end. */
typedef struct {
  void *buff;
  size_t size;
  int flags;
  ncclWindow_t *win;         /* the caller's: filled at the group's end */
} window_job_t;

static ncclResult_t window_register(ncclComm_t comm, void *buff, size_t size,
                                    ncclWindow_t *win, int winFlags);

static ncclResult_t window_job(struct ncclComm *comm, void *arg) {
  window_job_t *j = arg;
  return window_register(comm, j->buff, j->size, j->win, j->flags);
}

BRD_API(ncclResult_t, ncclCommWindowRegister, ncclComm_t comm, void *buff,
        size_t size, ncclWindow_t *win, int winFlags)
ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                     ncclWindow_t *win, int winFlags) {
  static const char fn[] = "ncclCommWindowRegister";
  CHECK(brd_comm_check(comm, fn));
  ARG_NOT_NULL(buff, fn);
  ARG_NOT_NULL(win, fn);
  if (size == 0) {
    WARN("%s : size is 0; a window holds at least one byte", fn);
    return ncclInvalidArgument;
  }
  if ((uintptr_t)buff % NCCL_WIN_REQUIRED_ALIGNMENT != 0) {
    WARN("%s : buffer %p is not aligned to NCCL_WIN_REQUIRED_ALIGNMENT (%d bytes); "
         "allocate it with ncclMemAlloc", fn, buff, NCCL_WIN_REQUIRED_ALIGNMENT);
    return ncclInvalidArgument;
  }
  /* NCCL_WIN_STRICT_ORDERING asks puts to land in issue order; Braid's
   * puts always do (rma.c). */
  if ((winFlags & ~(NCCL_WIN_COLL_SYMMETRIC | NCCL_WIN_STRICT_ORDERING)) != 0) {
    WARN("%s : unknown window flags 0x%x (known: NCCL_WIN_COLL_SYMMETRIC, "
         "NCCL_WIN_STRICT_ORDERING)", fn,
         (unsigned)winFlags);
    return ncclInvalidArgument;
  }
  *win = NULL;
  if (brd_group_depth() > 0) {
    /* Every rank exchanges its buffer: in a group (one thread may drive
     * every rank) that happens at the group's end, as NCCL fills the
     * handle there. */
    window_job_t *job = malloc(sizeof(*job));
    if (job == NULL) {
      WARN("%s : out of host memory", fn);
      return ncclSystemError;
    }
    job->buff = buff;
    job->size = size;
    job->flags = winFlags;
    job->win = win;
    return brd_group_add_job(comm, window_job, job);
  }
  return window_register(comm, buff, size, win, winFlags);
}

/* Registers a checked window now (collective). */
/* Binds window r to a multicast object where the backend can (collective,
 * as the registration), and records the outcome in the NVLS registry the
 * multimem getters read (transport/nvls.h): the mapping, or why there is
 * none. Under the lock. */
static ncclResult_t window_switch(struct ncclComm *comm, struct brd_reg *r, const char *fn) {
  const brd_backend_ops_t *be = brd_backend_choose(comm);
  char why[400] = "";
  if (be->reg_switch_bind == NULL) {
    snprintf(why, sizeof(why), "the %s backend has no multicast (NVLS needs CUDA mode on "
             "GPUs joined by NVSwitch)", be->name);
  } else {
    ncclResult_t res = be->reg_switch_bind(comm, r->ptr, r->size, &r->mc, why, sizeof(why));
    if (res != ncclSuccess) return res;
  }
  if (r->mc != NULL) {
    INFO(BRD_SUBSYS_REG | BRD_SUBSYS_NVLS, "%s : rank %d: window %p bound to a multicast "
         "object at %p", fn, comm->rank, (void *)r, brd_nvls_mc_ptr(r->mc));
    return brd_nvls_window_bind(r, brd_nvls_mc_ptr(r->mc), 0, r->size);
  }
  INFO(BRD_SUBSYS_REG | BRD_SUBSYS_NVLS, "%s : rank %d: window %p has no multicast "
       "mapping: %s", fn, comm->rank, (void *)r, why);
  return brd_nvls_window_unbound(r, why);
}

static ncclResult_t window_register(ncclComm_t comm, void *buff, size_t size,
                                    ncclWindow_t *win, int winFlags) {
  static const char fn[] = "ncclCommWindowRegister";
  struct brd_regs *regs;
  struct brd_reg *r = NULL;
  CHECK(regs_get(comm, fn, &regs));
  pthread_mutex_lock(&regs->lock);
  ncclResult_t res = reg_add(regs, buff, size, 1, fn, &r);
  if (res == ncclSuccess) {
    r->symmetric = (winFlags & NCCL_WIN_COLL_SYMMETRIC) != 0;
    if (comm->nranks == 1)
      r->state = REG_STAGED;
    else
      res = reg_exchange(comm, r, 1, fn);
    if (res == ncclSuccess) res = window_switch(comm, r, fn);
  }
  pthread_mutex_unlock(&regs->lock);
  if (res == ncclSuccess) res = brd_rma_window_track(comm, (ncclWindow_t)r);
  if (res != ncclSuccess) {
    if (r != NULL) (void)reg_release(comm, r, 1, fn);
    return res;
  }
  *win = (ncclWindow_t)r;
  INFO(BRD_SUBSYS_REG, "%s : comm %p buffer %p size %zu window %p%s", fn, (void *)comm,
       buff, size, (void *)r, r->symmetric ? " (symmetric)" : "");
  return ncclSuccess;
}

BRD_API(ncclResult_t, ncclCommWindowDeregister, ncclComm_t comm,
        ncclWindow_t win)
ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win) {
  CHECK(brd_comm_check(comm, "ncclCommWindowDeregister"));
  ARG_NOT_NULL(win, "ncclCommWindowDeregister");
  CHECK(brd_group_check_teardown(comm, "ncclCommWindowDeregister"));
  return reg_release(comm, win, 1, "ncclCommWindowDeregister");
}

/* See rma.h. */
ncclResult_t brd_mem_window_view(struct ncclComm *comm, ncclWindow_t win, int peer,
                                 const char *fn, brd_window_view_t *view_out) {
  struct brd_regs *regs = comm->regs;
  brd_window_view_t v = {0};
  int found = 0;
  if (regs != NULL) {
    pthread_mutex_lock(&regs->lock);
    for (struct brd_reg *r = regs->list; r != NULL; r = r->next) {
      if ((ncclWindow_t)r != win || !r->window) continue;
      found = 1;
      v.user_ptr = r->ptr;
      v.size = r->size;
      v.mapped = r->state == REG_DIRECT;
      if (peer >= 0 && peer < comm->nranks && v.mapped) {
        v.peer_base = r->peer_base[peer];
        v.peer_size = (size_t)r->peer_size[peer];
      } else if (peer == comm->rank) {
        v.peer_base = r->ptr;
        v.peer_size = r->size;
      }
      break;
    }
    pthread_mutex_unlock(&regs->lock);
  }
  if (!found) {
    WARN("%s : window %p is not registered with communicator %p (deregistered "
         "already, or from another communicator)", fn, (void *)win, (void *)comm);
    return ncclInvalidArgument;
  }
  *view_out = v;
  return ncclSuccess;
}
