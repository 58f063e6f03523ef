"""nexus train --config run.toml: a training job from one file, the same under mpirun.

    nexus train --config run.toml                  # one process
    mpiexec -n 3 nexus train --config run.toml     # three ranks, split by measured speed

The file (TOML; every table but [model] is optional)::

    [model]                           # GraphBuilder.spec()'s layers, after an input:
    input = [64]                      # one sample's shape (the batch dimension is added)
    layers = [                        # one entry per GraphBuilder call, in order: layer names
      {layer = "dense", units = 256, activation = "relu"},  # the method, the other keys are
      {layer = "dropout", p = 0.5},                         # its arguments by name (name is
      {layer = "dense", units = 10, activation = "softmax"},  # optional)
    ]
    seed = 0                          # weight initialisation
    dtype = "float32"                 # float32 | float64
    loss = "cross_entropy"

    [data]
    dataset = "digits"                # "digits"; "mnist" with path = folder of the IDX files;
    path = "..."                      # "npz" with path = file holding x, y (and x_test, y_test)

    [optimizer]
    name = "adam"                     # sgd | adam | adamw; the other keys go to it
    lr = 1e-3                         # (momentum, weight_decay, betas, ...)

    [train]
    epochs = 10
    batch_size = 128                  # the global batch
    balance = "adaptive"              # adaptive | static | equal
    compression = "auto"              # none | auto | fp16 | bf16 | int8 | topk:RATIO | sign
    rebalance_every = 10              # steps between rebalancing decisions
    hysteresis = 0.05                 # the gain a new split must promise
    lr_scaling = "linear"             # linear | sqrt | none (when the batch changes)
    reference_batch = 128             # the batch the lr was chosen for (default: batch_size)
    seed = 0                          # shuffling
    max_steps = 0                     # stop early (0: no limit)

    [cluster]                         # default: auto = true (group ranks by device found)
    federated = true                  # hierarchical reduction, compression between groups
    compress_below_gbps = 1.0
    [[cluster.group]]                 # or declare the groups (ranks fill them in order)
    name = "cpu-pool"
    device = "cpu"                    # gpu | cpu | tpu
    count = 3

    [logging]
    jsonl = "run.jsonl"               # JSON lines from rank 0: plan, steps, rebalances, epochs
    heatmap_png = "heatmap.png"       # ranks x time heat map, saved at the end
    live = true                       # redraw the heat map in the terminal while training
    checkpoint = "model.safetensors"  # rank 0 saves the trained model
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from nexus import _toml

_TABLES = {"model", "data", "optimizer", "train", "cluster", "logging"}
_MODEL_KEYS = {"input", "layers", "seed", "dtype", "loss"}
_TRAIN_KEYS = {"epochs", "batch_size", "balance", "compression", "rebalance_every", "hysteresis",
               "lr_scaling", "reference_batch", "seed", "max_steps"}
_LOGGING_KEYS = {"jsonl", "heatmap_png", "live", "checkpoint"}


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = __doc__.split("\n\n", 1)[0]
    parser.epilog = "run.toml format:\n" + __doc__.split("The file (TOML; every table but " \
        "[model] is optional)::\n", 1)[1]
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config", required=True, help="the run's TOML file (format below)")
    parser.add_argument("--epochs", type=int, help="override [train] epochs")
    parser.add_argument("--batch-size", type=int, help="override [train] batch_size")
    parser.add_argument("--balance", choices=("adaptive", "static", "equal"),
                        help="override [train] balance")
    parser.add_argument("--compression", help="override [train] compression")
    parser.add_argument("--max-steps", type=int, help="override [train] max_steps")
    parser.add_argument("--log", help="override [logging] jsonl")
    parser.add_argument("--heatmap", help="override [logging] heatmap_png")


def load_run(path) -> dict:
    """The run file as a dict; a missing file or bad TOML raises ValueError naming it."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            cfg = _toml.load(f)
    except FileNotFoundError:
        raise ValueError(f"{p}: no such file") from None
    except _toml.TOMLDecodeError as e:
        raise ValueError(f"{p}: not valid TOML: {e}") from None
    unknown = set(cfg) - _TABLES
    if unknown:
        raise ValueError(f"{p}: unknown tables {sorted(unknown)}; valid: {sorted(_TABLES)}")
    if "model" not in cfg:
        raise ValueError(f"{p}: needs a [model] table with input = [...] and layers = [...]")
    return cfg


def model_spec(model: dict) -> dict:
    """The ``GraphBuilder.spec()`` a [model] table describes: its ``layers`` after an input
    entry of ``input``'s sample shape, with its ``seed`` and ``dtype``.

    Raises:
        ValueError: an unknown or missing key, or an ``input`` that is not a list of sizes.
    """
    from ..graph import SPEC_FORMAT  # noqa: PLC0415

    unknown = sorted(set(model) - _MODEL_KEYS)
    if unknown:
        raise ValueError(f"[model]: unknown key {unknown[0]!r}; valid: {', '.join(sorted(_MODEL_KEYS))}")
    missing = [k for k in ("input", "layers") if k not in model]
    if missing:
        raise ValueError(f"[model]: needs input = [sample shape] and layers = [...]; missing "
                         f"{missing[0]!r}")
    sample = model["input"]
    if not isinstance(sample, list) or not sample:
        raise ValueError(f"[model] input: expected one sample's shape, a list of sizes such as "
                         f"[64] or [1, 28, 28], got {sample!r}")
    if not isinstance(model["layers"], list):
        raise ValueError(f"[model] layers: expected a list of tables such as "
                         f"{{layer = \"dense\", units = 10}}, got {model['layers']!r}")
    return {"format": SPEC_FORMAT, "seed": model.get("seed", 0),
            "dtype": model.get("dtype", "float32"),
            "layers": [{"layer": "input", "name": "features", "shape": [1, *sample]},
                       *model["layers"]]}


