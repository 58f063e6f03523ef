"""The cluster cost model behind ``nexus plan cluster.toml``: a Plan for a cluster that is not here.

The scheduler splits each global batch over ranks by *measured* speed. This module predicts that
Split for a cluster described in a TOML file, from published device peaks (``DEVICES``) and an
alpha-beta network model, so a user can see what 8 x A100 + 4 x V100 + CPUs would do before
renting them. Everything it prints is a MODEL, not a measurement.

The TOML format (``examples/cluster.toml``; GB = 1e9 bytes, ``*_gbps`` are gigaBYTES per second,
so 100 Gb/s Ethernet is ``12.5``)::

    [model]
    mlp = [784, 4096, 4096, 10]   # layer widths; or flops_per_sample = ... and param_count = ...
    batch = 4096                  # global batch (samples per step); `nexus plan --batch` overrides
    dtype = "float32"             # float32 | tf32 | bfloat16 (bf16) | float16 (fp16): picks the
                                  # peak (tensor cores where the device has that path) and the
                                  # gradient bytes per element (4, 4, 2, 2)
    activation_bytes_per_sample = 65536  # optional: with device memory, gives each rank's cap
    state_bytes_per_param = 16    # optional, default 16: fp32 weights, gradient, two Adam moments

    [[group]]                     # one table per DeviceGroup; ranks in a group are alike
    name = "a100"
    device = "A100-80GB"          # a key of DEVICES
    count = 8                     # ranks
    link_gbps = 300               # optional: GB/s per direction between the group's ranks
    latency_us = 2                # optional: that link's latency (alpha)
    efficiency = 0.5              # optional: achievable fraction of peak (GPU 0.5, CPU 0.7)
    memory_gb = 80                # optional: memory per rank (default: the device's)

    [[group]]
    name = "cpu"
    device = "cpu-avx512"         # cpu-* devices: peak = cores x ghz x FLOP/cycle
    count = 4
    cores = 32                    # optional, cpu-* only: cores per rank
    ghz = 2.5                     # optional, cpu-* only: clock under vector load

    [network]                     # the link between group leaders (needed with 2+ groups)
    gbps = 12.5
    latency_us = 10               # optional, default 10
    compress_below_gbps = 5       # optional, default 5: slower links send int8 gradients
                                  # (1.016 bytes per element: 0.254 of float32); 0 turns it off

The model, each step stated where it is computed:
- compute: a rank processes ``peak x efficiency / flops_per_sample`` samples/s. An MLP's
  ``flops_per_sample`` is 6 x params (forward 2 FLOPs per weight, backward twice that: the
  C = 6N rule of Kaplan et al. 2020, "Scaling Laws for Neural Language Models"), ignoring the
  elementwise ops, which a fused step hides under the GEMMs;
- the Split: ``split_batch`` over those rates, capped by memory when the activation bytes are
  given; the equal split for comparison;
- the gradient reduction (alpha-beta): hierarchical = ring all-reduce inside each group, then a
  ring among the group leaders over [network], then a broadcast inside each group; the flat ring
  over every rank runs at its slowest link; a link below ``compress_below_gbps`` carries int8;
- a step = slowest rank's compute + the faster of the two reductions (hierarchical loses when a
  group's own link is no faster than the network: it moves the gradient three times), with NO
  overlap of compute and reduction (the real engine overlaps bucketed reduction with backward,
  so this is the pessimistic end).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from dataclasses import dataclass

from nexus import _toml
from nexus.scheduler.split import equal_split, split_batch, step_time
from nexus.scheduler.table import format_table

LABEL = ("MODEL, not a measurement: predicted from published device peaks and an alpha-beta "
         "network model")
GPU_EFFICIENCY = 0.5   # large GEMMs reach 60-80 % of peak; a whole training step less
CPU_EFFICIENCY = 0.7   # OpenBLAS SGEMM at ~90 % of FMA peak (shared/DESIGN.md), less for the rest
INT8_BYTES_PER_ELEMENT = 1 + 4 / 256  # csrc/comm int8 codec: a float32 scale per kInt8Block=256
DEFAULT_COMPRESS_BELOW_GBPS = 5.0
DEFAULT_NETWORK_LATENCY_US = 10.0
DEFAULT_STATE_BYTES_PER_PARAM = 16
# dtype name -> (gradient bytes per element, peak path)
DTYPES = {"float32": (4, "fp32"), "tf32": (4, "tf32"), "bfloat16": (2, "bf16"),
          "bf16": (2, "bf16"), "float16": (2, "fp16"), "fp16": (2, "fp16")}


@dataclass(frozen=True)
class Device:
    """Published peaks of one device (per rank). FLOP/s and bytes; None: no such fast path."""
    name: str
    kind: str                  # "gpu" | "cpu"
    fp32_flops: float
    tf32_flops: float | None
    bf16_flops: float | None
    fp16_flops: float | None
    memory_bytes: float
    memory_bw: float           # bytes/s (recorded; the compute model is GEMM-bound)
    link_gbps: float           # GB/s per direction between ranks of a group (NVLink, PCIe, ...)
    link_latency_us: float
    efficiency: float
    source: str
    cores: int | None = None   # cpu-* only: peak = cores x ghz x flop_per_cycle
    ghz: float | None = None
    flop_per_cycle: int | None = None

    def peak(self, path: str) -> tuple[float, str]:
        """(FLOP/s, path used) for a dtype's peak path; fp32 where the device lacks the path."""
        flops = getattr(self, f"{path}_flops")
        return (flops, path) if flops else (self.fp32_flops, "fp32")


