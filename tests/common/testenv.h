/* Braid tests: a clean environment for tests of parameters and logging. */
#ifndef BRD_TESTS_TESTENV_H
#define BRD_TESTS_TESTENV_H

/* Removes every NCCL_* and BRAID_* variable from the environment, so the
 * machine's settings cannot leak into a test's expectations. Does not
 * forget cached parameter values: the caller reloads them. */
void brd_test_env_clear(void);

/* For programs that load the test plugins: writes their folder,
 * <build>/tests/plugins (beside this program's folder), into dir (n
 * bytes). The first time (the variable `mark` unset) it sets `mark`, puts
 * the folder in front of LD_LIBRARY_PATH, which the dynamic loader reads
 * only at start, so bare plugin names resolve, and runs this program
 * again with argv; it returns only if that fails. Returns 0 to go on, 77
 * (with a SKIP line) when the file `probe` is not in the folder (plugins
 * not built), 1 on an error. */
int brd_test_plugin_dir(char **argv, const char *mark, const char *probe, char *dir, size_t n);

#endif
