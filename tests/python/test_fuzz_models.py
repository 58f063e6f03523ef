"""GraphBuilder models, compiled steps and checkpoints fuzzed in a child process (as the tensor
API is in test_fuzz_api.py): random layer stacks whose arguments come from edge values (negative,
zero, huge, NaN), random optimizers and learning rates, batches of the right or a wrong shape
with labels in and out of range, then a save, a load, and loads of the checkpoint truncated,
bit-flipped or with its header's length overwritten. Every step must return or raise a
documented exception; a crash fails with the exact call.

Fixed (derandomized) here; a longer run:
``NEXUS_FUZZ_EXAMPLES=5000 python -m pytest tests/python/test_fuzz_models.py``."""

import json

from fuzz_child import ALLOWED, EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

# No 2**31 here, unlike the tensor fuzzer: a layer of 2**31 units over one feature is a real
# 8 GiB parameter, which tests the machine, not Nexus; 2**50 and up no allocation can hold.
EDGE_INTS = [-2**63, -7, -1, 0, 2**50, 2**62, 2**63 - 1]
ODD_FLOATS = [float("nan"), float("inf"), -float("inf"), -1.0, 0.0, 1e-300, 1e300]


def mostly(valid, odd):
    """``valid``, and ``odd`` about 3 times in 100: each of a model's ~12 arguments is wrong now and
    then, so that most models get through building to training and their checkpoints."""
    # (Not k == 0: hypothesis draws the ends of a range far more often than the middle.)
    return st.integers(0, 99).flatmap(lambda k: odd if 40 <= k < 43 else valid)


size_arg = mostly(st.integers(1, 4), st.sampled_from(EDGE_INTS))
unit_float = mostly(st.floats(0, 0.9), st.sampled_from(ODD_FLOATS + [1.0]))
positive_float = mostly(st.floats(1e-8, 1.0), st.sampled_from(ODD_FLOATS))
pair = st.one_of(size_arg, st.tuples(size_arg, size_arg))
activation = mostly(st.sampled_from([None, "relu", "gelu", "tanh", "sigmoid"]), st.sampled_from(["softmax", "nope"]))


IMAGE_LAYERS = ["conv2d", "conv2d", "max_pool2d", "avg_pool2d", "batch_norm", "dropout", "activation"]
FLAT_LAYERS = ["dense", "dense", "dropout", "batch_norm", "layer_norm", "activation"]


@st.composite
def layer(draw, kinds):
    kind = draw(mostly(st.sampled_from(kinds), st.sampled_from(IMAGE_LAYERS + FLAT_LAYERS + ["flatten"])))
    if kind == "dense":
        args = {"units": draw(size_arg), "activation": draw(activation)}
    elif kind == "conv2d":
        args = {"filters": draw(size_arg), "kernel_size": draw(pair), "stride": draw(pair),
                "padding": draw(mostly(st.sampled_from(["valid", "same", 0, 1]), st.one_of(pair, st.just("full")))),
                "activation": draw(activation)}
    elif kind in ("max_pool2d", "avg_pool2d"):
        args = {"k": draw(pair), "stride": draw(st.one_of(st.none(), pair))}
    elif kind == "dropout":
        args = {"p": draw(unit_float)}
    elif kind == "batch_norm":
        args = {"momentum": draw(unit_float), "eps": draw(positive_float)}
    elif kind == "layer_norm":
        args = {"eps": draw(positive_float)}
    elif kind == "activation":
        args = {"activation": draw(activation)}
    else:
        args = {}
    return {"layer": kind, "args": args}


@st.composite
def model_call(draw):
    classes = draw(mostly(st.integers(1, 4), st.sampled_from([0, -1, 2**62])))
    head = [{"layer": "dense", "args": {"units": classes, "activation": None}}]
    odd_rate = st.sampled_from(ODD_FLOATS)
    sample = draw(mostly(st.one_of(st.lists(st.integers(1, 6), min_size=1, max_size=1),
                                   st.tuples(st.integers(1, 3), st.integers(4, 8), st.integers(4, 8)).map(list)),
                         st.lists(st.sampled_from([1, 3, 2**50, -1, 0]), min_size=1, max_size=3)))
    return {
        "kind": "model",
        "classes": classes,
        "seed": draw(st.integers(0, 2**16)),
        # (C, H, W) images or flat features; now and then a dimension that is 0, negative or
        # past any allocation.
        "sample": sample,
        # Image layers, then flat ones (each now and then of the wrong kind), then the head.
        "layers": (draw(st.lists(layer(IMAGE_LAYERS), max_size=3)) if len(sample) == 3 else [])
        + [{"layer": "flatten", "args": {}}] + draw(st.lists(layer(FLAT_LAYERS), max_size=3))
        + (head if draw(mostly(st.just(True), st.just(False))) else []),
        "optimizer": {"kind": draw(st.sampled_from(["sgd", "adam", "adamw"])),
                      "lr": draw(mostly(st.floats(1e-4, 1.0), odd_rate)),
                      "momentum": draw(mostly(st.floats(0, 0.99), odd_rate)),
                      "weight_decay": draw(mostly(st.just(0.0), odd_rate)),
                      "clip_norm": draw(mostly(st.none(), positive_float))},
        "fusion": draw(st.booleans()),
        "batch": draw(mostly(st.integers(2, 4), st.sampled_from([0, 1]))),
        "shape_error": draw(mostly(st.none(), st.sampled_from(["extra", "short", "transposed"]))),
        "labels": draw(mostly(st.just("valid"), st.sampled_from(["negative", "too_large", "float"]))),
        "mutation": draw(st.sampled_from(["truncate", "flip", "header", "metadata"])),
        "where": draw(st.floats(0, 1)),
    }


@settings(max_examples=EXAMPLES // 2, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(c=model_call())
def test_any_model_step_and_checkpoint_returns_or_raises_a_documented_exception(fuzz_child, c):
    result = fuzz_child.run(c)
    assert result["outcome"] in ALLOWED, f"{result['outcome']}: {result.get('message')}\ncall: {json.dumps(c)}"
