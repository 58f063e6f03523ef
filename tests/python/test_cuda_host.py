"""The CUDA extension's host side, checked without a GPU: it imports and registers without a
driver, says why no device can be used, and its size classes and launch geometry are right.
Skipped where the build has no CUDA backend (no nvcc at configure time)."""

import pytest

_C_cuda = pytest.importorskip("nexus._C_cuda", reason="this build has no CUDA backend (no nvcc when configured)")

KiB = 1 << 10
MiB = 1 << 20


def _no_gpu():
    return _C_cuda.device_count() == 0


def test_size_class_rounds_small_requests_to_512_bytes():
    assert _C_cuda.size_class(0) == 512
    assert _C_cuda.size_class(1) == 512
    assert _C_cuda.size_class(512) == 512
    assert _C_cuda.size_class(513) == 1024
    assert _C_cuda.size_class(MiB - 1) == MiB
    assert _C_cuda.size_class(MiB) == MiB


def test_size_class_rounds_large_requests_to_2_mib():
    assert _C_cuda.size_class(MiB + 1) == 2 * MiB
    assert _C_cuda.size_class(2 * MiB) == 2 * MiB
    assert _C_cuda.size_class(2 * MiB + 1) == 4 * MiB
    assert _C_cuda.size_class(1000 * MiB + 5) == 1002 * MiB


def test_size_class_of_an_impossible_size_raises_memory_error():
    with pytest.raises(MemoryError, match="bytes"):
        _C_cuda.size_class(2**64 - 1)


@pytest.mark.parametrize("n", [1, 255, 256, 257, 10**6, 2**31 + 5])
def test_launch_geometry_covers_n_with_a_capped_grid(n):
    blocks, threads = _C_cuda.launch_geometry(n)
    assert threads == 256
    assert 1 <= blocks <= 65536
    # Either every element has its own thread, or the grid is at its cap and the loop strides.
    assert blocks * threads >= n or blocks == 65536
    assert (blocks - 1) * threads < n


def test_launch_geometry_of_nothing_launches_nothing():
    assert _C_cuda.launch_geometry(0) == (0, 256)


def test_build_carries_sm_90():
    archs = _C_cuda.build_archs()
    assert "sm_90" in archs
    assert all(a.startswith("sm_") for a in archs)


def test_runtime_version_is_a_version():
    major, minor = _C_cuda.runtime_version().split(".")
    assert int(major) >= 12 and int(minor) >= 0


@pytest.mark.skipif(not _no_gpu(), reason="checks the no-device path; this machine has a CUDA device")
def test_without_a_device_is_available_says_why():
    ok, reason = _C_cuda.is_available()
    assert ok is False
    assert reason
    assert _C_cuda.device_count() == 0
    if "libcuda" in reason:  # no driver at all (the usual case on a CPU-only machine)
        assert reason.startswith("no NVIDIA driver found")
        assert _C_cuda.driver_version() == "none"


@pytest.mark.skipif(not _no_gpu(), reason="checks the no-device path; this machine has a CUDA device")
def test_without_a_device_queries_raise_runtime_error_naming_the_cause():
    _, reason = _C_cuda.is_available()
    with pytest.raises(RuntimeError, match="cuda:0"):
        _C_cuda.device_name(0)
    with pytest.raises(RuntimeError, match="cannot use"):
        _C_cuda.synchronize(0)
    assert reason.split(" (")[0] in str(pytest.raises(RuntimeError, _C_cuda.compute_capability, 0).value)


def test_memory_stats_start_at_zero_for_an_unused_device():
    stats = _C_cuda.memory_stats(7)
    assert stats == {"allocated_bytes": 0, "cached_bytes": 0, "peak_allocated_bytes": 0, "hits": 0, "misses": 0}
    _C_cuda.empty_cache()  # nothing cached: a no-op, never an error


