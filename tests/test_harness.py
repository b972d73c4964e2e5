"""The throwaway-lab harness (nightjar/harness/): what it leaves behind, and its two interruptions, on the machine's RabbitMQ."""

import socket
from pathlib import Path

import pika.exceptions
import pytest

from labkit import MACHINE_BROKER, ROOT, processes_mentioning
from nightjar import broker
from nightjar.harness import lab as harness
from nightjar.harness.interruptions import ctrl_c_at, stop_at_effect
from nightjar.harness.rabbitnode import PrivateNode, free_port

ENDLESS = ROOT / "tests" / "handlers" / "endless_loop.py"
UNIT3 = ROOT / "scenarios" / "unit3-idempotent-results" / "solution" / "handler.py"


def queue_exists(settings, queue):
    connection = broker.connect(settings)
    try:
        channel = connection.channel()
        try:
            broker.ready_count(channel, queue)
            return True
        except pika.exceptions.ChannelClosedByBroker as closed:
            assert closed.reply_code == 404, closed  # NOT_FOUND, nothing else
            return False
    finally:
        if connection.is_open:
            connection.close()


def test_the_workstation_copy_holds_the_programs_and_the_given_handler(tmp_path):
    folder = harness.copy_workstation(tmp_path / "ticket-desk", UNIT3)
    assert sorted(p.name for p in folder.iterdir()) == ["common.py", "desk.py", "handler.py",
                                                        "worker.py"]
    assert (folder / "handler.py").read_bytes() == UNIT3.read_bytes()
    assert (folder / "worker.py").read_bytes() == (ROOT / "ticket-desk" / "worker.py").read_bytes()


def test_cleanup_stops_its_programs_and_removes_its_queues_and_its_own_folder():
    lab = harness.Lab(MACHINE_BROKER, handler=ENDLESS, queue_prefix="test.harness")
    folder, settings = lab.folder, lab.settings
    lab.register("Looping guest")
    worker = lab.start("worker.py", watch=True)  # its command line names the lab's folder
    assert processes_mentioning(str(lab.workstation))
    assert queue_exists(settings, settings.queue)

    lab.cleanup()

    assert worker.process.poll() is not None
    assert not processes_mentioning(str(folder))
    assert not Path(folder).exists()
    assert not queue_exists(settings, settings.queue)
    assert not queue_exists(settings, settings.dead_letter_queue)


def test_the_lab_does_not_pass_the_callers_settings_to_its_programs(tmp_path, monkeypatch):
    monkeypatch.setenv("NIGHTJAR_EVENTS", str(tmp_path / "live-events.jsonl"))
    monkeypatch.setenv("NIGHTJAR_MANAGEMENT_URL", "http://127.0.0.1:15672/")
    with harness.Lab(MACHINE_BROKER, folder=tmp_path / "lab", queue_prefix="test.harness") as lab:
        names = {name for name in lab.env if name.startswith("NIGHTJAR_")}
        assert names == {"NIGHTJAR_AMQP_URL", "NIGHTJAR_DB", "NIGHTJAR_QUEUE"}
        assert lab.env["NIGHTJAR_QUEUE"] == lab.queue and lab.queue.startswith("test.harness.")


@pytest.mark.parametrize("watch", [False, True])
def test_ctrl_c_at_a_checkpoint_stops_the_worker_there_and_rabbitmq_delivers_again(tmp_path, watch):
    with harness.Lab(MACHINE_BROKER, folder=tmp_path, handler=UNIT3,
                     queue_prefix="test.harness") as lab:
        registration_id = lab.register("Retry guest")
        seen = {}
        run = ctrl_c_at(lab, "after-commit", watch=watch,
                        on_pause=lambda _worker: seen.update(tickets=len(lab.tickets(registration_id))))
        assert (run.paused, run.returncode, run.timed_out) == (True, 130, False)
        assert run.lines == [f"Received {registration_id} redelivered=False", "Paused after-commit."]
        assert seen == {"tickets": 1}
        assert lab.comes_back()
        assert run.events.paused_at("after-commit") is watch


NO_CHECKPOINTS = """\
def handle(ch, delivery, job, db, pause):
    with db:
        db.execute('INSERT INTO tickets(registration_id,name) VALUES (?,?)', (job['id'], job['name']))
    ch.basic_ack(delivery.delivery_tag)
"""


def test_ctrl_c_at_a_checkpoint_the_handler_never_reaches_is_not_a_pause(tmp_path):
    handler = tmp_path / "handler.py"
    handler.write_text(NO_CHECKPOINTS)
    with harness.Lab(MACHINE_BROKER, folder=tmp_path / "lab", handler=handler,
                     queue_prefix="test.harness") as lab:
        registration_id = lab.register("Normal guest")
        run = ctrl_c_at(lab, "after-commit", timeout=10, watch=True)
        assert (run.paused, run.timed_out) == (False, False)
        assert run.events.first("pause-not-reached") == {
            "event": "pause-not-reached", "id": registration_id, "point": "after-commit"}


def test_a_stop_at_a_real_effect_kills_the_worker_there(tmp_path):
    with harness.Lab(MACHINE_BROKER, folder=tmp_path, handler=UNIT3,
                     queue_prefix="test.harness") as lab:
        registration_id = lab.register("Retry guest")
        run = stop_at_effect(lab, "after-commit")
        assert run.events.stopped_at("after-commit") and run.returncode == -9
        assert [t.name for t in lab.tickets(registration_id)] == ["Retry guest"]
        assert lab.comes_back()


def test_a_worker_over_its_time_limit_is_killed_and_reported_as_timed_out(tmp_path):
    with harness.Lab(MACHINE_BROKER, folder=tmp_path, handler=ENDLESS, queue_prefix="test.harness",
                     worker_timeout=1.5) as lab:
        lab.register("Looping guest")
        run = ctrl_c_at(lab, "before-write", watch=True)
        assert (run.timed_out, run.paused, run.time_limit) == (True, False, 1.5)
        assert not processes_mentioning(str(lab.workstation))


def test_when_the_pause_step_fails_the_paused_worker_is_stopped(tmp_path):
    with harness.Lab(MACHINE_BROKER, folder=tmp_path, handler=UNIT3,
                     queue_prefix="test.harness") as lab:
        lab.register("Retry guest")

        def fails(worker):
            assert processes_mentioning(str(lab.workstation))  # waiting at the checkpoint
            raise RuntimeError("the step at the pause failed")

        with pytest.raises(RuntimeError, match="the step at the pause failed"):
            ctrl_c_at(lab, "before-write", watch=True, on_pause=fails)
        assert not processes_mentioning(str(lab.workstation))


def test_a_private_node_whose_port_is_taken_boots_again_on_others_and_says_why():
    """A boot that fails is tried once more on fresh ports, with a fresh name and folder; why
    the first failed is RabbitMQ's own error line, not the Erlang crash report after it. (Its
    distribution port taken, as by another program's outgoing connection when it was chosen in
    the ephemeral range, a node exits with status 0.)"""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", free_port()))
        taken.listen()
        port = taken.getsockname()[1]
        node = PrivateNode()
        node.port, node.dist_port, node.management_port = free_port(), port, free_port()
        first = node.dir
        try:
            node.start(same_ports=True).wait_ready()
            assert node.dist_port != port and node.dir != first and not first.exists()
            assert node.retried == [
                "the private RabbitMQ node exited during start-up (status 0): ERROR: could not bind"
                f" to distribution port {port} on host localhost. It could be in use by another"
                " process or cannot be bound to (e.g. due to a security policy)"]
        finally:
            node.stop()
        assert not node.dir.exists()
