"""The units' API: which passed, their guides, and their setup, check and solve run in the Workstation.

    GET  /api/units                 the units and lessons, which passed, which is set up
    GET  /api/units/KEY/guide?lang=ja|en
    POST /api/units/KEY/setup       the unit's setup, run in the Workstation
    POST /api/units/KEY/check       the unit's check, run in the Workstation
    GET  /api/units/KEY/solution, POST /api/units/KEY/solve   a stuck learner's way out (solutions.py)
"""


from . import agentlink, guides, solutions
from .guarded import Api, language
from .progress import Progress


class Units(Api):
    def get(self):
        progress = Progress(self.config.data).read()
        self.finish({"units": [dict(unit, passed=unit["key"] in progress["passed"])
                               for unit in guides.listing()], "current": progress["current"]})


class Guide(Api):
    def get(self, key):
        lang = self.get_query_argument("lang", None) or language(self.request)
        if lang not in ("ja", "en"):
            self.fail(400, f"no guide in {lang!r}: ja or en")
        self.unit_folder(key)
        self.finish({"key": key, "lang": lang, "html": guides.guide_html(key, lang, self.config.management_port)})


class UnitScript(Api):
    async def post(self, key, action):
        self.unit_folder(key)
        solutions.allowed(self, key) if action == "solve" else None
        lang = self.body_json().get("lang") or language(self.request)
        if lang not in ("ja", "en"):
            self.fail(400, f"no language {lang!r}: ja or en")
        try:
            status, lines = await agentlink.run_script(self.config.socket, action, key, lang)
        except agentlink.AgentUnavailable as error:
            self.fail(503, f"Cannot {action} unit {key}: {error}")
        self.learner_acted()
        progress = Progress(self.config.data)
        if action == "check" and status == 0:
            progress.passed(key)
        if self.config.hub:
            from . import hub
            hub.after_script(self, key, action, status, lines)
        if action == "setup" and status == 0:
            progress.set_up(key)
        self.finish({"key": key, "action": action, "status": status, "done": status == 0, "lines": lines})


class Solution(solutions.ShowSolution, Api):
    """GET /api/units/KEY/solution (solutions.py)."""
