# Nightjar ticket-desk lab. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help venv test bench

help: ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[site,test]'
	touch $@

venv: $(STAMP) ## create .venv with the lab and its test tools

test: $(STAMP) ## run the whole test suite against a real RabbitMQ
	$(PY) -m pytest

bench: $(STAMP) ## measure the worker (start-up time, --drain throughput)
	$(PY) benchmarks/worker_bench.py

.PHONY: local stop
local: $(STAMP) ## run the lab here: RabbitMQ, the site on :8000, the Workstation folder
	@$(PY) scripts/local.py start

stop: ## stop what make local started
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/local.py stop
