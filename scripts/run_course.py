"""make course / make course-down: a demo course on this machine's Docker engine.

    python3 scripts/run_course.py up      build the learner image, start the hub and the course's
                                      broker (course/compose.yaml), print the hub's address and
                                      the instructor's first login
    python3 scripts/run_course.py down    stop every learner's lab and the course (volumes stay:
                                      `up` again brings back every learner's files)

The secrets live under var/course/ (NIGHTJAR_COURSE_VAR; mode 0600): api-token (the hub's
course-admin service: scripts and tests drive the course through JupyterHub's
REST API with it), broker-password, instructor-password, crypt-key (JUPYTERHUB_CRYPT_KEY,
which encrypts the users' auth_state), and lti/ (the course's LTI tool key, which the course's
service makes on its first start). Settings: the NIGHTJAR_COURSE_* and NIGHTJAR_LTI_* variables
(course/compose.yaml), NIGHTJAR_COURSE_PORT (the
hub on 127.0.0.1, default 8800), and the lab's own NIGHTJAR_PYTHON_IMAGE,
NIGHTJAR_DEBIAN_IMAGE and NIGHTJAR_COURSE_RABBITMQ_IMAGE for the base images.
Standard library only.
"""

import json
import os
import secrets
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from nightjar import compose  # noqa: E402
from nightjar.keyfile import read_or_create  # noqa: E402
from course.learners import COURSE_NAME  # noqa: E402  (the course's name is in its labs' names)

COMPOSE_FILE = ROOT / "course" / "compose.yaml"
READY_SECONDS = 180


def var(env):
    """The course's own folder of secrets: NIGHTJAR_COURSE_VAR, else var/course."""
    return Path(env.get("NIGHTJAR_COURSE_VAR") or ROOT / "var" / "course")


def settings(environ):
    """The environment Compose and the hub get: the caller's, plus the course's secrets."""
    env = dict(environ)
    folder = var(env)
    folder.mkdir(parents=True, exist_ok=True)
    read_or_create(folder / "api-token", lambda: secrets.token_hex(32))
    env["NIGHTJAR_COURSE_API_TOKEN_FILE"] = str(folder / "api-token")
    for name, kept in (("NIGHTJAR_COURSE_BROKER_PASSWORD", "broker-password"),
                       ("NIGHTJAR_FARM_PASSWORD", "farm-password"),
                       ("NIGHTJAR_COURSE_SERVICE_TOKEN", "service-token")):
        env[name] = read_or_create(folder / kept, lambda: secrets.token_urlsafe(24))
    env["NIGHTJAR_COURSE_CRYPT_KEY"] = read_or_create(folder / "crypt-key", lambda: secrets.token_hex(32))
    (folder / "lti").mkdir(mode=0o700, exist_ok=True)
    env["NIGHTJAR_COURSE_LTI_FOLDER"] = str(folder / "lti")
    return env


def shown(path):
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def project(env):
    return env.get("NIGHTJAR_COURSE_PROJECT") or "nightjar-course"


def hub_url(env):
    return f"http://127.0.0.1:{env.get('NIGHTJAR_COURSE_PORT') or 8800}"


def compose_command(env):
    # The grading host comes from the lab's compose.yaml, where it is of the profile "farm".
    return [*compose.choose(env), "-p", project(env), "-f", str(COMPOSE_FILE), "--profile", "farm"]


def run(command, env, what):
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{what} failed (status {done.returncode}); its output is above.")
    return done.stdout


def wait_for_hub(env):
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(hub_url(env) + "/hub/api/", timeout=3) as answer:
                return json.load(answer)["version"]
        except (OSError, ValueError, KeyError):
            time.sleep(1)
    raise SystemExit(f"The hub did not answer on {hub_url(env)} within {READY_SECONDS} s:"
                     f" see `{' '.join(compose_command(env))} logs hub`.")


