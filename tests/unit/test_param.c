/*
 * Parameters: table defaults, environment over the user conf file over the
 * system conf file, NCCL_CONF_FILE replacing ~/.nccl.conf, integer syntax,
 * malformed values falling back with one WARN, and the ENV log lines.
 */
#include <pthread.h>
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

#include "base/debug.h"
#include "base/param.h"


static char tmpdir[] = "/tmp/brd_test_param.XXXXXX";
static char home_conf[256];   /* $HOME/.nccl.conf */
static char sys_conf[256];    /* stands in for /etc/nccl.conf */
static char alt_conf[256];    /* for NCCL_CONF_FILE */

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
}

static void reload(void) {
  brd_param_reload();
  brd_log_reset();
}

static int setup(void **state) {
  (void)state;
  brd_test_env_clear();
  unlink(home_conf);
  unlink(sys_conf);
  unlink(alt_conf);
  reload();
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  if (mkdtemp(tmpdir) == NULL) return -1;
  snprintf(home_conf, sizeof(home_conf), "%s/.nccl.conf", tmpdir);
  snprintf(sys_conf, sizeof(sys_conf), "%s/system.conf", tmpdir);
  snprintf(alt_conf, sizeof(alt_conf), "%s/alt.conf", tmpdir);
  setenv("HOME", tmpdir, 1);
  brd_param_sysconf_set(sys_conf);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  char path[300];
  unlink(home_conf);
  unlink(sys_conf);
  unlink(alt_conf);
  snprintf(path, sizeof(path), "%s/log", tmpdir);
  unlink(path);
  rmdir(tmpdir);
  return 0;
}

static void test_defaults(void **state) {
  (void)state;
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 4 * 1024 * 1024);
  assert_int_equal(brd_param_int(BRD_P_LL_BUFFSIZE), 256 * 1024);
  assert_int_equal(brd_param_int(BRD_P_BRAID_TIMEOUT), 300);
  /* NCCL leaves these undefined so the communicator config decides. */
  assert_true(brd_param_int(BRD_P_MIN_CTAS) == BRD_PARAM_UNSET);
  assert_true(brd_param_int(BRD_P_COMM_BLOCKING) == BRD_PARAM_UNSET);
  assert_null(brd_param_str(BRD_P_ALGO));
  assert_string_equal(brd_param_str(BRD_P_DEBUG_SUBSYS), "INIT,BOOTSTRAP,ENV");
  assert_string_equal(brd_param_str(BRD_P_BRAID_DEVICE), "auto");
  assert_null(brd_param_getenv("NCCL_NOT_A_KNOB"));
}

static void test_table_names(void **state) {
  (void)state;
  for (int i = 0; i < BRD_P_COUNT; i++) {
    const char *n = brd_param_table[i].name;
    assert_true(strncmp(n, "NCCL_", 5) == 0 || strncmp(n, "BRAID_", 6) == 0);
    assert_non_null(brd_param_table[i].desc);
    for (int j = 0; j < i; j++) assert_string_not_equal(n, brd_param_table[j].name);
  }
  /* NCCL's spelling of the scheduling knob (init.cc). */
  assert_string_equal(brd_param_table[BRD_P_NVLINK_CENTRIC_SCHED].name,
                      "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE");
}

static void test_env_override(void **state) {
  (void)state;
  setenv("NCCL_BUFFSIZE", "1048577", 1);
  setenv("NCCL_ALGO", "Ring", 1);
  reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 1048577);
  assert_string_equal(brd_param_str(BRD_P_ALGO), "Ring");
  /* Cached until a reload, as NCCL caches its parameters. */
  setenv("NCCL_BUFFSIZE", "77", 1);
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 1048577);
  brd_param_reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 77);
}

static void test_integer_syntax(void **state) {
  (void)state;
  static const struct { const char *text; int64_t want; } cases[] = {
      {"0x1F", 31},  {"0X10", 16},   {"-7", -7},     {"-0x10", -16},
      {"010", 8},    /* leading 0 is octal, as strtoll base 0 in NCCL */
      {" 12 ", 12},  {"+5", 5},      {"9223372036854775807", INT64_MAX},
      {"-9223372036854775807", -INT64_MAX},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    setenv("NCCL_BUFFSIZE", cases[i].text, 1);
    brd_param_reload();
    brd_log_set_last_error("sentinel");
    assert_true(brd_param_int(BRD_P_BUFFSIZE) == cases[i].want);
    assert_string_equal(brd_log_last_error(), "sentinel");
  }
}

