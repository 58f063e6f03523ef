"""User errors: typed exceptions whose messages name the op, the shapes and what is valid; and no
bad input takes the process down."""

import operator
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import nexus as nx

BROADCAST_OPS = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": operator.pow,
    "eq": operator.eq,
    "lt": operator.lt,
    "maximum": None,
    "minimum": None,
}


@pytest.mark.parametrize("op", sorted(BROADCAST_OPS))
def test_broadcast_mismatch_names_the_op_and_both_shapes(op):
    with pytest.raises(ValueError) as info:
        getattr(nx, op)(nx.ones(2, 3), nx.ones(4))
    message = str(info.value)
    assert op in message
    assert "(2, 3)" in message and "(4,)" in message


@pytest.mark.parametrize("op", sorted(k for k, v in BROADCAST_OPS.items() if v is not None))
def test_operator_broadcast_mismatch_names_the_op_and_both_shapes(op):
    with pytest.raises(ValueError) as info:
        BROADCAST_OPS[op](nx.ones(4), nx.ones(2, 3))
    message = str(info.value)
    assert op in message
    assert "(4,)" in message and "(2, 3)" in message


def test_broadcast_mismatch_in_where_names_the_shapes():
    with pytest.raises(ValueError) as info:
        nx.where(nx.ones(2, 3) > 0, nx.ones(4), nx.ones(2, 3))
    message = str(info.value)
    assert "where" in message
    assert "(2, 3)" in message and "(4,)" in message


@pytest.mark.parametrize(
    "a,b",
    [((2, 3), (4, 5)), ((3,), (4,)), ((2, 3), (2,)), ((5,), (4, 2)), ((2, 3, 4), (3, 4, 5))],
    ids=str,
)
def test_matmul_mismatch_names_both_shapes(a, b):
    with pytest.raises(ValueError) as info:
        nx.matmul(nx.ones(*a), nx.ones(*b))
    message = str(info.value)
    assert str(a) in message and str(b) in message


def test_matmul_operator_mismatch_raises_value_error():
    with pytest.raises(ValueError):
        nx.ones(2, 3) @ nx.ones(2, 3)


@pytest.mark.parametrize("axis", [2, -3, (0, 2)], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "var", "logsumexp"])
def test_bad_axis_names_the_valid_range(name, axis):
    with pytest.raises(IndexError) as info:
        getattr(nx, name)(nx.ones(2, 3), axis=axis)
    message = str(info.value)
    assert "-2" in message and "1" in message


@pytest.mark.parametrize("name", ["softmax", "log_softmax", "argmax"])
def test_bad_axis_of_a_single_axis_op_names_the_valid_range(name):
    with pytest.raises(IndexError) as info:
        getattr(nx, name)(nx.ones(2, 3), axis=2)
    assert "-2" in str(info.value) and "1" in str(info.value)


@pytest.mark.parametrize("dtype", ["complex64", "nonsense", np.complex128, np.uint16, "float8"])
def test_unknown_dtype_raises_type_error(dtype):
    with pytest.raises(TypeError):
        nx.zeros(2, dtype=dtype)
    with pytest.raises(TypeError):
        nx.ones(2).astype(dtype)


@pytest.mark.parametrize(
    "data", [np.array([1 + 2j]), ["a", "b"], np.array(["x"]), np.array([object()])], ids=str
)
def test_tensor_of_unsupported_data_raises_type_error(data):
    with pytest.raises(TypeError):
        nx.tensor(data)


def test_cross_entropy_with_float_labels_raises_type_error():
    with pytest.raises(TypeError):
        nx.cross_entropy(nx.zeros(2, 3), nx.tensor([0.0, 1.0]))


def test_index_error_names_the_axis_size():
    with pytest.raises(IndexError) as info:
        nx.zeros(2, 3)[:, 10]
    message = str(info.value)
    assert "10" in message and "3" in message


def test_runtime_keeps_working_after_an_error():
    with pytest.raises(ValueError):
        nx.ones(2, 3) + nx.ones(4)
    assert (nx.ones(2, 3) + nx.ones(3)).tolist() == [[2.0] * 3] * 2


# --------------------------------------------------------------------------- no crashes

