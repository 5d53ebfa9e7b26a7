"""`python -m bench`: benchmark runners (SpMM, SDDMM) — filled in with the lowering and schedules."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    print("bench: kernels are not generated yet (lowering and code generation are the next issue).")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
