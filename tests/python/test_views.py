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
    assert g.size == 0


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
