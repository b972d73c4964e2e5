"""The lab's units and companion lessons, and their guides as HTML: the same README files
that `make unit` shows in a terminal (scenarios/*/README.md and README.ja.md)."""

import os
import sys
from pathlib import Path

from markdown_it import MarkdownIt

SCENARIOS = Path(os.environ.get("NIGHTJAR_SCENARIOS") or Path(__file__).resolve().parents[2] / "scenarios")
sys.path.insert(0, str(SCENARIOS))
from units.table import LESSONS, UNITS, heading  # noqa: E402  (scenarios/units: standard library only)
from guidetext import LANGUAGES  # noqa: E402  (README.md, README.ja.md)

# Raw HTML in a guide is shown as text, never passed through.
MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable("table")
HEADING_SHIFT = 2


class UnknownUnit(LookupError):
    pass


def catalogue():
    """{key: folder} for every unit and lesson, in the table's order: '1', '2', '3', 'cl-13-2', ..."""
    found = {str(unit.number): unit.path for unit in UNITS.values()}
    found.update({key: SCENARIOS / folder for key, folder in LESSONS.items()})
    return found


def folder_of(key):
    folder = catalogue().get(str(key))
    if folder is None:
        raise UnknownUnit(f"no lab unit {key!r}: the units are {', '.join(catalogue())}")
    return folder


def listing():
    """[{"key", "titles": {"en", "ja"}, "lesson"}] for the unit picker."""
    return [{"key": key, "lesson": not key.isdigit(),
             "titles": {lang: heading(folder / name) for lang, name in LANGUAGES.items()}}
            for key, folder in catalogue().items()]


def guide_html(key, lang):
    """A unit's guide in `lang` ('en' or 'ja') as HTML."""
    if lang not in LANGUAGES:
        raise UnknownUnit(f"no guide in {lang!r}: ja or en")
    text = (folder_of(key) / LANGUAGES[lang]).read_text(encoding="utf-8")
    tokens = MARKDOWN.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            # The page's own h1 and its "Guide" h2 come first: the guide's # is an h3.
            token.tag = f"h{min(int(token.tag[1]) + HEADING_SHIFT, 6)}"
    return MARKDOWN.renderer.render(tokens, MARKDOWN.options, {})
