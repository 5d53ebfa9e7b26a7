"""`sparsetir-py`: the project's command line (also `python -m sparsetir_py`).

    sparsetir-py demo [--graph NAME]                 # SpMM / SDDMM through the three stages, timed
    sparsetir-py bench spmm --smoke                  # the benchmark (`sparsetir-py bench --help`)
    sparsetir-py show SCRIPT.py [--stage 1|2|3] [--target cpu|cuda] [--func NAME]
    sparsetir-py tune MATRIX.npz|.mtx|NAME --width W [--op spmm|sddmm]
    sparsetir-py formats                             # shipped format rule files and their parameters

Every subcommand has `--help`. An error is one line naming the exception
(`sparsetir-py: error: InputError: ...`) and the exit status is 2 (with `SPARSETIR_DEBUG=1`, the
traceback instead). That holds for whatever a user's script or rule file does while it runs (any
exception, `sys.exit(...)` with any status): the line adds the file and line it came from. A bad
option value (`--repeat 0`) is argparse's usage error, also status 2.
"""

from __future__ import annotations

import argparse
import inspect
import os
import runpy
import sys
import textwrap
import traceback
from collections.abc import Sequence
from pathlib import Path

from .commandline import debugging, error_line, positive_int
from .errors import SparseTIRError

PROG = "sparsetir-py"
#: Parameters that `sp.ops` gives a rule file itself; `formats` does not list them.
_GIVEN = ("A", "dtype", "idtype")


class CLIError(SparseTIRError):
    """A command-line request that cannot be carried out (a missing file, nothing to show)."""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG,
        description="sparsetir_py: compile sparse tensor programs (SpMM, SDDMM, your own scripts) to Numba kernels.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    demo = sub.add_parser("demo", help="SpMM and SDDMM on a real graph: each stage's IR, checks, times against scipy")
    demo.add_argument("--graph", default="pubmed", help="a shipped graph (default pubmed) or a .npz/.mtx file")
    demo.add_argument("--repeat", type=positive_int, default=20, help="timed calls per measurement (default 20)")

    sub.add_parser(
        "bench",
        help="time sp.ops against scipy, MKL, torch.sparse, GraphBLAS (options: sparsetir-py bench --help)",
        add_help=False,
    )

    show = sub.add_parser("show", help="print each stage of a script file's functions and the generated source")
    show.add_argument("script", type=Path, help="a Python file that defines @T.prim_func functions")
    show.add_argument("--stage", type=int, choices=(1, 2, 3), help="print only this stage (default: all, then source)")
    show.add_argument("--target", choices=("cpu", "cuda"), default="cpu", help="target of the generated source")
    show.add_argument("--func", metavar="NAME", help="only this function (by its variable name in the file)")
    show.add_argument(
        "--schedule",
        metavar="NAME",
        help="a function of the file applied to the Stage II Schedule (default: `schedule` when the file defines it)",
    )
    show.add_argument(
        "--specialize", action="append", default=[], metavar="K=V", help="bind a scalar parameter, e.g. feat=32"
    )

    tune = sub.add_parser("tune", help="search formats and schedules for one matrix (sp.tune)")
    tune.add_argument("matrix", help="a .npz or Matrix Market .mtx file, or a shipped graph's name")
    tune.add_argument("--width", type=int, required=True, help="feature width (columns of B)")
    tune.add_argument("--op", choices=("spmm", "sddmm"), default="spmm")
    tune.add_argument("--target", choices=("cpu", "cuda"), default="cpu")

    formats = sub.add_parser("formats", help="list the shipped format rule files and their parameters")
    formats.add_argument("files", nargs="*", type=Path, help="also describe these rule files of your own")
    return p


# -------------------------------------------------------------------- subcommands
def cmd_demo(args: argparse.Namespace) -> int:
    from . import demo

    demo.main(args.graph, repeat=args.repeat)
    return 0


def _script_functions(path: Path) -> dict:
    """The PrimFuncs (and IRModules) a script file defines at module level, by variable name."""
    from .ir.func import IRModule, PrimFunc

    if not path.is_file():
        raise CLIError(f"no script file {str(path)!r}")
    namespace = runpy.run_path(str(path), run_name="__sparsetir_show__")
    found = {k: v for k, v in namespace.items() if isinstance(v, PrimFunc | IRModule) and not k.startswith("_")}
    if not found:
        raise CLIError(f"{path.name} defines no @T.prim_func function at module level")
    return {"namespace": namespace, "functions": found}


def _specialize(items: Sequence[str]) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            out[key] = int(value) if sep else None
        except ValueError:
            try:
                out[key] = float(value)
            except ValueError:
                raise CLIError(f"--specialize expects K=NUMBER, got {item!r}") from None
        if not sep or not key.isidentifier():
            raise CLIError(f"--specialize expects K=NUMBER, got {item!r}")
    return out


