/*
 * A program built like any NCCL user's — usually against NVIDIA's nccl.h —
 * linked against Braid's libnccl.so and run in host mode. It checks the
 * answers that need no GPU and no peer, and that every exported name
 * resolves in the library it was linked with.
 *
 *   link_test <path of Braid's libnccl.so.2> <tools/abi/nccl-2.30.7.syms>
 *
 * Prints one line per check; exits 1 if any failed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <nccl.h>

static int failures;

static void check(int ok, const char *what) {
  printf("  %s  %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) failures++;
}

static void check_version(void) {
  int version = -1;
  check(ncclGetVersion(&version) == ncclSuccess, "ncclGetVersion succeeds");
  check(version == 23007, "ncclGetVersion reports 23007");
  /* A program built against an older header (2.28, 2.29) runs on a newer
   * library; the library is never older than the header. */
  check(version >= NCCL_VERSION_CODE, "version is at least the header's NCCL_VERSION_CODE");
  check(ncclGetVersion(NULL) == ncclInvalidArgument,
        "ncclGetVersion(NULL) is ncclInvalidArgument");
}

static void check_error_strings(void) {
  const char *text[ncclNumResults + 1];
  int ok = 1;
  for (int r = 0; r <= ncclNumResults; r++) {
    text[r] = ncclGetErrorString((ncclResult_t)r);
    if (text[r] == NULL || text[r][0] == '\0') {
      printf("    code %d has no text\n", r);
      ok = 0;
      continue;
    }
    for (int q = 0; q < r; q++) {
      if (text[q] != NULL && strcmp(text[q], text[r]) == 0) {
        printf("    codes %d and %d share the text \"%s\"\n", q, r, text[r]);
        ok = 0;
      }
    }
  }
  check(ok, "ncclGetErrorString: distinct non-empty text for codes 0..ncclNumResults");
  check(ncclGetErrorString((ncclResult_t)10) != NULL &&
            ncclGetErrorString((ncclResult_t)1000) != NULL &&
            ncclGetErrorString((ncclResult_t)-1) != NULL,
        "ncclGetErrorString: out-of-range codes still get a text");
}

static void check_argument_errors(void) {
  int count = -7;
  const char *last;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId id;
  ncclComm_t comm = NULL;
  ncclResult_t res;

  check(ncclCommCount(NULL, &count) == ncclInvalidArgument,
        "ncclCommCount(NULL, &n) is ncclInvalidArgument");
  check(count == -7, "ncclCommCount leaves *count alone on failure");
  last = ncclGetLastError(NULL);
  check(last != NULL && last[0] != '\0', "ncclGetLastError is non-empty after it");
  check(last != NULL && strstr(last, "comm") != NULL,
        "ncclGetLastError mentions \"comm\"");
  if (last != NULL) printf("    last error: %s\n", last);

  check(ncclGetUniqueId(NULL) == ncclInvalidArgument,
        "ncclGetUniqueId(NULL) is ncclInvalidArgument");

  /* A config that did not come from NCCL_CONFIG_INITIALIZER. */
  memset(&id, 0, sizeof(id));
  config.magic = 0x12345678;
  res = ncclCommInitRankConfig(&comm, 1, id, 0, &config);
  check(res == ncclInvalidArgument,
        "ncclCommInitRankConfig with a bad config magic is ncclInvalidArgument");
  if (res != ncclInvalidArgument) printf("    got %d: %s\n", (int)res, ncclGetErrorString(res));
  check(comm == NULL, "no communicator is returned for it");
}

/* Strips the line end; returns 0 for comment and blank lines. */
static int sym_line(char *line) {
  line[strcspn(line, "\r\n")] = '\0';
  return line[0] != '\0' && line[0] != '#';
}

static void check_symbols(const char *lib_path, const char *syms_path) {
  void *lib = dlopen(lib_path, RTLD_NOW | RTLD_GLOBAL);
  FILE *f = fopen(syms_path, "r");
  char line[256];
  int n = 0, resolved = 0, same = 0, twins = 0, twins_ok = 0;
  Dl_info info;
  char want[PATH_MAX], got[PATH_MAX];

  check(lib != NULL, "dlopen of the library");
  check(f != NULL, "the symbol list can be read");
  if (lib == NULL || f == NULL) {
    if (lib == NULL) printf("    dlopen: %s\n", dlerror());
    goto out;
  }

  /* The library this program was linked with must be the one under test. */
  check(dladdr((void *)ncclGetVersion, &info) != 0 &&
            realpath(info.dli_fname, got) != NULL &&
            realpath(lib_path, want) != NULL && strcmp(got, want) == 0,
        "ncclGetVersion comes from the library under test");

  while (fgets(line, sizeof(line), f) != NULL) {
    void *p, *q;
    if (!sym_line(line)) continue;
    n++;
    p = dlsym(lib, line);
    q = dlsym(RTLD_DEFAULT, line);
    if (p == NULL) {
      printf("    %s does not resolve\n", line);
      continue;
    }
    resolved++;
    if (p == q) same++;
    else printf("    %s resolves elsewhere through the default scope\n", line);
    /* nccl<X> is an alias of pnccl<X>: same address. */
    if (strncmp(line, "nccl", 4) == 0) {
      char twin[260];
      snprintf(twin, sizeof(twin), "p%s", line);
      q = dlsym(lib, twin);
      if (q != NULL) {
        twins++;
        if (p == q) twins_ok++;
        else printf("    %s and %s are different functions\n", line, twin);
      }
    }
  }
  check(n > 0, "the symbol list is not empty");
  check(resolved == n, "every listed name resolves with dlsym");
  check(same == n, "every listed name resolves to the same library via RTLD_DEFAULT");
  check(twins > 0 && twins == twins_ok, "every nccl<X> has the address of pncclX");
  printf("    %d names, %d nccl/pnccl pairs\n", n, twins);

out:
  if (f != NULL) fclose(f);
  if (lib != NULL) dlclose(lib);
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: %s LIBNCCL_SO SYMS_FILE\n", argv[0]);
    return 2;
  }
  check_version();
  check_error_strings();
  check_argument_errors();
  check_symbols(argv[1], argv[2]);
  return failures == 0 ? 0 : 1;
}
