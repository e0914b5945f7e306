/*
 * libibverbs is optional: opened at run time, its absence is reported
 * without failing, and the device list matches what verbs itself reports.
 */
#include <dlfcn.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/param.h"
#include "transport/ibverbs.h"

/* Device count straight from the library, without Braid's loader. */
static int direct_count(void) {
  void *h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == NULL) return -1;
  struct ibv_device **(*get)(int *) =
      (struct ibv_device **(*)(int *))dlsym(h, "ibv_get_device_list");
  void (*put)(struct ibv_device **) =
      (void (*)(struct ibv_device **))dlsym(h, "ibv_free_device_list");
  int n = 0;
  struct ibv_device **l = get ? get(&n) : NULL;
  if (l && put) put(l);
  return n;
}

static void test_present(void **state) {
  (void)state;
  int expect = direct_count();
  if (expect < 0) {
    print_message("SKIP: libibverbs.so.1 is not installed here\n");
    skip();
  }
  const brd_ibv_ops_t *ops = NULL;
  assert_int_equal(brd_ibv_load(&ops), ncclSuccess);
  assert_non_null(ops->get_device_list);
  char names[256];
  assert_int_equal(brd_ibv_devices(names, sizeof(names)), expect);
  if (expect == 0) assert_string_equal(names, "");
}

/* In a child, before this process loads verbs (the loader caches its
 * first answer and a fork inherits it): a missing library is a
 * clean ncclSystemError and zero devices. */
static void test_absent(void **state) {
  (void)state;
  pid_t pid = fork();
  if (pid == 0) {
    setenv("BRAID_IBVERBS_LIB", "libibverbs-not-here.so.9", 1);
    brd_param_reload();
    const brd_ibv_ops_t *ops = NULL;
    if (brd_ibv_load(&ops) != ncclSystemError) _exit(1);
    if (ops != NULL) _exit(2);
    if (brd_ibv_devices(NULL, 0) != 0) _exit(3);
    _exit(0);
  }
  int st;
  assert_int_equal(waitpid(pid, &st, 0), pid);
  assert_true(WIFEXITED(st));
  assert_int_equal(WEXITSTATUS(st), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_absent), /* first: forks before any load */
      cmocka_unit_test(test_present),
  };
  return cmocka_run_group_tests_name("ibverbs", tests, NULL, NULL);
}
