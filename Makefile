# Braid: a drop-in libnccl.so.2 (NCCL 2.30.7 ABI).
#
#   make                      library, header, tools, tests (not run)
#   make test                 build and run every test suite (host mode)
#   make test-gpu             GPU suites; skip with a message when no GPU
#   make test-torch           import PyTorch 2.15.0 with Braid preloaded (downloads torch)
#   make test-rxe             the IB verbs net on soft-RoCE in a VM (installs packages, root)
#   make bench                all-reduce benchmark (GPU, or host mode)
#   make gpu-check-prepare    build gpucheck/ for scripts/gpu-check on a GPU
#   make install PREFIX=dir   library and header
#
# Options: CUDA=0 (host mode only), CUDA_ARCHS="80 90 100", ASAN=1, UBSAN=1,
# TSAN=1, DEBUG=1, MPI=1 (benchmarks launched by mpirun), BUILD=dir, V=1,
# EXEC_UNROLL=n (packs in flight per GPU thread, default 4: src/device/exec.cu).

PREFIX     ?= /usr/local
CUDA_HOME  ?= /usr/local/cuda
NVCC       ?= $(CUDA_HOME)/bin/nvcc
CUDA       ?= $(if $(wildcard $(NVCC)),1,0)
CUDA_ARCHS ?= 80 90 100
NCCL_REF   ?= $(firstword $(wildcard $(CUDA_HOME)/include/nccl.h /usr/include/nccl.h))

BRAID_VERSION := 0.1.0
NCCL_SOVER    := 2.30.7

# V=1 prints full compiler command lines.
Q := $(if $(filter 1,$(V)),,@)

CC ?= cc
ifeq ($(CC),cc)
CC := gcc
endif

# Sanitised variants build into their own tree so objects never mix.
SAN_FLAGS :=
SAN_TAG   :=
ifeq ($(ASAN),1)
SAN_FLAGS += -fsanitize=address -fno-omit-frame-pointer
SAN_TAG   := $(SAN_TAG)-asan
endif
ifeq ($(UBSAN),1)
SAN_FLAGS += -fsanitize=undefined -fno-sanitize-recover=all
SAN_TAG   := $(SAN_TAG)-ubsan
endif
ifeq ($(TSAN),1)
SAN_FLAGS += -fsanitize=thread
SAN_TAG   := $(SAN_TAG)-tsan
endif
ifeq ($(CUDA),0)
CUDA_TAG := -nocuda
endif
BUILD ?= build$(SAN_TAG)$(CUDA_TAG)

OPT := $(if $(filter 1,$(DEBUG)),-O0 -DBRAID_DEBUG=1,-O2)

WARNINGS := -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes \
            -Wmissing-prototypes -Wformat=2 -Wvla
CPPFLAGS := -Iinclude -Iplugins/include -Isrc -D_GNU_SOURCE \
            -DBRAID_VERSION=\"$(BRAID_VERSION)\" -DBRAID_CUDA=$(CUDA)
CFLAGS   := -std=c11 $(OPT) -g -fPIC -fvisibility=hidden -pthread \
            $(WARNINGS) $(SAN_FLAGS) $(EXTRA_CFLAGS)
LDLIBS   := -lhwloc -lpthread -ldl -lrt -lm

ifeq ($(CUDA),1)
CPPFLAGS += -I$(CUDA_HOME)/include
CUDA_LIBDIR := $(firstword $(wildcard $(CUDA_HOME)/lib64 $(CUDA_HOME)/lib))
LDLIBS   := -L$(CUDA_LIBDIR) -lcudart_static $(LDLIBS)
# One SASS per architecture, plus PTX for the newest so later GPUs JIT.
NEWEST_ARCH := $(lastword $(sort $(CUDA_ARCHS)))
GENCODE  := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
            -gencode arch=compute_$(NEWEST_ARCH),code=compute_$(NEWEST_ARCH)
# No C++ runtime in the library: no exceptions, RTTI or guarded statics.
NVCCFLAGS := -std=c++17 -O3 $(GENCODE) -Xcompiler -fPIC,-fvisibility=hidden \
             -Xcompiler -fno-exceptions,-fno-rtti,-fno-threadsafe-statics \
             -Xcompiler -Wall,-Werror $(if $(SAN_FLAGS),-Xcompiler $(subst $(eval) ,$(comma),$(strip $(SAN_FLAGS)))) \
             $(if $(EXEC_UNROLL),-DBRD_EXEC_UNROLL=$(EXEC_UNROLL))
