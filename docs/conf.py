"""Sphinx configuration of the sparsetir_py documentation (`make docs`; the test suite builds it
with warnings as errors)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the package, format_rules and schedules from this checkout

project = "sparsetir_py"
author = "the sparsetir_py developers"
copyright = "the sparsetir_py developers, Apache-2.0"

extensions = [
    "myst_parser",  # Markdown pages (the tutorials, the design document)
    "sphinx.ext.autodoc",  # the API reference from docstrings
    "sphinx.ext.napoleon",  # Google-style "Args:" / "Returns:" sections
    "sphinx.ext.viewcode",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
# Docstrings write code in single backticks, as Markdown does: show it as code.
default_role = "code"
myst_heading_anchors = 3
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # signatures stay readable; types are in the docstrings
autodoc_default_options = {"members": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
suppress_warnings = ["myst.xref_missing"]  # links into the repository (../README.md) outside docs/
html_theme = "alabaster"
html_static_path: list[str] = []
html_title = "sparsetir_py"
