/*
 * Braid: bounded host waits on CUDA streams, and the work they gave up on
 * (cuda_wait.h).
 */
#include "base/cuda_wait.h"

#if BRAID_CUDA
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include <cuda_runtime.h>

#include "base/debug.h"
#include "base/param.h"
#include "base/time.h"

/* Work that brd_cuda_stream_wait gave up on: an event recorded
 * behind it on its stream, kept until a query sees it done. */
#define STUCK_MAX 64
static pthread_mutex_t stuck_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  cudaEvent_t ev;
  int dev;
} stuck_work[STUCK_MAX];            /* under stuck_lock */
static int nstuck;                  /* under stuck_lock */
/* Under stuck_lock: work that could not be recorded (the table full of
 * work still queued, or no event to be had), so its device counts as
 * stuck for good; a device number past STUCK_DEVS marks every device. */
#define STUCK_DEVS 256
static unsigned char stuck_unknown[STUCK_DEVS];
static unsigned char stuck_unknown_all;

/* Forgets the recorded work seen done; returns whether any left is on
 * device dev. stuck_lock held. */
static int stuck_sweep(int dev) {
  int any = 0;
  for (int i = 0; i < nstuck;) {
    cudaError_t e = cudaEventQuery(stuck_work[i].ev);
    if (e == cudaErrorNotReady) {
      any |= stuck_work[i].dev == dev;
      i++;
      continue;
    }
    /* Done, or failed (its stream will not run it): it holds nothing. */
    (void)cudaGetLastError();
    cudaEventDestroy(stuck_work[i].ev);
    stuck_work[i] = stuck_work[--nstuck];
  }
  return any;
}

/* Records that the work on s (on the current device) may never end. */
static void stuck_record(cudaStream_t s) {
  cudaEvent_t ev = NULL;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess) (void)cudaGetLastError();
  pthread_mutex_lock(&stuck_lock);
  if (nstuck == STUCK_MAX) (void)stuck_sweep(-1); /* room from work that ended */
  if (nstuck < STUCK_MAX &&
      cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) == cudaSuccess &&
      cudaEventRecord(ev, s) == cudaSuccess) {
    stuck_work[nstuck].ev = ev;
    stuck_work[nstuck].dev = dev;
    nstuck++;
  } else {
    (void)cudaGetLastError();
    if (ev != NULL) cudaEventDestroy(ev);
    if (dev >= 0 && dev < STUCK_DEVS)
      stuck_unknown[dev] = 1;
    else
      stuck_unknown_all = 1;
  }
  pthread_mutex_unlock(&stuck_lock);
}

/* See cuda_wait.h. */
int brd_cuda_stuck(int dev) {
  pthread_mutex_lock(&stuck_lock);
  int any = stuck_sweep(dev) || stuck_unknown_all ||
            (dev >= 0 && dev < STUCK_DEVS && stuck_unknown[dev]);
  pthread_mutex_unlock(&stuck_lock);
  return any;
}

/* See cuda_wait.h. */
void brd_cuda_leak_info(size_t bytes, const char *what) {
  INFO(BRD_SUBSYS_ALLOC, "CUDA: leaving %zu bytes of %s allocated: work queued on the "
       "device that a bounded wait gave up on may still use them, and freeing would "
       "wait for the whole device, behind that work", bytes, what);
}

/* See cuda_wait.h. */
ncclResult_t brd_cuda_stream_wait(cudaStream_t s, const char *what, _Atomic int *abort_flag,
                                  int *stuck_out) {
  int64_t t = brd_param_int(BRD_P_BRAID_TIMEOUT);
  int64_t deadline = brd_time_now_ns() + (t > 0 ? t : 300) * 1000000000LL;
  for (;;) {
    cudaError_t e = cudaStreamQuery(s);
    if (e == cudaSuccess) return ncclSuccess;
    if (e != cudaErrorNotReady) {
      (void)cudaGetLastError();
      WARN("CUDA: %s failed: %s (%d)", what, cudaGetErrorString(e), (int)e);
      *stuck_out = 1;
      return ncclUnhandledCudaError;
    }
    if (abort_flag != NULL && atomic_load(abort_flag)) {
      INFO(BRD_SUBSYS_INIT, "CUDA: %s stopped by the communicator's abort before it "
           "finished; the memory it uses stays allocated", what);
      stuck_record(s);
      *stuck_out = 1;
      return ncclSystemError;
    }
    if (brd_time_now_ns() >= deadline) {
      WARN("CUDA: %s did not finish in %lld s (BRAID_TIMEOUT). A stream of this rank's "
           "own queued behind other work of the GPU: with ranks sharing the GPU, "
           "streams share its hardware queues (CUDA_DEVICE_MAX_CONNECTIONS), and a "
           "peer's work waiting for this rank can hold the queue. Create communicators "
           "before launching collectives on other communicators of the same GPU, or "
           "raise CUDA_DEVICE_MAX_CONNECTIONS; the memory it uses stays allocated",
           what, (long long)(t > 0 ? t : 300));
      stuck_record(s);
      *stuck_out = 1;
      return ncclSystemError;
    }
    struct timespec ts = {0, 100000L};
    nanosleep(&ts, NULL);
  }
}

#endif /* BRAID_CUDA */
