/*
 * Braid plans as JSON (the format is described in docs/plans.md).
 *
 * Export writes any plan blob (device/ir.h) as one JSON document: the
 * header, each rank's channel table and each (rank, block)'s ops in
 * channel terms. Import parses such a document with a small reader of its
 * own (RFC 8259 JSON, nesting depth at most 64), checks it against the
 * schema and rebuilds the blob through the plan builder (plan/plan.h), so
 * that export followed by import gives back a blob identical byte for byte
 * to one the builder made. A schema error names the file, the JSON path
 * (`ranks[2].blocks[0].ops[5].refs[1].chan`) and what is wrong; malformed
 * JSON names the file, line and column.
 */
#ifndef BRD_PLAN_PLAN_JSON_H
#define BRD_PLAN_PLAN_JSON_H

#include <stddef.h>
#include <stdio.h>

#include "nccl.h"
#include "device/ir.h"
#include "plan/verify.h"

/* Writes plan as JSON to f (borrowed, left open). Returns ncclSuccess,
 * ncclInvalidArgument (WARN) for a plan the format cannot express (an
 * unknown collective, protocol, op, buffer kind or flag bit), or
 * ncclSystemError when writing fails. Any thread; blocks on f. */
ncclResult_t brd_plan_json_write(const brd_ir_plan_t *plan, FILE *f);

/* Parses the JSON document text[0 .. len) into a plan blob that the
 * caller frees with brd_plan_destroy. `name` (the file name) starts every
 * error message. Checks syntax and schema only; it does not run the
 * verifier. On failure returns ncclInvalidArgument (syntax or schema) or
 * ncclSystemError (out of memory), WARNs once, and copies the message into
 * err[0 .. errlen) when err is not NULL. Writes *plan_out only on
 * success. Any thread. */
ncclResult_t brd_plan_json_parse(const char *text, size_t len, const char *name,
                                 brd_ir_plan_t **plan_out, char *err,
                                 size_t errlen);

/* Reads the file at path, parses it (brd_plan_json_parse) and runs the
 * verifier on the plan (opts as brd_plan_verify; may be NULL). A plan the
 * verifier refuses is freed and the call returns ncclInternalError, with
 * the verifier's report (rank, block, op) in *report_out (may be NULL) and
 * in err prefixed by the file name. Point-to-point plans cannot be verified
 * without their pairing and are refused (ncclInvalidArgument). Writes
 * *plan_out only on success. Any thread; blocks reading the file. */
ncclResult_t brd_plan_json_load(const char *path, const brd_verify_opts_t *opts,
                                brd_ir_plan_t **plan_out,
                                brd_verify_report_t *report_out, char *err,
                                size_t errlen);

#endif /* BRD_PLAN_PLAN_JSON_H */
