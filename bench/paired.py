"""`python -m bench spmm|sddmm --paired`: sparsetir_py and each baseline in one process, their
calls interleaved, as a user's program (or a check that pairs the two) runs them.

    python -m bench sddmm --paired --baselines torch --graphs path/to/jazz.npz arrow.npz
    python -m bench spmm --paired --baselines mkl --omp-wait-policy active
    python -m bench spmm --paired --smoke            # cora, width 32, scipy, few rounds

The separate-process suite (`python -m bench`) times each library alone; here the libraries share
the process, its caches and its OpenMP runtime (Numba's and torch's GNU OpenMP), and whether idle
threads sleep or spin between calls (`--omp-wait-policy`) decides what a parallel region costs.
Per graph (one worker process, every width and baseline) and width: both results are checked
against scipy (float64) first; ours runs as `sp.ops` does by default (`format="auto"`: the search
runs on the first, untimed call); then rounds of one call of each in turn, at least `MIN_ROUNDS`,
until `--budget` seconds or `--repeat` rounds. Ratio = median of the baseline / median of ours
(above 1: sparsetir_py is faster). Writes `<out>/<op>-paired.json` and `.md`; exit status 1 when
a result fails its check or a run of ours fails.

This is the parent's side; the worker's is `bench.worker.run_paired` (job kind `paired`).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from .graphs import DEFAULT_GRAPHS, expand_sets, graph_spec, is_graph_file, known_graphs
from .libraries import BASELINES, LIBRARIES, OURS
from .measure import MIN_ROUNDS, RTOL, geomean
from .report import FLOOR, TARGETS, machine
from .runner import Config, plan, run_worker, worker_env

DEFAULT_REPEAT = 200
DEFAULT_BUDGET = 2.0
SMOKE = {"graphs": ["cora"], "widths": [32], "baselines": ["scipy"], "repeat": 12, "budget": 0.2}
TIMEOUT = 1800.0


def run(args, command: str) -> int:
    """Run the paired benchmark for the parsed CLI arguments; returns the exit status."""
    smoke = SMOKE if args.smoke else {}
    graphs = expand_sets(args.graphs or smoke.get("graphs") or list(DEFAULT_GRAPHS))
    unknown = sorted(g for g in graphs if g not in known_graphs() and not is_graph_file(g))
    if unknown:
        raise SystemExit(f"unknown graph(s) {', '.join(unknown)}; known: {', '.join(known_graphs())}, or a file")
    widths = args.widths or smoke.get("widths") or [32, 128, 512]
    requested = args.baselines or smoke.get("baselines") or list(BASELINES["cpu"])
    repeat = args.repeat or smoke.get("repeat", DEFAULT_REPEAT)
    budget = args.budget or smoke.get("budget", DEFAULT_BUDGET)
    ops = ("spmm", "sddmm") if args.op == "all" else (args.op,)
    status = 0
    for op in ops:
        chosen = plan(Config(op=op, graphs=graphs, widths=widths, baselines=requested, targets=("cpu",)))
        baselines = [name for name in chosen.libraries if name != OURS["cpu"]]
        notes = chosen.notes
        extra: dict[str, str] = {}
        for name in [OURS["cpu"], *baselines]:
            extra.update(LIBRARIES[name].env())
        env = worker_env(args.threads, extra, args.keep_openblas_env, args.omp_wait_policy)
        results, failures = [], []
        for graph in graphs:
            spec = graph_spec(graph, Path(args.out) / "cache")  # generated graphs: written once, by path
            job = {
                "kind": "paired", "op": op, "graph": spec, "widths": list(widths), "baselines": baselines,
                "threads": args.threads, "seed": args.seed, "repeat": repeat, "budget": budget, "rtol": RTOL,
            }  # fmt: skip
            for event in run_worker(job, env, TIMEOUT):
                if event["event"] == "result":
                    results.append(event)
                    line = "  ".join(f"{b} {event['ratios'].get(b, math.nan):.2f}x" for b in baselines)
                    print(f"{event['graph']:>22s} width {event['width']:4d}  ours {event['ours_ms']:.4g} ms  {line}")
                elif event["event"] in ("wrong", "error"):
                    failures.append(event)
                    print(f"{event.get('graph')} width {event.get('width')}: {event['event']}: {event['message']}")
                elif event["event"] == "exit" and event["code"] != 0:
                    failures.append({"event": "error", "graph": spec["name"], "message": event["stderr_tail"]})
                    print(f"{spec['name']}: worker exited with {event['code']}: {event['stderr_tail'][-500:]}")
        report = {
            "op": op, "command": command, "machine": machine(), "omp_wait_policy": args.omp_wait_policy,
            "threads": args.threads, "baselines": baselines, "notes": notes, "results": results,
            "failures": failures, "summary": summarize(op, results, baselines),
        }  # fmt: skip
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{op}-paired.json").write_text(json.dumps(report, indent=1))
        (out / f"{op}-paired.md").write_text(markdown(report))
        for line in summary_lines(report):
            print(line)
        print(f"  wrote {out / f'{op}-paired.md'} and {out / f'{op}-paired.json'}")
        status = max(status, 1 if failures else 0)
    return status


def summarize(op: str, results: list[dict], baselines: list[str]) -> dict:
    """Per baseline: geomean ratio, worst case, pairs below `FLOOR`, and the issue's target."""
    out = {}
    for b in baselines:
        pairs = [(r["ratios"][b], r["graph"], r["width"]) for r in results if b in r["ratios"]]
        if not pairs:
            continue
        worst = min(pairs)
        out[b] = {
            "geomean": geomean(p[0] for p in pairs),
            "pairs": len(pairs),
            "worst": {"ratio": worst[0], "graph": worst[1], "width": worst[2]},
            "below_floor": sum(p[0] < FLOOR for p in pairs),
            "target": TARGETS.get(op, {}).get(b),
        }
    return out


