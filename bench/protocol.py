"""The wire protocol between the benchmark's parent and its workers (`python -m bench.worker`).

The parent writes one job, a JSON object with a `kind` (a key of `bench.worker.JOBS`), to the
worker's stdin and closes it. The worker answers with events: one JSON object per line of stdout,
prefixed with `MARK`. Libraries may print other lines; `decode` reads those as None.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import TextIO

MARK = "@@bench "

#: Where a job's side reports its events: `emit_stdout` in a worker, a list's `append` in tests.
Emit = Callable[[dict], None]


def write_job(job: dict, stream: TextIO) -> None:
    """Send `job` to a worker and close its stdin."""
    stream.write(json.dumps(job))
    stream.close()


def read_job(stream: TextIO) -> dict:
    """The job the parent sent (the whole of stdin)."""
    return json.loads(stream.read())


def encode(event: dict) -> str:
    """One event as the line the worker writes."""
    return MARK + json.dumps(event) + "\n"


def decode(line: str) -> dict | None:
    """The event of a line of the worker's stdout, or None for a line that is not one."""
    return json.loads(line[len(MARK) :]) if line.startswith(MARK) else None


def emit_stdout(event: dict) -> None:
    """Write one event line for the parent."""
    sys.stdout.write(encode(event))
    sys.stdout.flush()
