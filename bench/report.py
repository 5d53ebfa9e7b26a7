"""Derived numbers (ratios, bandwidth, geometric means) and the JSON / markdown outputs.

Ratio = baseline median / ours median, per (graph, width): above 1 means sparsetir_py is faster.
Achieved bandwidth = `measure.bytes_moved(...)` / median time, also as a fraction of the STREAM
triad rate measured in the same run.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import sys
from pathlib import Path

from .libraries import BASELINES, LIBRARIES, OURS
from .measure import Traffic, bytes_moved, bytes_with_reuse, geomean

#: Geomean ratios the project aims for (issue 11: SpMM >= 1.3x MKL, SDDMM >= 1.5x torch), and the
#: ratio no single case should fall below; reported, not enforced.
TARGETS = {"spmm": {"mkl": 1.3, "torch": 1.0}, "sddmm": {"torch": 1.5}}
FLOOR = 0.9


def machine() -> dict:
    """Where the run happened."""
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu": model or platform.processor(),
        "cores": os.cpu_count(),
        "platform": platform.platform(),
        "python": sys.version.split()[0],
    }


def derive(op: str, record: dict) -> dict:
    """Add bandwidth to every ok result, and the per-(graph, width) ratios and geometric means."""
    stream = record["stream"]["best_GBps"]
    for r in record["results"]:
        if r.get("status") != "ok":
            continue
        r["median_ms"] = r["median_s"] * 1e3
        r["bytes_model"] = bytes_moved(op, r["m"], r["n"], r["nnz"], r["width"], r["index_bytes"])
        r["GBps"] = r["bytes_model"] / r["median_s"] / 1e9
        r["frac_stream"] = r["GBps"] / stream
        if "touched" in r:
            # The roofline: the traffic with the format's reuse, at the STREAM rate.
            traffic = Traffic(**r["traffic"]) if "traffic" in r else None  # the format's own (padding, blocks)
            r["bytes_reuse"] = bytes_with_reuse(
                op, r["m"], r["n"], r["nnz"], r["width"], r["touched"], r.get("col_parts", 1),
                index_bytes=r["index_bytes"], traffic=traffic,
            )  # fmt: skip
            r["roofline_s"] = r["bytes_reuse"] / (stream * 1e9)
            r["frac_roofline"] = r["roofline_s"] / r["median_s"]
    by_key = {(r["library"], r["graph"], r["width"]): r for r in record["results"]}
    comparisons, geomeans = [], {}
    for target, ours in OURS.items():
        for baseline in BASELINES[target]:
            ratios = []
            for (lib, graph, width), r in by_key.items():
                if lib != baseline or r.get("status") != "ok":
                    continue
                mine = by_key.get((ours, graph, width))
                if not mine or mine.get("status") != "ok":
                    continue
                ratio = r["median_s"] / mine["median_s"]
                ratios.append((ratio, graph, width))
                comparisons.append({"graph": graph, "width": width, "baseline": baseline, "ratio": ratio})
            if ratios:
                goal = TARGETS.get(op, {}).get(baseline)
                g = geomean([r for r, _, _ in ratios])
                worst = min(ratios)
                geomeans[baseline] = {
                    "ratio": g,
                    "count": len(ratios),
                    "target": goal,
                    "met": None if goal is None else g >= goal,
                    "worst": {"ratio": worst[0], "graph": worst[1], "width": worst[2]},
                    "below_floor": sum(r < FLOOR for r, _, _ in ratios),
                }
    record["comparisons"] = comparisons
    record["geomean"] = geomeans
    record["failures"] = [
        f"{r['library']} on {r['graph']} width {r['width']}: {r['status']}: {r.get('message', '')}"
        for r in record["results"]
        if r.get("status") != "ok"
    ]
    return record


def finish(op: str, record: dict, config_dict: dict, command: str) -> dict:
    """The full report: the raw record plus what it was run with and the derived numbers."""
    report = {
        "op": op,
        "command": command,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "config": config_dict,
        **record,
    }
    return derive(op, report)


def write(report: dict, out: Path) -> tuple[Path, Path]:
    """Write `<op>.json` and `<op>.md` into `out`; return their paths."""
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / f"{report['op']}.json", out / f"{report['op']}.md"
    json_path.write_text(json.dumps(report, indent=1, default=str) + "\n")
    md_path.write_text(markdown(report))
    return json_path, md_path


def _cell_ms(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("status") == "ok":
        return f"{r['median_ms']:.3g}"
    return r.get("status", "?").upper()


def markdown(report: dict) -> str:
    """A markdown page: header, notes, one table per target, geometric means."""
    op = report["op"]
    stream = report["stream"]
    config = report["config"]
    lines = [
        f"# {op.upper()} benchmark",
        "",
        f"- command: `{report['command']}`",
        f"- date: {report['date']}; machine: {report['machine']['cpu']}, {report['machine']['cores']} cores",
        f"- threads: {config['threads']} for every library; float32 values, int32 indices; "
        f"median of up to {config['repeat']} calls after a warm-up (at least {config['min_repeat']}, "
        f"{config['budget']:g} s budget per measurement)"
        + (f"; lowest median of {config['rounds']} rounds" if config.get("rounds", 1) > 1 else ""),
        f"- STREAM triad (same run, {stream['threads']} threads): best {stream['best_GBps']:.1f} GB/s, "
        f"median {stream['median_GBps']:.1f} GB/s",
        "- ratio = baseline time / sparsetir_py time (above 1: sparsetir_py is faster); every result was "
        "checked against scipy (float64) before timing",
        f"- bandwidth: bytes of the traffic model (`bench.measure.bytes_moved`) / time; %STREAM is of the best "
        f"triad rate. {_model_text(op)}",
        "- roofline: bytes of the traffic model of the format that ran (`bench.measure.Traffic`: for a decomposed "
        "format its slots, padding included, a column index and `b` gathered rows per block in BSR, rows a later "
        "part adds into read and written) with the reuse it allows (`bench.measure.bytes_with_reuse`: "
        "each gathered row read from memory once when a column partition's slice of the dense operand fits in "
        "the last-level cache), the time they take at the best STREAM rate, and that time over the kernel's "
        "(above 100%: the kernel beat the roofline, caches closer than memory served it)",
    ]
    loads = [entry["loadavg"][0] for entry in report.get("load", [])]
    if loads:
        lines.append(f"- 1-minute load average before each graph: {min(loads):.2f} to {max(loads):.2f}")
    cores = report["machine"].get("cores") or 1
    if loads and max(loads) > cores:
        lines.append(
            f"- **Warning: the machine was busy** (load average up to {max(loads):.1f} on {cores} cores): times are "
            "inflated, multi-threaded libraries most; compare ratios only between quiet runs"
        )
    for name, lib in report["libraries"].items():
        note = LIBRARIES[name].notes.get(op, "")
        if LIBRARIES[name].ours:
            note += f"; schedule: {config.get('schedule') or 'default'}"
            fmt = config.get("format") or "csr"
            params = ", ".join(f"{k}={v}" for k, v in (config.get("format_params") or {}).items())
            note += f"; format: {fmt}" + (f" ({params})" if params else "")
        if len(lib.get("versions", [])) > 1:
            note += f" — **Warning: the version changed during the run** ({', '.join(lib['versions'])})"
        lines.append(f"- `{name}`: {lib.get('version', '')} — {note}")
    for name, note in report["notes"].items():
        lines.append(f"- `{name}`: {note}")
    by_key = {(r["library"], r["graph"], r["width"]): r for r in report["results"]}
    ratios = {(c["baseline"], c["graph"], c["width"]): c["ratio"] for c in report["comparisons"]}
    for target, ours in OURS.items():
        if ours not in report["libraries"]:
            continue
        baselines = [b for b in BASELINES[target] if b in report["libraries"]]
        lines += ["", f"## {target.upper()}", ""]
        mine_all = [r for r in report["results"] if r.get("library") == ours]
        converts = any("convert_s" in r for r in mine_all)
        tunes = any("tune_s" in r for r in mine_all)
        roof = any("roofline_s" in r for r in mine_all)
        extra = (["tune s", "chosen"] if tunes else []) + (["convert ms"] if converts else [])
        header = [
            "graph",
            "nnz",
            "width",
            f"{ours} ms",
            *extra,
            "GB/s",
            "%STREAM",
            *(["roofline MB", "roofline ms", "% of roofline"] if roof else []),
            *(f"{b} ms (ratio)" for b in baselines),
        ]
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        # Result graph names (a file's stem, not the path given on the command line), in run order.
        graphs = list(dict.fromkeys(r["graph"] for r in report["results"] if "graph" in r))
        for graph in graphs:
            for width in config["widths"]:
                mine = by_key.get((ours, graph, width))
                if mine is None:
                    continue
                ok = mine.get("status") == "ok"
                row = [
                    graph,
                    str(mine.get("nnz", "")),
                    str(width),
                    _cell_ms(mine),
                    *(
                        [f"{mine['tune_s']:.2f}" if "tune_s" in mine else "-", mine.get("chosen") or "-"]
                        if tunes
                        else []
                    ),
                    *([f"{1e3 * mine['convert_s']:.1f}" if "convert_s" in mine else "-"] if converts else []),
                    f"{mine['GBps']:.3g}" if ok else "-",
                    f"{100 * mine['frac_stream']:.0f}%" if ok else "-",
                    *(
                        [
                            f"{mine['bytes_reuse'] / 1e6:.1f}",
                            f"{1e3 * mine['roofline_s']:.3g}",
                            f"{100 * mine['frac_roofline']:.0f}%",
                        ]
                        if roof and ok and "roofline_s" in mine
                        else (["-"] * 3 if roof else [])
                    ),
                ]
                for b in baselines:
                    cell = _cell_ms(by_key.get((b, graph, width)))
                    ratio = ratios.get((b, graph, width))
                    row.append(f"{cell} ({ratio:.2f}x)" if ratio is not None else cell)
                lines.append("| " + " | ".join(row) + " |")
    if report["geomean"]:
        lines += ["", "## Geometric mean of the ratios", ""]
        lines.append(f"| baseline | geomean ratio | pairs | target | met | worst case | pairs below {FLOOR:g}x |")
        lines.append("|---|---|---|---|---|---|---|")
        for name, g in report["geomean"].items():
            goal = f">= {g['target']:g}x" if g["target"] is not None else "-"
            met = "-" if g["met"] is None else ("yes" if g["met"] else "no")
            w = g["worst"]
            worst = f"{w['ratio']:.2f}x ({w['graph']}, {w['width']})"
            lines.append(
                f"| {name} | {g['ratio']:.2f}x | {g['count']} | {goal} | {met} | {worst} | {g['below_floor']} |"
            )
    if report["failures"]:
        lines += ["", "## Failures", ""]
        lines += [f"- {f}" for f in report["failures"]]
    return "\n".join(lines) + "\n"


def _model_text(op: str) -> str:
    if op == "spmm":
        return "SpMM model: A (values, indices, indptr) + one row of B gathered per nonzero + C written."
    return "SDDMM model: A (values, indices, indptr) + X once + one row of Y gathered per nonzero + output."


def summary(report: dict) -> str:
    """A few lines for the terminal."""
    lines = [f"{report['op']}: STREAM triad {report['stream']['best_GBps']:.1f} GB/s"]
    for name, g in report["geomean"].items():
        goal = "" if g["target"] is None else f" (target >= {g['target']:g}x: {'met' if g['met'] else 'not met'})"
        w = g["worst"]
        lines.append(
            f"  geomean vs {name}: {g['ratio']:.2f}x over {g['count']} runs{goal}; worst {w['ratio']:.2f}x "
            f"({w['graph']}, width {w['width']}), {g['below_floor']} below {FLOOR:g}x"
        )
    for name, note in report["notes"].items():
        lines.append(f"  {name}: {note}")
    lines += [f"  FAILED {f}" for f in report["failures"]]
    return "\n".join(lines)
