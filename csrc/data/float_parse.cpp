#include "data/float_parse.h"

#include <clocale>
#include <cstdlib>
#include <string>

namespace nexus::data {

namespace detail {

void scan_long_mantissa(const char* whole, size_t whole_digits, const char* fraction, size_t fraction_digits,
                        int64_t exp, Decimal& d) {
  // More than 19 digits: the first 19 significant ones, and whether any later one is not zero.
  int taken = 0;
  const auto digit = [&](char c, bool in_fraction) {
    if (taken == 0 && c == '0') {  // a leading zero: only the point's place moves
      d.exp10 -= in_fraction;
    } else if (taken < kMaxDigits) {
      d.mantissa = d.mantissa * 10 + uint64_t(c - '0');
      ++taken;
      d.exp10 -= in_fraction;
    } else {  // an integer digit scales by 10, a fraction digit only rounds
      d.exp10 += !in_fraction;
      d.truncated |= c != '0';
    }
  };
  for (size_t i = 0; i < whole_digits; ++i) digit(whole[i], false);
  for (size_t i = 0; i < fraction_digits; ++i) digit(fraction[i], true);
  d.exp10 += exp;
}

// strtod rounds correctly; in the C locale, so that '.' is the decimal point whatever the
// process's locale says.
double slow_path(const char* b, const char* e) {
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", locale_t(nullptr));
  return strtod_l(std::string(b, e).c_str(), nullptr, c_locale);
}

}  // namespace detail

bool parse_double(const char* b, const char* e, double& out, bool bare_point) {
  Decimal d;
  const char* end = scan_decimal(b, e, d, bare_point);
  if (end == b || end != e) return false;
  out = decimal_to_double(d, b, e);
  return true;
}

}  // namespace nexus::data
