"""The tuning cache and the kernel cache under damage: no silent wrong result, no crash.

A tuning entry is checked against today's candidates: one written by another version (a
schedule that no longer exists, an unknown format, `params` of the wrong type), a file nested
100k levels deep or too large, and random JSON values in every field are tuned again and
overwritten, with exactly one `CacheWarning`, and the next load is clean. A cache folder that
cannot be used (a file in its place, read-only, a write that fails) still compiles and runs
kernels and keeps tuning results, with one warning that says what is wrong, and leaves no
temporary file behind.

Tuning runs on karate at width 8 (the model decides: no timing), so each case costs
milliseconds; the few kernels run are compiled once per process.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pytest
from fuzzing import fuzz
from hypothesis import given
from hypothesis import strategies as st

import sparsetir_py as sp
from sparsetir_py import tune, tuning
from sparsetir_py.runtime import cache
from sparsetir_py.runtime.cache import CacheWarning

ROOT = Path(__file__).resolve().parent
A = sp.data.load_matrix("karate")
WIDTH = 8
FIELDS = ("format", "params", "schedule", "predicted_s", "measured_s", "setup_s", "error", "why")


@pytest.fixture
def tune_dir(tmp_path, monkeypatch):
    """Tuning results in a scratch folder (kernels stay in the usual cache: compiled once)."""
    monkeypatch.setenv("SPARSETIR_TUNE_DIR", str(tmp_path / "tune"))
    monkeypatch.setattr(tuning, "_MEMORY", {})
    return tmp_path / "tune"


def search(**options) -> tuple[tune.TuneResult, list[warnings.WarningMessage]]:
    """`sp.tune.spmm(A, WIDTH)` as a new process would run it (nothing in memory), with its warnings."""
    tuning._MEMORY.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = sp.tune.spmm(A, WIDTH, progress=False, **options)
    return result, [w for w in caught if issubclass(w.category, CacheWarning)]


def entry(folder: Path) -> Path:
    (path,) = folder.glob("*.json")
    return path


def configuration(result: tune.TuneResult) -> str:
    return json.dumps(result.ops_kwargs(), sort_keys=True)


@pytest.fixture
def saved(tune_dir):
    """A fresh, valid entry on disk: (its file, its JSON, the configuration chosen)."""
    result, found = search()
    assert found == [] and not result.cached
    path = entry(tune_dir)
    return path, json.loads(path.read_text()), configuration(result)


def check_heals(path: Path, chosen: str) -> tune.TuneResult:
    """The damaged entry at `path`: tuned again with one warning naming it, then clean."""
    result, found = search()
    assert len(found) == 1, [str(w.message) for w in found]
    assert path.name in str(found[0].message)
    assert not result.cached and configuration(result) == chosen
    again, found = search()
    assert found == [] and again.cached and configuration(again) == chosen
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temporary file left
    return result


def stale(data: dict, **winner_fields) -> dict:
    data = json.loads(json.dumps(data))
    data["candidates"][data["winner"]].update(winner_fields)
    return data


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param({"schedule": "csr_cpu_rows_of_an_older_version"}, id="schedule-gone"),
        pytest.param({"format": "blocked_ell_v0"}, id="format-unknown"),
        pytest.param({"params": None}, id="params-null"),
        pytest.param({"params": [1, 2]}, id="params-list"),
        pytest.param({"params": {"num_col_parts": True}}, id="params-unexpected"),
        pytest.param({"schedule": 3}, id="schedule-int"),
        pytest.param({"predicted_s": "fast"}, id="seconds-string"),
        pytest.param({"measured_s": -1.0, "setup_s": 0.1}, id="seconds-negative"),
        pytest.param({"measured_s": 1e-6}, id="measured-without-setup"),
        pytest.param({"error": "RuntimeError: failed"}, id="winner-failed"),
        pytest.param({"predicted_s": 1e-12}, id="not-todays-model"),
    ],
)
def test_a_stale_entry_is_tuned_again(saved, damage):
    path, data, chosen = saved
    path.write_text(json.dumps(stale(data, **damage)))
    check_heals(path, chosen)


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(lambda d: d.update(winner=1), id="winner-not-the-models-best"),
        pytest.param(lambda d: d["candidates"].reverse(), id="rows-reordered"),
        pytest.param(lambda d: d["candidates"].pop(), id="row-missing"),
        pytest.param(lambda d: d["candidates"].append(d["candidates"][-1]), id="row-twice"),
        pytest.param(lambda d: d["candidates"][1].update(measured_s=1e-9, setup_s=0.1), id="a-faster-loser"),
    ],
)
def test_an_inconsistent_table_is_tuned_again(saved, change):
    path, data, chosen = saved
    data = json.loads(json.dumps(data))
    change(data)
    path.write_text(json.dumps(data))
    check_heals(path, chosen)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("[" * 100_000 + "]" * 100_000, id="nested-100k"),
        pytest.param('{"a": ' * 50_000 + "1" + "}" * 50_000, id="nested-objects"),
        pytest.param("", id="empty"),
        pytest.param('{"op": "spmm", "winner": 0, "candidates": [', id="truncated"),
        pytest.param("null", id="null"),
        pytest.param('{"op": "spmm", "winner": 0, "candidates": []}', id="no-candidates"),
        pytest.param('{"op": "spmm", "winner": 99, "candidates": []}', id="winner-out-of-range"),
        pytest.param("[1, 2, 3]", id="a-list"),
        pytest.param('"' + "x" * (tune.MAX_ENTRY_BYTES + 10) + '"', id="too-large"),
    ],
)
def test_a_damaged_entry_is_tuned_again(saved, text):
    path, _, chosen = saved
    path.write_text(text)
    check_heals(path, chosen)


def test_binary_and_folder_entries(saved):
    path, _, chosen = saved
    path.write_bytes(bytes(range(256)) * 4)
    check_heals(path, chosen)
    path.unlink()
    path.mkdir()  # a folder where the entry should be: retuned, never an IsADirectoryError
    result, found = search()
    assert not result.cached and configuration(result) == chosen and found


def test_an_entry_of_the_other_operator_is_not_used(saved):
    path, data, chosen = saved
    path.write_text(json.dumps({**data, "op": "sddmm"}))
    check_heals(path, chosen)


def test_a_valid_entry_is_used_as_it_is(saved):
    """Times recorded for two candidates, the faster of them the winner: a valid entry (another
    machine's load could time them so); used without a warning, and it runs."""
    path, data, _ = saved
    data["candidates"][0].update(measured_s=2e-6, setup_s=0.1)
    data["candidates"][1].update(measured_s=1e-6, setup_s=0.1)
    data["winner"] = 1
    path.write_text(json.dumps(data))
    result, found = search()
    assert found == [] and result.cached
    assert result.table.winner.label == tune.Candidate(**data["candidates"][data["winner"]]).label
    B = np.random.default_rng(0).standard_normal((34, WIDTH)).astype(np.float32)
    np.testing.assert_allclose(sp.ops.spmm(A, B, **result.ops_kwargs()), A @ B, rtol=1e-5, atol=1e-5)


def test_a_stale_entry_heals_in_a_new_process_through_format_auto(saved, tune_dir):
    """The finding as a user meets it: every later default call in every new process failed."""
    path, data, _ = saved
    path.write_text(json.dumps(stale(data, schedule="csr_cpu_rows_gone", params=None)))
    script = (
        "import json, warnings, numpy as np, sparsetir_py as sp\n"
        "from sparsetir_py.runtime.cache import CacheWarning\n"
        "A = sp.data.load_matrix('karate')\n"
        "B = np.random.default_rng(0).standard_normal((34, 8)).astype(np.float32)\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    C = sp.ops.spmm(A, B)\n"
        "print(json.dumps([float(np.abs(C - A @ B).max()), sum(x.category is CacheWarning for x in w)]))\n"
    )
    env = {**os.environ, "SPARSETIR_TUNE_DIR": str(tune_dir)}
    for expected_warnings in (1, 0):
        done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        err, warned = json.loads(done.stdout.strip().splitlines()[-1])
        assert err < 1e-4 and warned == expected_warnings


# -------------------------------------------------------------------- fuzz: random values in every field
JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def damaged_entries(draw, data: dict) -> dict:
    """`data` with one to three fields (top level or of a candidate) replaced, removed or added."""
    data = json.loads(json.dumps(data))
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["top", "winner", "any"]))
        if where == "top":
            target = data
            key = draw(st.sampled_from(["op", "winner", "candidates", "families", "extra"]))
        else:
            rows = data.get("candidates")
            if not isinstance(rows, list) or not rows or not all(isinstance(r, dict) for r in rows):
                continue
            index = data["winner"] if where == "winner" and type(data.get("winner")) is int else None
            index = index if index is not None and 0 <= index < len(rows) else draw(st.integers(0, len(rows) - 1))
            target = rows[index]
            key = draw(st.sampled_from([*FIELDS, "extra"]))
        if draw(st.booleans()) and key in target:
            del target[key]
        else:
            target[key] = draw(JSON)
    return data


