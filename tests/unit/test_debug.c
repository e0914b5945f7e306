/*
 * Logging: NCCL_DEBUG levels, NCCL_DEBUG_SUBSYS masks, the exact line
 * prefixes NCCL prints, NCCL_DEBUG_FILE expansion, the last-error text and
 * re-initialisation after a reset. Expected values are NCCL's, written out
 * by hand (level numbers, subsystem bits, "host:pid:tid [dev] NCCL INFO").
 */
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "testenv.h"

#include "base/debug.h"
#include "base/param.h"


static char tmpdir[] = "/tmp/brd_test_debug.XXXXXX";
static char log_path[256];

static void reset(void) {
  brd_param_reload();
  brd_log_reset();
}

static int setup(void **state) {
  (void)state;
  brd_log_reset(); /* closes a file left open by the previous test */
  brd_test_env_clear();
  unlink(log_path);
  brd_log_set_thread_dev(-1);
  reset();
  return 0;
}

static int group_setup(void **state) {
  (void)state;
  if (mkdtemp(tmpdir) == NULL) return -1;
  snprintf(log_path, sizeof(log_path), "%s/log", tmpdir);
  setenv("HOME", tmpdir, 1); /* no ~/.nccl.conf unless a test writes one */
  char sys[300];
  snprintf(sys, sizeof(sys), "%s/system.conf", tmpdir);
  brd_param_sysconf_set(sys);
  return 0;
}

static int group_teardown(void **state) {
  (void)state;
  brd_log_reset();
  char path[300];
  unlink(log_path);
  snprintf(path, sizeof(path), "%s/.nccl.conf", tmpdir);
  unlink(path);
  rmdir(tmpdir);
  return 0;
}

/* Reads a whole file; the buffer is static. Empty when it does not exist. */
static const char *slurp(const char *path) {
  static char buf[16384];
  buf[0] = '\0';
  FILE *f = fopen(path, "r");
  if (f == NULL) return buf;
  size_t n = fread(buf, 1, sizeof(buf) - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* The log file's contents so far (the logger closes it on reset). */
static const char *log_text(void) {
  brd_log_reset();
  return slurp(log_path);
}

/* Host name the way NCCL prints it: cut at the first '.'. */
static void short_host(char *buf, size_t len) {
  assert_int_equal(gethostname(buf, len), 0);
  buf[len - 1] = '\0';
  char *dot = strchr(buf, '.');
  if (dot != NULL) *dot = '\0';
}

static void log_to_file(const char *level, const char *subsys) {
  setenv("NCCL_DEBUG", level, 1);
  if (subsys != NULL) setenv("NCCL_DEBUG_SUBSYS", subsys, 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1);
  reset();
}

/* Runs fn with stdout redirected into a file; returns what it printed. */
static const char *capture_stdout(void (*fn)(void)) {
  char path[300];
  snprintf(path, sizeof(path), "%s/stdout", tmpdir);
  fflush(stdout);
  int saved = dup(1);
  int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0600);
  assert_true(saved >= 0 && fd >= 0);
  dup2(fd, 1);
  close(fd);
  fn();
  fflush(stdout);
  dup2(saved, 1);
  close(saved);
  const char *text = slurp(path);
  unlink(path);
  return text;
}

static void test_levels(void **state) {
  (void)state;
  static const struct { const char *env; int level; } cases[] = {
      {"VERSION", 1}, {"WARN", 2}, {"INFO", 3}, {"ABORT", 4}, {"TRACE", 5},
      {"info", 3},    {"Trace", 5}, {"wArN", 2}, {"bogus", 0}, {"", 0},
      {NULL, 0},
  };
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (cases[i].env != NULL)
      setenv("NCCL_DEBUG", cases[i].env, 1);
    else
      unsetenv("NCCL_DEBUG");
    reset();
    assert_int_equal(brd_log_level_cur, -1);
    brd_log_init();
    assert_int_equal(brd_log_level_cur, cases[i].level);
  }
}

