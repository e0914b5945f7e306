/*
 * Braid plan IR: a collective as data, shared by the verifier, the host
 * executor and the CUDA executor.
 *
 * A plan is one flat, relocatable blob (no pointers, only byte offsets from
 * its first byte), so it can be copied to device memory unchanged:
 *
 *   brd_ir_plan_t   header (64 bytes)
 *   brd_ir_rank_t   [nranks]           each rank's slice of the channel table
 *   brd_ir_block_t  [nranks * nblocks] each (rank, block)'s slice of the ops
 *   brd_ir_chan_t   [nchans]           channel index -> peer rank
 *   brd_ir_op_t     [nops]             64 bytes each
 *
 * Block b of rank r runs ops[op_first .. op_first + nops) in order, and runs
 * that whole list once per iteration of the plan's loop. Sizes are symbolic:
 * the data of one iteration (a window of the user buffers) is cut into
 * `nchunks` chunks and an op names chunks and scratch slots, never bytes.
 * The executor resolves them at launch from (count, datatype, scratch size)
 * with brd_plan_layout_init (device/layout.h), so one plan serves every message size
 * and a 1 GB launch runs more iterations of the same ops as a 1 MB launch.
 *
 * Buffers an op can name, through a brd_ir_ref_t:
 *   INPUT   this rank's send buffer, chunk `index` of the current window;
 *   OUTPUT  a rank's receive buffer, chunk `index` of the current window;
 *   SCRATCH a rank's scratch, slot `index` (one slot holds one chunk);
 *   SEM     a semaphore (SIGNAL and WAIT only), index `index`.
 * `chan` is BRD_IR_CHAN_LOCAL for this rank's own buffer, or an index into
 * the rank's channel table for the peer at the other end. OUTPUT,
 * SCRATCH and SEM are reachable through a channel; INPUT only in plans
 * flagged BRD_IR_PLAN_F_PEER_INPUT, and only as a source (a peer's send
 * buffer, read in place: the runtime runs such plans only where every
 * rank's send buffer is registered and mapped by its peers).
 *
 * Segments. A send or receive buffer may hold several segments of `count`
 * elements each (all-gather output, reduce-scatter input, all-to-all, the
 * root's gather output and scatter input), or several separate buffers
 * (the sends and receives of a point-to-point group). An INPUT or OUTPUT
 * index is then seg * nchunks + chunk: chunk `chunk` of the window within
 * segment `seg`. Segment 0 is the whole buffer of a one-segment
 * collective, so plans that never name a segment keep their meaning. The
 * executor places segment s at element s * stride of the buffer (stride
 * given per launch, the count by default) or, for point-to-point, in the
 * segment's own buffer with its own count; a segment's window and chunks
 * are laid out like the buffer's (brd_plan_layout_seg_chunk).
 *
 * Sequence numbers. Semaphores and LL flags never reset. Each launch gets a
 * 64-bit `epoch` (strictly larger than every sequence number used by earlier
 * launches, see brd_plan_epoch_reserve) and, in iteration `it`, the value
 * an op names with `k` is   seq(it, k) = epoch + it * seq_per_iter + k.
 *   SIGNAL stores seq(it, k) into the peer's semaphore (release).
 *   WAIT   waits until its semaphore holds at least seq(it, k) (acquire);
 *          when it * seq_per_iter + k <= 0 the wait names a point before
 *          this launch and completes at once (k may be <= 0 to name an
 *          earlier iteration, as credit waits for slot reuse do).
 *   LL     a packet is 8 bytes: 4 data bytes, then the 4-byte flag
 *          (uint32_t)seq(it, k); a reader spins on the flag of each packet,
 *          so data and flag arrive in one 8-byte store and need no fence.
 * Semaphores live per channel: each rank has, for every channel, an array of
 * `nsems` inbound semaphores written only by that channel's peer, so every
 * semaphore has one writer for the life of a communicator and its values
 * only grow.
 *
 * Scratch phases. A rank's scratch holds two halves; the launch's `phase`
 * (0 or 1, alternating per launch, the same on every rank) picks the half.
 * A rank may therefore run one launch ahead of a peer without touching the
 * half that peer still reads. It cannot get two launches ahead as long as
 * no rank finishes a launch before every other rank has started it: every
 * plan with phases ends each rank's part only after an op that depends on
 * an op of every other rank in the launch (in an all-reduce the output does;
 * rooted and one-to-all collectives add acknowledgements). The verifier
 * checks this for every plan, whatever the collective, because the launch
 * after it may be any other collective.
 *
 * One-phase plans (BRD_IR_PLAN_F_ONE_PHASE, point-to-point) ignore the
 * launch's phase: scratch is one area, and a rank finishes only once every
 * rank it wrote to has read everything it wrote there, so the next launch
 * can reuse the slots at once. Their semaphores may run on per-channel
 * epochs (a pair of ranks counts its own sequence numbers), given per
 * launch to the executor.
 */
