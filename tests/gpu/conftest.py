"""`make test-gpu`: the CUDA kernels of the project on a real GPU, with a report.

The tests here run only when `SPARSETIR_TEST_GPU=1` (what `make test-gpu` sets) and a CUDA GPU
is usable (Numba's simulator off, `numba.cuda.is_available()`); otherwise every one is skipped
with the reason, so `make test` (and a plain `pytest`) stays GPU-free. A dry run of the suite
itself without a GPU: `SPARSETIR_TEST_GPU=sim NUMBA_ENABLE_CUDASIM=1` runs the same tests in
Numba's simulator on small inputs only (karate instead of the three graphs). They need nothing the
device machine lacks: numba, numba-cuda, scipy and pytest, with `PYTHONPATH=.` and no install;
cupy and torch where a test says so (skipped when missing).

The report: `$SPARSETIR_REPORT_DIR/test-gpu.md` and `test-gpu.json` (default folder
`gpu-report/`), one line per test (passed / failed / skipped, seconds, the first line of the
failure), written at the end of the session, also when nothing could run (with the reason).
"""

from __future__ import annotations

import functools
import json
import os
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@functools.cache
def gpu_unavailable() -> str | None:
    """Why the GPU tests cannot run here (None when they can)."""
    mode = os.environ.get("SPARSETIR_TEST_GPU")
    if mode not in ("1", "sim"):
        return "GPU tests run with `make test-gpu` (SPARSETIR_TEST_GPU=1)"
    try:
        import numba
        from numba import cuda
    except Exception as e:  # pragma: no cover - numba is a dependency
        return f"numba.cuda cannot be imported: {type(e).__name__}: {e}"
    if mode == "sim":
        return None if numba.config.ENABLE_CUDASIM else "SPARSETIR_TEST_GPU=sim needs NUMBA_ENABLE_CUDASIM=1"
    if numba.config.ENABLE_CUDASIM:
        return "NUMBA_ENABLE_CUDASIM is set: these tests need a real GPU"
    try:
        if not cuda.is_available():
            return "no CUDA GPU is available (numba.cuda.is_available() is False)"
    except Exception as e:
        return f"no CUDA GPU is usable: {type(e).__name__}: {e}"
    return None


def report_dir() -> Path:
    return Path(os.environ.get("SPARSETIR_REPORT_DIR") or "gpu-report")


def pytest_collection_modifyitems(config, items):
    reason = gpu_unavailable()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=reason)
    for item in items:
        if HERE in Path(str(item.fspath)).resolve().parents:
            item.add_marker(skip)


_RESULTS: dict[str, dict] = {}


def pytest_runtest_logreport(report):
    # The call's outcome; a setup that did not pass; a failure in any phase (a pytest-xdist worker
    # that crashed mid-test is reported as failed with `when == "???"`).
    if report.when == "call" or (report.when == "setup" and report.outcome != "passed") or report.failed:
        if not str(report.nodeid).startswith(("tests/gpu/", "gpu/")) and "/gpu/" not in str(report.fspath):
            return
        entry = {"outcome": report.outcome, "seconds": round(report.duration, 3)}
        if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
            entry["detail"] = str(report.longrepr[2])
        elif report.outcome == "failed":
            entry["detail"] = _first_line(report)
        _RESULTS[report.nodeid] = entry


def _first_line(report) -> str:
    text = str(getattr(report, "longreprtext", "") or report.longrepr or "")
    errors = [line for line in text.splitlines() if line.startswith("E ")]
    return (errors[0][1:].strip() if errors else text.strip().splitlines()[-1] if text.strip() else "")[:300]


def pytest_sessionfinish(session, exitstatus):
    if hasattr(session.config, "workerinput"):
        return  # a pytest-xdist worker: the controller, which sees every report, writes it
    if not _RESULTS or os.environ.get("SPARSETIR_TEST_GPU") not in ("1", "sim"):
        return  # a plain `pytest` run skipped them: no report
    out = report_dir()
    out.mkdir(parents=True, exist_ok=True)
    counts: dict[str, int] = {}
    for entry in _RESULTS.values():
        counts[entry["outcome"]] = counts.get(entry["outcome"], 0) + 1
    device = _device_name()
    summary = {
        "device": device,
        "unavailable": gpu_unavailable(),
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "counts": counts,
        "tests": _RESULTS,
    }
    (out / "test-gpu.json").write_text(json.dumps(summary, indent=1))
    lines = [
        "# make test-gpu: CUDA kernels against scipy",
        "",
        f"device: {device}; {summary['when']}",
        "",
        "counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
        "",
    ]
    if gpu_unavailable():
        lines += [f"skipped: {gpu_unavailable()}", ""]
    lines += ["| test | result | s | detail |", "|---|---|---|---|"]
    for nodeid, entry in _RESULTS.items():
        detail = entry.get("detail", "").replace("|", "\\|")
        lines.append(f"| `{nodeid}` | {entry['outcome']} | {entry['seconds']} | {detail} |")
    (out / "test-gpu.md").write_text("\n".join(lines) + "\n")


def _device_name() -> str:
    if gpu_unavailable():
        return "none"
    if os.environ.get("SPARSETIR_TEST_GPU") == "sim":
        return "Numba's CUDA simulator (dry run)"
    try:
        from numba import cuda

        dev = cuda.get_current_device()
        name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
        return f"{name} (cc {dev.compute_capability[0]}.{dev.compute_capability[1]})"
    except Exception as e:  # pragma: no cover - reported, not raised
        return f"unknown ({type(e).__name__})"