static void test_subsys(void **state) {
  (void)state;
  static const struct { const char *env; unsigned long mask; } cases[] = {
      {NULL, 0x1ul | 0x1000ul | 0x80ul},  /* INIT,BOOTSTRAP,ENV */
      {"INIT,COLL", 0x3ul},
      {"^INIT,COLL", ~0x3ul},
      {"net,Graph", 0x30ul},
      {"INIT,,BOGUS,P2P", 0x5ul},
      {"ALL", ~0ul},
      {"^ALL", 0ul},
      {"^", ~0ul},
      {"SHM,TUNING,ALLOC,CALL,PROXY,NVLS,REG,PROFILE,RAS",
       0x8ul | 0x40ul | 0x100ul | 0x200ul | 0x400ul | 0x800ul | 0x2000ul | 0x4000ul | 0x8000ul},
  };
  setenv("NCCL_DEBUG", "INFO", 1);
  for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
    if (cases[i].env != NULL)
      setenv("NCCL_DEBUG_SUBSYS", cases[i].env, 1);
    else
      unsetenv("NCCL_DEBUG_SUBSYS");
    reset();
    brd_log_init();
    assert_true(brd_log_mask_cur == cases[i].mask);
  }
}

static void test_info_line_format(void **state) {
  (void)state;
  char host[256], expect_path[600];
  short_host(host, sizeof(host));
  /* %h and %p expand, %% is a percent sign, an unknown %x stays. */
  char pattern[300];
  snprintf(pattern, sizeof(pattern), "%s/dbg.%%h.%%p.%%%%.%%x", tmpdir);
  snprintf(expect_path, sizeof(expect_path), "%s/dbg.%s.%d.%%.%%x", tmpdir, host,
           (int)getpid());
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "INIT", 1);
  setenv("NCCL_DEBUG_FILE", pattern, 1);
  reset();
  brd_log_set_thread_dev(3);
  INFO(BRD_SUBSYS_INIT, "hello %d", 42);
  brd_log_set_thread_dev(-1);
  INFO(BRD_SUBSYS_INIT | BRD_SUBSYS_NET, "second");
  brd_log_reset();

  char expect[1024];
  int pid = (int)getpid();
  int tid = (int)syscall(SYS_gettid);
  snprintf(expect, sizeof(expect),
           "%s:%d:%d [3] NCCL INFO hello 42\n"
           "%s:%d:%d [0] NCCL INFO second\n",
           host, pid, tid, host, pid, tid);
  assert_string_equal(slurp(expect_path), expect);
  unlink(expect_path);
}

static void test_warn_line_format(void **state) {
  (void)state;
  char host[256];
  short_host(host, sizeof(host));
  log_to_file("WARN", NULL);
  brd_log_set_thread_dev(5);
  int line = __LINE__ + 1;
  WARN("boom %s", "now");
  const char *text = log_text();

  /* "\n[YYYY-MM-DD HH:MM:SS] host:pid:tid [5] file:line NCCL WARN boom now\n" */
  assert_int_equal(text[0], '\n');
  int y, mo, d, h, mi, s, n = 0;
  assert_int_equal(sscanf(text + 1, "[%4d-%2d-%2d %2d:%2d:%2d] %n", &y, &mo, &d, &h, &mi, &s, &n), 6);
  assert_int_equal(n, 22);
  assert_true(y >= 2024 && mo >= 1 && mo <= 12 && d >= 1 && d <= 31);
  char expect[1024];
  snprintf(expect, sizeof(expect), "%s:%d:%d [5] %s:%d NCCL WARN boom now\n", host,
           (int)getpid(), (int)syscall(SYS_gettid), __FILE__, line);
  assert_string_equal(text + 1 + n, expect);
}

static void *trace_thread(void *arg) {
  int *tid = arg;
  *tid = (int)syscall(SYS_gettid);
  TRACE_CALL("ncclFoo(%d)", 9);
  TRACE(BRD_SUBSYS_COLL, "step %d", 2);
  return NULL;
}

