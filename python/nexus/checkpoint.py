"""Checkpoints: one safetensors file holding the parameters, buffers and optimizer state, with the
graph description (JSON) in its metadata. No pickle: loading a checkpoint never runs code. Writes
go to a temporary file in the same folder, then rename, so a crash never leaves half a file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from . import _C

FORMAT = "nexus.checkpoint/1"


def write_atomic(path: Path, data: bytes) -> None:
    """Writes ``data`` to ``path`` through a temporary file, an fsync and a rename (atomic on
    POSIX); the file gets the permissions a plain open() would give it (0666 less the umask).
    The one atomic write (csrc/base/fs.cpp), shared with the kernel cache.

    Raises:
        FileNotFoundError: the folder of ``path`` does not exist (the error names ``path``).
        OSError: any other failure to write, naming ``path``.
    """
    _C.write_atomic(os.fspath(path), bytes(data), 0o666, True)


def save(model, path) -> None:
    from safetensors.numpy import save as st_save  # noqa: PLC0415

    tensors = {f"param/{n}": np.ascontiguousarray(t.cpu().numpy()) for n, t in model.params.items()}
    tensors.update({f"buffer/{n}": np.ascontiguousarray(t.cpu().numpy())
                    for n, t in model.buffers.items()})
    state = model.optimizer.state_dict()
    tensors.update({f"optim/{k}": np.ascontiguousarray(v) for k, v in state["state"].items()})
    tensors["optim_param_steps"] = np.ascontiguousarray(state["param_steps"], dtype=np.int64)
    opt_meta = {"config": model.optimizer.get_config(), "step": state["step"]}
    meta = {"format": FORMAT, "graph": json.dumps(model.builder.spec()), "loss": model.loss_name,
            "optimizer": json.dumps(opt_meta)}
    write_atomic(Path(path), st_save(tensors, metadata=meta))


def load(path, device=None):
    """A Model restored from ``path`` (written by ``model.save`` on any device), on ``device``
    (the host unless given: "cuda", "cuda:N", an ``nx.device``).

    Raises FileNotFoundError for a missing file, ValueError for one that is corrupt, truncated
    or not a Nexus checkpoint, RuntimeError for a device that cannot be used.
    Example: ``model = nx.load("mlp.nexus", device="cuda")``.
    """
    from safetensors import SafetensorError, safe_open  # noqa: PLC0415

    from .graph import GraphBuilder  # noqa: PLC0415
    from .optim import from_config  # noqa: PLC0415

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}")
    try:
        with safe_open(path, framework="numpy") as f:
            meta = f.metadata() or {}
            tensors = {k: f.get_tensor(k) for k in f.keys()}  # noqa: SIM118 (not a dict)
    except SafetensorError as e:
        raise ValueError(f"{path}: not a valid Nexus checkpoint (corrupt or truncated file: {e})") from None
    if meta.get("format") != FORMAT:
        raise ValueError(f"{path}: not a Nexus checkpoint (format {meta.get('format')!r}, expected {FORMAT!r})")
    # What the metadata describes (graph, loss, optimizer) is rebuilt through the public API;
    # any error there means a damaged file, whatever its type, so it is a ValueError naming it.
    try:
        opt_meta = json.loads(meta["optimizer"])
        builder = GraphBuilder.from_spec(json.loads(meta["graph"]))
        model = builder.compile(loss=meta["loss"], optimizer=from_config(opt_meta["config"]))
        step = int(opt_meta["step"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{path}: the checkpoint's description of its model is damaged "
                         f"({type(e).__name__}: {e})") from None
    for kind, targets in (("param", model.params), ("buffer", model.buffers)):
        for name, target in targets.items():
            key = f"{kind}/{name}"
            if key not in tensors or tensors[key].shape != tuple(target.shape):
                raise ValueError(f"{path}: {key} is missing or has the wrong shape; the file does not "
                                 "match its own graph description")
            target.numpy()[...] = tensors[key]
    model.optimizer.load_state_dict({
        "type": opt_meta["config"]["class"], "step": step,
        "param_steps": tensors.get("optim_param_steps", np.zeros(0, np.int64)),
        "state": {k[len("optim/"):]: v for k, v in tensors.items() if k.startswith("optim/")}})
    return model if device is None else model.to(device)

