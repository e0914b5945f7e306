/*
 * Braid reductions on the host: every NCCL datatype (ncclInt8 .. ncclFloat8e5m2)
 * and every operation (sum, prod, max, min, avg, and PreMulSum for
 * ncclRedOpCreatePreMulSum), with NCCL's semantics:
 *
 *   - integers wrap (two's complement), min/max compare as signed or
 *     unsigned by type;
 *   - float min/max ignore a NaN operand (fminf/fmaxf) and order -0 below
 *     +0, so results do not depend on operand order;
 *   - avg on floats is PreMulSum by (1/nranks) rounded to the datatype,
 *     applied to each rank's input as it is first read; avg on integers is
 *     a sum followed by a division by nranks rounding toward zero, applied
 *     once to the finished sum (the "post-op");
 *   - fp16, bf16 and fp8 values are widened to fp32, combined in fp32 and
 *     rounded back to nearest-even once per call; a pre-multiplied input is
 *     rounded back to its type before it is summed, as NCCL stores it;
 *   - fp8 rounding saturates to the largest finite value (NVIDIA's
 *     __NV_SATFINITE, which NCCL uses), including for infinities; NaN
 *     becomes 0x7f.
 */
#ifndef BRD_DEVICE_REDOP_H
#define BRD_DEVICE_REDOP_H

#include <stddef.h>
#include <stdint.h>

#include "nccl.h"

/* What the executors run once ncclRedOp_t and the datatype are resolved
 * (NCCL's device-side op). Plain data: safe to copy to a device. */
enum {
  BRD_REDUCE_FN_SUM = 0,
  BRD_REDUCE_FN_PROD = 1,
  BRD_REDUCE_FN_MIN = 2,
  BRD_REDUCE_FN_MAX = 3,
  BRD_REDUCE_FN_PREMULSUM = 4,  /* pre-op: x * arg; then sum */
  BRD_REDUCE_FN_SUMPOSTDIV = 5, /* sum; post-op: / arg (integers only) */
};

/* The redop value brd_reduce_op_init accepts for a PreMulSum op made by
 * ncclRedOpCreatePreMulSum (scalar given as a host value of the datatype). */
#define BRD_REDOP_PREMULSUM 5

typedef struct brd_reduce_op {
  uint8_t dtype;  /* ncclDataType_t */
  uint8_t fn;     /* BRD_REDUCE_FN_* */
  uint8_t pad[6];
  uint64_t arg;   /* PREMULSUM: scalar bits in dtype; SUMPOSTDIV: divisor */
} brd_reduce_op_t;

/* Bytes per element of an ncclDataType_t, or 0 for a value outside
 * ncclInt8 .. ncclFloat8e5m2. */
size_t brd_reduce_dtype_size(int dtype);

/* Resolves (datatype, op) for a communicator of nranks into *op_out.
 * redop is ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, or
 * BRD_REDOP_PREMULSUM with scalar pointing at one host value of dtype
 * (scalar is ignored otherwise). Returns ncclInvalidArgument (with a WARN)
 * for an unknown datatype or op, or a NULL scalar for PreMulSum. Writes
 * *op_out only on success. Pure; any thread. */
ncclResult_t brd_reduce_op_init(int dtype, int redop, int nranks,
                                const void *scalar, brd_reduce_op_t *op_out);

/* dst[i] = srcs[0][i] (+) srcs[1][i] (+) ... for i < n elements, where (+)
 * is op's reduction; source s is pre-multiplied first when bit s of
 * pre_mask is set (only PREMULSUM has a pre-op), and the result gets the
 * post-op when post is non-zero (only SUMPOSTDIV has one). With one source
 * this is a copy with the optional pre/post-op. dst may equal any source
 * (element-wise); other overlap is not allowed. nsrcs is 1 .. 32. Never
 * fails, never blocks; any thread. */
void brd_reduce_host_apply(const brd_reduce_op_t *op, void *dst,
                           const void *const *srcs, int nsrcs,
                           uint32_t pre_mask, int post, size_t n);

/* Format conversions, exact in the widening direction and rounding to
 * nearest-even in the narrowing one (NVIDIA's __float2half_rn,
 * __float2bfloat16_rn and __nv_cvt_float_to_fp8(x, __NV_SATFINITE, ...)
 * on the host). NaN becomes 0x7fff (fp16, bf16) or 0x7f (fp8). */
float brd_reduce_f16_decode(uint16_t h);
uint16_t brd_reduce_f16_encode(float f);
float brd_reduce_bf16_decode(uint16_t h);
uint16_t brd_reduce_bf16_encode(float f);
/* e5m2 selects E5M2 (ncclFloat8e5m2); otherwise E4M3 (ncclFloat8e4m3). */
float brd_reduce_fp8_decode(uint8_t v, int e5m2);
uint8_t brd_reduce_fp8_encode(float f, int e5m2);

#endif /* BRD_DEVICE_REDOP_H */
