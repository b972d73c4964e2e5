"""A grading farm on RabbitMQ: what the instructor's collector and the grading hosts share.

    python3 -m grader --handlers DIR --farm URL [--batch ID]      the collector (collector.py)
    python3 -m grader serve --farm URL [--slots N]                a grading host (host.py)

The farm broker is any RabbitMQ both sides reach. On it:

- nightjar.farm.jobs, a fanout exchange, and a quorum queue of the same name
  bound to it: one message a submission, carrying its files. A quorum queue
  keeps what it confirmed through a broker crash, and counts deliveries: a
  job that took down DELIVERY_LIMIT + 1 hosts is dead-lettered, not handed
  to another host.
- nightjar.farm.dead, a direct exchange: where the jobs queue dead-letters.
  A dead job keeps the routing key it was published with, the name of its
  batch's results queue, and each batch binds that queue here: the
  collector learns of its own dead jobs and of no one else's.
- nightjar.farm.results.BATCH, a quorum queue per batch: the hosts' results
  (to reply_to through the default exchange) and the batch's dead jobs.

Every publish on either side waits for the broker's confirm; a host acks a
job only after its result is confirmed, and the collector acks a result only
after it stored it. A job ID makes a second result for the same job (a host
that died between publishing and acking) a duplicate, counted once.
"""

import base64
import binascii
import json
from dataclasses import dataclass

import pika
import pika.exceptions

from nightjar.broker import describe_error
from nightjar.config import redact_url

from grader.class_run.batch import well_formed  # the same test a local batch puts its graders' reports to
from grader.reports import ERROR, GRADED, REFUSED, SKIPPED

# Bumped whenever a job's or a result's fields change: hosts refuse jobs of another version.
FARM_VERSION = 1
JOBS = "nightjar.farm.jobs"
DEAD = "nightjar.farm.dead"
RESULTS_PREFIX = "nightjar.farm.results."
# A job is returned to the queue when its host dies. Returned more than this
# many times, it is taken to be what kills hosts, and dead-lettered.
DELIVERY_LIMIT = 2
# A grading the host's machine was too busy for (findings.TOO_BUSY) is no verdict: the host
# puts the job back for another host or a later try, counting the tries in this header;
# the BUSY_TRIES-th too busy grading is the job's result.
BUSY_HEADER = "x-nightjar-busy-tries"
BUSY_TRIES = 3
# A job's whole message, and its handler.py: handlers are a few kilobytes.
JOB_LIMIT = 1 << 20
HANDLER_LIMIT = 512 << 10
RESULT_LIMIT = 1 << 20
FILES = ("handler.py",)
JOB, RESULT = "nightjar.farm.job", "nightjar.farm.result"
STATUSES = (GRADED, ERROR, REFUSED, SKIPPED)

# What a broken connection looks like to pika: the broker went away or closed it.
# (A channel the broker closes is a refusal instead: see Refusal.)
CONNECTION_LOST = (pika.exceptions.AMQPConnectionError, pika.exceptions.ConnectionClosed,
                   pika.exceptions.StreamLostError, pika.exceptions.ChannelWrongStateError,
                   ConnectionError, OSError)
# The broker refused what was asked (e.g. a jobs queue declared with other arguments by
# another farm version): trying again would not help.
Refusal = pika.exceptions.ChannelClosedByBroker


class FarmUnavailable(Exception):
    """The farm broker cannot be reached; the text says why in one line."""


class FarmRefused(FarmUnavailable):
    """The farm broker answers but refuses this login or vhost: waiting will not help."""


class Refused(Exception):
    """A message that is not a job or a result this farm version reads; the text says why."""


def connect(url):
    """A connection to the farm broker, or FarmUnavailable."""
    params = pika.URLParameters(url)
    params.connection_attempts = 1
    params.socket_timeout = 5
    params.heartbeat = 30
    params.blocked_connection_timeout = 60
    try:
        return pika.BlockingConnection(params)
    except pika.exceptions.ProbableAuthenticationError:
        raise FarmRefused(f"the farm broker at {redact_url(url)} refused the login:"
                          " check the user and password in the --farm URL") from None
    except pika.exceptions.ProbableAccessDeniedError:
        raise FarmRefused(f"the farm broker at {redact_url(url)} refused access to the"
                          " vhost in the --farm URL") from None
    except (pika.exceptions.AMQPError, OSError) as error:
        raise FarmUnavailable(f"cannot reach the farm broker at {redact_url(url)}"
                              f" ({describe_error(error)})") from None


def refusal_text(error):
    """A channel the broker closed, in one line."""
    return f"the farm broker refused: {error.reply_text}"


def declare(channel):
    """The farm's shared exchanges and jobs queue (declaring them again changes nothing)."""
    channel.exchange_declare(JOBS, "fanout", durable=True)
    channel.exchange_declare(DEAD, "direct", durable=True)
    channel.queue_declare(JOBS, durable=True, arguments={
        "x-queue-type": "quorum", "x-delivery-limit": DELIVERY_LIMIT,
        "x-dead-letter-exchange": DEAD})
    channel.queue_bind(JOBS, JOBS)


def results_queue(batch):
    return RESULTS_PREFIX + batch


