"""The folders show who trusts whom: grader/ and its parts import without a circle,
nightjar/sandbox/ never imports the grader, and no Python module of the repository is over
400 lines."""

import ast
import subprocess

from labkit import ROOT

LINE_LIMIT = 400


def imported_names(path, package):
    """The absolute names of the modules `path` imports (at its top or inside a function)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from . import x, from .x import y
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)  # from . import batch
    return names


def module_name(path):
    """grader/farm/host.py -> ("grader.farm.host", "grader.farm"): its name and its package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    if parts[-1] == "__init__":
        return ".".join(parts[:-1]), ".".join(parts[:-1])
    return ".".join(parts), ".".join(parts[:-1])


def grader_graph():
    """{module: the grader modules it imports}, for every module of grader/ and its sub-packages."""
    modules = {module_name(path): path for path in (ROOT / "grader").rglob("*.py")}
    # `from grader import farm` names the package grader too: its __init__ holds only words.
    names = {name for name, _ in modules} - {"grader"}
    return {name: sorted(imported_names(path, package) & names - {name})
            for (name, package), path in modules.items()}


def room_of(module):
    """The part of the grader a module belongs to: its sub-package (grader.farm), or the module
    itself at the top (grader.cli)."""
    return ".".join(module.split(".")[:2])


def rooms_graph(graph):
    """{part: the other parts it imports}: the grader's graph with each sub-package as one node."""
    rooms = {}
    for module, imported in graph.items():
        rooms.setdefault(room_of(module), set()).update(map(room_of, imported))
    return {room: sorted(imported - {room}) for room, imported in rooms.items()}


def circle_in(graph):
    """One import circle of `graph` as a list of modules (its first module again at the end), or None."""
    done, path = set(), []

    def visit(module):
        if module in path:
            return path[path.index(module):] + [module]
        if module in done:
            return None
        path.append(module)
        for imported in graph[module]:
            found = visit(imported)
            if found:
                return found
        path.pop()
        done.add(module)
        return None

    return next(filter(None, map(visit, sorted(graph))), None)


def test_the_grader_imports_without_a_circle():
    graph = grader_graph()
    assert "grader.cli" in graph and graph["grader.cli"], graph  # the graph really was read
    circle = circle_in(graph)
    assert circle is None, "an import circle in grader/: " + " -> ".join(circle)


def test_the_grader_parts_import_without_a_circle():
    """One handler, a class run, the farm and the reports depend one way: a part that is
    imported never imports back whoever imports it."""
    rooms = rooms_graph(grader_graph())
    for part in ("grader.handler", "grader.class_run", "grader.farm", "grader.reports"):
        assert part in rooms, sorted(rooms)
    assert rooms["grader.reports"] == [], rooms  # the reports render; they grade nothing
    circle = circle_in(rooms)
    assert circle is None, "an import circle between grader's parts: " + " -> ".join(circle)


def test_the_circle_finder_finds_a_circle():
    assert circle_in({"a": ["b"], "b": ["c"], "c": ["a"]}) == ["a", "b", "c", "a"]
    assert circle_in({"a": ["b", "c"], "b": ["c"], "c": []}) is None


def test_the_sandbox_never_imports_the_grader():
    modules = sorted((ROOT / "nightjar" / "sandbox").glob("*.py"))
    assert len(modules) > 5, modules
    offending = {path.name: sorted(name for name in imported_names(path, "nightjar.sandbox")
                                   if name == "grader" or name.startswith("grader."))
                 for path in modules}
    assert not any(offending.values()), offending


def python_files():
    """The repository's Python: its .py files and its scripts that python runs (tracked or new)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        path = ROOT / name
        if not path.is_file():
            continue
        if path.suffix == ".py":
            yield path
        elif not path.suffix:
            with path.open("rb") as script:
                first = script.readline()
            if first.startswith(b"#!") and b"python" in first:
                yield path


def test_no_python_module_is_over_400_lines():
    sizes = {path.relative_to(ROOT).as_posix(): len(path.read_text().splitlines())
             for path in python_files()}
    assert "grader/cli.py" in sizes and "scenarios/unit2-ack-after-commit/check" in sizes
    assert {name: lines for name, lines in sizes.items() if lines > LINE_LIMIT} == {}
