/*
 * Unit tests for the host reductions (src/device/redop_host.c).
 *
 * References written here, by other methods than the code under test:
 *   - decoders from the formats' field definitions with ldexp;
 *   - encoders that search the sorted table of every finite value of the
 *     format for the nearest one (ties to the even code), then apply the
 *     overflow rule (fp16/bf16: infinity; fp8: NVIDIA's __NV_SATFINITE,
 *     the largest finite value);
 *   - bit patterns worked out by hand;
 *   - per-element folds in 64-bit integers, or in the datatype (fp32,
 *     fp64) or fp32 (narrow formats) for the reductions.
 * Conversions are checked exhaustively (every code round-trips; every
 * midpoint between neighbours and the floats next to it rounds as the
 * reference says).
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "device/redop.h"

/* ---- reference formats ---------------------------------------------------- */

typedef struct fmt {
  int dtype;
  int ebits, mbits;
  int has_inf;      /* all-ones exponent is Inf/NaN (else e4m3: only NaN) */
  int saturate;     /* overflow gives the largest finite value */
  uint32_t ncodes;  /* 1 << width */
  uint32_t nan;     /* the NaN code the library produces */
} fmt_t;

static const fmt_t F16 = {ncclFloat16, 5, 10, 1, 0, 65536, 0x7fff};
static const fmt_t BF16 = {ncclBfloat16, 8, 7, 1, 0, 65536, 0x7fff};
static const fmt_t E4M3 = {ncclFloat8e4m3, 4, 3, 0, 1, 256, 0x7f};
static const fmt_t E5M2 = {ncclFloat8e5m2, 5, 2, 1, 1, 256, 0x7f};

static double ref_decode(const fmt_t *f, uint32_t code) {
  int width = 1 + f->ebits + f->mbits;
  uint32_t sign = (code >> (width - 1)) & 1;
  uint32_t e = (code >> f->mbits) & ((1u << f->ebits) - 1);
  uint32_t m = code & ((1u << f->mbits) - 1);
  int bias = (1 << (f->ebits - 1)) - 1;
  double v;
  if (f->has_inf && e == (1u << f->ebits) - 1) v = m ? NAN : INFINITY;
  else if (!f->has_inf && e == (1u << f->ebits) - 1 && m == (1u << f->mbits) - 1) v = NAN;
  else if (e == 0) v = ldexp((double)m, 1 - bias - f->mbits);
  else v = ldexp((double)((1u << f->mbits) | m), (int)e - bias - f->mbits);
  return sign ? -v : v;
}

/* Largest positive finite code: positive codes increase with their value.
 * Found once per format by walking down from the top. */
static uint32_t max_finite(const fmt_t *f) {
  static uint32_t cache[16];
  uint32_t *slot = &cache[f->dtype];
  if (*slot == 0) {
    uint32_t c = f->ncodes / 2 - 1;
    while (!isfinite(ref_decode(f, c))) c--;
    *slot = c;
  }
  return *slot;
}

static uint32_t ref_encode(const fmt_t *f, double x) {
  uint32_t sign = f->ncodes / 2;
  if (x != x) return f->nan;
  uint32_t s = signbit(x) ? sign : 0;
  double a = fabs(x);
  uint32_t top = max_finite(f);
  double vmax = ref_decode(f, top);
  if (a > vmax) {
    if (f->saturate) return s | top;
    /* Round to nearest with an unbounded exponent: the next value up would
     * be 2^(emax+1), so the midpoint decides. */
    double next = ldexp(1.0, (int)ilogb(vmax) + 1);
    if (a >= (vmax + next) / 2) return s | (top + 1); /* infinity */
    return s | top;
  }
  uint32_t lo = 0, hi = top; /* largest code with value <= a */
  while (lo < hi) {
    uint32_t mid = (lo + hi + 1) / 2;
    if (ref_decode(f, mid) <= a) lo = mid;
    else hi = mid - 1;
  }
  double vlo = ref_decode(f, lo);
  if (vlo == a || lo == top) return s | lo;
  double vhi = ref_decode(f, lo + 1);
  double dlo = a - vlo, dhi = vhi - a;
  uint32_t c = dlo < dhi ? lo : dhi < dlo ? lo + 1 : (lo % 2 == 0 ? lo : lo + 1);
  return s | c;
}

