"""The Docker route: the grader and its sandbox, as root in a container, for a user who is not root.

    python3 -m grader --handlers DIR --sandbox docker [--jobs N] [--json] [--junit FILE]
    python3 -m grader --handler PATH --skip-live --sandbox docker [--json] [--junit FILE]

Builds grader/sandbox.Dockerfile (quietly; Docker's cache makes later builds
take a second or two), then runs `python3 -m grader ... --sandbox linux
--json` in a container where it is root and nothing else is:

- no network (--network none): the private RabbitMQ node it grades on
  listens on the container's own loopback;
- a read-only root file system, with small tmpfs for /tmp and /run;
- every capability dropped but those the sandbox needs to build namespaces,
  change users and kill what a submission left; no new privileges;
- a memory and a process limit for the whole run;
- of this machine it sees only the class folder (or the one handler.py),
  read-only, and the control groups, in which the sandbox bounds each
  submission below the container's own limits.

Each submission then runs in the sandbox of nightjar/sandbox/
inside that container. The container's JSON report comes back on its
standard output (its progress on standard error); this process prints and
writes the same reports as a local grading.
"""

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

from nightjar.config import REPO_ROOT
from nightjar.sandbox import UID_BASE_ENV

from . import reports
from .class_run import batch
from .handler.findings import Result
from .reports import files as report_files

IMAGE = "nightjar/grader-sandbox:local"
DOCKERFILE = "grader/sandbox.Dockerfile"
DEFAULT_PYTHON_IMAGE = "python:3.11.13-slim-bookworm"
# What the sandbox needs, and nothing more (see nightjar/sandbox/).
CAPABILITIES = ("SYS_ADMIN", "NET_ADMIN", "SETUID", "SETGID", "SETPCAP", "KILL", "CHOWN",
                "DAC_OVERRIDE", "FOWNER", "SYS_CHROOT", "SYS_NICE")
PROGRESS = re.compile(r"^\d+ of \d+  ")


class DockerRouteError(Exception):
    """The container could not be built or run; the text says why in one line."""


def build():
    """Build the image (quietly); DockerRouteError with the end of the build log if it fails."""
    base = os.environ.get("NIGHTJAR_PYTHON_IMAGE") or DEFAULT_PYTHON_IMAGE
    result = subprocess.run(
        ["docker", "build", "-q", "-f", DOCKERFILE, "--build-arg", f"PYTHON_IMAGE={base}",
         "-t", IMAGE, "."], cwd=REPO_ROOT, capture_output=True, text=True)
    if result.returncode != 0:
        tail = [line for line in result.stderr.splitlines() if line.strip()][-1:] or ["no output"]
        raise DockerRouteError(f"the grader's sandbox image did not build ({tail[0].strip()})")


def run_command(options, mounts, grader_args):
    """The docker run command that grades inside a container."""
    jobs = options.jobs if options.handlers is not None else 1
    command = [
        "docker", "run", "--rm", "--name", f"nightjar-grading-{secrets.token_hex(4)}",
        "--network", "none", "--read-only",
        "--tmpfs", "/tmp:size=512m", "--tmpfs", "/run:size=16m",
        "--cap-drop", "ALL", *[arg for cap in CAPABILITIES for arg in ("--cap-add", cap)],
        "--security-opt", "no-new-privileges", "--security-opt", "apparmor=unconfined",
        "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
        "--memory", f"{jobs + 1}g", "--pids-limit", str(1024 * (jobs + 1)),
        "-e", f"{batch.PROGRESS_ENV}=stderr"]
    if os.environ.get(UID_BASE_ENV):  # where the sandbox's uids start, as outside
        command += ["-e", f"{UID_BASE_ENV}={os.environ[UID_BASE_ENV]}"]
    for source, target in mounts:
        command += ["-v", f"{source}:{target}:ro"]
    return command + [IMAGE, *grader_args, "--json", "--sandbox", "linux",
                      "--timeout", f"{options.timeout:g}"]


def refusal(options):
    """Why these options cannot take the Docker route, or None."""
    if options.amqp_url:
        return "--sandbox docker grades on a broker inside its container: leave out --amqp-url"
    if options.handlers is None and not options.skip_live:
        return "--sandbox docker grades handler.py alone: add --skip-live"
    return None


def grade_in_container(options, mounts, grader_args, on_progress):
    """(exit status, report) of the grader in a container; DockerRouteError when it could not run."""
    build()
    process = subprocess.Popen(run_command(options, mounts, grader_args), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    errors = []
    for line in process.stderr:
        if PROGRESS.match(line):
            on_progress(line.rstrip("\n"))
        else:
            errors.append(line.rstrip("\n"))
    out = process.stdout.read()
    status = process.wait()
    try:
        report = json.loads(out)
    except ValueError:
        last = next((line for line in reversed(errors) if line.strip()), f"status {status}")
        raise DockerRouteError(f"the grading container stopped without a report ({last.strip()})")
    return status, report


def _progress(options):
    """Where a container's progress lines go: printed, unless the output is JSON."""
    return (lambda line: None) if options.json else (lambda line: print(line, flush=True))


def grade_class(options):
    """Grade the class (--handlers) in a container; print and write its reports; the exit status."""
    problem = refusal(options)
    if problem:
        return reports.cannot_grade(options, problem)
    try:
        found = batch.discover(options.handlers)
        count = sum(handler is not None for _, handler in found)
        if count and not options.json:
            print(f"Grading {count} submissions in {options.handlers} (in a container: a private"
                  " RabbitMQ node, throwaway databases, each in a sandbox of its own;"
                  f" {options.jobs} at a time)", flush=True)
        args = ["--handlers", "/class", "--jobs", str(options.jobs),
                "--submission-timeout", f"{options.submission_timeout:g}"]
        status, report = grade_in_container(
            options, [(Path(options.handlers).resolve(), "/class")], args, _progress(options))
    except (batch.BatchError, DockerRouteError) as error:
        return reports.cannot_grade(options, str(error))
    if "error" in report:
        return reports.cannot_grade(options, report["error"])
    submissions = [reports.Submission(s["name"], s["status"], s["checks"], s.get("note", ""))
                   for s in report["submissions"]]
    return batch.report_class(options, submissions)


def grade_one(options):
    """Grade one handler (--handler, --skip-live) in a container; print and write its reports;
    the exit status."""
    problem = refusal(options)
    if problem:
        return reports.cannot_grade(options, problem)
    handler = Path(options.handler).resolve()
    if not handler.is_file():
        return reports.cannot_grade(options, f"no handler.py at {options.handler}")
    try:
        status, report = grade_in_container(
            options, [(handler, "/submission/handler.py")],
            ["--handler", "/submission/handler.py", "--skip-live"], _progress(options))
    except DockerRouteError as error:
        return reports.cannot_grade(options, str(error))
    results = [Result.from_dict(c) for c in report["checks"]]
    error = report.get("error")
    problem = report_files.save(options, [reports.single(str(options.handler), results, error, 0.0)])
    if problem or error:
        return reports.cannot_grade(options, problem or error)
    if options.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(reports.handler_text(results, options.handler, "in a container: a private RabbitMQ"
                                   " node, throwaway databases, handler.py sandboxed; live results"
                                   " skipped"))
    return status
