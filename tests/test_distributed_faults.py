"""Fault injection for sp.distributed (issue 27), on loopback only.

A LocalCluster of 2 worker processes under nannies (a killed worker is restarted): a worker
killed (SIGKILL) before a call and at each step of one (scattering A's pieces, scattering the
operands, choosing formats, running the tasks, gathering the results; the kill lands a seeded
random moment after the step starts), a worker that hangs (SIGSTOP) before a call and while its
task runs, a scheduler that stops answering or dies (a scheduler and a worker of their own, in
processes started here), and a soak of `SOAK_CALLS` calls with random kills. Every call must
return the result scipy gives, or raise `DistributedError`, by its own timeout: a watchdog thread
fails the test a few seconds past it, so nothing here can hang the suite. Every process started
here is stopped by the fixtures. `SPARSETIR_SOAK=<calls>` runs a longer soak. The counts (calls,
kills, survived, reported, the longest call against its timeout) are printed at the end of the
module (`pytest -s`) and kept in `COUNTS`.
"""

from __future__ import annotations

import collections
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import dask
import numpy as np
import pytest
import scipy.sparse as sps
from dask_support import loopback_cluster

import sparsetir_py as sp
from sparsetir_py import ops
from sparsetir_py.data import load_matrix
from sparsetir_py.errors import DistributedError

distributed = pytest.importorskip("distributed")
D = sp.distributed

TIMEOUT = 20.0  # each call's own deadline
LATE = 1.5  # seconds past its deadline a call may take to return (its last exchange being abandoned)
HANG = 3.0  # HANG_SECONDS here: a stopped worker is given up on after this long
SOAK_CALLS = int(os.environ.get("SPARSETIR_SOAK", "50"))
SOAK_SECONDS = max(120.0, 2.0 * SOAK_CALLS)  # the soak stops by itself after this long
COUNTS = collections.Counter()
LATENCY = {"max_s": 0.0, "timeout_s": TIMEOUT}


# -------------------------------------------------------------------- the cluster
@pytest.fixture(scope="module")
def cluster():
    # Compile the kernels here first: the workers, and their replacements, load them from the
    # on-disk kernel cache.
    A = load_matrix("cora")
    B = np.ones((A.shape[1], 8), np.float32)
    ops.spmm(A, B, format="csr")
    ops.sddmm(A, np.ones((A.shape[0], 8), np.float32), B, format="csr")
    # The cluster closes a nanny whose worker has been gone for `lost-worker-timeout` (15 s) when
    # the timer fires, even if that worker came back and was killed again since: with kills every
    # second or two it would lose its nannies one by one.
    config = dask.config.set({"distributed.deploy.lost-worker-timeout": "1h"})
    cluster = loopback_cluster()
    client = distributed.Client(cluster, timeout=60)
    stopped: set[int] = set()
    try:
        client.wait_for_workers(2, timeout=60)
        yield cluster, client, stopped
    finally:
        for pid in stopped:
            _signal(pid, signal.SIGCONT)
        client.close(timeout=30)
        cluster.close(timeout=30)
        config.__exit__(None, None, None)
        print(f"\nfault injection: {dict(COUNTS)}; longest call {LATENCY['max_s']:.2f} s of {TIMEOUT:g} s")


@pytest.fixture
def ready(cluster, monkeypatch):
    """Two running workers, heartbeats checked at `HANG`, no hook; afterwards, stopped workers
    resumed."""
    cluster, client, stopped = cluster
    for pid in list(stopped):
        _signal(pid, signal.SIGCONT)
        stopped.discard(pid)
    _two_workers(cluster, client)
    monkeypatch.setattr(D, "HANG_SECONDS", HANG)
    monkeypatch.setattr(D, "POLL_SECONDS", 0.5)
    monkeypatch.setattr(D, "_phase_hook", None)
    yield cluster, client, stopped
    D._phase_hook = None
    for pid in list(stopped):
        _signal(pid, signal.SIGCONT)
        stopped.discard(pid)


def _two_workers(cluster, client) -> None:
    """Wait until both workers run (a killed one's replacement has joined). A nanny that did not
    bring its worker back within 30 s is asked again once (`scale`); a cluster still short of
    workers after that skips the test: Dask's nanny failed, not the code under test."""
    for attempt in range(2):
        try:
            client.wait_for_workers(2, timeout=30)
            _wait_for(lambda: len(_pids(cluster)) == 2 and set(_pids(cluster)) == set(client.nthreads()), 30)
            return
        except (AssertionError, TimeoutError):
            if attempt:
                pytest.skip("a killed worker was not restarted by its nanny within a minute")
            cluster.scale(2)


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, sig)


