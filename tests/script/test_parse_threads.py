"""The project's parses of Python text run one at a time (`sparsetir_py.pyast.parse`): on
CPython 3.11 two concurrent `ast.parse` calls can corrupt the AST constructor's shared recursion
counter ("SystemError: AST constructor recursion depth mismatch", seen once in the README's
distributed block, whose Dask worker threads build kernels side by side). The race itself does
not reproduce on demand, so this checks what prevents it: with a parse that lingers, threads
that parse scripts and co-iteration expressions together never overlap inside it."""

from __future__ import annotations

import ast
import threading
import time

from sparsetir_py import pyast
from sparsetir_py.arith.lattice import parse_expression
from sparsetir_py.ops.scripts import elementwise_source
from sparsetir_py.script import from_script


def test_parses_on_several_threads_never_overlap(monkeypatch):
    inside, most = [0], [0]
    count = threading.Lock()
    real = ast.parse

    def lingering(*args, **kwargs):
        with count:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.002)  # the GIL is free here: another thread's parse would enter now
        try:
            return real(*args, **kwargs)
        finally:
            with count:
                inside[0] -= 1

    monkeypatch.setattr(pyast.ast, "parse", lingering)
    source = elementwise_source("X0 + X1 * X2", 3)
    start = threading.Barrier(4)
    results = []

    def work(k):
        start.wait()
        for _ in range(5):
            results.append(from_script(source) if k % 2 else parse_expression("A * (B + C)", ("A", "B", "C")))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert len(results) == 20 and most[0] == 1