static void test_malformed(void **state) {
  (void)state;
  static const char *bad[] = {"12abc", "99999999999999999999", "0x", "  ", "1.5", "abc"};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    setenv("NCCL_BUFFSIZE", bad[i], 1);
    brd_param_reload();
    brd_log_set_last_error("sentinel");
    assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 4194304);
    const char *err = brd_log_last_error();
    assert_non_null(strstr(err, "NCCL_BUFFSIZE"));
    assert_non_null(strstr(err, bad[i]));
    assert_non_null(strstr(err, "4194304"));
    assert_non_null(strstr(err, "environment"));
    /* Once: the second query neither re-parses nor re-warns. */
    brd_log_set_last_error("sentinel");
    assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 4194304);
    assert_string_equal(brd_log_last_error(), "sentinel");
  }
  /* A knob without default falls back to "unset". */
  setenv("NCCL_MIN_CTAS", "4x", 1);
  brd_param_reload();
  assert_true(brd_param_int(BRD_P_MIN_CTAS) == BRD_PARAM_UNSET);
  assert_non_null(strstr(brd_log_last_error(), "NCCL_MIN_CTAS"));
}

static void test_empty_is_unset(void **state) {
  (void)state;
  setenv("NCCL_BUFFSIZE", "", 1);
  brd_param_reload();
  brd_log_set_last_error("sentinel");
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 4194304);
  assert_string_equal(brd_log_last_error(), "sentinel");
}

static void test_conf_precedence(void **state) {
  (void)state;
  write_file(home_conf,
             "# user settings\n"
             "NCCL_BUFFSIZE=111\n"
             "NCCL_LL_BUFFSIZE=222\n"
             "  NCCL_ALGO =  Tree  \r\n"
             "#NCCL_PROTO=LL\n"
             "NCCL_PROTO\n"
             "NCCL_P2P_DISABLE=1\n"
             "NCCL_P2P_DISABLE=0\n"
             "BRAID_TEST_ONLY=from-home\n"
             "\n"
             "NCCL_SOCKET_IFNAME=eth0=x");
  write_file(sys_conf,
             "NCCL_BUFFSIZE=999\n"
             "NCCL_LL_BUFFSIZE=888\n"
             "NCCL_CHECK_POINTERS=1\n"
             "NCCL_SHM_DISABLE=1\n");
  setenv("NCCL_LL_BUFFSIZE", "333", 1);
  setenv("NCCL_SHM_DISABLE", "0", 1);
  reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 111);        /* user > system */
  assert_int_equal(brd_param_int(BRD_P_LL_BUFFSIZE), 333);     /* env > user */
  assert_int_equal(brd_param_int(BRD_P_SHM_DISABLE), 0);       /* env > system */
  assert_int_equal(brd_param_int(BRD_P_CHECK_POINTERS), 1);    /* system only */
  assert_string_equal(brd_param_str(BRD_P_ALGO), "Tree");      /* trimmed */
  assert_null(brd_param_str(BRD_P_PROTO));                     /* comment, no '=' */
  assert_int_equal(brd_param_int(BRD_P_P2P_DISABLE), 1);       /* first line wins */
  assert_string_equal(brd_param_str(BRD_P_SOCKET_IFNAME), "eth0=x"); /* split at first '=' */
  assert_string_equal(brd_param_getenv("BRAID_TEST_ONLY"), "from-home");
  setenv("BRAID_TEST_ONLY", "from-env", 1);
  assert_string_equal(brd_param_getenv("BRAID_TEST_ONLY"), "from-env");
}

static void test_conf_file_variable(void **state) {
  (void)state;
  write_file(home_conf, "NCCL_BUFFSIZE=111\nNCCL_LL_BUFFSIZE=222\n");
  write_file(alt_conf, "NCCL_BUFFSIZE=555\n");
  write_file(sys_conf, "NCCL_BUFFSIZE=999\nNCCL_CHECK_POINTERS=1\n");
  setenv("NCCL_CONF_FILE", alt_conf, 1);
  reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 555);
  /* ~/.nccl.conf is not read when NCCL_CONF_FILE names another file... */
  assert_int_equal(brd_param_int(BRD_P_LL_BUFFSIZE), 262144);
  /* ...but the system file still is. */
  assert_int_equal(brd_param_int(BRD_P_CHECK_POINTERS), 1);
  /* An empty NCCL_CONF_FILE means the home file again. */
  setenv("NCCL_CONF_FILE", "", 1);
  reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 111);
}

static void test_conf_malformed_names_file(void **state) {
  (void)state;
  write_file(home_conf, "NCCL_BUFFSIZE=4MB\n");
  reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 4194304);
  const char *err = brd_log_last_error();
  assert_non_null(strstr(err, "NCCL_BUFFSIZE"));
  assert_non_null(strstr(err, "4MB"));
  assert_non_null(strstr(err, home_conf));
}

