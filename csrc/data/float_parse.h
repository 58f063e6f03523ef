// Decimal text to the nearest double, for the JSONL and CSV readers: Eisel-Lemire (one or two
// 64x64-bit products with a 128-bit power of five, csrc/data/pow5_table.h), with Clinger's exact
// path for short mantissas and small exponents in front, and strtod behind for the cases the
// product cannot decide (halfway within its error, subnormals, more than 19 significant digits
// whose last ones matter). Every result is the correctly rounded double, as float() gives.
// The scan and the fast paths are inline here: the readers call them once per number, and the
// calls across the library (through its PLT) cost the JSONL reader a few percent.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>

#include "data/pow5_table.h"

namespace nexus::data {

// The number's parts: value = (-1)^negative * mantissa * 10^exp10, where mantissa holds the first
// 19 significant digits and truncated says that a non-zero digit followed them.
struct Decimal {
  uint64_t mantissa = 0;
  int64_t exp10 = 0;
  bool negative = false;
  bool truncated = false;
};

// Scans [-]digits[.digits][(e|E)[+-]digits] from b (never past e) and returns its end, or b
// when no number starts there. bare_point also takes "5." and ".5" (strtod does; JSON does
// not). An exponent marker not followed by digits ends the number before it ("1e" scans "1").
inline const char* scan_decimal(const char* b, const char* e, Decimal& d, bool bare_point);

// The nearest double to d, whose text is [b, e) (read again by the slow path).
inline double decimal_to_double(const Decimal& d, const char* b, const char* e);

// The nearest double to the whole of [b, e); false when [b, e) is not one number as
// scan_decimal(bare_point) reads it. Out of range is not an error: +-inf, or +-0.
bool parse_double(const char* b, const char* e, double& out, bool bare_point = true);

namespace detail {

constexpr int kMaxDigits = 19;            // every 19-digit decimal fits in a uint64_t
constexpr int64_t kExpLimit = 1'000'000;  // exponents past this are +-inf or 0 whatever the digits

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Eight characters at once (SWAR, little-endian: the first character in the low byte).
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the digit loads assume a little-endian machine");

inline uint64_t load8(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// How many of v's bytes, from the first, are '0'..'9' (0 to 8). A byte is a digit when its high
// nibble is 3 and adding 6 does not carry out of its low one; a carry out of a byte past the
// digits can only disturb bytes after it, which do not count.
inline int leading_digits(uint64_t v) {
  constexpr uint64_t kHigh = 0xF0F0F0F0F0F0F0F0;
  const uint64_t other = ((v & kHigh) | (((v + 0x0606060606060606) & kHigh) >> 4)) ^ 0x3333333333333333;
  return other == 0 ? 8 : __builtin_ctzll(other) / 8;
}

// The value of eight digit characters: pairs, then quads, then the eight, each step one multiply.
inline uint64_t eight_digit_value(uint64_t v) {
  v -= 0x3030303030303030;
  v = (v * 10 + (v >> 8)) & 0x00FF00FF00FF00FF;
  v = (v * 100 + (v >> 16)) & 0x0000FFFF0000FFFF;
  return (v * 10000 + (v >> 32)) & 0xFFFFFFFF;
}

constexpr uint64_t kPow10Int[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

// Reads the digits at p onto w (w * 10^n + their value, wrapping past 19 digits in all: the
// caller reads those again) and returns their end. Eight bytes at a time while eight remain: the
// digits among them move to the top and '0's fill in below, so one multiply chain reads any
// count of them.
[[gnu::always_inline]] inline const char* read_digits(const char* p, const char* e, uint64_t& w) {
  while (e - p >= 8) {
    const uint64_t v = load8(p);
    const int n = leading_digits(v);
    if (n == 8) {
      w = w * 100000000 + eight_digit_value(v);
      p += 8;
      continue;
    }
    if (n > 0) w = w * kPow10Int[n] + eight_digit_value((v << (64 - 8 * n)) | (0x3030303030303030 >> (8 * n)));
    return p + n;
  }
  for (; p < e && is_digit(*p); ++p) w = w * 10 + uint64_t(*p - '0');
  return p;
}

struct U128 {
  uint64_t hi, lo;
};

inline U128 multiply(uint64_t a, uint64_t b) {
  const unsigned __int128 p = static_cast<unsigned __int128>(a) * b;
  return {uint64_t(p >> 64), uint64_t(p)};
}

// Clinger: a mantissa below 2^53 and |exp10| <= 22 are both exact doubles, so one IEEE
// multiplication or division rounds the exact quotient once: the correctly rounded result.
inline std::optional<double> exact_path(uint64_t w, int64_t q) {
  static constexpr double kPow10[] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,  1e8,  1e9,  1e10, 1e11,
                                      1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
  if (w > (uint64_t(1) << 53) || q < -22 || q > 22) return std::nullopt;
  const double d = double(w);
  return q < 0 ? d / kPow10[-q] : d * kPow10[q];
}

// Eisel-Lemire for w * 10^q (w > 0, q within the table): the double's bits without the sign, or
// nothing when the 128-bit product cannot decide the rounding (then strtod does).
inline std::optional<uint64_t> eisel_lemire(uint64_t w, int64_t q) {
  constexpr int kMantissaBits = 52;
  constexpr uint64_t kPrecisionMask = ~uint64_t(0) >> (kMantissaBits + 3);  // the 9 bits below the result
  const int lz = __builtin_clzll(w);
  w <<= lz;
  const uint64_t* t = &pow5::kTable[2 * (q - pow5::kLow)];
  U128 p = multiply(w, t[0]);
  if ((p.hi & kPrecisionMask) == kPrecisionMask) {  // the low half of 5^q may carry into the kept bits
    const U128 second = multiply(w, t[1]);
    p.lo += second.hi;
    if (second.hi > p.lo) ++p.hi;
  }
  // Still all ones below: the truncated table could be off by the carry; exact only where 5^q
  // (q >= 0) or its reciprocal's expansion (q >= -27) fits the 128 bits.
  if (p.lo == ~uint64_t(0) && !(q >= -27 && q <= 55)) return std::nullopt;
  const int upper = int(p.hi >> 63);
  const int shift = upper + 64 - kMantissaBits - 3;
  uint64_t mantissa = p.hi >> shift;
  // floor(q * log2(10)) + 63, the exponent of 10^q's 128-bit form, plus the double's bias
  int64_t power2 = ((int64_t(152170 + 65536) * q) >> 16) + 63 + upper - lz + 1023;
  if (power2 <= 0) return std::nullopt;  // subnormal: rare, and strtod rounds it
  // Exactly halfway between two doubles (possible only for small |q|): round to even.
  if (p.lo <= 1 && q >= -4 && q <= 23 && (mantissa & 3) == 1 && (mantissa << shift) == p.hi) mantissa &= ~uint64_t(1);
  mantissa += mantissa & 1;
  mantissa >>= 1;
  if (mantissa >= (uint64_t(2) << kMantissaBits)) {  // rounding carried into a new bit
    mantissa = uint64_t(1) << kMantissaBits;
    ++power2;
  }
  mantissa &= ~(uint64_t(1) << kMantissaBits);
  if (power2 >= 0x7FF) return uint64_t(0x7FF) << kMantissaBits;  // infinity
  return mantissa | (uint64_t(power2) << kMantissaBits);
}

inline double with_sign(uint64_t bits, bool negative) {
  bits |= uint64_t(negative) << 63;
  double d;
  std::memcpy(&d, &bits, sizeof d);
  return d;
}

// The rare cases, out of line (float_parse.cpp): more than 19 significant digits, and strtod.
void scan_long_mantissa(const char* whole, size_t whole_digits, const char* fraction, size_t fraction_digits,
                        int64_t exp, Decimal& d);
double slow_path(const char* b, const char* e);

}  // namespace detail

[[gnu::always_inline]] inline const char* scan_decimal(const char* b, const char* e, Decimal& d, bool bare_point) {
  d = Decimal{};
  const char* p = b;
  if (p < e && *p == '-') {
    d.negative = true;
    ++p;
  }
  uint64_t w = 0;
  const char* whole = p;
  p = detail::read_digits(p, e, w);
  const size_t whole_digits = size_t(p - whole);
  const char* fraction = p;
  size_t fraction_digits = 0;
  bool point = false;
  if (p < e && *p == '.') {
    point = true;
    fraction = ++p;
    p = detail::read_digits(p, e, w);
    fraction_digits = size_t(p - fraction);
  }
  if (whole_digits + fraction_digits == 0) return b;
  if (!bare_point && (whole_digits == 0 || (point && fraction_digits == 0))) return b;
  int64_t exp = 0;
  if (p < e && (*p == 'e' || *p == 'E')) {
    const char* x = p + 1;
    bool minus = false;
    if (x < e && (*x == '+' || *x == '-')) minus = *x++ == '-';
    if (x < e && detail::is_digit(*x)) {
      while (x < e && detail::is_digit(*x)) {
        if (exp < detail::kExpLimit) exp = exp * 10 + (*x - '0');
        ++x;
      }
      if (minus) exp = -exp;
      p = x;
    }
  }
  if (whole_digits + fraction_digits <= size_t(detail::kMaxDigits)) {  // the usual case: every digit fits
    d.mantissa = w;
    d.exp10 = exp - int64_t(fraction_digits);
    return p;
  }
  detail::scan_long_mantissa(whole, whole_digits, fraction, fraction_digits, exp, d);
  return p;
}

inline double decimal_to_double(const Decimal& d, const char* b, const char* e) {
  const uint64_t w = d.mantissa;
  const int64_t q = d.exp10;
  if (w == 0) return d.negative ? -0.0 : 0.0;
  // The exact division only for mantissas below 2^32 (it would serve up to 2^53): numbers of 10
  // to 16 digits then take Eisel-Lemire like the longer ones, and the branch between the two
  // stays predictable on data such as repr()'s 15 to 17 digits (measured: 19.3 -> 17.4 ns a
  // number on a file of them).
  if (!d.truncated && w < (uint64_t(1) << 32))
    if (auto v = detail::exact_path(w, q)) return d.negative ? -*v : *v;
  // w * 10^q with w < 2^64: below 10^-343 it is under half the least subnormal; above 10^308
  // it overflows (w >= 1).
  if (q < pow5::kLow) return d.negative ? -0.0 : 0.0;
  if (q > pow5::kHigh) return d.negative ? -HUGE_VAL : HUGE_VAL;
  std::optional<uint64_t> bits = detail::eisel_lemire(w, q);
  // Digits were dropped: the value lies in [w, w + 1) * 10^q; both ends must round alike.
  if (bits && d.truncated && (w == ~uint64_t(0) || detail::eisel_lemire(w + 1, q) != bits)) bits.reset();
  return bits ? detail::with_sign(*bits, d.negative) : detail::slow_path(b, e);
}

}  // namespace nexus::data