def _gpu(name, fp32, tf32, bf16, fp16, mem_gb, mem_bw_gbps, link_gbps, latency_us, source):
    """A GPU entry from datasheet units (TFLOP/s, GB, GB/s)."""
    tf = [None if v is None else v * 1e12 for v in (tf32, bf16, fp16)]
    return Device(name, "gpu", fp32 * 1e12, *tf, mem_gb * 1e9, mem_bw_gbps * 1e9, link_gbps,
                  latency_us, GPU_EFFICIENCY, source)


def _cpu(name, cores, ghz, flop_per_cycle, mem_gb, mem_bw_gbps, link_gbps, latency_us, source):
    """A CPU entry: fp32 peak = cores x GHz x FLOP/cycle (FMA units x fp32 lanes x 2)."""
    return Device(name, "cpu", cores * ghz * 1e9 * flop_per_cycle, None, None, None, mem_gb * 1e9,
                  mem_bw_gbps * 1e9, link_gbps, latency_us, CPU_EFFICIENCY, source, cores, ghz,
                  flop_per_cycle)


# NVLink figures are the datasheet's bidirectional total halved (per direction, what a ring uses).
# Tensor-core figures are dense (H100's datasheet prints sparse ones, twice these).
DEVICES: dict[str, Device] = {d.name: d for d in (
    _gpu("A100-40GB", 19.5, 156, 312, 312, 40, 1555, 300, 2,
         "NVIDIA A100 Tensor Core GPU datasheet (SXM, NVLink 600 GB/s)"),
    _gpu("A100-80GB", 19.5, 156, 312, 312, 80, 2039, 300, 2,
         "NVIDIA A100 Tensor Core GPU datasheet (SXM, NVLink 600 GB/s)"),
    _gpu("V100-16GB", 15.7, None, None, 125, 16, 900, 150, 2,
         "NVIDIA Tesla V100 datasheet (SXM2, NVLink 300 GB/s; tensor cores are fp16 only)"),
    _gpu("V100-32GB", 15.7, None, None, 125, 32, 900, 150, 2,
         "NVIDIA Tesla V100 datasheet (SXM2, NVLink 300 GB/s; tensor cores are fp16 only)"),
    _gpu("H100-SXM", 67, 494.5, 989.5, 989.5, 80, 3350, 450, 2,
         "NVIDIA H100 Tensor Core GPU datasheet (SXM5, NVLink 900 GB/s)"),
    _gpu("T4", 8.1, None, None, 65, 16, 320, 16, 5,
         "NVIDIA T4 datasheet (PCIe Gen3 x16, 32 GB/s)"),
    _cpu("cpu-avx512", 32, 2.6, 64, 256, 204.8, 12.5, 5,
         "2 AVX-512 FMA units x 16 lanes x 2 = 64 FLOP/cycle; default a 32-core 2.6 GHz Xeon "
         "Platinum 8358, 8 x DDR4-3200; ranks on separate hosts over 100 Gb/s (assumed)"),
    _cpu("cpu-avx2", 32, 2.8, 32, 256, 204.8, 12.5, 5,
         "2 AVX2 FMA units x 8 lanes x 2 = 32 FLOP/cycle (~90 GFLOP/s per Zen 3 core, measured in "
         "shared/DESIGN.md); default a 32-core 2.8 GHz EPYC 7543, 8 x DDR4-3200; 100 Gb/s "
         "between hosts (assumed)"),
    _cpu("cpu-arm-neon", 4, 2.4, 16, 8, 17, 0.125, 50,
         "edge box: 2 NEON FMA pipes x 4 lanes x 2 = 16 FLOP/cycle; default a Raspberry Pi 5 "
         "(4 Cortex-A76 at 2.4 GHz, 8 GB LPDDR4X), gigabit Ethernet between boxes"),
)}

