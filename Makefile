# Nightjar ticket-desk lab. `make help` lists the targets.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.DEFAULT_GOAL := help
.PHONY: help venv test bench bench-stack docs docs-serve

help: ## this list
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-13s %s\n", $$1, $$2}'

# setuptools adds a note ("Editable installation. Please be careful with folders
# in your working directory ...") to every editable install of a package from a
# folder of another name (nightjar-site/nightjar_site): a remark, not a problem.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install -q -e '.[site,console,test,docs]'
	touch $@

venv: $(STAMP) ## create .venv with the lab, its test tools and its documentation tools

# scripts/prepare-tests installs what the tests need (as root) or says what to
# run; scripts/docker-engine starts a Docker engine for the container stack
# test when none runs (and stops it afterwards).
test: prepare-tests $(STAMP) ## run the whole test suite against a real RabbitMQ (and the container stack, with Docker)
	@$(PY) scripts/wait-for-broker 127.0.0.1:5672 5 || { echo "The tests need RabbitMQ on 127.0.0.1:5672 (guest/guest): start it with rabbitmq-server -detached."; exit 1; }
	@scripts/docker-engine $(PY) -m pytest

.PHONY: prepare-tests
prepare-tests:
	@scripts/prepare-tests

# The documentation site (docs/): warnings are errors, every cross-reference is checked
# (nitpicky), and every warning is listed before the build fails (--keep-going).
# DOCS_BUILD: where the site goes (tests/test_docs.py builds into a folder of its own).
DOCS_OPTIONS = -W --keep-going -n -q
DOCS_BUILD ?= docs/_build/html
DOCS_PORT ?= 8008

docs: $(STAMP) ## build the documentation site into docs/_build/html (warnings are errors)
	@$(PY) -m sphinx -b html $(DOCS_OPTIONS) docs $(DOCS_BUILD)
	@echo "The documentation: $(DOCS_BUILD)/index.html (make docs-serve serves it)"

docs-serve: $(STAMP) ## serve the documentation on 127.0.0.1:DOCS_PORT (8008), rebuilt on every change (sphinx-autobuild)
	$(PY) -m sphinx_autobuild --host 127.0.0.1 --port $(DOCS_PORT) $(DOCS_OPTIONS) docs $(DOCS_BUILD)

# AGAINST=REV: the commit to set beside this checkout (e.g. the last one that landed);
# STACK=1 adds the container lab's figures.
bench: $(STAMP) ## every figure people wait for, beside its budget and AGAINST's (default HEAD)
	$(PY) benchmarks/summary.py --against $(or $(AGAINST),HEAD) $(if $(STACK),--stack)

bench-stack: $(STAMP) ## measure make up (cold, warm), make grade (cold, warm) and make down in containers
	@$(NEED_DOCKER)
	$(PY) benchmarks/stack_bench.py

.PHONY: grade grade-local
grade: ## grade handler.py: in containers while `make up` runs the lab, else as grade-local
	@if $(CONTAINERS) running; then $(MAKE) --no-print-directory grade-docker; \
	else $(MAKE) --no-print-directory grade-local; fi

# GNU make exits 2 whenever a recipe fails, whatever status the recipe had; so the
# grader's own status (0 passed, 1 checks failed, 2 cannot grade) is named on a last line.
NAME_GRADER_STATUS = case $$status in 1) why="checks failed";; 2) why="cannot grade";; \
	*) why="grading stopped";; esac; echo "The grader exited with status $$status ($$why)." >&2

grade-local: $(STAMP) ## grade handler.py: private RabbitMQ node, throwaway databases, live results read-only
	@$(PY) -m grader $(GRADE_ARGS) || { status=$$?; $(NAME_GRADER_STATUS); exit $$status; }