def _wait_for(condition, seconds: float) -> None:
    give_up = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < give_up, "the cluster did not recover"
        time.sleep(0.05)


def _pids(cluster) -> dict[str, int]:
    """Worker address -> the pid of its process, from the nannies this process started: live
    processes only (a nanny reports a killed worker's pid until it has noticed)."""
    out = {}
    for nanny in list(cluster.workers.values()):
        pid, address = getattr(nanny, "pid", None), getattr(nanny, "worker_address", None)
        if pid and address and _alive(pid):
            out[address] = pid
    return out


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _kill(cluster, rng, sig=signal.SIGKILL, address: str | None = None) -> int | None:
    """Send `sig` to one worker process of the cluster (`address`'s, or a random one)."""
    pids = _pids(cluster)
    if address is None and pids:
        address = sorted(pids)[rng.integers(len(pids))]
    pid = pids.get(address)
    if pid is None:
        return None
    _signal(pid, sig)
    COUNTS["kills" if sig == signal.SIGKILL else "stops"] += 1
    return pid


def _later(seconds: float, fn) -> threading.Timer:
    timer = threading.Timer(seconds, fn)
    timer.daemon = True
    timer.start()
    return timer


# -------------------------------------------------------------------- one bounded call
def _bounded(fn, timeout: float = TIMEOUT):
    """Run `fn` in a thread of its own; fail if it has not returned `LATE` + 3 s after
    `timeout`. Returns (value or exception, seconds)."""
    box = {}

    def target():
        start = time.monotonic()
        try:
            box["value"] = fn()
        except BaseException as e:  # classified by the caller
            box["error"] = e
        box["seconds"] = time.monotonic() - start

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout + LATE + 3)
    assert not thread.is_alive(), f"a call with timeout {timeout} s still runs after {timeout + LATE + 3} s"
    return box.get("error", box.get("value")), box["seconds"]


def _outcome(result, seconds: float, check, timeout: float = TIMEOUT) -> str:
    """'survived' (the right result) or 'reported' (a DistributedError), by the deadline;
    anything else fails."""
    COUNTS["calls"] += 1
    LATENCY["max_s"] = max(LATENCY["max_s"], seconds)
    assert seconds <= timeout + LATE, f"returned after {seconds:.2f} s, past its timeout of {timeout} s"
    if isinstance(result, DistributedError):
        COUNTS["reported"] += 1
        return "reported"
    if isinstance(result, BaseException):
        raise AssertionError(f"not a DistributedError: {type(result).__module__}.{type(result).__name__}: {result}")
    check(result)
    COUNTS["survived"] += 1
    return "survived"


# -------------------------------------------------------------------- operands
@pytest.fixture(scope="module")
def problem():
    """A matrix whose pieces take a moment to send (2 MB each), its operands and the answers."""
    rng = np.random.default_rng(7)
    A = sps.random(30000, 30000, density=3e-4, format="csr", dtype=np.float32, random_state=rng)
    B = rng.standard_normal((30000, 16)).astype(np.float32)
    X = rng.standard_normal((30000, 16)).astype(np.float32)
    return A, B, X, ops.spmm(A, B, format="csr"), ops.sddmm(A, X, B, format="csr").data


def _checker(op: str, problem, exact: bool = True):
    """The check of a result: the same bits as one process running CSR, or with `exact=False`
    (each piece in its own format: other summation orders) equal up to rounding."""
    A, _, _, C, S = problem

    def check(result):
        got = result if op == "spmm" else result.data
        if op == "sddmm":
            assert np.array_equal(result.indptr, A.indptr) and np.array_equal(result.indices, A.indices)
        if exact:
            np.testing.assert_array_equal(got, C if op == "spmm" else S)
        else:
            np.testing.assert_allclose(got, C if op == "spmm" else S, rtol=1e-4, atol=1e-4)

    return check


def _call(op: str, dA, problem, **kwargs):
    _, B, X, *_ = problem
    if op == "spmm":
        return lambda: dA.spmm(B, **kwargs)
    return lambda: dA.sddmm(X, B, **kwargs)


