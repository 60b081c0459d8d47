# mslaunch: `make run` runs the reference job, `make test` runs the test suite.
# Both install what they need: `run` a venv in .venv with mslaunch and MindSpore (from PyPI,
# installed by uv: its cache links a 3 GB MindSpore into a new venv in seconds, where pip unpacks it
# again for minutes);
# `test` also the Debian packages of the real parts the tests use (as root) and the dev extras.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PKGS := gcc libc6-dev openmpi-bin openssh-server openssh-client iproute2 tmux chromium slurmctld slurmd slurm-client prometheus
DATA ?= data/synth-cifar10
NP ?= 2
STEPS ?= 60
# Parallel test workers: most tests wait on processes, not on the CPU.  Measured on 2 cores, two
# fresh clones of one commit back to back (2026-11-29): -n 4 611.3 s and 1,038 CPU-s, -n 5 614.8 s
# and 1,084 CPU-s (its slowest test 80 s): a fifth worker fills no idle core, it adds contention.
JOBS ?= 4
# test-fast's workers: unit tests use the CPU, so one worker per core, and one more for the few
# that wait on a timer or a child (each worker pays its own collection, about 3 CPU-seconds: on 2
# cores 3 workers ran the loop in 25.5 s and 31.2 CPU-s, 2 workers in 31.1 s and 28.3 CPU-s).
FAST_JOBS ?= $(shell echo $$(( $$(nproc) + 1 )))
PYTEST_ARGS ?=
# How many of the slowest tests `make test` lists at its end.
DURATIONS ?= 10
# pytest's wall time on a fresh clone, in seconds: the suite fails past it, and on a test much
# slower than its cost marker (tests/harness/budget.py). The target is 420 s (make test in 10
# minutes with the install); the suite measured 485-564 s here on three fresh clones of the same
# code on 2026-11-29 (797-942 CPU-s: the machine's speed varies by a fifth; 612-642 s and 1,063
# CPU-s that morning, before a round of cuts measured per test with tests/harness/cpuprof.py), and
# CI, run right after a session on the same machine, took up to 8 % longer than the session's own
# fresh-clone run: the budget holds the suite there (+25 % over the slowest) until the tests are cheaper.
# A later session ran the same code (d4d6051, 525 s the session before) in 611-615 s and
# 1,038-1,084 CPU-s, and an hour later (two small test files more) in 490 s and 823 CPU-s: 700 s
# left CI 14 % of room over the slow hour, so the budget follows the same rule from there.
TEST_BUDGET ?= 765
# The suite starts about a thousand Python processes: they share the bytecode caches of the
# clone (launcher/ and the tests' rewritten asserts) even where the environment turns them off.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

.PHONY: all deps venv venv-run lint test test-fast run bench clean

all: test

deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (run as root, or install them; tests that need them will skip)"; fi; \
	fi

# What `make run` needs: mslaunch and MindSpore (the train extra), from PyPI.
UV := $(VENV)/bin/uv
# The clone goes on the venv's path as a plain .pth line: setuptools' default editable finder is
# an import hook every Python process of the venv loads at start (pathlib, fnmatch, re: 28 -> 12.5
# ms of CPU a `python -c pass` here), and the suite starts some two thousand of them.
EDITABLE := --config-settings editable_mode=compat
$(VENV)/.stamp-run: setup.cfg pyproject.toml
	@set -e; start=$$(date +%s); \
	test -x $(PY) || $(PYTHON) -m venv $(VENV); \
	test -x $(UV) || $(PY) -m pip install -q uv; \
	$(UV) pip install --python $(PY) -q $(EDITABLE) -e '.[train]'; \
	echo "make run: install took $$(( $$(date +%s) - start )) s"
	touch $@

# What `make test` needs on top: the dev and report extras.
$(VENV)/.stamp-install: $(VENV)/.stamp-run
	$(UV) pip install --python $(PY) -q $(EDITABLE) -e '.[train,dev,report]'
	touch $@

venv-run: $(VENV)/.stamp-run
venv: $(VENV)/.stamp-install

# Ends with the ten slowest tests (pytest's --durations) and the suite's wall time.
test: deps venv lint
	@start=$$(date +%s.%N); rc=0; \
	MSLAUNCH_TEST_LIMITS=1 MSLAUNCH_TEST_BUDGET=$(TEST_BUDGET) \
	  $(PYTEST) -n $(JOBS) --dist worksteal --durations=$(DURATIONS) $(PYTEST_ARGS) || rc=$$?; \
	echo "make test: the suite took $$(awk -v s=$$start -v e=$$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }') s wall time (exit $$rc)"; \
	exit $$rc

# The import contract (setup.cfg), ruff and mypy (pyproject.toml): layers, no cycles, sorted imports,
# no unused names, ruff format with lines of at most 120 characters, types.
lint: venv
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(VENV)/bin/ruff check launcher tests bench
	$(VENV)/bin/ruff format --check -q launcher tests bench
	$(VENV)/bin/mypy

# The edit-test loop: unit tests of every layer, in-process: no real parts (namespaces, Slurm,
# mpirun, MindSpore, browsers), no program started as a process (e2e) and no work at scale (heavy);
# `make test` runs those.  A test here that uses more than a CPU-second fails this run
# (tests/harness/budget.py), so the loop stays near 30 s on 2 cores.
test-fast: venv
	MSLAUNCH_FAST_TESTS=1 $(PYTEST) -n $(FAST_JOBS) --dist worksteal -q -m "not (mindspore or netns or mpi or slurm or e2e or heavy)" $(PYTEST_ARGS)

run: venv-run
	@set -e; start=$$(date +%s); \
	$(VENV)/bin/mslaunch data synth-cifar10 $(DATA) --train 3000 --test 500; \
	echo "make run: data took $$(( $$(date +%s) - start )) s"; start=$$(date +%s); \
	$(VENV)/bin/mslaunch run --np $(NP) --master-port auto --env GLOG_v=3 -m launcher.workloads.resnet50_cifar10 \
	    --data-path $(DATA) --image-size 32 --epochs 1 --steps-per-epoch $(STEPS) --eval; \
	echo "make run: training took $$(( $$(date +%s) - start )) s"

bench: deps venv
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) mslaunch_logs data .pytest_cache
