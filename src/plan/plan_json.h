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
#include <stdint.h>
#include <stdio.h>

#include "nccl.h"
#include "device/ir.h"
#include "plan/verify.h"

/* When a plan of a library (BRAID_PLAN_DIR) may run: the optional
 * top-level fields of docs/plans.md. Zero-initialised it is the default:
 * any size, in place or not, any node layout, every type and reduction. */
typedef struct brd_plan_json_meta {
  uint64_t min_bytes;  /* per-rank input bytes of the call, at least */
  uint64_t max_bytes;  /* and at most; 0: no limit */
  int inplace;         /* BRD_PLAN_JSON_INPLACE_* */
  int ranks_per_node;  /* 0: any */
  uint32_t dtypes;     /* bit per ncclDataType_t; 0: every type */
  uint32_t redops;     /* bit per ncclRedOp_t (ncclSum .. ncclAvg) and
                        * BRD_PLAN_JSON_REDOP_PREMULSUM; 0: every one */
} brd_plan_json_meta_t;

#define BRD_PLAN_JSON_INPLACE_ANY 0
#define BRD_PLAN_JSON_INPLACE_YES 1
#define BRD_PLAN_JSON_INPLACE_NO 2
#define BRD_PLAN_JSON_REDOP_PREMULSUM 5 /* bit of ncclRedOpCreatePreMulSum ops */

/* Writes plan as JSON to f (borrowed, left open), with the fields of meta
 * that differ from the defaults (meta may be NULL). Returns ncclSuccess,
 * ncclInvalidArgument (WARN) for a plan the format cannot express (an
 * unknown collective, protocol, op, buffer kind or flag bit), or
 * ncclSystemError when writing fails. Any thread; blocks on f. */
ncclResult_t brd_plan_json_write(const brd_ir_plan_t *plan,
                                 const brd_plan_json_meta_t *meta, FILE *f);

/* Parses the JSON document text[0 .. len) into a plan blob that the
 * caller frees with brd_plan_destroy, and its library fields into
 * *meta_out (may be NULL). `name` (the file name) starts every error
 * message. Checks syntax and schema only; it does not run the verifier.
 * On failure returns ncclInvalidArgument (syntax or schema) or
 * ncclSystemError (out of memory), WARNs once, and copies the message into
 * err[0 .. errlen) when err is not NULL. Writes *plan_out and *meta_out
 * only on success. Any thread. */
ncclResult_t brd_plan_json_parse(const char *text, size_t len, const char *name,
                                 brd_ir_plan_t **plan_out,
                                 brd_plan_json_meta_t *meta_out, char *err,
                                 size_t errlen);

/* Reads the file at path and parses it (brd_plan_json_parse, the file's
 * path naming it); no verifier. Errors as brd_plan_json_parse, and
 * ncclInvalidArgument (WARN) for a file that cannot be opened or is over
 * 256 MiB, ncclSystemError when reading fails. Any thread; blocks reading
 * the file. */
ncclResult_t brd_plan_json_read(const char *path, brd_ir_plan_t **plan_out,
                                brd_plan_json_meta_t *meta_out, char *err, size_t errlen);

/* Reads the file at path, parses it (brd_plan_json_parse; meta_out may be
 * NULL) and runs the verifier on the plan (opts as brd_plan_verify; may be
 * NULL: out of place, or in place when the document says "inplace":
 * "yes"). A plan the
 * verifier refuses is freed and the call returns ncclInternalError, with
 * the verifier's report (rank, block, op) in *report_out (may be NULL) and
 * in err prefixed by the file name. Point-to-point plans cannot be verified
 * without their pairing and are refused (ncclInvalidArgument). Writes
 * *plan_out only on success. Any thread; blocks reading the file. */
ncclResult_t brd_plan_json_load(const char *path, const brd_verify_opts_t *opts,
                                brd_ir_plan_t **plan_out,
                                brd_plan_json_meta_t *meta_out,
                                brd_verify_report_t *report_out, char *err,
                                size_t errlen);

/* The JSON reader behind brd_plan_json_parse, for other formats of plan
 * files (plan/mscclpp.h): a parsed document as a tree of values. */
enum {
  BRD_JSON_NULL,
  BRD_JSON_BOOL,
  BRD_JSON_INT, /* an integer that fits int64_t */
  BRD_JSON_NUM, /* any other number (value not kept) */
  BRD_JSON_STR,
  BRD_JSON_ARR,
  BRD_JSON_OBJ,
};

typedef struct brd_json {
  int type;              /* BRD_JSON_* */
  int64_t i;             /* BRD_JSON_INT value, BRD_JSON_BOOL 0/1 */
  char *s;               /* BRD_JSON_STR (owned, NUL-terminated) */
  struct brd_json *kids; /* array items, object values (owned), n of them */
  char **keys;           /* object keys (owned), parallel to kids */
  size_t n, cap;
} brd_json_t;

/* Parses the JSON document text[0 .. len) (RFC 8259, nesting depth at
 * most 64) into a tree the caller frees with brd_json_free. Malformed
 * JSON: ncclInvalidArgument, a WARN naming `name`, line and column, and the
 * message in err[0 .. errlen) (err may be NULL); out of memory:
 * ncclSystemError. Writes *root_out only on success. Any thread. */
ncclResult_t brd_json_parse(const char *text, size_t len, const char *name,
                            brd_json_t **root_out, char *err, size_t errlen);

/* Frees a tree of brd_json_parse; NULL is a no-op. */
void brd_json_free(brd_json_t *root);

/* The value of field `key` of object obj; NULL when obj is not an object
 * (or NULL) or has no such field. Pure. */
const brd_json_t *brd_json_get(const brd_json_t *obj, const char *key);

/* Reads the whole file at path (at most 256 MiB) into a malloc'd buffer
 * (not NUL-terminated) the caller frees. ncclInvalidArgument (WARN, and
 * the message in err) for a file that cannot be opened or is too large,
 * ncclSystemError when reading fails. Any thread; blocks reading. */
ncclResult_t brd_plan_json_text_read(const char *path, char **text_out, size_t *len_out,
                                     char *err, size_t errlen);

/* The document's name of datatype dt ("float32") or reduction op
 * ("sum", "premulsum" for BRD_PLAN_JSON_REDOP_PREMULSUM); "?" if none. */
const char *brd_plan_json_dtype_name(int dt);
const char *brd_plan_json_redop_name(int op);

#endif /* BRD_PLAN_PLAN_JSON_H */
