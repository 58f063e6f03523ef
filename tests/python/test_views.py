"""Views and indexing: reshape, transpose, permute, T, expand, contiguous, slicing, gather."""

import numpy as np
import pytest

import nexus as nx


@pytest.fixture
def a():
    return np.arange(24, dtype=np.float32).reshape(2, 3, 4)


def values(t):
    return np.asarray(t.numpy())


# --------------------------------------------------------------------------- reshape

@pytest.mark.parametrize("shape", [(6, 4), (4, -1), (24,), (-1,), (2, 12), (1, 2, 1, 12), (2, 3, 4)])
def test_reshape_matches_numpy(a, shape):
    r = nx.tensor(a).reshape(*shape)
    ref = a.reshape(shape)
    assert r.shape == ref.shape
    np.testing.assert_array_equal(values(r), ref)


def test_reshape_accepts_a_shape_tuple(a):
    assert nx.tensor(a).reshape((4, 6)).shape == (4, 6)


def test_reshape_of_a_contiguous_tensor_is_a_view(a):
    r = nx.from_numpy(a).reshape(6, 4)
    a[0, 0, 0] = -1
    assert values(r)[0, 0] == -1
    assert np.shares_memory(r.numpy(), a)


def test_reshape_of_a_transposed_tensor_uses_logical_order(a):
    r = nx.tensor(a).transpose(0, 2).reshape(-1)
    np.testing.assert_array_equal(values(r), a.swapaxes(0, 2).reshape(-1))


def test_reshape_of_zero_dimensional_and_empty_tensors():
    assert nx.tensor(5.0).reshape(1, 1).tolist() == [[5.0]]
    assert nx.zeros(0, 3).reshape(3, 0).shape == (3, 0)


@pytest.mark.parametrize("shape", [(5, 5), (-1, -1), (7, -1), (25,)])
def test_reshape_to_an_incompatible_shape_raises_value_error(a, shape):
    with pytest.raises(ValueError):
        nx.tensor(a).reshape(*shape)


# --------------------------------------------------------------------------- transpose family

