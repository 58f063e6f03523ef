"""ONNX's own operator test cases (``onnx.backend.test.case.node``: the cases behind ONNX's backend
test data, with inputs and expected outputs) run through nx.onnx for every case whose operators
nexus.onnx supports. A case either passes (ONNX's own tolerances), or is refused with
UnsupportedError (an opset newer than 21, an element type or an attribute form not run); a wrong
result or any other exception fails. The pass count is printed and must not fall."""

import warnings

import numpy as np
import pytest

import nexus as nx

MIN_PASSING = 265  # 272 passed with onnx 1.23 (a few below, for cases a newer onnx moves to a newer opset)


@pytest.fixture(scope="module")
def cases():
    from onnx.backend.test.case import node

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        everything = node.collect_testcases(None)
    ops = set(nx.onnx.supported_ops()) | {"Constant"}
    return [c for c in everything if {n.op_type for n in c.model.graph.node} <= ops]


def outcome(case) -> str:
    try:
        model = nx.onnx.load(case.model)
        inputs, expected = case.data_sets[0]
        got = model.run(dict(zip([i.name for i in model.inputs], inputs)))
    except nx.onnx.UnsupportedError:
        return "unsupported"
    got = [got] if len(expected) == 1 else list(got.values())
    for g, e in zip(got, expected):
        g, e = np.asarray(g), np.asarray(e)
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {g.shape} {g.dtype}, expected {e.shape} {e.dtype}"
        same = (np.allclose(g, e, rtol=case.rtol, atol=case.atol, equal_nan=True) if e.dtype.kind == "f"
                else np.array_equal(g, e))
        if not same:
            return f"values differ by up to {np.max(np.abs(g.astype(float) - e.astype(float)))}"
    return "pass"


def test_onnx_node_cases(cases):
    results = {}
    for case in cases:
        try:
            results[case.name] = outcome(case)
        except Exception as e:  # anything but UnsupportedError is a bug: report them all
            results[case.name] = f"{type(e).__name__}: {e}"
    passed = sum(r == "pass" for r in results.values())
    refused = sum(r == "unsupported" for r in results.values())
    print(f"\nONNX node cases: {passed} passed, {refused} refused (UnsupportedError) of {len(results)}")
    wrong = {name: r for name, r in results.items() if r not in ("pass", "unsupported")}
    assert not wrong, wrong
    assert passed >= MIN_PASSING
