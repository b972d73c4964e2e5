"""The Grade button: the lab's own grader, with the isolation `make grade` has.

In containers the console runs no learner code: it asks the grading service
(grader/service.py in the `grader` container, on a network only the two
share), which grades the Workstation's handler.py against the grader's own
RabbitMQ, apart from the live one. Without containers (make local) the
console runs `python3 -m grader --json` itself, as `make grade` does there.
In a course (course/), the course's service grades on the grading farm the
handler.py the console sends it, for the learner its hub token names.
"""

import asyncio
import json
import os
import sys

from tornado.httpclient import AsyncHTTPClient, HTTPClientError

GRADING_SECONDS = 600  # a cold grading starts a broker first


class CannotGrade(Exception):
    pass


async def _local():
    grader = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "grader", "--json", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    stdout, stderr = await asyncio.wait_for(grader.communicate(), GRADING_SECONDS)
    return grader.returncode, stdout.decode(errors="replace"), stderr.decode(errors="replace")


async def _service(url, handler=None):
    headers = {}
    if handler is not None:  # a course's service: this learner's handler.py, as their hub token says
        headers["Authorization"] = f"token {os.environ['JUPYTERHUB_API_TOKEN']}"
    try:
        answer = await AsyncHTTPClient().fetch(url.rstrip("/") + "/grade?format=json", method="POST",
                                               body=handler or b"", headers=headers,
                                               request_timeout=GRADING_SECONDS)
    except HTTPClientError as error:
        raise CannotGrade(f"the grading service answered {error.code}") from None
    except OSError as error:
        raise CannotGrade("the grading service does not answer yet (it starts with the grader's"
                          f" RabbitMQ; {error.strerror or error})") from None
    reply = json.loads(answer.body)
    return reply["status"], reply["stdout"], reply["stderr"]


async def grade(service_url, handler=None):
    """{"status", "passed", "checks", "error"}: the grader's verdict on handler.py (whose bytes
    a course's service is sent)."""
    status, stdout, stderr = await (_service(service_url, handler) if service_url else _local())
    try:
        verdict = json.loads(stdout)
    except ValueError:
        last = (stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]
        raise CannotGrade(f"the grader exited with status {status}: {last}") from None
    return {"status": status, "passed": bool(verdict.get("passed")),
            "checks": verdict.get("checks", []), "error": verdict.get("error")}
