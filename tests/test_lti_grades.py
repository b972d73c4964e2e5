"""The course's grades back into the LMS (course/ags.py, course/lti.py's key), sent to a real LTI
platform: tests/lmskit.py's LMS on lti1p3platform, whose token endpoint checks the client assertion
and whose score service takes the scores. In this process, without the course: what the course's
own tests (tests/test_course_lti.py) show end to end, here with each case of its own."""

import asyncio
import concurrent.futures
import json
import sqlite3
import time

import pytest

from course import ags, lti
from grader.reports import ERROR, GRADED, Submission
from lmskit import CLIENT_ID, Lms, new_key

CHECKS = [f"{number}. Check {number}" for number in range(1, 7)]


def verdict(*failed, status=GRADED):
    checks = [{"name": name, "passed": int(name[0]) not in failed, "reason": ""} for name in CHECKS]
    return Submission("learner", status, checks if status == GRADED else [])


@pytest.fixture(scope="module")
def lms():
    lms = Lms("127.0.0.1").start()
    yield lms
    lms.stop()


@pytest.fixture
def tool(lms, tmp_path):
    """The course's tool key (made as the service makes it), registered with the LMS."""
    key = lti.tool_key(tmp_path / "tool-key.pem")
    jwk = lti.public_jwk(key)
    lms.registration.set_tool_key_set({"keys": [jwk]})
    lms.scores.clear(), lms.score_posts.clear(), lms.tokens.clear()
    return key, jwk


def sender(lms, key, kid, people):
    """Sends on a database of its own; people: {learner: (sub, link)}."""
    destinations = {learner: [{"lineitem": lms.lineitem(link), "client_id": CLIENT_ID, "sub": sub}]
                    for learner, (sub, link) in people.items()}
    return ags.Sends(sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False),
                     ags.Lms(lms.url + "/token", key, kid),
                     lambda learner: destinations.get(learner, []), retry_seconds=0.5)


async def until(condition, seconds=10):
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not in time"
        await asyncio.sleep(0.05)


def run_with_sender(sends, steps):
    """The steps with the sender running, on an event loop of their own: in a thread, since the
    browser tests' Playwright may hold this thread's loop."""
    async def main():
        running = asyncio.ensure_future(sends.run())
        try:
            await steps()
        finally:
            running.cancel()

    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        thread.submit(asyncio.run, main()).result()


def test_the_tool_key_is_kept_private_and_published_with_a_stable_key_id(tmp_path):
    key = lti.tool_key(tmp_path / "tool-key.pem")
    assert (tmp_path / "tool-key.pem").stat().st_mode & 0o777 == 0o600
    assert lti.tool_key(tmp_path / "tool-key.pem") == key  # made once
    jwk = lti.public_jwk(key)
    assert jwk["kty"] == "RSA" and jwk["alg"] == "RS256" and jwk["use"] == "sig" and "d" not in jwk
    assert lti.public_jwk(key)["kid"] == jwk["kid"] != lti.public_jwk(new_key()[0])["kid"]


def test_a_verdict_goes_to_its_line_item_once_and_a_new_one_follows(lms, tool):
    key, jwk = tool
    sends = sender(lms, key, jwk["kid"], {"ada": ("sub-of-ada", "unit-2")})

    async def steps():
        sends.verdict_stored("ada", verdict(4, 6))
        await until(lambda: len(lms.scores) == 1)
        sends.verdict_stored("ada", verdict(4, 6))  # the same verdict again: nothing to send
        sends.verdict_stored("bob", verdict(4, 6))  # never launched: nowhere to send
        await asyncio.sleep(1)
        assert len(lms.score_posts) == 1
        sends.verdict_stored("ada", verdict())
        await until(lambda: len(lms.scores) == 2)

    run_with_sender(sends, steps)
    first, then = lms.scores
    assert first.pop("timestamp").endswith("+00:00") and "." in then.pop("timestamp")
    assert first == {"link": "unit-2", "userId": "sub-of-ada", "scoreGiven": 4, "scoreMaximum": 6,
                     "comment": "4 of 6 checks passed. Failed: 4. Check 4; 6. Check 6.",
                     "activityProgress": "Submitted", "gradingProgress": "FullyGraded"}
    assert then == {**first, "scoreGiven": 6, "comment": "6 of 6 checks passed.", "activityProgress": "Completed"}
    # /scores went before the line item's query string, as AGS's score media type.
    assert [(post["query"], post["content_type"]) for post in lms.score_posts] == [
        ({"course": "ds-101"}, "application/vnd.ims.lis.v1.score+json")] * 2
    # One access token, with the score scope, served both.
    assert lms.tokens == [{"scope": ags.SCORE_SCOPE}]
    assert sends.status()["counts"] == {"sent": 1, "waiting": 0, "failed": 0}