static float lib_decode(const fmt_t *f, uint32_t code) {
  switch (f->dtype) {
  case ncclFloat16: return brd_reduce_f16_decode((uint16_t)code);
  case ncclBfloat16: return brd_reduce_bf16_decode((uint16_t)code);
  case ncclFloat8e4m3: return brd_reduce_fp8_decode((uint8_t)code, 0);
  default: return brd_reduce_fp8_decode((uint8_t)code, 1);
  }
}

static uint32_t lib_encode(const fmt_t *f, float x) {
  switch (f->dtype) {
  case ncclFloat16: return brd_reduce_f16_encode(x);
  case ncclBfloat16: return brd_reduce_bf16_encode(x);
  case ncclFloat8e4m3: return brd_reduce_fp8_encode(x, 0);
  default: return brd_reduce_fp8_encode(x, 1);
  }
}

static const fmt_t *fmts[4] = {&F16, &BF16, &E4M3, &E5M2};

/* ---- conversions ---------------------------------------------------------- */

static void test_known_patterns(void **state) {
  (void)state;
  static const struct { const fmt_t *f; float x; uint32_t code; } enc[] = {
      {&F16, 1.0f, 0x3c00}, {&F16, -2.0f, 0xc000}, {&F16, 65504.0f, 0x7bff},
      {&F16, 0x1p-14f, 0x0400}, {&F16, 0x1p-24f, 0x0001}, {&F16, 0.5f, 0x3800},
      {&F16, 65519.0f, 0x7bff}, {&F16, 65520.0f, 0x7c00}, /* overflow */
      {&F16, 1.0f + 0x1p-11f, 0x3c00},                    /* tie, even */
      {&F16, 1.0f + 3 * 0x1p-11f, 0x3c02},                /* tie, up to even */
      {&F16, 0x1p-25f, 0x0000},                           /* tie to zero */
      {&F16, 0x1.8p-25f, 0x0001}, {&F16, -0.0f, 0x8000},
      {&F16, INFINITY, 0x7c00}, {&F16, -INFINITY, 0xfc00}, {&F16, NAN, 0x7fff},
      {&BF16, 1.0f, 0x3f80}, {&BF16, 1.0f + 0x1p-8f, 0x3f80},
      {&BF16, 1.0f + 3 * 0x1p-8f, 0x3f82}, {&BF16, -3.0f, 0xc040},
      {&BF16, 3.4028235e38f, 0x7f80}, {&BF16, NAN, 0x7fff},
      {&E4M3, 1.0f, 0x38}, {&E4M3, 448.0f, 0x7e}, {&E4M3, 0x1p-9f, 0x01},
      {&E4M3, 0x1p-6f, 0x08}, {&E4M3, 16.0f, 0x58}, {&E4M3, 17.0f, 0x58},
      {&E4M3, 18.0f, 0x59}, {&E4M3, 464.0f, 0x7e}, {&E4M3, 1000.0f, 0x7e},
      {&E4M3, INFINITY, 0x7e}, {&E4M3, -INFINITY, 0xfe}, {&E4M3, 0x1p-10f, 0x00},
      {&E4M3, 0x1.8p-10f, 0x01}, {&E4M3, -0x1p-12f, 0x80}, {&E4M3, NAN, 0x7f},
      {&E5M2, 1.0f, 0x3c}, {&E5M2, 57344.0f, 0x7b}, {&E5M2, 0x1p-16f, 0x01},
      {&E5M2, 61440.0f, 0x7b}, {&E5M2, 1e6f, 0x7b}, {&E5M2, INFINITY, 0x7b},
      {&E5M2, -INFINITY, 0xfb}, {&E5M2, 5.0f, 0x45}, {&E5M2, NAN, 0x7f},
  };
  for (size_t i = 0; i < sizeof(enc) / sizeof(enc[0]); i++) {
    uint32_t got = lib_encode(enc[i].f, enc[i].x);
    if (got != enc[i].code)
      print_error("dtype %d: %a encodes to 0x%x, expected 0x%x\n", enc[i].f->dtype,
                  (double)enc[i].x, got, enc[i].code);
    assert_int_equal(got, enc[i].code);
  }
  assert_true(lib_decode(&F16, 0x7c00) == INFINITY);
  assert_true(isnan(lib_decode(&F16, 0x7e00)));
  assert_true(lib_decode(&E5M2, 0x7c) == INFINITY);
  assert_true(isnan(lib_decode(&E4M3, 0xff)));
  assert_true(lib_decode(&E4M3, 0x7e) == 448.0f);
  assert_true(lib_decode(&E4M3, 0x01) == 0x1p-9f);
  assert_true(lib_decode(&BF16, 0xc040) == -3.0f);
}