_MODEL_KEYS = {"mlp", "flops_per_sample", "param_count", "batch", "dtype",
               "activation_bytes_per_sample", "state_bytes_per_param"}
_GROUP_KEYS = {"name", "device", "count", "link_gbps", "latency_us", "efficiency", "memory_gb",
               "cores", "ghz"}
_NETWORK_KEYS = {"gbps", "latency_us", "compress_below_gbps"}
_MISSING = object()


# ---- the config, checked ----------------------------------------------------------------------

@dataclass(frozen=True)
class _Model:
    flops_per_sample: float
    param_count: int
    batch: int
    dtype: str
    grad_bytes: int
    path: str
    activation_bytes: float | None
    state_bytes: float


@dataclass(frozen=True)
class _Group:
    name: str
    device: Device
    count: int
    efficiency: float
    link_gbps: float
    latency_us: float
    memory_bytes: float


@dataclass(frozen=True)
class _Network:
    gbps: float | None
    latency_us: float
    compress_below_gbps: float


def _value(table: dict, key: str, where: str, kind: str, default=_MISSING):
    """table[key] checked as kind "int" (> 0), "positive", "nonneg" or "str"; a missing key gives
    ``default`` or, without one, a ValueError naming the key."""
    if key not in table:
        if default is _MISSING:
            raise ValueError(f"{where}: missing key {key!r}")
        return default
    v = table[key]
    if kind == "str":
        if isinstance(v, str) and v:
            return v
        raise ValueError(f"{where}: {key} must be a non-empty string, got {v!r}")
    types = int if kind == "int" else (int, float)
    if (isinstance(v, types) and not isinstance(v, bool) and math.isfinite(v)
            and (v > 0 or (kind == "nonneg" and v == 0))):
        return v
    what = {"int": "a positive integer", "positive": "a positive number",
            "nonneg": "a number >= 0"}[kind]
    raise ValueError(f"{where}: {key} must be {what}, got {v!r}")


def _table(parent, key, where: str, allowed: set[str]) -> dict:
    """parent[key] as a table whose keys are all in ``allowed``."""
    table = parent[key]
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table, got {table!r}")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; valid keys: "
                         f"{', '.join(sorted(allowed))}")
    return table


