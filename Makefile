# A thin wrapper for people; CMake does the work (like Neovim's top-level Makefile).
#
#   make run     install what is missing, build, start krylovd on loopback, solve a bundled matrix
#   make test    install what is missing, build, run the whole test suite (ctest)
#   make bench   build and run krylov-bench on the default device
#
# Variables: BUILD (build folder), BUILD_TYPE, CMAKE_FLAGS, CTEST_FLAGS, JOBS.

BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=
CTEST_FLAGS ?=

.PHONY: all deps configure build test run bench clean format

all: build

deps:
	bash deploy/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) $(CTEST_FLAGS)

run: build
	bash deploy/quickstart.sh $(BUILD)/bin

bench: build
	$(BUILD)/bin/krylov-bench

format:
	clang-format -i $$(git ls-files '*.c' '*.h')

clean:
	rm -rf $(BUILD)
