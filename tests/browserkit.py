"""What the browser tests share: Debian's Chromium (driven by Playwright), axe-core, and the
screenshots they take for the documentation (docs/screenshots/).

The launch options themselves are a fixture in conftest.py (browser_type_launch_args)."""

import asyncio
import base64
import concurrent.futures
import hashlib
import os
import re
import struct
import zlib
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


def run_apart(coroutine):
    """asyncio.run in a thread of its own: after a browser test, pytest-playwright's event loop
    runs in the test's thread, where asyncio.run refuses to start another."""
    with concurrent.futures.ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def axe_results(page):
    """axe-core's findings on the page as it is now: "violations" and "passes" (the rules it
    checked and found kept). The page's context must bypass its CSP to take the script."""
    page.add_script_tag(path=str(AXE))
    return page.evaluate("axe.run(document, {resultTypes: ['violations']})")


# ---- the documentation's screenshots ------------------------------------------------------

# The pages the documentation shows are photographed by the tests that walk them, so that the
# pictures never drift from what a person sees. The copies are committed (the site builds from a
# fresh clone); a test rewrites one only when its page changed, not when only a clock or an ID
# on it moved: its size, its text (every number as 0), or more than a few of its pixels.
SCREENSHOTS = ROOT / "docs" / "screenshots"
SIGNATURE_KEY = b"nightjar-page"
CHANGED_PIXELS = 0.005  # of the picture's pixels: a clock's digits are far fewer
# Numbers, and the hex of random names (a test's queue test.4297580665f0, a learner's ada-fdee430d40).
NUMBERS = re.compile(r"[0-9a-f]*[0-9][0-9a-f]*")

# In the page: the share of pixels that differ between two PNGs of one size (1 if the sizes differ).
PIXELS_APART = """async ([before, after]) => {
  const decode = async (base64) => {
    const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
    const image = await createImageBitmap(new Blob([bytes], { type: "image/png" }));
    const canvas = new OffscreenCanvas(image.width, image.height);
    canvas.getContext("2d").drawImage(image, 0, 0);
    return canvas.getContext("2d").getImageData(0, 0, image.width, image.height);
  };
  const [a, b] = [await decode(before), await decode(after)];
  if (a.width !== b.width || a.height !== b.height) return 1;
  let apart = 0;
  for (let i = 0; i < a.data.length; i += 4) {
    if (Math.abs(a.data[i] - b.data[i]) + Math.abs(a.data[i + 1] - b.data[i + 1])
        + Math.abs(a.data[i + 2] - b.data[i + 2]) > 96) apart += 1;
  }
  return apart / (a.width * a.height);
}"""


def document_screenshot(page, name, whole=True):
    """The page as docs/screenshots/NAME.png (whole: all of it, else its first screen), unless the
    committed copy shows the same page."""
    shot = page.screenshot(full_page=whole, animations="disabled", caret="hide")
    text = NUMBERS.sub("0", page.locator("body").inner_text())
    signature = hashlib.sha256(f"{png_size(shot)}\n{text}".encode()).hexdigest().encode()
    path = SCREENSHOTS / f"{name}.png"
    if path.exists():
        kept = path.read_bytes()
        if png_text(kept, SIGNATURE_KEY) == signature and page.evaluate(
                PIXELS_APART, [base64.b64encode(kept).decode(), base64.b64encode(shot).decode()]) <= CHANGED_PIXELS:
            return
    path.write_bytes(with_png_text(shot, SIGNATURE_KEY, signature))


def png_size(png):
    """(width, height) from a PNG's header."""
    return struct.unpack(">II", png[16:24])


def png_chunks(png):
    """(type, data) of each chunk of a PNG."""
    at = 8
    while at < len(png):
        length, kind = struct.unpack(">I4s", png[at:at + 8])
        yield kind, png[at + 8:at + 8 + length]
        at += 12 + length


def png_text(png, key):
    """The value of a PNG's tEXt chunk `key`, or None."""
    for kind, data in png_chunks(png):
        if kind == b"tEXt" and data.split(b"\0", 1)[0] == key:
            return data.split(b"\0", 1)[1]
    return None


def with_png_text(png, key, value):
    """The PNG with a tEXt chunk key=value after its header (IHDR ends at byte 33)."""
    data = key + b"\0" + value
    chunk = struct.pack(">I", len(data)) + b"tEXt" + data + struct.pack(">I", zlib.crc32(b"tEXt" + data))
    return png[:33] + chunk + png[33:]
