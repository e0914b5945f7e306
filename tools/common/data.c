/*
 * Braid benchmarks: element types, input patterns and the CPU reference.
 * See data.h for why the patterns make every reduction order-independent.
 */
#include <math.h>
#include <string.h>

#include "data.h"

const char *const brd_perf_type_names[BRD_PERF_NTYPES] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64",
    "half", "float", "double", "bfloat16", "f8e4m3", "f8e5m2"};

const char *const brd_perf_op_names[BRD_PERF_NOPS] = {
    "sum", "prod", "max", "min", "avg", "mulsum"};

/* A narrow binary floating-point format: exponent and mantissa widths, bias,
 * and whether the all-ones exponent means infinity/NaN (IEEE) or, as in
 * OCP e4m3, only S.1111.111 is NaN and there is no infinity. */
typedef struct {
  int ebits;
  int mbits;
  int bias;
  int ieee;
} minifloat_t;

static const minifloat_t fmt_half = {5, 10, 15, 1};
static const minifloat_t fmt_bf16 = {8, 7, 127, 1};
static const minifloat_t fmt_e4m3 = {4, 3, 7, 0};
static const minifloat_t fmt_e5m2 = {5, 2, 15, 1};

static const minifloat_t *minifloat(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclFloat16: return &fmt_half;
  case ncclBfloat16: return &fmt_bf16;
  case ncclFloat8e4m3: return &fmt_e4m3;
  case ncclFloat8e5m2: return &fmt_e5m2;
  default: return NULL;
  }
}

/* See data.h. */
size_t brd_perf_type_size(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2:
    return 1;
  case ncclFloat16: case ncclBfloat16:
    return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32:
    return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64:
    return 8;
  default:
    return 0;
  }
}

static int is_float_type(ncclDataType_t dtype) {
  return dtype == ncclFloat16 || dtype == ncclFloat32 ||
         dtype == ncclFloat64 || dtype == ncclBfloat16 ||
         dtype == ncclFloat8e4m3 || dtype == ncclFloat8e5m2;
}

static int is_signed_type(ncclDataType_t dtype) {
  return dtype == ncclInt8 || dtype == ncclInt32 || dtype == ncclInt64 ||
         is_float_type(dtype);
}

/* See data.h. */
int brd_perf_type_parse(const char *name) {
  if (strcmp(name, "all") == 0) return -1;
  for (int i = 0; i < BRD_PERF_NTYPES; i++)
    if (strcmp(name, brd_perf_type_names[i]) == 0) return i;
  return -2;
}

/* See data.h. */
int brd_perf_op_parse(const char *name) {
  if (strcmp(name, "all") == 0) return -1;
  for (int i = 0; i < BRD_PERF_NOPS; i++)
    if (strcmp(name, brd_perf_op_names[i]) == 0) return i;
  return -2;
}

static double minifloat_decode(const minifloat_t *f, uint64_t bits) {
  int sign = (int)((bits >> (f->ebits + f->mbits)) & 1);
  uint64_t emax = (1u << f->ebits) - 1;
  uint64_t e = (bits >> f->mbits) & emax;
  uint64_t m = bits & ((1u << f->mbits) - 1);
  double v;
  if (e == emax && f->ieee) {
    v = m == 0 ? INFINITY : NAN;
  } else if (e == emax && m == (1u << f->mbits) - 1) {
    v = NAN;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  } else {
    v = ldexp((double)(m | (1u << f->mbits)), (int)e - f->bias - f->mbits);
  }
  return sign ? -v : v;
}

