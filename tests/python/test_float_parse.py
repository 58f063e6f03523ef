"""The JSONL and CSV readers' float parser (csrc/data/float_parse.cpp): every decimal text reads
as the double float() gives, bit for bit, including the cases its fast paths must hand to the
slow one (halfway between two doubles, more than 19 digits, subnormals, overflow)."""

import math
import random
import struct
import subprocess
import sys
from decimal import Decimal, getcontext
from pathlib import Path

import numpy as np
import pytest

import nexus as nx

ROOT = Path(__file__).resolve().parents[2]


def bits(x: float) -> int:
    return struct.unpack("<Q", struct.pack("<d", x))[0]


def read_both(texts):
    """The column each reader makes of ``texts`` (one number per row), JSONL then CSV."""
    jsonl = nx.data.read_jsonl("".join('{"a": %s}\n' % t for t in texts).encode())["a"]
    csv = nx.data.read_csv(("a\n" + "".join(t + "\n" for t in texts)).encode())["a"]
    return jsonl.astype(np.float64), csv.astype(np.float64)


def assert_as_float(texts):
    for got in read_both(texts):
        wrong = [(t, float(g), float(t)) for t, g in zip(texts, got.tolist())
                 if bits(float(g)) != bits(float(t))]
        assert not wrong, f"{len(wrong)} of {len(texts)} differ from float(), e.g. {wrong[:3]}"


def test_the_power_of_five_table_is_what_its_generator_writes():
    r = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_pow5.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def random_texts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        kind = rng.randrange(5)
        if kind == 0:  # Python's shortest repr of a double of any exponent
            x = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(63)))[0]
            out.append(repr(x) if math.isfinite(x) else "1.5")
        elif kind == 1:  # 17 significant digits, the most a double needs
            out.append(f"{rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300):.16e}")
        elif kind == 2:  # long mantissas: past 19 digits the parser must look at the rest
            digits = "".join(rng.choice("0123456789") for _ in range(rng.randint(18, 40)))
            out.append(f"{digits[0] or 1}.{digits[1:]}e{rng.randint(-330, 300)}")
        elif kind == 3:  # integers and short decimals (the exact path)
            out.append(f"{rng.randint(-10**15, 10**15)}.{rng.randint(0, 999)}")
        else:  # near the ends of the range: subnormals, the largest doubles, overflow
            out.append(f"{rng.randint(1, 99999)}e{rng.choice([-330, -324, -320, -310, -308, 300, 304, 305])}")
    return out


def test_random_numbers_read_as_float_reads_them():
    assert_as_float(random_texts(random.Random(0), 20000))


def halfway(x: float) -> Decimal:
    """The exact decimal midpoint between x > 0 and the next double up."""
    up = np.nextafter(x, math.inf)
    return (Decimal(x) + Decimal(float(up))) / 2


def test_halfway_cases_round_to_even_and_a_hair_either_side_rounds_to_nearest():
    getcontext().prec = 800  # exact midpoints of doubles down to the subnormals
    rng = random.Random(1)
    texts = []
    for _ in range(300):
        x = abs(struct.unpack("<d", struct.pack("<Q", rng.getrandbits(63)))[0])
        if not math.isfinite(x) or x == 0 or not math.isfinite(np.nextafter(x, math.inf)):
            continue
        mid = halfway(x)
        tiny = Decimal(10) ** (mid.adjusted() - 60)
        texts += [f"{mid:e}", f"{mid + tiny:e}", f"{mid - tiny:e}"]
    for whole in (2**53, 2**54 + 2, 2**60):  # integers halfway between doubles
        texts += [str(whole + 1), str(whole + 1) + ".0", str(whole + 1) + "." + "0" * 30 + "1"]
    assert_as_float(texts)


# JSON's number grammar, case by case as a JSON test suite lists them: the accepted ones read
# as float() reads them; the rejected ones raise, naming the line and byte.
ACCEPTED = ["123e65", "0e+1", "0e1", "4", "-0.000000000000000000000000000000000000000001", "20e1",
            "-0", "-123", "-1", "1E22", "1E-2", "1E+2", "123e45", "123.456e78", "1e-2", "1e+2",
            "123", "123.456789", "0.0", "-0.0", "1.0", "1e1000", "-1e1000", "1e-1000",
            "123123e100000", "123123e-100000", "100000000000000000000",
            "-237462374673276894279832749832423479823246327846", "1.0e+28", "2.2250738585072011e-308",
            "2.2250738585072012e-308", "4.9406564584124654e-324", "2.4703282292062327e-324",
            "2.4703282292062328e-324", "1.7976931348623157e308", "1.7976931348623158e308",
            "1.7976931348623159e308", "0.1", "0.30000000000000004", "9007199254740993",
            "3.141592653589793238462643383279502884197169399375105820974944"]
REJECTED = ["++1234", "+1", "+Inf", "-01", "-1.0.", "-2.", "-NaN", ".-1", ".2e-3", "0.1.2",
            "0.3e+", "0.3e", "0.e1", "0E+", "0E", "0e+", "0e", "1.0e+", "1.0e-", "1.0e", "1 000.0",
            "1eE2", "2.e+3", "2.e-3", "2.e3", "9.e+", "Inf", "-Inf", "1.5e+", "-foo", "- 1", "-",
            "0x1", "0x42", "012", "1e", "1.", "-.1", "0.", "1e+-2", "1.2.3", "1ee2", "--1", "0-1",
            "infinity", "nan", "1_000", "١"]


def test_numbers_a_json_test_suite_accepts_read_as_python_does():
    assert_as_float(ACCEPTED)


@pytest.mark.parametrize("text", REJECTED)
def test_numbers_a_json_test_suite_rejects_raise_with_line_and_byte(text):
    with pytest.raises(ValueError, match=r"line 2, byte \d+"):
        nx.data.read_jsonl(('{"a": 1.5}\n{"a": ' + text + "}\n").encode())
