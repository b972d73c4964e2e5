"""A unit's guide, shown in the terminal by `make unit N=...` after the setup.

The guide is README.ja.md when the learner's locale is Japanese, README.md
otherwise; NIGHTJAR_LANG=ja or NIGHTJAR_LANG=en chooses.

On a terminal the Markdown is rendered as a page with rich (headings, bold,
lists and tables, wrapped to the terminal's width, East Asian characters
counted two columns wide). Code blocks are the exception: they are printed
as they are, each line from the first column, with no border, indent or
wrapping, so a block pastes into a shell exactly as printed (a
here-document's closing word must stand alone on its line, without the list
item's indent). Piped, or where rich is missing, the guide is plain text
with the same code blocks (as_plain_text).
"""

import contextlib
import os
import re
import sys
from pathlib import Path

LANGUAGES = {"ja": "README.ja.md", "en": "README.md"}

# Japanese breaks between any two characters, not only at spaces (rich wraps at spaces): a
# "word" is one wide character with the closing marks that may not start a line, or a run
# of other non-space characters.
WIDE = "\u3000-\u30ff\u3400-\u9fff\uf900-\ufaff\uff01-\uff60"
WORD = re.compile(rf"\s*(?:[{WIDE}][、。，．）」』！？ー]*|[^\s{WIDE}]+)\s*")


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


def parts(markdown):
    """The guide in order as ("prose", indent, text) and ("code", 0, text) parts.

    Prose is cut at blank lines into paragraphs; consecutive paragraphs with
    the same indent (a list item's continuation has the item's) stay one part.
    """
    found, paragraph, fence_indent, code = [], [], None, []

    def close_paragraph():
        if paragraph:
            indent = len(paragraph[0]) - len(paragraph[0].lstrip())
            text = "\n".join(line[indent:] if line[:indent].isspace() else line.lstrip()
                             for line in paragraph)
            if found and found[-1][0] == "prose" and found[-1][1] == indent:
                found[-1] = ("prose", indent, found[-1][2] + "\n\n" + text)
            else:
                found.append(("prose", indent, text))
            paragraph.clear()

    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            if fence_indent is None:
                close_paragraph()
                fence_indent = len(line) - len(line.lstrip())
            else:
                found.append(("code", 0, "\n".join(code)))
                fence_indent, code = None, []
            continue
        if fence_indent is not None:
            code.append(line[fence_indent:] if line[:fence_indent].isspace() else line.lstrip())
        elif line.strip():
            paragraph.append(line)
        else:
            close_paragraph()
    close_paragraph()
    return found


def line_breaks(text, width, fold=True):
    """Where to break `text` into lines of at most `width` cells (rich's divide_line, for Japanese too)."""
    from rich.cells import cell_len, chop_cells

    breaks, used = [], 0
    for match in WORD.finditer(text):
        start, word = match.start(), match.group()
        if used and used + cell_len(word.rstrip()) > width:
            breaks.append(start)
            used = 0
        pieces = chop_cells(word, width) if fold and cell_len(word.rstrip()) > width else [word]
        for piece in pieces[:-1]:
            start += len(piece)
            breaks.append(start)
        used += cell_len(pieces[-1])
    return breaks


@contextlib.contextmanager
def japanese_line_breaks():
    """rich's Text.wrap breaks lines with line_breaks() while this lasts."""
    import rich.text

    original = rich.text.divide_line
    rich.text.divide_line = line_breaks
    try:
        yield
    finally:
        rich.text.divide_line = original


def as_terminal_text(markdown, width, color=True):
    """The guide as rich renders it for a terminal `width` columns wide (ANSI styles unless color=False)."""
    import io
    import re

    from rich.console import Console
    from rich.markdown import Markdown, TableDataElement
    from rich.padding import Padding
    from rich.text import Text

    class Cell(TableDataElement):
        """A table cell whose long words (a path, a URL) break across lines instead of ending in '…'."""

        def __init__(self, justify):
            super().__init__(justify)
            self.content.overflow = "fold"

    class Page(Markdown):
        elements = {**Markdown.elements, "td_open": Cell, "th_open": Cell}

    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False,
                      emoji=False, markup=False)
    with japanese_line_breaks():
        for kind, indent, text in parts(markdown):
            if kind == "code":
                console.print()
                for line in text.split("\n"):  # as it is: no wrapping, no cropping, no border
                    console.print(Text(line, style="bold"), soft_wrap=True)
                console.print()
            else:
                console.print(Padding(Page(text, hyperlinks=False), (0, 0, 0, indent)))
    # rich pads every line to the width: drop the trailing spaces (before any closing style code).
    return re.sub(r" +((?:\x1b\[[0-9;]*m)*)$", r"\1", out.getvalue(), flags=re.M)


def show(folder, lang, stream=None):
    """Print the guide of the unit or lesson in `folder`: a page on a terminal, plain text when piped."""
    stream = stream or sys.stdout
    markdown = guide_file(folder, lang).read_text(encoding="utf-8")
    if stream.isatty():
        try:
            text = as_terminal_text(markdown, os.get_terminal_size(stream.fileno()).columns)
        except (ImportError, OSError):  # no rich (a bare python3), or no size: the plain page
            text = as_plain_text(markdown)
    else:
        text = as_plain_text(markdown)
    print(text, end="", file=stream, flush=True)
