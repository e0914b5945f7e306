/*
 * MSCCL++ execution plans, private to the translation (mscclpp.c: ops,
 * passes, the plan) and the reading of the document (mscclpp_doc.c:
 * fields, GPUs, thread blocks, buffer refs, pipelines' iteration counts).
 * The document and the translation's rules are described in mscclpp.c;
 * the entry points are in mscclpp.h.
 */
#ifndef BRD_PLAN_MSCCLPP_INT_H
#define BRD_PLAN_MSCCLPP_INT_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"
#include "device/ir.h"
#include "plan/plan.h"
#include "plan/plan_json.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

enum { MB_INPUT = 0, MB_OUTPUT = 1, MB_SCRATCH = 2 };
enum { MC_MEMORY = 0, MC_PORT = 1, MC_NTYPES = 2 };
#define MAX_REFS 32

/* What an op name becomes. */
enum {
  K_NOP,
  K_BARRIER,
  K_SIGNAL,
  K_WAIT,
  K_PLAIN,         /* put, get, copy, re, res, rre, rres: COPY/PUT/GET/REDUCE */
  K_PLAIN_SIGNAL,  /* pws, pwsf: the put, then a signal per channel */
  K_PACKET,        /* ppkt, cpkt, rppkt, upkt, repkt, respkt, recpkt, recspkt */
  K_SWITCH_REDUCE, /* glres */
  K_SWITCH_STORE,  /* gstore */
  K_PIPELINE,      /* pipeline: its inner ops, unrolled */
  K_FLUSH,         /* flush: nothing (Braid's puts have read their source) */
  K_SEM_ACQUIRE,   /* sem_acquire: barriers (mscclpp_sem.c) */
  K_SEM_RELEASE,   /* sem_release: barriers (mscclpp_sem.c) */
  K_REFUSE,
};

/* Pipelines. MSCCL++'s executor runs a pipeline's inner ops
 * ceil(num_chunks x chunk bytes / unit_size) times, iteration i on bytes
 * [i x unit_size, (i + 1) x unit_size) of every ref, so the count grows
 * with the message. A Braid plan serves every size, so each pipeline is
 * unrolled a fixed number of times: as many as MSCCL++ runs at the plan's
 * max_message_size, at most PIPE_MAX (also with no max_message_size).
 * Braid's chunks are MSCCL++'s cut into R, a multiple of every pipeline's
 * count over its gcd with num_chunks, so each iteration's share is whole
 * chunks. A correct plan gives the same result at any count (MSCCL++'s
 * own varies), and the verifier checks the unrolled one. */
#define PIPE_MAX 8

typedef struct mchan {
  int peer;
  int sem;      /* Braid semaphore index on the channel to peer */
  int32_t nsig; /* signals so far (this pass) */
  int32_t nwait;
} mchan_t;

typedef struct mrbuf {
  int rank;
  int type; /* MB_* */
} mrbuf_t;

/* A device semaphore of one GPU (the gpu's "semaphores" list): its
 * initial value and, from the dry pass, who releases and acquires it. */
typedef struct msem {
  int init;           /* init_value */
  int nrel, nacq;     /* releases, acquires per iteration */
  int rel_tb, acq_tb; /* the one thread block doing each, -1 none yet */
} msem_t;

/* A synchronisation event of a Braid block, in program order within one
 * iteration: a sem_release, a sem_acquire or (in plans with semaphores)
 * a barrier, recorded by the dry pass; mscclpp_sem.c gives each the
 * barriers it becomes. */
enum { SEV_REL, SEV_ACQ, SEV_BAR };
typedef struct msev {
  int kind;           /* SEV_* */
  int sem;            /* semaphore id (SEV_REL, SEV_ACQ) */
  int n;              /* the n-th release/acquire of sem, barrier of the block */
  int tb, op, inner;  /* where, for messages */
  int gen;            /* the barrier it joins (its node's place), -1 none */
  int before;         /* barriers its block passed before it */
  int emit;           /* barriers it emits in the build pass */
} msev_t;

typedef struct msblk {
  msev_t *ev; /* owned */
  int nev, cap;
  int nbar;   /* barrier ops seen (dry pass) */
  int cur;    /* next event (build pass) */
  int head;   /* barriers emitted before its first op */
  int started; /* head emitted (build pass) */
  int tail;   /* barriers emitted after its last op */
} msblk_t;

typedef struct mgpu {
  const brd_json_t *js;
  int nsem;
  msem_t *sem; /* owned, [nsem] */
  int64_t in_chunks, out_chunks, scratch_chunks;
  int nch[MC_NTYPES];
  mchan_t *ch[MC_NTYPES]; /* owned */
  int nsw;
  int *sw_buf; /* owned: buffer type of each switch channel */
  int nrbuf;
  mrbuf_t *rbuf; /* owned */
} mgpu_t;

