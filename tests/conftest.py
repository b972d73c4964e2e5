import pytest

from labkit import Lab


@pytest.fixture
def lab(tmp_path):
    """An isolated lab on the machine's RabbitMQ: own queue names, own database."""
    lab = Lab(tmp_path)
    yield lab
    lab.cleanup()
