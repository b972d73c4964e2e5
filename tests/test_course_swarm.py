"""The same course on a Docker swarm (course/jupyterhub_config.py with NIGHTJAR_COURSE_SPAWNER=swarm):
SwarmSpawner runs each learner's lab as a swarm service of one task, from the learner image, on
an overlay network of the learner's own that the hub's and the broker's compose containers join.
On a one-node swarm of this machine's engine; one learner, one walk."""

import json
import time

import pytest

from browserkit import needs_chromium
from consolepage import clear_terminal, run_command, wait_for_screen
from coursekit import Course, landed_in_lab, log_in_page
from stackkit import cannot_run, require_engine, run

pytestmark = [pytest.mark.containers, needs_chromium]

ADA = "ada"
# Limits of their own, so the test sees them reach the lab rather than Docker's defaults.
LIMITS = {"NIGHTJAR_COURSE_MEMORY": "320M", "NIGHTJAR_COURSE_CPUS": "0.5", "NIGHTJAR_COURSE_PIDS": "200"}


def docker(*args):
    done = run(["docker", *args], None, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def swarm():
    """The engine as a swarm manager: a one-node swarm made here when it is in none, and left
    afterwards; an engine that was in a swarm already is left in it."""
    require_engine()
    state = docker("info", "--format", "{{.Swarm.LocalNodeState}} {{.Swarm.ControlAvailable}}").split()
    made = state[0] == "inactive"
    # The bridge swarm mode makes for its tasks stays when the node leaves: it goes with the swarm.
    bridge_was_there = "docker_gwbridge" in docker("network", "ls", "--format", "{{.Name}}").split()
    if made:
        docker("swarm", "init", "--advertise-addr", "127.0.0.1")
    elif state != ["active", "true"]:
        cannot_run(f"the Docker engine is in a swarm but not its manager ({' '.join(state)})")
    try:
        yield
    finally:
        if made:
            docker("swarm", "leave", "--force")
            if not bridge_was_there:
                docker("network", "rm", "docker_gwbridge")


@pytest.fixture(scope="module")
def course(swarm, tmp_path_factory):
    course = Course(tmp_path_factory.mktemp("course"), NIGHTJAR_COURSE_SPAWNER="swarm", **LIMITS)
    try:
        course.up()
        yield course
    finally:
        course.down()
        label = f"label=nightjar.course={course.project}"
        # Nothing of the course is left: no service, no network, no volume.
        assert docker("service", "ls", "-q", "--filter", label) == ""
        assert docker("network", "ls", "-q", "--filter", label) == ""
        assert docker("volume", "ls", "-q", "--filter", f"name={course.names(ADA).volume}") == ""
        assert docker("volume", "ls", "-q", "--filter", f"name={course.project}") == ""


def running_containers(course, name):
    """The running containers of the learner's service's tasks."""
    service = course.names(name).container
    return docker("ps", "-q", "--filter", f"label=com.docker.swarm.service.name={service}").split()


def task_container(course, name):
    """The container of the learner's service's one task."""
    found = running_containers(course, name)
    assert len(found) == 1, found
    return found[0]


def terminal_answers(course, browser, learner):
    """Log in as the learner, whose lab is stopped: the login lands in the lab, which the hub
    starts, and its terminal answers a command. How long it took, as a line for the report."""
    started = time.monotonic()
    page = log_in_page(browser.new_context(), course, learner.name, learner.password)
    logged_in = time.monotonic()
    landed_in_lab(page, course, learner.name)
    ready = time.monotonic()
    prompt = clear_terminal(page)
    run_command(page, prompt, "echo $NIGHTJAR_AMQP_URL | cut -d@ -f2")
    wait_for_screen(page, lambda lines: course.names(learner.name).vhost in lines[-2])
    done = time.monotonic()
    page.context.close()
    return (f"{done - started:.1f} s (login {logged_in - started:.1f} s, lab and console ready"
            f" {ready - logged_in:.1f} s, terminal answering {done - ready:.1f} s)")


def test_a_learners_lab_is_a_swarm_service_with_its_limits_and_files(course, browser):
    ada = course.learner(ADA)
    first = terminal_answers(course, browser, ada)

    service = json.loads(docker("service", "inspect", course.names(ADA).container))[0]
    assert service["Spec"]["Labels"] == {"nightjar.course": course.project}
    lab = json.loads(docker("inspect", task_container(course, ADA)))[0]
    limits = lab["HostConfig"]
    assert (limits["Memory"], limits["NanoCpus"], limits["PidsLimit"], limits["Init"]) == \
        (320 * 1024 * 1024, 500_000_000, 200, True)
    assert [mount["Name"] for mount in lab["Mounts"]] == [course.names(ADA).volume]
    # Its own overlay network, with the hub and the broker on it (attachable), and nothing else.
    [network] = lab["NetworkSettings"]["Networks"]
    joined = json.loads(docker("network", "inspect", network))[0]
    assert (joined["Driver"], joined["Attachable"]) == ("overlay", True)
    containers = {container["Name"] for container in joined["Containers"].values()}
    assert containers == {course.hub_container, course.broker_container, lab["Name"].lstrip("/"),
                          f"{network}-endpoint"}, containers  # the last: the node's own, swarm's

    # Stopped (the service goes) and started again (a new task): handler.py is kept.
    edited = run(["docker", "exec", "--user", "1000", task_container(course, ADA), "bash", "-c",
                  "echo '# mine' >> handler.py"], None)
    assert edited.returncode == 0, edited.stderr
    stopping = time.monotonic()
    course.stop_lab(ADA)
    stopped = time.monotonic() - stopping
    assert docker("service", "ls", "-q", "--filter", f"name={course.names(ADA).container}") == ""
    # ... and its container has ended: a lab started again never runs beside it on the volume.
    assert running_containers(course, ADA) == []
    again = terminal_answers(course, browser, ada)
    kept = run(["docker", "exec", task_container(course, ADA), "tail", "-n", "1", "handler.py"], None)
    assert kept.stdout == "# mine\n", kept.stdout + kept.stderr
    print(f"\nSwarmSpawner, one learner: login to terminal ready in {first}; stopped in"
          f" {stopped:.1f} s; after the stop, {again}")
