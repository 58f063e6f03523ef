"""Creating tensors and exchanging them with numpy: dtypes, inference, factories, shared memory."""

import numpy as np
import pytest

import nexus as nx
from nx_reference import bf16_round

DTYPES = [
    ("float32", 4, np.float32),
    ("float64", 8, np.float64),
    ("float16", 2, np.float16),
    ("bfloat16", 2, None),
    ("int32", 4, np.int32),
    ("int64", 8, np.int64),
    ("bool", 1, np.bool_),
]
NUMPY_BACKED = [(name, npdt) for name, _, npdt in DTYPES if npdt is not None]


# --------------------------------------------------------------------------- dtypes

@pytest.mark.parametrize("name,itemsize", [(n, s) for n, s, _ in DTYPES])
def test_dtype_has_its_name_and_itemsize(name, itemsize):
    dtype = getattr(nx, name)
    assert str(dtype) == name
    assert dtype.itemsize == itemsize
    assert dtype == getattr(nx, name)


def test_dtypes_are_distinct():
    dtypes = [getattr(nx, name) for name, _, _ in DTYPES]
    for i, a in enumerate(dtypes):
        for b in dtypes[i + 1:]:
            assert a != b


@pytest.mark.parametrize("spelling", ["float64", np.float64, np.dtype("float64"), "nexus"])
def test_dtype_argument_accepts_nexus_string_and_numpy_spellings(spelling):
    dtype = nx.float64 if spelling == "nexus" else spelling
    assert nx.zeros(2, 3, dtype=dtype).dtype == nx.float64
    assert nx.ones(2, dtype=dtype).dtype == nx.float64
    assert nx.full((2,), 1, dtype=dtype).dtype == nx.float64
    assert nx.arange(3, dtype=dtype).dtype == nx.float64
    assert nx.rand(2, dtype=dtype).dtype == nx.float64
    assert nx.randn(2, dtype=dtype).dtype == nx.float64
    assert nx.tensor([1, 2], dtype=dtype).dtype == nx.float64
    assert nx.tensor([1.0]).astype(dtype).dtype == nx.float64


# --------------------------------------------------------------------------- nx.tensor

@pytest.mark.parametrize(
    "data,expected",
    [
        ([1.0, 2.0], "float32"),
        ([1, 2], "int64"),
        ([True, False], "bool"),
        ([1, 2.5], "float32"),
        ([[1, 2], [3, 4]], "int64"),
        (3.5, "float32"),
        (7, "int64"),
        (True, "bool"),
    ],
)
def test_tensor_infers_dtype_from_python_data(data, expected):
    assert nx.tensor(data).dtype == getattr(nx, expected)


@pytest.mark.parametrize("name,npdt", NUMPY_BACKED)
def test_tensor_keeps_the_numpy_dtype(name, npdt):
    t = nx.tensor(np.array([1, 0, 1], dtype=npdt))
    assert t.dtype == getattr(nx, name)
    np.testing.assert_array_equal(t.numpy(), np.array([1, 0, 1], dtype=npdt))


# Every numpy dtype: kept, converted on request, or refused. torch.tensor keeps uint8 and int8/int16
# as dtypes of their own; nexus has none of them, so it refuses rather than silently widen (8x the
# memory and other overflow rules), and names the dtype= that converts.
EVERY_NUMPY_DTYPE = sorted({np.dtype(t) for t in np.sctypeDict.values()} - {np.dtype(object)},
                           key=str)
KEPT = {np.dtype(t) for _, t in NUMPY_BACKED}


