/*
 * Braid logging, with NCCL's settings and line format:
 *
 *   [timestamp ]host:pid:tid [dev] NCCL INFO msg
 *   \n[timestamp ]host:pid:tid [dev] file:line NCCL WARN msg
 *   host:pid:tid [dev] ms file:line NCCL TRACE msg
 *   host:pid:tid NCCL CALL msg                (TRACE with subsystem CALL)
 *   msg                                       (VERSION)
 *
 * The host name stops at its first '.', tid is the kernel thread id, and
 * timestamps go on the levels named by NCCL_DEBUG_TIMESTAMP_LEVELS (WARN by
 * default). NCCL_DEBUG=ABORT logs like INFO and, as in NCCL 2.28, never
 * aborts anything.
 *
 * Settings are read through brd_param_getenv, so conf files apply. One mutex
 * serialises (re)initialisation, writing and the last-error text; the level
 * is published last with release order so the lock-free check in
 * brd_log_on sees a complete mask.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"
#include "base/debug.h"
#include "base/env_plugin.h"
#include "base/param.h"

#define LOG_LINE_MAX 1024
#define LAST_ERROR_MAX 1024
#define TS_FORMAT_MAX 256
#define TS_FORMAT_DEFAULT "[%F %T] "

#define STR2(x) #x
#define STR(x) STR2(x)
#define BANNER_TEXT "NCCL version " STR(NCCL_MAJOR) "." STR(NCCL_MINOR) "." \
                    STR(NCCL_PATCH) "+braid" BRAID_VERSION

volatile int brd_log_level_cur = -1;
volatile unsigned long brd_log_mask_cur = 0;

static pthread_mutex_t log_mutex = PTHREAD_MUTEX_INITIALIZER;

/* Written by log_init_locked, read under log_mutex. */
static FILE *log_file;              /* owned when not NULL; NULL means stdout */
static char log_host[256];
static int log_pid;
static unsigned log_ts_levels;      /* bit (1 << level) set: timestamp */
static char log_ts_format[TS_FORMAT_MAX];
static int log_ts_sub_pos = -1;     /* offset of a %Nf in log_ts_format */
static int log_ts_sub_digits;
static int log_warn_raises_info;    /* NCCL_WARN_ENABLE_DEBUG_INFO */
static struct timespec log_epoch;   /* TRACE times are relative to this */

static char last_error[LAST_ERROR_MAX];   /* under log_mutex */

static _Thread_local int thread_tid = -1;
static _Thread_local int thread_dev = -1;
static _Thread_local unsigned long thread_nowarn;
static _Thread_local char thread_last_error[LAST_ERROR_MAX];
static _Thread_local char thread_own_error[LAST_ERROR_MAX]; /* this thread's last WARN */

static int parse_level(const char *s) {
  static const struct { const char *name; int level; } levels[] = {
      {"VERSION", BRD_LOG_VERSION}, {"WARN", BRD_LOG_WARN},
      {"INFO", BRD_LOG_INFO},       {"ABORT", BRD_LOG_ABORT},
      {"TRACE", BRD_LOG_TRACE},
  };
  if (s == NULL) return BRD_LOG_NONE;
  for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++) {
    if (strcasecmp(s, levels[i].name) == 0) return levels[i].level;
  }
  /* NCCL prints nothing for a level it does not know. */
  return BRD_LOG_NONE;
}

static unsigned long subsys_bit(const char *name) {
  static const struct { const char *name; unsigned long bit; } names[] = {
      {"INIT", BRD_SUBSYS_INIT},     {"COLL", BRD_SUBSYS_COLL},
      {"P2P", BRD_SUBSYS_P2P},       {"SHM", BRD_SUBSYS_SHM},
      {"NET", BRD_SUBSYS_NET},       {"GRAPH", BRD_SUBSYS_GRAPH},
      {"TUNING", BRD_SUBSYS_TUNING}, {"ENV", BRD_SUBSYS_ENV},
      {"ALLOC", BRD_SUBSYS_ALLOC},   {"CALL", BRD_SUBSYS_CALL},
      {"PROXY", BRD_SUBSYS_PROXY},   {"NVLS", BRD_SUBSYS_NVLS},
      {"BOOTSTRAP", BRD_SUBSYS_BOOTSTRAP}, {"REG", BRD_SUBSYS_REG},
      {"PROFILE", BRD_SUBSYS_PROFILE}, {"RAS", BRD_SUBSYS_RAS},
      {"ALL", BRD_SUBSYS_ALL},
  };
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
    if (strcasecmp(name, names[i].name) == 0) return names[i].bit;
  }
  return 0;
}

