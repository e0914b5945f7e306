/*
 * Braid host reductions: format conversions and the element loops behind
 * brd_reduce_host_apply. See redop.h for the semantics.
 *
 * Each call works in tiles of TILE elements: the tile is accumulated in a
 * local array (sources outer, elements inner, so the compiler can vectorise)
 * and only then stored, which keeps dst == srcs[k] safe for any k.
 */
#include <math.h>
#include <string.h>

#include "base/check.h"
#include "device/redop.h"

#define TILE 256

/* ---- bit casts ---------------------------------------------------------- */

static inline uint32_t f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof(u));
  return u;
}

static inline float f32_from(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof(f));
  return f;
}

/* ---- narrowing to a binary format with mbits fraction bits ---------------
 *
 * a is |x| as fp32 bits, finite. Returns the magnitude bits of the narrow
 * format rounded to nearest-even, with gradual underflow. A result that
 * overflows comes back at or above the format's all-ones exponent; callers
 * clamp it to infinity or to the largest finite value. Carries propagate
 * naturally: a subnormal rounding up to 1 << mbits is the smallest normal,
 * and a fraction rounding up to 1 << (mbits + 1) bumps the exponent. */
static inline uint32_t round_narrow(uint32_t a, int mbits, int bias) {
  int e = (int)(a >> 23);
  if (e == 0) return 0; /* fp32 subnormals are below every format's range */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  int be = e - 127 + bias;
  int d = 23 - mbits + (be < 1 ? 1 - be : 0);
  if (d > 25) return 0;
  uint32_t q = m >> d;
  uint32_t rem = m & ((1u << d) - 1u);
  uint32_t half = 1u << (d - 1);
  if (rem > half || (rem == half && (q & 1u))) q++;
  if (be < 1) return q;
  return ((uint32_t)be << mbits) + (q - (1u << mbits));
}

static inline float f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu;
  uint32_t m = h & 0x3ffu;
  if (e == 0x1f) return f32_from(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    float v = (float)m * 0x1p-24f;
    return sign ? -v : v;
  }
  return f32_from(sign | ((e + 112u) << 23) | (m << 13));
}

static inline uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;
  if (a == 0x7f800000u) return (uint16_t)(sign | 0x7c00u);
  uint32_t r = round_narrow(a, 10, 15);
  if (r > 0x7c00u) r = 0x7c00u;
  return (uint16_t)(sign | r);
}

static inline float bf16_to_f32(uint16_t h) {
  return f32_from((uint32_t)h << 16);
}

static inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  /* bf16 is the top half of fp32: round the low half to nearest-even. An
   * infinity stays one; an overflow carries into the infinity encoding. */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float fp8_to_f32(uint8_t v, int e5m2) {
  uint32_t sign = (uint32_t)(v & 0x80u) << 24;
  uint32_t mag;
  if (e5m2) {
    uint32_t e = (v >> 2) & 0x1fu, m = v & 3u;
    if (e == 31) return f32_from(sign | (m ? 0x7fc00000u : 0x7f800000u));
    if (e == 0) {
      float x = (float)m * 0x1p-16f;
      return sign ? -x : x;
    }
    mag = ((e + 112u) << 23) | (m << 21);
  } else {
    uint32_t e = (v >> 3) & 0xfu, m = v & 7u;
    if (e == 15 && m == 7) return f32_from(sign | 0x7fc00000u);
    if (e == 0) {
      float x = (float)m * 0x1p-9f;
      return sign ? -x : x;
    }
    mag = ((e + 120u) << 23) | (m << 20);
  }
  return f32_from(sign | mag);
}

static inline uint8_t f32_to_fp8(float f, int e5m2) {
  uint32_t u = f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fu;
  /* Saturating: infinities and overflows give the largest finite value. */
  uint32_t maxfin = e5m2 ? 0x7bu : 0x7eu;
  uint32_t r = a == 0x7f800000u ? maxfin
                                : round_narrow(a, e5m2 ? 2 : 3, e5m2 ? 15 : 7);
  if (r > maxfin) r = maxfin;
  return (uint8_t)(sign | r);
}

