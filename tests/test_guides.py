"""The guides as a learner uses them: every command exists and runs as written.

- ja and en guides carry the same commands, in the same order;
- every command in a code block, and every `python3 ...`/`make ...` in the
  text, names a real program and parses (argparse, make -n);
- on a terminal the guide is a page (rich) that fits the terminal's width,
  in both languages, with every code block printed as it is; piped, plain;
- each unit's code blocks, copied from the printed page (English and
  Japanese) and run in order in a lab of its own (a real worker, a real
  Ctrl+C at each pause), bring the unit from its setup to done, and print
  what the guide shows they print;
- the lesson code, typed at a real `python3 -i` prompt as the guide shows,
  prints exactly the transcript.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from rich.cells import cell_len

from labkit import on_a_terminal
from unitkit import FOLDERS, history_times, unit_env  # noqa: F401  (unit_env: a lab of the test's own)
from nightjar.config import Settings
from nightjar.harness import processes

ROOT = Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "scenarios"
sys.path.insert(0, str(SCENARIOS))
from units.table import UNITS  # noqa: E402  (scenarios/units/table.py: the lab's units)
import guidetext  # noqa: E402
import lessonkit  # noqa: E402

LESSONS = ("cl-13-2-queue-redelivery", "cl-13-3-delivery-resume")
GUIDES = [SCENARIOS / folder / name for folder in (*FOLDERS.values(), *LESSONS)
          for name in ("README.md", "README.ja.md")]
FENCE = re.compile(r"^( *)```(\w*)\n(.*?)^\1```$", re.S | re.M)
INLINE = re.compile(r"`((?:python3|make) [^`]+)`")


def blocks(guide, after=None, before=None):
    """(language, code) of each fenced block, the code without its indent; from `after` on, up to `before`."""
    text = guide.read_text(encoding="utf-8")
    if after:
        text = text[text.index(after):]
    if before:
        text = text[:text.index(before)]
    found = []
    for indent, language, body in FENCE.findall(text):
        code = "".join(line[len(indent):] if line.strip() else "\n"
                       for line in body.splitlines(keepends=True))
        found.append((language, code))
    return found


def commands(code):
    """The shell commands of a block: one a line, a here-document counted as its first line."""
    lines, found = code.splitlines(), []
    while lines:
        line = lines.pop(0)
        found.append(line)
        heredoc = re.search(r"<<'(\w+)'$", line)
        if heredoc:
            lines = lines[lines.index(heredoc.group(1)) + 1:]
    return found


@pytest.mark.parametrize("folder", [*FOLDERS.values(), *LESSONS])
def test_ja_and_en_guides_carry_the_same_commands(folder):
    en, ja = (blocks(SCENARIOS / folder / name) for name in ("README.md", "README.ja.md"))
    assert en == ja
    inline = [sorted(set(INLINE.findall((SCENARIOS / folder / name).read_text(encoding="utf-8"))))
              for name in ("README.md", "README.ja.md")]
    assert inline[0] == inline[1]


def make_local_workstation():
    """make local's Workstation folder, relative to the repository (scripts/local.py's default)."""
    env = {k: v for k, v in os.environ.items() if k != "NIGHTJAR_WORKSTATION"}
    result = subprocess.run([sys.executable, "-c", "import runpy;"
                             " print(runpy.run_path('scripts/local.py')['WORKSTATION'])"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=30, check=True)
    return str(Path(result.stdout.strip()).relative_to(ROOT))


def parses(command):
    """'' when the command exists and parses as written, else what is wrong."""
    words = shlex.split(command)
    if words in (["pwd"], ["echo", "$?"], ["python3"], ["cat", "handler.py"]):
        return ""
    if words[:2] == ["cat", ">"] and words[2:] == ["handler.py", "<<PYTHON"]:
        return ""  # the pasted text is test_scenarios' test_the_guides_paste_exactly_the_solution_handler
    if words[0] == "cd":
        if words[1] == make_local_workstation():  # make local creates it
            return ""
        return "" if (ROOT / words[1]).is_dir() else f"no folder {words[1]}"
    if words[0] == "source":  # typed in make local's Workstation folder
        activate = (ROOT / make_local_workstation() / words[1]).resolve()
        return "" if activate == (ROOT / ".venv" / "bin" / "activate") and activate.is_file() else (
            f"{words[1]} is not the lab's virtual environment")
    if words[0] == "make":
        result = subprocess.run(["make", "-n", *words[1:]], cwd=ROOT, capture_output=True, text=True,
                                timeout=30)
        return "" if result.returncode == 0 else result.stderr.strip()
    if words[0] == "python3" and words[1] in ("worker.py", "desk.py"):
        env = processes.program_env(Settings.from_env())
        result = subprocess.run([sys.executable, words[1], *words[2:], "--help"], cwd=ROOT / "ticket-desk",
                                env=env, capture_output=True, text=True, timeout=30)
        return "" if result.returncode == 0 else result.stderr.strip()
    return f"unknown command {command!r}"


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_command_in_the_guide_exists_and_parses(guide):
    shell = [c for language, code in blocks(guide) if language == "sh" for c in commands(code)]
    inline = INLINE.findall(guide.read_text(encoding="utf-8"))
    assert shell, "a guide with no command"
    problems = {command: parses(command) for command in dict.fromkeys(shell + inline)}
    assert {c: p for c, p in problems.items() if p} == {}


def guests_to_register(unit):
    """The guests the unit's guide registers in Nightjar (the text says so; the unit knows them)."""
    u = UNITS[unit]
    return u.goal_guests[len(u.start_guests):]


ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Where each guide's walk starts, and where its steps start.
MARKERS = {"README.md": ("**Start:**", "## Steps"), "README.ja.md": ("**開始状態:**", "## 手順")}


