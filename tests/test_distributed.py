"""sp.distributed on a LocalCluster of 2 worker processes (loopback only).

Results equal scipy (and `sp.ops` bit for bit where the summation order is the same) on a real
graph, on random matrices whose row blocks are empty, and on the edge matrices; a worker killed
while its task runs is survived with the same bits; a DistributedMatrix is sent once and reused,
counted by what the scheduler is told (tasks submitted, bytes scattered); `format="auto"` gives
each piece its own configuration, chosen once per width and shown in `formats`; bad inputs raise
`InputError` before the scheduler hears of anything. Faults: `test_distributed_faults.py`.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest
import scipy.sparse as sps
from dask_support import loopback_cluster
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import edge_matrices, make_csr

import sparsetir_py as sp
from sparsetir_py import ops
from sparsetir_py.data import load_matrix
from sparsetir_py.errors import DistributedError

distributed = pytest.importorskip("distributed")
sp_distributed = sp.distributed

TIMEOUT = 60  # seconds for every wait of a call (the runs here take well under one)


class Traffic:
    """What the in-process scheduler is told: tasks submitted (`update_graph`) and data scattered
    (`update_data`, with the sizes Dask measured). Every scatter reaches the scheduler through
    `update_data`, whether the client sends it directly or through the scheduler."""

    def __init__(self, scheduler):
        self.tasks = 0
        self.scattered: list[tuple[str, int]] = []
        original = scheduler.update_data

        def update_data(*, who_has, nbytes, client=None, **kwargs):
            self.scattered += [(str(k), int(v)) for k, v in nbytes.items()]
            return original(who_has=who_has, nbytes=nbytes, client=client, **kwargs)

        scheduler.update_data = update_data
        scheduler.handlers["update_data"] = update_data
        traffic = self

        class Count(distributed.diagnostics.plugin.SchedulerPlugin):
            def update_graph(self, scheduler, *, keys, **kwargs):
                traffic.tasks += len(keys)

        scheduler.add_plugin(Count(), name="sparsetir-test-traffic")

    def snapshot(self) -> tuple[int, int]:
        return self.tasks, len(self.scattered)

    def since(self, snapshot) -> tuple[int, int]:
        """(tasks submitted, bytes scattered) since `snapshot`."""
        tasks, n = snapshot
        return self.tasks - tasks, sum(b for _, b in self.scattered[n:])


@pytest.fixture(scope="module")
def cluster():
    # Compile the kernels here first: the workers then load them from the on-disk cache.
    A = load_matrix("karate")
    for dtype in (np.float32, np.float64):
        B = np.ones((A.shape[1], 2), dtype)
        ops.spmm(A.astype(dtype), B)
        ops.sddmm(A.astype(dtype), np.ones((A.shape[0], 2), dtype), B)
    import dask

    # `replicas=2` keeps two copies of each piece only where Dask's active memory manager does not
    # drop the copies no task waits for (its ReduceReplicas policy, on by default).
    with dask.config.set({"distributed.scheduler.active-memory-manager.start": False}):
        cluster = loopback_cluster()
    client = distributed.Client(cluster, timeout=TIMEOUT)
    client.wait_for_workers(2, timeout=TIMEOUT)
    traffic = Traffic(cluster.scheduler)
    try:
        yield client, traffic
    finally:
        client.close(timeout=TIMEOUT)
        cluster.close(timeout=TIMEOUT)


@pytest.fixture
def client(cluster):
    client, _ = cluster
    client.wait_for_workers(2, timeout=TIMEOUT)  # a killed worker's replacement has joined
    return client


@pytest.fixture
def traffic(cluster):
    return cluster[1]


def sddmm_reference(A, X, Y):
    A = A.tocsr()
    rows = np.repeat(np.arange(A.shape[0]), np.diff(A.indptr))
    return A.data * np.einsum("ij,ij->i", X[rows].astype(np.float64), Y[A.indices].astype(np.float64))


def operands(A, width, seed=0, dtype=None):
    rng = np.random.default_rng(seed)
    dtype = dtype or A.dtype
    B = rng.standard_normal((A.shape[1], width)).astype(dtype)
    X = rng.standard_normal((A.shape[0], width)).astype(dtype)
    return B, X


# -------------------------------------------------------------------- partition (no cluster)
def test_row_blocks_balance_nonzeros_not_rows():
    """On a power-law graph the row blocks hold about equal nonzeros, far more evenly than
    blocks of equal rows; no block is heavier than its share plus one row."""
    A = load_matrix("wiki-Vote")
    for k in (2, 3, 8):
        bounds = sp_distributed.row_bounds(A.indptr, k)
        assert bounds[0] == 0 and bounds[-1] == A.shape[0] and np.all(np.diff(bounds) > 0)
        nnz = np.diff(A.indptr[bounds])
        heaviest_row = np.diff(A.indptr).max()
        assert len(nnz) == k
        assert nnz.max() <= A.nnz / k + heaviest_row
        even = np.diff(A.indptr[np.linspace(0, A.shape[0], k + 1).astype(int)])
        assert nnz.max() - nnz.min() < (even.max() - even.min()) / 4


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(0, 50), max_size=30), k=st.integers(1, 10))
def test_row_bounds_cover_every_row_once(lengths, k):
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    bounds = sp_distributed.row_bounds(indptr, k)
    m = len(lengths)
    if m == 0:
        assert bounds.tolist() == [0]
        return
    assert bounds[0] == 0 and bounds[-1] == m and np.all(np.diff(bounds) > 0) and len(bounds) <= k + 1
    # Each share of nonzeros (k * nnz / blocks) falls on a boundary as near as any row is.
    nnz = indptr[-1]
    for j in range(1, k):
        distance = np.abs(indptr - nnz * j / k)
        assert distance[bounds].min() == distance.min()


def test_col_bounds():
    assert sp_distributed.col_bounds(10, 3).tolist() == [0, 3, 6, 10]
    assert sp_distributed.col_bounds(2, 5).tolist() == [0, 1, 2]
    assert sp_distributed.col_bounds(0, 4).tolist() == [0, 0]


def test_import_is_lazy():
    """`import sparsetir_py` loads no Dask; `sp.distributed` does, on first use."""
    code = (
        "import sys, sparsetir_py as sp; a = 'distributed' in sys.modules; "
        "sp.distributed.spmm; print(a, 'distributed' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=TIMEOUT)
    assert out.stdout.split() == ["False", "True"]


# -------------------------------------------------------------------- results
@pytest.mark.parametrize("col_blocks", [1, 2])
def test_real_graph_equals_scipy_and_ops(client, col_blocks):
    A = load_matrix("cora")
    B, X = operands(A, 16)
    C = sp_distributed.spmm(A, B, client, col_blocks=col_blocks, timeout=TIMEOUT)
    assert C.dtype == np.float32 and C.shape == (A.shape[0], 16)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
    # Pieces run CSR with the default schedule: each row summed in the same order as one process
    # running it (format="auto" may choose a schedule that sums in another order).
    if col_blocks == 1:
        assert np.array_equal(C, ops.spmm(A, B, format="csr"))
    S = sp_distributed.sddmm(A, X, B, client, col_blocks=col_blocks, timeout=TIMEOUT)
    assert isinstance(S, sps.csr_matrix)
    assert np.array_equal(S.indptr, A.indptr) and np.array_equal(S.indices, A.indices)
    assert not np.shares_memory(S.indices, A.indices)
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)
    assert np.array_equal(S.data, ops.sddmm(A, X, B, format="csr").data)  # one dot product per entry, any split


def partitioned(seed: int):
    """A random matrix (shape 0..30 x 0..30, any density, empty rows, int32/int64 indices,
    float32/float64 values), explicit row boundaries with some blocks of no rows, one block of
    rows emptied of nonzeros, and a column block count. Seeded numpy draws rather than
    hypothesis: hypothesis flags the global `random` use of Dask's background threads."""
    rng = np.random.default_rng(seed)
    m, n = (int(rng.choice([1, rng.integers(2, 31)], p=[0.1, 0.9])) for _ in range(2))
    m, n = (0 if seed == 0 else m), (0 if seed == 1 else n)  # no rows, no columns
    mask = rng.random((m, n)) < rng.choice([0.0, 0.1, 0.3, 1.0, rng.uniform(0.02, 1)])
    mask[rng.random(m) < 0.3, :] = False
    cuts = sorted(rng.integers(0, m + 1, size=rng.integers(0, 6)).tolist())
    bounds = [0, *cuts, m]
    with_rows = [i for i in range(len(bounds) - 1) if bounds[i + 1] > bounds[i]]
    if with_rows:
        empty = rng.choice(with_rows)
        mask[bounds[empty] : bounds[empty + 1], :] = False
    idtype, dtype = rng.choice(["int32", "int64"]), rng.choice(["float32", "float64"])
    A = make_csr(mask, rng.uniform(-1, 1, size=int(mask.sum())), idtype, dtype)
    return A, bounds, int(rng.choice([1, 2, 3])), int(rng.choice([0, 1, 5]))


