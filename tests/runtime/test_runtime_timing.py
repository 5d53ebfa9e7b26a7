"""`sparsetir_py.runtime.timing`: the one interleaved-median timer (`sp.tune` and `bench`)."""

from __future__ import annotations

import doctest
import gc

from sparsetir_py.runtime import timing
from sparsetir_py.runtime.timing import medians, time_interleaved


def test_docstring_examples():
    result = doctest.testmod(timing)
    assert result.attempted > 0 and result.failed == 0


def test_rounds_call_each_candidate_once_in_turn():
    order = []
    times = time_interleaved(
        {"a": lambda: order.append("a"), "b": lambda: order.append("b")},
        budget=0.0,
        min_rounds=3,
        warmup=1,
        sync=lambda: order.append("sync"),
    )
    assert order == ["a", "sync", "b", "sync"] * 4  # one warm-up round, then three timed
    assert [len(t) for t in times.values()] == [3, 3]


def test_budget_and_round_limits():
    """More rounds than `min_rounds` while the budget lasts, never more than `max_rounds`."""
    many = time_interleaved({"x": lambda: None}, budget=100.0, min_rounds=2, max_rounds=7)
    assert len(many["x"]) == 7
    few = time_interleaved({"x": lambda: None}, budget=0.0, min_rounds=2, max_rounds=7)
    assert len(few["x"]) == 2


def test_garbage_collector_is_off_while_timing_and_restored():
    seen = []
    time_interleaved({"x": lambda: seen.append(gc.isenabled())}, budget=0.0, min_rounds=2, warmup=1)
    assert seen == [True, False, False] and gc.isenabled()


def test_medians():
    assert medians({"a": [5.0, 1.0, 3.0], "b": [2.0]}) == {"a": 3.0, "b": 2.0}
