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
 *
 * Across nodes (args->host naming two or more), NCCL's shape: the double
 * binary tree links the nodes, and inside each node the ranks form a chain
 * hanging from the node's head. Tree 0's head is the node's first rank,
 * tree 1's its last, with the chain reversed, so the two trees leave a
 * node through different ranks (and so different NICs). A head has up to
 * three children (the chain's next rank and two nodes' heads); every
 * other rank one. Only head-to-head edges cross nodes: 2 per node and
 * tree at most, against the flat tree's edges between arbitrary ranks.
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

#define TREE_MAXC 3 /* children of a node head across nodes */

typedef struct tree_ctx {
  brd_plan_builder_t *b;
  const brd_algos_args_t *a;
  const brd_algos_nodes_t *nd; /* NULL: one node, the flat double tree */
  int n, ll;
  int maxc;                    /* most children of a rank: 2 flat, 3 across nodes */
} tree_ctx_t;

/* Simple: slots (chunk, child) hold up partials. LL: (chunk, 0..maxc-1)
 * up, (chunk, maxc) down. */
static uint32_t tree_slot(const tree_ctx_t *c, int blk, int j, int which) {
  int per = c->maxc + c->ll;
  return (uint32_t)((blk * TREE_CHUNKS + j) * per + which);
}

/* Semaphores (Simple): one up and one down per (block, tree). */
static uint32_t tree_sem(int blk, int tree, int down) {
  return (uint32_t)((blk * 2 + tree) * 2 + down);
}

typedef struct tree_node {
  int rank, parent, child[TREE_MAXC], nchild, my_index; /* ranks; index at parent */
} tree_node_t;

/* Rank at chain index ci of node m in tree `tree` (tree 1 runs the chain
 * backwards, so its head is the node's last rank). */
static int chain_rank(const brd_algos_nodes_t *nd, int tree, int m, int ci) {
  int cnt = nd->first[m + 1] - nd->first[m];
  return brd_algos_node_rank(nd, m, tree == 0 ? ci : cnt - 1 - ci);
}

/* The tree across nodes: see the top of the file. */
static void tree_node_nodes(const tree_ctx_t *c, int tree, int pos, tree_node_t *t) {
  const brd_algos_nodes_t *nd = c->nd;
  int rank = brd_algos_rank_at(c->a, pos), m = nd->node[rank];
  int cnt = nd->first[m + 1] - nd->first[m];
  int ci = tree == 0 ? nd->local[rank] : cnt - 1 - nd->local[rank];
  t->rank = rank;
  t->parent = -1;
  t->my_index = 0;
  for (int i = 0; i < TREE_MAXC; i++) t->child[i] = -1;
  t->child[0] = ci + 1 < cnt ? chain_rank(nd, tree, m, ci + 1) : -1;
  if (ci > 0) {
    t->parent = chain_rank(nd, tree, m, ci - 1); /* its chain child, index 0 */
  } else {
    int np, nc[2];
    brd_algos_tree_links(nd->nnodes, tree, m, &np, nc);
    for (int i = 0; i < 2; i++)
      t->child[1 + i] = nc[i] < 0 ? -1 : chain_rank(nd, tree, nc[i], 0);
    if (np >= 0) {
      int pp, pc[2];
      t->parent = chain_rank(nd, tree, np, 0);
      brd_algos_tree_links(nd->nnodes, tree, np, &pp, pc);
      t->my_index = pc[0] == m ? 1 : 2;
    }
  }
  t->nchild = 0;
  for (int i = 0; i < TREE_MAXC; i++) t->nchild += t->child[i] >= 0;
}

static void tree_node(const tree_ctx_t *c, int tree, int pos, tree_node_t *t) {
  if (c->nd != NULL) {
    tree_node_nodes(c, tree, pos, t);
    return;
  }
  int parent, child[2];
  brd_algos_tree_links(c->n, tree, pos, &parent, child);
  t->rank = brd_algos_rank_at(c->a, pos);
  t->parent = parent < 0 ? -1 : brd_algos_rank_at(c->a, parent);
  t->nchild = 0;
  t->my_index = 0;
  t->child[2] = -1;
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
  brd_plan_ref_t src[1 + TREE_MAXC], dst;
  int nsrc = 0;
  src[nsrc++] = brd_plan_ref(BRD_IR_BUF_INPUT, -1, chunk);
  for (int i = 0; i < TREE_MAXC; i++) {
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
  brd_plan_ref_t src, dst[1 + TREE_MAXC];
  int ndst = 0;
  if (c->ll) {
    /* Non-root: unpack the parent's packets into the output and repack
     * them for the children in the same pass. Root: pack the output. */
    if (t.parent >= 0) {
      src = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL, -1,
                         tree_slot(c, blk, j, c->maxc));
      dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    } else {
      src = brd_plan_ref(BRD_IR_BUF_OUTPUT, -1, chunk);
    }
    for (int i = 0; i < TREE_MAXC; i++) {
      if (t.child[i] >= 0)
        dst[ndst++] = brd_plan_ref(BRD_IR_BUF_SCRATCH | BRD_IR_REF_LL,
                                   t.child[i], tree_slot(c, blk, j, c->maxc));
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
  for (int i = 0; i < TREE_MAXC; i++) {
    if (t.child[i] >= 0)
      dst[ndst++] = brd_plan_ref(BRD_IR_BUF_OUTPUT, t.child[i], chunk);
  }
  CHECK(brd_algos_move(c->b, t.rank, blk, BRD_IR_OP_PUT, 0, chunk, 0, 0, 1,
                       &src, ndst, dst));
  for (int i = 0; i < TREE_MAXC; i++) {
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
  const brd_algos_nodes_t *nd = ctx;
  tree_ctx_t c = {.b = b, .a = a, .nd = nd, .n = a->nranks,
                  .ll = a->proto == BRD_IR_PROTO_LL, .maxc = nd != NULL ? TREE_MAXC : 2};
  for (int j = 0; j < TREE_CHUNKS; j++) CHECK(tree_up(&c, pos, blk, j));
  for (int j = 0; j < TREE_CHUNKS; j++) CHECK(tree_down(&c, pos, blk, j));
  return ncclSuccess;
}

/* The tree on layout nd (NULL: the flat double tree). */
static ncclResult_t tree_generate(const brd_algos_args_t *args, const brd_algos_nodes_t *nd,
                                  brd_ir_plan_t **plan_out) {
  int ll = args->proto == BRD_IR_PROTO_LL, per = (nd != NULL ? TREE_MAXC : 2) + ll;
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
  return brd_algos_build(&shape, args, tree_block, nd, "a tree all-reduce", plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_tree_allreduce(const brd_algos_args_t *args,
                                      brd_ir_plan_t **plan_out) {
  return brd_algos_tree_allreduce_hosts(args, NULL, plan_out);
}

/* See algos.h. */
ncclResult_t brd_algos_tree_allreduce_hosts(const brd_algos_args_t *args, const int *host,
                                            brd_ir_plan_t **plan_out) {
  CHECK(brd_algos_check(args, -1, "tree all-reduce"));
  if (args->nranks == 1)
    return brd_algos_single(args, BRD_IR_COLL_ALLREDUCE, BRD_IR_ALGO_TREE, 0, plan_out);
  if (host == NULL) return tree_generate(args, NULL, plan_out);
  brd_algos_nodes_t *nd = NULL;
  CHECK(brd_algos_nodes_create(args, host, &nd));
  ncclResult_t res = tree_generate(args, nd->nnodes > 1 ? nd : NULL, plan_out);
  brd_algos_nodes_destroy(nd);
  return res;
}