/* See redop.h. */
float brd_reduce_f16_decode(uint16_t h) { return f16_to_f32(h); }
/* See redop.h. */
uint16_t brd_reduce_f16_encode(float f) { return f32_to_f16(f); }
/* See redop.h. */
float brd_reduce_bf16_decode(uint16_t h) { return bf16_to_f32(h); }
/* See redop.h. */
uint16_t brd_reduce_bf16_encode(float f) { return f32_to_bf16(f); }
/* See redop.h. */
float brd_reduce_fp8_decode(uint8_t v, int e5m2) { return fp8_to_f32(v, e5m2); }
/* See redop.h. */
uint8_t brd_reduce_fp8_encode(float f, int e5m2) { return f32_to_fp8(f, e5m2); }

/* See redop.h. */
size_t brd_reduce_dtype_size(int dtype) {
  switch (dtype) {
  case ncclInt8:
  case ncclUint8:
  case ncclFloat8e4m3:
  case ncclFloat8e5m2:
    return 1;
  case ncclFloat16:
  case ncclBfloat16:
    return 2;
  case ncclInt32:
  case ncclUint32:
  case ncclFloat32:
    return 4;
  case ncclInt64:
  case ncclUint64:
  case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

static int dtype_is_int(int dtype) {
  return dtype == ncclInt8 || dtype == ncclUint8 || dtype == ncclInt32 ||
         dtype == ncclUint32 || dtype == ncclInt64 || dtype == ncclUint64;
}

/* See redop.h. */
ncclResult_t brd_reduce_op_init(int dtype, int redop, int nranks,
                                const void *scalar, brd_reduce_op_t *op_out) {
  brd_reduce_op_t op;
  memset(&op, 0, sizeof(op));
  size_t size = brd_reduce_dtype_size(dtype);
  if (size == 0) {
    WARN("invalid data type %d: expected an ncclDataType_t from ncclInt8 "
         "to ncclFloat8e5m2", dtype);
    return ncclInvalidArgument;
  }
  if (nranks < 1) {
    WARN("reduction set up for %d ranks: a communicator has at least one",
         nranks);
    return ncclInvalidArgument;
  }
  op.dtype = (uint8_t)dtype;
  switch (redop) {
  case ncclSum: op.fn = BRD_REDUCE_FN_SUM; break;
  case ncclProd: op.fn = BRD_REDUCE_FN_PROD; break;
  case ncclMax: op.fn = BRD_REDUCE_FN_MAX; break;
  case ncclMin: op.fn = BRD_REDUCE_FN_MIN; break;
  case ncclAvg:
    if (dtype_is_int(dtype)) {
      op.fn = BRD_REDUCE_FN_SUMPOSTDIV;
      op.arg = (uint64_t)nranks;
      break;
    }
    op.fn = BRD_REDUCE_FN_PREMULSUM;
    /* NCCL rounds 1/nranks to the datatype (through fp32 for the narrow
     * formats) and multiplies each input by that value. */
    switch (dtype) {
    case ncclFloat16: op.arg = f32_to_f16((float)(1.0 / nranks)); break;
    case ncclBfloat16: op.arg = f32_to_bf16((float)(1.0 / nranks)); break;
    case ncclFloat8e4m3: op.arg = f32_to_fp8((float)(1.0 / nranks), 0); break;
    case ncclFloat8e5m2: op.arg = f32_to_fp8((float)(1.0 / nranks), 1); break;
    case ncclFloat32: op.arg = f32_bits((float)(1.0 / nranks)); break;
    default: {
      double inv = 1.0 / nranks;
      memcpy(&op.arg, &inv, sizeof(inv));
      break;
    }
    }
    break;
  case BRD_REDOP_PREMULSUM:
    if (scalar == NULL) {
      WARN("PreMulSum reduction without a scalar: pass a pointer to one "
           "value of the datatype");
      return ncclInvalidArgument;
    }
    op.fn = BRD_REDUCE_FN_PREMULSUM;
    memcpy(&op.arg, scalar, size); /* little-endian: low bytes */
    break;
  default:
    WARN("invalid reduction operation %d: expected ncclSum, ncclProd, "
         "ncclMax, ncclMin, ncclAvg or a PreMulSum op", redop);
    return ncclInvalidArgument;
  }
  *op_out = op;
  return ncclSuccess;
}

/* ---- integer kernels ------------------------------------------------------
 * Sums and products run on the unsigned type of the same width, which wraps
 * exactly as the GPU's two's-complement arithmetic does. */

#define DEFINE_INT_KERNEL(NAME, T, UT, SIGNED)                                \
  static void NAME(const brd_reduce_op_t *op, T *dst,                         \
                   const void *const *srcs, int nsrcs, uint32_t pre_mask,     \
                   int post, size_t n) {                                      \
    UT acc[TILE];                                                             \
    UT scalar = (UT)op->arg;                                                  \
    uint64_t div = op->arg;                                                   \
    for (size_t base = 0; base < n; base += TILE) {                           \
      size_t m = n - base < TILE ? n - base : TILE;                           \
      for (int s = 0; s < nsrcs; s++) {                                       \
        const T *src = (const T *)srcs[s] + base;                             \
        if ((pre_mask >> s) & 1u) {                                           \
          if (s == 0) {                                                       \
            for (size_t i = 0; i < m; i++) acc[i] = (UT)((UT)src[i] * scalar); \
          } else {                                                            \
            for (size_t i = 0; i < m; i++)                                    \
              acc[i] = (UT)(acc[i] + (UT)((UT)src[i] * scalar));              \
          }                                                                   \
          continue;                                                           \
        }                                                                     \
        if (s == 0) {                                                         \
          for (size_t i = 0; i < m; i++) acc[i] = (UT)src[i];                 \
          continue;                                                           \
        }                                                                     \
        switch (op->fn) {                                                     \
        case BRD_REDUCE_FN_PROD:                                              \
          for (size_t i = 0; i < m; i++) acc[i] = (UT)(acc[i] * (UT)src[i]);  \
          break;                                                              \
        case BRD_REDUCE_FN_MIN:                                               \
          for (size_t i = 0; i < m; i++)                                      \
            acc[i] = src[i] < (T)acc[i] ? (UT)src[i] : acc[i];                \
          break;                                                              \
        case BRD_REDUCE_FN_MAX:                                               \
          for (size_t i = 0; i < m; i++)                                      \
            acc[i] = src[i] > (T)acc[i] ? (UT)src[i] : acc[i];                \
          break;                                                              \
        default:                                                              \
          for (size_t i = 0; i < m; i++) acc[i] = (UT)(acc[i] + (UT)src[i]);  \
          break;                                                              \
        }                                                                     \
      }                                                                       \
      if (post && op->fn == BRD_REDUCE_FN_SUMPOSTDIV) {                       \
        for (size_t i = 0; i < m; i++) {                                      \
          /* Round toward zero: divide the magnitude, restore the sign. */    \
          int neg = (SIGNED) && (acc[i] >> (sizeof(UT) * 8 - 1)) != 0;        \
          UT mag = neg ? (UT)(0u - acc[i]) : acc[i];                          \
          UT q = (UT)(mag / div);                                             \
          acc[i] = neg ? (UT)(0u - q) : q;                                    \
        }                                                                     \
      }                                                                       \
      for (size_t i = 0; i < m; i++) dst[base + i] = (T)acc[i];               \
    }                                                                         \
  }

DEFINE_INT_KERNEL(reduce_i8, int8_t, uint8_t, 1)
DEFINE_INT_KERNEL(reduce_u8, uint8_t, uint8_t, 0)
DEFINE_INT_KERNEL(reduce_i32, int32_t, uint32_t, 1)
DEFINE_INT_KERNEL(reduce_u32, uint32_t, uint32_t, 0)
DEFINE_INT_KERNEL(reduce_i64, int64_t, uint64_t, 1)
DEFINE_INT_KERNEL(reduce_u64, uint64_t, uint64_t, 0)

/* ---- fp32 / fp64 ----------------------------------------------------------
 * min/max ignore a NaN operand (as fminf/fmaxf) and order -0 below +0, so
 * the result never depends on the order of the operands. */

#define DEFINE_FLOAT_MINMAX(T, sfx)                 \
  static inline T min_##sfx(T a, T b) {             \
    if (a != a) return b;                           \
    if (b != b || a < b) return a;                  \
    if (b < a) return b;                            \
    return signbit(a) ? a : b;                      \
  }                                                 \
  static inline T max_##sfx(T a, T b) {             \
    if (a != a) return b;                           \
    if (b != b || a > b) return a;                  \
    if (b > a) return b;                            \
    return signbit(a) ? b : a;                      \
  }

