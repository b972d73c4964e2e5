"""Grades back into the LMS: LTI Assignment and Grade Services (AGS), the score of each verdict.

After every Grade and every Grade all the course's service keeps the learner's verdict
(course/service.py, Store.graded), and Sends.verdict_stored turns it into a score for each line
item the learner launched from (course/lti.py keeps the launches):

    scoreGiven      the checks passed        scoreMaximum    the checks
    comment         the failed checks by name
    activityProgress   Completed when every check passed, else Submitted
    gradingProgress    FullyGraded

A score goes out once: the same verdict again posts nothing. One that fails (the LMS down, its
token endpoint refusing) is kept with the LMS's answer and tried again after RETRY_SECONDS,
then twice as long each time, an hour at most; the instructor's page shows it, and can send
what changed at once, or everything again.

The LMS is spoken to as LTI 1.3 says, with PyJWT and a few lines here: a client-credentials grant
whose client assertion is a JWT signed with the course's tool key (iss = sub = the client_id,
aud = the token URL), then POST {lineitem}/scores (before any query string) with
application/vnd.ims.lis.v1.score+json.
"""

import asyncio
import datetime
import hashlib
import json
import time
import urllib.parse
import uuid

import jwt
import tornado.httpclient

SCORE_SCOPE = "https://purl.imsglobal.org/spec/lti-ags/scope/score"
SCORE_TYPE = "application/vnd.ims.lis.v1.score+json"
ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
ASSERTION_SECONDS = 300
RETRY_SECONDS = 30
RETRY_LIMIT_SECONDS = 3600
ANSWER_LIMIT = 300  # characters of the LMS's answer kept for the instructor's page
WAITING, FAILED, SENT = "waiting", "failed", "sent"


def score_of(submission):
    """The AGS score of a graded Submission (grader/reports/), without userId and timestamp."""
    passed = sum(1 for check in submission.checks if check["passed"])
    failed = [check["name"] for check in submission.checks if not check["passed"]]
    comment = f"{passed} of {len(submission.checks)} checks passed."
    if failed:
        comment += " Failed: " + "; ".join(failed) + "."
    return {"scoreGiven": passed, "scoreMaximum": len(submission.checks), "comment": comment,
            "activityProgress": "Completed" if submission.passed else "Submitted",
            "gradingProgress": "FullyGraded"}


def scores_url(lineitem):
    """The line item's score service: its URL with /scores added to the path, before any query."""
    parts = urllib.parse.urlsplit(lineitem)
    return parts._replace(path=parts.path.rstrip("/") + "/scores").geturl()


def client_assertion(key, kid, client_id, token_url):
    """The JWT that stands for the tool's client secret at the LMS's token endpoint."""
    issued = int(time.time())
    claims = {"iss": client_id, "sub": client_id, "aud": token_url, "iat": issued,
              "exp": issued + ASSERTION_SECONDS, "jti": uuid.uuid4().hex}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


class LmsRefused(Exception):
    """The LMS answered with an error: its status and what it said, for the instructor's page."""

    def __init__(self, where, status, text):
        super().__init__(f"{where}: {status} {text}".strip()[:ANSWER_LIMIT])
        self.status = status


async def fetch(url, **request):
    """(status, body text) of a request; an LMS that cannot be reached raises LmsRefused."""
    try:
        answer = await tornado.httpclient.AsyncHTTPClient().fetch(
            url, raise_error=False, request_timeout=30, **request)
    except OSError as error:
        raise LmsRefused(url, "unreachable", str(error)) from error
    if answer.code == 599:  # tornado's own: no answer (a timeout, a refused connection)
        raise LmsRefused(url, "unreachable", str(answer.error))
    return answer.code, answer.body.decode(errors="replace") if answer.body else ""


class Lms:
    """The LMS's token endpoint and score service, as the course's tool (its key and key id)."""

    def __init__(self, token_url, key, kid):
        self.token_url, self.key, self.kid = token_url, key, kid
        self.tokens = {}  # client_id: (access token, when it expires)

    async def access_token(self, client_id):
        token, expires = self.tokens.get(client_id, (None, 0))
        if token and time.time() < expires - 60:
            return token
        form = {"grant_type": "client_credentials", "client_assertion_type": ASSERTION_TYPE,
                "client_assertion": client_assertion(self.key, self.kid, client_id, self.token_url),
                "scope": SCORE_SCOPE}
        status, text = await fetch(self.token_url, method="POST", body=urllib.parse.urlencode(form),
                                   headers={"Content-Type": "application/x-www-form-urlencoded"})
        if status != 200:
            raise LmsRefused("the LMS's token endpoint", status, text)
        try:
            answer = json.loads(text)
            token, lifetime = answer["access_token"], int(answer.get("expires_in", 3600))
        except (ValueError, KeyError, TypeError) as error:
            raise LmsRefused("the LMS's token endpoint", status, f"no access token in {text!r}") from error
        self.tokens[client_id] = (token, time.time() + lifetime)
        return token

    async def post_score(self, client_id, lineitem, score):
        """Post one score; the LMS's answer as "201 Created"-like text. LmsRefused otherwise."""
        token = await self.access_token(client_id)
        status, text = await fetch(scores_url(lineitem), method="POST", body=json.dumps(score),
                                   headers={"Content-Type": SCORE_TYPE, "Authorization": f"Bearer {token}"})
        if status == 401:
            self.tokens.pop(client_id, None)  # an access token the LMS no longer takes: a new one next time
        if not 200 <= status < 300:
            raise LmsRefused("the LMS's score service", status, text)
        return f"{status} {text}".strip()[:ANSWER_LIMIT]


