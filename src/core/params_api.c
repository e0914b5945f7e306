/*
 * Braid: NCCL 2.30's parameter API (ncclParamBind, ncclParamGet*,
 * ncclParamGetParameter, ncclParamGetAllParameterKeys, ncclParamDumpAll)
 * over the library's one parameter table (base/param_table.h).
 *
 * Keys are the variables' names ("NCCL_BUFFSIZE"), as in NCCL. Each knob
 * has one type: an integer knob is a 64-bit signed integer (NCCL declares
 * its integer knobs int64_t), a text knob a C string. As in NCCL, a typed
 * getter succeeds only for the knob's own type; ncclParamGetStr only for
 * text knobs; ncclParamGet copies the value's bytes (8 for an integer, the
 * text with its terminating NUL for a string) and ncclParamGetParameter
 * gives any value as text. An integer knob without a value (NCCL's
 * "automatic", e.g. NCCL_MIN_CTAS unset) reads as NCCL_CONFIG_UNDEF_INT,
 * which is NCCL's default for those knobs.
 *
 * By default the key table lists the NCCL_* knobs; NCCL_PARAM_DUMP_ALL=true
 * (or 1) adds the BRAID_* ones, as NCCL adds its unpublished knobs.
 *
 * Handles point into a static table and never change. Values are read at
 * each call from base/param.c, which caches them until ncclResetDebugInit.
 * Every call: any thread, never blocks.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/check.h"
#include "base/param.h"
#include "core/api.h"

struct ncclParamHandle {
  brd_param_id_t id;
};

static const struct ncclParamHandle param_handles[BRD_P_COUNT] = {
#define BRD_PARAM(id, name, kind, def, desc) [BRD_P_##id] = {BRD_P_##id},
#include "base/param_table.h"
#undef BRD_PARAM
};

/* Room for an integer's text, or a pointer to a string's. */
static _Thread_local char param_text[32];

static const char *kind_name(brd_param_kind_t kind) {
  return kind == BRD_PARAM_INT ? "a 64-bit integer (read it with ncclParamGetI64)"
                               : "text (read it with ncclParamGetStr)";
}

/* The handle's knob, or ncclInvalidArgument for a handle not from
 * ncclParamBind. */
static ncclResult_t handle_id(ncclParamHandle_t h, const char *fn,
                              brd_param_id_t *id_out) {
  if (h == NULL) {
    WARN("%s : the handle is NULL; get one from ncclParamBind", fn);
    return ncclInvalidArgument;
  }
  const struct ncclParamHandle *p = h;
  if (p < param_handles || p >= param_handles + BRD_P_COUNT) {
    WARN("%s : handle %p did not come from ncclParamBind", fn, (void *)h);
    return ncclInvalidArgument;
  }
  *id_out = p->id;
  return ncclSuccess;
}

/* An integer knob's value in force (NCCL_CONFIG_UNDEF_INT when it has
 * none). */
static int64_t int_value(brd_param_id_t id) {
  int64_t v = brd_param_int(id);
  return v == BRD_PARAM_UNSET ? NCCL_CONFIG_UNDEF_INT : v;
}

/* The value as text; an integer's lives in this thread's param_text until
 * the next call, a string's as long as the process. Unset text is "". */
static const char *value_text(brd_param_id_t id) {
  if (brd_param_table[id].kind == BRD_PARAM_INT) {
    snprintf(param_text, sizeof(param_text), "%" PRId64, int_value(id));
    return param_text;
  }
  const char *s = brd_param_str(id);
  return s != NULL ? s : "";
}

static int key_listed(brd_param_id_t id, int all) {
  return all || strncmp(brd_param_table[id].name, "NCCL_", 5) == 0;
}

static int dump_all(void) {
  const char *v = brd_param_str(BRD_P_PARAM_DUMP_ALL);
  return v != NULL && (strcasecmp(v, "true") == 0 || strcmp(v, "1") == 0);
}

/* See nccl.h. */
BRD_API(ncclResult_t, ncclParamBind, ncclParamHandle_t *out, const char *key)
ncclResult_t pncclParamBind(ncclParamHandle_t *out, const char *key) {
  ARG_NOT_NULL(out, "ncclParamBind");
  ARG_NOT_NULL(key, "ncclParamBind");
  for (int i = 0; i < BRD_P_COUNT; i++) {
    if (strcmp(brd_param_table[i].name, key) == 0) {
      *out = (ncclParamHandle_t)&param_handles[i];
      return ncclSuccess;
    }
  }
  WARN("ncclParamBind : no parameter is named \"%s\"; keys are variable names "
       "such as NCCL_BUFFSIZE (ncclParamGetAllParameterKeys lists them)", key);
  return ncclInvalidArgument;
}