/* Every code decodes as the definition says and encodes back to itself. */
static void test_exhaustive_roundtrip(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    const fmt_t *f = fmts[k];
    for (uint32_t c = 0; c < f->ncodes; c++) {
      double want = ref_decode(f, c);
      float got = lib_decode(f, c);
      if (want != want) {
        assert_true(got != got);
        assert_int_equal(lib_encode(f, got), f->nan);
        continue;
      }
      int same_sign = !signbit(got) == !signbit(want);
      if ((double)got != want || !same_sign)
        print_error("dtype %d code 0x%x decodes to %a, expected %a\n", f->dtype, c,
                    (double)got, want);
      assert_true((double)got == want && same_sign);
      uint32_t back = lib_encode(f, got);
      /* A saturating format has no infinity to return to. */
      if (isinf(want)) assert_int_equal(back, f->saturate ? ((c & (f->ncodes / 2)) | max_finite(f)) : c);
      else assert_int_equal(back, c);
    }
  }
}

/* Midpoints between neighbouring values, and the floats around them,
 * round as the nearest-value search says. */
static void test_exhaustive_rounding(void **state) {
  (void)state;
  for (int k = 0; k < 4; k++) {
    const fmt_t *f = fmts[k];
    uint32_t top = max_finite(f);
    long checked = 0;
    for (uint32_t c = 0; c <= top; c++) {
      double lo = ref_decode(f, c);
      double hi = c < top ? ref_decode(f, c + 1) : lo * 2;
      float mid = (float)((lo + hi) / 2); /* exact: narrow values fit */
      float probes[5] = {mid, nextafterf(mid, 0), nextafterf(mid, INFINITY),
                         (float)lo, (float)((3 * lo + hi) / 4)};
      for (int p = 0; p < 5; p++) {
        for (int neg = 0; neg < 2; neg++) {
          float x = neg ? -probes[p] : probes[p];
          uint32_t want = ref_encode(f, x), got = lib_encode(f, x);
          if (got != want) {
            print_error("dtype %d: %a rounds to 0x%x, expected 0x%x\n", f->dtype,
                        (double)x, got, want);
            fail();
          }
          checked++;
        }
      }
    }
    assert_true(checked > 1000);
  }
}

/* Random floats over the whole range, against the same reference. */
static void test_random_rounding(void **state) {
  (void)state;
  uint64_t x = 88172645463325252ull;
  for (int i = 0; i < 200000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    uint32_t bits = (uint32_t)x;
    float v;
    memcpy(&v, &bits, sizeof(v));
    if (v != v) continue;
    for (int k = 0; k < 4; k++) {
      uint32_t want = ref_encode(fmts[k], v), got = lib_encode(fmts[k], v);
      if (got != want) {
        print_error("dtype %d: %a rounds to 0x%x, expected 0x%x\n", fmts[k]->dtype,
                    (double)v, got, want);
        fail();
      }
    }
  }
}

