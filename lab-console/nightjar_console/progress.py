"""Which units have passed their check, and which one the learner set up last.

Kept as one small JSON file in the console's data folder (the lab's volume
`console-data` in containers), so it survives restarts. Written whole to a
temporary file and renamed into place: a crash leaves the old file or the
new one, never half of one.
"""

import json
import os
import time
from pathlib import Path

FILE = "progress.json"


class Progress:
    def __init__(self, folder):
        self.path = Path(folder) / FILE

    def read(self):
        """{"passed": {key: ISO time}, "current": key or None}."""
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            data = {}
        passed = data.get("passed") if isinstance(data.get("passed"), dict) else {}
        return {"passed": passed, "current": data.get("current")}

    def _write(self, data):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{FILE}.{os.getpid()}")
        temporary.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
        os.replace(temporary, self.path)

    def passed(self, key):
        data = self.read()
        data["passed"][key] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self._write(data)

    def set_up(self, key):
        data = self.read()
        data["current"] = key
        self._write(data)