@pytest.mark.parametrize("npdt", EVERY_NUMPY_DTYPE, ids=str)
def test_every_numpy_dtype_is_kept_converted_on_request_or_refused(npdt):
    a = np.arange(3).astype(npdt)
    if npdt in KEPT:
        assert nx.tensor(a).dtype == npdt.name and nx.tensor(a[0]).dtype == npdt.name
        np.testing.assert_array_equal(nx.tensor(a).numpy(), a)
    elif npdt.kind in "iuf":  # uint8, int8, int16, uint16, uint32, uint64, longdouble
        with pytest.raises(TypeError, match=rf"numpy dtype {npdt.name} has no nexus dtype .*"
                                            r"supported: float16, float32, float64, int32, int64, "
                                            r"bool.*dtype=nx\.int64"):
            nx.tensor(a)
        with pytest.raises(TypeError, match="has no nexus dtype"):
            nx.tensor(a[0])  # a numpy scalar too
        for target in ("int64", "float32", "int32"):
            t = nx.tensor(a, dtype=target)
            assert t.dtype == target
            np.testing.assert_array_equal(t.numpy(), a.astype(target))
    else:  # complex, strings, dates, void: nexus has nothing to hold them
        for dtype in (None, "float32"):
            with pytest.raises(TypeError, match="cannot build a tensor"):
                nx.tensor(a, dtype=dtype)


def test_tensor_of_big_endian_numpy_data_keeps_the_values():
    a = np.array([1.5, -2.0, 3.25], dtype=">f8")
    t = nx.tensor(a)
    assert t.dtype == nx.float64 and t.tolist() == [1.5, -2.0, 3.25]
    assert nx.tensor(np.array([7, -3], ">i4")).tolist() == [7, -3]


def test_tensor_of_python_ints_past_int64_raises_overflow_error():
    with pytest.raises(OverflowError, match="out of range of int64"):
        nx.tensor([2**63])
    assert nx.tensor([2**63 - 1]).tolist() == [2**63 - 1]


