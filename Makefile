# vgmig -- build, test and demo.  `make help` lists the targets.
#
# Everything is built into $(O) (default build/); `make SAN=1 ...` builds
# with ASan/UBSan into build/san/.  config.mak comes from ./configure, which
# make runs itself when it is missing or when the QEMU pin or series changed.

SAN ?= 0
ifeq ($(SAN),1)
O ?= build/san
SANFLAGS := -fsanitize=address,undefined -fno-omit-frame-pointer \
            -fno-sanitize-recover=undefined
else
O ?= build
SANFLAGS :=
endif

ifeq ($(V),1)
Q :=
else
Q := @
endif

CC ?= cc
CFLAGS ?= -O2 -g
WARNFLAGS := -Wall -Wextra -Werror -Wno-unused-parameter -Wshadow \
             -Wmissing-prototypes -Wstrict-prototypes
ALL_CFLAGS := -std=gnu11 $(WARNFLAGS) $(CFLAGS) $(SANFLAGS) -D_GNU_SOURCE \
              -I. -MMD -MP
GLIB_CFLAGS = $(shell pkg-config --cflags glib-2.0 json-glib-1.0)
GLIB_LIBS = $(shell pkg-config --libs glib-2.0 json-glib-1.0)
LDLIBS := -lxxhash -lpthread -lm -ldl

# `make` alone builds everything (the first rule below is config.mak's).
.DEFAULT_GOAL := all

NO_CONFIG_GOALS := clean distclean help format format-check bench-hash \
                   bench-vgpu
ifneq ($(filter-out $(NO_CONFIG_GOALS),$(or $(MAKECMDGOALS),all)),)
include config.mak
endif