def _parse_model(config: dict) -> _Model:
    if "model" not in config:
        raise ValueError("missing [model] table (mlp or flops_per_sample + param_count, batch)")
    model, where = _table(config, "model", "[model]", _MODEL_KEYS), "[model]"
    if "mlp" in model:
        if "flops_per_sample" in model or "param_count" in model:
            raise ValueError(f"{where}: give either mlp or flops_per_sample and param_count, "
                             "not both")
        widths = model["mlp"]
        if not (isinstance(widths, list) and len(widths) >= 2
                and all(isinstance(w, int) and not isinstance(w, bool) and w > 0
                        for w in widths)):
            raise ValueError(f"{where}: mlp must list two or more positive layer widths, e.g. "
                             f"[784, 256, 10], got {widths!r}")
        params = sum(a * b + b for a, b in zip(widths, widths[1:]))
        flops = 6.0 * params
    elif "flops_per_sample" in model or "param_count" in model:
        flops = float(_value(model, "flops_per_sample", where, "positive"))
        params = _value(model, "param_count", where, "int")
    else:
        raise ValueError(f"{where}: missing key 'mlp' (layer widths), or 'flops_per_sample' and "
                         "'param_count'")
    dtype = _value(model, "dtype", where, "str", "float32")
    if dtype not in DTYPES:
        raise ValueError(f"{where}: dtype {dtype!r} is not modelled; valid: {', '.join(DTYPES)}")
    act = _value(model, "activation_bytes_per_sample", where, "positive", None)
    state = _value(model, "state_bytes_per_param", where, "nonneg", DEFAULT_STATE_BYTES_PER_PARAM)
    return _Model(flops, params, _value(model, "batch", where, "int"), dtype, *DTYPES[dtype],
                  act, state)


def _parse_group(groups: list, index: int) -> _Group:
    where = f"[[group]] #{index + 1}"
    table = _table(groups, index, where, _GROUP_KEYS)
    name = _value(table, "name", where, "str")
    where = f"[[group]] {name!r}"
    device_name = _value(table, "device", where, "str")
    if device_name not in DEVICES:
        raise ValueError(f"{where}: unknown device {device_name!r}; valid devices: "
                         f"{', '.join(DEVICES)}")
    device = DEVICES[device_name]
    if device.kind == "cpu":
        cores = _value(table, "cores", where, "int", device.cores)
        ghz = _value(table, "ghz", where, "positive", device.ghz)
        device = dataclasses.replace(device, cores=cores, ghz=ghz,
                                     fp32_flops=cores * ghz * 1e9 * device.flop_per_cycle)
    elif "cores" in table or "ghz" in table:
        cpus = ", ".join(n for n, d in DEVICES.items() if d.kind == "cpu")
        raise ValueError(f"{where}: cores and ghz apply only to CPU devices ({cpus}), "
                         f"not {device_name}")
    efficiency = _value(table, "efficiency", where, "positive", device.efficiency)
    if efficiency > 1:
        raise ValueError(f"{where}: efficiency is a fraction of peak in (0, 1], got {efficiency}")
    return _Group(name, device, _value(table, "count", where, "int"), efficiency,
                  _value(table, "link_gbps", where, "positive", device.link_gbps),
                  _value(table, "latency_us", where, "nonneg", device.link_latency_us),
                  _value(table, "memory_gb", where, "positive", device.memory_bytes / 1e9) * 1e9)


def _parse_groups(config: dict) -> list[_Group]:
    groups = config.get("group")
    if not isinstance(groups, list) or not groups:
        raise ValueError("missing [[group]] tables: give at least one, e.g. [[group]] name = "
                         "\"a100\", device = \"A100-80GB\", count = 8")
    parsed = [_parse_group(groups, i) for i in range(len(groups))]
    names = [g.name for g in parsed]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"[[group]] {name!r}: the name is used twice; group names must differ")
    return parsed


def _parse_network(config: dict, ngroups: int) -> _Network:
    if "network" not in config:
        if ngroups > 1:
            raise ValueError(f"missing [network] table: {ngroups} groups need gbps (GB/s between "
                             "group leaders)")
        config = {"network": {}}
    net, where = _table(config, "network", "[network]", _NETWORK_KEYS), "[network]"
    gbps = _value(net, "gbps", where, "positive", _MISSING if ngroups > 1 else None)
    return _Network(gbps, _value(net, "latency_us", where, "nonneg", DEFAULT_NETWORK_LATENCY_US),
                    _value(net, "compress_below_gbps", where, "nonneg",
                           DEFAULT_COMPRESS_BELOW_GBPS))


# ---- the alpha-beta model ---------------------------------------------------------------------

