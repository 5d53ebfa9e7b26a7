"""Settings for the fuzz suites: cheap and seeded in the default run, long and random in the deep
profile (`pytest --hypothesis-profile=deep`, or `SPARSETIR_FUZZ=deep`).

    @fuzz(50)            # 50 seeded examples by default, 50 * DEEP_FACTOR random ones when deep
    @given(st.text())
    def test_parser_never_escapes(text): ...
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

#: How many more examples a fuzz test runs in the deep profile.
DEEP_FACTOR = 40


def deep() -> bool:
    """Whether the deep profile is in force (read when a test module is imported)."""
    if os.environ.get("SPARSETIR_FUZZ") == "deep":
        return True
    return getattr(settings, "_current_profile", None) == "deep"


def fuzz(examples: int) -> settings:
    """Hypothesis settings for a fuzz test of `examples` cases: seeded (derandomized) and without
    a deadline by default; DEEP_FACTOR times more, with random seeds, in the deep profile."""
    is_deep = deep()
    return settings(
        max_examples=examples * DEEP_FACTOR if is_deep else examples,
        derandomize=not is_deep,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