static void test_trace_and_call_lines(void **state) {
  (void)state;
  char host[256];
  short_host(host, sizeof(host));
  log_to_file("TRACE", "CALL,COLL");
  pthread_t t;
  int tid = 0;
  assert_int_equal(pthread_create(&t, NULL, trace_thread, &tid), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  const char *text = log_text();
  /* The other thread's id, not ours. */
  assert_int_not_equal(tid, (int)syscall(SYS_gettid));
  char expect[512];
  snprintf(expect, sizeof(expect), "%s:%d:%d NCCL CALL ncclFoo(9)\n", host, (int)getpid(), tid);
  assert_memory_equal(text, expect, strlen(expect));
  /* "host:pid:tid [0] <ms> file:line NCCL TRACE step 2" */
  const char *second = text + strlen(expect);
  snprintf(expect, sizeof(expect), "%s:%d:%d [0] ", host, (int)getpid(), tid);
  assert_memory_equal(second, expect, strlen(expect));
  double ms = -1;
  char where[256];
  assert_int_equal(sscanf(second + strlen(expect), "%lf %255s NCCL TRACE", &ms, where), 2);
  assert_true(ms >= 0.0 && ms < 60000.0);
  assert_non_null(strstr(where, "test_debug.c:"));
  assert_non_null(strstr(second, " NCCL TRACE step 2\n"));
}

static void test_filtered_writes_nothing(void **state) {
  (void)state;
  log_to_file("INFO", "NET");
  INFO(BRD_SUBSYS_INIT, "not shown");
  TRACE(BRD_SUBSYS_NET, "not shown either");
  assert_string_equal(log_text(), "");

  log_to_file("WARN", "ALL");
  INFO(BRD_SUBSYS_NET, "below WARN");
  assert_string_equal(log_text(), "");

  /* ^ALL masks everything, WARN included; the text is still recorded. */
  log_to_file("WARN", "^ALL");
  WARN("masked %d", 1);
  assert_string_equal(log_text(), "");
  assert_string_equal(brd_log_last_error(), "masked 1");
}

static void warn_unset(void) { WARN("code %d", 7); }

static void test_last_error_without_debug(void **state) {
  (void)state;
  brd_log_set_last_error("before");
  assert_string_equal(brd_log_last_error(), "before");
  const char *out = capture_stdout(warn_unset);
  assert_string_equal(out, "");
  assert_string_equal(brd_log_last_error(), "code 7");
}

static void *warn_thread(void *arg) {
  (void)arg;
  WARN("from thread %d", 5);
  return NULL;
}

static void *read_thread(void *arg) {
  char *copy = arg;
  snprintf(copy, 64, "%s", brd_log_last_error());
  return NULL;
}

static void test_last_error_threads(void **state) {
  (void)state;
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, warn_thread, NULL), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_string_equal(brd_log_last_error(), "from thread 5");

  brd_log_set_last_error("set in %s", "main");
  char seen[64] = "";
  assert_int_equal(pthread_create(&t, NULL, read_thread, seen), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_string_equal(seen, "set in main");
}

static void *own_thread(void *arg) {
  char *copy = arg;
  snprintf(copy, 64, "[%s]", brd_log_thread_last_error());
  WARN("own %d", 8);
  snprintf(copy + strlen(copy), 64 - strlen(copy), "[%s]", brd_log_thread_last_error());
  return NULL;
}

/* Each thread's own last WARN: another thread's later WARN is the
 * process's last error but not this thread's; a NOWARN probe is neither. */
static void test_thread_last_error(void **state) {
  (void)state;
  pthread_t t;
  char seen[64] = "";
  WARN("main's %d", 1);
  assert_int_equal(pthread_create(&t, NULL, own_thread, seen), 0);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_string_equal(seen, "[][own 8]");
  assert_string_equal(brd_log_last_error(), "own 8");
  assert_string_equal(brd_log_thread_last_error(), "main's 1");
  NOWARN(WARN("probe %d", 2), BRD_SUBSYS_NET);
  assert_string_equal(brd_log_thread_last_error(), "main's 1");
}

static void test_set_last_error_does_not_print(void **state) {
  (void)state;
  log_to_file("TRACE", "ALL");
  brd_log_set_last_error("quiet %d", 3);
  assert_string_equal(log_text(), "");
  assert_string_equal(brd_log_last_error(), "quiet 3");
}

static void test_nowarn(void **state) {
  (void)state;
  log_to_file("INFO", "NET");
  brd_log_set_last_error("kept");
  NOWARN(WARN("probe failed"), BRD_SUBSYS_NET);
  WARN("real");
  const char *text = log_text();
  assert_non_null(strstr(text, "NCCL INFO probe failed\n"));
  assert_null(strstr(text, "NCCL WARN probe failed"));
  assert_non_null(strstr(text, "NCCL WARN real\n"));
  assert_string_equal(brd_log_last_error(), "real");
}

static void test_reset_rereads(void **state) {
  (void)state;
  char other[300];
  snprintf(other, sizeof(other), "%s/other", tmpdir);
  log_to_file("INFO", "INIT");
  INFO(BRD_SUBSYS_INIT, "first");
  /* Changing the environment alone changes nothing... */
  setenv("NCCL_DEBUG", "WARN", 1);
  setenv("NCCL_DEBUG_FILE", other, 1);
  INFO(BRD_SUBSYS_INIT, "second");
  assert_int_equal(brd_log_level_cur, 3);
  /* ...until the reset. */
  brd_log_reset();
  assert_int_equal(brd_log_level_cur, -1);
  INFO(BRD_SUBSYS_INIT, "third");
  WARN("fourth");
  assert_int_equal(brd_log_level_cur, 2);
  brd_log_reset();
  const char *first = slurp(log_path);
  assert_non_null(strstr(first, "NCCL INFO first\n"));
  assert_non_null(strstr(first, "NCCL INFO second\n"));
  assert_null(strstr(first, "third"));
  assert_null(strstr(first, "fourth"));
  const char *second = slurp(other);
  assert_null(strstr(second, "third"));
  assert_non_null(strstr(second, "NCCL WARN fourth\n"));
  unlink(other);
}

static void info_line(void) { INFO(BRD_SUBSYS_INIT, "to stdout"); }

static void test_bad_file_falls_back_to_stdout(void **state) {
  (void)state;
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_FILE", "/nonexistent-dir/sub/log", 1);
  reset();
  const char *out = capture_stdout(info_line);
  assert_non_null(strstr(out, "NCCL INFO to stdout\n"));
}

static void test_conf_file_applies(void **state) {
  (void)state;
  char conf[300];
  snprintf(conf, sizeof(conf), "%s/.nccl.conf", tmpdir);
  FILE *f = fopen(conf, "w");
  assert_non_null(f);
  fprintf(f, "NCCL_DEBUG=TRACE\nNCCL_DEBUG_SUBSYS=^INIT\n");
  fclose(f);
  reset();
  brd_log_init();
  assert_int_equal(brd_log_level_cur, 5);
  assert_true(brd_log_mask_cur == ~0x1ul);
  /* The environment still wins over the file. */
  setenv("NCCL_DEBUG", "WARN", 1);
  reset();
  brd_log_init();
  assert_int_equal(brd_log_level_cur, 2);
  unlink(conf);
}

static void test_timestamps(void **state) {
  (void)state;
  log_to_file("INFO", "INIT");
  setenv("NCCL_DEBUG_TIMESTAMP_LEVELS", "INFO", 1);
  setenv("NCCL_DEBUG_TIMESTAMP_FORMAT", "<%Y_%3f>_", 1);
  reset();
  INFO(BRD_SUBSYS_INIT, "stamped");
  WARN("not stamped");
  const char *text = log_text();
  int year = 0, ms = -1, n = 0;
  assert_int_equal(sscanf(text, "<%4d %3d> %n", &year, &ms, &n), 2);
  assert_int_equal(n, 11);
  assert_true(year >= 2024 && ms >= 0 && ms <= 999);
  /* The WARN line starts with its newline and then the host directly. */
  const char *warn = strstr(text, "\n\n");
  assert_non_null(warn);
  char host[256];
  short_host(host, sizeof(host));
  assert_memory_equal(warn + 2, host, strlen(host));
}

static void test_warn_enables_info(void **state) {
  (void)state;
  log_to_file("WARN", "ALL");
  setenv("NCCL_WARN_ENABLE_DEBUG_INFO", "1", 1);
  reset();
  INFO(BRD_SUBSYS_INIT, "before");
  WARN("trigger");
  INFO(BRD_SUBSYS_INIT, "after");
  const char *text = log_text();
  assert_null(strstr(text, "before"));
  assert_non_null(strstr(text, "NCCL WARN trigger\n"));
  assert_non_null(strstr(text, "NCCL INFO after\n"));
}

static void test_abort_level_logs_like_info(void **state) {
  (void)state;
  log_to_file("ABORT", "INIT");
  INFO(BRD_SUBSYS_INIT, "info at abort");
  TRACE(BRD_SUBSYS_INIT, "no trace");
  WARN("a warning does not abort");
  const char *text = log_text();
  assert_non_null(strstr(text, "NCCL INFO info at abort\n"));
  assert_null(strstr(text, "no trace"));
  assert_non_null(strstr(text, "NCCL WARN a warning does not abort\n"));
}

#define LOG_THREADS 4
#define LOG_LINES 200

static void *spam_thread(void *arg) {
  int id = (int)(intptr_t)arg;
  brd_log_set_thread_dev(id);
  for (int i = 0; i < LOG_LINES; i++) INFO(BRD_SUBSYS_COLL, "t%d line %d", id, i);
  return NULL;
}

static void test_concurrent_lines_stay_whole(void **state) {
  (void)state;
  /* Threads race to initialise the logger and write; every line must come
   * out whole, once, with its own thread's device. */
  log_to_file("INFO", "COLL");
  pthread_t t[LOG_THREADS];
  for (int i = 0; i < LOG_THREADS; i++)
    assert_int_equal(pthread_create(&t[i], NULL, spam_thread, (void *)(intptr_t)(i + 1)), 0);
  for (int i = 0; i < LOG_THREADS; i++) assert_int_equal(pthread_join(t[i], NULL), 0);
  brd_log_reset();
  FILE *f = fopen(log_path, "r");
  assert_non_null(f);
  char line[256];
  int seen[LOG_THREADS + 1] = {0};
  int lines = 0;
  while (fgets(line, sizeof(line), f) != NULL) {
    int dev = -1, id = -1, n = -1;
    const char *p = strstr(line, " [");
    assert_non_null(p);
    assert_int_equal(sscanf(p, " [%d] NCCL INFO t%d line %d", &dev, &id, &n), 3);
    assert_int_equal(dev, id);
    assert_true(id >= 1 && id <= LOG_THREADS);
    assert_int_equal(n, seen[id]); /* each thread's lines in its order */
    seen[id]++;
    lines++;
  }
  fclose(f);
  assert_int_equal(lines, LOG_THREADS * LOG_LINES);
}

static void banner(void) { brd_log_banner(); }

/* Last: the banner prints once per process. */
static void test_banner_once(void **state) {
  (void)state;
  setenv("NCCL_DEBUG", "VERSION", 1);
  setenv("NCCL_DEBUG_FILE", log_path, 1); /* not used below INFO, as NCCL */
  reset();
  const char *out = capture_stdout(banner);
  assert_string_equal(out, "NCCL version 2.30.7+braid" BRAID_VERSION "\n");
  out = capture_stdout(banner);
  assert_string_equal(out, "");
  assert_string_equal(slurp(log_path), "");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup(test_levels, setup),
      cmocka_unit_test_setup(test_subsys, setup),
      cmocka_unit_test_setup(test_info_line_format, setup),
      cmocka_unit_test_setup(test_warn_line_format, setup),
      cmocka_unit_test_setup(test_trace_and_call_lines, setup),
      cmocka_unit_test_setup(test_filtered_writes_nothing, setup),
      cmocka_unit_test_setup(test_last_error_without_debug, setup),
      cmocka_unit_test_setup(test_last_error_threads, setup),
      cmocka_unit_test_setup(test_set_last_error_does_not_print, setup),
      cmocka_unit_test_setup(test_nowarn, setup),
      cmocka_unit_test_setup(test_reset_rereads, setup),
      cmocka_unit_test_setup(test_bad_file_falls_back_to_stdout, setup),
      cmocka_unit_test_setup(test_conf_file_applies, setup),
      cmocka_unit_test_setup(test_timestamps, setup),
      cmocka_unit_test_setup(test_warn_enables_info, setup),
      cmocka_unit_test_setup(test_abort_level_logs_like_info, setup),
      cmocka_unit_test_setup(test_concurrent_lines_stay_whole, setup),
      cmocka_unit_test_setup(test_banner_once, setup),
      cmocka_unit_test_setup(test_thread_last_error, setup),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