config.mak: configure qemu-patches/pin qemu-patches/series \
            $(wildcard qemu-patches/*.patch)
	./configure $(CONFIGURE_FLAGS)

# ------------------------------------------------------------- libraries --
LIB_SRCS := $(filter-out vgpu/cuda-fatbin-none.c, \
                         $(wildcard common/*.c vgpu/*.c dirty-track/*.c)) \
            $(wildcard vfio-user/*.c vfio-migration/*.c)
LIB_OBJS := $(LIB_SRCS:%.c=$(O)/obj/%.o)

# The CUDA backend's kernels (vgpu/cuda-kernels.cu): built by nvcc into a
# fatbin that cuda-fatbin.S embeds; without CUDA (configure said no), an
# empty one, and `--backend cuda` says the build has no kernels.
NVCC_FLAGS := -O3 -std=c++17 -gencode arch=compute_80,code=sm_80 \
              -gencode arch=compute_90,code=sm_90 \
              -gencode arch=compute_90,code=compute_90
CUDA_FATBIN := $(O)/obj/vgpu/cuda-kernels.fatbin
ifeq ($(CUDA),yes)
LIB_OBJS += $(O)/obj/vgpu/cuda-fatbin.o
else
LIB_OBJS += $(O)/obj/vgpu/cuda-fatbin-none.o
endif

$(CUDA_FATBIN): vgpu/cuda-kernels.cu config.mak
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  NVCC    $<")
	$(Q)$(NVCC) $(NVCC_FLAGS) -fatbin -o $@ $<

$(O)/obj/vgpu/cuda-fatbin.o: vgpu/cuda-fatbin.S $(CUDA_FATBIN)
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  AS      $<")
	$(Q)$(CC) -c -DVGC_FATBIN_PATH='"$(CUDA_FATBIN)"' -o $@ $<
QCLIENT_SRCS := $(wildcard qclient/*.c)
QCLIENT_OBJS := $(QCLIENT_SRCS:%.c=$(O)/obj/%.o)

$(O)/libvgmig.a: $(LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(O)/libqclient.a: $(QCLIENT_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

# XXH3 inlined for one vector unit each (common/hash.h chooses at load).
$(O)/obj/common/hash-avx2.o: ALL_CFLAGS += -mavx2
$(O)/obj/common/hash-avx512.o: ALL_CFLAGS += -mavx512f

$(O)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $<")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -c -o $@ $<

# -------------------------------------------------------------- programs --
PROGRAMS := $(O)/vgpu-server $(O)/vgmig-demo

$(O)/vgpu-server: $(O)/obj/server/vgpu-server.o $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(O)/vgmig-demo: $(O)/obj/demo/vgmig-demo.o $(O)/libqclient.a \
                 $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(GLIB_LIBS) $(LDLIBS)

$(O)/vgmig-bench: $(O)/obj/bench/vgmig-bench.o $(O)/obj/bench/bench-cell.o \
                  $(O)/obj/bench/bench-report.o $(O)/obj/bench/bench-mig.o \
                  $(O)/obj/bench/ram-anchor.o $(O)/obj/bench/report-text.o \
                  $(O)/obj/bench/reg-probe.o $(O)/libqclient.a \
                  $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(GLIB_LIBS) $(LDLIBS)

$(O)/restore-bench: $(O)/obj/bench/restore-bench.o $(O)/libqclient.a \
                    $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(GLIB_LIBS) $(LDLIBS)

$(O)/dt-bench: $(O)/obj/bench/dt-bench.o $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(O)/cuda-bench: $(O)/obj/bench/cuda-bench.o $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

$(O)/vgpu-bench: $(O)/obj/bench/vgpu-bench.o $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(LDLIBS)

# ----------------------------------------------------------------- tests --
UNIT_TESTS := $(patsubst tests/unit/%.c,$(O)/tests/unit/%, \
                         $(wildcard tests/unit/test-*.c))
QTESTS := $(patsubst tests/qtest/%.c,$(O)/tests/qtest/%, \
                     $(wildcard tests/qtest/test-*.c))

# The unit test of one module of the QEMU client links that module alone.
$(O)/tests/unit/test-pause: qclient/pause.c
$(O)/tests/unit/test-vfio-trace: qclient/vfio-trace.c
$(O)/tests/unit/test-tcp-census: qclient/tcp-census.c
$(O)/tests/unit/test-pci-window: qclient/pci-window.c
$(O)/tests/unit/test-report-text: bench/report-text.c
$(O)/tests/unit/%: tests/unit/%.c $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -o $@ $(filter %.c,$^) \
		$(filter %.a,$^) \
		$(GLIB_LIBS) $(LDLIBS)

$(O)/tests/qtest/%: tests/qtest/%.c $(O)/libqclient.a $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -o $@ $(filter %.c %.a,$^) \
		$(GLIB_LIBS) $(LDLIBS)

# The CUDA backend's tests (tests/cuda/): on a machine without a usable
# GPU each prints a TAP skip plan with the reason, so `make check` stays
# green; `make check-cuda` runs them alone (on a GPU machine).
CUDA_TESTS := $(patsubst tests/cuda/%.c,$(O)/tests/cuda/%, \
                         $(wildcard tests/cuda/test-*.c))

$(O)/tests/cuda/%: tests/cuda/%.c $(O)/libqclient.a $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -o $@ $(filter %.c %.a,$^) \
		$(GLIB_LIBS) $(LDLIBS)

# ------------------------------------------------------------------ fuzz --
# Fuzz targets (tests/fuzz/, docs/fuzzing.md).  Each tests/fuzz/fuzz-NAME.c
# is linked twice: with replay.c as $(O)/tests/fuzz/replay-NAME, a TAP test
# run with the unit tests that replays the checked-in corpus
# tests/fuzz/corpus/NAME (built like every test, so check-sanitize runs it
# under ASan and UBSan); and by `make fuzz` with clang's libFuzzer, the
# library rebuilt with coverage and sanitizers in $(O)/fuzz.  guard.c puts
# guard pages around VRAM and DMA mappings (--wrap=mmap); fds.c makes the
# fds the vfu and sock harnesses pass.
FUZZ_TARGETS := vfu stream cmd sock
FUZZ_SECONDS ?= 60
FUZZ_CC ?= clang
FUZZ_WRAP := -Wl,--wrap=mmap -Wl,--wrap=munmap
FUZZ_SANFLAGS := -fsanitize=fuzzer-no-link,address,undefined \
                 -fno-omit-frame-pointer -fno-sanitize-recover=undefined
FUZZ_REPLAYS := $(FUZZ_TARGETS:%=$(O)/tests/fuzz/replay-%)
UNIT_TESTS += $(FUZZ_REPLAYS)

$(O)/tests/fuzz/replay-%: tests/fuzz/fuzz-%.c tests/fuzz/replay.c \
                          tests/fuzz/guard.c tests/fuzz/fds.c \
                          tests/fuzz/fuzz.h $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -DFUZZ_CORPUS='"$(abspath tests/fuzz/corpus/$*)"' \
		-o $@ $(filter %.c %.a,$^) $(FUZZ_WRAP) $(LDLIBS)

$(O)/tests/fuzz/gen-seeds: tests/fuzz/gen-seeds.c $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $(filter %.c %.a,$^) $(LDLIBS)

# libFuzzer binaries; built by the sub-make of `make fuzz` (CC=clang).
$(O)/fuzz-%: tests/fuzz/fuzz-%.c tests/fuzz/guard.c tests/fuzz/fds.c \
             tests/fuzz/fuzz.h $(O)/libvgmig.a
	@$(if $(Q),echo "  FUZZ    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -fsanitize=fuzzer -o $@ $(filter %.c %.a,$^) \
		$(FUZZ_WRAP) $(LDLIBS)

.PHONY: fuzz fuzz-targets fuzz-seeds fuzz-pack
fuzz-targets: $(FUZZ_TARGETS:%=$(O)/fuzz-%)

# Run every target for FUZZ_SECONDS; new inputs go to $(O)/fuzz/corpus-NAME,
# crashes to $(O)/fuzz/NAME-crash-*, the summary to $(O)/fuzz/summary.txt.
fuzz:
	$(MAKE) -o config.mak O=$(O)/fuzz CC=$(FUZZ_CC) SANFLAGS='$(FUZZ_SANFLAGS)' fuzz-targets
	tests/fuzz/run-fuzz.sh $(O)/fuzz $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The fuzzers, libraries and corpora for a long campaign elsewhere:
# $(O)/fuzz-pack/campaign.sh SECONDS WORKERS there (docs/fuzzing.md).
fuzz-pack:
	$(MAKE) -o config.mak O=$(O)/fuzz CC=$(FUZZ_CC) SANFLAGS='$(FUZZ_SANFLAGS)' fuzz-targets
	tests/fuzz/fuzz-pack.sh $(O)/fuzz $(O)/fuzz-pack

# Rewrite the seed files (seed-*) of tests/fuzz/corpus.
fuzz-seeds: $(O)/tests/fuzz/gen-seeds
	$(O)/tests/fuzz/gen-seeds tests/fuzz/corpus

# ---------------------------------------------------------------- soak --
# The soak (tests/soak/, docs/soak.md): vgmig-soak ping-pongs a vGPU VM
# between two sides with random faults.  Its rig (libsoak.a) also drives
# the fault matrix test, which therefore gets its own link rule.
SOAK_LIB_SRCS := $(filter-out tests/soak/soak.c,$(wildcard tests/soak/*.c))
SOAK_LIB_OBJS := $(SOAK_LIB_SRCS:%.c=$(O)/obj/%.o)

$(O)/libsoak.a: $(SOAK_LIB_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^

$(O)/vgmig-soak: $(O)/obj/tests/soak/soak.o $(O)/libsoak.a \
                 $(O)/libqclient.a $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(GLIB_LIBS) $(LDLIBS)

$(O)/tests/qtest/test-mig-fault-matrix: tests/qtest/test-mig-fault-matrix.c \
        $(O)/libsoak.a $(O)/libqclient.a $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -o $@ $(filter %.c %.a,$^) \
		$(GLIB_LIBS) $(LDLIBS)

# `make soak SOAK_MIGRATIONS=N SOAK_DURATION=8h SOAK_SEED=S SOAK_VRAM=16M`;
# SOAK_ARGS adds any other vgmig-soak option.  soak-short is CI's.
SOAK_MIGRATIONS ?= 500
SOAK_DURATION ?=
SOAK_SEED ?=
SOAK_VRAM ?= 16M
SOAK_ARGS ?=
# SOAK_GUEST_HOPS: then as many migrations of a real TCG guest with a vGPU
# (and of the same guest without one), for the pause the guest felt
# (bench/guest-pause.sh, docs/pause.md); the soak's VMs are qtest.  0: none.
SOAK_GUEST_HOPS ?= 20
SOAK_CMD = $(TEST_ENV) $(O)/vgmig-soak --out $(O)/soak
# $(call guest_pause,HOPS,DIR): the real guest's pause report into
# DIR/guest-pause.txt, its log into DIR/guest-pause.log.
guest_pause = $(TEST_ENV) bench/guest-pause.sh --hops $(1) \
	    --test $(O)/tests/guest/test-guest-migrate \
	    --log $(2)/guest-pause.log > $(2)/guest-pause.txt
.PHONY: soak soak-short stress-cpu-writes
soak: all $(O)/vgmig-soak $(if $(filter-out 0,$(SOAK_GUEST_HOPS)),guest-image \
      $(O)/tests/guest/test-guest-migrate)
	$(SOAK_CMD) --migrations $(SOAK_MIGRATIONS) --vram $(SOAK_VRAM) \
	    $(if $(SOAK_DURATION),--duration $(SOAK_DURATION)) \
	    $(if $(SOAK_SEED),--seed $(SOAK_SEED)) $(SOAK_ARGS)
ifneq ($(SOAK_GUEST_HOPS),0)
	$(call guest_pause,$(SOAK_GUEST_HOPS),$(O)/soak)
	tee -a $(O)/soak/summary.txt < $(O)/soak/guest-pause.txt
endif
soak-short: all $(O)/vgmig-soak
	$(SOAK_CMD) --migrations 20 --vram 8M $(if $(SOAK_SEED),--seed $(SOAK_SEED))

# STRESS migrations with guest CPU writes through BAR2 at random rates,
# every write checked on the destination (docs/dirty-tracking.md).
STRESS ?= 200
stress-cpu-writes: all $(O)/tests/qtest/test-mig-cpu-writes
	$(TEST_ENV) VGMIG_STRESS=$(STRESS) $(O)/tests/qtest/test-mig-cpu-writes \
	    -p /mig/cpu-writes/stress

# ----------------------------------------------------------- guest image --
# A real guest for TCG (guest/, docs/guest.md): the static in-guest tool
# vgpu-guest, an initramfs with it and busybox-static, the kernel of
# Debian's linux-image-*-amd64 (downloaded into $(CACHE_DIR)/guest, never
# installed) and the option ROMs -kernel needs, built from the QEMU source.
# All of it under $(GUEST_DIR).  The real-guest migration tests
# (tests/guest/) run in `make check` and `make check-guest`.
GUEST_DIR := $(O)/guest
# No sanitizers: the tool is linked statically and runs in the guest.
GUEST_CFLAGS := -std=gnu11 $(WARNFLAGS) $(CFLAGS) -D_GNU_SOURCE -pthread -I. \
                -MMD -MP
GUEST_TOOL_SRCS := $(wildcard guest/*.c) common/log.c common/error.c \
                   vgpu/cmd.c
GUEST_TOOL_OBJS := $(GUEST_TOOL_SRCS:%.c=$(GUEST_DIR)/obj/%.o)
GUEST_TESTS := $(patsubst tests/guest/%.c,$(O)/tests/guest/%, \
                          $(wildcard tests/guest/test-*.c))

$(GUEST_DIR)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  CC      $< (guest)")
	$(Q)$(CC) $(GUEST_CFLAGS) -c -o $@ $<

$(GUEST_DIR)/vgpu-guest: $(GUEST_TOOL_OBJS)
	@$(if $(Q),echo "  LINK    $@ (static)")
	$(Q)$(CC) -static -pthread -o $@ $^

$(GUEST_DIR)/image.stamp: $(GUEST_DIR)/vgpu-guest guest/init guest/mkimage.sh \
                          config.mak
	$(Q)guest/mkimage.sh --out $(GUEST_DIR) --cache-dir $(CACHE_DIR)/guest \
	    --qemu-src "$(QEMU_SRC)" --tool $(GUEST_DIR)/vgpu-guest
	$(Q)touch $@

$(O)/tests/guest/%: tests/guest/%.c $(O)/libqclient.a $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) -o $@ $(filter %.c %.a,$^) \
		$(GLIB_LIBS) $(LDLIBS)

.PHONY: guest-image check-guest
guest-image: $(GUEST_DIR)/image.stamp

check-guest: all guest-image $(GUEST_TESTS)
	$(TEST_ENV) $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(GUEST_TESTS)

-include $(wildcard $(GUEST_DIR)/obj/*/*.d)

