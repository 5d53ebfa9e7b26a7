"""Shared test setup: make the helper modules in this folder (`corpus`, `strategies`) importable
from test files in any subfolder, whatever pytest's import mode; and keep `format="auto"`'s
choices, timed while the suite loads the machine, in a scratch folder instead of the user's tune
cache (`SPARSETIR_TUNE_DIR`, inherited by the notebooks and scripts the tests start)."""

import atexit
import os
import pathlib
import shutil
import sys
import tempfile

if "SPARSETIR_TUNE_DIR" not in os.environ:
    _TUNE_DIR = tempfile.mkdtemp(prefix="sparsetir-tune-")
    os.environ["SPARSETIR_TUNE_DIR"] = _TUNE_DIR
    atexit.register(shutil.rmtree, _TUNE_DIR, ignore_errors=True)

_TESTS = str(pathlib.Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)
