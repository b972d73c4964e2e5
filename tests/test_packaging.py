"""The lab as a Python package: building it declares everything it ships, so setuptools warns of nothing."""

import subprocess
import sys
import zipfile

from stackkit import ROOT, copy_checkout


def test_the_wheel_carries_the_site_templates_and_static_files_without_a_warning(tmp_path):
    # Built from a copy: a build leaves build/ and *.egg-info beside the sources.
    source = copy_checkout(tmp_path / "checkout")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--verbose", "-w", str(tmp_path),
                            str(source)], capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stdout + built.stderr
    output = built.stdout + built.stderr
    assert "running build_py" in output  # the verbose build's own lines are here: a warning would be too
    assert "absent from the `packages` configuration" not in output, output
    assert "_Warning" not in output and "SetuptoolsDeprecationWarning" not in output, output
    (wheel,) = tmp_path.glob("nightjar_lab-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    site = ROOT / "nightjar-site"
    shipped = {path.relative_to(site).as_posix() for folder in ("templates", "static")
               for path in (site / "nightjar_site" / folder).iterdir()}
    assert shipped and shipped <= names, shipped - names