# -------------------------------------------------------------------- kills
@pytest.mark.parametrize("seed", range(2))
def test_kill_between_calls(ready, problem, seed):
    """A worker killed after the matrix was scattered, the call made at once (the scheduler may
    still list the dead worker): the result is right, the dead worker's piece lives on a live
    worker (`placement`), and the matrix keeps working."""
    cluster, client, _ = ready
    rng = np.random.default_rng(seed)
    A, *_ = problem
    op = ("spmm", "sddmm")[seed % 2]
    with D.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        assert _outcome(*_bounded(_call(op, dA, problem)), _checker(op, problem)) == "survived"
        victim = dA.placement[seed % 2][0]
        _kill(cluster, rng, address=victim)
        assert _outcome(*_bounded(_call(op, dA, problem, timeout=TIMEOUT)), _checker(op, problem)) == "survived"
        placement = dA.placement
        assert all(held and victim not in held for held in placement), placement
        assert _outcome(*_bounded(_call(op, dA, problem)), _checker(op, problem)) == "survived"


PHASES = ["scattering A's pieces", "scattering the operands", "choosing formats", "running the tasks",
          "gathering the results"]  # fmt: skip


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("phase", PHASES)
def test_kill_at_each_step(ready, problem, phase, seed):
    """A worker killed a random moment (0-50 ms, seeded) after a step of the call started: the
    call returns the right result (pieces and operands sent again to live workers, lost tasks
    run again) or a DistributedError, by its deadline."""
    cluster, client, _ = ready
    rng = np.random.default_rng(1000 + seed)
    A, B, X, *_ = problem
    op = ("spmm", "sddmm")[seed % 2]
    fired = []

    def hook(step):
        if step == phase and not fired:
            fired.append(_later(float(rng.uniform(0, 0.05)), lambda: _kill(cluster, rng)))

    fmt = "auto" if phase == "choosing formats" else "csr"
    if phase == "scattering A's pieces":  # a one-shot call: it scatters A itself
        D._phase_hook = hook
        if op == "spmm":
            result = _bounded(lambda: D.spmm(A, B, client, timeout=TIMEOUT))
        else:
            result = _bounded(lambda: D.sddmm(A, X, B, client, timeout=TIMEOUT))
    else:
        with D.DistributedMatrix(A, client, timeout=TIMEOUT) as dA:
            D._phase_hook = hook
            result = _bounded(_call(op, dA, problem, format=fmt, timeout=TIMEOUT))
            D._phase_hook = None
            if fmt == "auto":
                assert len(dA.formats[(op, 16)]) == dA.num_pieces
    assert fired, f"the call never reached {phase!r}"
    fired[0].join(5)
    outcome = _outcome(*result, _checker(op, problem, exact=fmt == "csr"))
    COUNTS[f"{outcome} at {phase}"] += 1


# -------------------------------------------------------------------- hangs
def test_hung_worker_before_the_call(ready, problem):
    """A worker stopped (SIGSTOP) before a call: the scheduler still lists it, but it sends no
    heartbeat; after `HANG_SECONDS` its piece is sent to the other worker and the call finishes
    there. Resumed, the matrix keeps working."""
    cluster, client, stopped = ready
    A, *_ = problem
    with D.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        victim = dA.placement[0][0]
        stopped.add(_kill(cluster, None, signal.SIGSTOP, address=victim))
        outcome = _outcome(*_bounded(_call("spmm", dA, problem)), _checker("spmm", problem))
        COUNTS[f"{outcome} with a hung worker"] += 1
        assert outcome == "survived"
        assert all(victim not in held for held in dA.placement)
        for pid in list(stopped):
            _signal(pid, signal.SIGCONT)
            stopped.discard(pid)
        assert _outcome(*_bounded(_call("sddmm", dA, problem)), _checker("sddmm", problem)) == "survived"


def test_hung_worker_while_tasks_run(ready, problem):
    """A worker stopped while the call's tasks run: the call gives up on it after
    `HANG_SECONDS` of silence and runs its row block elsewhere."""
    cluster, client, stopped = ready
    A, *_ = problem
    rng = np.random.default_rng(5)
    with D.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:

        def hook(step):
            if step == "running the tasks" and not stopped:
                stopped.add(_kill(cluster, rng, signal.SIGSTOP))

        D._phase_hook = hook
        result = _bounded(_call("sddmm", dA, problem))
        D._phase_hook = None
        outcome = _outcome(*result, _checker("sddmm", problem))
        COUNTS[f"{outcome} with a hung worker"] += 1


def test_a_short_deadline_with_a_hung_worker_is_reported_in_time(ready, problem):
    """With a deadline shorter than `HANG_SECONDS`, a call waiting on a stopped worker raises
    DistributedError naming the step, by its deadline."""
    cluster, client, stopped = ready
    A, *_ = problem
    with D.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        stopped.add(_kill(cluster, None, signal.SIGSTOP, address=dA.placement[0][0]))
        result, seconds = _bounded(_call("spmm", dA, problem, timeout=1.0), timeout=1.0)
        assert isinstance(result, DistributedError) and "sp.distributed.spmm: " in str(result), result
        assert any(phase in str(result) for phase in (*PHASES, "asking the scheduler")), result
        _outcome(result, seconds, None, timeout=1.0)