static uint64_t minifloat_encode(const minifloat_t *f, double v) {
  uint64_t sign = (uint64_t)(signbit(v) ? 1 : 0) << (f->ebits + f->mbits);
  uint64_t emax = (1u << f->ebits) - 1;
  uint64_t one = 1u << f->mbits;
  double a = fabs(v);
  if (isnan(v)) return f->ieee ? (emax << f->mbits) | (one >> 1) : (emax << f->mbits) | (one - 1);
  if (a == 0) return sign;
  /* Largest finite: IEEE keeps the top exponent for inf/NaN; e4m3 keeps
   * only its all-ones mantissa for NaN. */
  uint64_t top_e = f->ieee ? emax - 1 : emax;
  uint64_t top_m = f->ieee ? one - 1 : one - 2;
  int ex;
  (void)frexp(a, &ex);
  int e = ex - 1; /* a is in [2^e, 2^(e+1)) */
  int emin = 1 - f->bias;
  if (isinf(a) || e > (int)top_e - f->bias) goto overflow;
  if (e < emin) {
    /* Subnormal; a carry into 2^mbits is the smallest normal's encoding. */
    double q = nearbyint(ldexp(a, f->mbits - emin));
    return sign | (uint64_t)q;
  }
  double q = nearbyint(ldexp(a, f->mbits - e));
  if (q >= (double)(2 * one)) {
    q = (double)one;
    e++;
  }
  uint64_t ef = (uint64_t)(e + f->bias);
  uint64_t mf = (uint64_t)q - one;
  if (ef > top_e || (ef == top_e && mf > top_m)) goto overflow;
  return sign | (ef << f->mbits) | mf;
overflow:
  if (f->ieee) return sign | (emax << f->mbits);
  return sign | (top_e << f->mbits) | top_m;
}

/* See data.h. */
double brd_perf_bits_to_double(ncclDataType_t dtype, uint64_t bits) {
  const minifloat_t *f = minifloat(dtype);
  if (f != NULL) return minifloat_decode(f, bits);
  if (dtype == ncclFloat32) {
    uint32_t b = (uint32_t)bits;
    float x;
    memcpy(&x, &b, sizeof(x));
    return x;
  }
  if (dtype == ncclFloat64) {
    double x;
    memcpy(&x, &bits, sizeof(x));
    return x;
  }
  return 0.0;
}

/* See data.h. */
uint64_t brd_perf_double_to_bits(ncclDataType_t dtype, double v) {
  const minifloat_t *f = minifloat(dtype);
  if (f != NULL) return minifloat_encode(f, v);
  if (dtype == ncclFloat32) {
    float x = (float)v;
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    return b;
  }
  if (dtype == ncclFloat64) {
    uint64_t b;
    memcpy(&b, &v, sizeof(b));
    return b;
  }
  return 0;
}

/* Values: integers are kept as int64 and truncated on the way out. */
static uint64_t value_bits(const brd_perf_gen_t *g, long v) {
  if (g->is_float) return brd_perf_double_to_bits(g->dtype, (double)v);
  return (uint64_t)(int64_t)v & g->mask;
}

static int64_t sign_extend(const brd_perf_gen_t *g, uint64_t bits) {
  if (g->esize == 8) return (int64_t)bits;
  uint64_t top = 1ull << (8 * g->esize - 1);
  return (int64_t)((bits ^ top) - top);
}

/* Largest M such that every integer in [0, M] is exact in dtype and no sum
 * up to M collides with the poison pattern. */
static long exact_limit(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: return 127;
  case ncclUint8: return 254;
  case ncclFloat16: return 2048;
  case ncclBfloat16: return 256;
  case ncclFloat8e4m3: return 16;
  case ncclFloat8e5m2: return 8;
  default: return 1L << 24;
  }
}

/* Most factors of 2 one product may hold and stay exact and in range. */
static long max_doublings(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: return 6;
  case ncclUint8: return 7;
  case ncclFloat16: return 15;
  case ncclFloat8e4m3: return 8;
  case ncclFloat8e5m2: return 15;
  default: return 30;
  }
}

static long min_max_range(ncclDataType_t dtype) {
  switch (dtype) {
  case ncclInt8: return 60;
  case ncclUint8: return 150;
  case ncclFloat8e4m3: return 200;
  default: return 1000;
  }
}

