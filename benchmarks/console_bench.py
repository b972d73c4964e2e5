#!/usr/bin/env python3
"""Measure the lab console: keystroke-to-echo latency in its browser terminal, its memory, and
how soon it is ready.

    .venv/bin/python benchmarks/console_bench.py [--keys N]              local processes
    .venv/bin/python benchmarks/console_bench.py --containers [--compose v2|v1]

Local (the default): the console and its agent as local processes on a throwaway lab,
Chromium on the page. Latency: a key pressed in the page's terminal (Playwright's
keyboard, a trusted key event) until the character the shell echoes is drawn in the
terminal's rows: the page, the websocket, the console, the agent's socket, the PTY and
bash's echo, and back. Taken in the page itself (performance.now() at the keydown, a
MutationObserver on the rows), so the browser's automation adds nothing. Memory: the
console process's resident set after the page loaded and the keys were typed.

--containers: a stack of its own (free ports, removed afterwards with its images):
`compose up -d` cold (the lab's images removed first; the base images stay) and warm
(after `compose down`), each until the console's page has its terminal connected; then
`make up` warm against the same; the latency and the memory of the console's container.
"""

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from playwright.sync_api import sync_playwright  # noqa: E402

from browserkit import CHROMIUM, CHROMIUM_ARGS  # noqa: E402

# In the page: note the time of each keydown in the terminal, and the time the echoed
# character is drawn (the prompt's row gains one more of MARK).
WATCH = """mark => {
  window.latencies = [];
  const input = document.querySelector('#terminal .xterm-helper-textarea');
  const rows = document.querySelector('#terminal .xterm-rows');
  const count = () => rows.textContent.split(mark).length - 1;
  let pressed = [], seen = count();
  input.addEventListener('keydown', () => pressed.push(performance.now()), true);
  new MutationObserver(() => {
    const now = count();
    while (now > seen && pressed.length) { window.latencies.push(performance.now() - pressed.shift()); seen += 1; }
  }).observe(rows, {childList: true, subtree: true, characterData: true});
}"""


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure_typing(page, keys):
    """[milliseconds] from each keydown to its echo on the screen."""
    from consolepage import clear_terminal, type_into_terminal
    prompt = clear_terminal(page)
    type_into_terminal(page, "# ")  # a comment: the keys typed next run nothing
    # Predicates as functions: a page whose policy forbids eval (the console's) runs them still.
    page.wait_for_function("() => document.querySelector('#terminal .xterm-rows').textContent.includes('# ')")
    page.evaluate(WATCH, "k")
    for n in range(keys):
        page.keyboard.press("k")
        page.wait_for_function("count => window.latencies.length >= count", arg=n + 1, timeout=10_000)
    page.keyboard.press("Control+u")
    assert prompt
    return page.evaluate("window.latencies")


def resident_kib(pid):
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def report(latencies, rss_kib, extra=None):
    figures = {"keystroke_echo_ms_p50": round(statistics.median(latencies), 1),
               "keystroke_echo_ms_p95": round(percentile(latencies, 0.95), 1),
               "keys": len(latencies), "console_rss_mib": round(rss_kib / 1024, 1), **(extra or {})}
    print(f"keystroke to echo: p50 {figures['keystroke_echo_ms_p50']} ms, p95"
          f" {figures['keystroke_echo_ms_p95']} ms ({len(latencies)} keys; budget p95 <= 50 ms)")
    print(f"console memory: {figures['console_rss_mib']} MiB resident (budget <= 60 MB)")
    return figures


def local(keys):
    from consolekit import TOKEN, Console
    from labkit import Lab
    from consolepage import open_console

    with tempfile.TemporaryDirectory() as folder:
        lab = Lab(Path(folder) / "lab")
        started = time.monotonic()
        console = Console(lab, folder)
        ready = time.monotonic() - started
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                page = browser.new_page(bypass_csp=True)  # the measuring script runs in the page
                open_console(page, f"{console.url}?token={TOKEN}")
                latencies = measure_typing(page, keys)
                rss = resident_kib(console.console.pid)
                browser.close()
        finally:
            console.stop()
            lab.cleanup()
    print(f"console and agent started, answering: {ready:.2f} s")
    return report(latencies, rss, {"console_start_s": round(ready, 2)})


def containers(compose_name, keys):
    from nightjar import compose as choice
    from consolepage import open_console
    from stackkit import Stack, Unavailable

    compose = {"v2": list(choice.V2), "v1": list(choice.V1)}.get(compose_name) or choice.choose()
    try:
        stack = Stack("nightjar-console-bench", compose=compose)
    except Unavailable as reason:
        sys.exit(f"console_bench: {reason}")
    figures = {"compose": " ".join(compose)}
    stack.remove(images=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

            def until_connected(what, action):
                start = time.monotonic()
                done = action()
                assert done.returncode == 0, done.stdout + done.stderr
                page = browser.new_page(bypass_csp=True)  # the measuring script runs in the page
                open_console(page, stack.console_url(timeout=600))
                seconds = time.monotonic() - start
                print(f"{what}: {seconds:.1f} s until the console's terminal is connected", flush=True)
                return page, round(seconds, 1)

            page, figures["compose_up_cold_s"] = until_connected(
                "compose up -d, cold (images built)", lambda: stack.compose("up", "-d", "--build"))
            page.close()
            stack.compose("down")
            page, figures["compose_up_warm_s"] = until_connected("compose up -d, warm", lambda: stack.compose("up", "-d"))
            page.close()
            stack.compose("down")
            page, figures["make_up_warm_s"] = until_connected("make up, warm", lambda: stack.make("up"))
            latencies = measure_typing(page, keys)
            container = stack.compose("ps", "-q", "console").stdout.strip()
            pids = stack.compose("top", "console").stdout  # the python process, seen from the host
            python = [line.split() for line in pids.splitlines() if "nightjar_console" in line]
            rss = resident_kib(int(python[0][1]))
            assert container
            browser.close()
    finally:
        stack.remove(images=True)
    return report(latencies, rss, figures)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200, help="keystrokes to time (default 200)")
    parser.add_argument("--containers", action="store_true", help="the container lab instead of local processes")
    parser.add_argument("--compose", choices=["v2", "v1"], help="with --containers: which Compose")
    parser.add_argument("--json", action="store_true", help="also print the figures as one line of JSON")
    options = parser.parse_args()
    figures = containers(options.compose, options.keys) if options.containers else local(options.keys)
    if options.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
