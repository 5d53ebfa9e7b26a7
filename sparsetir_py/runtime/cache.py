"""The on-disk kernel cache: generated sources written to files and imported from there.

A kernel's file is `<cache dir>/<target>/<function>_<key>.py`, where the key hashes the IR's
script text, the target, the options, the generated source and the helper modules the source
imports (`runtime/cpu_intrinsics.py`, `runtime/cuda_intrinsics.py`, `runtime/cuda_warp.py`):
Numba's cache does not track what a cached function calls, so a change of a helper must change the file name.
Importing from a real file lets Numba's own `cache=True` keep compiled machine code in
`__pycache__` next to it across processes, and makes tracebacks point into readable code.

The cache folder is `$SPARSETIR_CACHE_DIR`, else `$XDG_CACHE_HOME/sparsetir_py`, else
`~/.cache/sparsetir_py`. Deleting it is always safe.

The cache heals itself: disks fill up and processes die mid-write, and neither may turn into a
failure of every later call. A generated source that cannot be read or does not hold what its
name promises is rewritten; a Python bytecode file that fails to load is removed and the source
imported again; a Numba cache entry (`*.nbi` index, `*.nbc` data, in `__pycache__` beside the
source or under `$NUMBA_CACHE_DIR`) that fails to load is removed and the kernel compiled again,
and one that cannot be saved is skipped. Each repair emits one `CacheWarning` naming the file.
Every write is a temporary file renamed into place, so concurrent processes filling the same
cache never see a half-written file; a write that fails removes its temporary file. Processes
that need the same CPU kernel at once compile it in turn (an `flock` on `<kernel>.lock` beside
its source, `guard_numba_cache`): the first compiles, the others load what it saved.

A cache folder that cannot hold files (read-only, or a path through a file) is no failure either:
the process keeps what it would have written in a private temporary folder instead (removed when
it exits), with one `CacheWarning` per such folder saying what is wrong with it.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import glob
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import numba.core.registry
from numba.core import sigutils
from numba.core.compiler_lock import global_compiler_lock

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no compile lock, each process compiles alone
    fcntl = None

# Bumped when the layout of cached files changes in a way the key does not see.
CACHE_FORMAT = 1

# Modules of sparsetir_py.runtime (beside this file) that generated sources import.
HELPER_MODULES = ("cpu_intrinsics.py", "cuda_intrinsics.py", "cuda_warp.py")

_MODULES: dict[Path, ModuleType] = {}
# Folders found unusable in this process -> the temporary folder standing in for each.
_STAND_INS: dict[Path, Path] = {}
_REPORTED: set[str] = set()


class CacheWarning(UserWarning):
    """A damaged file of the kernel or tuning cache was found and repaired (rewritten or removed),
    or a cache folder cannot be used and a temporary one stands in for it."""


def cache_dir() -> Path:
    """The folder generated kernels are written to (see the module docstring)."""
    explicit = os.environ.get("SPARSETIR_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except RuntimeError:  # no home folder to be found: a private folder for this process
            return _temporary_root() / "home"
    return Path(base) / "sparsetir_py"


@functools.cache
def _helpers_fingerprint() -> str:
    runtime = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for name in HELPER_MODULES:
        h.update((runtime / name).read_bytes())
    return h.hexdigest()


def cache_key(script: str, target: str, options: dict[str, Any], source: str) -> str:
    """A hex digest identifying one generated kernel."""
    h = hashlib.sha256()
    parts = (f"format={CACHE_FORMAT}", _helpers_fingerprint(), script, target, repr(sorted(options.items())), source)
    for part in parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def kernel_path(directory: Path, target: str, name: str, key: str) -> Path:
    stem = re.sub(r"\W", "_", name)[:40] or "kernel"
    return directory / target / f"{stem}_{key}.py"


def write_source(path: Path, source: str) -> Path:
    """Write `source` to `path` unless it already holds it (rewriting would invalidate Numba's cache);
    returns the path that holds it: `path`, or its stand-in when `path`'s folder cannot be written.

    A file that cannot be read or holds anything else (damaged, truncated, emptied) is rewritten,
    with a `CacheWarning`: its name is a hash of the source, so any other content is damage."""
    data = source.encode("utf-8")
    try:
        existing: bytes | None = path.read_bytes()
    except FileNotFoundError:
        existing = None
    except OSError as e:
        existing = None
        if not _folder_problem(path, e):  # a folder's problem is found and reported by the write
            _warn(f"generated source {path} cannot be read ({type(e).__name__}: {e.strerror or e}); rewriting it")
    if existing == data:
        return path
    if existing is not None:
        _warn(f"generated source {path} does not hold the kernel it is named for (damaged or truncated); rewriting it")
    return write_file(path, data)


def write_file(path: Path, data: bytes) -> Path:
    """Write `data` to `path` atomically (a temporary file beside it, renamed into place, removed if
    anything fails); returns `path`, or the file standing in for it in this process's temporary
    folder when `path`'s folder cannot hold files (one `CacheWarning` per such folder)."""
    folder = path.parent
    stand_in = _STAND_INS.get(folder)
    if stand_in is None:
        try:
            _write_atomic(path, data)
            return path
        except OSError as e:
            stand_in = _stand_in(folder, e)
    target = stand_in / path.name
    _write_atomic(target, data)
    return target


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so that a concurrent process never reads a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def _folder_problem(path: Path, error: OSError) -> bool:
    """Whether reading `path` failed because of a folder on its way (a file where a folder should
    be, a folder that cannot be entered) rather than the file itself."""
    return error.errno == errno.ENOTDIR or (error.errno == errno.EACCES and not os.access(path.parent, os.X_OK))


def _folder_trouble(folder: Path, error: OSError) -> str:
    """What is wrong with a cache folder that a write into it failed with `error`, in words."""
    existing = folder  # the deepest folder on the way that exists (or the file in its place)
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    if error.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{existing} is not writable ({error.strerror})"
    if error.errno == errno.ENOSPC:
        return f"the disk holding {existing} is full"
    if error.errno == errno.EISDIR:
        return f"{error.filename2 or error.filename or folder} is a directory where a cache file should be"
    return f"{type(error).__name__}: {error.strerror or error}"


def _stand_in(folder: Path, error: OSError) -> Path:
    """The temporary folder standing in for `folder` in this process, with one warning per folder."""
    trouble = _folder_trouble(folder, error)
    stand_in = _temporary_root() / hashlib.sha256(str(folder).encode()).hexdigest()[:16] / folder.name
    _STAND_INS[folder] = stand_in
    if trouble in _REPORTED:  # one warning per cause: a read-only cache holds kernels and tunings
        return stand_in
    _REPORTED.add(trouble)
    _warn(
        f"the cache folder {folder} cannot be used: {trouble}; this process keeps its files in a temporary "
        f"folder instead (set SPARSETIR_CACHE_DIR to a writable folder to keep them)"
    )
    return stand_in


@functools.cache
def _temporary_root() -> Path:
    """A private folder for this process's stand-ins, removed when the process exits."""
    root = Path(tempfile.mkdtemp(prefix="sparsetir_py-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root


def import_source(path: Path) -> ModuleType:
    """Import the generated module at `path` (once per process); its `__file__` is where it was
    imported from.

    Python keeps the module's bytecode in `__pycache__`; a bytecode file whose header is intact but
    whose body is damaged fails to load (`bad marshal data`), and Python does not repair it: it is
    removed, with a `CacheWarning`, and the source imported again. Numba keeps compiled code beside
    the source or in the user's cache; where it can write neither (a read-only cache and home
    folder), or the damaged bytecode cannot be removed, a copy of the source is imported from this
    process's temporary folder instead, with one `CacheWarning` for the folder."""
    path = path.resolve()
    module = _MODULES.get(path)
    if module is not None:
        return module
    try:
        module = _exec_source(path)
    except Exception as e:
        bytecode = Path(importlib.util.cache_from_source(str(path)))
        if "no locator available" in str(e):  # Numba's words for "nowhere to keep the compiled code"
            module = _import_copy(path, "Numba cannot keep compiled code there")
        elif not bytecode.exists():
            raise
        else:
            _warn(
                f"the bytecode {bytecode} of a generated kernel failed to load ({type(e).__name__}: {e}); removing it"
            )
            try:
                bytecode.unlink(missing_ok=True)
            except OSError:  # a read-only cache: Python would load the damaged file again
                module = _import_copy(path, "its damaged bytecode cannot be removed")
            else:
                module = _exec_source(path)
    _MODULES[path] = module
    return module


def _import_copy(path: Path, why: str) -> ModuleType:
    """Import a copy of `path` from the folder standing in for its own, which cannot be written."""
    folder = _STAND_INS.get(path.parent) or _stand_in(path.parent, PermissionError(errno.EACCES, why))
    copy = folder / path.name
    _write_atomic(copy, path.read_bytes())
    return _exec_source(copy)


def _exec_source(path: Path) -> ModuleType:
    name = f"sparsetir_generated_{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py path always has a loader
        raise ImportError(f"cannot import generated kernel {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # Numba's cache pickles functions by module name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def guard_numba_cache(dispatcher: Any) -> None:
    """Make the on-disk cache of one Numba dispatcher (CPU or CUDA) heal itself: an entry that
    fails to load is removed and the kernel compiled again; a save that fails is skipped. On the
    CPU, processes that compile the same kernel at the same time also take turns
    (`_compile_in_turn`): the first compiles, the others then load what it saved.

    Only this dispatcher's cache object is wrapped (no global patch of Numba); dispatchers without
    a disk cache (the CUDA simulator's, `cache=False`) are left alone."""
    inner = getattr(dispatcher, "_cache", None)
    if inner is None or isinstance(inner, _HealingNumbaCache) or not hasattr(inner, "_cache_file"):
        return
    dispatcher._cache = _HealingNumbaCache(inner)
    if isinstance(dispatcher, numba.core.registry.CPUDispatcher):
        _compile_in_turn(dispatcher)


#: The longest a process waits for another one's compile of the same kernel before it compiles
#: the kernel itself (a compile takes seconds; a process holding the lock that dies releases it).
COMPILE_WAIT_S = 300.0

#: Lock files this process holds (a second `flock` of the same file from this process would wait
#: for itself), guarded by Numba's compiler lock.
_HELD: set[str] = set()


def _compile_in_turn(dispatcher: Any) -> None:
    """Wrap the dispatcher's `compile` so that a compile of a signature it does not have yet runs
    under an exclusive lock on `<kernel>.lock` beside the source: two processes that need one
    kernel at once (pytest-xdist workers, Dask workers on one machine) compile it once, and the
    second finds it in Numba's disk cache, which `compile` reads first. Taken under Numba's own
    compiler lock (this process's threads queue there first, in Numba's order); without `fcntl`
    (Windows), or where the lock file cannot be made, or after `COMPILE_WAIT_S`, each process
    compiles on its own, as before."""
    if fcntl is None:
        return
    compile_ = dispatcher.compile
    path = str(Path(dispatcher.py_func.__code__.co_filename).with_suffix(".lock"))

    def compile_in_turn(sig):
        with global_compiler_lock:
            args, _ = sigutils.normalize_signature(sig)
            if tuple(args) in dispatcher.overloads or path in _HELD:
                return compile_(sig)
            with _file_lock(path):
                return compile_(sig)

    dispatcher.compile = compile_in_turn


@contextlib.contextmanager
def _file_lock(path: str):
    """An exclusive `flock` of `path` for the block (nothing where the file cannot be opened, or
    after waiting `COMPILE_WAIT_S`)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    try:
        deadline = time.monotonic() + COMPILE_WAIT_S
        locked = False
        while not locked:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                locked = True
            except BlockingIOError:
                if time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            except OSError:  # a file system without locks
                break
        _HELD.add(path)
        try:
            yield
        finally:
            _HELD.discard(path)
    finally:
        os.close(fd)  # closing the descriptor releases the lock


class _HealingNumbaCache:
    """Delegates to Numba's cache of one function; `load_overload` / `save_overload` never fail."""

    def __init__(self, inner: Any):
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def load_overload(self, sig: Any, target_context: Any) -> Any:
        try:
            return self._inner.load_overload(sig, target_context)
        except Exception as e:  # unpickling, zlib, EOF, a data file the index names but garbled
            removed = self._remove_entries()
            _warn(
                f"Numba's cache of a generated kernel failed to load ({type(e).__name__}: {e}); removed "
                f"{', '.join(str(p) for p in removed) or 'nothing'} and compiling the kernel again"
            )
            return None  # the dispatcher compiles, then saves a fresh entry

    def save_overload(self, sig: Any, data: Any) -> None:
        try:
            self._inner.save_overload(sig, data)
        except Exception as e:  # a full disk or a read-only cache: the compiled kernel still runs
            _warn(f"Numba's cache of a generated kernel could not be saved in {self._inner.cache_path} ({e})")

    def _remove_entries(self) -> list[Path]:
        """The index and data files of this function (`<base>.nbi`, `<base>.<n>.nbc`)."""
        cache_file = self._inner._cache_file
        index = Path(cache_file._index_path)
        base = index.name[: -len(".nbi")]
        removed = []
        for p in [index, *index.parent.glob(f"{glob.escape(base)}.*.nbc")]:
            with contextlib.suppress(FileNotFoundError):
                p.unlink()
                removed.append(p)
        return removed


def _warn(message: str) -> None:
    warnings.warn(CacheWarning(message), stacklevel=3)
