"""The examples in the docstrings of the Stage II schedule primitives run and give what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "sparsetir_py.schedule.state",
    "sparsetir_py.schedule.loops",
    "sparsetir_py.schedule.caching",
    "sparsetir_py.schedule.compute_at",
    "sparsetir_py.schedule.reduction",
    "sparsetir_py.schedule.annotation",
    "sparsetir_py.schedule.analysis",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
