# cseng: one binary (C engine + embedded Lua 5.4) and its Lua tree.
# Targets: deps, all (./cseng), rootfs, check, test, conformance, asan, fuzz, demo, bench, clean.

CC      ?= cc
PKGS    := lua5.4 libcurl libuv libarchive openssl zlib libzstd sqlite3 libnghttp2
VERSION := 0.1.0+$(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CFLAGS  ?= -O2 -g
CFLAGS  += -std=gnu11 -Wall -Wextra -D_GNU_SOURCE -Ibuild -Iengine \
           $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
# build/version.h follows the checkout: rewritten (so lsys.o rebuilds) only when HEAD changes
VERSION_H := $(shell mkdir -p build; v=$$(printf '\043define CSENG_VERSION "%s"' '$(VERSION)'); \
  [ "$$(cat build/version.h 2>/dev/null)" = "$$v" ] || printf '%s\n' "$$v" > build/version.h)
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) -lsnappy -lhttp_parser -lseccomp -lm
SRCS    := $(wildcard engine/*.c)
OBJS    := $(SRCS:engine/%.c=build/%.o)
ASAN_OBJS := $(SRCS:engine/%.c=build/asan/%.o)
# every engine file that defines luaopen_cseng_<name> is a module cseng.<name>
MODULES := $(shell sed -n 's/^int luaopen_cseng_\([a-z0-9_]*\)(lua_State \*L).*/\1/p' $(SRCS))

# Debian packages the build, the tests and the demo need (make deps installs what is missing).
DEBS := pkg-config gcc make clang libclang-rt-14-dev liblua5.4-dev lua5.4 lua-cjson lua-busted \
        libcurl4-openssl-dev libuv1-dev libarchive-dev libssl-dev zlib1g-dev libzstd-dev \
        libsnappy-dev libhttp-parser-dev libseccomp-dev libjemalloc-dev libjansson-dev libnghttp2-dev openssl bubblewrap \
        slirp4netns btrfs-progs golang-github-containers-common python3 python3-pytest sqlite3 libsqlite3-dev git \
        gawk patch diffutils lua-check curl \
        python3-botocore python3-jsonschema gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user \
        protobuf-compiler libprotobuf-dev
DOCKER_DEBS := docker.io debootstrap
ROOTFS_DEBS := debootstrap

.PHONY: all deps deps-docker deps-rootfs rootfs deps-agents deps-test deps-slurm deps-bench check test conformance asan fuzz fuzzers demo bench clean
all: cseng

define install_missing
	@missing=$$(for p in $(1); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "make deps: installing" $$missing; \
	  SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	fi
endef

# libcurl 8.14 from Debian's bookworm-backports (pinned: only curl's packages come from there)
deps:
	@tools/apt-backports.sh
	$(call install_missing,$(DEBS))

deps-docker:
	$(call install_missing,$(DOCKER_DEBS))

# A one-machine Slurm (slurmctld + slurmd + munge) for the scale-out spec, PyYAML for the manifest check.
SLURM_DEBS := slurmctld slurmd slurm-client munge python3-yaml
deps-slurm:
	$(call install_missing,$(SLURM_DEBS))

deps-rootfs:
	$(call install_missing,$(ROOTFS_DEBS))

# The Debian base root filesystem the local provider's sandboxes run on (and the docker base
# image's content): debootstrap from the mirror in the machine's apt sources, once, into the
# cache directory (~/.cache/cseng/rootfs/); a no-op when it exists.
rootfs: deps-rootfs all
	./cseng images rootfs

# Test tools from npm: Prism serves the vendors' OpenAPI specs for the conformance specs.
PRISM := spec/fakes/prism/node_modules/.bin/prism
# The vendors' official SDKs (referees for the conformance specs) and grpc-js for the Modal fake.
SDKS := spec/sdk/node_modules/.package-lock.json
# The viewer's browser spec (spec/view/browser_spec.lua): Debian's chromium, driven by playwright-core
# (no browser download: it launches /usr/bin/chromium).
BROWSER_DEBS := chromium
BROWSER_SPEC := spec/browser/node_modules/.package-lock.json
.PHONY: deps-browser
deps-browser:
	$(call install_missing,$(BROWSER_DEBS))
deps-test: deps-browser $(BROWSER_SPEC)
$(BROWSER_SPEC): spec/browser/package.json spec/browser/package-lock.json
	@command -v npm >/dev/null || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix spec/browser --no-audit --no-fund --loglevel=error
	@touch $@
# The watch's metrics spec (spec/watch/prometheus_spec.lua): Debian's prometheus, which the spec starts
# itself on a loopback port with its own temporary data folder (the packaged service is not used).
PROMETHEUS_DEBS := prometheus
.PHONY: deps-prometheus
deps-prometheus:
	$(call install_missing,$(PROMETHEUS_DEBS))
deps-test: deps-prometheus
# Coding-agent CLIs run as solvers (lua/solvers/codex.lua; pinned in lua/solvers/installed/package-lock.json).
AGENTS := lua/solvers/installed/node_modules/.package-lock.json
deps-agents: $(AGENTS)
$(AGENTS): lua/solvers/installed/package.json lua/solvers/installed/package-lock.json
	@command -v npm >/dev/null || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix lua/solvers/installed --no-audit --no-fund --loglevel=error
	@touch $@
deps-test: $(PRISM) $(SDKS) $(AGENTS)
$(SDKS): spec/sdk/package.json spec/sdk/package-lock.json
	@command -v npm >/dev/null || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix spec/sdk --no-audit --no-fund --loglevel=error
	@touch $@
$(PRISM): spec/fakes/prism/package.json spec/fakes/prism/package-lock.json
	@command -v npm >/dev/null || { SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; $$SUDO apt-get install -y -qq nodejs npm >/dev/null; }
	npm ci --prefix spec/fakes/prism --no-audit --no-fund --loglevel=error
	@touch $@

build/modules.h: $(SRCS) | build
	@printf '' > $@.tmp; for m in $(MODULES); do printf 'X(%s)\n' $$m >> $@.tmp; done
	@cmp -s $@.tmp $@ || mv $@.tmp $@; rm -f $@.tmp

build build/asan:
	@mkdir -p $@

build/%.o: engine/%.c build/modules.h $(wildcard engine/*.h) | build
	$(CC) $(CFLAGS) -c -o $@ $<

build/lsys.o build/asan/lsys.o: build/version.h

# ./cseng runs on jemalloc (measured in bench/probe.lua at 1,024 lifecycles: ~4 us less client CPU
# per request than glibc malloc, whose _int_malloc/malloc_consolidate were ~10% of the profile);
# cseng-asan, the C tests and the fuzzers keep the sanitizer's allocator.
MALLOC_LIBS := $(shell pkg-config --libs jemalloc 2>/dev/null || echo -ljemalloc)
cseng: $(OBJS)
	$(CC) $(CFLAGS) -rdynamic -o $@ $(OBJS) $(LDLIBS) $(MALLOC_LIBS)

build/asan/%.o: engine/%.c build/modules.h $(wildcard engine/*.h) | build/asan
	$(CC) $(CFLAGS) -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -c -o $@ $<

cseng-asan: $(ASAN_OBJS)
	$(CC) $(CFLAGS) -fsanitize=address,undefined -rdynamic -o $@ $(ASAN_OBJS) $(LDLIBS)

# The exec agent that runs inside AWS Lambda MicroVMs (microvm-agent/, docs/providers/aws_microvm.md):
# static, libc only, for the build machine and for aarch64 (Debian's cross compiler).
AGENT_SRCS := microvm-agent/microvm-agent.c microvm-agent/agent_parse.c
AGENT_CFLAGS := -static -O2 -std=gnu11 -Wall -Wextra -D_GNU_SOURCE
.PHONY: agent
all: agent
agent: build/microvm-agent/microvm-agent build/microvm-agent/microvm-agent-aarch64
build/microvm-agent/microvm-agent: $(AGENT_SRCS) microvm-agent/agent_parse.h
	@mkdir -p build/microvm-agent
	$(CC) $(AGENT_CFLAGS) -o $@ $(AGENT_SRCS)
build/microvm-agent/microvm-agent-aarch64: $(AGENT_SRCS) microvm-agent/agent_parse.h
	@mkdir -p build/microvm-agent
	aarch64-linux-gnu-gcc $(AGENT_CFLAGS) -o $@ $(AGENT_SRCS)

# The first process of every exec in a local sandbox (jail/cseng-jail.c): static, libc only, so
# starting it costs one exec() and no dynamic linking.
.PHONY: jail
all: jail
jail: build/cseng-jail
build/cseng-jail: jail/cseng-jail.c
	@mkdir -p build
	$(CC) -static -O2 -std=gnu11 -Wall -Wextra -o $@ $<

# C unit tests: test/c/<name>_test.c links engine/<name>.c (plain C, no Lua).
build/test/%_test: test/c/%_test.c engine/%.c $(wildcard engine/*.h) $(wildcard test/c/*.h)
	@mkdir -p build/test
	$(CC) $(CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ $< engine/$*.c $(LDLIBS)

C_TESTS := $(patsubst test/c/%_test.c,build/test/%_test,$(wildcard test/c/*_test.c))
# h1.c speaks TLS through tls.c and HTTP/2 through h2.c: its test and fuzzer link all three
build/test/h1_test: test/c/h1_test.c engine/h1.c engine/tls.c engine/h2.c $(wildcard engine/*.h) $(wildcard test/c/*.h)
	@mkdir -p build/test
	$(CC) $(CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ $< engine/h1.c engine/tls.c engine/h2.c $(LDLIBS)

# rxstamp.h is a header of inline reads: its test links nothing else of the engine
build/test/rxstamp_test: test/c/rxstamp_test.c engine/rxstamp.h test/c/check.h
	@mkdir -p build/test
	$(CC) $(CFLAGS) -fsanitize=address,undefined -fno-sanitize-recover=undefined -o $@ $< -lpthread

# Every suite; tools/check.sh prints each suite's line and the plain total last.
test: cseng $(C_TESTS) build/bench/fake_provider
	@CSENG=./cseng tools/check.sh

# The differential specs alone: each vendor's official SDK and cseng's adapter against one
# recording fake; this target alone rewrites their sections of docs/providers/CONFORMANCE.md
# (make check runs the same specs, writing to a temporary copy).
CONFORMANCE_SPECS := $(wildcard spec/providers/*/conformance_spec.lua) spec/helpers/conformance_spec.lua
conformance: cseng $(SDKS)
	@CSENG=./cseng CSENG_SUITES=specs CSENG_SPECS="$(CONFORMANCE_SPECS)" \
	  CSENG_CONFORMANCE_DOC=$(CURDIR)/docs/providers/CONFORMANCE.md tools/check.sh

# Every suite, after the steps it needs (deps, the build, the base root filesystem, dockerd).
# Whatever fails, the last line printed is the total "N passed, N failed" (tools/check.sh): a
# failed deps or build step counts as a failure (a failed build runs no suite), and make's own
# note of a failed check follows it on stderr. dockerd is started for the docker specs when
# absent and stopped after the suites; where it cannot start, those specs are reported as
# skipped, with the reason in build/docker/unavailable.
# CHECK_JOBS spec files run at a time (default 2: one at a time left this 2-core machine about
# half idle, two keep it 88-98% busy; CHECK_JOBS=1 runs one at a time).
check:
	@failed=; \
	  $(MAKE) --no-print-directory deps deps-test deps-slurm || failed="$$failed deps"; \
	  $(MAKE) --no-print-directory -j$$(nproc) all $(C_TESTS) $(FUZZERS) build/bench/fake_provider || failed="$$failed build"; \
	  case " $$failed " in *" build "*) ;; *) \
	    $(MAKE) --no-print-directory rootfs || echo "make check: the base root filesystem could not be built; the local specs will say why"; \
	    tools/docker-up.sh || echo "make check: docker is unavailable; the docker specs are reported as skipped (build/docker/unavailable)" ;; \
	  esac; \
	  CSENG=./cseng FUZZ_SECONDS=$${FUZZ_SECONDS:-20} CHECK_JOBS=$${CHECK_JOBS:-2} CHECK_FAILED_STEPS="$$failed" \
	    CHECK_AFTER=tools/docker-down.sh tools/check.sh