/* See data.h. */
unsigned char brd_perf_poison_byte(ncclDataType_t dtype) {
  /* Floats: all ones is a NaN in every format. int8: -128 and the 0x80...
   * pattern of wider signed types are far below any value used. Unsigned:
   * the maximum, which sums stop short of. */
  switch (dtype) {
  case ncclInt8: case ncclInt32: case ncclInt64: return 0x80;
  default: return 0xff;
  }
}

/* See data.h. */
void brd_perf_gen_init(brd_perf_gen_t *g, ncclDataType_t dtype, int op,
                       int nranks, uint64_t seed) {
  memset(g, 0, sizeof(*g));
  g->dtype = dtype;
  g->op = op;
  g->nranks = nranks;
  g->seed = seed;
  g->esize = brd_perf_type_size(dtype);
  g->is_float = is_float_type(dtype);
  g->is_signed = is_signed_type(dtype);
  g->mask = g->esize >= 8 ? ~0ull : (1ull << (8 * g->esize)) - 1;
  uint64_t p = brd_perf_poison_byte(dtype);
  for (size_t i = 0; i < g->esize; i++) g->poison |= p << (8 * i);
  g->scale = 1;

  long n = nranks, limit = exact_limit(dtype);
  if (op == ncclProd) {
    long d = max_doublings(dtype);
    g->stride = (n + d - 1) / d;
    if (g->stride < 2) g->stride = 2;
  } else if (op == ncclSum || op == ncclAvg || op == BRD_PERF_OP_MULSUM) {
    long weight = op == BRD_PERF_OP_MULSUM ? 2 : 1;
    if (op == ncclAvg && g->is_float && limit / (n * n) >= 1) {
      /* Multiples of nranks: the exact average is an integer, so a library
       * that pre-scales each input by 1/nranks still lands on it. */
      g->scale = n;
      g->span = limit / (n * n);
    } else if (limit / (n * weight) >= 1) {
      g->span = limit / (n * weight);
    } else {
      long per = limit / weight;
      g->stride = (n + per - 1) / per;
    }
    if (g->span > 251) g->span = 251;
  }
}

static uint64_t mix(uint64_t seed, int rank, size_t idx) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + (uint64_t)rank * 0xbf58476d1ce4e5b9ull +
               (uint64_t)idx;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* See data.h. */
uint64_t brd_perf_gen_input(const brd_perf_gen_t *g, int rank, size_t idx) {
  uint64_t h = mix(g->seed, rank, idx);
  long v;
  switch (g->op) {
  case BRD_PERF_OP_COPY: {
    uint64_t bits = h & g->mask;
    if (g->is_float) {
      /* Any finite pattern: clear the top exponent bit of inf/NaN ones. */
      int mbits = g->dtype == ncclFloat32 ? 23 : g->dtype == ncclFloat64 ? 52
                                                 : minifloat(g->dtype)->mbits;
      int ebits = (int)(8 * g->esize) - 1 - mbits;
      uint64_t emask = ((1ull << ebits) - 1) << mbits;
      if ((bits & emask) == emask) bits &= ~(1ull << (mbits + ebits - 1));
    }
    if (bits == g->poison) bits ^= 1;
    return bits;
  }
  case ncclProd:
    if ((uint64_t)((size_t)rank + idx) % (uint64_t)g->stride == 0) v = 2;
    else v = g->is_signed && h % 3 == 0 ? -1 : 1;
    break;
  case ncclMax: case ncclMin: {
    long r = min_max_range(g->dtype);
    if (!g->is_signed) {
      v = 1 + (long)(h % (uint64_t)r);
    } else {
      v = (long)(h % (uint64_t)(2 * r + 1)) - r;
      if (v == 0) v = r;
    }
    break;
  }
  default: /* sum, avg, mulsum */
    if (g->span > 0) v = 1 + (long)(h % (uint64_t)g->span);
    else v = (uint64_t)((size_t)rank + idx) % (uint64_t)g->stride == 0 ? 1 : 0;
    v *= g->scale;
    break;
  }
  return value_bits(g, v);
}

