# Nightjar ticket-desk lab. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help venv test bench bench-stack

help: ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[site,test]'
	touch $@

venv: $(STAMP) ## create .venv with the lab and its test tools

# scripts/prepare-tests installs what the tests need (as root) or says what to
# run; scripts/docker-engine starts a Docker engine for the container stack
# test when none runs (and stops it afterwards).
test: prepare-tests $(STAMP) ## run the whole test suite against a real RabbitMQ (and the container stack, with Docker)
	@$(PY) scripts/wait-for-broker 127.0.0.1:5672 5 || { echo "The tests need RabbitMQ on 127.0.0.1:5672 (guest/guest): start it with rabbitmq-server -detached."; exit 1; }
	@scripts/docker-engine $(PY) -m pytest

.PHONY: prepare-tests
prepare-tests:
	@scripts/prepare-tests

bench: $(STAMP) ## measure the worker, the site and the grader (benchmarks/)
	$(PY) benchmarks/worker_bench.py
	$(PY) benchmarks/grader_bench.py
	$(PY) benchmarks/site_bench.py

bench-stack: $(STAMP) ## measure make up (cold, warm), make grade and make down in containers
	@$(NEED_DOCKER)
	$(PY) benchmarks/stack_bench.py

.PHONY: grade grade-local
grade: ## grade handler.py: in containers while `make up` runs the lab, else as grade-local
	@if $(DOCKER_LAB_RUNS); then $(MAKE) --no-print-directory grade-docker; \
	else $(MAKE) --no-print-directory grade-local; fi

# GNU make exits 2 whenever a recipe fails, whatever status the recipe had; so the
# grader's own status (0 passed, 1 checks failed, 2 cannot grade) is named on a last line.
NAME_GRADER_STATUS = case $$status in 1) why="checks failed";; 2) why="cannot grade";; \
	*) why="grading stopped";; esac; echo "The grader exited with status $$status ($$why)." >&2

grade-local: $(STAMP) ## grade handler.py: private RabbitMQ node, throwaway databases, live results read-only
	@$(PY) -m grader $(GRADE_ARGS) || { status=$$?; $(NAME_GRADER_STATUS); exit $$status; }

.PHONY: units unit check-unit solve-unit
units: $(STAMP) ## the lab's units and companion lessons, each starting on its own
	@$(PY) scenarios/labunits.py list

# The unit targets act on the container lab while `make up` runs it (the same
# script, inside the Workstation container, told the learner's language for
# the guide), else on the local lab.
GUIDE_LANGUAGE = $(foreach v,NIGHTJAR_LANG LC_ALL LC_MESSAGES LANG,$(if $($(v)),-e $(v)=$($(v))))
LABUNITS = $(if $(shell $(DOCKER_LAB_RUNS) && echo yes),$(COMPOSE) exec -T $(GUIDE_LANGUAGE) workstation python3 /app/scenarios/labunits.py,$(PY) scenarios/labunits.py)

unit: $(STAMP) ## set up one unit on the live lab, e.g. make unit N=2 (no N: the list)
	@$(LABUNITS) $(if $(N),setup $(N),list)

check-unit: $(STAMP) ## what a unit still lacks, e.g. make check-unit N=2
	@$(LABUNITS) check $(N)

solve-unit: $(STAMP) ## do a unit's steps for real, e.g. make solve-unit N=2
	@$(LABUNITS) solve $(N)

.PHONY: local stop
local: $(STAMP) ## run the lab here: RabbitMQ, the site on :8000, the Workstation folder
	@$(PY) scripts/local.py start

stop: ## stop what make local started
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/local.py stop

# --- Containers (compose.yaml). Without a Docker engine, use `make local`. ---
# Docker Compose v2 (`docker compose`) when present, else v1 (`docker-compose`).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo 'docker compose' || echo docker-compose)
NEED_DOCKER = docker info >/dev/null 2>&1 || { echo "No Docker engine answers ('docker info' failed): run the lab without containers with 'make local'." >&2; exit 1; }
# True when a Docker engine answers and `make up` has the Workstation running.
DOCKER_LAB_RUNS = docker info >/dev/null 2>&1 && $(COMPOSE) ps --services --filter status=running 2>/dev/null | grep -qx workstation

.PHONY: up down shell logs reset grade-docker base-images
up: ## start the lab in containers (RabbitMQ, the site, the Workstation); returns when the site answers
	@$(NEED_DOCKER)
	@$(PYTHON) scripts/containers.py up $(COMPOSE)

down: ## stop the lab's containers (the learner's files and the database stay)
	@$(NEED_DOCKER)
	$(COMPOSE) --profile grader down

shell: ## a shell in the Workstation's ticket-desk folder (containers)
	@$(NEED_DOCKER)
	$(COMPOSE) up -d workstation
	$(COMPOSE) exec workstation bash

logs: ## follow the containers' logs
	@$(NEED_DOCKER)
	$(COMPOSE) logs -f --tail=100

reset: ## back to the lab's start: removes the containers' volumes (asks first)
	@$(NEED_DOCKER)
	@printf 'This deletes the learner'\''s handler.py edits, every registration and ticket, and the queues. Continue? [y/N] '; \
	read answer; case "$$answer" in y|Y|yes|YES) ;; *) echo "Nothing changed."; exit 1;; esac
	$(COMPOSE) --profile grader down --volumes --remove-orphans
	@echo "Back to the start: make up"

grade-docker: ## grade the Workstation's handler.py with the grader's own broker (containers)
	@$(NEED_DOCKER)
	$(COMPOSE) --profile grader build grader
	@status=0; $(COMPOSE) --profile grader run --rm grader || status=$$?; \
	$(COMPOSE) --profile grader rm --stop --force grader-broker >/dev/null 2>&1; \
	[ $$status = 0 ] || { $(NAME_GRADER_STATUS); }; exit $$status

base-images: ## build both base images from Debian packages (no image registry needed; root)
	@$(NEED_DOCKER)
	@scripts/build-base-images