/* Comma list of words, each mapped to bits by map(); a leading '^' starts
 * from everything and removes the words instead. Unknown words and empty
 * items are ignored, as NCCL does. */
static unsigned long parse_list(const char *s, unsigned long (*map)(const char *)) {
  int invert = 0;
  if (s[0] == '^') {
    invert = 1;
    s++;
  }
  unsigned long mask = invert ? ~0ul : 0ul;
  char word[64];
  while (*s != '\0') {
    size_t n = strcspn(s, ",");
    if (n > 0 && n < sizeof(word)) {
      memcpy(word, s, n);
      word[n] = '\0';
      unsigned long bits = map(word);
      mask = invert ? (mask & ~bits) : (mask | bits);
    }
    s += n;
    if (*s == ',') s++;
  }
  return mask;
}

static unsigned long level_bit(const char *name) {
  if (strcasecmp(name, "ALL") == 0) return ~0ul;
  int level = parse_level(name);
  return level == BRD_LOG_NONE ? 0ul : 1ul << level;
}

/* Copies the timestamp format, finds a %Nf (N in 1..9) for sub-seconds and
 * turns '_' into ' ' (spaces are awkward on command lines). */
static void set_ts_format(const char *fmt) {
  if (strlen(fmt) >= sizeof(log_ts_format)) fmt = TS_FORMAT_DEFAULT;
  snprintf(log_ts_format, sizeof(log_ts_format), "%s", fmt);
  log_ts_sub_pos = -1;
  for (int i = 0; log_ts_format[i] != '\0'; i++) {
    if (log_ts_format[i] != '%') continue;
    if (log_ts_format[i + 1] == '%') {
      i++;
      continue;
    }
    if (log_ts_format[i + 1] >= '1' && log_ts_format[i + 1] <= '9' &&
        log_ts_format[i + 2] == 'f') {
      log_ts_sub_pos = i;
      log_ts_sub_digits = log_ts_format[i + 1] - '0';
      break;
    }
  }
  for (int i = 0; log_ts_format[i] != '\0'; i++) {
    if (log_ts_format[i] == '_') log_ts_format[i] = ' ';
  }
}

/* The host name up to its first '.', or "unknown". */
static void set_host(void) {
  if (gethostname(log_host, sizeof(log_host)) != 0) {
    snprintf(log_host, sizeof(log_host), "unknown");
    return;
  }
  log_host[sizeof(log_host) - 1] = '\0';
  log_host[strcspn(log_host, ".")] = '\0';
}

/* NCCL_DEBUG_FILE with %h (host), %p (pid), %% ('%'); any other %x is kept
 * as written. Returns 0 when the result does not fit. */
static int expand_path(const char *pattern, char *out, size_t len) {
  size_t o = 0;
  for (const char *p = pattern; *p != '\0'; p++) {
    char piece[32];
    const char *add = piece;
    if (p[0] != '%') {
      piece[0] = p[0];
      piece[1] = '\0';
    } else if (p[1] == 'h') {
      add = log_host;
      p++;
    } else if (p[1] == 'p') {
      snprintf(piece, sizeof(piece), "%d", log_pid);
      p++;
    } else if (p[1] == '%') {
      snprintf(piece, sizeof(piece), "%%");
      p++;
    } else if (p[1] == '\0') {
      snprintf(piece, sizeof(piece), "%%");
    } else {
      piece[0] = '%';
      piece[1] = p[1];
      piece[2] = '\0';
      p++;
    }
    size_t n = strlen(add);
    if (o + n >= len) return 0;
    memcpy(out + o, add, n);
    o += n;
  }
  out[o] = '\0';
  return 1;
}