#ifndef BRD_DEVICE_IR_H
#define BRD_DEVICE_IR_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define BRD_IR_STATIC_ASSERT(cond, msg) static_assert(cond, msg)
#else
#define BRD_IR_STATIC_ASSERT(cond, msg) _Static_assert(cond, msg)
#endif

#if defined(__CUDACC__)
#define BRD_IR_HD __host__ __device__
#else
#define BRD_IR_HD
#endif

#define BRD_IR_MAGIC 0x44524942u /* "BIRD" in little-endian bytes */
#define BRD_IR_VERSION 1u

/* Protocols. LL128 is reserved for a later CUDA executor. */
enum {
  BRD_IR_PROTO_SIMPLE = 0,
  BRD_IR_PROTO_LL = 1,
  BRD_IR_PROTO_LL128 = 2,
};

/* Algorithm families (informational: the executor never branches on it). */
enum {
  BRD_IR_ALGO_COPY = 0, /* one rank: input to output */
  BRD_IR_ALGO_RING = 1,
  BRD_IR_ALGO_TREE = 2,
  BRD_IR_ALGO_ONESHOT = 3,
  BRD_IR_ALGO_TWOSHOT = 4,
  BRD_IR_ALGO_NVLS = 5, /* switch channels (NVLS multicast) */
};

/* Collectives (the verifier's expectation; executors never branch on it). */
enum {
  BRD_IR_COLL_ALLREDUCE = 0,
  BRD_IR_COLL_ALLGATHER = 1,     /* output: nranks segments, seg q = q's input */
  BRD_IR_COLL_REDUCESCATTER = 2, /* input: nranks segments, output = reduced seg r */
  BRD_IR_COLL_BROADCAST = 3,     /* output = root's input; others' input unused */
  BRD_IR_COLL_REDUCE = 4,        /* root's output = reduction; others' output unused */
  BRD_IR_COLL_ALLTOALL = 5,      /* output seg q of r = input seg r of q */
  BRD_IR_COLL_GATHER = 6,        /* root's output seg q = q's input */
  BRD_IR_COLL_SCATTER = 7,       /* output of q = root's input seg q */
  BRD_IR_COLL_SENDRECV = 8,      /* point-to-point: segments are separate buffers */
  BRD_IR_COLL_COUNT = 9,
};

/* What each collective means for its buffers: the one statement of these
 * rules, used by the argument checks, the works builder, the verifier and
 * both executors. "Segments" count `count`-element pieces: an all-gather's
 * output holds nranks of them. A *_root_only buffer exists on the root
 * alone (elsewhere it is unused and may be NULL). SENDRECV has neither
 * input nor output segments here: its buffers are the works' own. */
typedef struct {
  uint8_t rooted;           /* the call names a root */
  uint8_t reduction;        /* combines values with a reduction operator */
  uint8_t in_segs_all;      /* 1: input holds nranks segments; 0: one */
  uint8_t out_segs_all;     /* 1: output holds nranks segments; 0: one */
  uint8_t input_root_only;  /* input read on the root only */
  uint8_t output_root_only; /* output written on the root only */
  uint8_t has_io;           /* 0 for SENDRECV (and unknown codes) */
} brd_ir_coll_traits_t;

