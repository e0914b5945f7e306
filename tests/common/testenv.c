/* Braid tests: see testenv.h. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testenv.h"

extern char **environ;

/* unsetenv changes environ under the loop, so each pass finds one name,
 * leaves the loop, and removes it. */
void brd_test_env_clear(void) {
  for (;;) {
    char name[256] = "";
    for (char **e = environ; *e != NULL; e++) {
      if (strncmp(*e, "NCCL_", 5) == 0 || strncmp(*e, "BRAID_", 6) == 0) {
        size_t n = strcspn(*e, "=");
        if (n >= sizeof(name)) n = sizeof(name) - 1;
        memcpy(name, *e, n);
        name[n] = '\0';
        break;
      }
    }
    if (name[0] == '\0') break;
    unsetenv(name);
  }
}

/* See testenv.h. */
int brd_test_plugin_dir(char **argv, const char *mark, const char *probe, char *dir, size_t n) {
  char exe[PATH_MAX], file[PATH_MAX];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (len <= 0) {
    fprintf(stderr, "cannot read /proc/self/exe\n");
    return 1;
  }
  exe[len] = '\0';
  *strrchr(exe, '/') = '\0';
  snprintf(dir, n, "%s/../plugins", exe);
  snprintf(file, sizeof(file), "%s/%s", dir, probe);
  if (access(file, R_OK) != 0) {
    fprintf(stderr, "SKIP: test plugins not built (%s missing; run make tests)\n", file);
    return 77;
  }
  if (getenv(mark) != NULL) return 0;
  const char *old = getenv("LD_LIBRARY_PATH");
  static char path[4096];
  snprintf(path, sizeof(path), "%s%s%s", dir, old && old[0] ? ":" : "", old ? old : "");
  setenv("LD_LIBRARY_PATH", path, 1);
  setenv(mark, "1", 1);
  execv("/proc/self/exe", argv);
  fprintf(stderr, "cannot run /proc/self/exe again\n");
  return 1;
}
