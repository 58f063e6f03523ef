"""Building a model: GraphBuilder time for dense stacks of growing depth.

    python benchmarks/build.py [--width 64] [--depths 50 100 200 400] [--quick]

Each row builds ``input -> dense(width, relu) x depth`` from scratch (shape inference after
every layer, parameters initialised) two ways, timed alternately (medians): "incremental" is
GraphBuilder as it is (each layer infers only its new nodes), "whole graph" re-infers every node
after every layer (GraphBuilder before incremental inference; quadratic in depth). ``/ first``
is a row's time per layer over the first row's: it stays near 1 when building is linear in
depth and grows with depth when it is quadratic. ``nodes inferred`` counts the nodes the
incremental build's shape inference visited (``nodes`` when each node is inferred once).
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_interleaved, fmt_ms, print_run_notes, table, threads  # noqa: E402

import nexus as nx  # noqa: E402


class WholeGraph(nx.GraphBuilder):
    """The builder before incremental inference: every layer re-infers the whole graph."""

    def _infer_shapes(self) -> None:
        self._graph.infer_shapes()


def build(depth: int, width: int, cls=nx.GraphBuilder) -> nx.GraphBuilder:
    g = cls(seed=0).input("x", nx.Shape(32, width))
    for _ in range(depth):
        g.dense(width, "relu")
    return g


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depths", type=int, nargs="+", default=[50, 100, 200, 400])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    args = ap.parse_args()

    print(f"# GraphBuilder build time, dense({args.width}, relu) stacks\n")
    print_run_notes(threads(args.threads))
    rows, first = [], None
    for depth in args.depths:
        g = build(depth, args.width)  # also the check: both ways build the same graph
        whole = build(depth, args.width, WholeGraph)
        if g.shape_of(g.tap()) != (None, args.width) or g._graph.dump() != whole._graph.dump():
            raise SystemExit(f"check failed: depth {depth}: the builds differ or have the wrong shape")
        inc, full = bench_interleaved([lambda d=depth: build(d, args.width),
                                       lambda d=depth: build(d, args.width, WholeGraph)],
                                      warmup=0 if args.quick else 1, rounds=1 if args.quick else 3,
                                      min_time=0.1 if args.quick else 1.0)
        per = (inc["median"] / depth, full["median"] / depth)
        first = first or per
        rows.append([depth, g._graph.num_nodes, g._shapes.nodes_inferred,
                     fmt_ms(inc["median"]), f"{per[0] * 1e6:.1f}", f"{per[0] / first[0]:.2f}",
                     fmt_ms(full["median"]), f"{per[1] * 1e6:.1f}", f"{per[1] / first[1]:.2f}",
                     f"{full['median'] / inc['median']:.1f}x"])
    table(rows, ["layers", "nodes", "nodes inferred", "incremental ms", "us/layer", "/ first",
                 "whole graph ms", "us/layer", "/ first", "speedup"])

if __name__ == "__main__":
    main()
