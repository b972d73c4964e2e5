"""Shared helpers for the companion lessons' setup, check and solve scripts.

Each lesson folder holds a transcript.txt, copied verbatim from the lesson's
"操作履歴" (operation history) section.  Its format is:

    1                          <- step number (1, 2, 3, ... in order)
    code typed in that step    <- ONE line; statements separated by spaces
    printed line               <- zero or more lines the step printed
    ...
    2
    ...

The code line is turned back into Python like this:
  * it is cut at spaces that are outside quotes and brackets;
  * the pieces are joined again into the longest runs that are valid Python,
    so `first = queue.receive() queue.apply(first)` becomes two statements;
  * a compound statement (`for ...:`, `if ...:`, ...) takes every statement
    after its colon, up to the end of the line, as its indented body.

All steps of a lesson run in ONE shared namespace (like one REPL session),
with the lesson folder on sys.path, and everything each step prints is
captured and compared with the transcript.
"""

import contextlib
import io
import os
import sys
from dataclasses import dataclass

TRANSCRIPT = "transcript.txt"
COMPOUND_KEYWORDS = ("for", "while", "if", "with")


@dataclass
class Step:
    number: int
    code: str        # the code line exactly as in the transcript
    expected: list   # the printed lines exactly as in the transcript


def parse_transcript(path):
    """Read transcript.txt into a list of Step objects."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    while lines and not lines[-1].strip():   # ignore blank lines at the end
        lines.pop()
    steps = []
    i = 0
    while i < len(lines):
        number = len(steps) + 1
        if lines[i] != str(number):
            raise ValueError(f"{path}:{i + 1}: expected step number {number}, found {lines[i]!r}")
        if i + 1 >= len(lines):
            raise ValueError(f"{path}: step {number} has no code line")
        code = lines[i + 1]
        i += 2
        expected = []
        while i < len(lines) and lines[i] != str(number + 1):
            expected.append(lines[i])
            i += 1
        steps.append(Step(number, code, expected))
    if not steps:
        raise ValueError(f"{path}: no steps found")
    return steps


def _pieces(code):
    """Cut a code line at spaces that are outside quotes and brackets."""
    pieces, current, depth, quote, escaped = [], "", 0, None, False
    for ch in code:
        if quote:                      # inside a string literal
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in "\"'":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == " " and depth == 0:
            if current:
                pieces.append(current)
            current = ""
            continue
        current += ch
    if current:
        pieces.append(current)
    return pieces


def _is_python(source):
    try:
        compile(source, "<step>", "exec")
        return True
    except SyntaxError:
        return False


def _statements(pieces):
    """Group pieces into statements (a list of source strings, may be multi-line)."""
    statements = []
    i = 0
    while i < len(pieces):
        if pieces[i] in COMPOUND_KEYWORDS:
            # header runs up to the first piece ending in ":"; the rest is the body
            end = next((k for k in range(i, len(pieces)) if pieces[k].endswith(":")), None)
            if end is None:
                raise SyntaxError(f"no ':' after {pieces[i]!r} in {' '.join(pieces[i:])!r}")
            header = " ".join(pieces[i:end + 1])
            body = _statements(pieces[end + 1:]) or ["pass"]
            indented = "\n".join("    " + line for s in body for line in s.splitlines())
            statements.append(header + "\n" + indented)
            break
        # take the longest run of pieces that is valid Python on its own
        for j in range(len(pieces), i, -1):
            candidate = " ".join(pieces[i:j])
            if _is_python(candidate):
                break
        else:
            raise SyntaxError(f"cannot read a statement from {' '.join(pieces[i:])!r}")
        statements.append(candidate)
        i = j
    return statements


def to_python(code):
    """Turn one transcript code line into Python source, one statement per line."""
    return "\n".join(_statements(_pieces(code)))


def replay(lesson_dir, steps):
    """Run every step in one shared namespace; return the printed lines of each step."""
    lesson_dir = os.path.abspath(lesson_dir)
    # Forget lesson modules imported earlier, so every replay starts from scratch.
    for name in os.listdir(lesson_dir):
        if name.endswith(".py"):
            sys.modules.pop(name[:-3], None)
    sys.path.insert(0, lesson_dir)
    namespace = {"__name__": "__lesson__"}
    outputs = []
    try:
        for step in steps:
            buffer = io.StringIO()
            with contextlib.redirect_stdout(buffer):
                try:
                    source = to_python(step.code)
                    exec(compile(source, f"<step {step.number}>", "exec"), namespace)
                except Exception as error:   # show the error as the step's output
                    print(f"{type(error).__name__}: {error}")
            outputs.append(buffer.getvalue().splitlines())
    finally:
        sys.path.remove(lesson_dir)
    return outputs


def render(steps, outputs):
    """Write steps and their printed lines in the transcript.txt format."""
    lines = []
    for step, printed in zip(steps, outputs):
        lines += [str(step.number), step.code] + printed
    return "\n".join(lines) + "\n"


# ---- the three lesson scripts ---------------------------------------------

def setup(lesson_dir):
    """Nothing external to prepare; explain how to start the lesson."""
    steps = parse_transcript(os.path.join(lesson_dir, TRANSCRIPT))
    first_import = to_python(steps[0].code).splitlines()[0]   # e.g. "from jobs import Queue"
    from units.table import LESSONS  # the lessons' short names (make unit N=cl-13-2)

    # From the repository, on the host: also when make runs this in the Workstation container.
    repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    where = os.path.relpath(os.path.abspath(lesson_dir), repository)
    name = next(short for short, folder in LESSONS.items() if folder == os.path.basename(where))
    # True of both lessons; only CL-13-2's model has a clock (see its README).
    print("Nothing to set up: the model keeps its SQLite database in memory, and the same steps"
          " print the same lines every time.")
    print("Start the lesson in the host's terminal, in the repository:")
    print(f"  cd {where} && python3")
    print(f"Then type the code of each step, one line at a time, beginning with {first_import}"
          f" (the guide shows how; {TRANSCRIPT} has every step). make solve-unit N={name} replays"
          f" all steps, make check-unit N={name} compares them.")
    return 0


def solve(lesson_dir):
    """Replay every step and print it in the transcript format."""
    steps = parse_transcript(os.path.join(lesson_dir, TRANSCRIPT))
    print(render(steps, replay(lesson_dir, steps)), end="")
    return 0


def check(lesson_dir):
    """Replay every step; print one line per step that differs. Exit status 0 = all match."""
    try:
        steps = parse_transcript(os.path.join(lesson_dir, TRANSCRIPT))
    except (OSError, ValueError) as error:
        print(f"cannot read {TRANSCRIPT}: {error}")
        return 2
    outputs = replay(lesson_dir, steps)
    failed = 0
    for step, printed in zip(steps, outputs):
        if printed != step.expected:
            failed += 1
            print(f"step {step.number}: expected {step.expected!r} but got {printed!r}")
    if failed:
        return 1
    print(f"OK: all {len(steps)} steps match {TRANSCRIPT}")
    return 0


def main(action, script_path):
    """Entry point used by the lesson scripts: main("check", __file__)."""
    lesson_dir = os.path.dirname(os.path.abspath(script_path))
    return {"setup": setup, "solve": solve, "check": check}[action](lesson_dir)
