# Entry points for people and CI. Everything real lives in CMake; this file installs what a fresh
# Debian 12 machine lacks, then drives cmake/ctest.
BUILD      ?= build
JOBS       ?= $(shell nproc)
# Tests run twice as many at once as there are cores: the end-to-end tests spend most of their
# time waiting on lastcall's events (graces, timers, a child's exit), not on the CPU, and none of
# them depends on the machine's speed (test_faults runs alone: RUN_SERIAL).
CTEST_JOBS ?= $(shell echo $$(( $$(nproc) * 2 )))
# The optimized build's tests use the cores less than the sanitized ones (user+sys 150 s over
# 2 x 122 s of ctest -j4 on 2 cores): three per core, measured 122 s -> 104 s for `make test`.
TEST_JOBS  ?= $(shell echo $$(( $$(nproc) * 3 )))
DEB_PKGS   := build-essential cmake pkg-config python3 util-linux procps \
              libsystemd-dev libspdlog-dev libcli11-dev catch2 libtomlplusplus-dev libsqlite3-dev \
              nlohmann-json3-dev libmicrohttpd-dev libmicrohttpd12 libpq-dev libpq5 postgresql-15 \
              python3-croniter python3-prometheus-client scdoc file strace lld
SAN_PKGS   := clang-14 libclang-rt-14-dev clang-format-14
BENCH_PKGS := tini dumb-init catatonit hyperfine gnuplot-nox
# cpack's DEB generator: dpkg-shlibdeps (dpkg-dev) computes Depends, file finds the ELF files.
PKG_PKGS   := dpkg-dev file

.PHONY: all deps build demo test test-sanitize fuzz package static bench bench-ledger bench-never-waits format clean

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

# The developer and CI builds treat warnings as errors; a packager's build (plain cmake) does not.
WERROR     ?= ON

# Both binaries: $(BUILD)/static/lastcall (the .deb's /usr/bin/lastcall and `make static`'s) and
# $(BUILD)/lastcall, the dynamic twin it hands runs to that need libpq, libmicrohttpd or NSS
# (found at $(BUILD)/libexec/lastcall/lastcall), from the same objects (three small files
# compiled twice, and a link each).
build: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLASTCALL_WERROR=$(WERROR)
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	./scripts/demo.sh $(BUILD)/lastcall

test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(TEST_JOBS)

# The whole suite (unit and end to end) against an ASan+UBSan build. (No TSan build: lastcall is
# single-threaded but for the ledger worker, whose only shared state is one mutex-guarded queue,
# see shutdown/admission.hpp and jobs/ledger_worker.hpp.) Sanitizer reports go to files, not to stderr: an e2e test that expects lastcall to
# die (SIGKILL, exit codes) would not notice a report in a log it does not read. Any report file
# fails the target, whatever ctest said. The directory is world-writable because some tests run
# lastcall as nobody.
SAN_LOGS   = $(CURDIR)/build-san/sanitizer-logs
SAN_ENV    = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:log_path=$(SAN_LOGS)/asan \
             UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path=$(SAN_LOGS)/ubsan
