/*
 * Independent reference for collective tests; see coll_ref.h.
 */
#include "coll_ref.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

size_t ref_dtype_size(ncclDataType_t dt) {
  static const size_t s[ncclNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};
  return (int)dt >= 0 && dt < ncclNumTypes ? s[dt] : 0;
}

const char *ref_dtype_name(ncclDataType_t dt) {
  static const char *n[ncclNumTypes] = {"int8", "uint8", "int32", "uint32",
                                        "int64", "uint64", "half", "float",
                                        "double", "bfloat16", "f8e4m3", "f8e5m2"};
  return (int)dt >= 0 && dt < ncclNumTypes ? n[dt] : "?";
}

const char *ref_op_name(ncclRedOp_t op) {
  static const char *n[] = {"sum", "prod", "max", "min", "avg"};
  return (int)op >= 0 && op < ncclNumOps ? n[op] : "premulsum";
}

int ref_dtype_is_float(ncclDataType_t dt) {
  return dt == ncclFloat16 || dt == ncclFloat32 || dt == ncclFloat64 ||
         dt == ncclBfloat16 || dt == ncclFloat8e4m3 || dt == ncclFloat8e5m2;
}

/* Binary floating formats: exponent bits, mantissa bits. */
static void fmt(ncclDataType_t dt, int *ebits, int *mbits) {
  switch (dt) {
  case ncclFloat16: *ebits = 5; *mbits = 10; return;
  case ncclBfloat16: *ebits = 8; *mbits = 7; return;
  case ncclFloat8e4m3: *ebits = 4; *mbits = 3; return;
  case ncclFloat8e5m2: *ebits = 5; *mbits = 2; return;
  default: *ebits = 0; *mbits = 0; return;
  }
}

/* Encodes a finite value with round-to-nearest-even; no NaN/Inf handling
 * is needed for the values tests use (e4m3 tops out at 448). */
static uint32_t encode_small(double v, int ebits, int mbits) {
  uint32_t sign = v < 0 ? 1u : 0u;
  double a = fabs(v);
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t bits;
  if (a == 0) {
    bits = 0;
  } else {
    int e;
    frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
    int exp = e - 1; /* a = 1.x * 2^exp */
    if (exp < 1 - bias) exp = 1 - bias; /* subnormal range */
    double scaled = ldexp(a, mbits - exp); /* mantissa incl. hidden bit */
    double r = nearbyint(scaled);           /* ties to even (default mode) */
    uint64_t m = (uint64_t)r;
    if (m >= (2ull << mbits)) { m >>= 1; exp++; }
    uint32_t biased = m >= (1ull << mbits) ? (uint32_t)(exp + bias) : 0u;
    bits = (biased << mbits) | (uint32_t)(m & ((1ull << mbits) - 1));
  }
  return (sign << (ebits + mbits)) | bits;
}

static double decode_small(uint32_t bits, int ebits, int mbits) {
  int bias = (1 << (ebits - 1)) - 1;
  uint32_t sign = (bits >> (ebits + mbits)) & 1u;
  uint32_t e = (bits >> mbits) & ((1u << ebits) - 1);
  uint32_t m = bits & ((1u << mbits) - 1);
  double v = e == 0 ? ldexp((double)m, 1 - bias - mbits)
                    : ldexp((double)(m | (1u << mbits)), (int)e - bias - mbits);
  return sign ? -v : v;
}

void ref_store(ncclDataType_t dt, void *buf, size_t i, double v) {
  int eb, mb;
  switch (dt) {
  case ncclInt8: ((int8_t *)buf)[i] = (int8_t)(int64_t)v; return;
  case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)(uint64_t)(int64_t)v; return;
  case ncclInt32: ((int32_t *)buf)[i] = (int32_t)(int64_t)v; return;
  case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)(int64_t)v; return;
  case ncclInt64: ((int64_t *)buf)[i] = (int64_t)v; return;
  case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)(int64_t)v; return;
  case ncclFloat32: ((float *)buf)[i] = (float)v; return;
  case ncclFloat64: ((double *)buf)[i] = v; return;
  case ncclFloat16: case ncclBfloat16:
    fmt(dt, &eb, &mb);
    ((uint16_t *)buf)[i] = (uint16_t)encode_small(v, eb, mb);
    return;
  case ncclFloat8e4m3: case ncclFloat8e5m2:
    fmt(dt, &eb, &mb);
    ((uint8_t *)buf)[i] = (uint8_t)encode_small(v, eb, mb);
    return;
  default: return;
  }
}

