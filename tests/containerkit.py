"""The checker: `container_problems()` lists, one line each, whatever in
compose.yaml and its Dockerfiles disagrees with the repository.

It checks that build contexts and COPY sources exist and are sent, commands
are real entry points (the same ones `make local` runs), environment variables
are ones the code reads, nobody uses RabbitMQ's guest account, ports listen on
127.0.0.1 only, the grader can reach its own broker but never the live one, the
lab console reaches the Workstation's agent and the grader but no broker, and
the farm's grading hosts reach their farm broker and nothing else.
"""

import os
import re
from urllib.parse import urlsplit

from containerfiles import (
    ROOT, Image, amqp_urls, argument, code_env_names, dockerignore_rules, ignored, local_modules,
    module_folder, mount_for, read, service_command, service_environment, service_networks,
    service_ports, tracked_files)

LIVE_BROKER, SITE, WORKSTATION, CONSOLE = "rabbitmq", "site", "workstation", "console"
GRADER, GRADER_BROKER = "grader", "grader-broker"
FARM_BROKER, GRADER_HOST = "farm-broker", "grader-host"
SANDBOX_DOCKERFILE = "grader/sandbox.Dockerfile"
AGENT, GRADING_SERVICE = "nightjar_console.agent", "grader.service"
LEARNER_FOLDER = "/home/labex/project/ticket-desk"


# --------------------------------------------------------------------------
# The checker

def container_problems(compose, overrides=None, env_names=None, site_modules=None):
    """Everything wrong with compose.yaml and its Dockerfiles, one line each ([] when right).

    overrides maps a repository path (e.g. "grader/Dockerfile", ".dockerignore")
    to substitute text, so tests can feed broken copies.
    """
    overrides = overrides or {}
    env_names = code_env_names() if env_names is None else env_names
    site_modules = local_modules() if site_modules is None else site_modules
    problems = []
    services = compose.get("services") or {}

    for key in ("version", "name"):
        if key in compose:
            problems.append(f"top-level '{key}:' key: Debian's docker-compose 1.29 rejects 'name:',"
                            " and 'version:' is obsolete in the Compose Specification")
    for role in (LIVE_BROKER, SITE, WORKSTATION, CONSOLE, GRADER_BROKER, GRADER, FARM_BROKER, GRADER_HOST):
        if role not in services:
            problems.append(f"service '{role}' is missing")
    if problems:
        return problems

    images = {}
    for name, service in services.items():
        problems += image_problems(name, service, overrides, images, env_names)
        for host_ip, port in service_ports(service):
            if host_ip != "127.0.0.1":
                problems.append(f"{name}: port {port} is not bound to 127.0.0.1")
        problems += guest_problems(name, service)
        if "build" in service:
            for variable in service_environment(service):
                if variable.startswith("NIGHTJAR_") and variable not in env_names:
                    problems.append(f"{name}: environment variable {variable} is read by no code")

    for broker in (LIVE_BROKER, GRADER_BROKER, FARM_BROKER):
        if not (services[broker].get("healthcheck") or {}).get("test"):
            problems.append(f"{broker}: no health check")
    for name in (SITE, WORKSTATION):
        condition = ((services[name].get("depends_on") or {}).get(LIVE_BROKER) or {})
        if not isinstance(condition, dict) or condition.get("condition") != "service_healthy":
            problems.append(f"{name}: does not wait for {LIVE_BROKER} to be healthy (depends_on condition)")
    # The console's Grade button needs the grader running: `docker compose up` starts them all.
    for name in (LIVE_BROKER, SITE, WORKSTATION, CONSOLE, GRADER, GRADER_BROKER):
        if services[name].get("profiles"):
            problems.append(f"{name}: has a profile, so `docker compose up` would not start it")
    if services[GRADER_BROKER].get("ports"):
        problems.append(f"{GRADER_BROKER}: publishes ports; the grader's broker is private")

    problems += site_problems(services, images, site_modules)
    problems += workstation_problems(services, images, set(compose.get("volumes") or {}))
    problems += grader_problems(services, images)
    problems += console_problems(services, images, compose.get("networks") or {})
    problems += farm_problems(services, compose.get("networks") or {})
    return problems


