"""The `nexus` command.

    nexus [info] [--json]              what this build has (BLAS, SIMD, CUDA, MPI, JIT) and its knobs
    nexus train --config run.toml      train (the same under `mpiexec -n N nexus train ...`)
    nexus plan cluster.toml            model a cluster that is not here: split, step time, speed-up

(also: python -m nexus.cli ...)
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import nexus

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
    """[(name, default, description)] from nexus.config.KNOBS, or [] when it is not there."""
    try:
        from nexus import config
    except ImportError:
        return []
    try:
        return [(str(n), d, str(desc)) for n, d, desc in getattr(config, "KNOBS", ())]
    except (TypeError, ValueError):  # not a list of 3-tuples: show nothing rather than crash
        return []


def _info(as_json):
    info = dict(nexus.info())
    knobs = _knobs()
    if as_json:
        out = dict(info)
        if knobs:
            out.setdefault("knobs", [dict(name=n, default=d, description=desc,
                                          value=os.environ.get(n)) for n, d, desc in knobs])
        print(json.dumps(out, indent=2, default=str))
        return 0

    yes, no = _marks()
    width = max(map(len, info), default=0)
    for key, value in info.items():
        print(f"{key.ljust(width)}  {_show(key, value, yes, no)}")
    if knobs:
        print("\nenvironment knobs (current value, or default):")
        values = [f"{os.environ[n]} (set)" if n in os.environ
                  else f"{'unset' if d in (None, '') else d} (default)" for n, d, _ in knobs]
        width, vwidth = max(len(n) for n, _, _ in knobs), max(map(len, values))
        for (name, _, desc), value in zip(knobs, values):
            print(f"  {name.ljust(width)}  {value.ljust(vwidth)}  {desc}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="nexus", description="Nexus command line.")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    sub = parser.add_subparsers(dest="command", metavar="{info,train,plan}")
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
    args = parser.parse_args(argv)
    if args.command in (None, "info"):
        return _info(args.json)
    if args.command == "train":
        return run_config.run_train(args)
    if args.command == "plan":
        return cost_model.run_plan(args)
    parser.error(f"unknown command {args.command!r}")  # unreachable: argparse checks choices
    return 2


if __name__ == "__main__":
    sys.exit(main())
