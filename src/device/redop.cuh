/*
 * Braid reductions on the GPU: the element arithmetic of the CUDA executor,
 * with the semantics of redop.h / redop_host.c, bit for bit:
 *
 *   - integers combine in the unsigned type of their width (two's
 *     complement wrap), compare signed or unsigned by type; the integer
 *     average is a sum divided once by nranks, rounding toward zero;
 *   - fp32 and fp64 combine with one rounding per operation (__fadd_rn and
 *     friends, so the compiler cannot fuse a PreMulSum's multiply and add
 *     into an FMA the host does not do); min/max ignore a NaN (fminf);
 *   - fp16, bf16 and fp8 widen exactly to fp32, combine in fp32 and narrow
 *     once at the end with round-to-nearest-even (__float2half_rn,
 *     __float2bfloat16_rn, __nv_cvt_float_to_fp8 with __NV_SATFINITE). A
 *     pre-multiplied input is narrowed and widened again before it is
 *     combined, as the host does. NaN narrows to the host's codes (0x7fff,
 *     0x7f) and fp8 infinities saturate to the largest finite value with
 *     their sign, whichever way the hardware conversion treats them.
 *
 * Everything is a template over the datatype (the ncclDataType_t value)
 * and, in the executor, over one of five reduction kinds (FN_*): sum, prod,
 * min, max, and "sum with pre/post-op" for PreMulSum and the integer
 * average, whose scalar and divisor are runtime values. 12 x 5 kernels keep
 * compile time bounded while plain sums carry no scalar code.
 */
#ifndef BRD_DEVICE_REDOP_CUH
#define BRD_DEVICE_REDOP_CUH

#include <stdint.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "nccl.h"

namespace brd {

/* Reduction kinds the kernels are specialised on. */
enum {
  FN_SUM = 0,
  FN_PROD = 1,
  FN_MIN = 2,
  FN_MAX = 3,
  FN_SUMX = 4, /* sum; PreMulSum pre-op or integer-average post-op */
  FN_COUNT = 5,
};

/* Unsigned storage of an element of `bytes` bytes. */
template <int bytes> struct raw_of;
template <> struct raw_of<1> { typedef uint8_t type; };
template <> struct raw_of<2> { typedef uint16_t type; };
template <> struct raw_of<4> { typedef uint32_t type; };
template <> struct raw_of<8> { typedef uint64_t type; };

/* ---- integers --------------------------------------------------------- */

template <typename T, typename UT> struct int_traits {
  typedef UT raw_t;
  typedef UT acc_t;
  static const bool is_int = true;
  static __device__ __forceinline__ acc_t widen(raw_t x) { return x; }
  static __device__ __forceinline__ raw_t narrow(acc_t a) { return a; }
  static __device__ __forceinline__ acc_t scalar(uint64_t arg) {
    return (acc_t)arg;
  }
  static __device__ __forceinline__ acc_t pre(acc_t x, acc_t s) {
    return (acc_t)(x * s);
  }
  static __device__ __forceinline__ acc_t sum(acc_t a, acc_t b) {
    return (acc_t)(a + b);
  }
  static __device__ __forceinline__ acc_t prod(acc_t a, acc_t b) {
    return (acc_t)(a * b);
  }
  static __device__ __forceinline__ acc_t min(acc_t a, acc_t b) {
    return (T)b < (T)a ? b : a;
  }
  static __device__ __forceinline__ acc_t max(acc_t a, acc_t b) {
    return (T)b > (T)a ? b : a;
  }
  /* Division by nranks rounding toward zero: divide the magnitude, then
   * restore the sign (the host's formulation, exact for the most negative
   * value too). */
  static __device__ __forceinline__ acc_t postdiv(acc_t a, uint64_t div) {
    const bool is_signed = (T)-1 < (T)0;
    bool neg = is_signed && (a >> (sizeof(UT) * 8 - 1)) != 0;
    acc_t mag = neg ? (acc_t)(0u - a) : a;
    acc_t q = (acc_t)(mag / div);
    return neg ? (acc_t)(0u - q) : q;
  }
};

/* ---- fp32 / fp64 ------------------------------------------------------ */

struct f32_traits {
  typedef uint32_t raw_t;
  typedef float acc_t;
  static const bool is_int = false;
  static __device__ __forceinline__ acc_t widen(raw_t x) {
    return __uint_as_float(x);
  }
  static __device__ __forceinline__ raw_t narrow(acc_t a) {
    return __float_as_uint(a);
  }
  static __device__ __forceinline__ acc_t scalar(uint64_t arg) {
    return __uint_as_float((uint32_t)arg);
  }
  static __device__ __forceinline__ acc_t pre(acc_t x, acc_t s) {
    return __fmul_rn(x, s);
  }
  static __device__ __forceinline__ acc_t sum(acc_t a, acc_t b) {
    return __fadd_rn(a, b);
  }
  static __device__ __forceinline__ acc_t prod(acc_t a, acc_t b) {
    return __fmul_rn(a, b);
  }
  static __device__ __forceinline__ acc_t min(acc_t a, acc_t b) {
    return fminf(a, b);
  }
  static __device__ __forceinline__ acc_t max(acc_t a, acc_t b) {
    return fmaxf(a, b);
  }
  static __device__ __forceinline__ acc_t postdiv(acc_t a, uint64_t) {
    return a;
  }
};

struct f64_traits {
  typedef uint64_t raw_t;
  typedef double acc_t;
  static const bool is_int = false;
  static __device__ __forceinline__ acc_t widen(raw_t x) {
    return __longlong_as_double((long long)x);
  }
  static __device__ __forceinline__ raw_t narrow(acc_t a) {
    return (raw_t)__double_as_longlong(a);
  }
  static __device__ __forceinline__ acc_t scalar(uint64_t arg) {
    return __longlong_as_double((long long)arg);
  }
  static __device__ __forceinline__ acc_t pre(acc_t x, acc_t s) {
    return __dmul_rn(x, s);
  }
  static __device__ __forceinline__ acc_t sum(acc_t a, acc_t b) {
    return __dadd_rn(a, b);
  }
  static __device__ __forceinline__ acc_t prod(acc_t a, acc_t b) {
    return __dmul_rn(a, b);
  }
  static __device__ __forceinline__ acc_t min(acc_t a, acc_t b) {
    return fmin(a, b);
  }
  static __device__ __forceinline__ acc_t max(acc_t a, acc_t b) {
    return fmax(a, b);
  }
  static __device__ __forceinline__ acc_t postdiv(acc_t a, uint64_t) {
    return a;
  }
};

/* ---- fp16 / bf16 / fp8: fp32 accumulation ----------------------------- */

/* Narrow formats: only the conversions differ. */
template <typename Conv> struct narrow_traits {
  typedef typename Conv::raw_t raw_t;
  typedef float acc_t;
  static const bool is_int = false;
  static __device__ __forceinline__ acc_t widen(raw_t x) {
    return Conv::to_float(x);
  }
  static __device__ __forceinline__ raw_t narrow(acc_t a) {
    return Conv::from_float(a);
  }
  /* The scalar is a value of the datatype: widening it is exact. */
  static __device__ __forceinline__ acc_t scalar(uint64_t arg) {
    return Conv::to_float((raw_t)arg);
  }
  /* The product is stored in the datatype before it is summed. */
  static __device__ __forceinline__ acc_t pre(acc_t x, acc_t s) {
    return Conv::to_float(Conv::from_float(__fmul_rn(x, s)));
  }
  static __device__ __forceinline__ acc_t sum(acc_t a, acc_t b) {
    return __fadd_rn(a, b);
  }
  static __device__ __forceinline__ acc_t prod(acc_t a, acc_t b) {
    return __fmul_rn(a, b);
  }
  static __device__ __forceinline__ acc_t min(acc_t a, acc_t b) {
    return fminf(a, b);
  }
  static __device__ __forceinline__ acc_t max(acc_t a, acc_t b) {
    return fmaxf(a, b);
  }
  static __device__ __forceinline__ acc_t postdiv(acc_t a, uint64_t) {
    return a;
  }
};

struct f16_conv {
  typedef uint16_t raw_t;
  static __device__ __forceinline__ float to_float(raw_t x) {
    return __half2float(__ushort_as_half(x));
  }
  static __device__ __forceinline__ raw_t from_float(float f) {
    if (isnan(f)) return 0x7fffu;
    return __half_as_ushort(__float2half_rn(f));
  }
};

struct bf16_conv {
  typedef uint16_t raw_t;
  static __device__ __forceinline__ float to_float(raw_t x) {
    return __bfloat162float(__ushort_as_bfloat16(x));
  }
  static __device__ __forceinline__ raw_t from_float(float f) {
    if (isnan(f)) return 0x7fffu;
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
};

template <__nv_fp8_interpretation_t interp> struct fp8_conv {
  typedef uint8_t raw_t;
  static __device__ __forceinline__ float to_float(raw_t x) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)x, interp);
    return __half2float(__half(h));
  }
  static __device__ __forceinline__ raw_t from_float(float f) {
    if (isnan(f)) return 0x7fu;
    if (isinf(f)) {
      /* Saturating conversion: the largest finite value, signed. */
      raw_t maxfin = interp == __NV_E5M2 ? 0x7bu : 0x7eu;
      return (raw_t)(signbit(f) ? (0x80u | maxfin) : maxfin);
    }
    return (raw_t)__nv_cvt_float_to_fp8(f, __NV_SATFINITE, interp);
  }
};

