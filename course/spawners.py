"""The course's spawner: each learner's lab one container of the learner image (one service on a
Docker swarm), with the learner's vhost, network and volume around it.

jupyterhub_config.py configures the hub with it (spawner_class, pre_spawn_hook); this module
holds the code:
- before_start(): before a lab starts, the learner's vhost and RabbitMQ user on the course's
  broker (course/learners.py), and a network of the learner's own that joins the lab to the hub
  and the broker, and to nothing else;
- CourseSpawner: DockerSpawner (or SwarmLab, SwarmSpawner with what a lab needs) that removes
  the learner's vhost, network and volume with the learner;
- rejoin_learner_networks(): a hub container made anew joins the running labs' networks.

Its settings are the hub's environment (jupyterhub_config.py lists them).
"""

import asyncio
import ipaddress
import os
import threading

import docker
from docker.types import Mount
from dockerspawner import DockerSpawner, SwarmSpawner

from course import learners

env = os.environ
PROJECT = env.get("NIGHTJAR_COURSE_PROJECT", "nightjar-course")
HUB = env.get("NIGHTJAR_COURSE_HUB", f"{PROJECT}-hub")
BROKER = env.get("NIGHTJAR_COURSE_BROKER", f"{PROJECT}-broker")
WORK = "/home/labex/project"  # the learner's volume: ticket-desk/ and the live database
SWARM = env.get("NIGHTJAR_COURSE_SPAWNER") == "swarm"
PIDS = int(env.get("NIGHTJAR_COURSE_PIDS", "256"))
# A lab ends 0.2 s after its SIGTERM; the swarm would kill it after 10 s.
TASK_END_SECONDS = 30
TASK_ENDED = {"complete", "shutdown", "failed", "rejected", "orphaned", "remove"}


class SwarmLab(SwarmSpawner):
    """SwarmSpawner, with what a lab needs that dockerspawner 14 does not give a service: the
    learner's named volume, the pids limit, and the hub finding a lab started again."""

    @property
    def mounts(self):
        # SwarmSpawner mounts every volume as a bind mount, which fails for a named volume.
        return [Mount(target=volume["bind"], source=source, read_only=volume["mode"] == "ro",
                      type="bind" if source.startswith("/") else "volume",
                      driver_config=None if source.startswith("/") else self.mount_driver_config)
                for source, volume in self.volume_binds.items()]

    def docker(self, method, *args, **kwargs):
        # docker-py's Resources knows no pids limit; the engine's API (1.41) takes it.
        if method == "create_service":
            kwargs["task_template"]["Resources"].setdefault("Limits", {})["Pids"] = PIDS
        return super().docker(method, *args, **kwargs)

    async def get_ip_and_port(self):
        # The task's own address on the learner's network, as DockerSpawner gives a container's.
        # SwarmSpawner gives the service's name, and after a stop and a start the hub's HTTP
        # client kept reaching the address the name had before, the old task's.
        task = await self.get_task()
        for attachment in task.get("NetworksAttachments", []):
            if attachment["Network"]["Spec"]["Name"] == self.network_name:
                return attachment["Addresses"][0].split("/")[0], self.port
        raise RuntimeError(f"{self.service_name}'s task is not on the network {self.network_name}")

    async def remove_object(self):
        # Removing a service only asks its task to stop, and its container goes on for a while on
        # the learner's volume. The lab is stopped once that container has ended, so that a lab
        # started again never runs beside the one stopping.
        task = await self.get_task()
        await super().remove_object()
        deadline = asyncio.get_running_loop().time() + TASK_END_SECONDS
        while task and await self.task_may_run(task["ID"]):
            if asyncio.get_running_loop().time() > deadline:
                self.log.warning("%s's task %s has not ended in %d s", self.service_name, task["ID"],
                                 TASK_END_SECONDS)
                return
            await asyncio.sleep(0.25)

    async def task_may_run(self, task_id):
        """Whether the task is still listed (the swarm drops a removed service's task a few
        seconds after its container ended) in a state where its container may run."""
        return any(task["Status"]["State"] not in TASK_ENDED
                   for task in await self.docker("tasks", filters={"id": task_id}))


Base = SwarmLab if SWARM else DockerSpawner


class CourseSpawner(Base):
    """DockerSpawner (or SwarmSpawner) with the course's names, and the learner's vhost, network
    and volume removed with the learner."""

    async def delete_forever(self):
        learner = learners.names(self.user.name, PROJECT)
        admin, *_ = learners.from_environment()
        learners.remove(admin, learner)
        client = docker.from_env()
        try:
            client.volumes.get(learner.volume).remove(force=True)
        except docker.errors.NotFound:
            pass
        remove_learner_network(client, learner)
        await super().delete_forever()