def farm_problems(services, networks):
    """The grading farm (profile "farm"): hosts on internal networks only, reaching their broker,
    with the capabilities the sandbox needs and no others (grader/in_docker.py's)."""
    from grader.in_docker import CAPABILITIES
    problems = []
    host, broker = services[GRADER_HOST], services[FARM_BROKER]
    for name in (GRADER_HOST, FARM_BROKER):
        if "farm" not in (services[name].get("profiles") or []):
            problems.append(f"{name}: not under the 'farm' profile")
    host_networks = service_networks(host)
    open_networks = sorted(n for n in host_networks if not (networks.get(n) or {}).get("internal"))
    if open_networks:
        problems.append(f"{GRADER_HOST}: on a network with a way out ({', '.join(open_networks)})")
    lab = set().union(*(service_networks(services[n]) for n in (LIVE_BROKER, GRADER_BROKER)))
    if host_networks & lab:
        problems.append(f"{GRADER_HOST}: shares a network with the lab's brokers"
                        f" ({', '.join(sorted(host_networks & lab))})")
    url = argument(service_command(host), "--farm")
    if (urlsplit(url).hostname if url else None) != FARM_BROKER:
        problems.append(f"{GRADER_HOST}: --farm does not point at {FARM_BROKER} ({url})")
    elif not host_networks & service_networks(broker):
        problems.append(f"{GRADER_HOST}: shares no network with {FARM_BROKER}, so it cannot reach it")
    if host.get("cap_drop") != ["ALL"] or sorted(host.get("cap_add") or []) != sorted(CAPABILITIES):
        problems.append(f"{GRADER_HOST}: capabilities are not ALL dropped and the sandbox's"
                        " (grader/in_docker.py) added")
    return problems


def image_problems(name, service, overrides, images, env_names):
    problems = []
    if "image" in service:
        image = service["image"]
        tag = image.rpartition(":")[2] if ":" in image.rpartition("/")[2] else ""
        if "@sha256:" not in image and (not re.match(r"\d+\.\d+\.\d+", tag)):
            problems.append(f"{name}: image {image} is not pinned to a release (x.y.z tag or digest)")
    build = service.get("build")
    if build is None:
        return problems
    build = {"context": build} if isinstance(build, str) else build
    context_rel = os.path.normpath(build.get("context", "."))
    context = ROOT / context_rel
    dockerfile_rel = os.path.normpath(os.path.join(context_rel, build.get("dockerfile", "Dockerfile")))
    if not context.is_dir():
        return problems + [f"{name}: build context {context_rel} does not exist"]
    text = read(dockerfile_rel, overrides)
    if text is None:
        return problems + [f"{name}: {dockerfile_rel} does not exist"]
    image = Image(text, context)
    images[name] = image
    ignore_rel = os.path.normpath(os.path.join(context_rel, ".dockerignore"))
    rules = dockerignore_rules(read(ignore_rel, overrides))
    if not ignored(".env", rules):
        problems.append(f"{name}: {ignore_rel} lets .env (credentials) into the build context")

    for source, _destination, _several in image.copies:
        origin = context / source
        rel_in_context = os.path.normpath(source)
        if not origin.exists():
            problems.append(f"{name}: COPY source {source} does not exist in the build context")
        elif ignored(rel_in_context, rules):
            problems.append(f"{name}: COPY source {source} is excluded by {ignore_rel}")
        else:
            for tracked in tracked_files(os.path.relpath(origin, ROOT)):
                if ignored(os.path.relpath(ROOT / tracked, context), rules):
                    problems.append(f"{name}: {tracked} (under COPY {source}) is excluded by {ignore_rel}")

    keywords = [keyword for keyword, _ in image.instructions]
    froms = [arguments for keyword, arguments in image.instructions if keyword == "FROM"]
    build_args = build.get("args") or {}
    for base in froms:
        bases = [base.split()[0]]
        variable = re.fullmatch(r"\$\{?(\w+)\}?", bases[0])
        if variable:
            # FROM ${PYTHON_IMAGE}: the ARG default, and compose.yaml's default for it.
            arg = variable.group(1)
            bases = [image.args.get(arg, ""), build_args.get(arg, image.args.get(arg, ""))]
            if bases[0] != bases[1]:
                problems.append(f"{name}: compose.yaml's {arg} ({bases[1]}) differs from"
                                f" {dockerfile_rel}'s default ({bases[0]})")
        for chosen in dict.fromkeys(bases):
            if not re.fullmatch(r"python:3\.11\.\d+-slim-bookworm(@sha256:[0-9a-f]{64})?", chosen):
                problems.append(f"{name}: base image {chosen} is not a pinned python:3.11.x-slim-bookworm")
    # The sandbox's image runs as root by design: it builds a sandbox per submission,
    # inside a container that drops every other capability (farm_problems checks that).
    if dockerfile_rel != SANDBOX_DOCKERFILE and (image.user is None
                                                 or image.user.split(":")[0] in ("root", "0")):
        problems.append(f"{name}: {dockerfile_rel} runs as root (no non-root USER)")
    elif "RUN" in keywords and last_index(keywords, "RUN") > last_index(keywords, "USER"):
        problems.append(f"{name}: {dockerfile_rel} has RUN steps after its final USER")
    for variable in image.env:
        if variable.startswith("NIGHTJAR_") and variable not in env_names:
            problems.append(f"{name}: {dockerfile_rel} sets {variable}, which no code reads")
    for keyword, arguments in image.instructions:
        if keyword in ("ENV", "ARG") and re.search(r"PASS|SECRET|TOKEN|KEY", arguments):
            problems.append(f"{name}: {dockerfile_rel} bakes a secret-looking {keyword} into the image")
    code_copies = [index for index, (keyword, arguments) in enumerate(image.instructions)
                   if keyword == "COPY" and "pyproject.toml" not in arguments]
    installs = [index for index, (keyword, arguments) in enumerate(image.instructions)
                if keyword == "RUN" and "pip install" in arguments]
    if not installs or (code_copies and installs[0] > code_copies[0]):
        problems.append(f"{name}: {dockerfile_rel} does not install dependencies before copying code")
    if not any(image.provides(f"{entry}/nightjar/__init__.py") for entry in image.python_path()):
        problems.append(f"{name}: the shared package nightjar is not importable in the image")
    return problems


