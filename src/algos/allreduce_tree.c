/*
 * Double binary tree all-reduce (NCCL's trees), Simple and LL.
 *
 * Algorithm: two binary trees over the rank positions, built so that most
 * ranks are a leaf in one tree and an inner node in the other; each takes
 * half of every block's chunks. Per chunk, partial sums flow up (each node
 * adds its children's partials to its input and passes the sum to its
 * parent), then the root's result flows down, in O(log n) steps.
 *
 * Memory ordering: Simple sends partials into a slot of the parent's scratch
 * and signals the parent's up semaphore (release/acquire); on the way down
 * a parent writes the result straight into each child's output and signals
 * the child's down semaphore. LL sends both directions as packets into
 * scratch slots, flags replacing semaphores. No credits are needed: a child
 * reuses an up slot only in its next iteration, after it has received the
 * down data of the same chunk, which its parent sends after consuming the
 * slot; a parent rewrites a child's LL down slot only after that child's
 * next up data, sent after it consumed the down slot.
 *
 * Blocks: each block handles TREE_CHUNKS chunks per window, alternating
 * between the two trees, so either tree carries half the data whatever
 * the block count and a block pipelines its chunks through both trees.
 */
#include "base/check.h"
#include "algos/algos.h"

#define TREE_CHUNKS 4 /* chunks per block and window; even */

/* Tree 0: NCCL's binary tree rooted at position 0. Within a subtree the
 * node's lowest set bit gives its level; children sit half that bit below
 * and above it, the upper one pulled down while it falls outside n. */
static void btree_children(int n, int x, int child[2]) {
  child[0] = child[1] = -1;
  if (n <= 1) return;
  int bit = 1;
  if (x == 0) {
    while (bit < n) bit <<= 1;
    child[0] = bit >> 1; /* the root has a single child */
    return;
  }
  while (!(x & bit)) bit <<= 1;
  int low = bit >> 1;
  if (low == 0) return;
  child[0] = x - low;
  while (low > 0 && x + low >= n) low >>= 1;
  if (low > 0) child[1] = x + low;
}

static int btree_parent(int n, int x) {
  if (x == 0) return -1;
  int bit = 1;
  while (!(x & bit)) bit <<= 1;
  int up = (x ^ bit) | (bit << 1);
  return up < n ? up : (x ^ bit);
}

/* See algos.h. */
void brd_algos_tree_links(int n, int tree, int pos, int *parent_out,
                          int children_out[2]) {
  if (tree == 0) {
    *parent_out = btree_parent(n, pos);
    btree_children(n, pos, children_out);
    return;
  }
  int q, parent, child[2];
  if (n % 2 == 1) { /* shift by one */
    q = (pos - 1 + n) % n;
    parent = btree_parent(n, q);
    btree_children(n, q, child);
    *parent_out = parent < 0 ? -1 : (parent + 1) % n;
    for (int i = 0; i < 2; i++)
      children_out[i] = child[i] < 0 ? -1 : (child[i] + 1) % n;
  } else { /* mirror */
    q = n - 1 - pos;
    parent = btree_parent(n, q);
    btree_children(n, q, child);
    *parent_out = parent < 0 ? -1 : n - 1 - parent;
    for (int i = 0; i < 2; i++)
      children_out[i] = child[i] < 0 ? -1 : n - 1 - child[i];
  }
}

typedef struct tree_ctx {
  brd_plan_builder_t *b;
  const brd_algos_args_t *a;
  int n, ll;
} tree_ctx_t;

/* Simple: slots (chunk, child) hold up partials. LL: (chunk, 0..1) up,
 * (chunk, 2) down. */
static uint32_t tree_slot(const tree_ctx_t *c, int blk, int j, int which) {
  int per = c->ll ? 3 : 2;
  return (uint32_t)((blk * TREE_CHUNKS + j) * per + which);
}

/* Semaphores (Simple): one up and one down per (block, tree). */
static uint32_t tree_sem(int blk, int tree, int down) {
  return (uint32_t)((blk * 2 + tree) * 2 + down);
}

typedef struct tree_node {
  int rank, parent, child[2], nchild, my_index; /* ranks; index at parent */
} tree_node_t;

static void tree_node(const tree_ctx_t *c, int tree, int pos, tree_node_t *t) {
  int parent, child[2];
  brd_algos_tree_links(c->n, tree, pos, &parent, child);
  t->rank = brd_algos_rank_at(c->a, pos);
  t->parent = parent < 0 ? -1 : brd_algos_rank_at(c->a, parent);
  t->nchild = 0;
  t->my_index = 0;
  for (int i = 0; i < 2; i++) {
    t->child[i] = child[i] < 0 ? -1 : brd_algos_rank_at(c->a, child[i]);
    if (child[i] >= 0) t->nchild++;
  }
  if (parent >= 0) {
    int pp, pc[2];
    brd_algos_tree_links(c->n, tree, parent, &pp, pc);
    t->my_index = pc[0] == pos ? 0 : 1;
  }
}

