"""course/learners.py: every hub user name maps to safe, unique names, and each learner gets a vhost,
a user, limits and a length policy of its own on a real RabbitMQ node (the grader's private one),
through the management API, idempotently."""

import ast
import json
import os
import random
import re
import secrets
import stat
import subprocess
import sys
import time
import unicodedata
import uuid
from urllib.parse import quote, urlsplit

import pika
import pika.exceptions
import pytest

from course import learners
from labkit import ROOT
from nightjar import broker, db as database, queueing
from nightjar.config import Settings
from nightjar.rabbitadmin import Admin, AdminError

TRICKY = [
    "alice", "Alice", "ALICE", "alice.", "a.lice", "alice_", "alice-", "alice@example.org",
    "alice@example.com", "Alice.Smith@example.org", "alice smith", " alice", "alice ", "a b", "a_b",
    "a-b", "a.b", "a@b", "Zoë", "zoë", "Zoe", unicodedata.normalize("NFD", "Zoë"), "ZOË", "山田", "山田太郎",
    "yamada", "ß", "ss", "Ǆ", "ﬁ", "fi", "😀", "-", ".", "@", "_", "1", "123abc", "0x", "a/b", "a%2Fb",
    "..", "{slug}", "O'Brien", "tab\there", "new\nline", "x" * 300, "x" * 301, "é" * 100, "e" * 100,
    "Ω" * 40, "a" * 23 + "-b", "a" * 24 + "-b",
]
DNS_LABEL = re.compile(r"[a-z]([a-z0-9-]*[a-z0-9])?")
DOCKER_NAME = re.compile(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*")


def generated_names(count=3000, seed=36):
    """Names of 1 to 80 characters mixing what a hub may accept: cases, marks, symbols, scripts."""
    alphabet = "aAbBzZ09.@-_ +/%éÉëËöçßøÅıİ山田太郎ひらがなカタカナ한글Ωжщ😀\u0301\u200b"
    rng = random.Random(seed)
    return [rng.choice(TRICKY) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
            for _ in range(count)]


def test_every_name_maps_safely_and_uniquely():
    every = sorted(set(TRICKY + generated_names()))
    owners = {}
    for name in every:
        learner = learners.names(name)
        assert learner == learners.names(name)
        assert DNS_LABEL.fullmatch(learner.slug) and len(learner.slug) <= 63, (name, learner)
        for docker_name in (learner.container, learner.volume):
            assert DOCKER_NAME.fullmatch(docker_name) and len(docker_name) <= 63, (name, learner)
        for rabbit_name in (learner.vhost, learner.rabbit_user):
            assert rabbit_name.isascii() and quote(rabbit_name, safe="") == rabbit_name, (name, learner)
        for kind in ("slug", "vhost", "rabbit_user", "volume", "container"):
            owner = owners.setdefault((kind, getattr(learner, kind)), name)
            assert owner == name, f"{owner!r} and {name!r} share the {kind} {getattr(learner, kind)}"
    assert len(owners) == 5 * len(every) > 5 * 3000


def test_a_courses_name_goes_into_its_docker_names_and_stays_within_63_characters():
    longest = learners.names("1" + "x" * 200, course="c" * 19)  # "u-1xxx…": the longest slug
    assert longest.container.startswith("ccccccccccccccccccc-u-1xxx") and len(longest.volume) == 63
    assert learners.names("ada", "njc-test-1").container != learners.names("ada").container
    assert learners.names("ada", "njc-test-1").vhost == learners.names("ada").vhost  # a broker each
    for bad in ("c" * 20, "Course", "1course", "", "a_b"):
        with pytest.raises(ValueError, match="a course's name is"):
            learners.names("ada", bad)


def test_a_slug_keeps_what_it_can_read_of_the_name():
    assert learners.names("Alice.Smith@example.org").slug.startswith("alice-smith-example-org-")
    assert learners.names("Zoë").slug.startswith("zoe-")
    assert learners.names("山田").slug.startswith("u-")


def test_the_password_is_derived_from_the_course_secret(tmp_path):
    secret_file = tmp_path / "course" / "learner-secret"
    secret = learners.read_secret(secret_file)
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600 and learners.read_secret(secret_file) == secret
    ada, bob = learners.names("ada"), learners.names("Ada")
    password = learners.amqp_password(secret, ada)
    assert password == learners.amqp_password(secret, ada) and len(password) >= 32
    assert quote(password, safe="") == password
    assert password not in {learners.amqp_password(secret, bob), learners.amqp_password(secret + "x", ada)}


class Course:
    """Learners provisioned on the grading broker's node, every one removed afterwards."""

    def __init__(self, grading_broker):
        self.admin = Admin(grading_broker.management_url, grading_broker.url)
        self.secret = secrets.token_urlsafe(32)
        self.port = urlsplit(grading_broker.url).port
        self.made = []

    def learner(self, name="Ada.Lovelace@example.org"):
        """A learner of a name unique to this test (the name given, and a tag)."""
        learner = learners.names(f"{name}+{uuid.uuid4().hex[:6]}")
        self.made.append(learner)
        return learner

    def provision(self, learner, limits=learners.Limits()):
        return learners.provision(self.admin, learner, self.secret, limits, port=self.port)

    def get(self, path):
        return json.loads(self.admin.call("GET", path))

    def state(self, learner):
        """What the broker holds for the learner, without statistics that change by themselves."""
        vhost, user = quote(learner.vhost, safe=""), quote(learner.rabbit_user, safe="")
        return {"vhost": {k: v for k, v in self.get(f"vhosts/{vhost}").items() if k in ("name", "tags")},
                **{path: self.get(path) for path in (
                    f"users/{user}", f"permissions/{vhost}/{user}", f"vhost-limits/{vhost}",
                    f"user-limits/{user}", f"policies/{vhost}")}}

    def cleanup(self):
        for learner in self.made:
            learners.remove(self.admin, learner)


@pytest.fixture
def course(grading_broker):
    course = Course(grading_broker)
    yield course
    course.cleanup()


def connect(url):
    params = pika.URLParameters(url)
    params.connection_attempts, params.socket_timeout = 1, 5
    return pika.BlockingConnection(params)


def refused(url):
    """The broker's reason for refusing a connection to url (fails if it opens)."""
    with pytest.raises(pika.exceptions.AMQPConnectionError) as refusal:
        connect(url).close()
    return str(refusal.value)


def test_a_learner_reaches_its_own_vhost_and_no_other(course):
    ada, bob = course.learner(), course.learner("ada.lovelace@example.org")
    ada_access, bob_access = course.provision(ada), course.provision(bob)
    connect(ada_access.amqp_url).close()
    connect(bob_access.amqp_url).close()
    for vhost in (bob.vhost, "/"):
        url = ada_access.amqp_url.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")
        assert f"access to vhost '{vhost}' refused for user '{ada.rabbit_user}'" in refused(url)
    # The management UI, with Ada's login, shows her vhost alone.
    as_ada = Admin(course.admin.base[:-4], ada_access.amqp_url)
    assert [v["name"] for v in json.loads(as_ada.call("GET", "vhosts"))] == [ada.vhost]
    with pytest.raises(AdminError) as forbidden:
        as_ada.call("GET", f"queues/{quote(bob.vhost, safe='')}")
    assert forbidden.value.status in (401, 403, 404)  # 4.x answers as if there were no such vhost


def test_the_labs_queues_work_and_a_full_queue_refuses_the_next_job(course, tmp_path):
    ada = course.learner()
    settings = Settings(amqp_url=course.provision(ada).amqp_url, db_path=str(tmp_path / "live.db"),
                        queue="nightjar.tickets")
    db = database.connect(settings.db_path)
    with queueing.publisher(settings) as channel:
        # Quorum queues take the message that reaches the limit and refuse from the next one on.
        accepted = 0
        while accepted <= 2 * learners.MAX_LENGTH:
            try:
                broker.publish_job(channel, settings, f"R-{accepted:04}", "Normal guest")
            except pika.exceptions.NackError:
                break
            accepted += 1
    assert learners.MAX_LENGTH <= accepted <= learners.MAX_LENGTH + 1
    # What the learner sees: the registration is saved, and waits for the queue.
    registration_id, queued = queueing.register(db, settings, "Mina Patel")
    assert queued is queueing.Outcome.UNREACHABLE  # the full queue refused it
    assert registration_id in [row[0] for row in db.execute("SELECT id FROM registrations")]
    with queueing.publisher(settings) as channel:
        assert broker.ready_count(channel, settings.queue) == accepted
        method, _, body = channel.basic_get(settings.queue)
        assert method.redelivered is False and json.loads(body)["id"] == "R-0000"
        channel.basic_ack(method.delivery_tag)
    assert queueing.register(db, settings, "Normal guest")[1] is queueing.Outcome.QUEUED  # room again
    db.close()


def test_one_connection_one_channel_one_queue_too_many_is_refused(course):
    limits = learners.Limits()
    url = course.provision(course.learner()).amqp_url
    connections = [connect(url) for _ in range(limits.max_connections)]
    try:
        assert f"connection limit ({limits.max_connections}) is reached" in refused(url)
        channel = connections[0].channel()  # counted among the user's channels
        for _ in range(limits.max_channels - 1):
            connections[1].channel()
        # The one too many closes its whole connection, not only the channel. ("(64)" on 3.x, "64" on 4.x)
        too_many_channels = f"channels .* reached the maximum allowed user limit of \\(?{limits.max_channels}\\b"
        with pytest.raises(pika.exceptions.ConnectionClosedByBroker, match=too_many_channels):
            connections[1].channel()
        broker.declare_queues(channel, Settings(amqp_url=url, db_path="", queue="nightjar.tickets"))
        for number in range(limits.max_queues - 2):
            channel.queue_declare(f"mine.{number}", durable=True)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker,
                           match=f"queue limit in vhost .* \\({limits.max_queues}\\) is reached"):
            channel.queue_declare("one.too.many", durable=True)
    finally:
        for connection in connections:
            if connection.is_open:
                connection.close()


