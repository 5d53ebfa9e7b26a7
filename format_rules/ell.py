"""ELL buckets: every row padded to the smallest of `buckets` (powers of two) that holds it;
rows longer than the largest bucket are split into several rows of that width. One rule per
bucket, named `ell<width>`: the hybrid format (`hyb.py`) with a single column part.

    rules = format_rules.ell.rules(A, buckets=[1, 2, 4, 8, 16])
    args = format_rules.ell.convert(A, buckets=[1, 2, 4, 8, 16])
"""

from __future__ import annotations

from format_rules.hyb import part_rule
from sparsetir_py.format import FormatRewriteRule
from sparsetir_py.format import converters as formats


def rules(A=None, buckets=None, dtype: str = "float32", idtype: str = "int32") -> list[FormatRewriteRule]:
    """One rule per bucket; `buckets` defaults to powers of two up to A's longest row."""
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    converter = lambda M: convert(M, widths, dtype, idtype)  # noqa: E731 - one converter for all buckets
    return [part_rule(f"ell{w}", w, dtype, idtype, converter) for w in widths]


def convert(A, buckets=None, dtype: str = "float32", idtype: str = "int32") -> dict:
    widths = formats.check_buckets(buckets if buckets is not None else formats.default_buckets(A))
    out: dict = {}
    for w, arrays in zip(widths, formats.to_ell_parts(A, widths, 1, idtype, dtype)):
        out.update(formats.renamed(arrays, f"ell{w}"))
    return out