# -------------------------------------------------------------------- the scheduler
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def own_scheduler(tmp_path):
    """A scheduler and one worker in processes of their own (so that they can be stopped and
    killed), on loopback; both killed at the end."""
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    env = {**os.environ, "NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    started = []
    try:
        started.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--no-dashboard",
                    "--dashboard-address",  # its HTTP server on loopback, on a free port
                    "127.0.0.1:0",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        started.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-nanny",
                    "--host",
                    "127.0.0.1",
                    "--no-dashboard",
                ],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        client = distributed.Client(address, timeout=30)
        try:
            client.wait_for_workers(1, timeout=30)
            yield client, started[0]
        finally:
            for p in started:
                _signal(p.pid, signal.SIGCONT)
                p.kill()
            client.close(timeout=5)
    finally:
        for p in started:
            p.kill()
            p.wait(10)


def test_scheduler_unreachable(own_scheduler, problem, monkeypatch):
    """A scheduler that stops answering (SIGSTOP), then one that died (SIGKILL): the call raises
    DistributedError by its deadline, never a raw Dask or network error and never a hang."""
    monkeypatch.setattr(D, "POLL_SECONDS", 0.5)
    client, scheduler = own_scheduler
    A = load_matrix("cora")
    B = np.ones((A.shape[1], 4), np.float32)
    expected = ops.spmm(A, B, format="csr")

    def check(C):
        assert np.array_equal(C, expected)

    assert _outcome(*_bounded(lambda: D.spmm(A, B, client, timeout=TIMEOUT)), check) == "survived"
    for sig in (signal.SIGSTOP, signal.SIGKILL):
        scheduler.send_signal(sig)
        result, seconds = _bounded(lambda: D.spmm(A, B, client, timeout=2.0), timeout=2.0)
        assert isinstance(result, DistributedError), repr(result)
        _outcome(result, seconds, check, timeout=2.0)
        COUNTS["reported with the scheduler unreachable"] += 1


# -------------------------------------------------------------------- soak
def test_soak_with_random_kills(ready, problem):
    """`SOAK_CALLS` calls (SpMM and SDDMM, on a matrix scattered once and one-shot) while a
    worker is killed at a random moment of about a quarter of them (once both workers are up):
    every call returns the right result or a DistributedError by its deadline, and the matrix
    scattered once is never rebuilt."""
    cluster, client, _ = ready
    rng = np.random.default_rng(2027)
    A = load_matrix("cora")
    B = rng.standard_normal((A.shape[1], 8)).astype(np.float32)
    X = rng.standard_normal((A.shape[0], 8)).astype(np.float32)
    C, S = ops.spmm(A, B, format="csr"), ops.sddmm(A, X, B, format="csr").data
    checks = {
        "spmm": lambda R: np.testing.assert_array_equal(R, C),
        "sddmm": lambda R: np.testing.assert_array_equal(R.data, S),
    }
    give_up = time.monotonic() + SOAK_SECONDS
    kills = 0
    with D.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        for i in range(SOAK_CALLS):
            assert time.monotonic() < give_up, f"the soak ran past {SOAK_SECONDS} s after {i} calls"
            op = ("spmm", "sddmm")[int(rng.integers(2))]
            one_shot = rng.random() < 0.25
            if op == "spmm":
                fn = (lambda: D.spmm(A, B, client, timeout=TIMEOUT)) if one_shot else lambda: dA.spmm(B)
            else:
                fn = (lambda: D.sddmm(A, X, B, client, timeout=TIMEOUT)) if one_shot else lambda: dA.sddmm(X, B)
            timer = None
            if rng.random() < 0.25:
                # Both workers up first (the last one killed has been replaced), so that the
                # kill can land at any step of the call.
                _wait_for(lambda: len(_pids(cluster)) == 2 and set(_pids(cluster)) == set(client.nthreads()), 30)
                timer = _later(float(rng.uniform(0, 0.08)), lambda: _kill(cluster, rng))
                kills += 1
            outcome = _outcome(*_bounded(fn), checks[op])
            COUNTS[f"soak {outcome}"] += 1
            if timer is not None:
                timer.join(5)
    COUNTS["soak calls"] += SOAK_CALLS
    COUNTS["soak kills"] += kills
    assert kills >= SOAK_CALLS // 6
