"""`python -m bench spmm|sddmm|all` (also `sparsetir-bench`): sparsetir_py against its baselines.

    python -m bench spmm                       # all graphs, widths 32 128 512, every baseline installed
    python -m bench sddmm --graphs cora pubmed --widths 32 --baselines torch
    python -m bench spmm --smoke               # cora, width 32, scipy only: a few seconds
    python -m bench spmm --distributed 2       # sp.distributed on 2 local workers vs sp.ops (rmat)
    python -m bench sddmm --paired --baselines torch   # one process, calls interleaved

Writes `<out>/<op>.json` and `<out>/<op>.md` (default `bench/results/`) and prints a summary.
Baselines need `pip install -e ".[bench]"`; a missing one is skipped with a note. Exit status 1
when a result failed its check against scipy or a run of sparsetir_py failed; 2 for a bad option
(argparse's usage error) or a run that could not be carried out (one line naming the exception;
`SPARSETIR_DEBUG=1` shows the traceback instead).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from dataclasses import asdict
from pathlib import Path

from sparsetir_py.commandline import (
    debugging,
    error_line,
    error_message,
    nonnegative_int,
    positive_float,
    positive_int,
)

from . import coiteration
from .graphs import DEFAULT_GRAPHS, expand_sets, graph_file_stem, is_graph_file, known_graphs, load_graph
from .libraries import BASELINES, OURS
from .report import finish, summary, write
from .runner import DEFAULT_OUT, Config, run

OPS = ("spmm", "sddmm")
DEFAULT_WIDTHS = (32, 128, 512)
DEFAULT_REPEAT = 30
DEFAULT_BUDGET = 1.0
ALL_BASELINES = tuple(b for bs in BASELINES.values() for b in bs)
SMOKE = {"graphs": ["cora"], "widths": [32], "baselines": ["scipy"], "repeat": 5, "budget": 0.2}


def program_name() -> str:
    """How this command was started, for `--help` and the report: `sparsetir-bench`, `python -m bench`."""
    name = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return "python -m bench" if name in ("", "__main__.py", "-c", "-m") else name


def parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog or program_name(),
        description="Time sparsetir_py's SpMM / SDDMM against scipy, MKL, torch.sparse, GraphBLAS (and cuSPARSE).",
    )
    p.add_argument("op", choices=[*OPS, "all"], help="operator to benchmark ('all': both, one after the other)")
    p.add_argument(
        "--graphs",
        nargs="+",
        metavar="NAME",
        help="shipped graph names, rmat, or paths to scipy .npz or Matrix Market .mtx files "
        f"(default: {' '.join(DEFAULT_GRAPHS)})",
    )
    p.add_argument("--widths", nargs="+", type=int, metavar="W", help="feature widths (default: 32 128 512)")
    p.add_argument(
        "--baselines", nargs="+", metavar="NAME", choices=ALL_BASELINES, help=f"default: {' '.join(ALL_BASELINES)}"
    )
    p.add_argument("--target", choices=["cpu", "cuda", "auto"], default="auto", help="auto: CPU, plus CUDA on a GPU")
    p.add_argument("--repeat", type=positive_int, help="at most this many timed calls per measurement (default 30)")
    p.add_argument(
        "--budget", type=positive_float, help="seconds of timed calls per measurement, at least 3 calls (default 1)"
    )
    p.add_argument(
        "--rounds", type=positive_int, default=1, help="sweeps over all groups; keeps each one's fastest median"
    )
    p.add_argument("--schedule", metavar="NAME", help="a shipped schedule of ours by name (default: the default one)")
    p.add_argument(
        "--format",
        default="auto",
        metavar="NAME",
        help="the format ours decomposes A into: auto (default: sp.tune chooses; its time in its own column), csr, "
        "bsr, ell, hyb, padding, or a rule file's path",
    )
    p.add_argument(
        "--format-param",
        action="append",
        default=[],
        metavar="K=V",
        help="a parameter of --format, e.g. block_size=4 or buckets=[1,2,4,8] (repeatable)",
    )
    p.add_argument("--threads", type=positive_int, default=2, help="threads for every library (default 2)")
    p.add_argument("--seed", type=nonnegative_int, default=0, help="seed of the dense operands")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output folder (default {DEFAULT_OUT})")
    p.add_argument("--smoke", action="store_true", help="cora, width 32, scipy, few calls, small STREAM")
    p.add_argument(
        "--omp-wait-policy", choices=["passive", "active"], default="passive", help="OMP_WAIT_POLICY of the workers"
    )
    p.add_argument("--keep-openblas-env", action="store_true", help="leave OPENBLAS_CORETYPE/L2_SIZE to workers")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--plot", action="store_true", help="also write <out>/<op>.png: ratios per graph and width (needs [viz])"
    )
    p.add_argument(
        "--paired",
        action="store_true",
        help="ours and the baselines in one process, calls interleaved (bench/paired.py): <out>/<op>-paired.md",
    )
    p.add_argument(
        "--distributed",
        type=positive_int,
        metavar="N",
        help="run sp.distributed on a LocalCluster of N workers against single-process sp.ops instead "
        "(default graph rmat, widths 32 128; see bench/distributed.py)",
    )
    return p


def configs(args: argparse.Namespace) -> list[Config]:
    """One `Config` per operator from the parsed arguments (`--smoke` fills unset options)."""
    smoke = SMOKE if args.smoke else {}
    graphs = expand_sets(args.graphs or smoke.get("graphs") or list(DEFAULT_GRAPHS))
    unknown = sorted(g for g in graphs if g not in known_graphs() and not is_graph_file(g))
    if unknown:
        raise SystemExit(
            f"unknown graph(s) {', '.join(unknown)}; known: {', '.join(known_graphs())}, "
            "or a path to a scipy .npz or Matrix Market .mtx file"
        )
    widths = args.widths or smoke.get("widths") or list(DEFAULT_WIDTHS)
    if any(w <= 0 for w in widths):
        raise SystemExit(f"widths must be positive, got {widths}")
    baselines = args.baselines or smoke.get("baselines") or list(ALL_BASELINES)
    if args.target == "auto":
        targets = ("cpu",) if args.smoke else _auto_targets()
    else:
        targets = (args.target,)
    extra = {}
    if args.smoke:
        extra = {"stream_n": 1 << 22, "stream_trials": 3}
    repeat = args.repeat or smoke.get("repeat", DEFAULT_REPEAT)
    budget = args.budget or smoke.get("budget", DEFAULT_BUDGET)
    ops = OPS if args.op == "all" else (args.op,)
    return [
        Config(
            op=op,
            graphs=graphs,
            widths=widths,
            baselines=baselines,
            targets=targets,
            repeat=repeat,
            budget=budget,
            rounds=max(1, args.rounds),
            schedule=args.schedule,
            format=args.format,
            format_params=_format_params(args.format_param),
            threads=args.threads,
            seed=args.seed,
            out=args.out,
            keep_openblas_env=args.keep_openblas_env,
            omp_wait_policy=args.omp_wait_policy,
            progress=not args.no_progress,
            **extra,
        )
        for op in ops
    ]


def _format_params(items: list[str]) -> dict:
    """`["block_size=4", "buckets=[1,2,4]"]` -> `{"block_size": 4, "buckets": [1, 2, 4]}`."""
    import ast

    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise SystemExit(f"--format-param expects K=V, got {item!r}")
        try:
            out[key] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            out[key] = value
    return out


def plot(report: dict, path: Path) -> str:
    """Write the ratio plot of a report (`sparsetir_py.viz.bench_ratios`) as a PNG at `path`;
    returns what happened, for the terminal (no plot when no ratio could be computed)."""
    from sparsetir_py import viz

    try:
        fig = viz.bench_ratios(report)
    except viz.VizError as e:
        return f"no plot: {e}"
    fig.savefig(path, dpi=110, bbox_inches="tight")
    viz.close(fig)
    return f"wrote {path}"


def _auto_targets() -> tuple[str, ...]:
    from .libraries import cuda_missing

    return ("cpu",) if cuda_missing() else ("cpu", "cuda")


def check(args: argparse.Namespace) -> str | None:
    """What is wrong with option values that argparse's types cannot see alone; None when nothing."""
    if args.widths and any(w <= 0 for w in args.widths):
        return f"widths must be positive, got {args.widths}"
    for graph in args.graphs or []:
        if not is_graph_file(graph):
            continue
        try:  # a file that cannot be read fails here, once, not in every worker
            load_graph(graph_file_stem(graph), graph)
        except Exception as e:
            return f"--graphs {graph}: {error_message(e)}"
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        return f"--out {out} is a file; expected a folder for the reports"
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        return f"--out {out}: cannot create the folder ({e.strerror or e})"
    return None


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Entry point of `python -m bench`, `sparsetir-bench` and `sparsetir-py bench`; returns the exit status."""
    argv = sys.argv[1:] if argv is None else argv
    prog = prog or program_name()
    if argv and argv[0] in coiteration.OPS:  # sparse x sparse operators: their own paired run
        return coiteration.main(argv, prog=prog)
    p = parser(prog)
    args = p.parse_args(argv)
    problem = check(args)
    if problem:
        p.error(problem)
    command = f"{prog} {shlex.join(argv)}".rstrip()
    try:
        return _run(args, command)
    except SystemExit as e:
        if isinstance(e.code, str):  # an option found wrong on the way (an unknown graph): a usage error
            p.error(e.code)
        raise
    except KeyboardInterrupt:
        raise
    except Exception as e:  # a graph file that cannot be read, a full disk: one line, status 2
        if debugging():
            raise
        print(error_line(prog, e), file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, command: str) -> int:
    if args.distributed is not None:
        from .distributed import run as run_distributed

        return run_distributed(args, command)
    if args.paired:
        from .paired import run as run_paired

        return run_paired(args, command)
    status = 0
    stream = None
    for config in configs(args):
        record = run(config, stream)
        stream = record["stream"]  # one STREAM measurement per invocation
        config_dict = {k: v for k, v in asdict(config).items() if k not in ("progress",)}
        config_dict["out"] = str(config.out)
        report = finish(config.op, record, config_dict, command)
        json_path, md_path = write(report, Path(config.out))
        print(summary(report))
        print(f"  wrote {md_path} and {json_path}")
        if args.plot:
            print(f"  {plot(report, md_path.with_suffix('.png'))}")
        ours = set(OURS.values())
        for r in report["results"]:
            if r.get("status") == "wrong" or (r["library"] in ours and r.get("status") != "ok"):
                status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