asan: deps cseng-asan
	@ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  CSENG=./cseng-asan CSENG_SUITES="specs" tools/check.sh

# fuzz/<name>_fuzz.c is a libFuzzer target over engine/<name>.c.
FUZZERS := $(patsubst fuzz/%_fuzz.c,build/fuzz/%_fuzz,$(wildcard fuzz/*_fuzz.c))
build/fuzz/%_fuzz: fuzz/%_fuzz.c engine/%.c $(wildcard engine/*.h)
	@mkdir -p build/fuzz
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Iengine -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< engine/$*.c $(LDLIBS)
build/fuzz/h1_fuzz: fuzz/h1_fuzz.c engine/h1.c engine/tls.c engine/h2.c $(wildcard engine/*.h)
	@mkdir -p build/fuzz
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Iengine -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< engine/h1.c engine/tls.c engine/h2.c $(LDLIBS)
# the agent's parsers live in microvm-agent/, not engine/
build/fuzz/agent_parse_fuzz: fuzz/agent_parse_fuzz.c microvm-agent/agent_parse.c microvm-agent/agent_parse.h
	@mkdir -p build/fuzz
	clang -g -O1 -std=gnu11 -D_GNU_SOURCE -Imicrovm-agent -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -o $@ $< microvm-agent/agent_parse.c
fuzzers: $(FUZZERS)
fuzz: deps $(FUZZERS)
	@for f in $(FUZZERS); do n=$$(basename $$f _fuzz); mkdir -p build/fuzz/corpus-$$n; \
	  echo "fuzz: $$n for $${FUZZ_SECONDS:-60}s"; \
	  $$f -max_total_time=$${FUZZ_SECONDS:-60} -print_final_stats=1 build/fuzz/corpus-$$n fuzz/corpus/$$n || exit 1; done

demo: deps all rootfs
	./cseng run plans/cold-gold.lua

# The benchmark harness's tools: wrk and nginx (reference load and zero-latency endpoint), the
# seed-style Python client (httpx), perf/strace for the profiles the report quotes, cyclictest (rt-tests)
# for the machine's own wake-up latency.
BENCH_DEBS := wrk nginx-light nghttp2-client python3-httpx linux-perf strace rt-tests
deps-bench:
	$(call install_missing,$(BENCH_DEBS))

# the bench's fake provider in C (bench/fake_provider.c): what make bench and bench/probe.lua
# measure against, plain, over TLS (OpenSSL) and over HTTP/2 (libnghttp2); spec/bench/fake_provider_spec.lua
# (make check) holds it to bench/fake_provider.lua; jemalloc as ./cseng (OpenSSL and jansson
# allocate on every request, glibc's malloc was ~4% of its CPU)
build/bench/fake_provider: bench/fake_provider.c engine/rxstamp.h
	@mkdir -p build/bench
	$(CC) $(CFLAGS) -o $@ $< -luv -lhttp_parser -ljansson -lssl -lcrypto -lnghttp2 $(MALLOC_LIBS)

bench: deps deps-bench all build/bench/fake_provider
	./cseng lua bench/run.lua

clean:
	rm -rf build cseng cseng-asan