def ring_allreduce_time(nbytes: float, n: int, bytes_per_s: float, alpha_s: float) -> float:
    """Ring all-reduce (reduce-scatter then all-gather): 2(n-1) steps each sending a chunk of
    nbytes/n, so 2(n-1)/n x nbytes / bandwidth + 2(n-1) x alpha (Thakur et al. 2005)."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * nbytes / bytes_per_s + 2 * (n - 1) * alpha_s


def broadcast_time(nbytes: float, n: int, bytes_per_s: float, alpha_s: float) -> float:
    """Pipelined chain broadcast: segments overlap along the chain, nbytes / bw + (n-1) x alpha."""
    return 0.0 if n <= 1 else nbytes / bytes_per_s + (n - 1) * alpha_s


def _wire(gbps: float, net: _Network, grad_bytes: int) -> tuple[float, bool]:
    """(effective bytes/s for uncompressed gradient bytes, compressed?) of one link: a link below
    the threshold sends int8 (INT8_BYTES_PER_ELEMENT), so the gradient crosses it
    grad_bytes / INT8_BYTES_PER_ELEMENT times faster."""
    compressed = gbps < net.compress_below_gbps
    factor = grad_bytes / INT8_BYTES_PER_ELEMENT if compressed else 1.0
    return gbps * 1e9 * factor, compressed


def _reduction_times(groups: list[_Group], net: _Network, m: _Model) -> tuple[float, float]:
    """(hierarchical, flat ring) seconds to all-reduce the gradient."""
    nbytes = m.param_count * m.grad_bytes
    links = [(_wire(g.link_gbps, net, m.grad_bytes)[0], g.latency_us * 1e-6, g) for g in groups]
    inner = max(ring_allreduce_time(nbytes, g.count, bw, a) for bw, a, g in links)
    flat_links = [(bw, a) for bw, a, g in links if g.count > 1]
    hier = inner
    if len(groups) > 1:
        net_bw, net_a = _wire(net.gbps, net, m.grad_bytes)[0], net.latency_us * 1e-6
        hier += ring_allreduce_time(nbytes, len(groups), net_bw, net_a)
        hier += max(broadcast_time(nbytes, g.count, bw, a) for bw, a, g in links)
        flat_links.append((net_bw, net_a))
    n = sum(g.count for g in groups)
    flat = (ring_allreduce_time(nbytes, n, min(bw for bw, _ in flat_links),
                                max(a for _, a in flat_links)) if flat_links else 0.0)
    return hier, flat


# ---- the Plan ---------------------------------------------------------------------------------

@dataclass
class GroupPlan:
    """One DeviceGroup's part of the Split (samples and times per rank of the group)."""
    name: str
    device: str
    ranks: int
    samples: list[int]
    share: float               # fraction of the batch on the whole group
    rate: float                # modelled samples/s per rank
    peak_flops: float
    peak_path: str             # "fp32", "tf32", "bf16" or "fp16"
    efficiency: float
    cap: int | None            # most samples per rank memory holds (None: not modelled)
    compute_s: float           # the group's slowest rank, planned split
    equal_samples: list[int]
    equal_compute_s: float
    link_compressed: bool


@dataclass
class RankPlan:
    rank: int
    group: str
    samples: int
    rate: float
    compute_s: float
    step_s: float              # compute + reduction; the step waits for the slowest rank
    equal_samples: int
    equal_step_s: float


@dataclass
class ClusterPlan:
    """What ``nexus plan`` predicts: a MODEL of the Split, never a measurement."""
    batch: int
    dtype: str
    flops_per_sample: float
    param_count: int
    gradient_bytes: int
    groups: list[GroupPlan]
    ranks: list[RankPlan]
    compute_s: float
    reduce_s: float            # the faster of the two below: what the step uses
    reduce_hier_s: float
    reduce_flat_s: float
    reduction: str             # "hierarchical" or "flat ring": which one reduce_s is
    step_s: float
    equal_compute_s: float
    equal_step_s: float
    speedup: float             # equal_step_s / step_s
    network_gbps: float | None
    compression: bool          # int8 on the inter-group link
    compression_reason: str
    equal_over_memory: list[str]  # groups whose equal share would not fit in memory
    label: str = LABEL