def last_index(items, item):
    return len(items) - 1 - items[::-1].index(item)


def guest_problems(name, service):
    problems = []
    if "image" in service and service["image"].startswith("rabbitmq"):
        user = service_environment(service).get("RABBITMQ_DEFAULT_USER")
        if not user or user == "guest":
            problems.append(f"{name}: RabbitMQ keeps its guest account (set RABBITMQ_DEFAULT_USER)")
    for url in amqp_urls(service):
        if (urlsplit(url).username or "guest") == "guest":
            problems.append(f"{name}: connects as RabbitMQ's guest account ({url})")
    return problems


def site_problems(services, images, site_modules):
    problems = []
    site = services[SITE]
    command = service_command(site)
    module = command[2] if command[:2] == ["python3", "-m"] and len(command) > 2 else None
    if module is None:
        return [f"{SITE}: command {command} is not `python3 -m MODULE`"]
    if site_modules and module not in site_modules:
        problems.append(f"{SITE}: runs {module}, but `make local` runs {sorted(site_modules)}")
    if not (ROOT / module_folder(module) / "__main__.py").is_file():
        problems.append(f"{SITE}: module {module} has no __main__.py in the repository")
    if SITE in images and not images[SITE].importable(module):
        problems.append(f"{SITE}: module {module} is not importable in the image (COPY and PYTHONPATH)")
    image = images.get(SITE)
    host = service_environment(site).get("NIGHTJAR_SITE_HOST") or (image.env.get("NIGHTJAR_SITE_HOST") if image else None)
    if host != "0.0.0.0":
        problems.append(f"{SITE}: NIGHTJAR_SITE_HOST is not 0.0.0.0, so the published port gets no answer")
    healthchecks = [arguments for keyword, arguments in image.instructions if keyword == "HEALTHCHECK"] if image else []
    site_code = "".join(path.read_text() for path in (ROOT / module_folder(module)).glob("*.py"))
    if "/healthz" not in site_code:
        problems.append(f"{SITE}: the site serves no /healthz for the health check")
    if not any("/healthz" in check for check in healthchecks):
        problems.append(f"{SITE}: the image has no HEALTHCHECK on /healthz")
    return problems


