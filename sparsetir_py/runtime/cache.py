"""The on-disk kernel cache: generated sources written to files and imported from there.

A kernel's file is `<cache dir>/<target>/<function>_<key>.py`, where the key hashes the IR's
script text, the target, the options, the generated source and the helper modules the source
imports (`runtime/cpu_intrinsics.py`, `runtime/cuda_intrinsics.py`, `runtime/cuda_warp.py`):
Numba's cache does not track what a cached function calls, so a change of a helper must change the file name.
Importing from a real file lets Numba's own `cache=True` keep compiled machine code in
`__pycache__` next to it across processes, and makes tracebacks point into readable code.

The cache folder is `$SPARSETIR_CACHE_DIR`, else `$XDG_CACHE_HOME/sparsetir_py`, else
`~/.cache/sparsetir_py`. Deleting it is always safe.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import re
import sys
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Any

# Bumped when the layout of cached files changes in a way the key does not see.
CACHE_FORMAT = 1

# Modules of sparsetir_py.runtime (beside this file) that generated sources import.
HELPER_MODULES = ("cpu_intrinsics.py", "cuda_intrinsics.py", "cuda_warp.py")

_MODULES: dict[Path, ModuleType] = {}


def cache_dir() -> Path:
    """The folder generated kernels are written to (see the module docstring)."""
    explicit = os.environ.get("SPARSETIR_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
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


def write_source(path: Path, source: str) -> None:
    """Write `source` to `path` unless it already holds it (rewriting would invalidate Numba's cache)."""
    try:
        if path.read_text() == source:
            return
    except OSError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    # Write then rename, so that a concurrent process never imports a half-written file.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(source)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def import_source(path: Path) -> ModuleType:
    """Import the generated module at `path` (once per process)."""
    path = path.resolve()
    module = _MODULES.get(path)
    if module is not None:
        return module
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
    _MODULES[path] = module
    return module