static inline BRD_IR_HD brd_ir_coll_traits_t brd_ir_coll_traits(unsigned coll) {
  brd_ir_coll_traits_t t = {0, 0, 0, 0, 0, 0, 1};
  switch (coll) {
  case BRD_IR_COLL_ALLREDUCE: t.reduction = 1; break;
  case BRD_IR_COLL_ALLGATHER: t.out_segs_all = 1; break;
  case BRD_IR_COLL_REDUCESCATTER: t.reduction = 1; t.in_segs_all = 1; break;
  case BRD_IR_COLL_BROADCAST: t.rooted = 1; t.input_root_only = 1; break;
  case BRD_IR_COLL_REDUCE: t.rooted = 1; t.reduction = 1; t.output_root_only = 1; break;
  case BRD_IR_COLL_ALLTOALL: t.in_segs_all = 1; t.out_segs_all = 1; break;
  case BRD_IR_COLL_GATHER: t.rooted = 1; t.out_segs_all = 1; t.output_root_only = 1; break;
  case BRD_IR_COLL_SCATTER: t.rooted = 1; t.in_segs_all = 1; t.input_root_only = 1; break;
  default: t.has_io = 0; break;
  }
  return t;
}

/* Does `rank` read an input / write an output in collective `coll`? */
static inline BRD_IR_HD int brd_ir_coll_has_input(unsigned coll, int rank, int root) {
  brd_ir_coll_traits_t t = brd_ir_coll_traits(coll);
  return t.has_io && (!t.input_root_only || rank == root);
}
static inline BRD_IR_HD int brd_ir_coll_has_output(unsigned coll, int rank, int root) {
  brd_ir_coll_traits_t t = brd_ir_coll_traits(coll);
  return t.has_io && (!t.output_root_only || rank == root);
}

/* Plan flags (brd_ir_plan_t.flags). */
#define BRD_IR_PLAN_F_FIXED 0x01u     /* chunks never spread: see brd_plan_layout_chunk */
#define BRD_IR_PLAN_F_ONE_PHASE 0x02u /* scratch has one area; phase ignored */
#define BRD_IR_PLAN_F_PEER_INPUT 0x04u /* reads peers' inputs through channels */
/* One-sided (ncclPutSignal / ncclSignal / ncclWaitSignal, algos/rma.c):
 * outputs are registered windows that outlive launches and whose users
 * order their own uses, so a rank may write a peer's output before it
 * synchronised with that peer; each rank's part runs as a launch of its
 * own (the writer's put and signal, the reader's wait), and the plan as
 * a whole is the protocol the verifier checks. */
#define BRD_IR_PLAN_F_ONE_SIDED 0x08u
#define BRD_IR_PLAN_F_ALL 0x0fu

/* Output exchange: before a launch's ops, a rank whose output may be the
 * user's registered buffer publishes, in a slot of each channel peer's
 * window, where that peer should write its output for this launch, and
 * reads its peers' slots in its own window. A slot is BRD_IR_XCHG_WORDS
 * 64-bit words: [0] the tag (the launch's epoch + 1; 0 while being
 * written), [1] the output as the peer maps it (0: the staging, whose
 * address the peer knows), [2] elements between its output segments.
 * A launch exchanges over at most BRD_IR_XCHG_MAX_CHANS channels. */
#define BRD_IR_XCHG_WORDS 4u
#define BRD_IR_XCHG_MAX_CHANS 32u

/* Operations. Every data op processes chunks chunk .. chunk+nchunks-1; for
 * chunk t of that range each scratch ref addresses slot index+t and each
 * input/output ref chunk index+t. The element count of chunk t is that of
 * the op's own chunk, so input/output refs name the op's chunk (in any
 * segment: index % nchunks == chunk). With point-to-point segments of
 * their own counts, the count is that of the segment the op's first
 * input or output ref names; an op's input/output refs then name segments
 * of equal length. */
