"""The course's JupyterHub: every learner's lab, behind the hub's login (docs/instructors/run-a-course.md).

JupyterHub logs learners in, starts and culls their labs, and proxies them;
this file only configures it, with the spawner of course/spawners.py:
- each learner's lab is one container of the learner image
  (course/learner.Dockerfile), whose single-user server is the lab console;
- before it starts, the learner's vhost and RabbitMQ user on the course's
  broker are made (course/learners.py), and a network of the learner's own
  joins the lab to the hub and the broker, and to nothing else;
- the learner's files and live database are a volume of their own, kept
  when the lab stops, is culled or killed; deleting the user removes them.

Settings (environment, set by course/compose.yaml):
  NIGHTJAR_LEARNER_IMAGE       the learner image
  NIGHTJAR_COURSE_SPAWNER      docker (one Docker engine) or swarm (a Docker swarm)
  NIGHTJAR_COURSE_PROJECT      the prefix of every Docker object the course makes
  NIGHTJAR_COURSE_HUB          the hub's container name (joined to each learner's network)
  NIGHTJAR_COURSE_BROKER       the broker's container name, and its host name for the labs
  NIGHTJAR_COURSE_ADMIN_URL    the broker's administrator (course/learners.py)
  NIGHTJAR_COURSE_MEMORY, NIGHTJAR_COURSE_CPUS, NIGHTJAR_COURSE_PIDS   a lab's limits
  NIGHTJAR_COURSE_IDLE_SECONDS the idle culler's limit
  NIGHTJAR_COURSE_ADMIN        the instructor's hub user (an admin)
  NIGHTJAR_COURSE_AUTHENTICATOR  native (default: the login form, and LTI 1.3) or dummy (the tests only)
  NIGHTJAR_LTI_ISSUER, _CLIENT_ID, _DEPLOYMENT_ID, _AUTH_URL, _JWKS_URL   the LMS's LTI 1.3 values
  NIGHTJAR_COURSE_SOLUTIONS    off: the labs offer no solution (a graded course)
  NIGHTJAR_COURSE_SUBNETS      the addresses of the labs' networks (one Docker engine), 16 a lab
"""

import os
import sys

from docker.types import RestartPolicy

sys.path.insert(0, "/srv/nightjar")
from course import learners  # noqa: E402  (course/learners.py: names, vhosts, users)
from course import lti, lti_login  # noqa: E402  (the course's login: its form, and LTI 1.3 launches)
from course import spawners  # noqa: E402  (course/spawners.py: the labs, their networks and volumes)

c = get_config()  # noqa: F821  (JupyterHub's config loader defines it)
env = os.environ
PROJECT, HUB, SWARM, PIDS = spawners.PROJECT, spawners.HUB, spawners.SWARM, spawners.PIDS
SERVICE_URL = f"http://{PROJECT}-service:9000"  # the course's service (course/service.py)

# ---- the hub and its proxy ------------------------------------------------------------
c.JupyterHub.ip = "0.0.0.0"        # in the hub's container; compose publishes it on 127.0.0.1
c.JupyterHub.port = 8000
c.JupyterHub.hub_ip = "0.0.0.0"
c.JupyterHub.hub_connect_ip = HUB  # the labs reach the hub's API by its container name
c.JupyterHub.db_url = "sqlite:////srv/jupyterhub/data/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = "/srv/jupyterhub/data/jupyterhub_cookie_secret"
# On a tmpfs (compose.yaml): a hub container started again must not take another process of its
# own for the proxy of its last run.
c.ConfigurableHTTPProxy.pid_file = "/run/jupyterhub/proxy.pid"
# A hub that restarts leaves the labs running; they are found again in its database.
c.JupyterHub.cleanup_servers = False
c.JupyterHub.cleanup_proxy = False
# Activity comes from what the learner does (the console tells the hub: nightjar_console/hub.py),
# never from the proxy, where an open tab's websocket pings would keep an abandoned lab alive.
c.JupyterHub.last_activity_interval = 0


def landing_page(handler):
    """Where a login lands: course staff on the instructor's page; a learner in their lab ("" is
    the hub's own default, which starts the lab if it is not running)."""
    user = handler.current_user
    if user and (user.admin or learners.STAFF_GROUP in {group.name for group in user.groups}):
        return "/services/nightjar/"
    return ""


c.JupyterHub.default_url = landing_page
# A lab that stopped (culled, killed, out of memory) starts again when its learner comes back.
c.JupyterHub.implicit_spawn_seconds = 1
c.Spawner.poll_interval = 10  # seconds: how soon the hub sees that a lab's container died

# ---- who logs in --------------------------------------------------------------------------
instructor = env.get("NIGHTJAR_COURSE_ADMIN", "instructor")
if env.get("NIGHTJAR_COURSE_AUTHENTICATOR") == "dummy":  # the tests' stand-in, never a course's
    c.JupyterHub.authenticator_class = "dummy"
    c.DummyAuthenticator.password = env["NIGHTJAR_COURSE_TEST_PASSWORD"]