def workstation_problems(services, images, named_volumes):
    problems = []
    workstation = services[WORKSTATION]
    folder = workstation.get("working_dir")
    if folder != LEARNER_FOLDER:
        problems.append(f"{WORKSTATION}: working_dir is {folder}, not {LEARNER_FOLDER}")
    if service_command(workstation)[:3] != ["python3", "-m", AGENT]:
        problems.append(f"{WORKSTATION}: does not run the console's terminal agent ({AGENT})")
    elif WORKSTATION in images and not images[WORKSTATION].importable(AGENT):
        problems.append(f"{WORKSTATION}: module {AGENT} is not importable in the image (COPY and PYTHONPATH)")
    mount = mount_for(workstation, LEARNER_FOLDER)
    if mount is None or mount[0] not in named_volumes:
        problems.append(f"{WORKSTATION}: the learner's folder is not on a named volume of its own")
    if WORKSTATION in images:
        for file in ("handler.py", "worker.py", "desk.py", "common.py"):
            if not images[WORKSTATION].provides(f"{LEARNER_FOLDER}/{file}"):
                problems.append(f"{WORKSTATION}: the image has no {file} in {LEARNER_FOLDER}")
        if images[WORKSTATION].provides(f"{LEARNER_FOLDER}/Dockerfile"):
            problems.append(f"{WORKSTATION}: the learner's folder holds the Dockerfile")
    database = service_environment(workstation).get("NIGHTJAR_DB", "")
    site_database = service_environment(services[SITE]).get("NIGHTJAR_DB", "")
    if database != site_database:
        problems.append(f"{WORKSTATION}: NIGHTJAR_DB {database} differs from the site's {site_database}")
    else:
        ours, theirs = mount_for(workstation, database), mount_for(services[SITE], site_database)
        if not ours or not theirs or ours[0] != theirs[0] or ours[0] not in named_volumes:
            problems.append(f"{WORKSTATION}: the live database is not on the named volume the site uses")
    uids = {name: image.uids | {image.user.split(":")[0]} for name, image in images.items()
            if name in (SITE, WORKSTATION, CONSOLE, GRADER) and image.user}
    if len({frozenset(value) for value in uids.values()}) > 1:
        problems.append(f"the images' users differ ({uids}): the shared database volume needs one uid")
    return problems


def grader_problems(services, images):
    problems = []
    grader = services[GRADER]
    command = grader_options(grader)
    if command is None:
        problems.append(f"{GRADER}: command is not `python3 -m {GRADING_SERVICE} --listen ... -- OPTIONS`")
        command = []
    elif not (ROOT / module_folder("grader") / "__main__.py").is_file():
        problems.append(f"{GRADER}: grader/__main__.py does not exist, so `python3 -m grader` fails")
    elif GRADER in images and not images[GRADER].importable(GRADING_SERVICE):
        problems.append(f"{GRADER}: module {GRADING_SERVICE} is not importable in the image (COPY and PYTHONPATH)")
    if GRADER in images:
        # The grader runs the learner's handler.py beside its own copies of the
        # Workstation's files, found next to the grader package as in the repository.
        image = images[GRADER]
        homes = [entry for entry in image.python_path() if image.provides(f"{entry}/grader/__init__.py")]
        for file in ("worker.py", "common.py"):
            if not any(image.provides(f"{home}/ticket-desk/{file}") for home in homes):
                problems.append(f"{GRADER}: the image has no ticket-desk/{file} beside the grader package")

    live_networks = service_networks(services[LIVE_BROKER])
    shared = service_networks(grader) & live_networks
    if shared:
        problems.append(f"{GRADER}: shares a network with the live broker ({', '.join(sorted(shared))})")
    url = argument(command, "--amqp-url")
    host = urlsplit(url).hostname if url else None
    if host != GRADER_BROKER:
        problems.append(f"{GRADER}: --amqp-url does not point at {GRADER_BROKER} ({url})")
    elif not service_networks(grader) & service_networks(services[GRADER_BROKER]):
        problems.append(f"{GRADER}: shares no network with {GRADER_BROKER}, so it cannot reach it")
    if service_networks(services[GRADER_BROKER]) & live_networks:
        problems.append(f"{GRADER_BROKER}: on a network of the live broker")
    if "--skip-live" not in command and argument(command, "--live-db") is None:
        problems.append(f"{GRADER}: neither --live-db nor --skip-live")

    for flag, owner, owner_path in (("--handler", WORKSTATION, f"{LEARNER_FOLDER}/handler.py"),
                                    ("--live-db", SITE, service_environment(services[SITE]).get("NIGHTJAR_DB", ""))):
        path = argument(command, flag)
        if path is None:
            problems.append(f"{GRADER}: no {flag}")
            continue
        mount = mount_for(grader, path)
        live_mount = mount_for(services[owner], owner_path)
        if mount is None or live_mount is None or mount[0] != live_mount[0]:
            problems.append(f"{GRADER}: {flag} {path} is not on the {owner}'s volume")
        elif not mount[2]:
            problems.append(f"{GRADER}: the {owner}'s volume ({mount[0]}) is not mounted read-only")
        elif os.path.relpath(path, mount[1]) != os.path.relpath(owner_path, live_mount[1]):
            problems.append(f"{GRADER}: {flag} {path} is not where the {owner} keeps it")
    return problems