/* (Re)reads every setting. log_mutex held. */
static void log_init_locked(void) {
  if (log_file != NULL) {
    fclose(log_file);
    log_file = NULL;
  }
  int level = parse_level(brd_param_getenv(brd_param_table[BRD_P_DEBUG].name));

  const char *subsys = brd_param_getenv(brd_param_table[BRD_P_DEBUG_SUBSYS].name);
  if (subsys == NULL) subsys = brd_param_table[BRD_P_DEBUG_SUBSYS].def;
  unsigned long mask = parse_list(subsys, subsys_bit);

  const char *raise = brd_param_getenv(brd_param_table[BRD_P_WARN_ENABLE_DEBUG_INFO].name);
  log_warn_raises_info = 0;
  if (raise != NULL && raise[0] != '\0') {
    errno = 0;
    long long v = strtoll(raise, NULL, 0);
    if (errno == 0) log_warn_raises_info = v != 0;
  }

  const char *ts = brd_param_getenv(brd_param_table[BRD_P_DEBUG_TIMESTAMP_LEVELS].name);
  log_ts_levels = ts == NULL ? 1u << BRD_LOG_WARN : (unsigned)parse_list(ts, level_bit);
  const char *tsfmt = brd_param_getenv(brd_param_table[BRD_P_DEBUG_TIMESTAMP_FORMAT].name);
  set_ts_format(tsfmt != NULL ? tsfmt : TS_FORMAT_DEFAULT);

  set_host();
  log_pid = (int)getpid();

  /* Like NCCL, a log file is only worth creating above VERSION; when it
   * cannot be created the log stays on stdout. */
  const char *file = brd_param_getenv(brd_param_table[BRD_P_DEBUG_FILE].name);
  if (level > BRD_LOG_VERSION && file != NULL) {
    char path[PATH_MAX];
    if (expand_path(file, path, sizeof(path)) && path[0] != '\0') {
      FILE *f = fopen(path, "w");
      if (f != NULL) {
        setlinebuf(f);
        log_file = f;
      }
    }
  }

  clock_gettime(CLOCK_MONOTONIC, &log_epoch);
  __atomic_store_n(&brd_log_mask_cur, mask, __ATOMIC_RELAXED);
  __atomic_store_n(&brd_log_level_cur, level, __ATOMIC_RELEASE);
}

/* See debug.h. */
void brd_log_init(void) {
  int saved_errno = errno;
  /* The settings may come from an env plugin, whose load logs: load it
   * before taking the log's lock. */
  brd_env_plugin_init();
  pthread_mutex_lock(&log_mutex);
  if (__atomic_load_n(&brd_log_level_cur, __ATOMIC_RELAXED) < 0) log_init_locked();
  pthread_mutex_unlock(&log_mutex);
  errno = saved_errno;
}

/* See debug.h. */
void brd_log_reset(void) {
  pthread_mutex_lock(&log_mutex);
  if (log_file != NULL) {
    fclose(log_file);
    log_file = NULL;
  }
  __atomic_store_n(&brd_log_level_cur, -1, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&log_mutex);
}

/* See debug.h. */
void brd_log_set_thread_dev(int dev) { thread_dev = dev; }

/* See debug.h. */
unsigned long brd_log_nowarn_swap(unsigned long subsys) {
  unsigned long prev = thread_nowarn;
  thread_nowarn = subsys;
  return prev;
}

/* Adds n (a snprintf result) to len, never past the last byte of the
 * buffer, which the newline takes. */
static size_t advance(size_t len, int n) {
  if (n > 0) len += (size_t)n;
  return len > LOG_LINE_MAX - 1 ? LOG_LINE_MAX - 1 : len;
}

/* Writes the timestamp for now into buf. log_mutex held. */
static size_t format_timestamp(char *buf, size_t len) {
  if (log_ts_format[0] == '\0') return 0;
  struct timespec now;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &now);
  localtime_r(&now.tv_sec, &tm);
  char fmt[TS_FORMAT_MAX + 16];
  if (log_ts_sub_pos >= 0) {
    /* Replace "%Nf" by N digits of the fraction of the second. */
    long scale = 1000000000L;
    for (int i = 0; i < log_ts_sub_digits; i++) scale /= 10;
    snprintf(fmt, sizeof(fmt), "%.*s%0*ld%s", log_ts_sub_pos, log_ts_format,
             log_ts_sub_digits, now.tv_nsec / scale,
             log_ts_format + log_ts_sub_pos + 3);
  } else {
    snprintf(fmt, sizeof(fmt), "%s", log_ts_format);
  }
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  /* The format is the user's NCCL_DEBUG_TIMESTAMP_FORMAT. */
  size_t n = strftime(buf, len, fmt, &tm);
#pragma GCC diagnostic pop
  if (n == 0) n = strftime(buf, len, TS_FORMAT_DEFAULT, &tm);
  return n;
}

/* Path as NCCL prints it: relative to the source root ("core/init.c"). */
static const char *short_file(const char *file) {
  return strncmp(file, "src/", 4) == 0 ? file + 4 : file;
}

/* Formats and writes one line if the settings, read now if need be, let it
 * through. */