@pytest.mark.parametrize("seed", range(16))
def test_random_matrices_with_empty_row_blocks(client, seed):
    A, bounds, col_blocks, width = partitioned(seed)
    B, X = operands(A, width, seed=seed)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=bounds, col_blocks=col_blocks, timeout=TIMEOUT) as dA:
        assert dA.row_bounds.tolist() == sorted(set(bounds))
        assert dA.index_dtype == A.indices.dtype
        C = dA.spmm(B)
        S = dA.sddmm(X, B)
    assert C.dtype == A.dtype and C.shape == (A.shape[0], width)
    np.testing.assert_allclose(C, A.toarray().astype(np.float64) @ B, rtol=1e-4, atol=1e-4)
    if col_blocks == 1:
        assert np.array_equal(C, ops.spmm(A, B, format="csr"))
    assert np.array_equal(S.indptr, A.indptr) and np.array_equal(S.indices, A.indices)
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)
    assert np.array_equal(S.data, ops.sddmm(A, X, B, format="csr").data)


def test_random_cases_cover_the_edges():
    """The seeds above include empty matrices, a row block with rows but no nonzeros, blocks of
    no rows, several column blocks, int64 indices and float64 values."""
    cases = [partitioned(seed) for seed in range(16)]
    assert any(A.shape[0] == 0 for A, *_ in cases) and any(A.shape[1] == 0 for A, *_ in cases)
    assert any(len(set(b)) < len(b) for _, b, *_ in cases)
    assert any(A.indices.dtype == np.int64 for A, *_ in cases) and any(A.dtype == np.float64 for A, *_ in cases)
    assert any(c > 1 for _, _, c, _ in cases) and any(w == 0 for *_, w in cases)
    assert all(
        any(A.indptr[b1] == A.indptr[b0] for b0, b1 in itertools.pairwise(b) if b1 > b0)
        for A, b, *_ in cases
        if A.shape[0]
    )


