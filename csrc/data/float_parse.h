// Decimal text to the nearest double, for the JSONL and CSV readers: Eisel-Lemire (one or two
// 64x64-bit products with a 128-bit power of five, csrc/data/pow5_table.h), with Clinger's exact
// path for short mantissas and small exponents in front, and strtod behind for the cases the
// product cannot decide (halfway within its error, subnormals, more than 19 significant digits
// whose last ones matter). Every result is the correctly rounded double, as float() gives.
#pragma once

#include <cstdint>

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
const char* scan_decimal(const char* b, const char* e, Decimal& d, bool bare_point);

// The nearest double to d, whose text is [b, e) (read again by the slow path).
double decimal_to_double(const Decimal& d, const char* b, const char* e);

// The nearest double to the whole of [b, e); false when [b, e) is not one number as
// scan_decimal(bare_point) reads it. Out of range is not an error: +-inf, or +-0.
bool parse_double(const char* b, const char* e, double& out, bool bare_point = true);

}  // namespace nexus::data