@pytest.mark.parametrize("archs, cc, runs", [
    ("75-real,80-real,86-real,89-real,90", (7, 0), False),  # V100 and CUDA 13's default list
    ("75-real,80-real,86-real,89-real,90", (7, 5), True),
    ("75-real,80-real,86-real,89-real,90", (8, 7), True),  # Orin: sm_86 code runs on 8.7
    ("75-real,80-real,86-real,89-real,90", (10, 0), True),  # Blackwell: the compute_90 PTX
    ("75-real,80-real,86-real,89-real,90-real", (10, 0), False),  # no PTX to compile forward
    ("70-real,80", (7, 0), True), ("80-real", (7, 5), False), ("80", (9, 0), True)])
def test_a_build_runs_on_its_architectures_and_what_its_ptx_reaches(archs, cc, runs):
    assert _C_cuda.runs_on(archs, *cc) is runs


def test_a_malformed_architecture_list_names_the_entry():
    with pytest.raises(ValueError, match="'sm80'"):
        _C_cuda.runs_on("75-real,sm80", 8, 0)


@pytest.mark.parametrize("n_out, n_red, split", [
    (1, 1 << 26, True),     # a full sum of a large tensor: many blocks, not one
    (16, 1 << 16, True),    # batch-norm statistics of 16 channels
    (1024, 1 << 20, False),  # enough outputs to fill the GPU: one block each
    (4, 10_000, False),     # too few elements to be worth a second pass
    (0, 1 << 20, False), (1, 0, False)])
def test_a_reduction_splits_only_few_outputs_of_many_elements(n_out, n_red, split):
    parts = _C_cuda.reduce_parts(n_out, n_red)
    assert (parts > 1) is split
    if split:  # enough work per chunk, and no more blocks than fill the largest GPU a few times
        assert n_red // parts >= 8192 and n_out * parts <= 1024


@pytest.mark.skipif(not _no_gpu(), reason="checks the no-device path; this machine has a CUDA device")
def test_without_a_device_streams_events_and_pinning_raise_runtime_error():
    import nexus as nx
    for make in (nx.cuda.Stream, nx.cuda.Event, nx.cuda.current_stream, nx.cuda.default_stream):
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            make()
    x = nx.ones(3)
    with pytest.raises(RuntimeError, match=r"pin_memory\(\) needs CUDA"):
        x.pin_memory()
    assert x.is_pinned() is False
    assert x.to("cpu", non_blocking=True) is x  # nothing to copy: no CUDA needed


def test_stream_context_takes_a_stream_or_none():
    import nexus as nx
    with nx.cuda.stream(None) as s:
        assert s is None
    with pytest.raises(TypeError, match="nx.cuda.Stream"):
        with nx.cuda.stream("cuda:0"):
            pass
    with pytest.raises(TypeError, match="nx.cuda.Stream"):
        nx.ones(2).record_stream(0)


def test_operands_merge_into_the_kernels_fast_paths():
    import nexus as nx
    x, out = nx.ones(6, 5), nx.zeros(6, 5)
    scalar = nx.tensor(2.0).expand(6, 5)
    bias = nx.ones(5).expand(6, 5)
    assert _C_cuda.operand_layout(out, x, x) == (1, True, True)  # the contiguous path
    assert _C_cuda.operand_layout(out, x, scalar) == (1, False, True)  # `t * 1.7`: flat, no divisions
    assert _C_cuda.operand_layout(out, scalar, x) == (1, False, True)
    assert _C_cuda.operand_layout(out, x, bias) == (2, False, False)  # a row broadcast: strided
    assert _C_cuda.operand_layout(out, nx.ones(5, 6).T, x) == (2, False, False)
    one = nx.tensor(0.0)
    assert _C_cuda.operand_layout(one, nx.tensor(1.0), nx.tensor(2.0)) == (0, True, True)


def test_nccl_loads_from_its_wheel_or_says_what_to_install():
    version, why = _C_cuda.nccl_version(), _C_cuda.nccl_unavailable()
    if version == "none":  # the usual case without the [cuda] extra
        assert why.startswith("NCCL could not be loaded (pip install nvidia-nccl-cu13") and "libnccl.so.2" in why
    else:  # its entry points resolved, the weighted sum's PreMulSum op included
        major, minor, _ = (int(p) for p in version.split("."))
        assert (major, minor) >= (2, 11) and why == ""
        assert len(_C_cuda.nccl_unique_id()) == 128  # no GPU needed: an address for the others to join