/* ---- op resolution -------------------------------------------------------- */

static void test_op_init(void **state) {
  (void)state;
  brd_reduce_op_t op;
  /* avg on floats: PreMulSum by 1/n rounded to the datatype. */
  static const struct { int dt; uint64_t bits; } third[] = {
      {ncclFloat32, 0x3eaaaaab}, {ncclFloat16, 0x3555}, {ncclBfloat16, 0x3eab},
      {ncclFloat8e4m3, 0x2b}, {ncclFloat8e5m2, 0x35},
      {ncclFloat64, 0x3fd5555555555555ull},
  };
  for (size_t i = 0; i < sizeof(third) / sizeof(third[0]); i++) {
    assert_int_equal(brd_reduce_op_init(third[i].dt, ncclAvg, 3, NULL, &op), ncclSuccess);
    assert_int_equal(op.fn, BRD_REDUCE_FN_PREMULSUM);
    assert_int_equal(op.arg, third[i].bits);
  }
  /* avg on integers: sum, then divide by n. */
  for (int dt = ncclInt8; dt <= ncclUint64; dt++) {
    assert_int_equal(brd_reduce_op_init(dt, ncclAvg, 5, NULL, &op), ncclSuccess);
    assert_int_equal(op.fn, BRD_REDUCE_FN_SUMPOSTDIV);
    assert_int_equal(op.arg, 5);
  }
  int16_t s16 = 0x4200; /* fp16 3.0 */
  assert_int_equal(brd_reduce_op_init(ncclFloat16, BRD_REDOP_PREMULSUM, 4, &s16, &op),
                   ncclSuccess);
  assert_int_equal(op.arg, 0x4200);
  assert_int_equal(brd_reduce_op_init(12, ncclSum, 2, NULL, &op), ncclInvalidArgument);
  assert_int_equal(brd_reduce_op_init(-1, ncclSum, 2, NULL, &op), ncclInvalidArgument);
  assert_int_equal(brd_reduce_op_init(ncclFloat32, 6, 2, NULL, &op), ncclInvalidArgument);
  assert_int_equal(brd_reduce_op_init(ncclFloat32, BRD_REDOP_PREMULSUM, 2, NULL, &op),
                   ncclInvalidArgument);
  assert_int_equal(brd_reduce_op_init(ncclFloat32, ncclSum, 0, NULL, &op),
                   ncclInvalidArgument);
  assert_int_equal(brd_reduce_dtype_size(ncclBfloat16), 2);
  assert_int_equal(brd_reduce_dtype_size(ncclFloat8e5m2), 1);
  assert_int_equal(brd_reduce_dtype_size(ncclUint64), 8);
  assert_int_equal(brd_reduce_dtype_size(12), 0);
}

/* ---- integer reductions: hand-worked cases -------------------------------- */

static void apply1(int dt, int redop, int nranks, const void *scalar, void *dst,
                   const void *a, const void *b, int pre, int post, size_t n) {
  brd_reduce_op_t op;
  assert_int_equal(brd_reduce_op_init(dt, redop, nranks, scalar, &op), ncclSuccess);
  const void *srcs[2] = {a, b};
  brd_reduce_host_apply(&op, dst, srcs, b ? 2 : 1, pre ? (b ? 3u : 1u) : 0u, post, n);
}

