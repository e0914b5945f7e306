/*
 * Env plugins: NCCL_ENV_PLUGIN as a path, a name, none; v1 and v2 (the
 * newest wins in a library exporting both); every parameter read goes
 * through getEnv (a test plugin that answers NAME with the process's
 * ENVTEST_NAME, so a value read through it differs from the process's own
 * NAME); init's arguments (NCCL's version, v2's logger); a failing init or
 * a library without the symbol falls back to the environment with a WARN;
 * finalize runs once.
 */
#include <dlfcn.h>
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
#include "../plugins/env_test.h"

#include "nccl.h"
#include "base/debug.h"
#include "base/env_plugin.h"
#include "base/param.h"

static char plugdir[1024]; /* <build>/tests/plugins */

static void lib_file(char *out, size_t n, const char *which) {
  snprintf(out, n, "%s/libnccl-env-%s.so", plugdir, which);
}

static void env_clean(void) {
  brd_test_env_clear();
  unsetenv("ENVTEST_FAULT");
  unsetenv("ENVTEST_NCCL_BUFFSIZE");
  unsetenv("ENVTEST_NCCL_ALGO");
  unsetenv("ENVTEST_BRAID_TIMEOUT");
}

static int setup(void **state) {
  (void)state;
  brd_env_plugin_reset();
  env_clean();
  brd_param_reload();
  brd_log_set_last_error("(none)");
  return 0;
}

static int teardown(void **state) {
  (void)state;
  brd_env_plugin_reset();
  env_clean();
  brd_param_reload();
  return 0;
}

/* Values the process has, and others only the plugin gives. */
static void set_values(void) {
  setenv("NCCL_BUFFSIZE", "999", 1);
  setenv("ENVTEST_NCCL_BUFFSIZE", "12345", 1);
  setenv("NCCL_ALGO", "Tree", 1);
  setenv("ENVTEST_NCCL_ALGO", "Ring", 1);
  setenv("ENVTEST_BRAID_TIMEOUT", "77", 1);
}

/* Loads NCCL_ENV_PLUGIN=spec afresh and reads parameters. */
static void load(const char *spec) {
  brd_env_plugin_reset();
  if (spec != NULL)
    setenv("NCCL_ENV_PLUGIN", spec, 1);
  else
    unsetenv("NCCL_ENV_PLUGIN");
  brd_param_reload();
  brd_env_plugin_init();
}

static envtest_state_t *state_of(const char *which, int ver, void **hold_out) {
  char f[PATH_MAX];
  lib_file(f, sizeof(f), which);
  void *h = dlopen(f, RTLD_NOW | RTLD_NOLOAD);
  if (h == NULL) fail_msg("%s is not loaded", f);
  char sym[64];
  snprintf(sym, sizeof(sym), "envtest_state_v%d", ver);
  envtest_state_t *s = dlsym(h, sym);
  if (s == NULL) fail_msg("%s has no %s", f, sym);
  *hold_out = h;
  return s;
}

static void expect_through_plugin(void) {
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 12345);
  assert_string_equal(brd_param_str(BRD_P_ALGO), "Ring");
  assert_int_equal(brd_param_int(BRD_P_BRAID_TIMEOUT), 77);
  /* Unset in the plugin: the table default, not the process's value. */
  setenv("NCCL_LL_BUFFSIZE", "4242", 1);
  brd_param_reload();
  assert_int_equal(brd_param_int(BRD_P_LL_BUFFSIZE), 262144);
  assert_null(brd_param_getenv("NCCL_LL_BUFFSIZE"));
  unsetenv("NCCL_LL_BUFFSIZE");
}

static void check_version(const char *which, int ver) {
  char f[PATH_MAX];
  lib_file(f, sizeof(f), which);
  set_values();
  load(f);
  assert_int_equal(brd_env_plugin_version(), ver);
  char name[32];
  snprintf(name, sizeof(name), "EnvTest_v%d", ver);
  assert_string_equal(brd_env_plugin_name(), name);
  void *hold;
  envtest_state_t *s = state_of(which, ver, &hold);
  assert_int_equal(s->inits, 1);
  assert_int_equal(s->major, NCCL_MAJOR);
  assert_int_equal(s->minor, NCCL_MINOR);
  assert_int_equal(s->patch, NCCL_PATCH);
  assert_int_equal(s->suffix_ok, 1);
  if (ver == 2) assert_int_equal(s->logged, 1);
  int gets = s->gets;
  expect_through_plugin();
  assert_true(s->gets > gets);
  brd_env_plugin_reset();
  assert_int_equal(s->finalizes, 1);
  dlclose(hold);
  /* Closed, and none named: the process's values again. */
  setenv("NCCL_ENV_PLUGIN", "none", 1);
  brd_param_reload();
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 999);
}

static void test_v1(void **state) {
  (void)state;
  check_version("testv1", 1);
}

static void test_v2(void **state) {
  (void)state;
  check_version("testv2", 2);
}

static void test_newest_wins(void **state) {
  (void)state;
  char f[PATH_MAX];
  lib_file(f, sizeof(f), "testboth");
  set_values();
  load(f);
  assert_int_equal(brd_env_plugin_version(), 2);
  expect_through_plugin();
}

static void test_names(void **state) {
  (void)state;
  set_values();
  /* A bare name: libnccl-env-<name>.so through LD_LIBRARY_PATH. */
  load("testv1");
  assert_int_equal(brd_env_plugin_version(), 1);
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 12345);
  /* A lib*.so name as given. */
  load("libnccl-env-testv2.so");
  assert_int_equal(brd_env_plugin_version(), 2);
  /* none: the process's own values. */
  load("NONE");
  assert_int_equal(brd_env_plugin_version(), 0);
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 999);
  assert_string_equal(brd_param_str(BRD_P_ALGO), "Tree");
  /* Unset: libnccl-env.so, absent here, quietly. */
  load(NULL);
  assert_int_equal(brd_env_plugin_version(), 0);
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 999);
}

static void expect_last_error(const char *needle) {
  const char *msg = brd_log_last_error();
  if (strstr(msg, needle) == NULL)
    fail_msg("last error \"%s\" does not mention \"%s\"", msg, needle);
}

static void test_faults(void **state) {
  (void)state;
  set_values();
  load("nosuchenv");
  assert_int_equal(brd_env_plugin_version(), 0);
  expect_last_error("NCCL_ENV_PLUGIN=nosuchenv");
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 999);

  char f[PATH_MAX];
  snprintf(f, sizeof(f), "%s/libnccl-tuner-testv5.so", plugdir);
  load(f);
  assert_int_equal(brd_env_plugin_version(), 0);
  expect_last_error("unsupported");

  setenv("ENVTEST_FAULT", "init", 1);
  load("testv2");
  assert_int_equal(brd_env_plugin_version(), 0);
  expect_last_error("init failed");
  assert_int_equal(brd_param_int(BRD_P_BUFFSIZE), 999);
}

int main(int argc, char **argv) {
  (void)argc;
  int go = brd_test_plugin_dir(argv, "BRD_TEST_ENV_PLUGIN_PATHSET",
                               "libnccl-env-testboth.so", plugdir, sizeof(plugdir));
  if (go != 0) return go;
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_v1, setup, teardown),
      cmocka_unit_test_setup_teardown(test_v2, setup, teardown),
      cmocka_unit_test_setup_teardown(test_newest_wins, setup, teardown),
      cmocka_unit_test_setup_teardown(test_names, setup, teardown),
      cmocka_unit_test_setup_teardown(test_faults, setup, teardown),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