def build_graph(model: dict):
    """The GraphBuilder a [model] table describes, built from its spec (``model_spec``) by
    ``GraphBuilder.from_spec``, which checks every entry as the builder's methods do.

    Raises:
        ValueError: naming the [model] key or the ``layers`` entry at fault and what is valid.
    """
    from ..graph import LOSSES, GraphBuilder, SpecError  # noqa: PLC0415

    spec = model_spec(model)
    if model.get("loss", "cross_entropy") not in LOSSES:
        raise ValueError(f"[model] loss: unknown loss {model['loss']!r}; valid: "
                         f"{', '.join(LOSSES)}")
    try:
        return GraphBuilder.from_spec(spec)
    except SpecError as e:
        where = "[model]" if e.index is None else \
            "[model] input" if e.index == 0 else f"[model] layers[{e.index - 1}]"
        raise ValueError(f"{where}: {e.reason}") from None


def make_optimizer(spec: dict):
    from .. import optim  # noqa: PLC0415

    spec = dict(spec)
    name = str(spec.pop("name", "adam")).lower()
    classes = {"sgd": optim.SGD, "adam": optim.Adam, "adamw": optim.AdamW}
    if name not in classes:
        raise ValueError(f"[optimizer]: unknown name {name!r}; valid: {', '.join(classes)}")
    if "betas" in spec:
        spec["betas"] = tuple(spec["betas"])
    try:
        return classes[name](**spec)
    except TypeError as e:
        raise ValueError(f"[optimizer] ({name}): {e}") from None


def load_data(spec: dict):
    """The ``data`` argument of Scheduler.train from a [data] table."""
    dataset = spec.get("dataset", "digits")
    if dataset == "npz":
        if "path" not in spec:
            raise ValueError('[data]: dataset = "npz" needs path = "file.npz"')
        with np.load(spec["path"]) as z:
            missing = {"x", "y"} - set(z.files)
            if missing:
                raise ValueError(f"[data] {spec['path']}: missing arrays {sorted(missing)} "
                                 f"(has {z.files})")
            if "x_test" in z.files and "y_test" in z.files:
                return z["x"], z["y"], z["x_test"], z["y_test"]
            return z["x"], z["y"]
    if dataset not in ("digits", "mnist"):
        raise ValueError(f"[data]: unknown dataset {dataset!r}; valid: digits, mnist, npz")
    return dataset


def run_train(args: argparse.Namespace) -> int:
    from .cluster import ClusterConfig  # noqa: PLC0415
    from .scheduler import Scheduler  # noqa: PLC0415

    try:
        cfg = load_run(args.config)
        train = dict(cfg.get("train", {}))
        logging = dict(cfg.get("logging", {}))
        for table, keys, name in ((train, _TRAIN_KEYS, "train"),
                                  (logging, _LOGGING_KEYS, "logging")):
            unknown = set(table) - keys
            if unknown:
                raise ValueError(f"[{name}]: unknown keys {sorted(unknown)}; valid: "
                                 f"{sorted(keys)}")
        overrides = {"epochs": args.epochs, "batch_size": args.batch_size,
                     "balance": args.balance, "compression": args.compression,
                     "max_steps": args.max_steps}
        train.update({k: v for k, v in overrides.items() if v is not None})
        if args.log is not None:
            logging["jsonl"] = args.log
        if args.heatmap is not None:
            logging["heatmap_png"] = args.heatmap
        compression = train.pop("compression", None)
        if compression == "none":
            compression = None
        if train.get("lr_scaling") == "none":
            train["lr_scaling"] = None
        if not train.get("max_steps"):
            train.pop("max_steps", None)
        model = cfg["model"]
        g = build_graph(model)
        cluster = ClusterConfig.from_dict(cfg.get("cluster", {}))
        data_spec = cfg.get("data", {})
        scheduler = Scheduler.with_graph(g, cluster, loss=model.get("loss", "cross_entropy"),
                                         optimizer=make_optimizer(cfg.get("optimizer", {})))
        report = scheduler.train(load_data(data_spec), train.pop("epochs", 1),
                                 train.pop("batch_size", 128), compression=compression,
                                 data_path=data_spec.get("path"),
                                 log_file=logging.get("jsonl"),
                                 heatmap_png=logging.get("heatmap_png"),
                                 live=logging.get("live"), **train)
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"nexus train: {e}", file=sys.stderr)
        return 2
    from .. import distributed as dist  # noqa: PLC0415

    if "checkpoint" in logging and dist.rank() == 0:
        scheduler.model.save(logging["checkpoint"])
    del report
    return 0
