"""The examples in the docstrings of the index-analysis modules run and give what they say."""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "sparsetir_py.arith.affine",
    "sparsetir_py.arith.indexing_map",
    "sparsetir_py.arith.parser",
    "sparsetir_py.arith.simplify",
    "sparsetir_py.arith.layout_maps",
    "sparsetir_py.arith.interval",
    "sparsetir_py.ir.layout",
]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0
