/* Braid tests: a clean environment for tests of parameters and logging. */
#ifndef BRD_TESTS_TESTENV_H
#define BRD_TESTS_TESTENV_H

/* Removes every NCCL_* and BRAID_* variable from the environment, so the
 * machine's settings cannot leak into a test's expectations. Does not
 * forget cached parameter values: the caller reloads them. */
void brd_test_env_clear(void);

#endif
