/*
 * MSCCL++ execution plans (the JSON that the MSCCL++ DSL emits and its
 * executor runs) read as Braid plans: each GPU's thread blocks become the
 * rank's blocks, each op one or more IR ops (device/ir.h), chunk indexes
 * stay chunk indexes (MSCCL++ cuts a rank's buffers into chunks of one
 * size, the input over `input_chunks`; Braid cuts each segment of an
 * iteration window into as many, times R where pipelines, which are
 * unrolled, or thread-block groups need finer chunks) and scratch chunks
 * become scratch slots. All-reduce, all-gather, reduce-scatter and
 * all-to-all plans are translated. What Braid cannot express is refused
 * with a message naming the file, GPU, thread block, op index and op name.
 * docs/plans.md ("MSCCL++ execution plans") lists the ops translated and
 * refused, and how the plan's fields become the library's.
 */
#ifndef BRD_PLAN_MSCCLPP_H
#define BRD_PLAN_MSCCLPP_H

#include <stddef.h>

#include "nccl.h"
#include "device/ir.h"
#include "plan/plan_json.h"

/* 1 when the parsed document root looks like an MSCCL++ execution plan
 * (an object with a "gpus" array and a "collective" or
 * "num_threads_per_block" field, and no "format" field), else 0. Pure. */
int brd_plan_mscclpp_detect(const brd_json_t *root);

/* Translates the MSCCL++ plan root (detected as above) into a plan blob
 * the caller frees with brd_plan_destroy, and the library fields it
 * implies into *meta_out (may be NULL): min/max bytes from
 * min_message_size/max_message_size (an all-gather's, which MSCCL++
 * counts in output bytes, divided by the ranks), in place only or out of
 * place only from "inplace" (either for an all-to-all). `name` (the file)
 * starts every message. max_blocks > 0 folds the thread blocks onto at
 * most that many Braid blocks (consecutive thread blocks run one after
 * another in one block; plans with barriers are then refused); 0 keeps
 * one block per thread block. The verifier is
 * not run. On failure returns ncclInvalidArgument (a missing or malformed
 * field, an unknown op, a chunk out of range, an op Braid cannot express)
 * or ncclSystemError (out of memory), WARNs once and copies the message
 * into err[0 .. errlen) when err is not NULL. Writes the outputs only on
 * success. Any thread. */
ncclResult_t brd_plan_mscclpp_translate(const brd_json_t *root, const char *name,
                                        int max_blocks, brd_ir_plan_t **plan_out,
                                        brd_plan_json_meta_t *meta_out, char *err,
                                        size_t errlen);

/* Reads the file at path. When it is an MSCCL++ plan, translates it
 * (brd_plan_mscclpp_translate, max_blocks as there) and sets *is_mscclpp_out to 1; when it is
 * well-formed JSON of another kind, sets it to 0 and returns ncclSuccess
 * without a plan (the caller reads the file as a Braid plan). Malformed
 * JSON or an unreadable file: ncclInvalidArgument with a WARN naming the
 * file (and *is_mscclpp_out 1: nothing else should read it). Out of
 * memory: ncclSystemError. Writes *plan_out and *meta_out only when it
 * returns a plan. Any thread; blocks reading the file. */
ncclResult_t brd_plan_mscclpp_read(const char *path, int max_blocks, int *is_mscclpp_out,
                                   brd_ir_plan_t **plan_out,
                                   brd_plan_json_meta_t *meta_out, char *err, size_t errlen);

#endif /* BRD_PLAN_MSCCLPP_H */