def test_fuzz_random_values_in_the_entry(saved):
    path, data, chosen = saved
    expected = {
        json.dumps(tune.Candidate(**row).label) for row in data["candidates"]
    }  # the configurations a valid entry can hold

    @fuzz(60)
    @given(damaged_entries(data))
    def check(damaged):
        text = json.dumps(damaged, allow_nan=True)
        path.write_text(text)
        result, found = search()
        assert len(found) <= 1, [str(w.message) for w in found]
        if found:
            assert not result.cached and configuration(result) == chosen
            assert path.name in str(found[0].message)
        else:
            assert result.cached and json.dumps(result.table.winner.label) in expected
        again, found = search()
        assert found == [] and again.cached
        assert [p.name for p in path.parent.iterdir()] == [path.name]

    check()


def test_fuzz_random_bytes(saved):
    path, _, chosen = saved

    @fuzz(40)
    @given(st.binary(max_size=200) | st.text(max_size=200).map(str.encode))
    def check(raw):
        path.write_bytes(raw)
        result, found = search()
        assert len(found) == 1 and not result.cached and configuration(result) == chosen

    check()


# -------------------------------------------------------------------- writes that fail
def full_disk_under(folder: Path, monkeypatch) -> None:
    """Renames into `folder` fail as on a full disk (after the temporary file was written)."""
    real_replace = os.replace

    def replace(src, dst):
        if str(dst).startswith(str(folder)):
            raise OSError(errno.ENOSPC, "No space left on device", str(dst))
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)


