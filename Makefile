# stratos: `make run` runs the main job on the built-in default problem, `make test` runs every
# test. Both install missing Debian packages first (apt-get; run as root or with sudo).
# libopenblas0-pthread: Debian's LibTorch does its CPU GEMMs through the system BLAS, which is
# otherwise the reference BLAS (gpt-tiny trains about 4x slower there); stratos makes it
# single-threaded at start (runtime/device.h UseSingleThreadedBlas).
# `make install [PREFIX=/usr/local] [DESTDIR=...]` installs the binary and the data it reads.
DEBIAN_PACKAGES := build-essential cmake pkg-config libtorch-dev libgloo-dev libeigen3-dev \
                   libtomlplusplus-dev nlohmann-json3-dev libcli11-dev libfmt-dev doctest-dev \
                   libfccp-dev coinor-libcbc-dev zlib1g-dev python3-matplotlib clang \
                   libopenblas0-pthread
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
STRATOS := $(BUILD_DIR)/stratos
PREFIX ?= /usr/local
# `make fuzz`: libFuzzer harnesses (fuzz/) in a clang build with sanitizers, FUZZ_SECONDS each;
# `make test` runs each for FUZZ_SMOKE_SECONDS.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 600
FUZZ_SMOKE_SECONDS ?= 10

# `make carry-headers` (on a machine with the Debian packages) copies the header-only
# dependencies and the training text into third_party/ (git-ignored), for a GPU machine that has
# CUDA and the Python torch package but no Debian packages; there, experiments/gpu/gpu_checks.sh
# builds against that torch and runs the GPU checks. `make test-gpu` runs the gpu test suite
# (each test skips without a CUDA device).
CARRIED_HEADERS := /usr/include/eigen3 /usr/include/nlohmann /usr/include/toml++ \
                   /usr/include/CLI /usr/include/fmt /usr/include/doctest /usr/include/libfccp
SHARED_DATA ?= ../shared/data

.PHONY: all deps configure build run test test-gpu bench install clean fuzz-build fuzz carry-headers

all: build

deps:
	@missing=$$(for p in $(DEBIAN_PACKAGES); do \
	    dpkg-query -W -f='$${Status}' $$p 2>/dev/null | grep -q "install ok installed" || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing missing Debian packages: $$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(BUILD_DIR)/CMakeCache.txt:
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release

configure: deps $(BUILD_DIR)/CMakeCache.txt

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

run: build
	$(STRATOS) search --model gpt3-175b --cluster p3.16xlarge --nodes 64 --global-batch 1536 \
	  --algo all --time-limit 20 --output-dir out/default

test: build fuzz-build
	cd $(BUILD_DIR) && ctest --output-on-failure
	bash fuzz/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SMOKE_SECONDS)

$(FUZZ_DIR)/CMakeCache.txt:
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -DSTRATOS_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo

fuzz-build: deps $(FUZZ_DIR)/CMakeCache.txt
	cmake --build $(FUZZ_DIR) -j $(JOBS)

fuzz: fuzz-build
	bash fuzz/run_fuzzers.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

test-gpu: build
	cd $(BUILD_DIR) && ./tests/runtime_test -ts=gpu

carry-headers: deps
	rm -rf third_party && mkdir -p third_party/include
	cp -r $(CARRIED_HEADERS) third_party/include/
	cp $(SHARED_DATA)/tinyshakespeare.txt third_party/

bench: build
	$(STRATOS) bench ladder

# Only the binary is built for it; the data goes to $(DESTDIR)$(PREFIX)/share/stratos.
install: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target stratos
	DESTDIR="$(DESTDIR)" cmake --install $(BUILD_DIR) --prefix "$(PREFIX)"

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_DIR) third_party
