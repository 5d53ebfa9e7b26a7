"""`python -m sparsetir_py ...`: the same as the `sparsetir-py` command (see `sparsetir_py.cli`)."""

from .cli import main

raise SystemExit(main())