def test_a_failed_tune_write_leaves_no_temporary(tune_dir, fresh_stand_ins, monkeypatch):
    full_disk_under(tune_dir, monkeypatch)
    result, found = search()
    assert not result.cached and len(found) == 1 and "full" in str(found[0].message)
    assert [p for p in tune_dir.rglob("*") if p.is_file()] == []  # nothing half-written, no *.tmp
    assert sp.tune.spmm(A, WIDTH, progress=False).cached  # kept for this process


def test_an_unusable_tune_folder_warns_once(tmp_path, fresh_stand_ins, monkeypatch):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    monkeypatch.setenv("SPARSETIR_TUNE_DIR", str(blocker / "tune"))
    monkeypatch.setattr(tuning, "_MEMORY", {})
    result, found = search()
    assert len(found) == 1 and "not a directory" in str(found[0].message) and "damaged" not in str(found[0].message)
    assert result.format == "csr"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert sp.tune.sddmm(A, WIDTH, progress=False).format == "csr"
    assert not [w for w in caught if issubclass(w.category, CacheWarning)]  # the folder was reported once


# -------------------------------------------------------------------- the kernel cache folder
@pytest.fixture
def stage3():
    from sparsetir_py.ops import spmm_script

    return sp.lower_sparse_buffer(sp.lower_sparse_iter(spmm_script()))


