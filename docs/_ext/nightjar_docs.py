"""The site's own Sphinx extension: the code's paths named in one place, and the programs'
own --help, run as the pages are built.

    {src}`grader.cli`                 a file or folder of the code, by its key in
                                      docs/code-paths.toml, the one place that names paths:
                                      a module that moves is changed there alone. An unknown
                                      key, or a path that no longer exists, is a warning
                                      (an error under make docs).
    ```{code-paths}```                the table of every key: its path and what it holds.
    ```{program-help} python3 -m grader
    :cwd: ticket-desk
    ```                               the program's --help as it prints it now (python3 is
                                      this interpreter, run in the repository or in :cwd:),
                                      so the reference of every option follows the code.
"""

import os
import subprocess
import sys
import shlex
import tomllib
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective, SphinxRole

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent
CODE_PATHS = DOCS / "code-paths.toml"
HELP_COLUMNS = "80"
HELP_SECONDS = 60
log = logging.getLogger(__name__)


def code_paths():
    """{key: (path, what)} in the file's order, keys as "area.name"."""
    table = tomllib.loads(CODE_PATHS.read_text(encoding="utf-8"))
    return {f"{area}.{name}": (entry["path"], entry["what"])
            for area, entries in table.items() for name, entry in entries.items()}


class Source(SphinxRole):
    """{src}`key`: the path of a file or folder of the code, as literal text."""

    def run(self):
        known = self.env.app.nightjar_code_paths
        key = self.text.strip()
        if key not in known:
            log.warning(f"no code path {key!r} in docs/code-paths.toml", location=self.get_location())
            return [nodes.literal(self.rawtext, key)], []
        path = known[key][0]
        return [nodes.literal(self.rawtext, path, classes=["code-path"])], []


class CodePaths(SphinxDirective):
    """The table of docs/code-paths.toml: every key's path and what it holds."""

    def run(self):
        self.env.note_dependency(str(CODE_PATHS))
        table = nodes.table(classes=["code-paths"])
        group = nodes.tgroup(cols=2)
        table += group
        for width in (35, 65):
            group += nodes.colspec(colwidth=width)
        head = nodes.thead()
        group += head
        head += self.row([nodes.Text("Path"), nodes.Text("What it holds")])
        body = nodes.tbody()
        group += body
        for path, what in self.env.app.nightjar_code_paths.values():
            body += self.row([nodes.literal(path, path), nodes.Text(what)])
        return [table]

    @staticmethod
    def row(cells):
        row = nodes.row()
        for cell in cells:
            entry = nodes.entry()
            entry += nodes.paragraph("", "", cell)
            row += entry
        return row


class ProgramHelp(SphinxDirective):
    """The program's own --help, as a literal block."""

    required_arguments = 1
    final_argument_whitespace = True
    option_spec = {"cwd": directives.unchanged}

    def run(self):
        self.env.nightjar_program_docs.add(self.env.docname)
        command = self.arguments[0]
        argv = [sys.executable if word == "python3" else word for word in shlex.split(command)]
        folder = ROOT / self.options.get("cwd", ".")
        # The help must not depend on the builder's own settings: no NIGHTJAR_* variable,
        # a fixed width.
        env = {name: value for name, value in os.environ.items() if not name.startswith("NIGHTJAR_")}
        env.update(COLUMNS=HELP_COLUMNS, PYTHONDONTWRITEBYTECODE="1", NO_COLOR="1")
        try:
            done = subprocess.run([*argv, "--help"], cwd=folder, env=env, capture_output=True,
                                  text=True, timeout=HELP_SECONDS)
        except (OSError, subprocess.TimeoutExpired) as error:
            log.warning(f"{command} --help did not run: {error}", location=self.get_location())
            return []
        if done.returncode != 0 or not done.stdout.strip():
            log.warning(f"{command} --help exited {done.returncode}: {done.stderr.strip()[-500:]}",
                        location=self.get_location())
            return []
        block = nodes.literal_block(done.stdout, done.stdout.rstrip() + "\n", classes=["program-help"])
        block["language"] = "text"
        return [block]


def purge(app, env, docname):
    env.nightjar_program_docs.discard(docname)


def merge(app, env, docnames, other):
    env.nightjar_program_docs |= other.nightjar_program_docs & set(docnames)


def outdated(app, env, added, changed, removed):
    """A page showing a program's --help is read again at every build: the code may have changed."""
    return sorted(getattr(env, "nightjar_program_docs", set()) - set(removed))


def check_paths(app):
    """Every path docs/code-paths.toml names exists (a move left behind is a warning)."""
    app.nightjar_code_paths = code_paths()
    if not hasattr(app.env, "nightjar_program_docs"):
        app.env.nightjar_program_docs = set()
    for key, (path, _) in app.nightjar_code_paths.items():
        if not (ROOT / path).exists():
            log.warning(f"docs/code-paths.toml: {key} names {path}, which does not exist",
                        location=str(CODE_PATHS))


def setup(app):
    app.add_role("src", Source())
    app.add_directive("code-paths", CodePaths)
    app.add_directive("program-help", ProgramHelp)
    app.connect("builder-inited", check_paths)
    app.connect("env-purge-doc", purge)
    app.connect("env-merge-info", merge)
    app.connect("env-get-outdated", outdated)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
