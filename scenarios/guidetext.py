"""A unit's guide, shown in the terminal by `make unit N=...` after the setup.

The guide is README.ja.md when the learner's locale is Japanese, README.md
otherwise; NIGHTJAR_LANG=ja or NIGHTJAR_LANG=en chooses. In the terminal the
Markdown is shown as plain text: code fences and bold marks are left out, and
each code block starts at the line's first column, so a block pastes into a
shell exactly as printed (a here-document's closing word must stand alone on
its line, without the list item's indent).
"""

import os
from pathlib import Path

LANGUAGES = {"ja": "README.ja.md", "en": "README.md"}


class BadLanguage(ValueError):
    """NIGHTJAR_LANG holds something other than ja or en."""


def language(environ=None):
    """'ja' or 'en': NIGHTJAR_LANG, else the locale (LC_ALL, LC_MESSAGES, LANG, as gettext reads them)."""
    env = os.environ if environ is None else environ
    chosen = env.get("NIGHTJAR_LANG", "").strip().lower()
    if chosen:
        if chosen not in LANGUAGES:
            raise BadLanguage(f"NIGHTJAR_LANG must be ja or en, not {chosen!r}.")
        return chosen
    for name in ("LC_ALL", "LC_MESSAGES", "LANG"):
        if env.get(name):
            return "ja" if env[name].lower().startswith("ja") else "en"
    return "en"


def guide_file(folder, lang):
    return Path(folder) / LANGUAGES[lang]


def as_plain_text(markdown):
    """The guide for a terminal: no ``` fence lines, no ** marks, code blocks at the first column."""
    lines, fence_indent = [], None
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fence_indent = None if fence_indent is not None else len(line) - len(line.lstrip())
            continue
        if fence_indent is not None:
            lines.append(line[fence_indent:] if line[:fence_indent].isspace() else line.lstrip())
        else:
            lines.append(line.replace("**", ""))
    return "\n".join(lines).rstrip("\n") + "\n"


def show(folder, lang):
    """Print the guide of the unit or lesson in `folder`."""
    print(as_plain_text(guide_file(folder, lang).read_text(encoding="utf-8")), end="", flush=True)