@pytest.mark.parametrize("name", sorted(edge_matrices()))
def test_edge_matrices(client, name):
    A = edge_matrices()[name]
    B, X = operands(A, 3, dtype=np.float64)
    C = sp_distributed.spmm(A, B, client, col_blocks=2, timeout=TIMEOUT)
    assert C.shape == (A.shape[0], 3) and C.dtype == np.float64
    np.testing.assert_allclose(C, A.toarray() @ B, rtol=1e-6, atol=1e-6)
    S = sp_distributed.sddmm(A, X, B, client, timeout=TIMEOUT)
    assert S.shape == A.shape and S.nnz == A.nnz
    np.testing.assert_allclose(S.data, sddmm_reference(A, X, B), rtol=1e-6, atol=1e-6)


def test_unsorted_coo_and_mixed_dtypes_as_ops(client):
    """Any format `sp.ops` takes: COO with duplicates and int values, a float64 operand."""
    rows, cols = np.array([3, 0, 0, 1, 3, 3]), np.array([4, 1, 1, 2, 0, 4])
    A = sps.coo_matrix((np.arange(1, 7), (rows, cols)), shape=(4, 5))
    B = np.arange(10, dtype=np.float64).reshape(5, 2)
    C = sp_distributed.spmm(A, B, client, row_blocks=3, timeout=TIMEOUT)
    assert np.array_equal(C, ops.spmm(A, B, format="csr"))