def cmd_show(args: argparse.Namespace) -> int:
    from .driver import compile as compile_pipeline
    from .ir.func import IRModule
    from .schedule import Schedule
    from .transform import lower_sparse_buffer, lower_sparse_iter

    loaded = _script_functions(args.script)
    functions = loaded["functions"]
    if args.func is not None:
        if args.func not in functions:
            raise CLIError(f"{args.script.name} has no function {args.func!r}; it defines {', '.join(functions)}")
        functions = {args.func: functions[args.func]}
    schedule = None
    name = args.schedule or ("schedule" if callable(loaded["namespace"].get("schedule")) else None)
    if name is not None:
        schedule = loaded["namespace"].get(name)
        if not callable(schedule):
            raise CLIError(f"{args.script.name} defines no schedule function {name!r}")
    fixed = _specialize(args.specialize)
    for var, func in functions.items():
        mod = IRModule.from_any(func)
        if fixed:
            mod = IRModule.from_any({k: f.specialize(fixed) for k, f in mod.items()})
        stages = {1: mod}
        if args.stage in (None, 2, 3):
            stage2 = lower_sparse_iter(mod)
            if schedule is not None:
                sch = Schedule(stage2)
                schedule(sch)
                stage2 = sch.mod
            stages[2] = stage2
            if args.stage in (None, 3):
                stages[3] = lower_sparse_buffer(stage2)
        wanted = [args.stage] if args.stage else [1, 2, 3]
        for stage in wanted:
            label = f"Stage {'I' * stage}" + (" (scheduled)" if stage == 2 and schedule is not None else "")
            print(f"# ---- {var}: {label}")
            shown = stages[stage]
            print(shown["main"].script() if len(shown) == 1 and "main" in shown else shown.script())
        if args.stage is None:
            kernel = compile_pipeline(mod, args.target, schedule=schedule)
            print(f"# ---- {var}: generated {args.target} source ({kernel.path.name})")
            print(kernel.source)
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .data import load_matrix

    if args.width < 1:
        raise CLIError(f"--width must be a positive integer, got {args.width}")
    from . import tune

    A = load_matrix(args.matrix)
    result = getattr(tune, args.op)(A, args.width, target=args.target, progress=False)
    print(
        f"{args.matrix}: {A.shape[0]} x {A.shape[1]}, {A.nnz} nonzeros; {args.op} width {args.width} on {args.target}"
        + (" (from the tuning cache)" if result.cached else f" (searched in {result.tuning_seconds:.1f} s)")
    )
    print(result.table)
    params = ", ".join(f"{k}={v}" for k, v in (result.params or {}).items())
    schedule = getattr(result.schedule, "__name__", result.schedule)
    print(f"best: format={result.format}" + (f" ({params})" if params else "") + f", schedule={schedule}, "
          f"{1e3 * result.seconds:.3f} ms")  # fmt: skip
    return 0


def rule_parameters(module) -> list[str]:
    """`name=default` for each parameter of a rule file's `rules` that a user sets."""
    out = []
    for p in inspect.signature(module.rules).parameters.values():
        if p.name in _GIVEN or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        out.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}")
    return out


def cmd_formats(args: argparse.Namespace) -> int:
    import format_rules

    modules = [(name, module) for name, module in format_rules.SHIPPED.items()]
    modules += [(str(path), format_rules.load(path)) for path in args.files]
    print("format     parameters                          converter  description")
    print("csr        (none: the default of sp.ops)       -          compressed sparse rows")
    for name, module in modules:
        doc = (inspect.getdoc(module) or "").split("\n\n")[0].replace("\n", " ")
        summary = doc.split(". ")[0].rstrip(".") if doc else ""
        params = ", ".join(rule_parameters(module)) or "-"
        converter = "yes" if callable(getattr(module, "convert", None)) else "inferred"
        print(f"{name:10} {params:35} {converter:10} {textwrap.shorten(summary, 80, placeholder=' ...')}")
    print("\nuse: sp.ops.spmm(A, B, format=NAME, **parameters); your own file: format_rules.load(path)")
    return 0


COMMANDS = {"demo": cmd_demo, "show": cmd_show, "tune": cmd_tune, "formats": cmd_formats}


def _user_files(args: argparse.Namespace) -> list[str]:
    """The files of the user's whose code a subcommand runs (a script, rule files)."""
    files = [getattr(args, "script", None), *(getattr(args, "files", None) or [])]
    return [str(f) for f in files if f is not None]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (2 on an error, after one line on stderr).

    Whatever a user's script or file does is such an error, `sys.exit` in it included; only
    Ctrl-C (`KeyboardInterrupt`) stops the command as it would any program. `SPARSETIR_DEBUG=1`
    shows the traceback instead."""
    argv = list(sys.argv[1:] if argv is None else argv)
    stderr = sys.stderr  # as it is now: a user's script may replace sys.stderr
    if argv and argv[0] == "bench":
        from bench.__main__ import main as bench_main

        return bench_main(argv[1:], prog=f"{PROG} bench")
    args = parser().parse_args(argv)
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    try:
        return COMMANDS[args.command](args)
    except BrokenPipeError:  # `sparsetir-py show f.py | head`: the reader left; not an error of ours
        sys.stderr.close()
        return 0
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a user's script may raise anything, SystemExit too
        if debugging():
            if isinstance(e, Exception):
                raise  # the whole traceback, for a bug report
            traceback.print_exc(file=stderr)  # SystemExit and the like would end the process without one
            return 2
        print(error_line(PROG, e, _user_files(args)), file=stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
