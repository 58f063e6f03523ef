"""The `nexus` command.

    nexus [info] [--json]              what this build has (BLAS, SIMD, CUDA, MPI, JIT) and its knobs
    nexus train --config run.toml      train (the same under `mpiexec -n N nexus train ...`)
    nexus plan cluster.toml            model a cluster that is not here: split, step time, speed-up

(also: python -m nexus.cli ...)
"""

from __future__ import annotations

import argparse
import json
import sys

import nexus
from nexus import config

# Keys whose value is a name when the feature is present and None/False/"" when it is not.
_FEATURE_KEYS = ("mpi", "jit_compiler")


def _marks():
    """(yes, no) marks: ✓/✗ where stdout can encode them, plain words otherwise."""
    try:
        "✓✗".encode(sys.stdout.encoding or "ascii")
        return "✓", "✗"
    except (UnicodeEncodeError, LookupError):
        return "yes", "no"


def _show(key, value, yes, no):
    if isinstance(value, bool):
        return yes if value else no
    if key in _FEATURE_KEYS:
        return f"{yes} {value}" if value else no
    return "(none)" if value is None or value == "" else str(value)


def _knobs():
    """[(name, text, was it set, description)] for every knob; raises ValueError when one is bad."""
    config.check()
    return [(name, *config.text(name), desc) for name, _, desc in config.KNOBS]


def _info(as_json):
    knobs = _knobs()  # first: a bad knob is reported before anything reads it
    info = dict(nexus.info())
    if as_json:
        out = dict(info)
        out["knobs"] = [{"name": n, "value": text if was_set else None, "default": None if was_set else text,
                         "description": desc} for n, text, was_set, desc in knobs]
        print(json.dumps(out, indent=2, default=str))
        return 0

    yes, no = _marks()
    width = max(map(len, info), default=0)
    for key, value in info.items():
        print(f"{key.ljust(width)}  {_show(key, value, yes, no)}")
    print("\nenvironment knobs (current value, or default):")
    values = [f"{text} (set)" if was_set else f"{text or 'unset'} (default)" for _, text, was_set, _ in knobs]
    width, vwidth = max(len(n) for n, *_ in knobs), max(map(len, values))
    for (name, *_, desc), value in zip(knobs, values):
        print(f"  {name.ljust(width)}  {value.ljust(vwidth)}  {desc}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nexus", description="Nexus command line.")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sub = parser.add_subparsers(dest="command", metavar="{info,train,plan,report}")
    p_info = sub.add_parser("info", help="build features, BLAS, CUDA, MPI, JIT compiler, knobs "
                                         "(the default)")
    # SUPPRESS: `nexus --json info` must not be reset to False by the subcommand's default.
    p_info.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                        help="print machine-readable JSON")
    from nexus.scheduler import cost_model, run_config  # noqa: PLC0415

    p_train = sub.add_parser("train", help="train from a run.toml (model, data, optimizer, "
                                           "cluster, logging); also under mpiexec")
    run_config.add_train_arguments(p_train)
    p_plan = sub.add_parser("plan", help="model a cluster described in a TOML file (published "
                                         "peaks, alpha-beta network): split, step time, speed-up")
    cost_model.add_plan_arguments(p_plan)
    from nexus.scheduler import figures  # noqa: PLC0415

    p_report = sub.add_parser("report", help="figures of a finished run from its log: heat map and "
                                             "timeline, PNG and SVG (needs matplotlib)")
    figures.add_report_arguments(p_report)
    args = parser.parse_args(argv)
    try:
        config.check()
    except ValueError as e:  # a bad NEXUS_* knob: one line, like argparse's usage errors
        print(f"nexus: error: {e}", file=sys.stderr)
        return 2
    if args.command in (None, "info"):
        return _info(args.json)
    if args.command == "train":
        return run_config.run_train(args)
    if args.command == "plan":
        return cost_model.run_plan(args)
    if args.command == "report":
        return figures.run_report(args)
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return 2


if __name__ == "__main__":
    sys.exit(main())