def grader_options(grader):
    """The grader's options its service grades with (after --), or None if it runs no such service."""
    command = service_command(grader)
    if command[:4] != ["python3", "-m", GRADING_SERVICE, "--listen"] or "--" not in command:
        return None
    return command[command.index("--") + 1:]


def console_problems(services, images, networks):
    """The lab console: on 127.0.0.1, reaching the Workstation's agent through their shared socket
    volume and the grader through a network of their own, and no broker at all."""
    problems = []
    console, workstation = services[CONSOLE], services[WORKSTATION]
    command = service_command(console)
    if command != ["python3", "-m", "nightjar_console"]:
        problems.append(f"{CONSOLE}: command {command} is not `python3 -m nightjar_console`")
    elif CONSOLE in images and not images[CONSOLE].importable("nightjar_console"):
        problems.append(f"{CONSOLE}: module nightjar_console is not importable in the image (COPY and PYTHONPATH)")
    if not service_ports(console):
        problems.append(f"{CONSOLE}: publishes no port, so no browser reaches it")
    brokers = set().union(*(service_networks(services[name]) for name in (LIVE_BROKER, GRADER_BROKER)))
    if service_networks(console) & brokers:
        problems.append(f"{CONSOLE}: shares a network with a broker ({', '.join(sorted(service_networks(console) & brokers))})")
    image = images.get(CONSOLE)
    environment = {**(image.env if image else {}), **service_environment(console)}
    socket = environment.get("NIGHTJAR_CONSOLE_SOCKET", "")
    agent_socket = argument(service_command(workstation), "--socket") or ""
    ours, theirs = mount_for(console, socket), mount_for(workstation, agent_socket)
    if socket != agent_socket or not ours or not theirs or ours[0] != theirs[0]:
        problems.append(f"{CONSOLE}: its NIGHTJAR_CONSOLE_SOCKET ({socket}) is not the Workstation agent's"
                        f" socket ({agent_socket}) on a volume they share")
    learner = environment.get("NIGHTJAR_WORKSTATION", "")
    mount, live_mount = mount_for(console, f"{learner}/handler.py"), mount_for(workstation, f"{LEARNER_FOLDER}/handler.py")
    if not mount or not live_mount or mount[0] != live_mount[0] or learner != LEARNER_FOLDER:
        problems.append(f"{CONSOLE}: its editor's folder ({learner}) is not the learner's folder on the Workstation's volume")
    elif mount[2]:
        problems.append(f"{CONSOLE}: the learner's folder is read-only, so the editor cannot save")
    url = environment.get("NIGHTJAR_CONSOLE_GRADER", "")
    if urlsplit(url).hostname != GRADER:
        problems.append(f"{CONSOLE}: NIGHTJAR_CONSOLE_GRADER does not point at the {GRADER} service ({url})")
    else:
        shared = service_networks(console) & service_networks(services[GRADER])
        if not shared:
            problems.append(f"{CONSOLE}: shares no network with {GRADER}, so Grade cannot reach it")
        elif any(not (networks.get(name) or {}).get("internal") for name in shared):
            problems.append(f"{CONSOLE}: reaches {GRADER} over a network with a way out")
    healthchecks = [arguments for keyword, arguments in image.instructions if keyword == "HEALTHCHECK"] if image else []
    if not any("/healthz" in check for check in healthchecks):
        problems.append(f"{CONSOLE}: the image has no HEALTHCHECK on /healthz")
    return problems