static void test_int_cases(void **state) {
  (void)state;
  int8_t a8[4] = {-7, -128, 100, 127}, b8[4] = {-2, -128, 100, 1}, d8[4];
  apply1(ncclInt8, ncclAvg, 2, NULL, d8, a8, b8, 0, 1, 4);
  /* -9/2 -> -4 (toward zero); -256 wraps to 0; 200 wraps to -56 -> -28;
   * 128 wraps to -128 -> -64. */
  assert_int_equal(d8[0], -4);
  assert_int_equal(d8[1], 0);
  assert_int_equal(d8[2], -28);
  assert_int_equal(d8[3], -64);
  apply1(ncclInt8, ncclMax, 2, NULL, d8, a8, b8, 0, 0, 4);
  assert_int_equal(d8[0], -2);
  assert_int_equal(d8[3], 127);
  apply1(ncclInt8, ncclProd, 2, NULL, d8, a8, b8, 0, 0, 4);
  assert_int_equal(d8[0], 14);
  assert_int_equal(d8[2], 16); /* 10000 mod 256 */
  uint8_t u[2] = {200, 3}, v[2] = {100, 250}, du[2];
  apply1(ncclUint8, ncclAvg, 2, NULL, du, u, v, 0, 1, 2);
  assert_int_equal(du[0], 22);  /* 300 mod 256 = 44, / 2 */
  assert_int_equal(du[1], 126); /* 253 / 2 */
  apply1(ncclUint8, ncclMin, 2, NULL, du, u, v, 0, 0, 2);
  assert_int_equal(du[0], 100);
  assert_int_equal(du[1], 3);
  int64_t a64[1] = {INT64_MIN}, b64[1] = {0}, d64[1];
  apply1(ncclInt64, ncclAvg, 3, NULL, d64, a64, b64, 0, 1, 1);
  assert_true(d64[0] == INT64_MIN / 3);
  int8_t three = 3, x8[1] = {100}, y8[1] = {-1};
  apply1(ncclInt8, BRD_REDOP_PREMULSUM, 2, &three, d8, x8, y8, 1, 0, 1);
  assert_int_equal(d8[0], 41); /* 300 mod 256 = 44, plus -3 */
  uint32_t a32[1] = {0xffffffffu}, b32[1] = {2}, d32[1];
  apply1(ncclUint32, ncclSum, 2, NULL, d32, a32, b32, 0, 0, 1);
  assert_int_equal(d32[0], 1);
  apply1(ncclInt32, ncclMin, 2, NULL, d32, a32, b32, 0, 0, 1); /* -1 < 2 */
  assert_int_equal(d32[0], 0xffffffffu);
  /* The post-op only applies when asked. */
  apply1(ncclUint8, ncclAvg, 2, NULL, du, u, v, 0, 0, 2);
  assert_int_equal(du[0], 44);
}

/* ---- float reductions: hand-worked cases ---------------------------------- */

static void test_float_cases(void **state) {
  (void)state;
  float fa[3] = {NAN, 1.0f, -0.5f}, fb[3] = {2.0f, NAN, 0.25f}, fd[3];
  apply1(ncclFloat32, ncclMax, 2, NULL, fd, fa, fb, 0, 0, 3);
  assert_true(fd[0] == 2.0f && fd[1] == 1.0f && fd[2] == 0.25f);
  apply1(ncclFloat32, ncclMin, 2, NULL, fd, fa, fb, 0, 0, 3);
  assert_true(fd[0] == 2.0f && fd[1] == 1.0f && fd[2] == -0.5f);
  /* Saturation and overflow in the narrow formats. */
  uint8_t e4[1] = {0x7e}, e4b[1] = {0x7e}, e4d[1];
  apply1(ncclFloat8e4m3, ncclSum, 2, NULL, e4d, e4, e4b, 0, 0, 1);
  assert_int_equal(e4d[0], 0x7e);
  uint8_t e5[1] = {0x7b}, e5d[1];
  apply1(ncclFloat8e5m2, ncclSum, 2, NULL, e5d, e5, e5, 0, 0, 1);
  assert_int_equal(e5d[0], 0x7b);
  uint16_t h[1] = {0x7bff}, hd[1];
  apply1(ncclFloat16, ncclSum, 2, NULL, hd, h, h, 0, 0, 1);
  assert_int_equal(hd[0], 0x7c00);
  uint16_t hn[1] = {0x7e00}, h1[1] = {0x3c00};
  apply1(ncclFloat16, ncclMax, 2, NULL, hd, hn, h1, 0, 0, 1);
  assert_int_equal(hd[0], 0x3c00);
  /* avg over 3 ranks on fp16: each input times fp16(1/3) = 0x3555, rounded.
   * 1.0 * 0x3555 is exact; 3.0 * 0x3555 = 1 - 2^-12 is a tie that rounds to
   * 1.0; the sum 1.33325195 rounds to 1 + 341/1024 = 0x3d55. */
  uint16_t one[1] = {0x3c00}, threef[1] = {0x4200};
  apply1(ncclFloat16, ncclAvg, 3, NULL, hd, one, threef, 1, 0, 1);
  assert_int_equal(hd[0], 0x3d55);
  /* Signed zeros: -0 is the smaller, whatever the operand order. */
  float z[2] = {0.0f, -0.0f}, zn[2] = {-0.0f, 0.0f};
  apply1(ncclFloat32, ncclMin, 2, NULL, fd, z, zn, 0, 0, 2);
  assert_true(signbit(fd[0]) && signbit(fd[1]));
  apply1(ncclFloat32, ncclMax, 2, NULL, fd, z, zn, 0, 0, 2);
  assert_true(!signbit(fd[0]) && !signbit(fd[1]));
  /* dst may be one of the sources. */
  float acc[2] = {1.5f, 2.5f}, add[2] = {0.25f, 0.5f};
  apply1(ncclFloat32, ncclSum, 2, NULL, acc, add, acc, 0, 0, 2);
  assert_true(acc[0] == 1.75f && acc[1] == 3.0f);
}