enum {
  BRD_IR_OP_NOP = 0,
  /* One local source to local destinations. */
  BRD_IR_OP_COPY = 1,
  /* Reduce-copy: sources (>= 1, local or remote) combined with the
   * communicator's reduction, the result stored to every destination
   * (local or remote). */
  BRD_IR_OP_REDUCE = 2,
  /* One local source to remote destinations over memory channels. */
  BRD_IR_OP_PUT = 3,
  /* One remote source to local destinations. */
  BRD_IR_OP_GET = 4,
  /* One plain local source to LL destinations (scratch, local or remote). */
  BRD_IR_OP_PKT_PUT = 5,
  /* Sources may be LL packets in local scratch (flag seq(it, k_src)) or
   * plain buffers; destinations plain or LL (flag seq(it, k)). */
  BRD_IR_OP_PKT_REDUCE = 6,
  /* ref[0] = {SEM, chan, index}: store seq(it, k) to the peer's inbound
   * semaphore `index` of this channel, after every earlier op's writes. */
  BRD_IR_OP_SIGNAL = 7,
  /* ref[0] = {SEM, chan, index}: wait for own inbound semaphore `index` of
   * channel `chan` to reach seq(it, k). */
  BRD_IR_OP_WAIT = 8,
  /* Every block of this rank reaches its n-th barrier before any leaves. */
  BRD_IR_OP_BARRIER = 9,
  /* Reserved for port channels (records land in order; no plan needs it
   * yet); the verifier and executors reject it. */
  BRD_IR_OP_FLUSH = 10,
  /* Switch-channel ops (NVLS multicast; see "Switch channels" below). No
   * LL refs; nchunks and chunk as for data ops.
   * MC_REDUCE (ld_reduce): ref[0] = {SCRATCH, switch chan, slot}, nsrc 1:
   *   the reduction, with the communicator's operator, of that slot in
   *   every member's copy (member order is rank order). Destinations
   *   (ndst >= 1): local refs (any buffer a local write reaches) and/or
   *   {SCRATCH, switch chan, slot} refs, each stored to every member's
   *   copy (multimem st). BRD_IR_F_POSTOP applies the post-op once. */
  BRD_IR_OP_MC_REDUCE = 11,
  /* MC_STORE (st): ref[0] = one local source (input, output or scratch);
   *   destinations {SCRATCH, switch chan, slot}, each written in every
   *   member's copy. */
  BRD_IR_OP_MC_STORE = 12,
  /* MC_RED (red): ref[0] = one local source; destinations {SCRATCH,
   *   switch chan, slot}: every member's copy becomes copy (op) source,
   *   element by element and atomically, so reds of several ranks into
   *   one slot between two barriers combine in any order. Sum, min and
   *   max only (no post-op). */
  BRD_IR_OP_MC_RED = 13,
  /* MC_BARRIER: ref[0] = {SEM, switch chan, index}, its one destination
   *   (nsrc 0, ndst 1, as SIGNAL), k >= 1: store seq(it, k) into
   *   this rank's word of switch semaphore `index` in every member's copy
   *   (release, after every earlier op's writes, multicast writes
   *   included), then wait until this rank's own copy holds at least
   *   seq(it, k) in every member's word (acquire). */
  BRD_IR_OP_MC_BARRIER = 14,
  BRD_IR_OP_COUNT = 15,
};

/* Op classes, the one statement of which code does what kind of work:
 * data ops (COPY .. PKT_REDUCE) move chunks between references, ref[0 ..
 * nsrc) read and ref[nsrc .. nsrc + ndst) written; sync ops (SIGNAL,
 * WAIT) name one semaphore in ref[0]; NOP and BARRIER name nothing. The
 * executors run these classes and reject FLUSH; the switch ops (MC_*) run
 * where the executor has switch channels (the host executor; the CUDA
 * executor rejects them until it maps multicast objects). */