DEFINE_FLOAT_MINMAX(float, f32)
DEFINE_FLOAT_MINMAX(double, f64)

#define DEFINE_FLOAT_KERNEL(NAME, T, MINF, MAXF)                              \
  static void NAME(const brd_reduce_op_t *op, T *dst,                         \
                   const void *const *srcs, int nsrcs, uint32_t pre_mask,     \
                   size_t n) {                                                \
    T acc[TILE];                                                              \
    T scalar;                                                                 \
    memcpy(&scalar, &op->arg, sizeof(scalar));                                \
    for (size_t base = 0; base < n; base += TILE) {                           \
      size_t m = n - base < TILE ? n - base : TILE;                           \
      for (int s = 0; s < nsrcs; s++) {                                       \
        const T *src = (const T *)srcs[s] + base;                             \
        int pre = (pre_mask >> s) & 1u;                                       \
        if (s == 0) {                                                         \
          for (size_t i = 0; i < m; i++) acc[i] = pre ? src[i] * scalar : src[i]; \
          continue;                                                           \
        }                                                                     \
        switch (op->fn) {                                                     \
        case BRD_REDUCE_FN_PROD:                                              \
          for (size_t i = 0; i < m; i++) acc[i] *= src[i];                    \
          break;                                                              \
        case BRD_REDUCE_FN_MIN:                                               \
          for (size_t i = 0; i < m; i++) acc[i] = MINF(acc[i], src[i]);       \
          break;                                                              \
        case BRD_REDUCE_FN_MAX:                                               \
          for (size_t i = 0; i < m; i++) acc[i] = MAXF(acc[i], src[i]);       \
          break;                                                              \
        default:                                                              \
          if (pre) {                                                          \
            for (size_t i = 0; i < m; i++) acc[i] += src[i] * scalar;         \
          } else {                                                            \
            for (size_t i = 0; i < m; i++) acc[i] += src[i];                  \
          }                                                                   \
          break;                                                              \
        }                                                                     \
      }                                                                       \
      memcpy(dst + base, acc, m * sizeof(T));                                 \
    }                                                                         \
  }

