"""Fixtures the tests share: a throwaway lab on the machine's RabbitMQ, and a private node for the grader's tests."""

import pytest

from nightjar.harness.rabbitnode import PrivateNode
from browserkit import CHROMIUM, CHROMIUM_ARGS
from labkit import Lab


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """Each module's tests run together, in the order pytest gave them. pytest groups the tests
    pytest-playwright parametrizes ([chromium]) across modules: a module's other tests would run
    far apart from them, and its module-scoped fixtures (test_course.py's whole course) would be
    torn down and set up anew for them, a course that has seen none of the story before."""
    first = {}
    for position, item in enumerate(items):
        first.setdefault(item.path, position)
    items.sort(key=lambda item: first[item.path])


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    """Playwright drives Debian's Chromium (no browser download)."""
    return {**browser_type_launch_args, "executable_path": CHROMIUM, "args": CHROMIUM_ARGS}


@pytest.fixture
def lab(tmp_path):
    """An isolated lab on the machine's RabbitMQ: own queue names, own database."""
    lab = Lab(tmp_path)
    yield lab
    lab.cleanup()


class GradingBroker:
    """A broker for the grader's tests: its administrator's AMQP URL and its management API."""

    def __init__(self, url, management_url):
        self.url, self.management_url = url, management_url

    @property
    def args(self):
        """The grader's options that name it."""
        return ["--amqp-url", self.url, "--management-url", self.management_url]


@pytest.fixture(scope="session")
def grading_broker():
    """A private RabbitMQ node for the grader's tests, shared by the whole session."""
    node = PrivateNode().start()
    try:
        node.wait_ready()
        yield GradingBroker(node.url, node.management_url)
    finally:
        node.stop()
