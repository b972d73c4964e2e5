"""The documentation site (docs/, make docs): it builds with no warning, every link and anchor
inside it answers, and its references are complete.

- `make docs` into a folder of the test's own: warnings are errors, every cross-reference is
  checked (nitpicky, MyST's missing references), each program's --help runs;
- every page it built: each href and src inside the site names a file that exists, and each
  #anchor an id on that page (linkcheck needs the network; this does not);
- every make target of the Makefile is on the make reference's page, and every NIGHTJAR_*
  variable the code reads is on the environment's page, which names no other;
- the architecture's picture is what docs/images/architecture.py draws;
- every link of the README into the repository answers, and every `make` command it shows is
  a target.
"""

import functools
import re
import runpy
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from containerfiles import code_env_names  # the NIGHTJAR_* names the code mentions

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
MAKE_PAGE = DOCS / "reference" / "make.md"
ENV_PAGE = DOCS / "reference" / "environment.md"
# Settings read by Compose files and the Makefile rather than by Python code.
SETTING_FILES = ["compose.yaml", "course/compose.yaml", ".env.example", "Makefile", ".ci/run"]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """The site as make docs builds it, in a folder of this test's own."""
    out = tmp_path_factory.mktemp("docs") / "html"
    built = subprocess.run(["make", "-s", "docs", f"DOCS_BUILD={out}"], cwd=ROOT, capture_output=True,
                           text=True, timeout=600)
    return out, built


def test_the_documentation_builds_without_a_warning(site):
    out, built = site
    assert built.returncode == 0 and built.stderr == "", built.stdout[-3000:] + built.stderr[-6000:]
    assert (out / "index.html").is_file()


class Page(HTMLParser):
    """A built page's ids, and the links and sources it names."""

    def __init__(self):
        super().__init__()
        self.ids, self.links = set(), []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) is not None:
                self.links.append(attrs[key])


@functools.cache
def read_page(path):
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    return page


def test_every_internal_link_and_anchor_answers(site):
    out, built = site
    assert built.returncode == 0, built.stderr[-3000:]
    broken = {}
    # The site's pages (the theme's _static/ holds templates of its own, not pages).
    pages = sorted(path for path in out.rglob("*.html") if "_static" not in path.relative_to(out).parts)
    assert len(pages) > 30, pages
    for path in pages:
        for link in read_page(path).links:
            parts = urlsplit(link)
            if parts.scheme or parts.netloc:
                continue  # out of the site (nothing is fetched at build time)
            target = (path.parent / unquote(parts.path)).resolve() if parts.path else path
            if target.is_dir():
                target = target / "index.html"
            where = f"{path.relative_to(out)}: {link}"
            if not target.is_file() or not target.is_relative_to(out):
                broken[where] = "no such file in the site"
            elif parts.fragment and target.suffix == ".html" and parts.fragment not in read_page(target).ids:
                broken[where] = f"no id {parts.fragment!r} on {target.relative_to(out)}"
    assert broken == {}


def makefile_targets():
    text = (ROOT / "Makefile").read_text()
    return sorted(set(re.findall(r"^([a-z][a-z-]*):", text, re.M)))


def test_every_make_target_is_on_the_reference_page():
    page = MAKE_PAGE.read_text(encoding="utf-8")
    targets = makefile_targets()
    assert "up" in targets and "docs" in targets
    assert [target for target in targets if f"`make {target}`" not in page] == []


def variables_read():
    """Every NIGHTJAR_* variable a program reads: the code's, and the settings of the Compose
    files, .env.example, the Makefile and CI."""
    names = set(code_env_names())
    for rel in SETTING_FILES:
        names.update(re.findall(r"\b(NIGHTJAR_[A-Z0-9_]*[A-Z0-9])\b", (ROOT / rel).read_text()))
    return names


def test_every_nightjar_variable_is_on_the_reference_page_and_no_other():
    documented = set(re.findall(r"`(NIGHTJAR_[A-Z0-9_]+)`", ENV_PAGE.read_text(encoding="utf-8")))
    read = variables_read()
    assert "NIGHTJAR_AMQP_URL" in read and "NIGHTJAR_FARM_PORT" in read
    assert sorted(read - documented) == [], "read by the code, missing from the page"
    assert sorted(documented - read) == [], "on the page, read by no code"


def test_the_architecture_picture_is_what_its_script_draws():
    script = DOCS / "images" / "architecture.py"
    drawn = runpy.run_path(str(script))["drawn"]()
    assert (DOCS / "images" / "architecture.svg").read_text(encoding="utf-8") == drawn, (
        "run python3 docs/images/architecture.py and commit the SVG")


def test_the_readmes_links_and_make_commands_answer():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = [link for link in re.findall(r"\]\(([^)\s]+)\)", readme) if not urlsplit(link).scheme]
    assert [link for link in links if not (ROOT / unquote(urlsplit(link).path)).exists()] == []
    targets = set(makefile_targets())
    commands = re.findall(r"^\s*make ([a-z][a-z-]*)", readme, re.M) + re.findall(r"`make ([a-z][a-z-]*)", readme)
    assert commands and sorted(set(commands) - targets) == []