double ref_load(ncclDataType_t dt, const void *buf, size_t i) {
  int eb, mb;
  switch (dt) {
  case ncclInt8: return ((const int8_t *)buf)[i];
  case ncclUint8: return ((const uint8_t *)buf)[i];
  case ncclInt32: return ((const int32_t *)buf)[i];
  case ncclUint32: return ((const uint32_t *)buf)[i];
  case ncclInt64: return (double)((const int64_t *)buf)[i];
  case ncclUint64: return (double)((const uint64_t *)buf)[i];
  case ncclFloat32: return ((const float *)buf)[i];
  case ncclFloat64: return ((const double *)buf)[i];
  case ncclFloat16: case ncclBfloat16:
    fmt(dt, &eb, &mb);
    return decode_small(((const uint16_t *)buf)[i], eb, mb);
  case ncclFloat8e4m3: case ncclFloat8e5m2:
    fmt(dt, &eb, &mb);
    return decode_small(((const uint8_t *)buf)[i], eb, mb);
  default: return 0;
  }
}

double ref_input_value(ncclDataType_t dt, ncclRedOp_t op, int rank, size_t i) {
  size_t h = i * 2654435761u + (size_t)rank * 40503u;
  if (op == ncclProd) return 1 + (double)((h >> 7) % 2 == 0 && (i + rank) % 3 == 0);
  if (dt == ncclFloat8e5m2) return (double)((i + (size_t)rank) % 3 != 0);
  if (dt == ncclFloat8e4m3) return 1 + (double)((h >> 5) % 2);
  return 1 + (double)((h >> 5) % 5);
}

void ref_fill_input(ncclDataType_t dt, ncclRedOp_t op, int rank, void *buf,
                    size_t n) {
  for (size_t i = 0; i < n; i++) ref_store(dt, buf, i, ref_input_value(dt, op, rank, i));
}

void ref_poison(ncclDataType_t dt, void *buf, size_t n) {
  memset(buf, 0xA5, n * ref_dtype_size(dt));
}

void ref_reduce_expect(ncclDataType_t dt, ncclRedOp_t op, int nranks,
                       double scalar, void *expect, size_t n) {
  ref_reduce_expect_range(dt, op, nranks, scalar, expect, 0, n);
}

void ref_reduce_expect_range(ncclDataType_t dt, ncclRedOp_t op, int nranks,
                             double scalar, void *out, size_t first,
                             size_t n) {
  int is_int = !ref_dtype_is_float(dt);
  size_t es = ref_dtype_size(dt);
  for (size_t i = first; i < first + n; i++) {
    /* Integers wrap modulo 2^bits in any order, so reduce in uint64. */
    uint64_t iacc = 0;
    double acc = 0;
    for (int r = 0; r < nranks; r++) {
      double v = ref_input_value(dt, op, r, i);
      uint64_t iv = (uint64_t)(int64_t)v;
      switch (op) {
      case ncclSum: case ncclAvg:
        acc = r ? acc + v : v; iacc = r ? iacc + iv : iv; break;
      case ncclProd:
        acc = r ? acc * v : v; iacc = r ? iacc * iv : iv; break;
      case ncclMax:
        acc = r ? (v > acc ? v : acc) : v; iacc = (uint64_t)(int64_t)acc; break;
      case ncclMin:
        acc = r ? (v < acc ? v : acc) : v; iacc = (uint64_t)(int64_t)acc; break;
      default: /* PreMulSum */
        acc = r ? acc + v * scalar : v * scalar;
        iacc = r ? iacc + iv * (uint64_t)(int64_t)scalar : iv * (uint64_t)(int64_t)scalar;
        break;
      }
    }
    if (is_int) {
      if (op == ncclAvg) {
        /* NCCL: sum, then divide (in the type, truncating). */
        uint64_t mask = es == 8 ? ~0ull : ((1ull << (8 * es)) - 1);
        uint64_t s = iacc & mask;
        int is_signed = dt == ncclInt8 || dt == ncclInt32 || dt == ncclInt64;
        if (is_signed) {
          int64_t sv = es == 8 ? (int64_t)s
                               : (int64_t)(s << (64 - 8 * es)) >> (64 - 8 * es);
          ref_store(dt, out, i - first, (double)(sv / nranks));
        } else {
          ref_store(dt, out, i - first, (double)(s / (uint64_t)nranks));
        }
      } else {
        memcpy((char *)out + (i - first) * es, &iacc, es); /* little-endian truncation */
      }
    } else {
      if (op == ncclAvg) acc /= nranks;
      ref_store(dt, out, i - first, acc);
    }
  }
}

/* Ordinal of a float bit pattern, so adjacent values differ by 1. */
static int64_t ordinal(ncclDataType_t dt, const void *buf, size_t i) {
  int64_t b, signbit;
  switch (ref_dtype_size(dt)) {
  case 1: b = ((const uint8_t *)buf)[i]; signbit = 0x80; break;
  case 2: b = ((const uint16_t *)buf)[i]; signbit = 0x8000; break;
  case 4: b = ((const uint32_t *)buf)[i]; signbit = 0x80000000ll; break;
  default: {
    uint64_t u;
    memcpy(&u, (const char *)buf + 8 * i, 8);
    int64_t s = (int64_t)u;
    return s < 0 ? INT64_MIN - s : s;
  }
  }
  return (b & signbit) ? -(b & (signbit - 1)) : b;
}