def test_gather_false_keeps_results_on_the_cluster(client):
    A = load_matrix("citeseer")
    B, X = operands(A, 8)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=3, timeout=TIMEOUT) as dA:
        C = dA.spmm(B, gather=False)
        S = dA.sddmm(X, B, gather=False)
        assert C.shape == (A.shape[0], 8) and C.chunks[0] == tuple(np.diff(dA.row_bounds))
        assert np.array_equal(C.compute(), ops.spmm(A, B, format="csr"))
        assert S.shape == A.shape and isinstance(S._meta, sps.csr_matrix)
        got = S.compute()
        assert isinstance(got, sps.csr_matrix) and (got != ops.sddmm(A, X, B, format="csr")).nnz == 0


def test_named_and_callable_schedules(client):
    A = load_matrix("cora")
    B, _ = operands(A, 16)
    C = sp_distributed.spmm(A, B, client, schedule="csr_cpu_rows_tiled", timeout=TIMEOUT)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)

    def rows_parallel(sch):
        from schedules import spmm

        spmm.csr_cpu_rows(sch)

    def kernels():
        return client.run(lambda: len(sys.modules["sparsetir_py.ops.kernels"].KERNELS))

    with sp_distributed.DistributedMatrix(A, client, timeout=TIMEOUT) as dA:
        assert np.array_equal(dA.spmm(B, schedule=rows_parallel), ops.spmm(A, B, format="csr"))
        compiled = kernels()
        for _ in range(3):  # each call unpickles the function anew: still the same kernel
            assert np.array_equal(dA.spmm(B, schedule=rows_parallel), ops.spmm(A, B, format="csr"))
        assert kernels() == compiled


def test_auto_format_per_piece_is_chosen_once_and_shown(client, traffic):
    """`format="auto"`: each piece runs the configuration `sp.tune` chose for its own structure
    (a row block of hub rows and one of short rows may differ), tuned on the worker once per
    width; `formats` shows the choices, and a second call at that width submits only the row
    blocks' tasks."""
    A = load_matrix("wiki-Vote")
    B, X = operands(A, 16)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=3, col_blocks=2, timeout=TIMEOUT) as dA:
        start = traffic.snapshot()
        C = dA.spmm(B, format="auto")
        tasks, _ = traffic.since(start)
        assert tasks == 6 + 3 * 2 + 3  # one choice per piece, one task per piece, one sum per row block
        labels = dA.formats[("spmm", 16)]
        assert len(labels) == dA.num_pieces and all(isinstance(label, str) and label for label in labels)
        np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)
        start = traffic.snapshot()
        np.testing.assert_allclose(dA.spmm(B, format="auto"), C, rtol=1e-5, atol=1e-5)
        assert traffic.since(start)[0] == 3 * 2 + 3  # chosen before: no tuning task
        assert dA.formats[("spmm", 16)] == labels
        S = dA.sddmm(X, B, format="auto")
        np.testing.assert_allclose(S.data, sddmm_reference(A, X, B), rtol=1e-4, atol=1e-4)
        assert len(dA.formats[("sddmm", 16)]) == dA.num_pieces
        # CSR (the default) is shown as such.
        dA.spmm(B)
        assert dA.formats[("spmm", 16)] == ["csr"] * dA.num_pieces
    C = sp_distributed.spmm(A, B, client, format="auto", timeout=TIMEOUT)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def test_placement_and_bytes_sent(client):
    """`placement` is asked of the scheduler: live workers only; `bytes_sent` counts what the
    client scattered (the pieces once, then each call's B once)."""
    A = load_matrix("cora")
    B, _ = operands(A, 4)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        live = set(client.nthreads())
        assert all(held and set(held) <= live for held in dA.placement)
        assert dA.bytes_sent == dA.nbytes
        dA.spmm(B)
        assert dA.bytes_sent == dA.nbytes + B.nbytes


