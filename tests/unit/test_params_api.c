/*
 * NCCL 2.30's parameter API (core/params_api.c): every key round-trips a
 * value set in the environment through every way of reading it; defaults
 * from a hand-written table; NCCL's type rule (only the knob's own getter
 * works); unknown keys, bad handles and short buffers are errors with a
 * message; the key list and the dump.
 */
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "testenv.h"

#include "nccl.h"
#include "base/debug.h"
#include "base/param.h"


/* Removes every NCCL_* and BRAID_* variable and forgets cached values. */
static void clear_env(void) {
  brd_test_env_clear();
  /* No conf file of this machine may leak in. */
  setenv("NCCL_CONF_FILE", "/nonexistent/braid-test.conf", 1);
  brd_param_sysconf_set("/nonexistent/braid-test-sys.conf");
  brd_param_reload();
  brd_log_reset();
}

static int setup(void **state) {
  (void)state;
  clear_env();
  return 0;
}

static int last_error_has(const char *text) {
  return strstr(ncclGetLastError(NULL), text) != NULL;
}

/* Defaults, from the knobs' documented values (not from the table). */
static void test_defaults(void **state) {
  ncclParamHandle_t h;
  int64_t v = 0;
  const char *s = (const char *)1;
  int len = -1;
  (void)state;
  assert_int_equal(ncclParamBind(&h, "NCCL_BUFFSIZE"), ncclSuccess);
  assert_int_equal(ncclParamGetI64(h, &v), ncclSuccess);
  assert_int_equal(v, 4194304);
  assert_int_equal(ncclParamGetParameter("NCCL_BUFFSIZE", &s, &len), ncclSuccess);
  assert_string_equal(s, "4194304");
  assert_int_equal(len, 7);
  assert_int_equal(ncclParamBind(&h, "NCCL_LL_BUFFSIZE"), ncclSuccess);
  assert_int_equal(ncclParamGetI64(h, &v), ncclSuccess);
  assert_int_equal(v, 262144);
  /* A text knob with a default, and one without (NULL, as NCCL). */
  assert_int_equal(ncclParamBind(&h, "BRAID_DEVICE"), ncclSuccess);
  assert_int_equal(ncclParamGetStr(h, &s), ncclSuccess);
  assert_string_equal(s, "auto");
  assert_int_equal(ncclParamBind(&h, "NCCL_PROTO"), ncclSuccess);
  assert_int_equal(ncclParamGetStr(h, &s), ncclSuccess);
  assert_null(s);
  assert_int_equal(ncclParamGetParameter("NCCL_PROTO", &s, &len), ncclSuccess);
  assert_string_equal(s, "");
  assert_int_equal(len, 0);
  /* An integer knob with no value reads as NCCL_CONFIG_UNDEF_INT. */
  assert_int_equal(ncclParamBind(&h, "NCCL_MIN_CTAS"), ncclSuccess);
  assert_int_equal(ncclParamGetI64(h, &v), ncclSuccess);
  assert_int_equal(v, INT_MIN);
}

/* Each key gets its own value in the environment, then is read back by
 * handle (typed, raw), by key (text), with the value compared to what was
 * set. */
