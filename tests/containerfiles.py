"""Reading the container files and the repository facts they are checked against.

compose.yaml as Compose reads it (its short and long forms normalised),
Dockerfiles and .dockerignore as Docker reads them, and what the repository
says: the Makefile, pyproject.toml, the NIGHTJAR_* names the code reads and
the files git tracks. tests/containerkit.py checks the one against the other.
"""

import ast
import functools
import os
import re
import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

YAML = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema (pip install '.[test]')").YAML

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose.yaml"
# Where the code that reads NIGHTJAR_* variables lives (tests set them, they do not read them).
CODE_DIRS = ["nightjar", "nightjar-site", "lab-console", "grader", "ticket-desk", "scripts", "scenarios", "course"]


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
    """The modules `make local` starts with `python -m` (read from its scripts: a list holding
    "-m", MODULE, or a local_programs.Program("key", MODULE, ...))."""
    recipe = makefile_recipe("local")
    modules = set()
    for script in re.findall(r"(scripts/[\w.-]+)", recipe or ""):
        parts = [ROOT / script, *sorted((ROOT / script).parent.glob("local_*.py"))]
        for part in parts:
            tree = ast.parse(part.read_text())
            for node in ast.walk(tree):
                if isinstance(node, ast.List):
                    items = [item.value if isinstance(item, ast.Constant) else None for item in node.elts]
                    for flag, module in zip(items, items[1:]):
                        if flag == "-m" and isinstance(module, str):
                            modules.add(module)
                elif (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Program"
                      and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                    modules.add(node.args[1].value)
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
        """True when `python3 -m module` finds it through the image's PYTHONPATH: a package's
        __main__.py, or for a.b the file a/b.py."""
        path = module.replace(".", "/")
        return any(self.provides(f"{entry}/{path}/__main__.py")
                   or ("." in module and self.provides(f"{entry}/{path}.py"))
                   for entry in self.python_path())


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