__attribute__((format(printf, 5, 0)))
static void log_write(brd_log_level_t level, unsigned long subsys, const char *file,
                      int line, const char *fmt, va_list ap) {
  if (__atomic_load_n(&brd_log_level_cur, __ATOMIC_ACQUIRE) < 0) brd_env_plugin_init();
  pthread_mutex_lock(&log_mutex);
  if (brd_log_level_cur < 0) log_init_locked();
  if (brd_log_level_cur >= (int)level && (brd_log_mask_cur & subsys) != 0) {
    if (thread_tid < 0) thread_tid = (int)syscall(SYS_gettid);
    char buf[LOG_LINE_MAX];
    size_t len = 0;
    int dev = thread_dev < 0 ? 0 : thread_dev;
    if (level == BRD_LOG_WARN) buf[len++] = '\n';
    if (log_ts_levels & (1u << level))
      len = advance(len, (int)format_timestamp(buf + len, sizeof(buf) - len));
    if (level != BRD_LOG_VERSION)
      len = advance(len, snprintf(buf + len, sizeof(buf) - len, "%s:%d:%d ",
                                  log_host, log_pid, thread_tid));
    if (level == BRD_LOG_WARN) {
      len = advance(len, snprintf(buf + len, sizeof(buf) - len, "[%d] %s:%d NCCL WARN ",
                                  dev, short_file(file), line));
      if (log_warn_raises_info)
        __atomic_store_n(&brd_log_level_cur, BRD_LOG_INFO, __ATOMIC_RELEASE);
    } else if (level == BRD_LOG_INFO) {
      len = advance(len, snprintf(buf + len, sizeof(buf) - len, "[%d] NCCL INFO ", dev));
    } else if (level == BRD_LOG_TRACE && subsys == BRD_SUBSYS_CALL) {
      len = advance(len, snprintf(buf + len, sizeof(buf) - len, "NCCL CALL "));
    } else if (level == BRD_LOG_TRACE) {
      struct timespec now;
      clock_gettime(CLOCK_MONOTONIC, &now);
      double ms = (double)(now.tv_sec - log_epoch.tv_sec) * 1e3 +
                  (double)(now.tv_nsec - log_epoch.tv_nsec) / 1e6;
      len = advance(len, snprintf(buf + len, sizeof(buf) - len, "[%d] %f %s:%d NCCL TRACE ",
                                  dev, ms, short_file(file), line));
    }
    len = advance(len, vsnprintf(buf + len, sizeof(buf) - len, fmt, ap));
    buf[len++] = '\n';
    fwrite(buf, 1, len, log_file != NULL ? log_file : stdout);
  }
  pthread_mutex_unlock(&log_mutex);
}

/* See debug.h. */
void brd_log(brd_log_level_t level, unsigned long subsys, const char *file,
             int line, const char *fmt, ...) {
  va_list ap;
  /* Callers may log between a failing call and their look at errno. */
  int saved_errno = errno;
  if (level == BRD_LOG_WARN && thread_nowarn != 0) {
    level = BRD_LOG_INFO;
    subsys = thread_nowarn;
  }
  /* The last error is kept whatever the level, even with logging off. */
  if (level == BRD_LOG_WARN) {
    pthread_mutex_lock(&log_mutex);
    va_start(ap, fmt);
    (void)vsnprintf(last_error, sizeof(last_error), fmt, ap);
    va_end(ap);
    memcpy(thread_own_error, last_error, sizeof(thread_own_error));
    pthread_mutex_unlock(&log_mutex);
  }
  /* Unlocked fast path: settings not read yet, or the line passes. */
  int cur = __atomic_load_n(&brd_log_level_cur, __ATOMIC_ACQUIRE);
  if (cur < 0 || (cur >= (int)level &&
                  (__atomic_load_n(&brd_log_mask_cur, __ATOMIC_RELAXED) & subsys) != 0)) {
    va_start(ap, fmt);
    log_write(level, subsys, file, line, fmt, ap);
    va_end(ap);
  }
  errno = saved_errno;
}

/* See debug.h. */
const char *brd_log_last_error(void) {
  pthread_mutex_lock(&log_mutex);
  memcpy(thread_last_error, last_error, sizeof(thread_last_error));
  pthread_mutex_unlock(&log_mutex);
  return thread_last_error;
}

/* See debug.h. */
const char *brd_log_thread_last_error(void) { return thread_own_error; }

/* See debug.h. */
void brd_log_set_last_error(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&log_mutex);
  va_start(ap, fmt);
  (void)vsnprintf(last_error, sizeof(last_error), fmt, ap);
  va_end(ap);
  pthread_mutex_unlock(&log_mutex);
}

static void banner_once(void) {
  if (brd_log_on(BRD_LOG_VERSION, BRD_SUBSYS_ALL)) {
    int level = __atomic_load_n(&brd_log_level_cur, __ATOMIC_ACQUIRE);
    if (level == BRD_LOG_VERSION || level == BRD_LOG_WARN)
      brd_log(BRD_LOG_VERSION, BRD_SUBSYS_ALL, __FILE__, __LINE__, "%s", BANNER_TEXT);
    else
      INFO(BRD_SUBSYS_ALL, "%s", BANNER_TEXT);
  }
  brd_param_log_all();
}

/* See debug.h. */
void brd_log_banner(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, banner_once);
}
