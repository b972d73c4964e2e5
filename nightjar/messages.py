"""The job message: one registration, as JSON, e.g. {"id": "R-0002", "name": "Normal guest"}."""

import json
import re

from .registrations import InvalidName, clean_name

REGISTRATION_ID = re.compile(r"R-\d{4,}\Z")


class BadMessage(ValueError):
    """A message the worker cannot process; the text says why."""


def encode_job(registration_id, name):
    return json.dumps({"id": registration_id, "name": name}, ensure_ascii=False).encode("utf-8")


# The last body decoded and its job: the worker's runtime (for the events and the delivery
# history) and worker.py each decode every message, the same bytes one after the other.
_last = (None, None)


def decode_job(body):
    """The job as a dict with `id` and `name`, or BadMessage saying what is wrong."""
    global _last
    if body is _last[0]:
        return dict(_last[1])
    try:
        job = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise BadMessage("not valid JSON") from None
    if not isinstance(job, dict):
        raise BadMessage("not a JSON object")
    for field in ("id", "name"):
        if field not in job:
            raise BadMessage(f"missing field '{field}'")
        if not isinstance(job[field], str):
            raise BadMessage(f"field '{field}' is not a string")
    if not REGISTRATION_ID.match(job["id"]):
        raise BadMessage(f"field 'id' is not a registration ID like R-0002: {job['id']!r}")
    try:
        if clean_name(job["name"]) != job["name"]:
            raise InvalidName("it has extra spaces")
    except InvalidName as reason:
        raise BadMessage(f"field 'name' is not a valid guest name ({reason})") from None
    _last = (body, {"id": job["id"], "name": job["name"]})
    return dict(_last[1])
