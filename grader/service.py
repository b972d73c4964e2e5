"""The grader on request: what the lab console's Grade button and `make grade` ask in containers.

    python3 -m grader.service --listen HOST:PORT -- GRADER OPTIONS...
    python3 -m grader.service --ask URL

--listen serves POST /grade: each request runs `python3 -m grader GRADER
OPTIONS` (with --json when asked ?format=json), one grading at a time, and
answers {"status", "stdout", "stderr"}; GET /healthz answers 200. The
options are given once, here (compose.yaml's grader service), so every
grading is the same grading: the same handler.py, the same grading broker,
the live results read-only. Nothing a request sends changes them.
--ask grades once through such a service and prints what the grader
printed, exiting with its status (0 passed, 1 failed, 2 cannot grade).

The service listens on a network only the console shares (compose.yaml); it
runs the learner's code only through the grader, as `make grade` always has.
"""

import argparse
import json
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

ANSWER_SECONDS = 900  # how long --ask waits: a grading may first start its broker
LISTEN_SECONDS = 60  # how long --ask waits for a service that does not listen yet


def grading_handler(options):
    one_at_a_time = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def reply(self, status, payload):
            data = json.dumps(payload, ensure_ascii=False).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if urlsplit(self.path).path == "/healthz":
                self.reply(200, {"ok": True})
            else:
                self.reply(404, {"error": "POST /grade grades; GET /healthz answers"})

        def do_POST(self):
            url = urlsplit(self.path)
            if url.path != "/grade":
                self.reply(404, {"error": "POST /grade grades"})
                return
            wanted = parse_qs(url.query).get("format", ["text"])[0]
            if wanted not in ("json", "text"):
                self.reply(400, {"error": "format is json or text"})
                return
            command = [sys.executable, "-m", "grader", *options, *(["--json"] if wanted == "json" else [])]
            with one_at_a_time:
                graded = subprocess.run(command, stdin=subprocess.DEVNULL, capture_output=True,
                                        text=True, errors="replace")
            self.reply(200, {"status": graded.returncode, "stdout": graded.stdout, "stderr": graded.stderr})

        def log_message(self, format, *args):
            pass  # a grading prints its verdict to whoever asked, not to the service's log

    return Handler


def listen(address, options):
    host, _, port = address.rpartition(":")
    server = ThreadingHTTPServer((host or "127.0.0.1", int(port)), grading_handler(options))
    print(f"Grading on request at http://{address}/grade", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def ask(url):
    request = urllib.request.Request(url.rstrip("/") + "/grade?format=text", data=b"", method="POST")
    # A service whose container has just started may not listen yet: a refused
    # connection sent nothing, so it is tried again for a while.
    deadline = time.monotonic() + LISTEN_SECONDS
    while True:
        try:
            with urllib.request.urlopen(request, timeout=ANSWER_SECONDS) as response:
                answer = json.load(response)
            break
        except urllib.error.URLError as error:
            if isinstance(error.reason, ConnectionRefusedError) and time.monotonic() < deadline:
                time.sleep(0.2)
                continue
            print(f"Cannot grade: the grading service at {url} does not answer ({error})", file=sys.stderr)
            return 2
        except (OSError, ValueError) as error:
            print(f"Cannot grade: the grading service at {url} does not answer ({error})", file=sys.stderr)
            return 2
    sys.stdout.write(answer["stdout"])
    sys.stderr.write(answer["stderr"])
    return answer["status"]


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    options = []
    if "--" in argv:
        argv, options = argv[:argv.index("--")], argv[argv.index("--") + 1:]
    parser = argparse.ArgumentParser(prog="python3 -m grader.service",
                                     description="Grade on request (the lab console, make grade).")
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--listen", metavar="HOST:PORT", help="serve gradings; the grader's options follow --")
    action.add_argument("--ask", metavar="URL", help="grade once through the service at URL")
    parsed = parser.parse_args(argv)
    if parsed.ask:
        return ask(parsed.ask)
    return listen(parsed.listen, options)


if __name__ == "__main__":
    sys.exit(main())