/* ---- datatype -> traits ----------------------------------------------- */

template <int DT> struct dt_traits;
template <> struct dt_traits<ncclInt8> : int_traits<int8_t, uint8_t> {};
template <> struct dt_traits<ncclUint8> : int_traits<uint8_t, uint8_t> {};
template <> struct dt_traits<ncclInt32> : int_traits<int32_t, uint32_t> {};
template <> struct dt_traits<ncclUint32> : int_traits<uint32_t, uint32_t> {};
template <> struct dt_traits<ncclInt64> : int_traits<int64_t, uint64_t> {};
template <> struct dt_traits<ncclUint64> : int_traits<uint64_t, uint64_t> {};
template <> struct dt_traits<ncclFloat16> : narrow_traits<f16_conv> {};
template <> struct dt_traits<ncclFloat32> : f32_traits {};
template <> struct dt_traits<ncclFloat64> : f64_traits {};
template <> struct dt_traits<ncclBfloat16> : narrow_traits<bf16_conv> {};
template <> struct dt_traits<ncclFloat8e4m3>
    : narrow_traits<fp8_conv<__NV_E4M3> > {};
template <> struct dt_traits<ncclFloat8e5m2>
    : narrow_traits<fp8_conv<__NV_E5M2> > {};

/* acc (+) x for reduction kind FN. */
template <typename Tr, int FN>
__device__ __forceinline__ typename Tr::acc_t
combine(typename Tr::acc_t acc, typename Tr::acc_t x) {
  if (FN == FN_PROD) return Tr::prod(acc, x);
  if (FN == FN_MIN) return Tr::min(acc, x);
  if (FN == FN_MAX) return Tr::max(acc, x);
  return Tr::sum(acc, x);
}

} /* namespace brd */

#endif /* BRD_DEVICE_REDOP_CUH */