def network_of(learner):
    return f"{PROJECT}-{learner.slug}"


# A lab's bridge network takes 16 addresses of these, not a pool of the engine's own: Docker's
# default pools hold about 30 networks, and the 31st lab would not start. (A swarm's overlay
# networks come from the swarm's own pool, 10.0.0.0/8 in /24s.)
SUBNETS = ipaddress.ip_network(env.get("NIGHTJAR_COURSE_SUBNETS", "10.77.0.0/16"))
LAB_SUBNET_PREFIX = 28


NEW_NETWORKS = threading.Lock()  # labs starting at once must not pick the same free addresses


def join_learner_network(learner):
    """The learner's own network, with the hub and the broker on it and no other lab."""
    client = docker.from_env()
    name = network_of(learner)
    with NEW_NETWORKS:
        try:
            network = client.networks.get(name)
        except docker.errors.NotFound:
            network = new_learner_network(client, name)
    join(network)
    return name


def new_learner_network(client, name):
    labels = {"nightjar.course": PROJECT}
    if SWARM:  # an overlay network the hub's and the broker's containers can join
        return client.networks.create(name, driver="overlay", attachable=True, labels=labels)
    for attempt in (1, 2):  # another hub on this engine may take the same addresses meanwhile
        ipam = docker.types.IPAMConfig(pool_configs=[docker.types.IPAMPool(subnet=free_subnet(client))])
        try:
            return client.networks.create(name, driver="bridge", ipam=ipam, labels=labels)
        except docker.errors.APIError as error:
            if attempt == 2 or "overlap" not in str(error):
                raise


def free_subnet(client):
    """The first /28 of SUBNETS that no network of this engine overlaps."""
    taken = [ipaddress.ip_network(config["Subnet"]) for network in client.api.networks()
             for config in (network.get("IPAM") or {}).get("Config") or [] if "Subnet" in config]
    taken = [subnet for subnet in taken if subnet.version == SUBNETS.version]
    for subnet in SUBNETS.subnets(new_prefix=LAB_SUBNET_PREFIX):
        if not any(subnet.overlaps(other) for other in taken):
            return str(subnet)
    raise RuntimeError(f"no addresses left in NIGHTJAR_COURSE_SUBNETS ({SUBNETS}) for another lab's network")


def join(network):
    network.reload()
    joined = {container["Name"] for container in (network.attrs.get("Containers") or {}).values()}
    for container in (HUB, BROKER):
        if container not in joined:
            network.connect(container, aliases=[container])


def remove_learner_network(client, learner):
    """The learner's network, its addresses free again. Docker keeps a network that still has
    containers on it, and the hub and the broker stay on it after the lab has stopped."""
    try:
        network = client.networks.get(network_of(learner))
    except docker.errors.NotFound:
        return
    for container in (HUB, BROKER):
        try:
            network.disconnect(container, force=True)
        except docker.errors.APIError:  # not on it (a hub made anew joins running labs' only)
            pass
    network.remove()


def rejoin_learner_networks():
    """A hub container made anew (an upgrade, `compose up` after a change) is on none of the
    running labs' networks: it joins them again as it starts, and finds its labs."""
    for network in docker.from_env().networks.list(filters={"label": f"nightjar.course={PROJECT}"}):
        join(network)



async def before_start(spawner):
    """The learner's vhost, user and network; the lab's names and its environment. The broker's
    and Docker's APIs are called from a thread: meanwhile the hub's one event loop serves the
    other learners (20 arriving in a minute waited for each other's labs)."""
    learner = learners.names(spawner.user.name, PROJECT)
    admin, secret, _, _ = learners.from_environment()
    access = await asyncio.to_thread(learners.provision, admin, learner, secret, host=BROKER, port=5672)
    spawner.network_name = await asyncio.to_thread(join_learner_network, learner)
    spawner.object_name = learner.container
    spawner.volumes = {learner.volume: WORK}
    spawner.environment.update({
        "NIGHTJAR_AMQP_URL": access.amqp_url,
        # Grade: the course's service, through the hub's proxy (course/service.py).
        "NIGHTJAR_CONSOLE_GRADER": f"http://{HUB}:8000/services/nightjar/",
        "NIGHTJAR_QUEUE": "nightjar.tickets",
        "NIGHTJAR_MANAGEMENT_URL": f"http://{BROKER}:15672/",
        "NIGHTJAR_CONSOLE_ACTIVITY_SECONDS": env.get("NIGHTJAR_COURSE_ACTIVITY_SECONDS", "30"),
        # off for a graded course: no "Show the solution" nor "Solve unit N" in the labs
        "NIGHTJAR_CONSOLE_SOLUTIONS": env.get("NIGHTJAR_COURSE_SOLUTIONS", "on"),
    })