def test_tensor_of_nested_lists_has_the_nested_shape():
    t = nx.tensor([[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert t.shape == (2, 3)
    assert t.tolist() == [[1.5, 2.0, 3.0], [4.0, 5.0, 6.0]]


def test_tensor_of_a_python_scalar_is_zero_dimensional():
    t = nx.tensor(3.5)
    assert t.shape == ()
    assert t.ndim == 0
    assert t.numel() == 1
    assert t.item() == 3.5


def test_tensor_copies_its_input():
    a = np.arange(3, dtype=np.float32)
    t = nx.tensor(a)
    a[0] = 99
    assert t.tolist() == [0.0, 1.0, 2.0]
    assert not np.shares_memory(t.numpy(), a)


def test_tensor_copies_a_non_contiguous_numpy_array_in_logical_order():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[1:, ::2].T
    t = nx.tensor(a)
    assert t.shape == a.shape
    np.testing.assert_array_equal(t.numpy(), a)


@pytest.mark.parametrize("data", [[2**70], [1, 2**63], [[-2**63 - 1]], np.array([2**63], np.uint64)],
                         ids=["2**70", "2**63", "-2**63-1", "uint64"])
def test_an_integer_beyond_int64_is_an_overflow_error_naming_it(data):
    big = max(np.asarray(data, dtype=object).ravel(), key=abs)
    with pytest.raises(OverflowError, match="out of range of int64") as info:
        nx.tensor(data)
    assert str(int(big)) in str(info.value)


@pytest.mark.parametrize("data", [[2**70], [1.5, 2**70]], ids=str)
def test_an_integer_beyond_int64_is_fine_where_a_float_is_wanted(data):
    t = nx.tensor(data, dtype="float64")
    np.testing.assert_array_equal(t.numpy(), np.array(data, dtype=np.float64))


def test_int64_limits_are_kept_exactly():
    limits = [-2**63, 2**63 - 1]
    assert nx.tensor(limits).tolist() == limits


def test_tensor_with_explicit_dtype_converts_the_data():
    t = nx.tensor([1, 2], dtype=nx.float32)
    assert t.dtype == nx.float32
    assert t.tolist() == [1.0, 2.0]


def test_attributes_describe_shape_and_layout():
    t = nx.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4)
    assert isinstance(t.shape, tuple) and all(type(d) is int for d in t.shape)
    assert t.ndim == 3
    assert t.numel() == 24 and isinstance(t.numel(), int)
    assert t.device == "cpu"
    assert t.is_contiguous()
    assert tuple(t.strides) == (12, 4, 1)
    assert t.requires_grad is False
    assert t.grad is None


# --------------------------------------------------------------------------- factories

@pytest.mark.parametrize("factory,value", [(nx.zeros, 0.0), (nx.ones, 1.0)])
def test_zeros_and_ones_take_varargs_or_a_tuple(factory, value):
    for t in (factory(2, 3), factory((2, 3))):
        assert t.shape == (2, 3)
        assert t.dtype == nx.float32
        np.testing.assert_array_equal(t.numpy(), np.full((2, 3), value, np.float32))
    assert factory(4, dtype="int32").tolist() == [int(value)] * 4
    assert factory(0, 3).shape == (0, 3)
    assert factory(0, 3).numel() == 0
    assert factory(()).shape == ()


@pytest.mark.parametrize(
    "fill,expected", [(1.5, "float32"), (3, "int64"), (True, "bool")]
)
def test_full_infers_dtype_from_the_fill_value(fill, expected):
    t = nx.full((2, 3), fill)
    assert t.shape == (2, 3)
    assert t.dtype == getattr(nx, expected)
    assert t.tolist() == [[fill] * 3] * 2


def test_full_with_dtype_converts_the_fill_value():
    t = nx.full((2,), 3, dtype="float64")
    assert t.dtype == nx.float64
    assert t.tolist() == [3.0, 3.0]


@pytest.mark.parametrize(
    "args,expected,dtype",
    [
        ((5,), [0, 1, 2, 3, 4], "int64"),
        ((2, 10, 3), [2, 5, 8], "int64"),
        ((10, 0, -3), [10, 7, 4, 1], "int64"),
        ((0,), [], "int64"),
        ((0, 1, 0.25), [0.0, 0.25, 0.5, 0.75], "float32"),
        ((3.0,), [0.0, 1.0, 2.0], "float32"),
        ((1, 2.5), [1.0, 2.0], "float32"),
    ],
)
def test_arange_follows_numpy_with_int64_or_float32(args, expected, dtype):
    t = nx.arange(*args)
    assert t.dtype == getattr(nx, dtype)
    assert t.shape == (len(expected),)
    assert t.tolist() == expected


def test_arange_with_dtype():
    t = nx.arange(4, dtype="float64")
    assert t.dtype == nx.float64
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0]


def test_rand_is_uniform_on_the_half_open_unit_interval():
    nx.manual_seed(0)
    t = nx.rand(100, 200)
    assert t.shape == (100, 200)
    assert t.dtype == nx.float32
    x = t.numpy()
    assert x.min() >= 0.0 and x.max() < 1.0
    assert abs(x.mean() - 0.5) < 0.01
    assert abs(x.std() - np.sqrt(1 / 12)) < 0.01
    assert nx.rand(3, dtype="float64").dtype == nx.float64


def test_randn_is_standard_normal():
    nx.manual_seed(0)
    t = nx.randn(200, 100)
    assert t.shape == (200, 100)
    assert t.dtype == nx.float32
    x = t.numpy().astype(np.float64)
    assert abs(x.mean()) < 0.03
    assert abs(x.std() - 1.0) < 0.03
    assert abs(np.mean(np.abs(x) < 1.0) - 0.6827) < 0.02
    assert nx.randn(3, dtype="float64").dtype == nx.float64


@pytest.mark.parametrize("factory", [nx.rand, nx.randn])
def test_manual_seed_makes_random_streams_repeat(factory):
    nx.manual_seed(7)
    first, second = factory(50).numpy().copy(), factory(50).numpy().copy()
    nx.manual_seed(7)
    np.testing.assert_array_equal(factory(50).numpy(), first)
    np.testing.assert_array_equal(factory(50).numpy(), second)
    assert not np.array_equal(first, second)
    nx.manual_seed(8)
    assert not np.array_equal(factory(50).numpy(), first)


# --------------------------------------------------------------------------- numpy interop

@pytest.mark.parametrize("name,npdt", NUMPY_BACKED)
def test_from_numpy_shares_memory_with_the_array(name, npdt):
    a = np.zeros(4, dtype=npdt)
    t = nx.from_numpy(a)
    assert t.dtype == getattr(nx, name)
    a[2] = 1
    assert t.tolist()[2] == 1
    assert np.shares_memory(t.numpy(), a)


def test_numpy_asarray_and_dlpack_are_zero_copy():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = nx.from_numpy(a)
    for view in (t.numpy(), np.asarray(t), np.from_dlpack(t)):
        assert np.shares_memory(view, a)
        assert view.shape == (2, 3)
        np.testing.assert_array_equal(view, a)


def test_numpy_of_a_nexus_owned_tensor_is_a_view_of_its_storage():
    t = nx.arange(6, dtype="float64").reshape(2, 3)
    first = t.numpy()
    assert np.shares_memory(first, t.numpy())
    assert np.shares_memory(first, np.asarray(t))
    assert np.shares_memory(first, np.from_dlpack(t))


VIEWS = {
    "transpose": (lambda t: t.T, lambda a: a.T),
    "column_step": (lambda t: t[:, ::2], lambda a: a[:, ::2]),
    "window": (lambda t: t[1:, 1:4], lambda a: a[1:, 1:4]),
    "transposed_step": (lambda t: t.T[::2], lambda a: a.T[::2]),
    "expand": (lambda t: t[1:2].expand(3, 6), lambda a: np.broadcast_to(a[1:2], (3, 6))),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_numpy_of_a_non_contiguous_view_keeps_strides_and_memory(view):
    nx_view, np_view = VIEWS[view]
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    v = nx_view(nx.from_numpy(a))
    ref = np_view(a)
    out = v.numpy()
    np.testing.assert_array_equal(out, ref)
    assert out.strides == ref.strides
    assert tuple(v.strides) == tuple(s // 4 for s in ref.strides)
    assert np.shares_memory(out, a)


@pytest.mark.parametrize("name,npdt", NUMPY_BACKED)
def test_from_dlpack_is_zero_copy(name, npdt):
    a = np.ones((2, 3), dtype=npdt)
    t = nx.from_dlpack(a)
    assert t.dtype == getattr(nx, name)
    assert t.shape == (2, 3)
    assert np.shares_memory(t.numpy(), a)


def test_from_dlpack_keeps_the_strides_of_a_strided_producer():
    a = np.arange(24, dtype=np.float64).reshape(4, 6)[:, ::2]
    t = nx.from_dlpack(a)
    np.testing.assert_array_equal(t.numpy(), a)
    assert np.shares_memory(t.numpy(), a)


def test_float16_is_stored_at_half_width():
    values = np.array([1.5, -2.25, 65504.0], dtype=np.float16)
    t = nx.tensor(values)
    assert t.dtype == nx.float16
    out = t.numpy()
    assert out.dtype == np.float16
    assert out.itemsize == 2 and out.nbytes == 6
    np.testing.assert_array_equal(out, values)


def test_bfloat16_numpy_raises_type_error():
    t = nx.zeros(3, dtype="bfloat16")
    assert t.dtype == nx.bfloat16
    with pytest.raises(TypeError):
        t.numpy()


# --------------------------------------------------------------------------- astype

def test_astype_float32_float64_round_trip_is_exact(rng):
    a = rng.standard_normal(10).astype(np.float32)
    wide = nx.tensor(a).astype(nx.float64)
    assert wide.dtype == nx.float64
    np.testing.assert_array_equal(wide.astype(nx.float32).numpy(), a)


def test_astype_float_to_int_truncates_toward_zero():
    t = nx.tensor([1.7, -1.7, 2.0, -0.5]).astype("int32")
    assert t.dtype == nx.int32
    assert t.tolist() == [1, -1, 2, 0]


def test_astype_to_and_from_bool():
    assert nx.tensor([0.0, 2.5, -1.0]).astype(nx.bool).tolist() == [False, True, True]
    assert nx.tensor([True, False]).astype(nx.float32).tolist() == [1.0, 0.0]
    assert nx.tensor([3, 0]).astype(nx.bool).tolist() == [True, False]


def test_astype_int64_to_float_is_exact_for_small_ints():
    t = nx.arange(-5, 6).astype(nx.float32)
    assert t.tolist() == [float(i) for i in range(-5, 6)]


def test_astype_float16_rounds_like_numpy(rng):
    a = (rng.standard_normal(200) * 100).astype(np.float32)
    out = nx.tensor(a).astype(nx.float16)
    np.testing.assert_array_equal(out.numpy(), a.astype(np.float16))
    np.testing.assert_array_equal(out.astype(nx.float32).numpy(), a.astype(np.float16))


def test_astype_bfloat16_round_trips_representable_values_exactly(rng):
    a = bf16_round(rng.standard_normal(200).astype(np.float32) * 100)
    out = nx.tensor(a).astype(nx.bfloat16).astype(nx.float32)
    np.testing.assert_array_equal(out.numpy(), a)


def test_astype_bfloat16_rounds_to_nearest_even(rng):
    a = rng.standard_normal(200).astype(np.float32)
    out = nx.tensor(a, dtype=nx.bfloat16).astype(nx.float32).numpy()
    np.testing.assert_array_equal(out, bf16_round(a))


def test_astype_returns_a_copy_even_for_the_same_dtype():
    a = np.arange(3, dtype=np.float32)
    t = nx.from_numpy(a)
    c = t.astype(nx.float32)
    a[0] = 9
    assert c.tolist() == [0.0, 1.0, 2.0]


# --------------------------------------------------------------------------- python values

def test_tolist_returns_nested_python_values():
    out = nx.tensor([[1, 2], [3, 4]]).tolist()
    assert out == [[1, 2], [3, 4]]
    assert type(out[0][0]) is int
    assert type(nx.tensor([1.5]).tolist()[0]) is float


def test_one_element_tensors_convert_to_python_scalars():
    assert nx.tensor([2.5]).item() == 2.5
    assert float(nx.tensor(2.5)) == 2.5
    assert int(nx.tensor(7)) == 7
    assert bool(nx.tensor(True)) is True
    assert bool(nx.tensor([0.0])) is False
    assert nx.tensor([[4]]).item() == 4


@pytest.mark.parametrize("convert", [lambda t: t.item(), float, int, bool])
def test_scalar_conversion_of_many_elements_raises_value_error(convert):
    with pytest.raises(ValueError):
        convert(nx.tensor([1.0, 2.0]))


# Sizes no tensor can have: the element count or the byte size overflows int64. Before the checked
# size, ones((2^62,)) allocated 2^64 mod 2^64 = 0 bytes and filled past them (a segfault), and
# ones((2^40, 2^30)) counted 2^70 mod 2^64 = 0 elements and returned an empty tensor.
@pytest.mark.parametrize("factory", [nx.ones, nx.zeros, nx.rand])
def test_a_byte_size_past_the_address_space_is_a_memory_error_naming_the_shape(factory):
    with pytest.raises(MemoryError, match=r"shape \(4611686018427387904,\) needs more than 2\^63 bytes"):
        factory((1 << 62,))


@pytest.mark.parametrize("shape", [(1 << 40, 1 << 30), (1 << 31, 1 << 31, 1 << 31)])
def test_an_element_count_past_int64_is_a_memory_error_not_an_empty_tensor(shape):
    with pytest.raises(MemoryError, match="more than 2\\^63 elements"):
        nx.ones(shape)


def test_a_zero_dimension_makes_an_empty_tensor_whatever_the_other_dims():
    t = nx.zeros((1 << 40, 1 << 30, 0))
    assert t.shape == (1 << 40, 1 << 30, 0) and t.numel() == 0
