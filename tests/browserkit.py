"""What the browser tests share: Debian's Chromium (driven by Playwright) and axe-core.

The launch options themselves are a fixture in conftest.py (browser_type_launch_args)."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
# axe-core from the npm registry (scripts/prepare-tests installs tests/axe/package.json).
AXE = ROOT / "tests" / "axe" / "node_modules" / "axe-core" / "axe.min.js"
# make test installs Chromium when run as root (scripts/prepare-tests); without it, say so once per test.
needs_chromium = pytest.mark.skipif(not os.path.exists(CHROMIUM),
                                    reason=f"no Chromium at {CHROMIUM}: apt-get install -y chromium")
needs_axe = pytest.mark.skipif(not AXE.exists(), reason=f"no axe-core at {AXE}: scripts/prepare-tests installs it")


def axe_results(page):
    """axe-core's findings on the page as it is now: "violations" and "passes" (the rules it
    checked and found kept). The page's context must bypass its CSP to take the script."""
    page.add_script_tag(path=str(AXE))
    return page.evaluate("axe.run(document, {resultTypes: ['violations']})")