size_t ref_compare(ncclDataType_t dt, int tolerant, const void *got,
                   const void *expect, size_t n, char *msg, size_t msglen) {
  size_t es = ref_dtype_size(dt), wrong = 0;
  for (size_t i = 0; i < n; i++) {
    int ok;
    if (tolerant && ref_dtype_is_float(dt)) {
      int64_t d = ordinal(dt, got, i) - ordinal(dt, expect, i);
      ok = d >= -2 && d <= 2;
    } else {
      ok = memcmp((const char *)got + i * es, (const char *)expect + i * es, es) == 0;
    }
    if (!ok) {
      if (wrong == 0 && msg != NULL)
        snprintf(msg, msglen, "element %zu: got %g, expected %g", i,
                 ref_load(dt, got, i), ref_load(dt, expect, i));
      wrong++;
    }
  }
  return wrong;
}

double ref_move_value(ncclDataType_t dt, int rank, int seg, size_t i) {
  size_t h = (i + 1) * 2654435761u ^ ((size_t)rank * 97u + (size_t)seg * 13u);
  switch (dt) {
  case ncclFloat8e4m3: case ncclFloat8e5m2:
    /* Small integers both fp8 formats hold exactly (up to 16). */
    return (double)(1 + (rank * 5 + seg * 3 + (int)(i % 11) + (int)(h % 3)) % 16);
  case ncclInt8: case ncclUint8:
    return (double)(1 + (rank * 37 + seg * 11 + (int)(i % 97) + (int)(h % 5)) % 120);
  case ncclFloat16: case ncclBfloat16:
    /* Integers up to 256 are exact in both. */
    return (double)(1 + (rank * 41 + seg * 7 + (int)(i % 101) + (int)(h % 7)) % 250);
  default:
    return (double)(1 + (size_t)rank * 100003u + (size_t)seg * 1009u + i % 100000u);
  }
}

void ref_fill_move(ncclDataType_t dt, int rank, int seg, void *buf, size_t n) {
  for (size_t i = 0; i < n; i++) ref_store(dt, buf, i, ref_move_value(dt, rank, seg, i));
}

size_t ref_check_move(ncclDataType_t dt, int rank, int seg, const void *buf,
                      size_t n, char *msg, size_t msglen) {
  size_t es = ref_dtype_size(dt), wrong = 0;
  unsigned char want[8];
  for (size_t i = 0; i < n; i++) {
    ref_store(dt, want, 0, ref_move_value(dt, rank, seg, i));
    if (memcmp((const char *)buf + i * es, want, es) == 0) continue;
    if (wrong == 0 && msg != NULL)
      snprintf(msg, msglen, "element %zu of rank %d's segment %d: got %g, "
               "expected %g", i, rank, seg, ref_load(dt, buf, i),
               ref_move_value(dt, rank, seg, i));
    wrong++;
  }
  return wrong;
}

size_t ref_count_poison(ncclDataType_t dt, const void *buf, size_t n) {
  size_t es = ref_dtype_size(dt), count = 0;
  for (size_t i = 0; i < n; i++) {
    const unsigned char *b = (const unsigned char *)buf + i * es;
    size_t k = 0;
    while (k < es && b[k] == 0xA5) k++;
    count += k == es;
  }
  return count;
}

/* See coll_ref.h. */
void ref_case_fill(ref_kind_t k, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t c,
                   int inplace, char *mem, char *other, const void **send, void **recv) {
  size_t es = ref_dtype_size(dt), nc = (size_t)n * c;
  switch (k) {
  case REF_AR:
    ref_fill_input(dt, op, r, mem, c);
    *send = mem;
    *recv = inplace ? mem : other;
    if (!inplace) ref_poison(dt, other, c);
    break;
  case REF_AG:
    ref_poison(dt, mem, nc);
    *recv = mem;
    *send = inplace ? mem + (size_t)r * c * es : other;
    ref_fill_move(dt, r, 0, (void *)*send, c);
    break;
  case REF_RS:
    ref_fill_input(dt, op, r, mem, nc);
    *send = mem;
    *recv = inplace ? mem + (size_t)r * c * es : other;
    if (!inplace) ref_poison(dt, other, c);
    break;
  }
}

/* See coll_ref.h. */
size_t ref_case_check(ref_kind_t k, ncclDataType_t dt, ncclRedOp_t op, int r, int n, size_t c,
                      const void *recv, void *expect, char *msg, size_t mlen) {
  size_t es = ref_dtype_size(dt), wrong = 0;
  if (k == REF_AG) {
    for (int q = 0; q < n && !wrong; q++)
      wrong = ref_check_move(dt, q, 0, (const char *)recv + (size_t)q * c * es, c, msg, mlen);
    return wrong;
  }
  if (k == REF_AR) ref_reduce_expect(dt, op, n, 1.0, expect, c);
  else ref_reduce_expect_range(dt, op, n, 1.0, expect, (size_t)r * c, c);
  return ref_compare(dt, op == ncclAvg, recv, expect, c, msg, mlen);
}