def test_provisioning_again_changes_nothing_and_keeps_the_login(course):
    ada = course.learner()
    access = course.provision(ada)
    before = course.state(ada)
    connection = connect(access.amqp_url)
    assert course.provision(ada) == access
    assert course.state(ada) == before
    assert before[f"users/{ada.rabbit_user}"]["tags"] == ["management"]
    connection.channel().close()  # still open, still allowed
    connection.close()
    connect(access.amqp_url).close()


def test_remove_leaves_nothing(course):
    ada = course.learner()
    access = course.provision(ada)
    connection = connect(access.amqp_url)
    broker.declare_queues(connection.channel(), Settings(amqp_url=access.amqp_url, db_path="", queue="nightjar.tickets"))
    learners.remove(course.admin, ada)
    learners.remove(course.admin, ada)  # again: nothing to do, no error
    for path in (f"vhosts/{ada.vhost}", f"users/{ada.rabbit_user}"):
        with pytest.raises(AdminError) as missing:
            course.get(path)
        assert missing.value.status == 404
    assert ada.vhost not in [v["name"] for v in course.get("vhosts")]
    assert ada.rabbit_user not in [u["name"] for u in course.get("users")]
    assert not [q for q in course.get("queues") if q["vhost"] == ada.vhost]
    assert not [p for p in course.get("permissions") if ada.rabbit_user == p["user"]]
    assert not [limit for limit in course.get("user-limits") if limit["user"] == ada.rabbit_user]
    deadline = time.monotonic() + 10
    with pytest.raises(pika.exceptions.AMQPError):  # the broker closes it
        while time.monotonic() < deadline:
            connection.process_data_events(time_limit=0.2)
    assert "ACCESS_REFUSED" in refused(access.amqp_url)


