"""What the scale-out tests share: a Dask cluster on this machine's loopback only."""

from __future__ import annotations


def loopback_cluster(n_workers: int = 2):
    """A `LocalCluster` of `n_workers` one-thread worker processes on 127.0.0.1 (every server,
    the dashboard too, on a free port), each worker's Numba and OpenMP on one thread."""
    import distributed

    return distributed.LocalCluster(
        n_workers=n_workers,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
        env={"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "passive"},
    )