else
CPPFLAGS += -DBRAID_NO_CUDA=1
endif
comma := ,

LIB_C  := $(sort $(wildcard src/*/*.c))
LIB_CU := $(if $(filter 1,$(CUDA)),$(sort $(wildcard src/device/*.cu)))
LIB_OBJ := $(LIB_C:%.c=$(BUILD)/obj/%.o) $(LIB_CU:%.cu=$(BUILD)/obj/%.cu.o)

SYMS      := tools/abi/nccl-$(NCCL_SOVER).syms
EXPORTMAP := $(BUILD)/exports.map
SONAME    := libnccl.so.2
SHLIB     := $(BUILD)/lib/$(SONAME)
STLIB     := $(BUILD)/lib/libnccl_static.a
HEADER    := $(BUILD)/include/nccl.h

UNIT_SRC  := $(sort $(wildcard tests/unit/test_*.c))
UNIT_BIN  := $(UNIT_SRC:tests/unit/%.c=$(BUILD)/tests/unit/%)
HOST_SRC  := $(sort $(wildcard tests/host/*.c))
HOST_BIN  := $(HOST_SRC:tests/host/%.c=$(BUILD)/tests/host/%)
GPU_SRC   := $(sort $(wildcard tests/gpu/*.c))
GPU_BIN   := $(GPU_SRC:tests/gpu/%.c=$(BUILD)/tests/gpu/%)
ifeq ($(CUDA),1)
GPU_BIN   += $(BUILD)/tests/gpu/sync_probe
endif
TOOL_SRC  := $(sort $(wildcard tools/*.c))
TOOL_BIN  := $(TOOL_SRC:tools/%.c=$(BUILD)/bin/%)
# Net plugins: each folder plugins/<name>/ (but include/) with C files
# becomes $(BUILD)/plugins/libnccl-net-<name>.so, built against the public
# headers only (include/nccl.h, plugins/include/nccl_net.h).
# plugins/net-socket/ is Braid's own socket net as a plugin: it links the
# net's objects too (its own rule below).
# Folders plugins/tuner-<name>/ are tuner plugins instead:
# $(BUILD)/plugins/libnccl-tuner-<name>.so; plugins/profiler-<name>/ profiler
# plugins: $(BUILD)/plugins/libnccl-profiler-<name>.so.
PLUGIN_DIRS := $(sort $(patsubst plugins/%/,%,$(filter-out plugins/include/,$(dir $(wildcard plugins/*/*.c)))))
TUNER_PLUGIN_DIRS := $(patsubst tuner-%,%,$(filter tuner-%,$(PLUGIN_DIRS)))
PROFILER_PLUGIN_DIRS := $(patsubst profiler-%,%,$(filter profiler-%,$(PLUGIN_DIRS)))
NET_PLUGIN_DIRS := $(filter-out net-socket tuner-% profiler-%,$(PLUGIN_DIRS))
PLUGIN_SO  := $(NET_PLUGIN_DIRS:%=$(BUILD)/plugins/libnccl-net-%.so) \
              $(TUNER_PLUGIN_DIRS:%=$(BUILD)/plugins/libnccl-tuner-%.so) \
              $(PROFILER_PLUGIN_DIRS:%=$(BUILD)/plugins/libnccl-profiler-%.so) \
              $(BUILD)/plugins/libnccl-net-braidsock.so
# Test plugins (tests/plugins/net_test.c): one library per ABI version, one
# filling its table only in init, one exporting v8 and v12 together.
TESTNET_VERSIONS := 6 8 10 11 12
TESTNET_DIR := $(BUILD)/tests/plugins
TESTNET_SO  := $(TESTNET_VERSIONS:%=$(TESTNET_DIR)/libnccl-net-testv%.so) \
               $(TESTNET_DIR)/libnccl-net-testv12lazy.so $(TESTNET_DIR)/libnccl-net-testmulti.so
# Test tuners (tests/plugins/tuner_test.c): one library per ABI version,
# one exporting v2, v3, v5 and v6 together, and a net plugin library that
# also exports a tuner (v5).
TESTTUNER_VERSIONS := 2 3 4 5 6
TESTTUNER_SO := $(TESTTUNER_VERSIONS:%=$(TESTNET_DIR)/libnccl-tuner-testv%.so) \
                $(TESTNET_DIR)/libnccl-tuner-testmulti.so $(TESTNET_DIR)/libnccl-net-withtuner.so