def build_and_run(mod, directory: Path) -> tuple[object, list[str]]:
    """Build into `directory`, run on karate; the kernel and the CacheWarnings' messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kernel = sp.build(mod, cache_dir=directory, parallel=False)
    B, C = np.ones((34, 4), np.float32), np.empty((34, 4), np.float32)
    kernel(a=A.data, b=B, c=C, indptr=A.indptr, indices=A.indices, m=34, n=34, feat=4, nnz=A.nnz)
    np.testing.assert_allclose(C, A @ B, rtol=1e-5)
    return kernel, [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]


@pytest.fixture
def fresh_stand_ins(monkeypatch):
    """Forget the folders found unusable so far (each test's warning is its own)."""
    monkeypatch.setattr(cache, "_STAND_INS", {})
    monkeypatch.setattr(cache, "_REPORTED", set())


def test_a_cache_path_that_is_a_file(tmp_path, stage3, fresh_stand_ins):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    kernel, found = build_and_run(stage3, blocker)
    assert len(found) == 1, found
    assert "not a directory" in found[0] and str(blocker) in found[0] and "damaged" not in found[0]
    assert not str(kernel.path).startswith(str(blocker))
    _, found = build_and_run(stage3, blocker)  # the same folder again: no second warning
    assert found == []


def test_a_read_only_cache(tmp_path, stage3, fresh_stand_ins, monkeypatch):
    """Writes into the folder fail with EACCES (root may write anywhere, so the test simulates it)."""
    locked = tmp_path / "locked"
    real_mkstemp = tempfile.mkstemp

    def mkstemp(*args, dir=None, **kwargs):
        if dir is not None and str(dir).startswith(str(locked)):
            raise PermissionError(errno.EACCES, "Permission denied", str(dir))
        return real_mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(cache.tempfile, "mkstemp", mkstemp)
    _, found = build_and_run(stage3, locked)
    assert len(found) == 1 and "not writable" in found[0], found
    assert [p for p in locked.rglob("*") if p.is_file()] == []


def test_a_kernel_already_in_a_read_only_cache_is_used(tmp_path, stage3, fresh_stand_ins, monkeypatch):
    kernel, found = build_and_run(stage3, tmp_path)
    assert found == []
    cache._MODULES.clear()

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(cache.tempfile, "mkstemp", refuse)
    again, found = build_and_run(stage3, tmp_path)
    assert found == [] and again.path == kernel.path  # nothing to write: read from the cache as it is


def test_a_failed_kernel_write_leaves_no_temporary(tmp_path, stage3, fresh_stand_ins, monkeypatch):
    full_disk_under(tmp_path, monkeypatch)
    _, found = build_and_run(stage3, tmp_path)
    assert len(found) == 1 and "full" in found[0], found
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_nowhere_to_write_is_an_error_that_leaves_nothing(tmp_path, fresh_stand_ins, monkeypatch):
    def full_disk(src, dst):
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.warns(CacheWarning, match="full"), pytest.raises(OSError):
        cache.write_file(tmp_path / "cpu" / "k.py", b"x = 1\n")
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []


def test_fuzz_random_values_in_a_timed_entry(tune_dir, monkeypatch):
    """The same on an entry with measured times (timing forced on karate: two candidates)."""
    monkeypatch.setattr(tuning, "TIMING_GRAIN", 0)
    first, found = search(top=2, budget=0.001)
    assert found == [] and first.measured
    path = entry(tune_dir)
    data = json.loads(path.read_text())
    labels = {c.label for c in first.table}

    @fuzz(40)
    @given(damaged_entries(data))
    def check(damaged):
        path.write_text(json.dumps(damaged, allow_nan=True))
        result, found = search(top=2, budget=0.001)
        assert len(found) <= 1, [str(w.message) for w in found]
        assert result.cached is not bool(found) and result.table.winner.label in labels
        timed = [c for c in result.table if c.measured_s is not None]
        assert not timed or result.table.winner.measured_s == min(c.measured_s for c in timed)
        again, found = search()
        assert found == [] and again.cached

    check()


def test_numba_finds_no_writable_cache_folder(tmp_path, stage3, fresh_stand_ins, monkeypatch):
    """A kernel already in a read-only cache, and a read-only home: Numba finds nowhere to keep
    compiled code beside the source (it says "no locator available"); the kernel is imported from
    a copy in a temporary folder, with one warning."""
    from numba.core import caching

    kernel, found = build_and_run(stage3, tmp_path)
    assert found == []
    cache._MODULES.clear()

    class NotUnderTmpPath(caching.InTreeCacheLocator):
        @classmethod
        def from_function(cls, py_func, py_file):
            return None if str(py_file).startswith(str(tmp_path)) else super().from_function(py_func, py_file)

    monkeypatch.setattr(caching.CacheImpl, "_locator_classes", [NotUnderTmpPath])
    monkeypatch.delenv("NUMBA_CACHE_LOCATOR_CLASSES", raising=False)
    again, found = build_and_run(stage3, tmp_path)
    assert len(found) == 1 and "not writable" in found[0] and str(tmp_path) in found[0], found
    assert again.path != kernel.path and again.path.name == kernel.path.name