static void test_every_key_round_trips(void **state) {
  const char **keys = NULL;
  int n = 0, ints = 0, strs = 0;
  char value[64];
  (void)state;
  setenv("NCCL_PARAM_DUMP_ALL", "true", 1);
  brd_param_reload();
  assert_int_equal(ncclParamGetAllParameterKeys(&keys, &n), ncclSuccess);
  assert_true(n >= 40);
  /* Copy the names: the table belongs to the next call. */
  char (*names)[64] = calloc((size_t)n, sizeof(*names));
  assert_non_null(names);
  for (int i = 0; i < n; i++) snprintf(names[i], sizeof(names[i]), "%s", keys[i]);

  for (int i = 0; i < n; i++) {
    ncclParamHandle_t h;
    int64_t iv = 0;
    const char *s = NULL;
    int len = -1;
    char raw[128];
    assert_int_equal(ncclParamBind(&h, names[i]), ncclSuccess);
    /* Integer or text: exactly one of the two getters accepts it. */
    int is_int = ncclParamGetI64(h, &iv) == ncclSuccess;
    int is_str = ncclParamGetStr(h, &s) == ncclSuccess;
    assert_true(is_int != is_str);

    /* Values that keep logging quiet where the knob steers it. */
    if (strcmp(names[i], "NCCL_DEBUG_FILE") == 0)
      snprintf(value, sizeof(value), "/dev/null");
    else if (strcmp(names[i], "NCCL_CONF_FILE") == 0)
      snprintf(value, sizeof(value), "/nonexistent/conf-%d", i);
    else if (strcmp(names[i], "NCCL_PARAM_DUMP_ALL") == 0)
      snprintf(value, sizeof(value), "true");
    else if (is_int)
      snprintf(value, sizeof(value), "%d", 100003 + 7 * i);
    else
      snprintf(value, sizeof(value), "value-%d-of-%s", i, names[i]);
    setenv(names[i], value, 1);
    brd_param_reload();

    assert_int_equal(ncclParamGetParameter(names[i], &s, &len), ncclSuccess);
    assert_string_equal(s, value);
    assert_int_equal(len, (int)strlen(value));
    if (is_int) {
      ints++;
      assert_int_equal(ncclParamGetI64(h, &iv), ncclSuccess);
      assert_int_equal(iv, strtoll(value, NULL, 10));
      assert_int_equal(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
      assert_int_equal(len, 8);
      memcpy(&iv, raw, sizeof(iv));
      assert_int_equal(iv, strtoll(value, NULL, 10));
    } else {
      strs++;
      assert_int_equal(ncclParamGetStr(h, &s), ncclSuccess);
      assert_string_equal(s, value);
      assert_int_equal(ncclParamGet(h, raw, sizeof(raw), &len), ncclSuccess);
      assert_int_equal(len, (int)strlen(value) + 1);
      assert_string_equal(raw, value);
    }
  }
  assert_true(ints > 10);
  assert_true(strs > 10);
  free(names);
  clear_env();
}

/* NCCL_* keys by default; NCCL_PARAM_DUMP_ALL adds the BRAID_* ones. Every
 * key is listed once. */
static void test_key_list(void **state) {
  const char **keys = NULL;
  int n = 0, all = 0, buffsize = 0, device = 0;
  (void)state;
  assert_int_equal(ncclParamGetAllParameterKeys(&keys, &n), ncclSuccess);
  for (int i = 0; i < n; i++) {
    assert_int_equal(strncmp(keys[i], "NCCL_", 5), 0);
    buffsize += strcmp(keys[i], "NCCL_BUFFSIZE") == 0;
    for (int j = 0; j < i; j++) assert_string_not_equal(keys[i], keys[j]);
  }
  assert_int_equal(buffsize, 1);
  setenv("NCCL_PARAM_DUMP_ALL", "1", 1);
  brd_param_reload();
  assert_int_equal(ncclParamGetAllParameterKeys(&keys, &all), ncclSuccess);
  for (int i = 0; i < all; i++) device += strcmp(keys[i], "BRAID_DEVICE") == 0;
  assert_int_equal(device, 1);
  assert_true(all > n);
  assert_int_equal(all, BRD_P_COUNT);
  assert_int_equal(ncclParamGetAllParameterKeys(NULL, &n), ncclInvalidArgument);
  assert_int_equal(ncclParamGetAllParameterKeys(&keys, NULL), ncclInvalidArgument);
}

/* Only the knob's own type reads; the message names the right getter. */
static void test_type_rule(void **state) {
  ncclParamHandle_t h, t;
  int8_t i8;
  int16_t i16;
  int32_t i32;
  uint8_t u8;
  uint16_t u16;
  uint32_t u32;
  uint64_t u64;
  int64_t i64;
  const char *s;
  (void)state;
  setenv("NCCL_BUFFSIZE", "65536", 1);
  brd_param_reload();
  assert_int_equal(ncclParamBind(&h, "NCCL_BUFFSIZE"), ncclSuccess);
  assert_int_equal(ncclParamGetI8(h, &i8), ncclInvalidArgument);
  assert_int_equal(ncclParamGetI16(h, &i16), ncclInvalidArgument);
  assert_int_equal(ncclParamGetI32(h, &i32), ncclInvalidArgument);
  assert_true(last_error_has("NCCL_BUFFSIZE"));
  assert_true(last_error_has("ncclParamGetI64"));
  assert_int_equal(ncclParamGetU8(h, &u8), ncclInvalidArgument);
  assert_int_equal(ncclParamGetU16(h, &u16), ncclInvalidArgument);
  assert_int_equal(ncclParamGetU32(h, &u32), ncclInvalidArgument);
  assert_int_equal(ncclParamGetU64(h, &u64), ncclInvalidArgument);
  assert_int_equal(ncclParamGetStr(h, &s), ncclInvalidArgument);
  assert_int_equal(ncclParamGetI64(h, &i64), ncclSuccess);
  assert_int_equal(i64, 65536);
  assert_int_equal(ncclParamBind(&t, "NCCL_ALGO"), ncclSuccess);
  assert_int_equal(ncclParamGetI64(t, &i64), ncclInvalidArgument);
  assert_true(last_error_has("ncclParamGetStr"));
  assert_int_equal(ncclParamGetI64(h, NULL), ncclInvalidArgument);
}

static void test_unknown_key(void **state) {
  ncclParamHandle_t h = (ncclParamHandle_t)(uintptr_t)0x1234;
  const char *s = NULL;
  int len = 7;
  (void)state;
  assert_int_equal(ncclParamBind(&h, "NCCL_NO_SUCH_KNOB"), ncclInvalidArgument);
  assert_true(last_error_has("NCCL_NO_SUCH_KNOB"));
  assert_ptr_equal(h, (ncclParamHandle_t)(uintptr_t)0x1234);  /* untouched */
  /* Keys are full variable names. */
  assert_int_equal(ncclParamBind(&h, "BUFFSIZE"), ncclInvalidArgument);
  assert_int_equal(ncclParamBind(&h, "nccl_buffsize"), ncclInvalidArgument);
  assert_int_equal(ncclParamBind(&h, NULL), ncclInvalidArgument);
  assert_int_equal(ncclParamBind(NULL, "NCCL_BUFFSIZE"), ncclInvalidArgument);
  assert_int_equal(ncclParamGetParameter("NCCL_NO_SUCH_KNOB", &s, &len), ncclInvalidArgument);
  assert_null(s);
  assert_int_equal(len, 7);
  assert_int_equal(ncclParamGetParameter("NCCL_BUFFSIZE", NULL, &len), ncclInvalidArgument);
}

static void test_bad_handle(void **state) {
  int64_t v;
  int64_t fake[4] = {0, 0, 0, 0};
  (void)state;
  assert_int_equal(ncclParamGetI64(NULL, &v), ncclInvalidArgument);
  assert_true(last_error_has("ncclParamBind"));
  assert_int_equal(ncclParamGetI64((ncclParamHandle_t)(void *)fake, &v), ncclInvalidArgument);
  assert_true(last_error_has("did not come from ncclParamBind"));
}

/* A short buffer is an error that still reports the size needed. */
static void test_raw_short_buffer(void **state) {
  ncclParamHandle_t h;
  char buf[16];
  int len = -1;
  (void)state;
  setenv("NCCL_ALGO", "allreduce:ring", 1);  /* 14 characters + NUL */
  brd_param_reload();
  assert_int_equal(ncclParamBind(&h, "NCCL_ALGO"), ncclSuccess);
  memset(buf, 'x', sizeof(buf));
  assert_int_equal(ncclParamGet(h, buf, 14, &len), ncclInvalidArgument);
  assert_int_equal(len, 15);
  assert_int_equal(buf[0], 'x');
  assert_int_equal(ncclParamGet(h, buf, 15, &len), ncclSuccess);
  assert_string_equal(buf, "allreduce:ring");
  assert_int_equal(ncclParamBind(&h, "NCCL_BUFFSIZE"), ncclSuccess);
  assert_int_equal(ncclParamGet(h, buf, 7, &len), ncclInvalidArgument);
  assert_int_equal(len, 8);
  assert_int_equal(ncclParamGet(h, buf, -1, &len), ncclInvalidArgument);
  assert_int_equal(ncclParamGet(h, NULL, 8, &len), ncclInvalidArgument);
}

/* The dump logs every listed knob with its type and value in force. */
static void test_dump_all(void **state) {
  char path[] = "/tmp/brd_test_params_dump.XXXXXX";
  int fd = mkstemp(path);
  char text[1 << 16];
  (void)state;
  assert_true(fd >= 0);
  close(fd);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  setenv("NCCL_DEBUG_FILE", path, 1);
  setenv("NCCL_BUFFSIZE", "123457", 1);
  brd_param_reload();
  brd_log_reset();
  ncclParamDumpAll();
  brd_log_reset();  /* closes the file */
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  size_t n = fread(text, 1, sizeof(text) - 1, f);
  fclose(f);
  unlink(path);
  text[n] = '\0';
  assert_non_null(strstr(text, "NCCL_BUFFSIZE (int64)"));
  assert_non_null(strstr(text, "current value=123457 default=4194304"));
  assert_non_null(strstr(text, "NCCL_ALGO (string)"));
  assert_null(strstr(text, "BRAID_DEVICE ("));  /* not without NCCL_PARAM_DUMP_ALL */
  clear_env();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_defaults, setup),
      cmocka_unit_test_setup(test_every_key_round_trips, setup),
      cmocka_unit_test_setup(test_key_list, setup),
      cmocka_unit_test_setup(test_type_rule, setup),
      cmocka_unit_test_setup(test_unknown_key, setup),
      cmocka_unit_test_setup(test_bad_handle, setup),
      cmocka_unit_test_setup(test_raw_short_buffer, setup),
      cmocka_unit_test_setup(test_dump_all, setup),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