def summary_lines(report: dict) -> list[str]:
    lines = [f"{report['op']} paired (one process, OMP_WAIT_POLICY={report['omp_wait_policy']}):"]
    for b, s in report["summary"].items():
        target = ""
        if s["target"] is not None:
            target = f" (target >= {s['target']}x: {'met' if s['geomean'] >= s['target'] else 'missed'})"
        w = s["worst"]
        lines.append(
            f"  geomean vs {b}: {s['geomean']:.2f}x over {s['pairs']} pairs{target}; worst {w['ratio']:.2f}x "
            f"({w['graph']}, width {w['width']}), {s['below_floor']} below {FLOOR}x"
        )
    return lines


def markdown(report: dict) -> str:
    baselines = report["baselines"]
    lines = [
        f"# {report['op'].upper()} paired benchmark",
        "",
        f"- command: `{report['command']}`",
        f"- machine: {report['machine']['cpu']}, {report['machine']['cores']} cores; {report['threads']} threads "
        f"for every library, one process, `OMP_WAIT_POLICY={report['omp_wait_policy']}`",
        f"- calls interleaved (ours, then each baseline, per round), at least {MIN_ROUNDS} rounds; ratio = "
        "baseline median / ours median (above 1: sparsetir_py is faster); results checked against scipy first",
        *(f"- `{name}`: {note}" for name, note in report["notes"].items()),
        "",
        "| graph | nnz | width | ours ms | chosen | rounds | " + "".join(f"{b} ms (ratio) | " for b in baselines),
        "|---|---|---|---|---|---|" + "---|" * len(baselines),
    ]
    for r in report["results"]:
        cells = [f"{r['baseline_ms'][b]:.4g} ({r['ratios'][b]:.2f}x)" if b in r["ratios"] else "-" for b in baselines]
        head = f"| {r['graph']} | {r['nnz']} | {r['width']} | {r['ours_ms']:.4g} | {r['chosen']} | {r['rounds']} | "
        lines.append(head + " | ".join(cells) + " |")
    lines += ["", *summary_lines(report)]
    for f in report["failures"]:
        lines.append(f"- FAILED {f.get('graph')} width {f.get('width')}: {f['message'][:300]}")
    return "\n".join(lines) + "\n"
