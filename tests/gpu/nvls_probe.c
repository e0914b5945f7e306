/*
 * nvls_probe: NVLS on one GPU through Braid's own transport
 * (src/transport/nvls.c), as "key=value" lines and a verdict.
 *
 *   nvls_probe [--print-ptx]
 *
 * Prints CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED and the multicast
 * granularities of device 0. Where multicast is supported, for each bind
 * form (cuMulticastBindMem, cuMulticastBindAddr) it allocates a cuMem
 * buffer, has brd_nvls_create make a one-rank multicast object of it
 * (create, add device, status gathers, bind, map), and runs three tiny
 * kernels on the multicast address: multimem.st of i*seed+17 into 1031
 * words, multimem.ld_reduce.add of them (one device: the values
 * themselves), multimem.red.add of 5. Each is checked against the values
 * computed here, through the buffer's ordinary (unicast) mapping.
 *
 * The kernels are PTX (below) loaded through the driver API
 * (cuModuleLoadDataEx, via cudaGetDriverEntryPointByVersion, so nothing
 * links libcuda); --print-ptx prints it (ptxas -arch=sm_90 checks it).
 *
 * Exit: 0 PASS (or the sequence passed where no PTX loader exists, said on
 * a line); 77 after "SKIP: ..." when the build has no CUDA, no device is
 * visible, the device has no multicast, or the driver refuses to create or
 * bind a multicast object (a system fact: fabric manager, NVSwitches); 1
 * after "FAIL: ..." when Braid's sequence or a value is wrong.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_SKIP 77

/* The kernels, PTX ISA 8.1 (the first with multimem), sm_90. Thread i
 * handles word i: i = ctaid.x * ntid.x + tid.x, i < n. */
static const char probe_ptx[] =
    ".version 8.1\n"
    ".target sm_90\n"
    ".address_size 64\n"
    "\n"
    "// mc[i] = i * seed + 17, through the multicast address\n"
    ".visible .entry mm_store(.param .u64 p_mc, .param .u32 p_n, .param .u32 p_seed)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<9>;\n"
    "  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [p_mc];\n"
    "  ld.param.u32 %r1, [p_n];\n"
    "  ld.param.u32 %r2, [p_seed];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.u32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra STORE_DONE;\n"
    "  mul.wide.u32 %rd2, %r6, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  mad.lo.u32 %r7, %r6, %r2, 17;\n"
    "  multimem.st.relaxed.sys.global.u32 [%rd3], %r7;\n"
    "STORE_DONE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    "// out[i] = the sum over the bound copies of mc[i]\n"
    ".visible .entry mm_reduce(.param .u64 p_mc, .param .u64 p_out, .param .u32 p_n)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<9>;\n"
    "  .reg .b64 %rd<6>;\n"
    "  ld.param.u64 %rd1, [p_mc];\n"
    "  ld.param.u64 %rd4, [p_out];\n"
    "  ld.param.u32 %r1, [p_n];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.u32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra REDUCE_DONE;\n"
    "  mul.wide.u32 %rd2, %r6, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  multimem.ld_reduce.relaxed.sys.global.add.u32 %r7, [%rd3];\n"
    "  add.u64 %rd5, %rd4, %rd2;\n"
    "  st.global.u32 [%rd5], %r7;\n"
    "REDUCE_DONE:\n"
    "  ret;\n"
    "}\n"
    "\n"
    "// every bound copy of mc[i] += add\n"
    ".visible .entry mm_red(.param .u64 p_mc, .param .u32 p_n, .param .u32 p_add)\n"
    "{\n"
    "  .reg .pred %p<2>;\n"
    "  .reg .b32 %r<9>;\n"
    "  .reg .b64 %rd<4>;\n"
    "  ld.param.u64 %rd1, [p_mc];\n"
    "  ld.param.u32 %r1, [p_n];\n"
    "  ld.param.u32 %r2, [p_add];\n"
    "  mov.u32 %r3, %ctaid.x;\n"
    "  mov.u32 %r4, %ntid.x;\n"
    "  mov.u32 %r5, %tid.x;\n"
    "  mad.lo.u32 %r6, %r3, %r4, %r5;\n"
    "  setp.ge.u32 %p1, %r6, %r1;\n"
    "  @%p1 bra RED_DONE;\n"
    "  mul.wide.u32 %rd2, %r6, 4;\n"
    "  add.u64 %rd3, %rd1, %rd2;\n"
    "  multimem.red.relaxed.sys.global.add.u32 [%rd3], %r2;\n"
    "RED_DONE:\n"
    "  ret;\n"
    "}\n";

