"""The page's terminal: the websocket /terminal?rows=R&cols=C, relayed to the Workstation's shell
(agent.py's protocol, through agentlink.py)."""

import asyncio
import json

import tornado.websocket

from . import agentlink
from .guarded import MESSAGE_LIMIT, Guarded, log_exception


class Terminal(tornado.websocket.WebSocketHandler):
    """The page's terminal: messages relayed both ways to the agent's shell."""

    log_exception = log_exception

    def initialize(self, config, access):
        self.config, self.access = config, access
        self.agent = None

    allowed, refuse = Guarded.allowed, Guarded.refuse

    def prepare(self):
        if not self.allowed():
            self.refuse()

    def check_origin(self, origin):
        return self.access.origin_allowed(self.request, origin)

    def size(self, name, default):
        given = self.get_query_argument(name, "")
        return min(max(int(given), 1), 1000) if given.isdigit() else default

    async def open(self):
        rows, cols = self.size("rows", 24), self.size("cols", 80)
        try:
            reader, self.agent = await agentlink.connect(
                self.config.socket, {"terminal": {"rows": rows, "cols": cols}})
        except agentlink.AgentUnavailable as error:
            self.write_message(json.dumps(["unavailable", f"The terminal is not ready: {error}."]))
            self.close()
            return
        asyncio.ensure_future(self._relay(reader))

    async def _relay(self, reader):
        try:
            while line := await reader.readline():
                await self.write_message(line.decode())
        except (tornado.websocket.WebSocketClosedError, OSError, ValueError):
            pass
        self.close()

    async def on_message(self, message):
        if self.agent is None or not isinstance(message, str) or len(message) > MESSAGE_LIMIT:
            return
        try:
            parsed = json.loads(message)
        except ValueError:
            return
        if isinstance(parsed, list) and parsed and parsed[0] in ("stdin", "size"):
            if parsed[0] == "stdin":
                Guarded.learner_acted(self)
            self.agent.write((json.dumps(parsed) + "\n").encode())
            await self.agent.drain()

    def on_close(self):
        if self.agent is not None:
            self.agent.close()
