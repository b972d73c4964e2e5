"""Fixtures the tests share: a throwaway lab on the machine's RabbitMQ, and a private node for the grader's tests."""

import pytest

from nightjar.harness.rabbitnode import PrivateNode
from labkit import Lab


@pytest.fixture
def lab(tmp_path):
    """An isolated lab on the machine's RabbitMQ: own queue names, own database."""
    lab = Lab(tmp_path)
    yield lab
    lab.cleanup()


@pytest.fixture(scope="session")
def grading_broker():
    """A private RabbitMQ node for the grader's tests, shared by the whole session."""
    node = PrivateNode().start()
    try:
        node.wait_ready()
        yield node.url
    finally:
        node.stop()
