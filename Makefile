# A thin wrapper for people; CMake does the work (like Neovim's top-level Makefile).
#
#   make run        install what is missing, build, start krylovd on loopback, solve a bundled matrix
#   make test       install what is missing, build, run the whole test suite (ctest)
#   make test-asan  unit and end-to-end tests built with ASan + UBSan (build-asan/)
#   make test-oclgrind  kernel tests on Oclgrind, which reports data races, barriers not every
#                   work-item reaches and out-of-bounds accesses (tests/oclgrind.sh)
#   make fuzz       the libFuzzer targets, FUZZ_SECONDS each (clang; build-fuzz/)
#   make bench      build and run krylov-bench on the default device
#   make bench-load the service load benchmark: 64 clients x 200 requests (bench/service/load.c)
#   make soak       honest and hostile clients against one krylovd for SOAK_MINUTES; fails on a
#                   wrong or lost answer or on growth of memory, descriptors or device bytes
#                   (tests/soak/soak.py; CSV, summary and plot in SOAK_OUT)
#
# Variables: BUILD (build folder), BUILD_TYPE, CMAKE_FLAGS, CTEST_FLAGS, JOBS, FUZZ_SECONDS,
# SOAK_MINUTES, SOAK_OUT, SOAK_FLAGS (more options of tests/soak/soak.py, e.g. --readers 4).

BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=
FUZZ_SECONDS ?= 60
SOAK_MINUTES ?= 10
SOAK_OUT ?= $(BUILD)/soak
SOAK_FLAGS ?=
PYTHON ?= /usr/bin/python3

.PHONY: all deps configure build test test-asan test-oclgrind fuzz run bench bench-load soak clean format

all: build

deps:
	bash deploy/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

test-asan: deps
	cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DKD_SANITIZE=address,undefined $(CMAKE_FLAGS)
	cmake --build build-asan -j $(JOBS)
	cd build-asan && LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp:print_suppressions=0 \
	  ctest --output-on-failure -j $(JOBS) -L 'unit|e2e' -LE mpi $(CTEST_FLAGS)

test-oclgrind: build
	bash tests/oclgrind.sh $(BUILD)

fuzz: deps
	CC=clang cmake -S . -B build-fuzz -DKD_FUZZ=ON -DKD_FUZZ_SECONDS=$(FUZZ_SECONDS) $(CMAKE_FLAGS)
	cmake --build build-fuzz -j $(JOBS) --target fuzz_all
	cd build-fuzz && ctest --output-on-failure -j $(JOBS) -L fuzz

# Only what the demo runs: the daemon and the CLI (not every test and benchmark).
run: configure
	cmake --build $(BUILD) -j $(JOBS) --target kd_run
	bash deploy/quickstart.sh $(BUILD)/bin

bench: build
	$(BUILD)/bin/krylov-bench

bench-load: build
	$(BUILD)/bin/krylov-load --clients 64 --requests 200

soak: build
	$(PYTHON) tests/soak/soak.py --bin-dir $(BUILD)/bin --minutes $(SOAK_MINUTES) \
	  --out $(SOAK_OUT) $(SOAK_FLAGS)

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD) build-asan build-fuzz
