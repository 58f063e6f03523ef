"""nx.data.read_idx: MNIST-style IDX files, raw and gzip, every type code."""

import gzip
import struct
import subprocess
import sys

import numpy as np
import pytest

import nexus as nx

CODES = {np.uint8: 0x08, np.int8: 0x09, np.int16: 0x0B, np.int32: 0x0C, np.float32: 0x0D,
         np.float64: 0x0E}


def idx_bytes(a):
    a = np.asarray(a)
    head = bytes([0, 0, CODES[a.dtype.type], a.ndim]) + struct.pack(f">{a.ndim}I", *a.shape)
    return head + a.astype(a.dtype.newbyteorder(">")).tobytes()


@pytest.mark.parametrize("dtype", list(CODES))
def test_every_type_round_trips(tmp_path, dtype):
    a = (np.arange(60).reshape(3, 4, 5) - 20).astype(dtype)
    if dtype == np.uint8:
        a = np.arange(60, dtype=np.uint8).reshape(3, 4, 5)
    p = tmp_path / "a.idx"
    p.write_bytes(idx_bytes(a))
    out = nx.data.read_idx(p)
    assert out.dtype == a.dtype and out.shape == a.shape
    np.testing.assert_array_equal(out, a)


def test_gzip_file_and_bytes(tmp_path):
    a = np.random.default_rng(0).integers(0, 255, (10, 28, 28), dtype=np.uint8)
    p = tmp_path / "train-images-idx3-ubyte.gz"
    p.write_bytes(gzip.compress(idx_bytes(a)))
    np.testing.assert_array_equal(nx.data.read_idx(p), a)
    np.testing.assert_array_equal(nx.data.read_idx(gzip.compress(idx_bytes(a))), a)
    np.testing.assert_array_equal(nx.data.read_idx(idx_bytes(a)), a)


@pytest.mark.parametrize("data,what", [
    (b"\x01\x00\x08\x01", "not an IDX file"),
    (b"\x00\x00\x07\x01\x00\x00\x00\x01\x00", "unknown type code"),
    (b"\x00\x00\x08\x02\x00\x00\x00\x01", "ends inside the header"),
    (b"\x00\x00\x08\x01\x00\x00\x00\x03\x01\x02", "3 values of uint8"),
    (b"\x00\x00\x08\x03\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff", "overflow"),
])
def test_malformed_files_raise(data, what):
    with pytest.raises(ValueError, match=what):
        nx.data.read_idx(data)



@pytest.mark.parametrize("read", [
    nx.data.read_idx, nx.data.read_csv, nx.data.read_jsonl, lambda p: next(nx.data.iter_jsonl(p)),
], ids=["read_idx", "read_csv", "read_jsonl", "iter_jsonl"])
def test_a_missing_file_raises_file_not_found_as_open_does(tmp_path, read):
    missing = tmp_path / "no" / "such-file"
    with pytest.raises(FileNotFoundError) as by_open:
        open(missing, "rb")  # noqa: SIM115
    with pytest.raises(FileNotFoundError) as by_reader:
        read(missing)
    assert by_reader.value.errno == by_open.value.errno
    assert by_reader.value.filename == str(missing)
    assert str(by_reader.value) == str(by_open.value)
    with pytest.raises(FileNotFoundError, match="MNIST file"):
        nx.data.load("mnist", path=missing)


def test_a_file_there_is_no_memory_to_map_is_a_memory_error(tmp_path):
    # The child maps a 64 MiB file with its address space limited to what it uses now plus 16
    # MiB: mmap fails with ENOMEM, which is a MemoryError (as a failed allocation), not a crash.
    path = tmp_path / "big.idx"
    path.write_bytes(struct.pack(">HBBI", 0, 0x08, 1, 64 << 20) + bytes(64 << 20))
    code = ("import resource, re\n"
            "import nexus as nx\n"
            "vm = int(re.search(r'VmSize:\\s+(\\d+)', open('/proc/self/status').read()).group(1)) * 1024\n"
            "resource.setrlimit(resource.RLIMIT_AS, (vm + (16 << 20), resource.RLIM_INFINITY))\n"
            "try:\n"
            f"    nx.data.read_idx({str(path)!r})\n"
            "except MemoryError as e:\n"
            "    print('MemoryError', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MemoryError cannot map") and "big.idx" in out.stdout