DEFINE_FLOAT_KERNEL(reduce_f32, float, min_f32, max_f32)
DEFINE_FLOAT_KERNEL(reduce_f64, double, min_f64, max_f64)

/* ---- fp16 / bf16 / fp8: widen to fp32, combine, round once ---------------- */

static inline float widen_e4m3(uint8_t v) { return fp8_to_f32(v, 0); }
static inline float widen_e5m2(uint8_t v) { return fp8_to_f32(v, 1); }
static inline uint8_t narrow_e4m3(float f) { return f32_to_fp8(f, 0); }
static inline uint8_t narrow_e5m2(float f) { return f32_to_fp8(f, 1); }

#define DEFINE_NARROW_KERNEL(NAME, ST, WIDEN, NARROW)                         \
  static void NAME(const brd_reduce_op_t *op, ST *dst,                        \
                   const void *const *srcs, int nsrcs, uint32_t pre_mask,     \
                   size_t n) {                                                \
    float acc[TILE];                                                          \
    /* The scalar is a value of the datatype; widening it is exact. */        \
    float scalar = WIDEN((ST)op->arg);                                        \
    for (size_t base = 0; base < n; base += TILE) {                           \
      size_t m = n - base < TILE ? n - base : TILE;                           \
      for (int s = 0; s < nsrcs; s++) {                                       \
        const ST *src = (const ST *)srcs[s] + base;                           \
        int pre = (pre_mask >> s) & 1u;                                       \
        for (size_t i = 0; i < m; i++) {                                      \
          float x = WIDEN(src[i]);                                            \
          /* NCCL stores a pre-multiplied input in the datatype before it */  \
          /* sums it, so round the product there. */                          \
          if (pre) x = WIDEN(NARROW(x * scalar));                             \
          if (s == 0) {                                                       \
            acc[i] = x;                                                       \
            continue;                                                         \
          }                                                                   \
          switch (op->fn) {                                                   \
          case BRD_REDUCE_FN_PROD: acc[i] *= x; break;                        \
          case BRD_REDUCE_FN_MIN: acc[i] = min_f32(acc[i], x); break;         \
          case BRD_REDUCE_FN_MAX: acc[i] = max_f32(acc[i], x); break;         \
          default: acc[i] += x; break;                                        \
          }                                                                   \
        }                                                                     \
      }                                                                       \
      for (size_t i = 0; i < m; i++) dst[base + i] = NARROW(acc[i]);          \
    }                                                                         \
  }