BAD_INPUTS = [
    "nx.zeros(2, 3) + nx.zeros(4)",
    "nx.matmul(nx.zeros(2, 3), nx.zeros(4, 5))",
    "nx.zeros(3) @ nx.zeros(4)",
    "nx.zeros(2, 3, 4) @ nx.zeros(3, 4, 5)",
    "nx.zeros(2, 3).reshape(4, 2)",
    "nx.zeros(2, 3).reshape(-1, -1)",
    "nx.zeros(2, 3)[5]",
    "nx.zeros(2, 3)[-3]",
    "nx.zeros(2, 3)[[0, 9]]",
    "nx.zeros(2, 3)[nx.tensor([-9])]",
    "nx.zeros(2, 3)[::-1]",
    "nx.zeros(2, 3)[0, 0, 0]",
    "nx.zeros(2, 3).expand(4, 3)",
    "nx.zeros(2, 3).transpose(0, 5)",
    "nx.zeros(2, 3).permute(0, 0)",
    "nx.zeros(2, 3).permute(0)",
    "nx.sum(nx.zeros(2, 3), axis=7)",
    "nx.argmax(nx.zeros(2, 3), axis=-3)",
    "nx.softmax(nx.zeros(2, 3), axis=-3)",
    "nx.zeros(2, dtype='complex64')",
    "nx.zeros(2, 3).astype('nonsense')",
    "nx.zeros(-1)",
    "nx.arange(0, 5, 0)",
    "nx.tensor([[1, 2], [3]])",
    "nx.tensor(['a'])",
    "nx.from_dlpack(object())",
    "nx.zeros(3, dtype='bfloat16').numpy()",
    "nx.tensor([1.0, 2.0]).item()",
    "nx.tensor([1, 2], requires_grad=True)",
    "(nx.tensor([1.0, 2.0], requires_grad=True) * 2).backward()",
    "nx.where(nx.zeros(2, 3) > 0, nx.zeros(4), nx.zeros(2, 3))",
    "nx.cross_entropy(nx.zeros(2, 3), nx.tensor([0, 5]))",
    "nx.cross_entropy(nx.zeros(2, 3), nx.tensor([0, -1]))",
    "nx.cross_entropy(nx.zeros(2, 3), nx.tensor([0, 1, 2]))",
    "nx.cross_entropy(nx.zeros(3), nx.tensor([0]))",
    "nx.conv2d(nx.zeros(1, 2, 4, 4), nx.zeros(3, 5, 2, 2))",
    "nx.conv2d(nx.zeros(1, 1, 2, 2), nx.zeros(1, 1, 3, 3))",
    "nx.conv2d(nx.zeros(2, 4), nx.zeros(1, 1, 1, 1))",
    "nx.conv2d(nx.zeros(1, 1, 4, 4), nx.zeros(2, 1, 2, 2), nx.zeros(3))",
    "nx.conv2d(nx.zeros(1, 1, 4, 4), nx.zeros(1, 1, 2, 2), stride=0)",
    "nx.max_pool2d(nx.zeros(1, 1, 2, 2), 3)",
    "nx.avg_pool2d(nx.zeros(1, 1, 4, 4), 0)",
    "nx.layer_norm(nx.zeros(2, 3), (4,))",
    "nx.layer_norm(nx.zeros(2, 3), (3,), nx.ones(4))",
    "nx.batch_norm(nx.zeros(2, 3), nx.zeros(4), nx.ones(4))",
    "nx.dropout(nx.zeros(3), p=2.0)",
    "nx.concat([nx.zeros(2, 3), nx.zeros(3, 3)], axis=1)",
    "nx.concat([])",
    "nx.stack([nx.zeros(2), nx.zeros(3)])",
    "nx.concat([nx.zeros(2, 3), nx.zeros(2, 3)], axis=2)",
]

RUNNER = textwrap.dedent(
    """
    import sys
    import nexus as nx
    for i, expr in enumerate(sys.argv[1:]):
        try:
            eval(expr)
        except Exception as e:
            print(i, type(e).__name__, flush=True)
        else:
            print(i, "NONE", flush=True)
    print("done", flush=True)
    """
)


@pytest.fixture(scope="module")
def bad_input_outcomes():
    """Runs every bad input in one child process; returns (returncode, {index: exception name})."""
    proc = subprocess.run([sys.executable, "-c", RUNNER, *BAD_INPUTS], capture_output=True,
                          text=True, timeout=120)
    outcomes = {}
    for line in proc.stdout.splitlines():
        index, _, name = line.partition(" ")
        if index.isdigit():
            outcomes[int(index)] = name
    return proc.returncode, outcomes, proc.stderr[-2000:]


@pytest.mark.parametrize("index", range(len(BAD_INPUTS)), ids=BAD_INPUTS)
def test_bad_input_raises_a_typed_error_without_crashing(bad_input_outcomes, index):
    returncode, outcomes, stderr = bad_input_outcomes
    assert index in outcomes, f"process died (rc={returncode}) before or at this input:\n{stderr}"
    assert outcomes[index] in ("ValueError", "TypeError", "IndexError"), outcomes[index]


def test_every_bad_input_ran_and_the_process_exited_cleanly(bad_input_outcomes):
    returncode, outcomes, stderr = bad_input_outcomes
    assert returncode == 0, stderr
    assert len(outcomes) == len(BAD_INPUTS)
