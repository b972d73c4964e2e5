"""The console's side of the Workstation agent's socket (agent.py speaks the other side)."""

import asyncio
import json

# A line from the agent carries up to 64 KiB of terminal output (more once escaped as JSON).
LINE_LIMIT = 4 * 1024 * 1024


class AgentUnavailable(Exception):
    """The Workstation's agent does not answer; the text says what to do."""


async def connect(path, request):
    """(reader, writer) with `request` sent: the agent's first line decides what follows."""
    try:
        reader, writer = await asyncio.open_unix_connection(path, limit=LINE_LIMIT)
    except OSError as error:
        raise AgentUnavailable(
            "the Workstation does not answer yet (its terminal agent starts with it;"
            f" {error.strerror or error})") from None
    writer.write((json.dumps(request) + "\n").encode())
    await writer.drain()
    return reader, writer


async def receive(reader):
    """The agent's next message, or None when it has closed the connection."""
    line = await reader.readline()
    return json.loads(line) if line else None


async def run_script(path, action, unit, lang):
    """(exit status, [lines]) of a unit's setup or check, run in the Workstation."""
    reader, writer = await connect(path, {"run": action, "unit": unit, "lang": lang})
    lines, status = [], None
    try:
        while (message := await receive(reader)) is not None:
            kind = message[0]
            if kind == "out":
                lines.append(message[1])
            elif kind == "exit":
                status = message[1]
            elif kind == "error":
                raise AgentUnavailable(f"the Workstation refused it: {message[1]}")
    finally:
        writer.close()
    if status is None:
        raise AgentUnavailable("the Workstation stopped before the script finished")
    return status, lines