static inline BRD_IR_HD int brd_ir_op_is_data(unsigned code) {
  return code >= BRD_IR_OP_COPY && code <= BRD_IR_OP_PKT_REDUCE;
}
static inline BRD_IR_HD int brd_ir_op_is_sync(unsigned code) {
  return code == BRD_IR_OP_SIGNAL || code == BRD_IR_OP_WAIT;
}
/* Switch-channel ops (MC_REDUCE .. MC_BARRIER). MC_REDUCE, MC_STORE and
 * MC_RED move chunks like data ops (refs as above); MC_BARRIER names one
 * switch semaphore in ref[0]. */
static inline BRD_IR_HD int brd_ir_op_is_switch(unsigned code) {
  return code >= BRD_IR_OP_MC_REDUCE && code <= BRD_IR_OP_MC_BARRIER;
}
/* Ops every executor runs on every channel (switch ops need a switch
 * channel and are tested apart). */
static inline BRD_IR_HD int brd_ir_op_is_runnable(unsigned code) {
  return code == BRD_IR_OP_NOP || code == BRD_IR_OP_BARRIER ||
         brd_ir_op_is_sync(code) || brd_ir_op_is_data(code);
}

/* Buffer kinds (low 7 bits of brd_ir_ref_t.buf). */
enum {
  BRD_IR_BUF_INPUT = 0,
  BRD_IR_BUF_OUTPUT = 1,
  BRD_IR_BUF_SCRATCH = 2,
  BRD_IR_BUF_SEM = 3,
};
#define BRD_IR_BUF_MASK 0x7fu
#define BRD_IR_REF_LL 0x80u     /* scratch slot holds LL packets */
#define BRD_IR_CHAN_LOCAL 0xffu /* this rank's own buffer */

/* Does reference buffer `buf` name an input or output chunk (rather than
 * a scratch slot or a semaphore)? */
static inline BRD_IR_HD int brd_ir_buf_is_io(uint8_t buf) {
  unsigned kind = buf & BRD_IR_BUF_MASK;
  return kind == BRD_IR_BUF_INPUT || kind == BRD_IR_BUF_OUTPUT;
}

/* Channel types: how the peer's memory is reached. */
enum {
  BRD_IR_CHAN_MEMORY = 0, /* load/store (NVLink/PCIe P2P, host shm) */
  BRD_IR_CHAN_PORT = 1,   /* puts go through a proxy FIFO */
  BRD_IR_CHAN_SWITCH = 2, /* NVLS multicast object: every rank's copy */
};
#define BRD_IR_SWITCH_PEER (-1) /* brd_ir_chan_t.peer of a switch channel */

/* Switch channels. A switch channel (type BRD_IR_CHAN_SWITCH, peer
 * BRD_IR_SWITCH_PEER, at most one per rank) reaches one location in
 * every member's window at once: its members are the plan's ranks whose
 * switch channel has the same group, in rank order (member m is the m-th
 * such rank), and every rank of the plan has one. Group 0 on every rank
 * (what every single-node plan has) makes every rank a member; plans
 * across nodes give each node's ranks a group of their own (one switch,
 * one multicast object per node; algos/nvls_hier.c). Through it an op
 * names SCRATCH slots (the same slot of every member's scratch, in the
 * launch's phase) and, in MC_BARRIER only, SEM: switch semaphore `index`,
 * which in every rank's window is nranks 64-bit words (word m written
 * only by member m, values only grow; nsems of them). On a GPU the channel is a
 * multicast mapping of the window; the host executor and the CUDA
 * simulator address every member's copy instead. Plans with a switch
 * channel use the SIMPLE protocol and the operators the NVLS rules allow
 * (sum on every type but 8-bit ones; min/max on 32- and 64-bit integers,
 * f16, bf16);
 * the runtime asks the eligibility rule (brd_algos_nvls_supported) before
 * choosing one.
 *
 * Zero-copy switch plans (flagged BRD_IR_PLAN_F_PEER_INPUT): the switch
 * channel also reaches the members' own buffers, as multicast mappings of
 * windows that hold every rank's send and receive buffer at the same
 * offsets. An MC_REDUCE source may then be {INPUT, switch chan, chunk}
 * (that chunk of every member's input) and an MC_STORE or MC_REDUCE
 * destination {OUTPUT, switch chan, chunk} (every member's output); the
 * chunk and segment rules are those of local input/output refs, with the
 * launch's count and strides on every member. The runtime runs them only
 * where every such chunk is 16-byte aligned and a multiple of 16 bytes
 * (multimem moves whole packs). The verifier accepts these references
 * only in such plans and expands each to every member's chunk. */