typedef struct mctx {
  const char *name;
  char *err;
  size_t errlen;
  int failed;
  ncclResult_t res;
  int n;     /* ranks */
  mgpu_t *g; /* owned, [n] */
  int ll;    /* protocol LL */
  int inplace;
  int coll;          /* BRD_IR_COLL_* */
  int reuse;         /* reuse_resources: scratch refs only inside pipelines */
  uint64_t max_msg;  /* max_message_size as MSCCL++ counts it; 0: no limit */
  int64_t in_chunks; /* MSCCL++'s input_chunks (every GPU alike) */
  int64_t nb;        /* in place: chunks of the one buffer (before R) */
  int R;             /* Braid chunks per MSCCL++ chunk (brd_mscclpp_cut_scan) */
  uint32_t cr;       /* Braid's nchunks: nchunks * R */
  /* The pipeline being unrolled: piece pipe_i of pipe_n, pipe_len Braid
   * chunks each (pipe_n 0: outside one). */
  int pipe_i, pipe_n;
  int64_t pipe_len;
  int nblocks;     /* thread blocks of the GPU with most */
  int nb_out;      /* blocks of the Braid plan (fewer when folded) */
  int blk;         /* the Braid block of the current thread block */
  int64_t nchunks; /* MSCCL++ chunks of one segment (Braid's before R) */
  int64_t nslots;  /* scratch chunks (Braid's slots before R) */
  int mem_max;     /* most memory channels from one rank to one peer */
  int32_t kmax;    /* largest sequence number used */
  int sem_max;     /* largest semaphore index used */
  int has_switch;
  int has_sem;           /* some GPU has device semaphores */
  msblk_t *sb;           /* owned when has_sem, [n * nb_out] */
  uint8_t *wr;           /* owned, [n * n]: rank r writes rank p's scratch */
  uint8_t *waited;       /* owned, [n * nblocks * n]: credit wait emitted */
  uint32_t *wcount;      /* owned, [n * nb * R]: in place, ops writing each
                          * chunk of a rank's one buffer */
  int pass;              /* 0: count writes, 1: check reads, 2: build */
  int prologue;          /* in place: each rank first copies its input to
                          * where it lies in its output, and local reads
                          * name the output (brd_mscclpp_ref_resolve) */
  int sw_stage;          /* switch refs to the user's buffer, staged in scratch */
  int64_t sw_base;       /* first slot of that staging */
  int32_t *slot_ck;      /* owned, [n * slot_cap]: the chunk last written
                          * into each scratch slot (-1: none seen) */
  int64_t slot_cap;      /* slots per rank there (staging included) */
  int credit_sem;        /* semaphore of the slot-reuse credits */
  int32_t credit_k;      /* their sequence number in an iteration */
  brd_plan_builder_t *b; /* NULL in the dry pass */
  /* where we are, for messages (-1: not inside one; inner: the op of a
   * pipeline) */
  int gpu, tb, op, inner;
  const char *opname;
} mctx_t;

/* A thread block's view: GPU channel ids per type, remote buffer ids per
 * channel type. */
typedef struct mtb {
  const brd_json_t *ch_ids[3];   /* per channel type (memory, port, switch), may be NULL */
  const brd_json_t *rbuf_ids[2]; /* per access channel type, may be NULL */
} mtb_t;

/* One translated ref: where it points and which chunks. */
typedef struct mref {
  brd_plan_ref_t ref;  /* `one` refs: OUTPUT until brd_mscclpp_ref_resolve */
  int io;              /* names an input/output chunk */
  int one;             /* in place: chunk `index` of the rank's one buffer */
  int sw;              /* through the switch channel */
  int staged;          /* ... to the user's buffer, staged in scratch */
  int64_t index, size; /* Braid chunks (MSCCL++'s times R): io refs the
                        * chunk in the buffer, others the slot */
} mref_t;

/* Records the first error of the translation, WARNed once and copied into
 * c->err: "MSCCL++ plan FILE: gpu G, thread block T, op I (NAME): what"
 * (the place as far as c says). Returns res, or the first error's code
 * once one was recorded. */
__attribute__((format(printf, 3, 4))) ncclResult_t brd_mscclpp_fail(mctx_t *c, ncclResult_t res,
                                                                    const char *fmt, ...);

/* "null", "a boolean", ...: a JSON type for messages, by BRD_JSON_*. */
extern const char *const brd_mscclpp_jtype_names[];