def printed(guide, width=80):
    """The guide as `make unit` prints it on a terminal `width` columns wide, as the learner copies it."""
    return ANSI.sub("", guidetext.as_terminal_text(guide.read_text(encoding="utf-8"), width))


def as_printed(page, code):
    """The code block as the printed page has it: its lines, whole, from the first column."""
    lines = page.split("\n")
    wanted = code.rstrip("\n").split("\n")
    for n in range(len(lines) - len(wanted) + 1):
        if lines[n:n + len(wanted)] == wanted and (n == 0 or lines[n - 1] == ""):
            return "\n".join(lines[n:n + len(wanted)]) + "\n"
    raise AssertionError(f"not printed as it is:\n{code}")


@pytest.mark.parametrize("guide", GUIDES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_guide_on_a_terminal_fits_its_width_and_prints_each_code_block_as_it_is(guide):
    for width in (60, 100):
        page = printed(guide, width)
        code_lines = {line for _, code in blocks(guide) for line in code.split("\n")}
        assert max(cell_len(line) for line in page.split("\n") if line not in code_lines) <= width
        for _, code in blocks(guide):
            as_printed(page, code)
        assert "```" not in page and "**" not in page


def test_show_prints_a_page_on_a_terminal_and_plain_text_when_piped(tmp_path):
    folder = SCENARIOS / FOLDERS[2]
    markdown = (folder / "README.md").read_text(encoding="utf-8")
    def show(fd):
        with open(fd, "w", encoding="utf-8", closefd=False) as terminal:
            guidetext.show(folder, "en", stream=terminal)

    shown = on_a_terminal(show, columns=72)
    assert shown == guidetext.as_terminal_text(markdown, 72)
    piped = tmp_path / "piped.txt"
    with open(piped, "w", encoding="utf-8") as plain:
        guidetext.show(folder, "en", stream=plain)
    assert piped.read_text(encoding="utf-8") == guidetext.as_plain_text(markdown)


@pytest.mark.parametrize("name", ["README.md", "README.ja.md"])
@pytest.mark.parametrize("unit", [1, 2, 3])
def test_the_guides_printed_blocks_pasted_into_a_shell_take_the_unit_to_done(unit, name, unit_env):
    assert unit_env.script(unit, "setup")[0] == 0
    guide = SCENARIOS / FOLDERS[unit] / name
    page = printed(guide)
    folder = unit_env.workstation
    # `python3` in the guide is the lab's Python, as after `source .venv/bin/activate`.
    env = dict(unit_env.env, PATH=os.pathsep.join((str(Path(sys.executable).parent),
                                                    os.environ["PATH"])))
    # What comes before the steps (unit 3's first look at the second window), then the
    # steps, whose guests the learner registers in Nightjar.
    start, steps = MARKERS[name]
    walk = [*blocks(guide, after=start, before=steps), ("register", ""), *blocks(guide, after=steps)]
    last_status, output = None, ""
    for language, code in walk:
        code = as_printed(page, code) if code else code
        if language == "register":
            for name in guests_to_register(unit):
                unit_env.register(name)
            continue
        if language == "text":  # what the guide says the block before it prints
            assert history_times(output).endswith(history_times(code)), (code, output)
            continue
        assert language == "sh"
        words = shlex.split(code) if "\n" not in code.strip() else []
        if "--pause" in words:
            point = words[words.index("--pause") + 1]
            worker = processes.start(folder, env, *words[1:])
            worker.wait_for(f"Paused {point}.", timeout=30)
            last_status = worker.interrupt()  # Ctrl+C
            continue
        if words == ["echo", "$?"]:
            assert last_status == 130
            continue
        result = subprocess.run(["bash", "-c", code], cwd=folder, env=env, capture_output=True,
                                text=True, timeout=60)
        assert result.returncode == 0, f"{code}\n{result.stdout}{result.stderr}"
        last_status, output = result.returncode, result.stdout
    assert unit_env.script(unit, "check")[0] == 0


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_lesson_typed_at_the_python_prompt_prints_the_transcript(lesson):
    folder = SCENARIOS / lesson
    typed = [code for language, code in blocks(folder / "README.md", after="## Steps")]
    steps = lessonkit.parse_transcript(str(folder / "transcript.txt"))
    # One block a step, the transcript's code as a learner types it.
    assert [code.rstrip("\n") for code in typed] == [lessonkit.to_python(s.code) for s in steps]
    result = subprocess.run([sys.executable, "-i"], input="".join(typed), cwd=folder,
                            capture_output=True, text=True, timeout=60)
    assert result.stdout.splitlines() == [line for s in steps for line in s.expected]
    assert "Error" not in result.stderr, result.stderr


@pytest.mark.parametrize("environ, lang", [
    ({}, "en"),
    ({"LANG": "ja_JP.UTF-8"}, "ja"),
    ({"LANG": "ja_JP.UTF-8", "LC_ALL": "C.UTF-8"}, "en"),     # LC_ALL wins, as in gettext
    ({"LANG": "en_GB.UTF-8", "LC_MESSAGES": "ja_JP"}, "ja"),
    ({"LANG": "ja_JP.UTF-8", "NIGHTJAR_LANG": "en"}, "en"),   # the setting wins
    ({"NIGHTJAR_LANG": " JA "}, "ja"),
])
def test_the_guide_language_follows_the_locale_unless_chosen(environ, lang):
    import guidetext
    assert guidetext.language(environ) == lang