/* Op flags. */
#define BRD_IR_F_POSTOP 0x01u /* apply the reduction's post-op to the result */

#define BRD_IR_MAX_REFS 12

typedef struct brd_ir_ref {
  uint8_t buf;    /* BRD_IR_BUF_* | BRD_IR_REF_LL */
  uint8_t chan;   /* BRD_IR_CHAN_LOCAL or channel index */
  uint16_t index; /* chunk (input/output), slot (scratch), semaphore */
} brd_ir_ref_t;

typedef struct brd_ir_op {
  uint8_t code;     /* BRD_IR_OP_* */
  uint8_t flags;    /* BRD_IR_F_* */
  uint8_t nsrc;     /* ref[0 .. nsrc) are sources */
  uint8_t ndst;     /* ref[nsrc .. nsrc+ndst) are destinations */
  uint16_t chunk;   /* first chunk of the window this op moves */
  uint16_t nchunks; /* consecutive chunks (and slots) it moves */
  int32_t k;        /* SIGNAL/WAIT target, flag of LL destinations */
  int32_t k_src;    /* flag of LL sources */
  brd_ir_ref_t ref[BRD_IR_MAX_REFS];
} brd_ir_op_t;

typedef struct brd_ir_rank {
  uint32_t chan_first; /* index of this rank's first channel */
  uint32_t nchans;
} brd_ir_rank_t;

typedef struct brd_ir_block {
  uint32_t op_first; /* index of this block's first op */
  uint32_t nops;
} brd_ir_block_t;

typedef struct brd_ir_chan {
  int32_t peer;   /* rank at the other end */
  uint8_t type;   /* BRD_IR_CHAN_* */
  uint8_t group;  /* switch channels: the switch group (see "Switch
                   * channels"); 0 in every other channel */
  uint8_t pad[2];
} brd_ir_chan_t;

typedef struct brd_ir_plan {
  uint32_t magic;        /* BRD_IR_MAGIC */
  uint16_t version;      /* BRD_IR_VERSION */
  uint8_t proto;         /* BRD_IR_PROTO_*: which buffer size sets slots */
  uint8_t algo;          /* BRD_IR_ALGO_* */
  uint32_t total_bytes;  /* size of the whole blob */
  uint16_t nranks;
  uint16_t nblocks;      /* blocks per rank */
  uint32_t nchunks;      /* chunks per iteration window */
  uint32_t nslots;       /* scratch slots per rank and phase */
  uint32_t slot_div;     /* slots sharing one NCCL_BUFFSIZE (or LL) buffer */
  uint32_t nsems;        /* inbound semaphores per channel */
  uint32_t seq_per_iter; /* sequence numbers one iteration may use (>= 1) */
  uint32_t nchans;       /* entries in the channel table */
  uint32_t nops;         /* entries in the op array */
  uint32_t rank_off;     /* byte offsets from the blob's first byte */
  uint32_t block_off;
  uint32_t chan_off;
  uint32_t op_off;
  uint8_t coll;          /* BRD_IR_COLL_* */
  uint8_t flags;         /* BRD_IR_PLAN_F_*; 0: chunks spread, two phases */
  uint16_t root;         /* rooted collectives: the root rank; else 0 */
} brd_ir_plan_t;

BRD_IR_STATIC_ASSERT(sizeof(brd_ir_ref_t) == 4, "brd_ir_ref_t is 4 bytes");
BRD_IR_STATIC_ASSERT(sizeof(brd_ir_op_t) == 64, "brd_ir_op_t is 64 bytes");
BRD_IR_STATIC_ASSERT(offsetof(brd_ir_op_t, ref) == 16,
                     "op header is 16 bytes");