#if BRAID_CUDA
#include <cuda.h>
#include <cuda_runtime.h>

#include "transport/cudrv.h"
#include "transport/nvls.h"

#define WORDS 1031u     /* odd, not a multiple of the block */
#define SEED 2654435761u
#define RED_ADD 5u

/* The module entry points, the probe's own (the library loads no PTX). */
typedef struct {
  CUresult (*load)(CUmodule *, const void *, unsigned int, CUjit_option *, void **);
  CUresult (*get_function)(CUfunction *, CUmodule, const char *);
  CUresult (*launch)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                     unsigned, CUstream, void **, void **);
  CUresult (*unload)(CUmodule);
} mod_drv_t;

static int mod_load(mod_drv_t *m, char *why, size_t whylen) {
  static const struct {
    const char *name;
    size_t off;
  } syms[] = {
      {"cuModuleLoadDataEx", offsetof(mod_drv_t, load)},
      {"cuModuleGetFunction", offsetof(mod_drv_t, get_function)},
      {"cuLaunchKernel", offsetof(mod_drv_t, launch)},
      {"cuModuleUnload", offsetof(mod_drv_t, unload)},
  };
  for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion(syms[i].name, &fn, 12000, cudaEnableDefault, &q) !=
            cudaSuccess ||
        q != cudaDriverEntryPointSuccess || fn == NULL) {
      (void)cudaGetLastError();
      snprintf(why, whylen, "the driver API has no %s", syms[i].name);
      return 0;
    }
    memcpy((char *)m + syms[i].off, &fn, sizeof(fn));
  }
  return 1;
}

/* The allgather of a one-rank job: a copy. */
static ncclResult_t self_gather(void *ctx, const void *in, void *out, size_t len) {
  (void)ctx;
  memcpy(out, in, len);
  return ncclSuccess;
}

static const brd_cudrv_t *drv;

static const char *cu_text(CUresult r) {
  const char *s = NULL;
  if (drv == NULL || drv->get_error_string(r, &s) != CUDA_SUCCESS || s == NULL)
    return "unknown driver error";
  return s;
}

#define FAILED(...)                                                                  \
  do {                                                                               \
    printf("FAIL: nvls_probe: " __VA_ARGS__);                                        \
    printf("\n");                                                                    \
    goto out;                                                                        \
  } while (0)

#define CU_OR_FAIL(call, what)                                                       \
  do {                                                                               \
    CUresult r_ = (call);                                                            \
    if (r_ != CUDA_SUCCESS) FAILED("%s: %s (CUresult %d)", what, cu_text(r_), (int)r_); \
  } while (0)

#define RT_OR_FAIL(call, what)                                                       \
  do {                                                                               \
    cudaError_t e_ = (call);                                                         \
    if (e_ != cudaSuccess) FAILED("%s: %s", what, cudaGetErrorString(e_));           \
  } while (0)

/* The multimem round trip on mc (WORDS words of uc's memory). 1 pass,
 * 0 fail (said), -1 not run (no PTX loader; said). */