.PHONY: units unit check-unit solve-unit
# The unit targets act on the container lab while `make up` runs it (the same
# script, inside the Workstation container, told the learner's language for
# the guide), else on the local lab with the host's .venv (made first: the
# container lab needs none on the host). Asked once, when first needed.
LAB_IN_CONTAINERS = $(eval LAB_IN_CONTAINERS := $(shell $(CONTAINERS) running && echo yes))$(LAB_IN_CONTAINERS)
LOCAL_VENV = $(if $(LAB_IN_CONTAINERS),:,$(MAKE) --no-print-directory -s $(STAMP))
GUIDE_LANGUAGE = $(foreach v,NIGHTJAR_LANG LC_ALL LC_MESSAGES LANG,$(if $($(v)),-e $(v)=$($(v))))
LABUNITS = $(if $(LAB_IN_CONTAINERS),$(COMPOSE) exec -T $(GUIDE_LANGUAGE) workstation python3 /app/scenarios/labunits.py,$(PY) scenarios/labunits.py)

units: ## the lab's units and companion lessons, each starting on its own
	@$(LOCAL_VENV)
	@$(LABUNITS) list

unit: ## set up one unit on the live lab, e.g. make unit N=2 (no N: the list)
	@$(LOCAL_VENV)
	@$(LABUNITS) $(if $(N),setup $(N),list)

check-unit: ## what a unit still lacks, e.g. make check-unit N=2
	@$(LOCAL_VENV)
	@$(LABUNITS) check $(N)

solve-unit: ## do a unit's steps for real, e.g. make solve-unit N=2
	@$(LOCAL_VENV)
	@$(LABUNITS) solve $(N)

.PHONY: local stop
local: $(STAMP) ## run the lab here: RabbitMQ, the site on :8000, the Workstation folder
	@$(PY) scripts/local.py start

stop: ## stop what make local started
	@$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/local.py stop

# --- Containers (compose.yaml). Without a Docker engine, use `make local`. ---
# The host needs Docker, make and python3 (its standard library): no .venv.
# One Compose for every call, chosen by nightjar/compose.py: COMPOSE when set,
# else v2 (`docker compose`) when it answers, else v1 (`docker-compose`).
# (Both are asked once, when first needed.)
CONTAINERS = $(PYTHON) scripts/containers.py
COMPOSE ?= $(eval COMPOSE := $(shell $(CONTAINERS) compose))$(COMPOSE)
# One line, and a failure, when no engine answers or Compose is missing or too old.
NEED_DOCKER = $(CONTAINERS) check

.PHONY: up down shell logs reset grade-docker base-images
up: ## start the lab in containers (RabbitMQ, the site, the Workstation); returns when the site answers
	@$(CONTAINERS) up

# No check first (it costs a second of the few `make down` takes): a failure is explained after,
# in NEED_DOCKER's one line when that is the reason, else with Compose's own output.
down: ## stop the lab's containers (the learner's files and the database stay)
	@out=$$($(COMPOSE) down 2>&1) && printf '%s\n' "$$out" \
	|| { $(NEED_DOCKER) && printf '%s\n' "$$out" >&2; exit 1; }

shell: ## a shell in the Workstation's ticket-desk folder (containers)
	@$(CONTAINERS) shell

logs: ## follow the containers' logs
	@$(NEED_DOCKER)
	$(COMPOSE) logs -f --tail=100

reset: ## back to the lab's start: removes the containers' volumes (asks first)
	@$(NEED_DOCKER)
	@printf 'This deletes the learner'\''s handler.py edits, every registration and ticket, and the queues. Continue? [y/N] '; \
	read answer; case "$$answer" in y|Y|yes|YES) ;; *) echo "Nothing changed."; exit 1;; esac
	$(COMPOSE) down --volumes --remove-orphans
	@echo "Back to the start: make up"

grade-docker: ## grade the Workstation's handler.py with the grader's own broker (containers)
	@$(CONTAINERS) grade || { status=$$?; $(NAME_GRADER_STATUS); exit $$status; }

.PHONY: course course-down
course: ## a demo course on this Docker engine: JupyterHub, a lab per learner, one RabbitMQ (course/)
	@$(NEED_DOCKER)
	@$(PYTHON) scripts/run_course.py up

course-down: ## stop the course and every learner's lab (their files stay)
	@$(PYTHON) scripts/run_course.py down

base-images: ## build the base images from Debian packages: Python, RabbitMQ 4.0, 3.10 and 4.3 (no registry needed; root)
	@$(NEED_DOCKER)
	@scripts/build-base-images