def test_the_command_line_provisions_and_removes(course, grading_broker, tmp_path):
    env = dict(os.environ, NIGHTJAR_COURSE_ADMIN_URL=grading_broker.url,
               NIGHTJAR_COURSE_MANAGEMENT_URL=grading_broker.management_url,
               NIGHTJAR_COURSE_SECRET_FILE=str(tmp_path / "learner-secret"))
    name = course.learner("Zoë").hub_name

    def run(*args):
        return subprocess.run([sys.executable, "-m", "course.learners", *args], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=30)

    first, again = run("provision", name), run("provision", name)
    assert (first.returncode, first.stderr) == (0, "") and first.stdout == again.stdout
    [url] = first.stdout.splitlines()
    assert urlsplit(url).port == urlsplit(grading_broker.url).port
    connect(url).close()
    removed = run("remove", name)
    learner = learners.names(name)
    assert (removed.returncode, removed.stdout) == (
        0, f"Removed vhost {learner.vhost} and user {learner.rabbit_user}.\n")
    assert "ACCESS_REFUSED" in refused(url)
    del env["NIGHTJAR_COURSE_ADMIN_URL"]
    unset = run("provision", name)
    assert unset.returncode == 1 and "NIGHTJAR_COURSE_ADMIN_URL" in unset.stderr


def test_the_kubernetes_values_call_what_course_learners_has():
    """course/kubernetes/values.yaml is not run here (no Kubernetes); its hub Python at least
    compiles, and uses only what course.learners has, with the hook that provisions."""
    yaml = pytest.importorskip("ruamel.yaml", reason="ruamel.yaml comes with check-jsonschema").YAML
    values = yaml(typ="safe", pure=True).load((ROOT / "course" / "kubernetes" / "values.yaml").read_text())
    hub_python = "\n".join(values["hub"]["extraConfig"][key] for key in sorted(values["hub"]["extraConfig"]))
    tree = ast.parse(hub_python)
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "learners"}
    assert {"names", "provision", "remove", "from_environment"} <= used
    assert {name for name in used if not hasattr(learners, name)} == set()
    assert "c.KubeSpawner.pre_spawn_hook = provision_learner" in hub_python.splitlines()
    assert values["hub"]["config"]["JupyterHub"]["cleanup_servers"] is False and values["cull"]["enabled"]