def declare_results(channel, batch):
    """The batch's results queue, which also receives the batch's dead jobs."""
    queue = results_queue(batch)
    channel.queue_declare(queue, durable=True, arguments={"x-queue-type": "quorum"})
    channel.queue_bind(queue, DEAD, routing_key=queue)
    return queue


def counted(number, noun):
    """'1 job', '3 jobs': the farm's messages count jobs, hosts and results."""
    return f"{number} {noun}{'' if number == 1 else 's'}"


# ---- jobs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Job:
    batch: str
    job_id: str
    submission: str
    files: dict  # name -> bytes


def _message(kind, message_id, fields, **properties):
    """(body, properties) of a farm message: JSON of this farm version, persistent."""
    body = json.dumps({"farm": FARM_VERSION, **fields}, ensure_ascii=False).encode("utf-8")
    return body, pika.BasicProperties(content_type="application/json", delivery_mode=2,
                                      type=kind, message_id=message_id, **properties)


def job_message(job):
    """(body, properties) of a job: the files base64-encoded, the results going to its batch."""
    files = {name: base64.b64encode(data).decode("ascii") for name, data in job.files.items()}
    return _message(JOB, job.job_id, {"batch": job.batch, "job": job.job_id,
                                      "submission": job.submission, "files": files},
                    reply_to=results_queue(job.batch))


def busy_tries(properties):
    """How many gradings of a job were too busy so far (its BUSY_HEADER)."""
    tries = (properties.headers or {}).get(BUSY_HEADER, 0)
    return tries if isinstance(tries, int) and tries > 0 else 0


def job_again(properties, tries):
    """The properties of a job put back after `tries` too busy gradings."""
    return pika.BasicProperties(
        content_type=properties.content_type, delivery_mode=2, type=properties.type,
        message_id=properties.message_id, reply_to=properties.reply_to,
        headers={**{key: value for key, value in (properties.headers or {}).items()
                    if not key.startswith("x-death")}, BUSY_HEADER: tries})


def read_job(body):
    """The Job in a message's body, or Refused saying why not in one line."""
    if len(body) > JOB_LIMIT:
        raise Refused(f"the job is {len(body)} bytes, more than the farm's {JOB_LIMIT} bytes")
    data = _json_object(body, "job")
    if data.get("farm") != FARM_VERSION:
        raise Refused(f"the job is from farm version {data.get('farm')!r}; this host reads"
                      f" version {FARM_VERSION}")
    fields = {key: data.get(key) for key in ("batch", "job", "submission")}
    missing = [key for key, value in fields.items() if not isinstance(value, str) or not value]
    files = data.get("files")
    if missing or not isinstance(files, dict):
        raise Refused(f"the job lacks {', '.join(missing) or 'its files'}")
    if sorted(files) != sorted(FILES):
        raise Refused(f"the job carries {sorted(files)}; a submission is {list(FILES)}")
    decoded = {}
    for name, text in files.items():
        try:
            decoded[name] = base64.b64decode(text, validate=True) if isinstance(text, str) else None
        except (binascii.Error, ValueError):
            decoded[name] = None
        if decoded[name] is None:
            raise Refused(f"the job's {name} is not base64 text")
        if len(decoded[name]) > HANDLER_LIMIT:
            raise Refused(f"the job's {name} is more than {HANDLER_LIMIT} bytes")
    return Job(fields["batch"], fields["job"], fields["submission"], decoded)


def _json_object(body, what):
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise Refused(f"the {what} is not JSON") from None
    if not isinstance(data, dict):
        raise Refused(f"the {what} is not a JSON object")
    return data


# ---- results ------------------------------------------------------------------------------


def result_message(job_id, submission, host, seconds):
    """(body, properties) of a host's result for one job: the Submission it graded."""
    return _message(RESULT, job_id, {"job": job_id, "host": host, "seconds": round(seconds, 3),
                                     **submission.as_dict()})


def read_result(body):
    """(job ID, host, seconds, status, checks, note) from a result's body, or Refused."""
    if len(body) > RESULT_LIMIT:
        raise Refused(f"the result is more than {RESULT_LIMIT} bytes")
    data = _json_object(body, "result")
    if data.get("farm") != FARM_VERSION:
        raise Refused(f"the result is from farm version {data.get('farm')!r}")
    job_id, host, seconds = data.get("job"), data.get("host"), data.get("seconds")
    status, checks, note = data.get("status"), data.get("checks"), data.get("note", "")
    if not (isinstance(job_id, str) and isinstance(host, str) and isinstance(note, str)
            and isinstance(seconds, (int, float)) and status in STATUSES
            and (well_formed(checks) if status == GRADED else checks == [])):
        raise Refused("the result lacks a field or has one of the wrong kind")
    return job_id, host, float(seconds), status, checks, note


def death_reason(properties):
    """For a dead-lettered job: why RabbitMQ set it aside (x-death's reason), else None."""
    deaths = (properties.headers or {}).get("x-death")
    if properties.type != JOB or not deaths:
        return None
    reason = deaths[0].get("reason", b"")
    return reason.decode() if isinstance(reason, bytes) else str(reason)
