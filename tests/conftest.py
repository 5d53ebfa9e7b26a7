"""Shared test setup: make the helper modules in this folder (`corpus`, `strategies`) importable
from test files in any subfolder, whatever pytest's import mode."""

import pathlib
import sys

_TESTS = str(pathlib.Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