/* See data.h. */
uint64_t brd_perf_gen_scalar(const brd_perf_gen_t *g, int rank) {
  return value_bits(g, 1 + (rank & 1));
}

/* See data.h. */
uint64_t brd_perf_gen_reduce(const brd_perf_gen_t *g, size_t idx) {
  int n = g->nranks;
  if (g->is_float) {
    double acc = 0;
    for (int k = 0; k < n; k++) {
      double x = brd_perf_bits_to_double(g->dtype, brd_perf_gen_input(g, k, idx));
      if (g->op == BRD_PERF_OP_MULSUM) x *= 1 + (k & 1);
      if (k == 0) { acc = x; continue; }
      switch (g->op) {
      case ncclProd: acc *= x; break;
      case ncclMax: acc = x > acc ? x : acc; break;
      case ncclMin: acc = x < acc ? x : acc; break;
      default: acc += x; break;
      }
    }
    if (g->op == ncclAvg) acc /= n;
    return brd_perf_double_to_bits(g->dtype, acc);
  }
  uint64_t acc = 0;
  for (int k = 0; k < n; k++) {
    uint64_t in = brd_perf_gen_input(g, k, idx);
    uint64_t x = g->is_signed ? (uint64_t)sign_extend(g, in) : in;
    if (g->op == BRD_PERF_OP_MULSUM) x *= (uint64_t)(1 + (k & 1));
    if (k == 0) { acc = x; continue; }
    switch (g->op) {
    case ncclProd: acc *= x; break;
    case ncclMax:
      if (g->is_signed ? (int64_t)x > (int64_t)acc : x > acc) acc = x;
      break;
    case ncclMin:
      if (g->is_signed ? (int64_t)x < (int64_t)acc : x < acc) acc = x;
      break;
    default: acc += x; break;
    }
  }
  acc &= g->mask;
  if (g->op == ncclAvg) {
    /* Integer average: the wrapped sum in the type, divided, truncated. */
    if (g->is_signed) acc = (uint64_t)(sign_extend(g, acc) / n);
    else acc /= (uint64_t)n;
  }
  return acc & g->mask;
}

/* Sign-magnitude bits as a position on the number line, so neighbouring
 * floats differ by 1. */
static int64_t ordered(const brd_perf_gen_t *g, uint64_t bits) {
  uint64_t top = 1ull << (8 * g->esize - 1);
  int64_t mag = (int64_t)(bits & (top - 1));
  return (bits & top) ? -mag : mag;
}

/* See data.h. */
int brd_perf_gen_match(const brd_perf_gen_t *g, uint64_t got, uint64_t want) {
  got &= g->mask;
  want &= g->mask;
  if (got == want) return 1;
  if (!(g->op == ncclAvg && g->is_float)) return 0;
  int64_t d = ordered(g, got) - ordered(g, want);
  return d >= -2 && d <= 2;
}

/* See data.h. */
uint64_t brd_perf_elem_load(const void *buf, size_t esize, size_t idx) {
  const unsigned char *p = (const unsigned char *)buf + idx * esize;
  switch (esize) {
  case 1: return *p;
  case 2: { uint16_t v; memcpy(&v, p, 2); return v; }
  case 4: { uint32_t v; memcpy(&v, p, 4); return v; }
  default: { uint64_t v; memcpy(&v, p, 8); return v; }
  }
}

/* See data.h. */
void brd_perf_elem_store(void *buf, size_t esize, size_t idx, uint64_t bits) {
  unsigned char *p = (unsigned char *)buf + idx * esize;
  switch (esize) {
  case 1: *p = (unsigned char)bits; break;
  case 2: { uint16_t v = (uint16_t)bits; memcpy(p, &v, 2); break; }
  case 4: { uint32_t v = (uint32_t)bits; memcpy(p, &v, 4); break; }
  default: memcpy(p, &bits, 8); break;
  }
}