static int roundtrip(const char *tag, void *mc, uint32_t *uc) {
  static mod_drv_t m;
  static int have_mod = -1;
  static char mod_why[128];
  int ok = 0;
  CUmodule mod = NULL;
  uint32_t *out = NULL, *host = NULL;
  if (have_mod < 0) have_mod = mod_load(&m, mod_why, sizeof(mod_why));
  if (!have_mod) {
    printf("%s_multimem=not run (%s)\n", tag, mod_why);
    return -1;
  }
  char log[4096] = "";
  CUjit_option opt[2] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *val[2] = {log, (void *)(uintptr_t)sizeof(log)};
  CUresult lr = m.load(&mod, probe_ptx, 2, opt, val);
  if (lr != CUDA_SUCCESS) FAILED("loading the multimem PTX: %s (CUresult %d): %s", cu_text(lr), (int)lr, log);
  CUfunction f_store, f_reduce, f_red;
  CU_OR_FAIL(m.get_function(&f_store, mod, "mm_store"), "cuModuleGetFunction(mm_store)");
  CU_OR_FAIL(m.get_function(&f_reduce, mod, "mm_reduce"), "cuModuleGetFunction(mm_reduce)");
  CU_OR_FAIL(m.get_function(&f_red, mod, "mm_red"), "cuModuleGetFunction(mm_red)");
  host = malloc(WORDS * sizeof(uint32_t));
  if (host == NULL) FAILED("out of host memory");
  RT_OR_FAIL(cudaMalloc((void **)&out, WORDS * sizeof(uint32_t)), "cudaMalloc");
  RT_OR_FAIL(cudaMemset(uc, 0xa5, WORDS * sizeof(uint32_t)), "cudaMemset of the buffer");
  RT_OR_FAIL(cudaMemset(out, 0x5a, WORDS * sizeof(uint32_t)), "cudaMemset of the output");
  RT_OR_FAIL(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  CUdeviceptr mcp = (CUdeviceptr)(uintptr_t)mc, outp = (CUdeviceptr)(uintptr_t)out;
  unsigned n = WORDS, seed = SEED, add = RED_ADD;
  unsigned blocks = (WORDS + 255) / 256;
  void *a_store[] = {&mcp, &n, &seed};
  CU_OR_FAIL(m.launch(f_store, blocks, 1, 1, 256, 1, 1, 0, NULL, a_store, NULL), "launch mm_store");
  RT_OR_FAIL(cudaDeviceSynchronize(), "mm_store");
  RT_OR_FAIL(cudaMemcpy(host, uc, WORDS * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (uint32_t i = 0; i < WORDS; i++)
    if (host[i] != i * SEED + 17u)
      FAILED("%s: multimem.st: word %u of the bound buffer is %#x, expected %#x", tag, i,
             host[i], i * SEED + 17u);
  printf("%s_multimem_st=ok\n", tag);

  void *a_reduce[] = {&mcp, &outp, &n};
  CU_OR_FAIL(m.launch(f_reduce, blocks, 1, 1, 256, 1, 1, 0, NULL, a_reduce, NULL),
             "launch mm_reduce");
  RT_OR_FAIL(cudaDeviceSynchronize(), "mm_reduce");
  RT_OR_FAIL(cudaMemcpy(host, out, WORDS * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (uint32_t i = 0; i < WORDS; i++)
    if (host[i] != i * SEED + 17u)
      FAILED("%s: multimem.ld_reduce.add: word %u is %#x, expected %#x (one device)", tag, i,
             host[i], i * SEED + 17u);
  printf("%s_multimem_ld_reduce=ok\n", tag);

  void *a_red[] = {&mcp, &n, &add};
  CU_OR_FAIL(m.launch(f_red, blocks, 1, 1, 256, 1, 1, 0, NULL, a_red, NULL), "launch mm_red");
  RT_OR_FAIL(cudaDeviceSynchronize(), "mm_red");
  RT_OR_FAIL(cudaMemcpy(host, uc, WORDS * 4, cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (uint32_t i = 0; i < WORDS; i++)
    if (host[i] != i * SEED + 17u + RED_ADD)
      FAILED("%s: multimem.red.add: word %u of the bound buffer is %#x, expected %#x", tag, i,
             host[i], i * SEED + 17u + RED_ADD);
  printf("%s_multimem_red=ok\n", tag);
  ok = 1;
out:
  if (out != NULL) (void)cudaFree(out);
  free(host);
  if (mod != NULL) (void)m.unload(mod);
  return ok;
}

/* One bind form end to end. 1 pass, 0 fail, 77 the system refuses, -1
 * passed without the kernels. */
static int try_bind(brd_nvls_bind_t bind, const char *tag) {
  int ok = 0;
  CUmemGenericAllocationHandle mem = 0;
  CUdeviceptr uc = 0;
  size_t alloc = 0;
  int have_mem = 0, reserved = 0, mapped = 0;
  brd_nvls_t *nvls = NULL;
  int win = 0;

  CUmemAllocationProp ap;
  memset(&ap, 0, sizeof(ap));
  ap.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  ap.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  ap.location.id = 0;
  ap.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t mem_gran = 0, mc_gran = 0;
  CU_OR_FAIL(drv->mem_get_allocation_granularity(&mem_gran, &ap,
                                                 CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
             "cuMemGetAllocationGranularity");
  CUmulticastObjectProp mp;
  memset(&mp, 0, sizeof(mp));
  mp.numDevices = 1;
  mp.size = WORDS * 4;
  mp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CU_OR_FAIL(drv->mc_get_granularity(&mc_gran, &mp, CU_MULTICAST_GRANULARITY_RECOMMENDED),
             "cuMulticastGetGranularity");
  alloc = mem_gran > mc_gran ? mem_gran : mc_gran;
  alloc = (alloc + mem_gran - 1) / mem_gran * mem_gran;
  CU_OR_FAIL(drv->mem_create(&mem, alloc, &ap, 0), "cuMemCreate");
  have_mem = 1;
  CU_OR_FAIL(drv->mem_address_reserve(&uc, alloc, alloc, 0, 0), "cuMemAddressReserve");
  reserved = 1;
  CU_OR_FAIL(drv->mem_map(uc, alloc, 0, mem, 0), "cuMemMap");
  mapped = 1;
  CUmemAccessDesc acc;
  memset(&acc, 0, sizeof(acc));
  acc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  acc.location.id = 0;
  acc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CU_OR_FAIL(drv->mem_set_access(uc, alloc, &acc, 1), "cuMemSetAccess");

  brd_nvls_args_t a;
  memset(&a, 0, sizeof(a));
  a.nranks = 1;
  a.rank = 0;
  a.dev = 0;
  a.enable = 1;
  a.allgather = self_gather;
  a.drv = drv;
  a.bind = bind;
  a.mem_handle = (uint64_t)mem;
  a.mem_offset = 0;
  a.mem_size = alloc;
  a.addr = (uintptr_t)uc;
  a.addr_room = alloc;
  a.size = WORDS * 4;
  a.timeout_s = 10;
  brd_nvls_status_t st;
  ncclResult_t r = brd_nvls_create(&a, &nvls, &st);
  if (r != ncclSuccess) {
    static const char *const system_calls[] = {"cuMulticastCreate", "cuMulticastAddDevice",
                                               "cuMulticastBindMem", "cuMulticastBindAddr"};
    for (size_t i = 0; i < sizeof(system_calls) / sizeof(system_calls[0]); i++) {
      if (strcmp(st.fail_call, system_calls[i]) == 0) {
        printf("%s_nvls=refused (%s)\n", tag, st.why);
        printf("SKIP: nvls_probe: multicast is advertised but the driver refused %s (%s); the "
               "fabric manager or the NVSwitches are not serving this GPU\n", st.fail_call,
               st.why);
        ok = EXIT_SKIP;
        goto out;
      }
    }
    FAILED("%s: brd_nvls_create: %s: %s", tag, ncclGetErrorString(r), st.why);
  }
  brd_nvls_mem_t mm;
  brd_nvls_mem(nvls, &mm);
  void *mc = brd_nvls_mc_ptr(nvls);
  printf("%s_nvls=ok mc=%p bind_size=%zu mc_size=%zu pad=%zu\n", tag, mc, mm.bind_size,
         mm.mc_size, mm.pad_bytes);
  if (mc == NULL || mm.bind_size % mm.gran_min != 0 || mm.mc_size % mm.gran_rec != 0 ||
      mm.bind_size < WORDS * 4 || mm.phys_bytes != 0)
    FAILED("%s: the mapping's sizes are wrong (bind %zu, mc %zu, granularity %zu/%zu)", tag,
           mm.bind_size, mm.mc_size, mm.gran_min, mm.gran_rec);
  /* Through the registry the getters read. */
  static char window_key;
  void *looked = NULL;
  char why[256];
  if (brd_nvls_window_bind(&window_key, mc, 0, WORDS * 4) != ncclSuccess) FAILED("registry");
  win = 1;
  if (brd_nvls_window_lookup(&window_key, 8, NULL, &looked, why, sizeof(why)) != ncclSuccess ||
      looked != (char *)mc + 8)
    FAILED("%s: the registry gave %p for offset 8 of %p", tag, looked, mc);
  int rt = roundtrip(tag, mc, (uint32_t *)(uintptr_t)uc);
  if (rt == 0) goto out;
  ok = rt;
out:
  if (win) brd_nvls_window_forget(&window_key);
  brd_nvls_destroy(nvls);
  if (mapped) (void)drv->mem_unmap(uc, alloc);
  if (reserved) (void)drv->mem_address_free(uc, alloc);
  if (have_mem) (void)drv->mem_release(mem);
  return ok;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "--print-ptx") == 0) {
    fputs(probe_ptx, stdout);
    return 0;
  }
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    printf("SKIP: nvls_probe: no CUDA device is visible (cudaGetDeviceCount: %s, %d devices)\n",
           e != cudaSuccess ? cudaGetErrorString(e) : "no error", n);
    return EXIT_SKIP;
  }
  if ((e = cudaSetDevice(0)) != cudaSuccess || (e = cudaFree(NULL)) != cudaSuccess) {
    printf("FAIL: nvls_probe: making a context on device 0: %s\n", cudaGetErrorString(e));
    return 1;
  }
  drv = brd_cudrv_get();
  char why[256];
  if (drv == NULL) {
    printf("multicast_supported=unknown\n");
    printf("SKIP: nvls_probe: the CUDA driver API is unavailable (no driver, or one older "
           "than CUDA 12.0)\n");
    return EXIT_SKIP;
  }
  if (!brd_cudrv_has_multicast(drv, why, sizeof(why))) {
    printf("multicast_supported=unknown\n");
    printf("SKIP: nvls_probe: %s\n", why);
    return EXIT_SKIP;
  }
  CUdevice dev;
  int sup = 0;
  CUresult r = drv->device_get(&dev, 0);
  if (r == CUDA_SUCCESS)
    r = drv->device_get_attribute(&sup, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, dev);
  if (r != CUDA_SUCCESS) {
    printf("FAIL: nvls_probe: reading CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: %s\n",
           cu_text(r));
    return 1;
  }
  printf("multicast_supported=%d\n", sup);
  CUmulticastObjectProp mp;
  memset(&mp, 0, sizeof(mp));
  mp.numDevices = 1;
  mp.size = WORDS * 4;
  mp.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  size_t gmin = 0, grec = 0;
  CUresult r1 = drv->mc_get_granularity(&gmin, &mp, CU_MULTICAST_GRANULARITY_MINIMUM);
  CUresult r2 = drv->mc_get_granularity(&grec, &mp, CU_MULTICAST_GRANULARITY_RECOMMENDED);
  if (r1 == CUDA_SUCCESS && r2 == CUDA_SUCCESS)
    printf("multicast_granularity_min=%zu\nmulticast_granularity_recommended=%zu\n", gmin, grec);
  else
    printf("multicast_granularity=error: %s\n", cu_text(r1 != CUDA_SUCCESS ? r1 : r2));
  if (!sup) {
    printf("SKIP: nvls_probe: device 0 has no multicast (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED=0;"
           " NVLS needs sm_90+ on NVSwitches)\n");
    return EXIT_SKIP;
  }
  int rm = try_bind(BRD_NVLS_BIND_MEM, "bind_mem");
  if (rm == 0) return 1;
  if (rm == EXIT_SKIP) return EXIT_SKIP;
  int ra = try_bind(BRD_NVLS_BIND_ADDR, "bind_addr");
  if (ra == 0) return 1;
  if (ra == EXIT_SKIP) return EXIT_SKIP;
  if (rm == -1 || ra == -1)
    printf("PASS: nvls_probe: NVLS set up through nvls.c with BindMem and BindAddr; the "
           "multimem round trip was not run (no PTX loader here)\n");
  else
    printf("PASS: nvls_probe: NVLS through nvls.c (BindMem, BindAddr): multimem.st, "
           "ld_reduce.add and red.add round trips match\n");
  return 0;
}

#else /* !BRAID_CUDA */

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "--print-ptx") == 0) {
    fputs(probe_ptx, stdout);
    return 0;
  }
  printf("SKIP: nvls_probe: this build has no CUDA (CUDA=0)\n");
  return EXIT_SKIP;
}

#endif