static ncclResult_t tree_up(const tree_ctx_t *c, int pos, int blk, int j) {
  int tree = j % 2;
  int32_t k = j / 2 + 1; /* this chunk's ordinal in its tree */
  uint32_t chunk = (uint32_t)(blk * TREE_CHUNKS + j);
  uint8_t ll = c->ll ? BRD_IR_REF_LL : 0;
  tree_node_t t;
  tree_node(c, tree, pos, &t);
  brd_plan_ref_t src[3], dst;
  int nsrc = 0;
  src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  for (int i = 0; i < 2; i++) {
    if (t.child[i] < 0) continue;
    if (!c->ll)
      CHECK(brd_plan_op_sync(c->b, t.rank, blk, BRD_IR_OP_WAIT, t.child[i],
                             tree_sem(blk, tree, 0), k));
    src[nsrc++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, -1, tree_slot(c, blk, j, i));
  }
  uint8_t flags = 0, code;
  if (t.parent < 0) {
    dst = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    flags = BRD_IR_F_POSTOP;
    code = c->ll ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_REDUCE;
  } else {
    dst = brd_plan_ref(BRD_IR_BUF_SCRATCH | ll, t.parent,
                       tree_slot(c, blk, j, t.my_index));
    if (c->ll) code = t.nchild ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_PKT_PUT;
    else code = t.nchild ? BRD_IR_OP_REDUCE : BRD_IR_OP_PUT;
  }
  CHECK(brd_algos_move(c->b, t.rank, blk, code, flags, chunk, 1, 1, nsrc, src,
                       1, &dst));
  if (t.parent >= 0 && !c->ll)
    CHECK(brd_plan_op_sync(c->b, t.rank, blk, BRD_IR_OP_SIGNAL, t.parent,
                           tree_sem(blk, tree, 0), k));
  return ncclSuccess;
}

static ncclResult_t tree_down(const tree_ctx_t *c, int pos, int blk, int j) {
  int tree = j % 2;
  int32_t k = j / 2 + 1;
  uint32_t chunk = (uint32_t)(blk * TREE_CHUNKS + j);
  tree_node_t t;
  tree_node(c, tree, pos, &t);
  brd_plan_ref_t src, dst[3];
  int ndst = 0;
  if (c->ll) {
    /* Non-root: unpack the parent's packets into the output and repack
     * them for the children in the same pass. Root: pack the output. */
    if (t.parent >= 0) {
      src = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1,
                         tree_slot(c, blk, j, 2));
      dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    } else {
      src = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    }
    for (int i = 0; i < 2; i++) {
      if (t.child[i] >= 0)
        dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL,
                                   t.child[i], tree_slot(c, blk, j, 2));
    }
    if (ndst == 0) return ncclSuccess;
    return brd_algos_move(c->b, t.rank, blk,
                          t.parent >= 0 ? BRD_IR_OP_PKT_REDUCE : BRD_IR_OP_PKT_PUT,
                          0, chunk, 1, 1, 1, &src, ndst, dst);
  }
  if (t.parent >= 0)
    CHECK(brd_plan_op_sync(c->b, t.rank, blk, BRD_IR_OP_WAIT, t.parent,
                           tree_sem(blk, tree, 1), k));
  if (t.nchild == 0) return ncclSuccess;
  src = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
  for (int i = 0; i < 2; i++) {
    if (t.child[i] >= 0)
      dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, t.child[i], chunk);
  }
  CHECK(brd_algos_move(c->b, t.rank, blk, BRD_IR_OP_PUT, 0, chunk, 0, 0, 1,
                       &src, ndst, dst));
  for (int i = 0; i < 2; i++) {
    if (t.child[i] >= 0)
      CHECK(brd_plan_op_sync(c->b, t.rank, blk, BRD_IR_OP_SIGNAL, t.child[i],
                             tree_sem(blk, tree, 1), k));
  }
  return ncclSuccess;
}

/* Every chunk of position pos's block: up both trees, then down. */
static ncclResult_t tree_block(brd_plan_builder_t *b, const brd_algos_args_t *a,
                               int pos, int blk, brd_plan_ref_t *refs, const void *ctx) {
  (void)refs;
  (void)ctx;
  tree_ctx_t c = {.b = b, .a = a, .n = a->nranks, .ll = a->proto == BRD_IR_PROTO_LL};
  for (int j = 0; j < TREE_CHUNKS; j++) CHECK(tree_up(&c, pos, blk, j));
  for (int j = 0; j < TREE_CHUNKS; j++) CHECK(tree_down(&c, pos, blk, j));
  return ncclSuccess;
}

/* See algos.h. */
ncclResult_t brd_algos_tree_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "tree all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TREE, 0, plan_out);

  int ll = args->proto == BRD_IR_PROTO_LL, per = ll ? 3 : 2;
  size_t nchunks = (size_t)args->nblocks * TREE_CHUNKS;
  if (nchunks * per > 65535) {
    WARN("tree all-reduce: %d blocks need more than 65535 chunks or slots",
         args->nblocks);
    return ncclInvalidArgument;
  }
  brd_plan_shape_t shape = {
      .nranks = args->nranks, .nblocks = args->nblocks, .nchunks = (uint32_t)nchunks,
      .nslots = (uint32_t)(nchunks * per),
      .slot_div = (uint32_t)(TREE_CHUNKS * per),
      .nsems = ll ? 0 : 4u * (uint32_t)args->nblocks,
      .seq_per_iter = ll ? 1 : TREE_CHUNKS / 2, .proto = (uint8_t)args->proto,
      .algo = BRD_IR_ALGO_TREE, .coll = BRD_IR_COLL_ALLREDUCE};
  return brd_algos_build(&shape, args, tree_block, NULL, "a tree all-reduce", plan_out);
}
