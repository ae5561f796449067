# Entry points for people and CI. Everything real lives in CMake; this file installs what a fresh
# Debian 12 machine lacks, then drives cmake/ctest.
BUILD      ?= build
JOBS       ?= $(shell nproc)
DEB_PKGS   := build-essential cmake pkg-config python3 util-linux procps \
              libsystemd-dev libspdlog-dev libcli11-dev catch2 libtomlplusplus-dev libsqlite3-dev \
              python3-croniter scdoc file
SAN_PKGS   := clang-14 libclang-rt-14-dev
BENCH_PKGS := tini dumb-init catatonit hyperfine gnuplot-nox

.PHONY: all deps build demo test test-sanitize fuzz package static bench format clean

all: build

# Install only the packages that are missing; apt-get update runs only when something is.
define apt_install
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  DEBIAN_FRONTEND=noninteractive apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi
endef

deps:
	$(call apt_install,$(DEB_PKGS))

build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)/lastcall

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

test-sanitize: deps
	cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DLASTCALL_SANITIZE=ON
	cmake --build build-san -j $(JOBS)
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	  ctest --test-dir build-san --output-on-failure -j $(JOBS)

format:
	clang-format -i src/*.cpp include/lastcall/*.hpp tests/unit/*.cpp tests/e2e/helpers/*.c

clean:
	rm -rf $(BUILD) build-san build-static build-fuzz
