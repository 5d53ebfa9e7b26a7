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

# Hypothesis profiles. "default" is what `make test` runs: the fuzz suites (`tests/fuzzing.py`)
# are seeded there, so a run is repeatable and bounded. "deep" (`pytest --hypothesis-profile=deep`,
# or SPARSETIR_FUZZ=deep in the environment) is the occasional long run: many more examples,
# random seeds.
from hypothesis import settings  # noqa: E402

settings.register_profile("default", settings())
settings.register_profile("deep", max_examples=2000, deadline=None)
if os.environ.get("SPARSETIR_FUZZ") == "deep":
    settings.load_profile("deep")