def timestamp():
    """Now, as AGS wants a score's timestamp: ISO 8601 with milliseconds and the time zone."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="milliseconds")


class Sends:
    """Each learner's score for each line item: the score wanted, the one the LMS has, and the
    last try. Kept in the service's database, beside the verdicts."""

    def __init__(self, db, lms, destinations, retry_seconds=RETRY_SECONDS):
        self.db, self.lms, self.destinations = db, lms, destinations
        self.retry_seconds = retry_seconds
        self.wake = asyncio.Event()
        self.db.executescript("""
            CREATE TABLE IF NOT EXISTS lti_sends (learner TEXT NOT NULL, lineitem TEXT NOT NULL,
                client_id TEXT NOT NULL, sub TEXT NOT NULL, score TEXT NOT NULL, digest TEXT NOT NULL,
                delivered TEXT, state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
                next_try REAL NOT NULL DEFAULT 0, tried_at REAL, answer TEXT NOT NULL DEFAULT '',
                delivered_at REAL, PRIMARY KEY (learner, lineitem));""")

    def verdict_stored(self, learner, submission):
        """A learner's verdict was stored: its score is due at every line item they launched from,
        unless the LMS has that very score already."""
        if submission.status != "graded" or not submission.checks:
            return  # not graded (the farm failed): no verdict for the gradebook
        score = score_of(submission)
        digest = hashlib.sha256(json.dumps(score, sort_keys=True).encode()).hexdigest()
        for place in self.destinations(learner):
            self.db.execute("""
                INSERT INTO lti_sends (learner, lineitem, client_id, sub, score, digest, state)
                VALUES (?, ?, ?, ?, ?, ?, ?)
                ON CONFLICT (learner, lineitem) DO UPDATE SET client_id = excluded.client_id,
                    sub = excluded.sub, score = excluded.score, digest = excluded.digest,
                    state = CASE WHEN delivered = excluded.digest THEN 'sent' ELSE 'waiting' END,
                    attempts = CASE WHEN delivered = excluded.digest THEN attempts ELSE 0 END,
                    next_try = CASE WHEN delivered = excluded.digest THEN next_try ELSE 0 END""",
                            (learner, place["lineitem"], place["client_id"], place["sub"], json.dumps(score),
                             digest, WAITING))
        self.wake.set()

    def send_changed(self):
        """Every score the LMS does not have yet, now (the instructor's "Send grades")."""
        self.db.execute("UPDATE lti_sends SET next_try = 0 WHERE state != 'sent'")
        self.wake.set()

    def send_all_again(self):
        """Every score, the same ones too (the instructor's "Send all again")."""
        self.db.execute("UPDATE lti_sends SET delivered = NULL, state = 'waiting', attempts = 0, next_try = 0")
        self.wake.set()

    async def run(self):
        """Send what is due, then sleep until the next retry or until woken; for ever."""
        while True:
            self.wake.clear()
            for row in self.db.execute("SELECT learner, lineitem, client_id, sub, score, digest, attempts"
                                       " FROM lti_sends WHERE state != 'sent' AND next_try <= ?"
                                       " ORDER BY next_try, learner", (time.time(),)).fetchall():
                await self.send(*row)
            (soonest,) = self.db.execute("SELECT min(next_try) FROM lti_sends WHERE state != 'sent'").fetchone()
            try:
                wait = None if soonest is None else max(0.0, soonest - time.time())
                await asyncio.wait_for(self.wake.wait(), wait)
            except asyncio.TimeoutError:
                pass

    async def send(self, learner, lineitem, client_id, sub, score, digest, attempts):
        body = {**json.loads(score), "userId": sub, "timestamp": timestamp()}
        try:
            answer = await self.lms.post_score(client_id, lineitem, body)
        except Exception as refused:  # noqa: BLE001 (LmsRefused, or what else failed it: kept, tried again)
            delay = min(self.retry_seconds * 2 ** min(attempts, 20), RETRY_LIMIT_SECONDS)
            self.db.execute("UPDATE lti_sends SET state = ?, attempts = attempts + 1, next_try = ?,"
                            " tried_at = ?, answer = ? WHERE learner = ? AND lineitem = ? AND digest = ?",
                            (FAILED, time.time() + delay, time.time(), str(refused)[:ANSWER_LIMIT], learner, lineitem, digest))
            print(f"LTI: {learner}'s score for {lineitem} not sent, again in {delay:.0f} s: {refused}", flush=True)
            return
        # A newer verdict may have come meanwhile: then the row waits again, for its own score.
        self.db.execute("UPDATE lti_sends SET delivered = ?, delivered_at = ?, tried_at = ?, answer = ?,"
                        " attempts = 0, state = CASE WHEN digest = ? THEN 'sent' ELSE 'waiting' END"
                        " WHERE learner = ? AND lineitem = ?",
                        (digest, time.time(), time.time(), answer, digest, learner, lineitem))

    def status(self):
        """What the instructor's page shows: counts by state, and every score not delivered."""
        counts = dict(self.db.execute("SELECT state, count(*) FROM lti_sends GROUP BY state").fetchall())
        undelivered = [dict(zip(("learner", "lineitem", "state", "tried_at", "answer", "next_try"), row))
                       for row in self.db.execute("SELECT learner, lineitem, state, tried_at, answer, next_try"
                                                  " FROM lti_sends WHERE state != 'sent' ORDER BY learner")]
        return {"counts": {state: counts.get(state, 0) for state in (SENT, WAITING, FAILED)},
                "undelivered": undelivered}
