/* The test env plugin's record (env_test.c): envtest_state_vN. */
#ifndef BRD_TESTS_ENV_TEST_H
#define BRD_TESTS_ENV_TEST_H

typedef struct {
  int inits, finalizes, gets;
  int major, minor, patch, suffix_ok;
  int logged; /* v2: init's logger was called */
} envtest_state_t;

#endif