DEFINE_NARROW_KERNEL(reduce_f16, uint16_t, f16_to_f32, f32_to_f16)
DEFINE_NARROW_KERNEL(reduce_bf16, uint16_t, bf16_to_f32, f32_to_bf16)
DEFINE_NARROW_KERNEL(reduce_e4m3, uint8_t, widen_e4m3, narrow_e4m3)
DEFINE_NARROW_KERNEL(reduce_e5m2, uint8_t, widen_e5m2, narrow_e5m2)

/* See redop.h. */
void brd_reduce_host_apply(const brd_reduce_op_t *op, void *dst,
                           const void *const *srcs, int nsrcs,
                           uint32_t pre_mask, int post, size_t n) {
  if (n == 0 || nsrcs < 1) return;
  if (op->fn != BRD_REDUCE_FN_PREMULSUM) pre_mask = 0;
  if (op->fn != BRD_REDUCE_FN_SUMPOSTDIV) post = 0;
  if (nsrcs == 1 && pre_mask == 0 && !post) {
    if (dst != srcs[0]) memmove(dst, srcs[0], n * brd_reduce_dtype_size(op->dtype));
    return;
  }
  switch (op->dtype) {
  case ncclInt8: reduce_i8(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclUint8: reduce_u8(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclInt32: reduce_i32(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclUint32: reduce_u32(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclInt64: reduce_i64(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclUint64: reduce_u64(op, dst, srcs, nsrcs, pre_mask, post, n); break;
  case ncclFloat32: reduce_f32(op, dst, srcs, nsrcs, pre_mask, n); break;
  case ncclFloat64: reduce_f64(op, dst, srcs, nsrcs, pre_mask, n); break;
  case ncclFloat16: reduce_f16(op, dst, srcs, nsrcs, pre_mask, n); break;
  case ncclBfloat16: reduce_bf16(op, dst, srcs, nsrcs, pre_mask, n); break;
  case ncclFloat8e4m3: reduce_e4m3(op, dst, srcs, nsrcs, pre_mask, n); break;
  case ncclFloat8e5m2: reduce_e5m2(op, dst, srcs, nsrcs, pre_mask, n); break;
  default:
    break;
  }
}