# The build is what CI waits for, so it is made cheap (measured per file, 2026-12-03): -O0, not
# -O1 (cli.cpp 43 s instead of 103 s under ASan; the suite runs slower, by less than the build
# gains), and shared spdlog and fmt (LASTCALL_SHARED_DEPS): header-only fmt, as the shipped build
# bundles it, compiles fmt's implementation into every file that logs (log.cpp 19 s, not 5 s).
# Warnings are enforced by `make test`'s build (-Werror), not here.
# Left out of the sanitized run: end-to-end tests whose time is the wall clock of leases and
# outages (3 s leases expiring, a database stopped for longer than a lease), 250 s of the
# sanitized suite's time (2026-12-07) for code paths that test_cluster, test_never_waits' other
# classes and the [pg] unit tests already run under ASan. `make test` runs them.
SAN_SKIP = test_cluster_semantics\.(OutageLongerThanTheLeaseTest|DeploymentKeyTest|FencingTest)|test_cluster_failures\.(LeaseTest|OutageTest)|test_never_waits\.NoOverlapTest
test-sanitize: deps
	cmake -S . -B build-san -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG="-g -O0" \
	  -DCMAKE_C_FLAGS_DEBUG="-g -O0" -DLASTCALL_SANITIZE=ON -DLASTCALL_SHARED_DEPS=ON
	cmake --build build-san -j $(JOBS)
	rm -rf $(SAN_LOGS) && mkdir -p $(SAN_LOGS) && chmod 1777 $(SAN_LOGS)
	@status=0; $(SAN_ENV) ctest --test-dir build-san --output-on-failure -j $(CTEST_JOBS) \
	  -E '$(SAN_SKIP)' || status=1; \
	if [ -n "$$(ls -A $(SAN_LOGS))" ]; then \
	  echo "sanitizer reports:"; for f in $(SAN_LOGS)/*; do echo "== $$f"; cat "$$f"; done; status=1; \
	fi; exit $$status

# libFuzzer targets (tests/fuzz) in their own clang build; each runs FUZZ_SECONDS seconds.
FUZZ_SECONDS ?= 20
fuzz: deps
	$(call apt_install,$(SAN_PKGS))
	CC=clang-14 CXX=clang++-14 cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DLASTCALL_FUZZ=ON -DLASTCALL_TESTS=OFF
	cmake --build build-fuzz -j $(JOBS)
	./tests/fuzz/run.sh build-fuzz $(FUZZ_SECONDS) $(JOBS)

# Benchmarks against tini, dumb-init and catatonit (issue 8): bench/results/<date>.md + PNGs.
# QUICK=1 for a smoke run. What is measured is what a user installs (issue 18): /usr/bin/lastcall
# of the .deb (`make package`, unpacked into $(BUILD)/bench-root) and the static binary of `make
# static`, and the .deb's dynamic twin (/usr/libexec/lastcall/lastcall: the runs handed over to
# it pay its start-up and memory). The report names the files, their sha256 and the commit.
bench: package static
	$(call apt_install,$(BENCH_PKGS) valgrind file)
	rm -rf $(BUILD)/bench-root
	dpkg -x $$(ls -t $(BUILD)/packages/lastcall_*.deb | head -1) $(BUILD)/bench-root
	/usr/bin/python3 bench/run.py --lastcall-static $(BUILD)/static/lastcall \
	  --lastcall $(BUILD)/bench-root/usr/bin/lastcall \
	  --lastcall-origin "$$(ls -t $(BUILD)/packages/lastcall_*.deb | head -1)" \
	  $$(test -x $(BUILD)/bench-root/usr/libexec/lastcall/lastcall && echo --extra lastcall-twin=$(BUILD)/bench-root/usr/libexec/lastcall/lastcall) \
	  $(if $(QUICK),--quick,) $(if $(PROFILE),--profile,) $(BENCH_ARGS)

# The run ledger: claim latency and runs/s, SQLite and PostgreSQL (issue 20): <date>-ledger.md.
bench-ledger: build
	cmake --build $(BUILD) --target ledger_bench
	/usr/bin/python3 bench/ledger.py --tool $(BUILD)/tools/ledger_bench

# The init never waits (issue 38): a signal's delay to the main command while 3 replicas claim a
# burst of 1,000 jobs on PostgreSQL 0 ms and 50 ms away, and SQLite on a throttled disk (root):
# <date>-never-waits.md, a section per run.
bench-never-waits: build
	/usr/bin/python3 bench/never_waits.py --binary $(BUILD)/lastcall --label "$(or $(LABEL),$$(git rev-parse --short HEAD))" $(BENCH_ARGS)

# The Debian package, in $(BUILD)/packages: /usr/bin/lastcall (static), its dynamic twin in
# /usr/libexec/lastcall, lastcall(1), docs and examples.
package: build
	$(call apt_install,$(PKG_PKGS))
	cpack --config $(BUILD)/CPackConfig.cmake -B $(BUILD)/packages
	@ls -1 $(BUILD)/packages/*.deb

# One fully static binary, $(BUILD)/static/lastcall (stripped, its debug info in lastcall.debug
# beside it), for scratch/distroless/alpine images (no libsystemd: sd_notify is spoken directly;
# --user reads /etc/passwd itself; no twin beside it there). `make build` makes it.
static: build
	@ls -l $(BUILD)/static/lastcall

# The same files as the format test in tests/CMakeLists.txt checks.
format:
	clang-format-14 -i $$(git ls-files '*.c' '*.h' '*.cpp' '*.hpp')

clean:
	rm -rf $(BUILD) build-san build-fuzz