static char *read_all(const char *path) {
  FILE *f = fopen(path, "r");
  assert_non_null(f);
  static char buf[16384];
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static void test_log_all(void **state) {
  (void)state;
  char log[300];
  snprintf(log, sizeof(log), "%s/log", tmpdir);
  write_file(home_conf, "NCCL_ALGO=Tree\n");
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "ENV", 1);
  setenv("NCCL_DEBUG_FILE", log, 1);
  setenv("NCCL_BUFFSIZE", "0x20", 1);
  reload();
  brd_param_log_all();
  brd_log_reset(); /* closes the file */
  const char *text = read_all(log);
  assert_non_null(strstr(text, "NCCL INFO NCCL_BUFFSIZE set by environment to 32.\n"));
  assert_non_null(strstr(text, "NCCL INFO NCCL_ALGO set by environment to Tree\n"));
  assert_non_null(strstr(text, "NCCL INFO NCCL_DEBUG set by environment to INFO\n"));
  assert_null(strstr(text, "NCCL_LL_BUFFSIZE"));
  /* Without ENV in the mask nothing is printed. */
  setenv("NCCL_DEBUG_SUBSYS", "INIT", 1);
  reload();
  brd_param_log_all();
  brd_log_reset();
  assert_string_equal(read_all(log), "");
}

static void test_table_print(void **state) {
  (void)state;
  setenv("NCCL_BUFFSIZE", "0x20", 1);
  write_file(home_conf, "NCCL_LL_BUFFSIZE=1000\n");
  reload();
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  assert_non_null(f);
  brd_param_table_print(f);
  fclose(f);
  int lines = 0;
  for (size_t i = 0; i < len; i++) lines += out[i] == '\n';
  assert_int_equal(lines, BRD_P_COUNT + 1);
  const char *row = strstr(out, "\nNCCL_BUFFSIZE ");
  assert_non_null(row);
  const char *end = strchr(row + 1, '\n');
  char line[512];
  snprintf(line, sizeof(line), "%.*s", (int)(end - row - 1), row + 1);
  assert_non_null(strstr(line, " 4194304 "));
  assert_non_null(strstr(line, " 32 "));
  assert_non_null(strstr(line, "environment"));
  row = strstr(out, "\nNCCL_LL_BUFFSIZE ");
  assert_non_null(row);
  assert_non_null(strstr(row, home_conf));
  free(out);
}

#define RESOLVE_THREADS 4

static void *resolve_thread(void *arg) {
  int64_t *got = arg;
  for (int i = 0; i < BRD_P_COUNT; i++) (void)brd_param_str((brd_param_id_t)i);
  *got = brd_param_int(BRD_P_BUFFSIZE);
  return NULL;
}

static void test_concurrent_first_use(void **state) {
  (void)state;
  /* Threads race on the first load of the conf file and the first parse of
   * a malformed value: all see the same result and it WARNs once. */
  char log[300];
  snprintf(log, sizeof(log), "%s/log", tmpdir);
  write_file(home_conf, "NCCL_LL_BUFFSIZE=4096\n");
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", log, 1);
  setenv("NCCL_BUFFSIZE", "64k", 1);
  reload();
  pthread_t t[RESOLVE_THREADS];
  int64_t got[RESOLVE_THREADS];
  for (int i = 0; i < RESOLVE_THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, resolve_thread, &got[i]), 0);
  for (int i = 0; i < RESOLVE_THREADS; i++) {
    assert_int_equal(pthread_join(t[i], NULL), 0);
    assert_int_equal(got[i], 4194304);
  }
  assert_int_equal(brd_param_int(BRD_P_LL_BUFFSIZE), 4096);
  brd_log_reset();
  const char *text = read_all(log);
  int warns = 0;
  for (const char *p = text; (p = strstr(p, "NCCL WARN")) != NULL; p++) warns++;
  assert_int_equal(warns, 1);
  assert_non_null(strstr(text, "NCCL_BUFFSIZE"));
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_defaults, setup),
      cmocka_unit_test_setup(test_table_names, setup),
      cmocka_unit_test_setup(test_env_override, setup),
      cmocka_unit_test_setup(test_integer_syntax, setup),
      cmocka_unit_test_setup(test_malformed, setup),
      cmocka_unit_test_setup(test_empty_is_unset, setup),
      cmocka_unit_test_setup(test_conf_precedence, setup),
      cmocka_unit_test_setup(test_conf_file_variable, setup),
      cmocka_unit_test_setup(test_conf_malformed_names_file, setup),
      cmocka_unit_test_setup(test_log_all, setup),
      cmocka_unit_test_setup(test_table_print, setup),
      cmocka_unit_test_setup(test_concurrent_first_use, setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