def test_a_send_the_lms_refuses_is_kept_and_tried_again_once(lms, tool):
    key, jwk = tool
    sends = sender(lms, key, jwk["kid"], {"ada": ("sub-of-ada", "unit-3")})
    lms.refuse_scores = 1
    seen = {}

    async def steps():
        sends.verdict_stored("ada", verdict(2))
        await until(lambda: sends.status()["counts"]["failed"] == 1)
        seen.update(sends.status())
        await until(lambda: len(lms.scores) == 1)
        await asyncio.sleep(1.5)  # and no more

    run_with_sender(sends, steps)
    (refused,) = seen["undelivered"]
    assert refused["learner"] == "ada" and refused["state"] == "failed" and refused["tried_at"]
    assert refused["answer"] == "the LMS's score service: 503 The gradebook is down for maintenance."
    assert len(lms.score_posts) == 2 and len(lms.scores) == 1 and lms.scores[0]["scoreGiven"] == 5
    assert sends.status() == {"counts": {"sent": 1, "waiting": 0, "failed": 0}, "undelivered": []}


def test_send_grades_sends_only_what_changed_and_send_all_again_everything(lms, tool):
    key, jwk = tool
    sends = sender(lms, key, jwk["kid"], {"ada": ("a", "unit-2"), "bob": ("b", "unit-2")})

    async def steps():
        sends.verdict_stored("ada", verdict(4, 6))
        sends.verdict_stored("bob", verdict())
        await until(lambda: len(lms.scores) == 2)
        sends.send_changed()
        await asyncio.sleep(1)
        assert len(lms.score_posts) == 2
        sends.send_all_again()
        await until(lambda: len(lms.scores) == 4)

    run_with_sender(sends, steps)
    assert sorted(score["userId"] for score in lms.scores) == ["a", "a", "b", "b"]


def test_a_verdict_not_graded_sends_no_score(lms, tool):
    key, jwk = tool
    sends = sender(lms, key, jwk["kid"], {"ada": ("a", "unit-2")})
    sends.verdict_stored("ada", verdict(status=ERROR))
    assert sends.status()["counts"] == {"sent": 0, "waiting": 0, "failed": 0}


def test_a_client_assertion_signed_with_another_key_is_refused_and_the_refusal_kept(lms, tool):
    _, jwk = tool
    other_key, _ = new_key()  # under the tool's own key id: only the signature tells
    sends = sender(lms, other_key, jwk["kid"], {"ada": ("a", "unit-2")})

    async def steps():
        sends.verdict_stored("ada", verdict())
        await until(lambda: sends.status()["counts"]["failed"] == 1)

    run_with_sender(sends, steps)
    (refused,) = sends.status()["undelivered"]
    assert refused["answer"].startswith("the LMS's token endpoint: 401 "), refused
    assert json.loads(refused["answer"].split(" 401 ", 1)[1])["error_description"] == \
        "InvalidSignatureError: Signature verification failed"
    assert lms.tokens == [{"refused": "InvalidSignatureError: Signature verification failed"}]
    assert lms.score_posts == []