# Test env plugins (tests/plugins/env_test.c): v1, v2, and both in one.
TESTENV_SO := $(TESTNET_DIR)/libnccl-env-testv1.so $(TESTNET_DIR)/libnccl-env-testv2.so \
              $(TESTNET_DIR)/libnccl-env-testboth.so
# Test profilers (tests/plugins/profiler_test.c): one library per ABI
# version, and one exporting v1, v4 and v6 together.
TESTPROF_VERSIONS := 1 2 3 4 5 6
TESTPROF_SO := $(TESTPROF_VERSIONS:%=$(TESTNET_DIR)/libnccl-profiler-testv%.so) \
               $(TESTNET_DIR)/libnccl-profiler-testmulti.so


IBMOCK_SO := $(BUILD)/tests/mock/libibverbs-mock.so

# Shared helpers for tools and tests (linked into executables, never the lib).
TOOLCOMMON_SRC := $(sort $(wildcard tools/common/*.c))
TOOLCOMMON_OBJ := $(TOOLCOMMON_SRC:%.c=$(BUILD)/obj/tools-obj/%.o)

# Benchmarks use MPI (for the unique id, barriers and results only) when
# built with MPI=1 (mpicc must be on PATH); at run time they start MPI only
# under an MPI launcher.
MPI ?= 0
TOOL_CC := $(if $(filter 1,$(MPI)),mpicc,$(CC))
TOOL_CPPFLAGS := $(if $(filter 1,$(MPI)),-DBRAID_MPI=1)
$(BUILD)/obj/tools-obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(TOOL_CC) $(CPPFLAGS) $(TOOL_CPPFLAGS) $(CFLAGS) -Itools/common -MMD -MP -c $< -o $@
TESTCOMMON_SRC := $(sort $(wildcard tests/common/*.c))
TESTCOMMON_OBJ := $(TESTCOMMON_SRC:%.c=$(BUILD)/obj/%.o)

# The shared test and tool objects are prerequisites of pattern rules only,
# which makes them intermediate: make would delete them after each run and
# relink everything, racing parallel links that still need them.
.SECONDARY: $(TESTCOMMON_OBJ) $(TOOLCOMMON_OBJ)

DEPS_STAMP := $(BUILD)/.deps-ok
# Re-run scripts/install-deps whenever a header or tool it knows is missing.
ifneq ($(shell scripts/install-deps --check >/dev/null 2>&1 || echo missing),)
.PHONY: $(DEPS_STAMP)
endif

.PHONY: all lib tools tests test test-unit test-abi test-host test-gpu test-torch test-rxe \
        bench install clean deps check-layers
.DEFAULT_GOAL := all

all: lib tools tests

lib: $(SHLIB) $(STLIB) $(HEADER) $(BUILD)/lib/libnccl.so $(BUILD)/lib/libnccl.so.$(NCCL_SOVER) $(PLUGIN_SO)
tools: $(TOOL_BIN)
tests: $(UNIT_BIN) $(HOST_BIN) $(GPU_BIN) $(TESTNET_SO) $(TESTTUNER_SO) $(TESTENV_SO) $(TESTPROF_SO) \
       $(IBMOCK_SO)

# Missing headers: install them (root) or print the exact command.
deps: $(DEPS_STAMP)
$(DEPS_STAMP):
	@scripts/install-deps
	@mkdir -p $(@D) && touch $@

$(BUILD)/obj/%.o: %.c | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@echo "  CC      $<"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.cu.o: %.cu | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@echo "  NVCC    $<"
	$(Q)$(NVCC) $(CPPFLAGS) $(NVCCFLAGS) -MMD -MP -c $< -o $@

# The exported set is exactly the list kept in the tree, unversioned (as
# NVIDIA's library is); everything else is local.
$(EXPORTMAP): $(SYMS)
	@mkdir -p $(@D)
	@{ echo '{'; echo '  global:'; sed -e '/^#/d' -e '/^$$/d' -e 's/.*/    &;/' $<; \
	   echo '  local: *;'; echo '};'; } > $@

$(SHLIB): $(LIB_OBJ) $(EXPORTMAP)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=$(EXPORTMAP) \
	  -Wl,--no-undefined -Wl,-z,noexecstack $(SAN_FLAGS) -o $@ $(LIB_OBJ) $(LDLIBS)

$(BUILD)/lib/libnccl.so $(BUILD)/lib/libnccl.so.$(NCCL_SOVER): $(SHLIB)
	ln -sf $(SONAME) $@

$(STLIB): $(LIB_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $(LIB_OBJ)

$(HEADER): include/nccl.h
	@mkdir -p $(@D)
	cp $< $@

# Unit tests see the library's internals through the static archive.
$(BUILD)/tests/unit/%: tests/unit/%.c $(STLIB) $(TESTCOMMON_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Itests/common $< $(TESTCOMMON_OBJ) -o $@ $(STLIB) -lcmocka $(LDLIBS)

# End-to-end tests and tools use only the public API of the shared library.
# They name the library by path: `-lnccl` would find NVIDIA's libnccl.so in
# the CUDA library folder whenever our libnccl.so link is not made yet.
$(BUILD)/tests/host/% $(BUILD)/tests/gpu/%: LINKSO = $(SHLIB) -Wl,-rpath,'$$ORIGIN/../../lib'
$(BUILD)/tests/host/%: tests/host/%.c $(SHLIB) $(TESTCOMMON_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Itests/common $< $(TESTCOMMON_OBJ) -o $@ $(LINKSO) -lcmocka $(LDLIBS)
$(BUILD)/tests/gpu/%: tests/gpu/%.c $(SHLIB) $(TESTCOMMON_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Itests/common $< $(TESTCOMMON_OBJ) -o $@ $(LINKSO) -lcmocka $(LDLIBS)

# The NVLS probe drives the transport itself (src/transport/nvls.c), so it
# links the static archive, as unit tests do.
$(BUILD)/tests/gpu/nvls_probe: tests/gpu/nvls_probe.c $(STLIB)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ $(STLIB) $(LDLIBS)

# Which host calls hold work back behind a running kernel: a CUDA program
# on its own (no Braid), for the GPU check (scripts/gpu-check).
$(BUILD)/tests/gpu/sync_probe: tests/gpu/sync_probe.cu
	@mkdir -p $(@D)
	@echo "  NVCC    $@"
	$(Q)$(NVCC) -O2 $(GENCODE) -Wno-deprecated-declarations $< -o $@

$(BUILD)/bin/%: tools/%.c $(SHLIB) $(TOOLCOMMON_OBJ)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(TOOL_CC) $(CPPFLAGS) $(TOOL_CPPFLAGS) $(CFLAGS) -Itools/common $< $(TOOLCOMMON_OBJ) -o $@ \
	  $(SHLIB) -Wl,-rpath,'$$ORIGIN/../lib' $(LDLIBS)

# braid-* tools inspect internals (plans), so they link the static archive,
# and of tools/common only the objects named as their prerequisites below.
$(BUILD)/bin/braid-%: tools/braid-%.c $(STLIB)
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) -Itools/common $< $(filter $(TOOLCOMMON_OBJ),$^) -o $@ \
	  $(STLIB) $(LDLIBS)
$(BUILD)/bin/braid-simulate: $(BUILD)/obj/tools-obj/tools/common/size.o

# Plugins see only the public headers (and CUDA's, in CUDA builds).
PLUGIN_CPPFLAGS := -Iinclude -Iplugins/include -D_GNU_SOURCE \
                   $(filter -I$(CUDA_HOME)/include -DBRAID_NO_CUDA=1,$(CPPFLAGS))
PLUGIN_LD := -shared -Wl,--no-undefined -Wl,-z,noexecstack $(SAN_FLAGS)

define net_plugin_rule
$(BUILD)/plugins/libnccl-net-$(1).so: $(sort $(wildcard plugins/$(1)/*.c)) plugins/include/nccl_net.h include/nccl.h
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(PLUGIN_CPPFLAGS) -Iplugins/$(1) $$(CFLAGS) $$(PLUGIN_LD) -o $$@ \
	  $(sort $(wildcard plugins/$(1)/*.c)) -lpthread
endef
$(foreach d,$(NET_PLUGIN_DIRS),$(eval $(call net_plugin_rule,$(d))))

define tuner_plugin_rule
$(BUILD)/plugins/libnccl-tuner-$(1).so: $(sort $(wildcard plugins/tuner-$(1)/*.c)) plugins/include/nccl_tuner.h plugins/include/nccl_common.h include/nccl.h
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(PLUGIN_CPPFLAGS) -Iplugins/tuner-$(1) $$(CFLAGS) $$(PLUGIN_LD) -o $$@ \
	  $(sort $(wildcard plugins/tuner-$(1)/*.c))
endef
$(foreach d,$(TUNER_PLUGIN_DIRS),$(eval $(call tuner_plugin_rule,$(d))))

define profiler_plugin_rule
$(BUILD)/plugins/libnccl-profiler-$(1).so: $(sort $(wildcard plugins/profiler-$(1)/*.c)) plugins/include/nccl_profiler.h plugins/include/nccl_common.h include/nccl.h
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(CC) $$(PLUGIN_CPPFLAGS) -Iplugins/profiler-$(1) $$(CFLAGS) $$(PLUGIN_LD) -o $$@ \
	  $(sort $(wildcard plugins/profiler-$(1)/*.c)) -lpthread
endef
$(foreach d,$(PROFILER_PLUGIN_DIRS),$(eval $(call profiler_plugin_rule,$(d))))

# The socket net and what it stands on (base: sockets, parameters, the log).
BRAIDSOCK_OBJ := $(addprefix $(BUILD)/obj/src/,transport/net_socket.o base/socket.o base/env_plugin.o base/plugin.o \
                   base/param.o base/debug.o)
$(BUILD)/plugins/libnccl-net-braidsock.so: plugins/net-socket/plugin.c $(BRAIDSOCK_OBJ) \
                                          plugins/include/nccl_net.h include/nccl.h
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $(PLUGIN_LD) -o $@ $< $(BRAIDSOCK_OBJ) -lpthread -ldl

TESTNET_DEPS := tests/plugins/net_test.c tests/plugins/net_test.h plugins/include/nccl_net.h include/nccl.h
$(BUILD)/obj/tests/plugins/net_test_v%.o: $(TESTNET_DEPS)
	@mkdir -p $(@D)
	@echo "  CC      $< (ncclNet_v$*)"
	$(Q)$(CC) $(PLUGIN_CPPFLAGS) $(CFLAGS) -DNET_VERSION=$* -c $< -o $@
$(BUILD)/obj/tests/plugins/net_test_lazy.o: $(TESTNET_DEPS)
	@mkdir -p $(@D)
	@echo "  CC      $< (ncclNet_v12, table filled in init)"
	$(Q)$(CC) $(PLUGIN_CPPFLAGS) $(CFLAGS) -DNET_VERSION=12 -DNET_LAZY=1 -c $< -o $@
$(TESTNET_DIR)/libnccl-net-testv12lazy.so: $(BUILD)/obj/tests/plugins/net_test_lazy.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
$(TESTNET_DIR)/libnccl-net-testmulti.so: $(BUILD)/obj/tests/plugins/net_test_v8.o \
                                         $(BUILD)/obj/tests/plugins/net_test_v12.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
$(TESTNET_DIR)/libnccl-net-testv%.so: $(BUILD)/obj/tests/plugins/net_test_v%.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
.SECONDARY: $(TESTNET_VERSIONS:%=$(BUILD)/obj/tests/plugins/net_test_v%.o) \
            $(BUILD)/obj/tests/plugins/net_test_lazy.o
TESTTUNER_DEPS := tests/plugins/tuner_test.c tests/plugins/tuner_test.h \
                  plugins/include/nccl_tuner.h plugins/include/nccl_common.h include/nccl.h
$(BUILD)/obj/tests/plugins/tuner_test_v%.o: $(TESTTUNER_DEPS)
	@mkdir -p $(@D)
	@echo "  CC      $< (ncclTuner_v$*)"
	$(Q)$(CC) $(PLUGIN_CPPFLAGS) $(CFLAGS) -DTUNER_VERSION=$* -c $< -o $@
$(TESTNET_DIR)/libnccl-tuner-testv%.so: $(BUILD)/obj/tests/plugins/tuner_test_v%.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^
$(TESTNET_DIR)/libnccl-tuner-testmulti.so: $(foreach v,2 3 5 6,$(BUILD)/obj/tests/plugins/tuner_test_v$(v).o)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^
$(TESTNET_DIR)/libnccl-net-withtuner.so: $(BUILD)/obj/tests/plugins/net_test_v12.o \
                                         $(BUILD)/obj/tests/plugins/tuner_test_v5.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
.SECONDARY: $(TESTTUNER_VERSIONS:%=$(BUILD)/obj/tests/plugins/tuner_test_v%.o)

# Test env plugins (tests/plugins/env_test.c): v1, v2, and both in one.
TESTENV_DEPS := tests/plugins/env_test.c tests/plugins/env_test.h \
                plugins/include/nccl_env.h plugins/include/nccl_common.h include/nccl.h
$(BUILD)/obj/tests/plugins/env_test_v%.o: $(TESTENV_DEPS)
	@mkdir -p $(@D)
	@echo "  CC      $< (ncclEnv_v$*)"
	$(Q)$(CC) $(PLUGIN_CPPFLAGS) $(CFLAGS) -DENV_VERSION=$* -c $< -o $@
$(TESTNET_DIR)/libnccl-env-testv%.so: $(BUILD)/obj/tests/plugins/env_test_v%.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^
$(TESTNET_DIR)/libnccl-env-testboth.so: $(BUILD)/obj/tests/plugins/env_test_v1.o \
                                        $(BUILD)/obj/tests/plugins/env_test_v2.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^
.SECONDARY: $(BUILD)/obj/tests/plugins/env_test_v1.o $(BUILD)/obj/tests/plugins/env_test_v2.o
$(BUILD)/tests/unit/test_env_plugin: | $(TESTENV_SO) $(TESTNET_DIR)/libnccl-tuner-testv5.so
$(BUILD)/tests/unit/test_tuner_plugin: | $(TESTTUNER_SO) $(TESTNET_DIR)/libnccl-net-testv12.so \
                                        $(TUNER_PLUGIN_DIRS:%=$(BUILD)/plugins/libnccl-tuner-%.so)

# Test profilers (tests/plugins/profiler_test.c).
TESTPROF_DEPS := tests/plugins/profiler_test.c tests/plugins/profiler_test.h \
                 plugins/include/nccl_profiler.h plugins/include/nccl_common.h include/nccl.h
$(BUILD)/obj/tests/plugins/profiler_test_v%.o: $(TESTPROF_DEPS)
	@mkdir -p $(@D)
	@echo "  CC      $< (ncclProfiler_v$*)"
	$(Q)$(CC) $(PLUGIN_CPPFLAGS) $(CFLAGS) -DPROF_VERSION=$* -c $< -o $@
$(TESTNET_DIR)/libnccl-profiler-testv%.so: $(BUILD)/obj/tests/plugins/profiler_test_v%.o
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
$(TESTNET_DIR)/libnccl-profiler-testmulti.so: $(foreach v,1 4 6,$(BUILD)/obj/tests/plugins/profiler_test_v$(v).o)
	@mkdir -p $(@D)
	$(Q)$(CC) $(PLUGIN_LD) -o $@ $^ -lpthread
.SECONDARY: $(TESTPROF_VERSIONS:%=$(BUILD)/obj/tests/plugins/profiler_test_v%.o)
$(BUILD)/tests/host/test_profiler_plugin: | $(TESTPROF_SO) \
                                            $(PROFILER_PLUGIN_DIRS:%=$(BUILD)/plugins/libnccl-profiler-%.so)

# The verbs mock (tests/mock/ibverbs_mock.c): a libibverbs for tests,
# loaded through BRAID_IBVERBS_LIB by the IB net's tests and suite_net.
$(IBMOCK_SO): tests/mock/ibverbs_mock.c tests/mock/ibverbs_mock.h
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CFLAGS) -Itests/mock $(PLUGIN_LD) -o $@ $< -lpthread
$(BUILD)/tests/unit/test_net_ib: | $(IBMOCK_SO)

# The loader's unit test opens them from $(TESTNET_DIR), by path and by
# name (it puts that folder on LD_LIBRARY_PATH).
$(BUILD)/tests/unit/test_net_plugin: | $(TESTNET_SO)

# CUDA builds also run the CUDA-mode host code on the simulator, with both
# executors (cudasim: exec_sim.c; cudasim-dev: exec.cu's own kernels).
test: all check-layers $(if $(filter 1,$(CUDA)),cudasim)
	@BUILD=$(BUILD) CUDA=$(CUDA) NCCL_REF_HEADER="$(NCCL_REF)" CUDA_HOME=$(CUDA_HOME) \
	  scripts/run-tests unit abi host net faults-san $(if $(filter 1,$(CUDA)),cudasim cudasim-dev gpucheck)

test-unit: all
	@BUILD=$(BUILD) scripts/run-tests unit
test-abi: all
	@BUILD=$(BUILD) CUDA=$(CUDA) NCCL_REF_HEADER="$(NCCL_REF)" CUDA_HOME=$(CUDA_HOME) scripts/run-tests abi
test-host: all
	@BUILD=$(BUILD) scripts/run-tests host
test-gpu: all
	@BUILD=$(BUILD) CUDA=$(CUDA) scripts/run-tests gpu

# PyTorch 2.15.0 on Braid (tests/torch/run.sh): makes $(BUILD)/torch-venv
# once (downloads torch and its CUDA libraries), then imports torch with the
# library preloaded. Not part of make test.
test-torch: lib
	@BUILD=$(BUILD) bash tests/torch/run.sh

# The IB verbs net on real verbs (tests/rxe/run.sh): soft-RoCE (rdma_rxe) in
# a VM booted under TCG with Debian's kernel; installs what it lacks with
# apt-get and PyPI (virtme-ng), exits 77 saying why where it cannot run.
# Host mode. Not part of make test.
RXE_BIN := $(addprefix $(BUILD)/bin/,all_reduce_perf all_gather_perf sendrecv_perf braid-netbw) \
           $(BUILD)/tests/unit/test_net_ib $(BUILD)/tests/host/test_allreduce \
           $(BUILD)/tests/host/test_collectives
test-rxe: lib $(RXE_BIN)
	@BUILD=$(BUILD) bash tests/rxe/run.sh

bench: all
	@BUILD=$(BUILD) scripts/bench

# Everything a GPU machine needs for scripts/gpu-check, in gpucheck/
# (docs/perf/gpu.md).
.PHONY: gpu-check-prepare
gpu-check-prepare:
	@scripts/gpu-check --prepare

# Includes point down the layers only: base < device, transport < plan < algos < core.
check-layers:
	@scripts/check-layers src

install: lib
	install -d $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include
	install -m 0755 $(SHLIB) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libnccl.so
	ln -sf $(SONAME) $(DESTDIR)$(PREFIX)/lib/libnccl.so.$(NCCL_SOVER)
	install -m 0644 $(STLIB) $(DESTDIR)$(PREFIX)/lib/libnccl_static.a
	install -m 0644 include/nccl.h $(DESTDIR)$(PREFIX)/include/nccl.h

clean:
	rm -rf build build-* bench-results

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)

# ---- nccl-compare (tools/compare/): one-rank figures of NCCL-ABI libraries ----
# It loads each library with dlopen, so it links no libnccl; CUDA builds only.
# Used by scripts/bench-gpu; see docs/perf/gpu.md.
ifeq ($(CUDA),1)
NCCL_COMPARE := $(BUILD)/bin/nccl-compare
tools: $(NCCL_COMPARE)
$(NCCL_COMPARE): tools/compare/nccl_compare.c include/nccl.h
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CC) $(CPPFLAGS) $(CFLAGS) $< -o $@ -L$(CUDA_LIBDIR) -lcudart_static -ldl -lpthread -lrt -lm
endif

# ---- CUDA simulator (tests/cudasim/): CUDA-mode host code on CPU threads ----
# Two flavours, each a static archive of the library's C objects (the CUDA
# executor's host half, src/device/exec_cuda.c, among them) + a C CUDA
# runtime (no cudart) + the executor's kernels; test programs link it
# statically, so anything the simulator lacks fails the link. CUDA builds
# only.
#   cudasim/      kernels = exec_sim.c (over the host executor)
#   cudasim-dev/  kernels = src/device/exec.cu itself, compiled for the CPU
#                 with tests/cudasim/devemu.h (on grid.c's fibers)
# `make cudasim` builds both; see tests/cudasim/README.md.
ifeq ($(CUDA),1)
SIM_COMMON   := tests/cudasim/runtime.c tests/cudasim/grid.c
SIM_SRC      := $(SIM_COMMON) tests/cudasim/exec_sim.c
SIM_LDLIBS   := -lhwloc -lpthread -ldl -lrt -lm
SIM_OWN_SRC  := $(filter-out $(SIM_SRC),$(sort $(wildcard tests/cudasim/*.c)))
SIM_UNIT_SRC := tests/unit/test_exec_cuda.c tests/unit/test_p2p.c tests/unit/test_verify_inplace.c
SIM_TEST_SRC := $(HOST_SRC) $(GPU_SRC) $(SIM_OWN_SRC) $(SIM_UNIT_SRC)
SIM_TOOL_SRC := $(filter %_perf.c,$(TOOL_SRC))

SIM_DEV_OBJ  := $(BUILD)/obj/cudasim-dev/exec.o
SIMCXXFLAGS  := -std=c++17 $(OPT) -g -pthread -Wall -Wextra -Werror -Wno-unknown-pragmas \
                -fno-exceptions -fno-rtti -DBRD_CUDASIM_DEVICE -Itests/cudasim \
                -include tests/cudasim/devemu.h $(SAN_FLAGS)
$(SIM_DEV_OBJ): src/device/exec.cu tests/cudasim/devemu.h | $(DEPS_STAMP)
	@mkdir -p $(@D)
	@echo "  CXX     $< (for the CUDA simulator)"
	$(Q)$(CXX) $(CPPFLAGS) $(SIMCXXFLAGS) -MMD -MP -x c++ -c $< -o $@
-include $(SIM_DEV_OBJ:.o=.d)

# $(call sim_link,flavour dir,extra libraries): links test program $< into $@.
sim_link = $(CC) $(CPPFLAGS) $(CFLAGS) -Itests/common -Itests/cudasim $< $(TESTCOMMON_OBJ) \
  -o $@ $(1)/libnccl_cudasim.a -lcmocka $(SIM_LDLIBS) $(2)

# $(call sim_flavour,dir,kernel objects,extra libraries)
define sim_flavour
$(1)/libnccl_cudasim.a: $$(LIB_C:%.c=$$(BUILD)/obj/%.o) $$(SIM_COMMON:%.c=$$(BUILD)/obj/%.o) $(2)
	@mkdir -p $$(@D)
	rm -f $$@ && ar rcs $$@ $$^
$(1)/tests/%: tests/host/%.c $(1)/libnccl_cudasim.a $$(TESTCOMMON_OBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(call sim_link,$(1),$(3))
$(1)/tests/%: tests/gpu/%.c $(1)/libnccl_cudasim.a $$(TESTCOMMON_OBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(call sim_link,$(1),$(3))
$(1)/tests/%: tests/cudasim/%.c $(1)/libnccl_cudasim.a $$(TESTCOMMON_OBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(call sim_link,$(1),$(3))
$(1)/tests/%: tests/unit/%.c $(1)/libnccl_cudasim.a $$(TESTCOMMON_OBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(call sim_link,$(1),$(3))
# The benchmarks too, so their CUDA paths (device buffers, streams, event
# timing, -G graphs, ranks sharing a GPU) run without a GPU.
$(1)/bin/%: tools/%.c $(1)/libnccl_cudasim.a $$(TOOLCOMMON_OBJ)
	@mkdir -p $$(@D)
	@echo "  LD      $$@"
	$$(Q)$$(TOOL_CC) $$(CPPFLAGS) $$(TOOL_CPPFLAGS) $$(CFLAGS) -Itools/common $$< \
	  $$(TOOLCOMMON_OBJ) -o $$@ $(1)/libnccl_cudasim.a $$(SIM_LDLIBS) $(3)
endef

SIM_DIR      := $(BUILD)/cudasim
SIM_DEV_DIR  := $(BUILD)/cudasim-dev
$(eval $(call sim_flavour,$(SIM_DIR),$(BUILD)/obj/tests/cudasim/exec_sim.o,))
$(eval $(call sim_flavour,$(SIM_DEV_DIR),$(SIM_DEV_OBJ),-lstdc++))
SIM_TESTS    := $(patsubst %.c,$(SIM_DIR)/tests/%,$(notdir $(SIM_TEST_SRC))) \
                $(patsubst %.c,$(SIM_DEV_DIR)/tests/%,$(notdir $(SIM_TEST_SRC)))
SIM_TOOLS    := $(patsubst tools/%.c,$(SIM_DIR)/bin/%,$(SIM_TOOL_SRC)) \
                $(patsubst tools/%.c,$(SIM_DEV_DIR)/bin/%,$(SIM_TOOL_SRC))
# The device probe too, for scripts/gpu-check --rehearse.
SIM_TOOLS    += $(SIM_DEV_DIR)/bin/gpu-probe

# devemu.h on kernels of its own: compiled as exec.cu is for cudasim-dev.
SIM_DEVEMU_TEST := $(SIM_DEV_DIR)/tests/test_devemu
$(SIM_DEVEMU_TEST): tests/cudasim/test_devemu.cc tests/cudasim/devemu.h \
                    $(SIM_DEV_DIR)/libnccl_cudasim.a
	@mkdir -p $(@D)
	@echo "  LD      $@"
	$(Q)$(CXX) $(CPPFLAGS) $(SIMCXXFLAGS) -DBRD_EMU_OWN_TEST $< -o $@ \
	  $(SIM_DEV_DIR)/libnccl_cudasim.a $(SIM_LDLIBS)
SIM_TESTS    += $(SIM_DEVEMU_TEST)

.PHONY: cudasim
cudasim: $(SIM_TESTS) $(SIM_TOOLS)
else
.PHONY: cudasim
cudasim:
	@echo "cudasim: needs a CUDA build (CUDA=1 and the CUDA headers in $(CUDA_HOME))"; exit 1
endif