/* ---- randomized: every datatype and op against a per-element fold --------- */

/* min/max as documented: a NaN operand is ignored, -0 counts below +0. */
static double ref_min(double a, double b) {
  if (isnan(a)) return b;
  if (isnan(b)) return a;
  if (a == b) return signbit(a) ? a : b;
  return a < b ? a : b;
}
static double ref_max(double a, double b) {
  if (isnan(a)) return b;
  if (isnan(b)) return a;
  if (a == b) return signbit(a) ? b : a;
  return a > b ? a : b;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;
static uint64_t rnd(void) {
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return rng_state;
}

static const fmt_t *fmt_of(int dt) {
  switch (dt) {
  case ncclFloat16: return &F16;
  case ncclBfloat16: return &BF16;
  case ncclFloat8e4m3: return &E4M3;
  case ncclFloat8e5m2: return &E5M2;
  default: return NULL;
  }
}

static int is_signed_int(int dt) {
  return dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64;
}

static int64_t sext(int dt, uint64_t v) {
  int bits = (int)brd_reduce_dtype_size(dt) * 8;
  if (bits < 64) {
    v &= (1ull << bits) - 1;
    if (is_signed_int(dt) && ((v >> (bits - 1)) & 1)) v |= ~0ull << bits;
  }
  int64_t s;
  memcpy(&s, &v, sizeof(s));
  return s;
}

static uint64_t ref_int_elem(int dt, int redop, uint64_t scalar, int nranks,
                             const uint64_t *x, int nsrc, uint32_t pre, int post) {
  uint64_t mask = brd_reduce_dtype_size(dt) == 8 ? ~0ull
                                                 : (1ull << (8 * brd_reduce_dtype_size(dt))) - 1;
  uint64_t acc = 0;
  for (int s = 0; s < nsrc; s++) {
    uint64_t v = x[s] & mask;
    if (redop == BRD_REDOP_PREMULSUM && (pre >> s & 1)) v = (v * scalar) & mask;
    if (s == 0) {
      acc = v;
      continue;
    }
    switch (redop) {
    case ncclProd: acc = (acc * v) & mask; break;
    case ncclMax:
      if (is_signed_int(dt) ? sext(dt, v) > sext(dt, acc) : v > acc) acc = v;
      break;
    case ncclMin:
      if (is_signed_int(dt) ? sext(dt, v) < sext(dt, acc) : v < acc) acc = v;
      break;
    default: acc = (acc + v) & mask; break;
    }
  }
  if (redop == ncclAvg && post) {
    if (is_signed_int(dt)) {
      int64_t q = sext(dt, acc) / nranks;
      memcpy(&acc, &q, sizeof(acc));
    } else {
      acc /= (uint64_t)nranks;
    }
  }
  return acc & mask;
}

/* Narrow formats: widen, pre-multiply with rounding to the format, combine
 * in fp32 in source order, round once. */
static uint32_t ref_narrow_elem(const fmt_t *f, int fn, double scalar,
                                const uint32_t *codes, int nsrc, uint32_t pre) {
  float acc = 0;
  for (int s = 0; s < nsrc; s++) {
    float v = (float)ref_decode(f, codes[s]);
    if (pre >> s & 1) v = (float)ref_decode(f, ref_encode(f, (double)(v * (float)scalar)));
    if (s == 0) {
      acc = v;
      continue;
    }
    switch (fn) {
    case BRD_REDUCE_FN_PROD: acc = acc * v; break;
    case BRD_REDUCE_FN_MIN: acc = (float)ref_min(acc, v); break;
    case BRD_REDUCE_FN_MAX: acc = (float)ref_max(acc, v); break;
    default: acc = acc + v; break;
    }
  }
  return ref_encode(f, acc);
}

static void test_random_all(void **state) {
  (void)state;
  static const size_t lens[] = {0, 1, 255, 256, 257, 777};
  static const int nsrcs[] = {1, 2, 3, 7, 17};
  const int redops[6] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg, BRD_REDOP_PREMULSUM};
  enum { MAXN = 777, MAXS = 17 };
  uint64_t *raw = malloc(sizeof(uint64_t) * MAXN * MAXS);
  uint64_t *out = malloc(sizeof(uint64_t) * (MAXN + 1));
  assert_non_null(raw);
  assert_non_null(out);
  for (int dt = 0; dt < ncclNumTypes; dt++) {
    size_t es = brd_reduce_dtype_size(dt);
    const fmt_t *f = fmt_of(dt);
    for (int oi = 0; oi < 6; oi++) {
      for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        for (size_t si = 0; si < sizeof(nsrcs) / sizeof(nsrcs[0]); si++) {
          size_t n = lens[li];
          int ns = nsrcs[si];
          int nranks = ns;
          /* Sources: random codes (finite ones for the float formats). */
          for (int s = 0; s < ns; s++) {
            for (size_t i = 0; i < n; i++) {
              uint64_t v = rnd();
              char *p = (char *)raw + ((size_t)s * MAXN + i) * es;
              if (dt == ncclFloat32) {
                float fv = (float)((int64_t)(v % 2001) - 1000) / 8;
                memcpy(p, &fv, 4);
              } else if (dt == ncclFloat64) {
                double dv = (double)((int64_t)(v % 200001) - 100000) / 64;
                memcpy(p, &dv, 8);
              } else if (f != NULL) {
                uint32_t c;
                do {
                  c = (uint32_t)(v % f->ncodes);
                  v = rnd();
                } while (!isfinite(ref_decode(f, c)));
                memcpy(p, &c, es);
              } else {
                memcpy(p, &v, es);
              }
            }
          }
          uint64_t scalar = 0;
          if (redops[oi] == BRD_REDOP_PREMULSUM) {
            if (dt == ncclFloat32) {
              float sv = 0.75f;
              memcpy(&scalar, &sv, 4);
            } else if (dt == ncclFloat64) {
              double sv = -1.25;
              memcpy(&scalar, &sv, 8);
            } else if (f != NULL) {
              scalar = ref_encode(f, 0.75);
            } else {
              scalar = 0xfffffffffffffffdull; /* -3 in every width */
            }
          }
          brd_reduce_op_t op;
          assert_int_equal(brd_reduce_op_init(dt, redops[oi], nranks, &scalar, &op),
                           ncclSuccess);
          const void *srcs[MAXS];
          for (int s = 0; s < ns; s++) srcs[s] = (char *)raw + (size_t)s * MAXN * es;
          uint32_t pre = (uint32_t)rnd() | 1u;
          int post = 1;
          memset(out, 0xa5, sizeof(uint64_t) * (MAXN + 1));
          brd_reduce_host_apply(&op, out, srcs, ns, pre, post, n);
          for (size_t i = 0; i < n; i++) {
            uint64_t got = 0, want = 0;
            memcpy(&got, (char *)out + i * es, es);
            if (f == NULL && dt != ncclFloat32 && dt != ncclFloat64) {
              uint64_t x[MAXS];
              for (int s = 0; s < ns; s++) {
                x[s] = 0;
                memcpy(&x[s], (const char *)srcs[s] + i * es, es);
              }
              uint32_t pre_eff = op.fn == BRD_REDUCE_FN_PREMULSUM ? pre : 0;
              want = ref_int_elem(dt, redops[oi], scalar, nranks, x, ns, pre_eff, post);
            } else if (f != NULL) {
              uint32_t codes[MAXS];
              for (int s = 0; s < ns; s++) {
                codes[s] = 0;
                memcpy(&codes[s], (const char *)srcs[s] + i * es, es);
              }
              uint32_t sc = (uint32_t)op.arg;
              uint32_t pre_eff = op.fn == BRD_REDUCE_FN_PREMULSUM ? pre : 0;
              want = ref_narrow_elem(f, op.fn, ref_decode(f, sc), codes, ns, pre_eff);
            } else if (dt == ncclFloat32) {
              float acc = 0, sv;
              uint32_t sb = (uint32_t)op.arg;
              memcpy(&sv, &sb, 4);
              for (int s = 0; s < ns; s++) {
                float v = ((const float *)srcs[s])[i];
                if (op.fn == BRD_REDUCE_FN_PREMULSUM && (pre >> s & 1)) v = v * sv;
                if (s == 0) acc = v;
                else if (op.fn == BRD_REDUCE_FN_PROD) acc = acc * v;
                else if (op.fn == BRD_REDUCE_FN_MIN) acc = (float)ref_min(acc, v);
                else if (op.fn == BRD_REDUCE_FN_MAX) acc = (float)ref_max(acc, v);
                else acc = acc + v;
              }
              memcpy(&want, &acc, 4);
            } else {
              double acc = 0, sv;
              memcpy(&sv, &op.arg, 8);
              for (int s = 0; s < ns; s++) {
                double v = ((const double *)srcs[s])[i];
                if (op.fn == BRD_REDUCE_FN_PREMULSUM && (pre >> s & 1)) v = v * sv;
                if (s == 0) acc = v;
                else if (op.fn == BRD_REDUCE_FN_PROD) acc = acc * v;
                else if (op.fn == BRD_REDUCE_FN_MIN) acc = ref_min(acc, v);
                else if (op.fn == BRD_REDUCE_FN_MAX) acc = ref_max(acc, v);
                else acc = acc + v;
              }
              memcpy(&want, &acc, 8);
            }
            if (got != want) {
              print_error("dtype %d op %d n=%zu nsrc=%d element %zu: got 0x%llx, "
                          "expected 0x%llx\n", dt, redops[oi], n, ns, i,
                          (unsigned long long)got, (unsigned long long)want);
              fail();
            }
          }
          /* Nothing past the end. */
          if (((unsigned char *)out)[n * es] != 0xa5)
            print_error("dtype %d op %d n=%zu nsrc=%d wrote past the end\n", dt,
                        redops[oi], n, ns);
          assert_int_equal(((unsigned char *)out)[n * es], 0xa5);
        }
      }
    }
  }
  free(raw);
  free(out);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_known_patterns),
      cmocka_unit_test(test_exhaustive_roundtrip),
      cmocka_unit_test(test_exhaustive_rounding),
      cmocka_unit_test(test_random_rounding),
      cmocka_unit_test(test_op_init),
      cmocka_unit_test(test_int_cases),
      cmocka_unit_test(test_float_cases),
      cmocka_unit_test(test_random_all),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