def sign_up(env, name, password):
    """Sign `name` up through NativeAuthenticator's own form (the instructor is an admin, so
    authorized at once). An existing user's sign-up changes nothing."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
    url = hub_url(env) + "/hub/signup"
    with opener.open(url, timeout=10) as page:
        text = page.read().decode()
    marker = 'name="_xsrf" value="'
    xsrf = text[text.index(marker) + len(marker):].split('"', 1)[0] if marker in text else ""
    form = urllib.parse.urlencode({"_xsrf": xsrf, "username": name, "signup_password": password,
                                   "signup_password_confirmation": password}).encode()
    opener.open(urllib.request.Request(url, data=form), timeout=10).read()


def up(environ):
    env = settings(environ)
    if not COURSE_NAME.fullmatch(project(env)):
        raise SystemExit(f"NIGHTJAR_COURSE_PROJECT is {project(env)!r}: a course's name is 1 to 19"
                         " lower-case letters, digits and '-', starting with a letter.")
    if env.get("NIGHTJAR_COURSE_SPAWNER") == "swarm" and not swarm_manager(env):
        raise SystemExit("NIGHTJAR_COURSE_SPAWNER=swarm needs this Docker engine to be a swarm manager:"
                         " `docker swarm init --advertise-addr ADDRESS` makes a one-node swarm.")
    image = env.get("NIGHTJAR_LEARNER_IMAGE") or "nightjar-course/learner"
    python_image = env.get("NIGHTJAR_PYTHON_IMAGE") or "python:3.11.13-slim-bookworm"
    print(f"Building the learner image {image}")
    run(["docker", "build", "-q", "--build-arg", f"PYTHON_IMAGE={python_image}",
         "-f", "course/learner.Dockerfile", "-t", image, "."], env, "Building the learner image")
    print("Starting the course's hub and RabbitMQ")
    run([*compose_command(env), "up", "-d", "--build"], env, "Starting the course")
    version = wait_for_hub(env)
    instructor = env.get("NIGHTJAR_COURSE_ADMIN") or "instructor"
    lines = [f"The course's hub (JupyterHub {version}): {hub_url(env)}/hub/login"]
    if (env.get("NIGHTJAR_COURSE_AUTHENTICATOR") or "native") == "native":
        kept = var(env) / "instructor-password"
        password = read_or_create(kept, lambda: secrets.token_urlsafe(12))
        sign_up(env, instructor, password)
        lines.append(f"Instructor's first login: user {instructor}, password {password}"
                     f" (kept in {shown(kept)})")
        lines.append(f"Learners sign up at {hub_url(env)}/hub/signup; the instructor authorizes"
                     f" them at {hub_url(env)}/hub/authorize")
    lines.append(f"The hub's API token (admin service course-admin): {shown(var(env) / 'api-token')}")
    lines.append(f"LTI 1.3 (docs/instructors/lms.md): the tool's configuration {hub_url(env)}/hub/lti13/config,"
                 f" its JWKS {hub_url(env)}/services/nightjar/lti/jwks;"
                 + (" launches from the LMS are on." if env.get("NIGHTJAR_LTI_ISSUER")
                    else " set the NIGHTJAR_LTI_* settings to take launches."))
    print("\n".join(lines))


def swarm_manager(env):
    """Whether this Docker engine manages a swarm (NIGHTJAR_COURSE_SPAWNER=swarm needs one)."""
    answer = run(["docker", "info", "--format", "{{.Swarm.ControlAvailable}}"], env, "Asking the engine")
    return answer.strip() == "true"


def remove_services(env, label):
    """Under SwarmSpawner the labs are swarm services: remove them, and wait until their tasks'
    containers are gone (they hold the labs' networks and volumes). Their names."""
    if not swarm_manager(env):
        return []
    services = run(["docker", "service", "ls", "--format", "{{.Name}}", "--filter", f"label={label}"],
                   env, "Listing the labs' services").split()
    if services:
        run(["docker", "service", "rm", *services], env, "Removing the labs' services")
    deadline = time.monotonic() + 60
    for service in services:
        while run(["docker", "ps", "-aq", "--filter", f"label=com.docker.swarm.service.name={service}"],
                  env, "Listing a service's containers").strip() and time.monotonic() < deadline:
            time.sleep(0.5)
    return services


def down(environ):
    env = settings(environ)
    label = f"nightjar.course={project(env)}"
    services = remove_services(env, label)
    labs = run(["docker", "ps", "-aq", "--filter", f"label={label}"], env, "Listing the labs").split()
    if labs:
        run(["docker", "rm", "-f", *labs], env, "Stopping the labs")
    run([*compose_command(env), "down"], env, "Stopping the course")
    networks = run(["docker", "network", "ls", "-q", "--filter", f"label={label}"], env,
                   "Listing the labs' networks").split()
    if networks:
        run(["docker", "network", "rm", *networks], env, "Removing the labs' networks")
    print(f"Stopped the course and {len(services) + len(labs)} lab(s); every learner's files stay"
          " in their volume.")


def main(argv):
    if argv not in (["up"], ["down"]):
        print("usage: python3 scripts/run_course.py up|down", file=sys.stderr)
        return 2
    if not compose.engine_answers():
        print(compose.NO_ENGINE.replace("run the lab without containers with 'make local'",
                                        "a course needs one"), file=sys.stderr)
        return 1
    (up if argv == ["up"] else down)(os.environ)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