@pytest.mark.parametrize(
    "nx_view,np_view",
    [
        (lambda t: t.transpose(0, 2), lambda x: x.swapaxes(0, 2)),
        (lambda t: t.transpose(1, 2), lambda x: x.swapaxes(1, 2)),
        (lambda t: t.transpose(1, 1), lambda x: x),
        (lambda t: t.permute(2, 0, 1), lambda x: x.transpose(2, 0, 1)),
        (lambda t: t.permute(0, 1, 2), lambda x: x),
        (lambda t: t.T, lambda x: x.T),
        (lambda t: t.permute(1, 2, 0).T, lambda x: x.transpose(1, 2, 0).T),
    ],
    ids=["transpose02", "transpose12", "transpose11", "permute201", "permute012", "T", "permute_T"],
)
def test_transpose_family_matches_numpy_and_shares_memory(a, nx_view, np_view):
    v = nx_view(nx.from_numpy(a))
    ref = np_view(a)
    assert v.shape == ref.shape
    np.testing.assert_array_equal(values(v), ref)
    assert tuple(v.strides) == tuple(s // 4 for s in ref.strides)
    assert np.shares_memory(v.numpy(), a)


def test_T_of_a_matrix_swaps_its_axes():
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(values(nx.tensor(m).T), m.T)


def test_transposed_tensor_is_not_contiguous_until_made_so(a):
    v = nx.tensor(a).transpose(0, 2)
    assert not v.is_contiguous()
    c = v.contiguous()
    assert c.is_contiguous()
    assert tuple(c.strides) == (6, 2, 1)
    np.testing.assert_array_equal(values(c), a.swapaxes(0, 2))


def test_contiguous_of_a_contiguous_tensor_keeps_the_values(a):
    c = nx.tensor(a).contiguous()
    assert c.is_contiguous()
    np.testing.assert_array_equal(values(c), a)


# --------------------------------------------------------------------------- expand

@pytest.mark.parametrize(
    "src_shape,target",
    [((3, 1), (3, 4)), ((1, 4), (3, 4)), ((4,), (2, 3, 4)), ((), (2, 2)), ((3, 1), (-1, 5)),
     ((2, 1, 1), (2, 3, 4)), ((3, 1), (0, 3, 1))],
)
def test_expand_matches_broadcast_to(src_shape, target):
    src = np.arange(int(np.prod(src_shape)), dtype=np.float64).reshape(src_shape)
    e = nx.tensor(src).expand(*target)
    ref_shape = tuple(s if s != -1 else src_shape[i - len(target) + len(src_shape)]
                      for i, s in enumerate(target))
    ref = np.broadcast_to(src, ref_shape)
    assert e.shape == ref.shape
    np.testing.assert_array_equal(values(e), ref)


def test_expanded_dimensions_have_zero_stride():
    e = nx.tensor(np.ones((3, 1), np.float32)).expand(2, 3, 4)
    assert tuple(e.strides) == (0, 1, 0)


@pytest.mark.parametrize("src_shape,target", [((3, 1), (2, 4)), ((3,), (3, 2)), ((2, 3), (3,))])
def test_expand_to_an_incompatible_shape_raises_value_error(src_shape, target):
    with pytest.raises(ValueError):
        nx.zeros(*src_shape).expand(*target)


# --------------------------------------------------------------------------- basic indexing

INDEXES = {
    "int": np.s_[1],
    "negative_int": np.s_[-1],
    "start": np.s_[1:],
    "column": np.s_[:, 1],
    "int_then_slice": np.s_[0, 1:3],
    "step": np.s_[:, ::2],
    "start_stop_step": np.s_[:, 0:3:2, 1::2],
    "past_the_end": np.s_[1:5],
    "empty": np.s_[0:0],
    "ellipsis_last": np.s_[..., 0],
    "ellipsis_slice": np.s_[..., 1:3],
    "ellipsis_middle": np.s_[1, ..., 2],
    "new_axis_first": np.s_[None],
    "new_axis_middle": np.s_[:, None],
    "new_axis_after_ellipsis": np.s_[0, ..., None],
    "full_index": np.s_[1, 2, 3],
    "negative_full_index": np.s_[-1, -2, -3],
    "every_third": np.s_[:, :, ::3],
}


@pytest.mark.parametrize("name", sorted(INDEXES))
def test_basic_indexing_matches_numpy(a, name):
    index = INDEXES[name]
    v = nx.tensor(a)[index]
    ref = a[index]
    assert v.shape == ref.shape
    np.testing.assert_array_equal(values(v), ref)


@pytest.mark.parametrize("name", ["int", "step", "ellipsis_last", "start_stop_step", "new_axis_middle"])
def test_basic_indexing_returns_a_view(a, name):
    v = nx.from_numpy(a)[INDEXES[name]]
    assert np.shares_memory(v.numpy(), a)


def test_chained_indexing_of_a_transposed_tensor_matches_numpy(a):
    v = nx.tensor(a).T[1:, ::2][..., 1]
    np.testing.assert_array_equal(values(v), a.T[1:, ::2][..., 1])


# --------------------------------------------------------------------------- gather

@pytest.mark.parametrize(
    "make_index",
    [
        lambda: [0, 1, 1],
        lambda: [1],
        lambda: np.array([[1, 0], [0, 1], [1, 1]]),
        lambda: np.array([0, 1], dtype=np.int32),
        lambda: nx.tensor([1, 0, 1]),
        lambda: nx.tensor([[1], [0]], dtype="int32"),
    ],
    ids=["list", "single", "numpy_2d", "numpy_int32", "tensor", "tensor_2d_int32"],
)
def test_integer_array_gather_matches_numpy(a, make_index):
    index = make_index()
    ref_index = np.asarray(index if isinstance(index, (list, np.ndarray)) else index.tolist())
    g = nx.tensor(a)[index]
    ref = a[ref_index]
    assert g.shape == ref_index.shape + a.shape[1:]
    np.testing.assert_array_equal(values(g), ref)


@pytest.mark.parametrize("index", [[], [[]]], ids=str)
def test_an_empty_list_index_selects_nothing_as_in_numpy(a, index):
    g = nx.tensor(a)[index]
    ref = a[index]
    assert g.shape == ref.shape and g.dtype == nx.float32
    assert g.numel() == 0


def test_gather_from_a_transposed_tensor_matches_numpy(a):
    g = nx.tensor(a).T[[3, 0, 3]]
    np.testing.assert_array_equal(values(g), a.T[[3, 0, 3]])


def test_gather_copies_rather_than_aliases(a):
    base = nx.from_numpy(a)
    g = base[[0, 1]]
    a[0, 0, 0] = -5
    assert values(g)[0, 0, 0] == 0


# --------------------------------------------------------------------------- bad indexes

@pytest.mark.parametrize(
    "index,bad,axis,size",
    [(np.s_[5], "5", "0", "2"), (np.s_[0, 7], "7", "1", "3"), (np.s_[:, :, 9], "9", "2", "4"),
     (np.s_[-3], "-3", "0", "2"), (np.s_[..., 6], "6", "2", "4")],
)
def test_out_of_range_index_raises_index_error_naming_index_axis_and_size(a, index, bad, axis,
                                                                          size):
    with pytest.raises(IndexError) as info:
        nx.tensor(a)[index]
    message = str(info.value)
    assert bad in message and axis in message and size in message


@pytest.mark.parametrize("index", [[0, 2], np.array([5]), np.array([[0], [7]])])
def test_out_of_range_gather_raises_index_error(a, index):
    with pytest.raises(IndexError):
        nx.tensor(a)[index]


def test_too_many_indices_raise_index_error(a):
    with pytest.raises(IndexError):
        nx.tensor(a)[0, 0, 0, 0]


@pytest.mark.parametrize("index", [np.s_[::-1], np.s_[:, ::-2], np.s_[..., 3:0:-1]])
def test_negative_step_raises_value_error(a, index):
    with pytest.raises(ValueError):
        nx.tensor(a)[index]


def test_zero_step_raises_rather_than_looping(a):
    with pytest.raises((ValueError, IndexError)):
        nx.tensor(a)[::0]


@pytest.mark.parametrize("dims", [(0, 3), (-4, 0)])
def test_transpose_of_a_missing_axis_raises_index_error(a, dims):
    with pytest.raises(IndexError):
        nx.tensor(a).transpose(*dims)


# --------------------------------------------------------------------------- assignment
# t[key] = value writes into t's storage as numpy does (torch too): views of t and an array t
# shares memory with see it; the value broadcasts to t[key] and converts to t's dtype.

SET_KEYS = {
    "int": (1,), "negative_int": (-1, 2), "slice": (slice(None), slice(1, 3)),
    "step": (slice(None, None, 2), slice(None), slice(1, None, 2)), "ellipsis": (Ellipsis, 0),
    "none": (None, 0), "mixed": (0, None, Ellipsis, slice(1, 4)), "all": (Ellipsis,),
}
SET_VALUES = {
    "scalar": lambda shape: 7.5, "int_scalar": lambda shape: -3,
    "same_shape": lambda shape: np.arange(np.prod(shape), dtype=np.float32).reshape(shape) + 100,
    "broadcast_row": lambda shape: np.arange(shape[-1], dtype=np.float64) - 50 if shape else 9.0,
}


@pytest.mark.parametrize("value", sorted(SET_VALUES))
@pytest.mark.parametrize("key", sorted(SET_KEYS))
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_assignment_matches_numpy_and_writes_the_shared_storage(a, key, value, dtype):
    want = a.astype(dtype)
    shared = want.copy()
    t = nx.from_numpy(shared)
    view = t.reshape(-1)
    k = SET_KEYS[key]
    v = SET_VALUES[value](want[k].shape)
    want[k] = v
    t[k] = nx.tensor(v) if isinstance(v, np.ndarray) and value == "same_shape" else v
    np.testing.assert_array_equal(shared, want)  # the numpy array sharing t's memory
    np.testing.assert_array_equal(values(view), want.reshape(-1))  # a view of t
    assert t.dtype == dtype


@pytest.mark.parametrize("index", [[0, 1], [-1], np.array([1, 0, 1]), [1, 1]])
def test_assignment_through_an_integer_array_matches_numpy(a, index):
    want, t = a.copy(), nx.tensor(a)
    t[nx.tensor(np.asarray(index))] = 5.0
    want[np.asarray(index)] = 5.0
    np.testing.assert_array_equal(values(t), want)
    rows = np.arange(len(index) * 12, dtype=np.float32).reshape(len(index), 3, 4)
    t[index] = rows
    want[np.asarray(index)] = rows  # a repeated index keeps the last write, as numpy does
    np.testing.assert_array_equal(values(t), want)


def test_assignment_of_an_overlapping_view_reads_the_old_values(a):
    want, t = a.copy(), nx.tensor(a)
    t[:, 1:] = t[:, :-1]
    want[:, 1:] = want[:, :-1].copy()
    np.testing.assert_array_equal(values(t), want)
    t[[0, 1]] = t[[1, 0]]
    want[[0, 1]] = want[[1, 0]]
    np.testing.assert_array_equal(values(t), want)


def test_assignment_into_a_transposed_view_writes_the_base(a):
    base = nx.tensor(a)
    base.T[0] = -1.0  # base.T is (4, 3, 2): its row 0 is base[..., 0]
    want = a.copy()
    want[..., 0] = -1.0
    np.testing.assert_array_equal(values(base), want)


@pytest.mark.parametrize("key,value,error", [
    ((0,), np.ones(5), ValueError), ((slice(None),), np.ones((3, 3, 4)), ValueError),
    ((5,), 1.0, IndexError), ((0, 0, 0, 0), 1.0, IndexError), ([0, 7], 1.0, IndexError),
    (([0.5, 1.0],), 1.0, IndexError), ((slice(None, None, -1),), 1.0, ValueError),
], ids=["wide_value", "tall_value", "index", "too_many", "array_index", "float_index", "step"])
def test_bad_assignment_raises_and_leaves_the_tensor_unchanged(a, key, value, error):
    t = nx.tensor(a)
    with pytest.raises(error):
        t[key if not isinstance(key, tuple) or len(key) != 1 else key[0]] = value
    np.testing.assert_array_equal(values(t), a)


def test_assignment_respects_autograd_as_torch_does():
    # torch: "a leaf Variable that requires grad is being used in an in-place operation."
    w = nx.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        w[0] = 2.0
    with nx.no_grad():  # how optimizers update weights
        w[0] = 2.0
    assert w.tolist() == [2.0, 1.0, 1.0] and w.requires_grad
    with pytest.raises(RuntimeError, match="not differentiable"):
        (w * 2.0)[0] = 1.0
    buf = nx.zeros(3)
    with pytest.raises(RuntimeError, match="drop its gradient"):
        buf[0] = w[1]
    buf[0] = w[1].detach()
    assert buf.tolist() == [1.0, 0.0, 0.0]