else:
    # Learners sign up; the instructor authorizes them (/hub/authorize) and logs in there too. Beside
    # it, LTI 1.3 launches from the course's LMS once NIGHTJAR_LTI_* are set (course/lti_login.py:
    # one class, NativeAuthenticator and LTI13Authenticator). Or another login
    # (docs/instructors/run-a-course.md: OAuthenticator).
    c.JupyterHub.authenticator_class = lti_login.CourseLogin
    c.NativeAuthenticator.open_signup = env.get("NIGHTJAR_COURSE_OPEN_SIGNUP") == "yes"
    c.NativeAuthenticator.minimum_password_length = 10
    # The LMS's values, from its registration of the tool (docs/instructors/lms.md).
    c.LTI13Authenticator.issuer = env.get("NIGHTJAR_LTI_ISSUER", "")
    c.LTI13Authenticator.client_id = lti_login.several(env.get("NIGHTJAR_LTI_CLIENT_ID", ""))
    c.CourseLogin.deployment_id = lti_login.several(env.get("NIGHTJAR_LTI_DEPLOYMENT_ID", ""))
    c.LTI13Authenticator.authorize_url = env.get("NIGHTJAR_LTI_AUTH_URL", "")
    c.LTI13Authenticator.jwks_endpoint = env.get("NIGHTJAR_LTI_JWKS_URL", "")
    c.LTI13Authenticator.tool_name = "Nightjar ticket desk lab"
    c.LTI13Authenticator.tool_description = "A hands-on lab on at-least-once delivery with RabbitMQ"
    c.CourseLogin.jwks_path = "services/nightjar/" + lti.JWKS_PATH  # the course's service serves it
    c.JupyterHub.template_paths = ["/srv/nightjar/course/templates/hub"]  # the page a framed launch gets
    # Each launch goes to the course's service, which keeps them all; the user's auth_state (the
    # launch's id_token, encrypted with JUPYTERHUB_CRYPT_KEY) keeps only the last.
    c.Authenticator.post_auth_hook = lti_login.record_launch
    c.CourseLogin.launch_records_url = f"{SERVICE_URL}/services/nightjar/lti/launches"
    c.CourseLogin.launch_records_token = env["NIGHTJAR_COURSE_SERVICE_TOKEN"]
    c.Authenticator.enable_auth_state = True
    # The group course-staff follows a launch's roles; a login with the form leaves groups as they are.
    c.Authenticator.manage_groups = True
c.Authenticator.admin_users = {instructor}
lti_login.native_login_on_jupyterhub_6()  # NativeAuthenticator's login form on JupyterHub 6
c.Authenticator.allow_all = True  # whoever the authenticator lets in (NativeAuthenticator: authorized)

# ---- the labs (course/spawners.py) -------------------------------------------------------
# A hub container made anew (an upgrade, `compose up` after a change) joins the running labs'
# networks as it starts, and finds its labs.
spawners.rejoin_learner_networks()

c.JupyterHub.spawner_class = spawners.CourseSpawner
c.Spawner.pre_spawn_hook = spawners.before_start
c.DockerSpawner.image = env.get("NIGHTJAR_LEARNER_IMAGE", "nightjar-course/learner")
c.DockerSpawner.cmd = ["python3", "-S", "/app/course/learner.py"]  # -S: the standard library only, a few MiB less
c.DockerSpawner.port = 8888
c.DockerSpawner.use_internal_ip = True
if not SWARM:  # (a service's containers always go with it)
    c.DockerSpawner.remove = True       # the container goes when the lab stops; its volume stays
# Built here (make course), never pulled; a swarm's nodes pull it themselves (docs/operators/swarm.md).
c.DockerSpawner.pull_policy = "skip" if SWARM else "never"
c.DockerSpawner.http_timeout = 60
c.DockerSpawner.start_timeout = 120
c.Spawner.mem_limit = env.get("NIGHTJAR_COURSE_MEMORY", "384M")
c.Spawner.cpu_limit = float(env.get("NIGHTJAR_COURSE_CPUS", "1"))
c.DockerSpawner.extra_host_config = {"pids_limit": PIDS, "init": True}
# Under swarm each lab is a service of one task (spawners.SwarmLab: the same limits). A task that
# ends (killed, out of memory) is not restarted by the swarm at another address behind the hub's
# back: the hub sees the lab stopped, and the next visit starts it again, as with DockerSpawner.
c.SwarmSpawner.extra_container_spec = {"init": True}
c.SwarmSpawner.extra_task_spec = {"restart_policy": RestartPolicy(condition="none")}
# Every lab the course starts carries its label: make course-down finds them by it.
c.DockerSpawner.extra_create_kwargs = {"labels": {"nightjar.course": PROJECT}}

# ---- the idle culler: stops a lab nobody has used for a while (its files stay) --------------
c.JupyterHub.load_roles = [{
    # Learners may use the course's service (their lab's token holds what its owner may, and
    # no more)...
    "name": "user",
    "scopes": ["self", "access:services!service=nightjar"],
}, {
    # ... and a lab's own token (its console's) may ask it to grade.
    "name": "server",
    "scopes": ["users:activity!user", "access:servers!server", "access:services!service=nightjar"],
}, {
    # The course's service reads who the learners are and a running lab's handler.py.
    "name": "nightjar-service",
    "scopes": ["list:users", "read:users", "read:users:groups", "read:servers", "access:servers"],
    "services": ["nightjar"],
}, {
    "name": "idle-culler",
    "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
    "services": ["idle-culler"],
}, {
    "name": "course-admin",
    "scopes": ["admin:users", "admin:servers", "tokens", "list:users", "read:users"],
    "services": ["course-admin"],
}]
c.JupyterHub.services = [{
    "name": "nightjar",
    "url": SERVICE_URL,
    "api_token": env["NIGHTJAR_COURSE_SERVICE_TOKEN"],
    "oauth_no_confirm": True,
    "display": True,
}, {
    "name": "idle-culler",
    "command": [sys.executable, "-m", "jupyterhub_idle_culler",
                f"--timeout={env.get('NIGHTJAR_COURSE_IDLE_SECONDS', '3600')}",
                f"--cull-every={env.get('NIGHTJAR_COURSE_CULL_EVERY', '60')}"],
}, {
    # Scripts and tests drive the course through the hub's REST API with this token
    # (make course keeps it in var/course/api-token).
    "name": "course-admin",
    "api_token": open("/srv/jupyterhub/api-token").read().strip(),
}]
