"""The folders show who trusts whom: grader/ imports without a circle, nightjar/sandbox/ never
imports the grader, and no Python module of the repository is over 400 lines."""

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


def grader_graph():
    """{module: the grader modules it imports}, for every module of grader/."""
    modules = {f"grader.{path.stem}": path for path in (ROOT / "grader").glob("*.py")}
    return {name: sorted(imported_names(path, "grader") & modules.keys() - {name})
            for name, path in modules.items()}


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
