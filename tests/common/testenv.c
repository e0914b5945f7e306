/* Braid tests: see testenv.h. */
#include <stdlib.h>
#include <string.h>

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
