"""The parts of the lab units that scenarios/labunits.py runs, one job a module."""

import sys

from .common import ROOT

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's nightjar, even when not installed