# -------------------------------------------------------------------- reuse
def test_distributed_matrix_is_sent_once_and_reused(client, traffic):
    """Scattering A sends its pieces once; each later call sends only B (Dask's own count of
    the bytes) and submits one task per row block."""
    A = load_matrix("cora")
    a_bytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    B, _ = operands(A, 4)
    assert B.nbytes < a_bytes / 2  # so that a re-sent A would show
    start = traffic.snapshot()
    dA = sp_distributed.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT)
    tasks, sent = traffic.since(start)
    assert tasks == 0 and a_bytes <= sent <= a_bytes + 1024  # Dask's sizeof adds a little per piece
    keys = [f.key for f in dA._pieces]
    for _ in range(3):
        start = traffic.snapshot()
        C = dA.spmm(B)
        assert traffic.since(start) == (2, B.nbytes)
        assert np.array_equal(C, ops.spmm(A, B, format="csr"))
    assert [f.key for f in dA._pieces] == keys
    # A one-shot call, by contrast, sends A every time.
    start = traffic.snapshot()
    sp_distributed.spmm(A, B, client, row_blocks=2, timeout=TIMEOUT)
    assert traffic.since(start) == (2, sent + B.nbytes)
    dA.close()
    with pytest.raises(sp.InputError, match="closed"):
        dA.spmm(B)


