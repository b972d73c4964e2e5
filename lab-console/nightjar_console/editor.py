"""The editor's file: the Workstation's handler.py, the only file the console opens and saves.

    GET  /api/files/handler.py      the file, its version and Python's first complaint, if any
    PUT  /api/files/handler.py      save it: {"text", "version"?, "force"?}
"""

import hashlib
import os

from .guarded import FILE_LIMIT, Api

EDITABLE = "handler.py"


def syntax_problem(text):
    """{"line", "column", "message"} when Python would refuse handler.py, else None (compiled, never run)."""
    try:
        compile(text, EDITABLE, "exec", dont_inherit=True)
    except SyntaxError as error:
        return {"line": error.lineno, "column": error.offset, "message": error.msg}
    except (ValueError, RecursionError, MemoryError) as error:
        return {"line": None, "column": None, "message": str(error) or type(error).__name__}
    return None


def version(data):
    return hashlib.sha256(data).hexdigest()[:16]


class File(Api):
    def path(self, name):
        if name != EDITABLE:
            self.fail(404, f"only {EDITABLE} can be opened here, not {name!r}")
        return self.config.workstation / EDITABLE

    def get(self, name):
        path = self.path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            self.fail(404, f"there is no {EDITABLE} in the Workstation yet: set a unit up first")
        text = data.decode("utf-8", "replace")
        self.finish({"name": name, "text": text, "version": version(data), "problem": syntax_problem(text)})

    def put(self, name):
        path = self.path(name)
        body = self.body_json()
        text = body.get("text")
        if not isinstance(text, str):
            self.fail(400, 'the body needs "text": the new handler.py')
        data = text.encode("utf-8")
        if len(data) > FILE_LIMIT:
            self.fail(413, f"{EDITABLE} may be at most {FILE_LIMIT // 1024} KiB")
        try:
            current = version(path.read_bytes())
        except FileNotFoundError:
            current = None
        if body.get("version") not in (None, current) and not body.get("force"):
            # Changed meanwhile (in the terminal, say): the learner decides, nothing is lost.
            self.set_status(409)
            self.finish({"error": f"{EDITABLE} changed in the Workstation since the editor opened it",
                         "version": current})
            return
        self.learner_acted()
        temporary = path.with_name(f".{EDITABLE}.console")
        temporary.write_bytes(data)
        os.replace(temporary, path)
        # Saved whatever it holds: a syntax error is the learner's to see and fix, not a refusal.
        self.finish({"name": name, "saved": True, "version": version(data), "problem": syntax_problem(text)})