BRD_IR_STATIC_ASSERT(sizeof(brd_ir_rank_t) == 8, "brd_ir_rank_t is 8 bytes");
BRD_IR_STATIC_ASSERT(sizeof(brd_ir_block_t) == 8, "brd_ir_block_t is 8 bytes");
BRD_IR_STATIC_ASSERT(sizeof(brd_ir_chan_t) == 8, "brd_ir_chan_t is 8 bytes");
BRD_IR_STATIC_ASSERT(sizeof(brd_ir_plan_t) == 64, "brd_ir_plan_t is 64 bytes");

/* Accessors: a blob is read in place, on the host or on the device. */
static inline BRD_IR_HD const brd_ir_rank_t *
brd_ir_plan_rank(const brd_ir_plan_t *p, int rank) {
  return (const brd_ir_rank_t *)((const char *)p + p->rank_off) + rank;
}

static inline BRD_IR_HD const brd_ir_block_t *
brd_ir_plan_block(const brd_ir_plan_t *p, int rank, int block) {
  return (const brd_ir_block_t *)((const char *)p + p->block_off) +
         (size_t)rank * p->nblocks + block;
}

static inline BRD_IR_HD const brd_ir_chan_t *
brd_ir_plan_chan(const brd_ir_plan_t *p, int rank, int chan) {
  return (const brd_ir_chan_t *)((const char *)p + p->chan_off) +
         brd_ir_plan_rank(p, rank)->chan_first + chan;
}

static inline BRD_IR_HD const brd_ir_op_t *
brd_ir_plan_ops(const brd_ir_plan_t *p, int rank, int block) {
  return (const brd_ir_op_t *)((const char *)p + p->op_off) +
         brd_ir_plan_block(p, rank, block)->op_first;
}

/* Rank's switch channel (its index in rank's table), or -1 without one. */
static inline BRD_IR_HD int brd_ir_switch_chan(const brd_ir_plan_t *p, int rank) {
  for (uint32_t c = 0; c < brd_ir_plan_rank(p, rank)->nchans; c++)
    if (brd_ir_plan_chan(p, rank, (int)c)->type == BRD_IR_CHAN_SWITCH) return (int)c;
  return -1;
}

/* The members of rank's switch group ("Switch channels" above): writes
 * their count to *nmembers_out and returns rank's member index; -1 (and
 * 0 members) when rank has no switch channel. O(nranks x channels): the
 * runtime asks once per launch, not per op. */
static inline BRD_IR_HD int brd_ir_switch_member(const brd_ir_plan_t *p, int rank,
                                                 int *nmembers_out) {
  int own = brd_ir_switch_chan(p, rank), self = -1, n = 0;
  *nmembers_out = 0;
  if (own < 0) return -1;
  uint8_t g = brd_ir_plan_chan(p, rank, own)->group;
  for (int r = 0; r < (int)p->nranks; r++) {
    int c = brd_ir_switch_chan(p, r);
    if (c < 0 || brd_ir_plan_chan(p, r, c)->group != g) continue;
    if (r == rank) self = n;
    n++;
  }
  *nmembers_out = n;
  return self;
}

/* The rank of member m of rank's switch group (m itself when rank has no
 * switch channel or the group has fewer members). */
static inline BRD_IR_HD int brd_ir_switch_member_rank(const brd_ir_plan_t *p, int rank,
                                                      int m) {
  int own = brd_ir_switch_chan(p, rank);
  if (own < 0) return m;
  uint8_t g = brd_ir_plan_chan(p, rank, own)->group;
  for (int r = 0, i = 0; r < (int)p->nranks; r++) {
    int c = brd_ir_switch_chan(p, r);
    if (c < 0 || brd_ir_plan_chan(p, r, c)->group != g) continue;
    if (i++ == m) return r;
  }
  return m;
}

#endif /* BRD_DEVICE_IR_H */
