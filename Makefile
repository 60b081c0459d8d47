# mslaunch: `make run` runs the reference job, `make test` runs the test suite.
# Both install what they need: Debian packages (as root), a venv in .venv, the package.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
APT_PKGS := openmpi-bin openssh-server openssh-client iproute2 tmux chromium slurmctld slurmd slurm-client
DATA ?= data/synth-cifar10
NP ?= 2
STEPS ?= 60
PYTEST_ARGS ?=

.PHONY: all deps venv test run bench clean

all: test

deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else echo "missing Debian packages:$$missing (run as root, or install them; tests that need them will skip)"; fi; \
	fi

$(VENV)/.stamp-install: setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[train,dev,report]'
	touch $@

venv: $(VENV)/.stamp-install

test: deps venv
	$(VENV)/bin/lint-imports --no-cache --no-logo
	$(PY) -m pytest $(PYTEST_ARGS)

run: deps venv
	$(PY) -m launcher data synth-cifar10 $(DATA) --train 3000 --test 500
	$(VENV)/bin/mslaunch run --np $(NP) --master-port auto --env GLOG_v=3 \
	  -m launcher.workloads.resnet50_cifar10 --data-path $(DATA) --image-size 32 \
	  --epochs 1 --steps-per-epoch $(STEPS) --eval

bench: deps venv
	for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) mslaunch_logs data .pytest_cache
