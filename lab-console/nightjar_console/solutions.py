"""A stuck learner's way out: a unit's solution handler.py beside the learner's, the differences
marked ("Show the solution"); "Solve unit N" runs the unit's ./solve through the agent (units.py).
NIGHTJAR_CONSOLE_SOLUTIONS=off turns both off, for a graded course."""

import difflib

EDITABLE = "handler.py"


def allowed(handler, key):
    """Fails the request (a guarded.py Api handler) unless unit `key`'s solution may be shown or run."""
    if not handler.config.solutions:
        handler.fail(403, "this course turns the solutions off (NIGHTJAR_CONSOLE_SOLUTIONS=off)")
    if not key.isdigit():
        handler.fail(404, f"lesson {key} has no solution to show or run here: its guide walks it")


class ShowSolution:
    """GET /api/units/KEY/solution, mixed into guarded.py's Api handler (units.py)."""

    def get(self, key):
        folder = self.unit_folder(key)
        allowed(self, key)
        self.finish(dict(compared(folder, self.config.workstation / EDITABLE), key=key))


def compared(folder, mine_path):
    """{"changes", "same", "rows"} for the unit in `folder`: changes False when the unit asks
    for no change to handler.py (it has no solution/handler.py)."""
    solution = folder / "solution" / mine_path.name
    if not solution.exists():
        return {"changes": False, "same": True, "rows": []}
    try:
        mine = mine_path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        mine = ""
    theirs = solution.read_text(encoding="utf-8")
    return {"changes": True, "same": mine == theirs, "rows": side_by_side(mine.splitlines(), theirs.splitlines())}


def side_by_side(mine, theirs):
    """[{"kind": same|changed|removed|added, "mine", "theirs"}]: the two files' lines in pairs,
    None where one side has no line (the page shows them as text, never as HTML)."""
    rows = []
    for kind, a, b, c, d in difflib.SequenceMatcher(None, mine, theirs, autojunk=False).get_opcodes():
        left, right = mine[a:b], theirs[c:d]
        name = {"equal": "same", "replace": "changed", "delete": "removed", "insert": "added"}[kind]
        for at in range(max(len(left), len(right))):
            rows.append({"kind": name, "mine": left[at] if at < len(left) else None,
                         "theirs": right[at] if at < len(right) else None})
    return rows