/* Field checks; each fails (brd_mscclpp_fail, ncclInvalidArgument) naming
 * the field. want: v (field `what`, may be NULL) has JSON type `type`.
 * get_int: field key of o is an integer in [lo, hi] (absent: def unless
 * required). get_str, get_arr: a string, an array. get_chan_type:
 * "memory", "port" or "switch" as MC_MEMORY, MC_PORT or 2. Outputs are
 * written on success only. */
ncclResult_t brd_mscclpp_want(mctx_t *c, const char *what, const brd_json_t *v, int type);
ncclResult_t brd_mscclpp_get_int(mctx_t *c, const brd_json_t *o, const char *key, int required,
                                 int64_t def, int64_t lo, int64_t hi, int64_t *out);
ncclResult_t brd_mscclpp_get_str(mctx_t *c, const brd_json_t *o, const char *key, const char **out);
ncclResult_t brd_mscclpp_get_arr(mctx_t *c, const brd_json_t *o, const char *key,
                                 const brd_json_t **out);
ncclResult_t brd_mscclpp_get_chan_type(mctx_t *c, const brd_json_t *o, const char *key, int *out);

/* Reads gpu r's id, chunk counts, channels (with their semaphores) and
 * remote buffers into c->g[r] (whose js is set), allocating its tables
 * (freed by brd_mscclpp_gpus_free, also after a failure). */
ncclResult_t brd_mscclpp_gpu_read(mctx_t *c, int r);

/* Frees c->g and every GPU's tables; NULL c->g is a no-op. */
void brd_mscclpp_gpus_free(mctx_t *c);

/* A thread block's channel and remote-buffer lists into *t (borrowed from
 * the document). */
ncclResult_t brd_mscclpp_tb_read(mctx_t *c, const brd_json_t *tb, mtb_t *t);

/* The GPU channel that the thread block's channel idx of this type
 * (MC_MEMORY, MC_PORT, 2 for switch) names, into *out. */
ncclResult_t brd_mscclpp_tb_chan(mctx_t *c, const mtb_t *t, int type, int64_t idx, int *out);

/* The iterations a pipeline of unit_size `unit` over `nck` chunks is
 * unrolled to (1 .. PIPE_MAX). Pure. */
int brd_mscclpp_pipe_iters(const mctx_t *c, int64_t unit, int64_t nck);

/* R, how finely Braid cuts MSCCL++'s chunks: the least common multiple
 * of parts / gcd(parts, whole) over the document's pipelines (parts: its
 * iterations, whole: its num_chunks) and ops of thread-block groups
 * (parts: tbg_size, whole: the op's chunks). 1 without either; above
 * 65535 means too many. Needs c->g[*].js, c->n, c->coll, c->max_msg,
 * c->in_chunks. Pure. */
int brd_mscclpp_cut_scan(const mctx_t *c);

/* Translates src_buff/dst_buff entry e (list[i]; dst: a destination) of an
 * op whose channel_type is op_chan_type (-1 when absent) into *out: its
 * buffer, peer and chunks in Braid's units, in-place refs left for
 * brd_mscclpp_ref_resolve. */
ncclResult_t brd_mscclpp_ref_read(mctx_t *c, const mtb_t *t, int op_chan_type, const brd_json_t *e,
                                  int dst, const char *list, size_t i, mref_t *out);

/* In place, Braid chunk j of the one buffer of the rank at the other end
 * of `peer` (-1: this rank) as Braid names it, for a read (dst 0) or a
 * write of list[i], into *out. */
ncclResult_t brd_mscclpp_ref_resolve(mctx_t *c, const char *list, size_t i, int dst, int peer,
                                     uint32_t j, brd_plan_ref_t *out);

/* sem_acquire / sem_release (kind K_SEM_*) or, in a plan with device
 * semaphores, a barrier: records its events in the dry pass, emits the
 * barriers they become in the build pass (mscclpp_sem.c). */
ncclResult_t brd_mscclpp_sem_op(mctx_t *c, const brd_json_t *op, int kind);

/* After the dry pass: pairs every acquire with its release, orders the
 * pairs that cross Braid blocks into barriers and checks that the others
 * are ordered already; refuses (brd_mscclpp_fail) what barriers cannot
 * express. Allocates nothing. */
ncclResult_t brd_mscclpp_sem_plan(mctx_t *c);

/* Build pass, at the start of each thread block: the barriers its Braid
 * block passes before its first op (once per block). */
ncclResult_t brd_mscclpp_sem_head(mctx_t *c);

/* Build pass, after gpu r's thread blocks: each of its blocks' remaining
 * barriers. */
ncclResult_t brd_mscclpp_sem_tail(mctx_t *c, int r);

/* Frees c->sb. */
void brd_mscclpp_sem_free(mctx_t *c);

#endif /* BRD_PLAN_MSCCLPP_INT_H */