def _cap(g: _Group, m: _Model) -> int | None:
    """Samples one rank of ``g`` holds: (memory - model state) / activation bytes per sample."""
    if m.activation_bytes is None:
        return None
    free = g.memory_bytes - m.param_count * m.state_bytes
    if free < m.activation_bytes:
        raise ValueError(f"[[group]] {g.name!r}: the model state ({m.param_count:,} params x "
                         f"{m.state_bytes:g} bytes = {m.param_count * m.state_bytes / 1e9:.3g} GB) "
                         f"leaves no room for one sample in {g.memory_bytes / 1e9:g} GB of "
                         f"{g.device.name}; give memory_gb or a smaller model")
    return int(free // m.activation_bytes)


def _compression_reason(net: _Network, ngroups: int, on: bool) -> str:
    if ngroups < 2:
        return "one group: no inter-group link"
    if net.compress_below_gbps == 0:
        return "compress_below_gbps = 0 turns it off"
    rel = "<" if on else ">="
    return f"{net.gbps:g} GB/s {rel} compress_below_gbps {net.compress_below_gbps:g}"


def plan_cluster(config: dict) -> ClusterPlan:
    """The modelled Split, step times and speed-up for a cluster config (``load_cluster_toml``'s
    dict). Raises ValueError naming the key or group that is wrong and what would be valid."""
    if not isinstance(config, dict):
        raise ValueError(f"the cluster config must be a table, got {type(config).__name__}")
    m = _parse_model(config)
    groups = _parse_groups(config)
    net = _parse_network(config, len(groups))
    caps = {g.name: _cap(g, m) for g in groups}
    if all(c is not None for c in caps.values()):
        room = sum(caps[g.name] * g.count for g in groups)
        if room < m.batch:
            per = ", ".join(f"{g.name} {caps[g.name]} x {g.count}" for g in groups)
            raise ValueError(f"[model] batch {m.batch} does not fit: memory holds {room} samples "
                             f"in all ({per} per rank); give a smaller batch or more ranks")
    owner = [g for g in groups for _ in range(g.count)]
    peaks = {g.name: g.device.peak(m.path) for g in groups}
    rates = [peaks[g.name][0] * g.efficiency / m.flops_per_sample for g in owner]
    shares = split_batch(rates, m.batch, [caps[g.name] for g in owner])
    equal = equal_split(len(owner), m.batch)
    hier_s, flat_s = _reduction_times(groups, net, m)
    reduce_s = min(hier_s, flat_s)
    ranks = [RankPlan(r, g.name, shares[r], rates[r], shares[r] / rates[r],
                      shares[r] / rates[r] + reduce_s, equal[r], equal[r] / rates[r] + reduce_s)
             for r, g in enumerate(owner)]
    group_plans = []
    for g in groups:
        mine = [rp for rp in ranks if rp.group == g.name]
        samples, eq = [rp.samples for rp in mine], [rp.equal_samples for rp in mine]
        group_plans.append(GroupPlan(
            g.name, g.device.name, g.count, samples, sum(samples) / m.batch, mine[0].rate,
            *peaks[g.name], g.efficiency, caps[g.name], max(rp.compute_s for rp in mine), eq,
            max(e / rp.rate for e, rp in zip(eq, mine)),
            _wire(g.link_gbps, net, m.grad_bytes)[1] and g.count > 1))
    compute, equal_compute = step_time(shares, rates), step_time(equal, rates)
    compression = len(groups) > 1 and _wire(net.gbps, net, m.grad_bytes)[1]
    return ClusterPlan(
        m.batch, m.dtype, m.flops_per_sample, m.param_count, m.param_count * m.grad_bytes,
        group_plans, ranks, compute, reduce_s, hier_s, flat_s,
        "hierarchical" if hier_s <= flat_s else "flat ring", compute + reduce_s, equal_compute,
        equal_compute + reduce_s, (equal_compute + reduce_s) / (compute + reduce_s),
        net.gbps if len(groups) > 1 else None, compression,
        _compression_reason(net, len(groups), compression),
        [gp.name for gp in group_plans if gp.cap is not None and max(gp.equal_samples) > gp.cap])


# ---- the report -------------------------------------------------------------------------------

def _time(s: float) -> str:
    if s == 0:
        return "0"
    return f"{s * 1e6:.3g} us" if s < 1e-3 else f"{s * 1e3:.3g} ms" if s < 1 else f"{s:.3g} s"


def _spread(values: list[int]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo}" if lo == hi else f"{lo}-{hi}"


def render(plan: ClusterPlan) -> str:
    """The text report; its first line says it is a MODEL, not a measurement."""
    rows = [(gp.name, gp.device, gp.ranks, _spread(gp.samples), f"{gp.share:.1%}",
             f"{gp.peak_flops / 1e12:.3g} TF {gp.peak_path} x {gp.efficiency:g}",
             "-" if gp.cap is None else gp.cap, f"{gp.rate:,.0f}") for gp in plan.groups]
    groups = format_table(("group", "device", "ranks", "samples/rank", "share of batch",
                           "peak x efficiency", "cap/rank", "model samples/s/rank"),
                          rows, align="llrrrlrr")
    times = format_table(
        ("", "planned split", "equal split"),
        [("compute (slowest rank)", _time(plan.compute_s), _time(plan.equal_compute_s)),
         ("gradient reduction", _time(plan.reduce_s), _time(plan.reduce_s)),
         ("predicted step", _time(plan.step_s), _time(plan.equal_step_s))], align="lrr")
    lines = [
        f"{plan.label} (nexus plan)", "",
        f"model: {plan.flops_per_sample / 1e6:,.4g} MFLOP/sample "
        f"(6 x {plan.param_count:,} params for an MLP), batch {plan.batch}, {plan.dtype}, "
        f"gradient {plan.gradient_bytes / 1e6:,.4g} MB", "",
        groups, "", times, "",
        f"speed-up over an equal split: {plan.speedup:.2f}x (equal step / planned step)",
        f"reduction: {plan.reduction} (the faster); hierarchical {_time(plan.reduce_hier_s)} "
        f"(ring in each group, ring over the {len(plan.groups)} group leaders, broadcast in each "
        f"group), flat ring over all {len(plan.ranks)} ranks {_time(plan.reduce_flat_s)}",
        f"inter-group compression (int8): {'on' if plan.compression else 'off'} "
        f"({plan.compression_reason})"]
    slow = [gp.name for gp in plan.groups if gp.link_compressed]
    if slow:
        lines.append(f"in-group links below the threshold also send int8: {', '.join(slow)}")
    if plan.reduce_s > plan.compute_s:
        lines.append(f"the reduction is {plan.reduce_s / plan.step_s:.0%} of the planned step: "
                     "a larger batch per step or a faster (or compressed) link pays more than "
                     "the split")
    if plan.equal_over_memory:
        lines.append("the equal split would not fit in memory on: "
                     f"{', '.join(plan.equal_over_memory)} (its time is shown anyway)")
    lines.append("assumptions: compute and reduction do not overlap; efficiency x peak is "
                 "sustained; no input pipeline or optimizer-update time")
    return "\n".join(lines)


# ---- files and the command line ---------------------------------------------------------------

def load_cluster_toml(path) -> dict:
    """The parsed TOML file. FileNotFoundError for a missing file; ValueError (with the line) for
    a file that is not TOML."""
    try:
        with open(path, "rb") as f:
            return _toml.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such cluster file") from None
    except _toml.TOMLDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: {e}") from None


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments of ``nexus plan``."""
    parser.add_argument("config", help="cluster TOML file (see examples/cluster.toml)")
    parser.add_argument("--batch", type=int, default=None,
                        help="global batch, overriding [model] batch")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")


def run_plan(args: argparse.Namespace) -> int:
    """Print the modelled plan (or JSON); 0 on success, 2 with ``nexus plan: <why>`` on stderr."""
    try:
        config = load_cluster_toml(args.config)
        if args.batch is not None:
            model = config.get("model")
            if isinstance(model, dict):
                config = {**config, "model": {**model, "batch": args.batch}}
        plan = plan_cluster(config)
    except (ValueError, OSError) as e:
        print(f"nexus plan: {e}", file=sys.stderr)
        return 2
    print(json.dumps(dataclasses.asdict(plan), indent=2) if args.json else render(plan))
    return 0