/* One typed getter: only the 64-bit signed one matches an integer knob. */
#define PARAM_GETTER(suffix, ctype, is_i64)                                   \
  BRD_API(ncclResult_t, ncclParamGet##suffix, ncclParamHandle_t h,            \
          ctype *out)                                                         \
  ncclResult_t pncclParamGet##suffix(ncclParamHandle_t h, ctype *out) {       \
    static const char fn[] = "ncclParamGet" #suffix;                         \
    brd_param_id_t id;                                                        \
    CHECK(handle_id(h, fn, &id));                                             \
    ARG_NOT_NULL(out, fn);                                                    \
    if (!(is_i64) || brd_param_table[id].kind != BRD_PARAM_INT) {            \
      WARN("%s : %s is %s, not " #ctype, fn, brd_param_table[id].name,        \
           kind_name(brd_param_table[id].kind));                             \
      return ncclInvalidArgument;                                             \
    }                                                                         \
    *out = (ctype)int_value(id);                                              \
    return ncclSuccess;                                                       \
  }

PARAM_GETTER(I8, int8_t, 0)
PARAM_GETTER(I16, int16_t, 0)
PARAM_GETTER(I32, int32_t, 0)
PARAM_GETTER(I64, int64_t, 1)
PARAM_GETTER(U8, uint8_t, 0)
PARAM_GETTER(U16, uint16_t, 0)
PARAM_GETTER(U32, uint32_t, 0)
PARAM_GETTER(U64, uint64_t, 0)

/* A text knob's value, NULL when it is unset (as NCCL answers). */
BRD_API(ncclResult_t, ncclParamGetStr, ncclParamHandle_t h, const char **out)
ncclResult_t pncclParamGetStr(ncclParamHandle_t h, const char **out) {
  brd_param_id_t id;
  CHECK(handle_id(h, "ncclParamGetStr", &id));
  ARG_NOT_NULL(out, "ncclParamGetStr");
  if (brd_param_table[id].kind != BRD_PARAM_STR) {
    WARN("ncclParamGetStr : %s is %s", brd_param_table[id].name,
         kind_name(brd_param_table[id].kind));
    return ncclInvalidArgument;
  }
  *out = brd_param_str(id);
  return ncclSuccess;
}

/* The value's bytes: an int64_t, or the text with its NUL ("" when unset). */
BRD_API(ncclResult_t, ncclParamGet, ncclParamHandle_t h, void *out, int maxLen,
        int *len)
ncclResult_t pncclParamGet(ncclParamHandle_t h, void *out, int maxLen, int *len) {
  brd_param_id_t id;
  int64_t v;
  const void *bytes;
  size_t n;
  CHECK(handle_id(h, "ncclParamGet", &id));
  ARG_NOT_NULL(out, "ncclParamGet");
  ARG_NOT_NULL(len, "ncclParamGet");
  if (brd_param_table[id].kind == BRD_PARAM_INT) {
    v = int_value(id);
    bytes = &v;
    n = sizeof(v);
  } else {
    bytes = value_text(id);
    n = strlen(bytes) + 1;
  }
  if (n > INT32_MAX) n = INT32_MAX;
  *len = (int)n;
  if (maxLen < 0 || (size_t)maxLen < n) {
    WARN("ncclParamGet : %s needs %zu bytes, the buffer has %d", brd_param_table[id].name,
         n, maxLen);
    return ncclInvalidArgument;
  }
  memcpy(out, bytes, n);
  return ncclSuccess;
}

/* See nccl.h. */
BRD_API(ncclResult_t, ncclParamGetParameter, const char *key, const char **value,
        int *valueLen)
ncclResult_t pncclParamGetParameter(const char *key, const char **value, int *valueLen) {
  ncclParamHandle_t h;
  brd_param_id_t id;
  ARG_NOT_NULL(value, "ncclParamGetParameter");
  ARG_NOT_NULL(valueLen, "ncclParamGetParameter");
  CHECK(pncclParamBind(&h, key));
  CHECK(handle_id(h, "ncclParamGetParameter", &id));
  const char *text = value_text(id);
  *value = text;
  *valueLen = (int)strlen(text);
  return ncclSuccess;
}

/* The key table is rebuilt per thread at each call (NCCL_PARAM_DUMP_ALL
 * may change between calls); the strings themselves are static. */
static _Thread_local const char *param_keys[BRD_P_COUNT];

BRD_API(ncclResult_t, ncclParamGetAllParameterKeys, const char ***table, int *tableLen)
ncclResult_t pncclParamGetAllParameterKeys(const char ***table, int *tableLen) {
  int n = 0, all;
  ARG_NOT_NULL(table, "ncclParamGetAllParameterKeys");
  ARG_NOT_NULL(tableLen, "ncclParamGetAllParameterKeys");
  all = dump_all();
  for (int i = 0; i < BRD_P_COUNT; i++)
    if (key_listed((brd_param_id_t)i, all)) param_keys[n++] = brd_param_table[i].name;
  *table = param_keys;
  *tableLen = n;
  return ncclSuccess;
}

/* One INFO/ENV line per knob: name, type, value, default, description. */
BRD_API(void, ncclParamDumpAll, void)
void pncclParamDumpAll(void) {
  int all = dump_all();
  for (int i = 0; i < BRD_P_COUNT; i++) {
    const brd_param_info_t *info = &brd_param_table[i];
    if (!key_listed((brd_param_id_t)i, all)) continue;
    INFO(BRD_SUBSYS_ENV, "%s (%s) %s; current value=%s default=%s", info->name,
         info->kind == BRD_PARAM_INT ? "int64" : "string", info->desc,
         value_text((brd_param_id_t)i), info->def != NULL ? info->def : "(unset)");
  }
}