# --------------------------------------------------- libvirt hook, install --
# The libvirt qemu hook (libvirt-hooks/, docs/operations.md), built as
# $(O)/vgmig-hook and installed as $(SYSCONFDIR)/libvirt/hooks/qemu; the
# systemd template unit vgpu-server@.service; `make install` with DESTDIR
# and PREFIX.  The hook's unit test runs with the unit tests; the libvirt
# test (two libvirt hosts on this machine, tests/libvirt/) in
# `make check-libvirt`, which `make check` runs.
PREFIX ?= /usr/local
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
UNITDIR ?= $(PREFIX)/lib/systemd/system
DOCDIR ?= $(PREFIX)/share/doc/vgmig
XML_CFLAGS = $(shell pkg-config --cflags libxml-2.0)
XML_LIBS = $(shell pkg-config --libs libxml-2.0)
HOOK_SRCS := $(filter-out libvirt-hooks/vgmig-hook.c, \
                          $(wildcard libvirt-hooks/*.c))
HOOK_OBJS := $(HOOK_SRCS:%.c=$(O)/obj/%.o)
HOOK_TEST := $(O)/tests/libvirt/test-hook
LIBVIRT_TEST := $(O)/tests/libvirt/test-libvirt-migrate
UNIT_TESTS += $(HOOK_TEST)

$(O)/obj/libvirt-hooks/%.o: GLIB_CFLAGS += $(XML_CFLAGS)
# The server's installed path is compiled into the hook as its default.
$(O)/obj/libvirt-hooks/hook-config.o: \
    ALL_CFLAGS += -DVGH_DEFAULT_SERVER='"$(BINDIR)/vgpu-server"'
$(O)/obj/libvirt-hooks/hook-config.o: $(O)/libvirt-hooks/bindir
$(O)/libvirt-hooks/bindir: FORCE
	@mkdir -p $(dir $@)
	@echo '$(BINDIR)' | cmp -s - $@ || echo '$(BINDIR)' >$@
$(O)/libvgmig-hook.a: $(HOOK_OBJS)
	$(Q)rm -f $@ && ar rcs $@ $^
$(O)/vgmig-hook: $(O)/obj/libvirt-hooks/vgmig-hook.o $(O)/libvgmig-hook.a \
                 $(O)/libvgmig.a
	@$(if $(Q),echo "  LINK    $@")
	$(Q)$(CC) $(ALL_CFLAGS) -o $@ $^ $(XML_LIBS) $(GLIB_LIBS) $(LDLIBS)
$(O)/vgpu-server@.service: libvirt-hooks/vgpu-server@.service.in \
                           $(O)/libvirt-hooks/bindir
	$(Q)sed -e 's|@BINDIR@|$(BINDIR)|g' -e 's|@DOCDIR@|$(DOCDIR)|g' $< >$@
$(O)/tests/libvirt/%: tests/libvirt/%.c $(O)/libvgmig-hook.a \
                      $(O)/libqclient.a $(O)/libvgmig.a
	@mkdir -p $(dir $@)
	@$(if $(Q),echo "  TEST    $@")
	$(Q)$(CC) $(ALL_CFLAGS) $(GLIB_CFLAGS) $(XML_CFLAGS) -o $@ \
		$(filter %.c %.a,$^) $(XML_LIBS) $(GLIB_LIBS) $(LDLIBS)

.PHONY: install check-libvirt FORCE
all: $(O)/vgmig-hook $(O)/vgpu-server@.service
check-unit check: $(HOOK_TEST)
# Its server tests run the real vgpu-server.
$(HOOK_TEST): | $(O)/vgpu-server

install: $(O)/vgpu-server $(O)/vgmig-hook $(O)/vgpu-server@.service
	install -D -m 0755 $(O)/vgpu-server $(DESTDIR)$(BINDIR)/vgpu-server
	install -D -m 0755 $(O)/vgmig-hook $(DESTDIR)$(SYSCONFDIR)/libvirt/hooks/qemu
	install -D -m 0644 $(O)/vgpu-server@.service \
	    $(DESTDIR)$(UNITDIR)/vgpu-server@.service
	install -D -m 0644 libvirt-hooks/hook.conf.example \
	    $(DESTDIR)$(DOCDIR)/hook.conf.example
	install -D -m 0644 docs/operations.md $(DESTDIR)$(DOCDIR)/operations.md

# Two libvirt daemons in their own namespaces, `virsh migrate --live`
# there and back with the real guest, and a refused migration (root only;
# the test says SKIP otherwise).
# QEMU runs as libvirt-qemu there, and may create a userfaultfd (for
# post-copy, RAM's and the vGPU's) only with vm.unprivileged_userfaultfd
# = 1, which Debian 12's libvirt does not arrange: set for the test, put
# back after it whatever happens (docs/operations.md, Post-copy).
UFFD_SYSCTL := /proc/sys/vm/unprivileged_userfaultfd
check-libvirt: all guest-image $(LIBVIRT_TEST)
	@old=$$(cat $(UFFD_SYSCTL) 2>/dev/null); \
	{ [ -z "$$old" ] || echo 1 > $(UFFD_SYSCTL) 2>/dev/null; } || \
	    echo "check-libvirt: cannot set $(UFFD_SYSCTL): the post-copy hop will fail"; \
	$(TEST_ENV) VGMIG_HOOK=$(abspath $(O)/vgmig-hook) \
	    VGMIG_LIBVIRT_HOSTS=$(abspath tests/libvirt/lv-hosts.sh) \
	    $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(LIBVIRT_TEST); rc=$$?; \
	[ -z "$$old" ] || echo "$$old" > $(UFFD_SYSCTL) 2>/dev/null; exit $$rc

# ------------------------------------------------------------ top level --
.PHONY: all check check-unit check-qtest check-sanitize checkpatch demo \
        clean distclean help format format-check bench-hash bench

all: $(PROGRAMS) $(O)/qemu-system-x86_64

$(O)/qemu-system-x86_64: config.mak
	@mkdir -p $(O)
	$(Q)test -x "$(QEMU_BIN)" || { echo "QEMU not built: run ./configure" >&2; exit 1; }
	$(Q)ln -sf "$(QEMU_BIN)" $@

# Environment for tests and the demo: which binaries to run.
TEST_ENV := VGMIG_QEMU=$(abspath $(O)/qemu-system-x86_64) \
            VGMIG_SERVER=$(abspath $(O)/vgpu-server) \
            VGMIG_FIRMWARE=$(QEMU_FIRMWARE_DIR) \
            VGMIG_GUEST_DIR=$(abspath $(GUEST_DIR))
PROVE ?= prove
PROVE_FLAGS ?= --timer
# No test may hang a run: each test program gets at most this many seconds.
TEST_TIMEOUT ?= 600
RUN_TEST := --exec 'timeout -k 10 $(TEST_TIMEOUT)'

check-unit: $(UNIT_TESTS)
	$(TEST_ENV) $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(UNIT_TESTS)

check-qtest: all $(QTESTS)
	$(TEST_ENV) $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(QTESTS)

# Tests of the build itself (shell, TAP), run from the top of the tree.
BUILD_TESTS := tests/build/test-make-default.sh tests/build/test-check-qemu.sh \
               tests/build/test-server-cli.sh tests/build/test-thread-cpu.sh \
               tests/build/test-bench-cli.sh tests/build/test-read-hops.sh

# The libvirt test (save/restore, post-copy, several vGPUs through the real
# daemons) is part of it: its own target sets the userfaultfd sysctl.
check: all $(UNIT_TESTS) $(QTESTS) $(CUDA_TESTS) guest-image $(GUEST_TESTS) \
       $(LIBVIRT_TEST) $(O)/vgmig-bench
	$(TEST_ENV) $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(BUILD_TESTS) \
	    $(UNIT_TESTS) $(QTESTS) $(CUDA_TESTS) $(GUEST_TESTS)
	$(MAKE) --no-print-directory check-libvirt

.PHONY: check-cuda gpu-pack
check-cuda: all $(CUDA_TESTS)
	$(TEST_ENV) $(PROVE) $(PROVE_FLAGS) $(RUN_TEST) $(CUDA_TESTS)

# The GPU tests and benchmarks packed to run on a GPU machine that lacks
# the build dependencies ($(O)/gpu-pack/gpu-run.sh there; docs/cuda.md).
# GPU_QTESTS: the qtests that run on VRAM QEMU does not map (gpu-run.sh
# qtest; the others map BAR2 themselves or assert what QEMU's mapping
# gives, docs/cuda.md).
GPU_QTESTS := test-mig-basic test-mig-active test-mig-cpu-writes \
              test-mig-multi test-mig-dma test-vgpu-errors test-vgpu-cmds \
              test-vgpu-regs test-vgpu-enum test-server-restart
gpu-pack: all $(CUDA_TESTS) $(O)/cuda-bench $(O)/vgmig-bench \
          $(GPU_QTESTS:%=$(O)/tests/qtest/%) $(O)/restore-bench
	GPU_QTESTS="$(GPU_QTESTS)" tests/cuda/gpu-pack.sh $(O) $(QEMU_BIN) \
	    $(QEMU_FIRMWARE_DIR) $(O)/gpu-pack

check-sanitize:
	$(MAKE) SAN=1 check

# QEMU's own qtests (tests/qemu/subset) on the patched QEMU, in TAP; a
# failure is run on the unpatched pinned QEMU too, to tell ours from
# upstream's (docs/qemu-tests.md).  CHECK_QEMU_ARGS adds options, e.g.
# --baseline always (every entry on both) or --only REGEX.
CHECK_QEMU_ARGS ?=
.PHONY: check-qemu
check-qemu: config.mak
	$(PROVE) $(PROVE_FLAGS) -v --exec 'timeout -k 10 3600 bash' \
	    tests/qemu/check-qemu.sh :: --bin $(dir $(QEMU_BIN)) \
	    --baseline-dir $(QEMU_BASELINE_DIR) \
	    --build-baseline './configure $(CONFIGURE_FLAGS) --qemu-baseline' \
	    --rom-path $(QEMU_ROM_PATH) --scripts $(QEMU_SRC)/scripts \
	    --out $(abspath $(O))/check-qemu $(CHECK_QEMU_ARGS)

# Every patch of the series builds on its own (not in CI: a full QEMU build
# and one per patch; about 25 minutes on 2 cores).  BISECT_ARGS adds options.
BISECT_ARGS ?=
.PHONY: bisect-qemu
bisect-qemu: config.mak
	tests/qemu/bisect-build.sh --qemu-src $(QEMU_SRC) \
	    --flags $(dir $(QEMU_SRC))build/.vgmig-flags --work $(O)/bisect-qemu \
	    $(BISECT_ARGS)

# QEMU's own style checker on every patch of the series.
checkpatch: config.mak
	$(Q)for p in $$(grep -v '^[[:space:]]*\(#\|$$\)' qemu-patches/series); do \
	    perl $(QEMU_SRC)/scripts/checkpatch.pl --no-tree qemu-patches/$$p || exit 1; \
	done

demo: all
	$(TEST_ENV) $(O)/vgmig-demo --out $(O)/demo

bench-hash: $(O)/dt-bench
	$(O)/dt-bench

# GPU page hashing against the GPU's read bandwidth (bench/cuda-bench.c,
# on a GPU machine); CUDA_BENCH_ARGS adds options (--size, --page-size).
CUDA_BENCH_ARGS ?=
.PHONY: bench-cuda
bench-cuda: $(O)/cuda-bench
	$(O)/cuda-bench $(CUDA_BENCH_ARGS)

# The vGPU's own throughput alone, in pre-copy with tracking, and after a
# cancelled migration (bench/vgpu-bench.c); VGPU_BENCH_ARGS adds options.
VGPU_BENCH_ARGS ?=
.PHONY: bench-vgpu
bench-vgpu: $(O)/vgpu-bench
	$(O)/vgpu-bench $(VGPU_BENCH_ARGS)

# The live-migration benchmark: results in $(O)/bench, the report in
# docs/benchmarks.md.  BENCH_ARGS overrides the sizes, workloads, modes and
# channels (--channels N > 1: multifd with N channels for every cell and
# RAM anchor); each size gets its RAM anchor (QEMU's own RAM migration of
# that many non-zero bytes) unless BENCH_ARGS has --no-ram-anchor.
# --multi-vgpu 2G: a VM with two vGPUs of 2 GiB against one with one
# (idle and inference), three rounds (--multi-rounds), reported on their
# own and judged on the medians of QEMU's downtime to the microsecond
# (issue 17's target: at most 1.2 x).  --prealloc: the servers preallocate VRAM and
# the RAM anchors' QEMUs guest RAM, so that neither path pays for page
# allocation on the destination (docs/data-path.md).  --place-data: both
# QEMUs have x-migration-place-data on (patches 0078-0082; off by default
# only because a QEMU without them cannot load placed data), so that the
# servers copy no page (docs/operations.md, Tuning).
BENCH_ARGS ?= --sizes 256M,1G,4G --big 1G --channels 2 --multi-vgpu 2G \
              --prealloc --place-data
# RESTORE_BENCH_ARGS: the VRAM sizes of the restore-on-demand benchmark
# (bench/restore-bench.c).
RESTORE_BENCH_ARGS ?= --sizes 1G,4G
# BENCH_GUEST_HOPS: migrations of the real-guest pause cell
# (bench/guest-pause.sh), per case.
BENCH_GUEST_HOPS ?= 20
bench: all $(O)/vgmig-bench $(O)/dt-bench $(O)/vgpu-bench guest-image \
       $(O)/tests/guest/test-guest-migrate $(O)/restore-bench
	@mkdir -p $(O)/bench
	$(TEST_ENV) $(O)/restore-bench $(RESTORE_BENCH_ARGS) \
	    > $(O)/bench/restore-bench.txt && cat $(O)/bench/restore-bench.txt
	$(call guest_pause,$(BENCH_GUEST_HOPS),$(O)/bench) && \
	    cat $(O)/bench/guest-pause.txt
	$(O)/vgpu-bench $(VGPU_BENCH_ARGS) > $(O)/bench/vgpu-bench.txt && \
	    cat $(O)/bench/vgpu-bench.txt
	$(O)/dt-bench > $(O)/bench/dt-bench.txt && cat $(O)/bench/dt-bench.txt
	$(TEST_ENV) $(O)/vgmig-bench $(BENCH_ARGS) --out $(O)/bench \
	    --doc docs/benchmarks.md --cmdline "make bench BENCH_ARGS='$(BENCH_ARGS)'" \
	    --append $(O)/bench/vgpu-bench.txt --append $(O)/bench/dt-bench.txt \
	    --append $(O)/bench/guest-pause.txt \
	    --append $(O)/bench/restore-bench.txt
	gnuplot -e "datafile='$(O)/bench/downtime.dat'; outfile='docs/benchmarks-downtime.png'" \
	    bench/downtime.gp

format:
	clang-format -i $$(git ls-files '*.c' '*.h')
format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.c' '*.h')

clean:
	rm -rf build

distclean: clean
	rm -f config.mak

help:
	@echo "Targets:"
	@echo "  all             build vgpu-server, the demo and the patched QEMU"
	@echo "  demo            run the main job: a vGPU VM and its workload"
	@echo "  check           unit and qtest integration tests (runs ./configure if needed)"
	@echo "  check-unit      unit tests only"
	@echo "  check-qtest     qtest integration tests only"
	@echo "  check-sanitize  the tests built with ASan and UBSan (build/san)"
	@echo "  check-qemu      QEMU's own qtests (tests/qemu/subset) on the patched QEMU"
	@echo "  bisect-qemu     build QEMU after each patch of the series (not in CI)"
	@echo "  guest-image     the TCG guest: kernel, initramfs with vgpu-guest (build/guest)"
	@echo "  check-guest     real-guest migration tests only (tests/guest)"
	@echo "  check-cuda      CUDA backend tests only (tests/cuda; skipped without a GPU)"
	@echo "  gpu-pack        GPU tests, benchmarks, QEMU and libraries in build/gpu-pack"
	@echo "  fuzz            libFuzzer targets, FUZZ_SECONDS (60) each (build/fuzz)"
	@echo "  fuzz-seeds      rewrite the seed corpora in tests/fuzz/corpus"
	@echo "  install         vgpu-server, the libvirt hook, vgpu-server@.service (DESTDIR, PREFIX)"
	@echo "  check-libvirt   virsh migrate --live between two libvirt hosts on this machine (root)"
	@echo "  bench-hash      dirty-tracking hash GB/s against memcpy (build/dt-bench)"
	@echo "  bench-vgpu      vGPU throughput with and without tracking (build/vgpu-bench)"
	@echo "  bench-cuda      GPU page hashing against GPU read bandwidth (needs a GPU)"
	@echo "  bench           live-migration benchmark: sizes x workloads x modes, RAM anchors"
	@echo "                  (build/bench, docs/benchmarks.md; runs bench-vgpu and bench-hash first)"
	@echo "  checkpatch      QEMU's scripts/checkpatch.pl on qemu-patches/series"
	@echo "  soak            ping-pong migrations with random faults, then the pause"
	@echo "                  a real guest felt over SOAK_GUEST_HOPS hops (build/soak;"
	@echo "                  SOAK_MIGRATIONS, SOAK_DURATION, SOAK_SEED; docs/soak.md)"
	@echo "  soak-short      20 of them with 8 MiB of VRAM (run by .ci/run)"
	@echo "  stress-cpu-writes  STRESS (200) migrations under guest CPU writes,"
	@echo "                  every write before the stop checked"
	@echo "  format          clang-format the sources in place"
	@echo "  clean           remove build/ (the QEMU cache is kept)"
	@echo "  distclean       also remove config.mak"
	@echo "Variables: V=1 (show commands), SAN=1, O=DIR, CONFIGURE_FLAGS=..."

-include $(shell find $(O)/obj $(O)/tests -name '*.d' 2>/dev/null)