def test_column_blocks_send_slabs_not_all_of_b(client, traffic):
    """With 2 column blocks each worker gets half of B's rows: B crosses once in total, and
    each partial product is summed by one task per row block."""
    A = load_matrix("cora")
    B, _ = operands(A, 8)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=2, col_blocks=2, timeout=TIMEOUT) as dA:
        assert dA.col_bounds.tolist() == [0, A.shape[1] // 2, A.shape[1]]
        workers_of_column = [{w for r in range(2) for w in dA.placement[dA._piece_index(r, c)]} for c in range(2)]
        assert all(len(w) == 1 for w in workers_of_column) and workers_of_column[0] != workers_of_column[1]
        start = traffic.snapshot()
        C = dA.spmm(B)
        assert traffic.since(start) == (2 * 2 + 2, B.nbytes)
    np.testing.assert_allclose(C, A @ B, rtol=1e-4, atol=1e-4)


def test_dask_array_operands_stay_on_the_cluster(client, traffic):
    """A two-layer GNN step: the first layer's output stays on the workers as a dask.array and is
    the next layer's B; the client scatters nothing after A."""
    import dask.array as da

    A = load_matrix("cora")
    B, X = operands(A, 8)
    W = np.random.default_rng(3).standard_normal((8, 8)).astype(np.float32)
    with sp_distributed.DistributedMatrix(A, client, row_blocks=2, col_blocks=2, timeout=TIMEOUT) as dA:
        Bd = client.persist(da.from_array(B, chunks=(1000, 8)))
        distributed.wait(Bd, timeout=TIMEOUT)
        start = traffic.snapshot()
        H1 = dA.spmm(Bd, gather=False)
        H2 = dA.spmm(H1 @ W)
        S = dA.sddmm(H1, da.from_array(X, chunks=(500, 8)), gather=False)
        assert traffic.since(start)[1] == 0  # nothing scattered: every operand was a dask.array
        expected = ops.spmm(A, B, format="csr")
        assert H1.chunks[0] == tuple(np.diff(dA.row_bounds))
        np.testing.assert_allclose(H1.compute(), expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(H2, A @ (np.asarray(A @ B) @ W), rtol=1e-4, atol=1e-4)
        got = S.compute()
        np.testing.assert_allclose(got.data, sddmm_reference(A, H1.compute(), X), rtol=1e-4, atol=1e-4)
    # A dask operand is checked by its metadata before anything runs.
    start = traffic.snapshot()
    for bad in (
        da.zeros((5, 2), chunks=2),
        da.zeros((A.shape[1],), chunks=100),
        da.zeros((A.shape[1], 2), dtype="c8", chunks=100),
    ):
        with pytest.raises(sp.InputError):
            sp_distributed.spmm(A, bad, client, timeout=TIMEOUT)
    assert traffic.since(start) == (0, 0)


# -------------------------------------------------------------------- bad input
def _broken_indptr():
    A = sps.csr_matrix((np.ones(3, np.float32), np.array([0, 1, 2]), np.array([0, 2, 1, 3])), shape=(3, 3))
    return A


def test_bad_inputs_fail_before_anything_is_sent(client, traffic):
    A = load_matrix("karate")
    m, n = A.shape
    B, X = operands(A, 4)
    lock = threading.Lock()
    calls = {
        "A dense": lambda: sp_distributed.spmm(A.toarray(), B, client),
        "A broken indptr": lambda: sp_distributed.spmm(_broken_indptr(), B[:3], client),
        "B rows": lambda: sp_distributed.spmm(A, B[:-1], client),
        "B complex": lambda: sp_distributed.spmm(A, B.astype(np.complex64), client),
        "B 1-D": lambda: sp_distributed.spmm(A, B[:, 0], client),
        "X Y widths": lambda: sp_distributed.sddmm(A, X[:, :2], B, client),
        "X rows": lambda: sp_distributed.sddmm(A, X[1:], B, client),
        "target": lambda: sp_distributed.spmm(A, B, client, target="tpu"),
        "schedule name": lambda: sp_distributed.sddmm(A, X, B, client, schedule="nope"),
        "schedule unpicklable": lambda: sp_distributed.spmm(A, B, client, schedule=lambda sch, lock=lock: None),
        "row_blocks 0": lambda: sp_distributed.spmm(A, B, client, row_blocks=0),
        "row_blocks end": lambda: sp_distributed.spmm(A, B, client, row_blocks=[0, 5]),
        "row_blocks order": lambda: sp_distributed.spmm(A, B, client, row_blocks=[0, 9, 3, m]),
        "col_blocks": lambda: sp_distributed.spmm(A, B, client, col_blocks=-1),
        "col_blocks floats": lambda: sp_distributed.spmm(A, B, client, col_blocks=[0.0, float(n)]),
        "replicas": lambda: sp_distributed.spmm(A, B, client, replicas=0),
        "format": lambda: sp_distributed.spmm(A, B, client, format="ell"),
        "timeout": lambda: sp_distributed.spmm(A, B, client, timeout=0),
        "client": lambda: sp_distributed.spmm(A, B, "tcp://127.0.0.1:8786"),
        "DistributedMatrix client": lambda: sp_distributed.DistributedMatrix(A, None),
    }
    for name, call in calls.items():
        start = traffic.snapshot()
        with pytest.raises(sp.InputError):
            call()
        assert traffic.since(start) == (0, 0), name
    # The same errors as sp.ops, word for word.
    for dist, local in [
        (lambda: sp_distributed.spmm(A, B[:-1], client), lambda: ops.spmm(A, B[:-1])),
        (lambda: sp_distributed.spmm(_broken_indptr(), B[:3], client), lambda: ops.spmm(_broken_indptr(), B[:3])),
        (lambda: sp_distributed.sddmm(A, X, B, client, schedule="nope"), lambda: ops.sddmm(A, X, B, schedule="nope")),
    ]:
        with pytest.raises(sp.InputError) as got:
            dist()
        with pytest.raises(sp.InputError) as expected:
            local()
        assert str(got.value) == str(expected.value)
    # A distributed matrix: bad operands and changes of its partition are refused, nothing sent.
    with sp_distributed.DistributedMatrix(A, client, timeout=TIMEOUT) as dA:
        for call in (
            lambda: dA.spmm(B[:-1]),
            lambda: dA.sddmm(X, B[:, :1]),
            lambda: sp_distributed.spmm(dA, B, client, row_blocks=2),
            lambda: dA.spmm(B, timeout=-1),
        ):
            start = traffic.snapshot()
            with pytest.raises(sp.InputError):
                call()
            assert traffic.since(start) == (0, 0)


# -------------------------------------------------------------------- faults
def _holding_schedule(folder: str, op: str):
    """The default schedule of `op`, which first waits while `folder/hold` exists, after writing
    `folder/running.<pid>`: a task that compiles with it is running until the test lets it go."""

    def schedule(sch):
        import os
        import time

        import schedules

        hold = os.path.join(folder, "hold")
        if os.path.exists(hold):
            open(os.path.join(folder, f"running.{os.getpid()}"), "w").close()
            give_up = time.monotonic() + 60
            while os.path.exists(hold) and time.monotonic() < give_up:
                time.sleep(0.02)
        getattr(schedules, op).DEFAULT["cpu"](sch)

    return schedule


def _kill_a_worker_mid_call(client, folder, call):
    """Run `call` in a thread, SIGKILL the first worker process found running one of its tasks,
    let the others go on; returns (the call's result, the killed pid)."""
    os.makedirs(folder, exist_ok=True)
    hold = os.path.join(folder, "hold")
    open(hold, "w").close()
    worker_pids = set(client.run(os.getpid).values())
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        future = pool.submit(call)
        try:
            deadline = time.monotonic() + TIMEOUT
            running = []
            while not running and time.monotonic() < deadline and not future.done():
                running = [f for f in os.listdir(folder) if f.startswith("running.")]
                time.sleep(0.02)
            assert running, "no task started"
            pid = int(running[0].split(".")[1])
            assert pid in worker_pids  # one of the cluster's worker processes, started by the fixture
            os.kill(pid, signal.SIGKILL)
        finally:
            os.remove(hold)
        return future.result(timeout=TIMEOUT), pid


def test_killed_worker_mid_call_gives_the_same_bits(client, traffic, tmp_path):
    """A worker dies while it runs a task of the call; the piece it held alone is scattered again
    from the client and its row block resubmitted: the result is exact."""
    A = load_matrix("cora")
    B, _ = operands(A, 16)
    expected = ops.spmm(A, B, format="csr")
    schedule = _holding_schedule(str(tmp_path), "spmm")
    with sp_distributed.DistributedMatrix(A, client, row_blocks=2, timeout=TIMEOUT) as dA:
        keys, placement = [f.key for f in dA._pieces], list(dA.placement)
        start = traffic.snapshot()
        C, _ = _kill_a_worker_mid_call(client, str(tmp_path), lambda: dA.spmm(B, schedule=schedule))
        assert np.array_equal(C, expected)
        # Exactly the dead worker's piece was sent again, to another worker.
        again = [p for p in range(2) if dA._pieces[p].key != keys[p]]
        assert len(again) == 1 and dA.placement[again[0]] != placement[again[0]]
        _, sent = traffic.since(start)
        piece = A[dA.row_bounds[again[0]] : dA.row_bounds[again[0] + 1]]
        assert sent >= B.nbytes + piece.data.nbytes + piece.indices.nbytes
        # The matrix stays usable after the loss.
        assert np.array_equal(dA.spmm(B), expected)


def test_killed_worker_with_replicas_is_retried_by_dask(client, traffic, tmp_path):
    """With each piece on both workers, Dask reruns the dead worker's task on the other one: no
    piece of A is scattered again (the pieces keep their keys), and the SDDMM values are exact.
    The operands go out at least once; when the rerun lands where an operand's only copy was
    lost, Dask moves it again, so their bytes are a lower bound (a loaded machine shows it)."""
    A = load_matrix("cora")
    B, X = operands(A, 16)
    expected = ops.sddmm(A, X, B, format="csr")
    schedule = _holding_schedule(str(tmp_path), "sddmm")
    with sp_distributed.DistributedMatrix(A, client, row_blocks=2, replicas=2, timeout=TIMEOUT) as dA:
        assert all(len(p) == 2 for p in dA.placement)
        keys = [f.key for f in dA._pieces]
        start = traffic.snapshot()
        S, _ = _kill_a_worker_mid_call(client, str(tmp_path), lambda: dA.sddmm(X, B, schedule=schedule))
        _, sent = traffic.since(start)
        assert sent >= X.nbytes + B.nbytes
        assert [f.key for f in dA._pieces] == keys  # no piece of A scattered again
    assert np.array_equal(S.data, expected.data) and np.array_equal(S.indices, expected.indices)


def test_a_call_past_its_timeout_raises(client, tmp_path):
    A = load_matrix("karate")
    B, _ = operands(A, 2)
    hold = tmp_path / "hold"
    hold.touch()
    try:
        t0 = time.monotonic()
        with pytest.raises(DistributedError, match="within 1"):
            sp_distributed.spmm(A, B, client, schedule=_holding_schedule(str(tmp_path), "spmm"), timeout=1)
        assert time.monotonic() - t0 < 10
    finally:
        hold.unlink()
