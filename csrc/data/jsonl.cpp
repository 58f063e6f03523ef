// The JSONL range parser. Each line is one object; values go straight into the ColumnBuilder of
// their key. Keys usually come in the same order on every line, so the key at position k is first
// compared with the one seen at position k on the previous line (one memcmp) before any hash
// lookup. Numbers are checked against JSON's grammar, then integers parse with std::from_chars and
// the rest with data/float_parse.h (the double nearest to the decimal text).
// A malformed line throws Fail inside the parser; the range either stops there (raise) or rolls the
// line back and goes on (skip). Type conflicts between lines are never skipped.
#include "data/jsonl.h"

#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <string_view>
#include <unordered_map>

#include "base/error.h"
#include "base/thread_pool.h"
#include "data/float_parse.h"
#include "data/source.h"

namespace nexus::data {
namespace {

struct Fail {
  const char* at;
  std::string what;
  bool fatal = false;  // a schema conflict: reported even under on_error="skip"
};

inline bool is_digit(char c) { return c >= '0' && c <= '9'; }

class RangeParser {
 public:
  RangeParser(const char* data, int64_t byte_base, const ReadOptions& opt, RangeResult& out)
      : data_(data), byte_base_(byte_base), opt_(opt), out_(out), cols_(out.columns) {}

  void run(const char* p, const char* end) {
    const char* first = p;
    while (p < end) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', size_t(end - p)));
      const char* le = nl ? nl : end;
      size_t ncols = cols_.size();
      try {
        line(p, le);
      } catch (Fail& f) {
        for (int c : touched_) cols_[size_t(c)].rollback();
        drop_columns_after(ncols);
        if (f.fatal || !opt_.skip_errors) {
          out_.failed = true;
          out_.error = {line_, byte_base_ + (f.at - data_), std::move(f.what)};
          return;
        }
        ++out_.skipped;
        if (out_.skipped_lines.size() < kMaxSkippedLines) out_.skipped_lines.push_back(line_);
      }
      ++line_;
      p = le + 1;
      if (row_ == 1 || row_ == kReserveSample) reserve(expected_rows(size_t(end - first), size_t(p - first), row_));
    }
    out_.rows = row_;
    out_.lines = line_;
  }

 private:
  [[noreturn]] void fail(const char* at, std::string what, bool fatal = false) {
    throw Fail{at, std::move(what), fatal};
  }
  void ws() {
    while (p_ < e_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }
  void expect_more(const char* what) {
    if (p_ >= e_) fail(p_, str("expected ", what, " but the line ended"));
  }

  void reserve(size_t rows) {
    for (auto& c : cols_) c.reserve(rows);
  }

  void drop_columns_after(size_t n) {
    if (cols_.size() == n) return;
    for (size_t i = n; i < cols_.size(); ++i) index_.erase(cols_[i].name());
    cols_.erase(cols_.begin() + ptrdiff_t(n), cols_.end());
    pred_.clear();
  }

  void line(const char* p, const char* e) {
    p_ = p, e_ = e;
    touched_.clear();
    ws();
    if (p_ == e_) return;  // blank line
    if (*p_ != '{') fail(p_, "expected '{' to start a JSON object");
    ++p_;
    ws();
    pred_pos_ = 0;
    expect_more("a key or '}'");
    if (*p_ == '}') {
      ++p_;
    } else {
      for (;;) {
        expect_more("'\"' to start a key");
        if (*p_ != '"') fail(p_, "expected '\"' to start a key");
        int col = key();
        ws();
        if (p_ >= e_ || *p_ != ':') fail(p_, "expected ':' after the key");
        ++p_;
        ws();
        if (col < 0) skip_value(0);
        else value(col);
        ws();
        expect_more("',' or '}'");
        if (*p_ == ',') {
          ++p_;
          ws();
          continue;
        }
        if (*p_ == '}') {
          ++p_;
          break;
        }
        fail(p_, "expected ',' or '}' after a value");
      }
    }
    ws();
    if (p_ != e_) fail(p_, "expected the end of the line after the object");
    for (auto& c : cols_)
      if (!c.touched(row_)) c.push_missing();
    ++row_;
  }

  // ---- keys --------------------------------------------------------------------------------
  int key() {
    const char* s = p_ + 1;
    const char* q = s;
    while (q < e_ && *q != '"' && *q != '\\' && uint8_t(*q) >= 0x20 && uint8_t(*q) < 0x80) ++q;
    std::string_view name;
    if (q < e_ && *q == '"') {
      name = std::string_view(s, size_t(q - s));
      p_ = q + 1;
    } else {
      tmp_.clear();
      string_into(tmp_);
      name = tmp_;
    }
    if (pred_pos_ < pred_.size() && pred_[pred_pos_].first == name) return pred_[pred_pos_++].second;
    int col = lookup(name);
    if (pred_pos_ < pred_.size()) pred_[pred_pos_] = {std::string(name), col};
    else pred_.emplace_back(std::string(name), col);
    ++pred_pos_;
    return col;
  }

  int lookup(std::string_view name) {
    std::string n(name);
    auto it = index_.find(n);
    if (it != index_.end()) return it->second;
    bool wanted = opt_.columns.empty();
    for (const auto& c : opt_.columns) wanted = wanted || c == n;
    if (!wanted) return index_[n] = -1;
    cols_.emplace_back(n, pinned_int_range(opt_, n));
    for (int64_t r = 0; r < row_; ++r) cols_.back().push_missing();
    return index_[n] = int(cols_.size() - 1);
  }

  // ---- strings -----------------------------------------------------------------------------
  // p_ at the opening quote; appends the decoded UTF-8 to out and leaves p_ after the closing one.
  void string_into(std::string& out) {
    const char* open = p_++;
    for (;;) {
      const char* q = p_;
      while (q < e_ && *q != '"' && *q != '\\' && uint8_t(*q) >= 0x20 && uint8_t(*q) < 0x80) ++q;
      out.append(p_, q);
      p_ = q;
      if (p_ >= e_) fail(open, "unterminated string");
      char c = *p_;
      if (c == '"') {
        ++p_;
        return;
      }
      if (c == '\\') {
        escape(out);
        continue;
      }
      if (uint8_t(c) < 0x20) fail(p_, "control character in a string (write it as \\u00XX)");
      int n = utf8_sequence(p_, e_);
      if (n == 0) fail(p_, "invalid UTF-8 in a string");
      out.append(p_, size_t(n));
      p_ += n;
    }
  }

  uint32_t hex4() {
    if (e_ - p_ < 4) fail(p_, "expected four hex digits after \\u");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = p_[i];
      int d = is_digit(c) ? c - '0' : (c | 0x20) >= 'a' && (c | 0x20) <= 'f' ? (c | 0x20) - 'a' + 10 : -1;
      if (d < 0) fail(p_ + i, "expected four hex digits after \\u");
      v = v * 16 + uint32_t(d);
    }
    p_ += 4;
    return v;
  }

  void escape(std::string& out) {
    ++p_;  // the backslash
    if (p_ >= e_) fail(p_, "unterminated escape");
    char c = *p_++;
    switch (c) {
      case '"': out.push_back('"'); return;
      case '\\': out.push_back('\\'); return;
      case '/': out.push_back('/'); return;
      case 'b': out.push_back('\b'); return;
      case 'f': out.push_back('\f'); return;
      case 'n': out.push_back('\n'); return;
      case 'r': out.push_back('\r'); return;
      case 't': out.push_back('\t'); return;
      case 'u': break;
      default: fail(p_ - 1, str("invalid escape '\\", c, "'"));
    }
    uint32_t cp = hex4();
    if (cp >= 0xD800 && cp <= 0xDBFF && e_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
      const char* save = p_;
      p_ += 2;
      uint32_t lo = hex4();
      if (lo >= 0xDC00 && lo <= 0xDFFF) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
      else p_ = save;  // a lone high surrogate, then another escape
    }
    append_utf8(out, cp);
  }

  // ---- numbers -----------------------------------------------------------------------------
  // An integer literal within int64 (in i), a float (in d), or an integer literal beyond int64
  // (in d, as the nearest double).
  enum class Num { Int, Float, BigInt };

  // Parses the number at p_.
  Num number(int64_t& i, double& d) {
    const char* s = p_;
    bool neg = *s == '-';
    const char* t = s + (neg ? 1 : 0);
    if (t < e_ && *t == 'I' && e_ - t >= 8 && std::memcmp(t, "Infinity", 8) == 0) {
      d = neg ? -HUGE_VAL : HUGE_VAL;
      p_ = t + 8;
      return Num::Float;
    }
    if (!neg && e_ - t >= 3 && std::memcmp(t, "NaN", 3) == 0) {
      d = std::nan("");
      p_ = t + 3;
      return Num::Float;
    }
    if (t >= e_ || !is_digit(*t)) fail(p_, "expected a value (string, number, true, false, null or a list)");
    bool integral = true;
    const char* end = number_end(&integral);
    auto r = std::from_chars(s, end, i);
    if (r.ec == std::errc() && integral) {
      p_ = end;
      return Num::Int;
    }
    parse_double(d, end);
    return r.ec == std::errc::result_out_of_range && integral ? Num::BigInt : Num::Float;
  }

  // The end of the number at p_ under JSON's grammar (RFC 8259):
  // -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?. Anything else fails at the byte that breaks it:
  // JSON has no 01, 2. or 2.e3, which std::from_chars alone would read. *integral: no fraction and
  // no exponent.
  const char* number_end(bool* integral = nullptr) {
    const char* t = p_;
    if (t < e_ && *t == '-') ++t;
    if (t >= e_ || !is_digit(*t)) fail(p_, "expected a number");
    if (*t == '0' && t + 1 < e_ && is_digit(t[1]))
      fail(t, "a number with a leading zero, which JSON does not allow (write 1, not 01)");
    while (t < e_ && is_digit(*t)) ++t;
    if (integral != nullptr) *integral = t >= e_ || (*t != '.' && *t != 'e' && *t != 'E');
    if (t < e_ && *t == '.') {
      if (++t >= e_ || !is_digit(*t)) fail(t, "expected a digit after the decimal point (JSON has no 2.: write 2.0)");
      while (t < e_ && is_digit(*t)) ++t;
    }
    if (t < e_ && (*t == 'e' || *t == 'E')) {
      if (++t < e_ && (*t == '+' || *t == '-')) ++t;
      if (t >= e_ || !is_digit(*t)) fail(t, "expected a digit in the number's exponent");
      while (t < e_ && is_digit(*t)) ++t;
    }
    return t;
  }

  // The number at p_ as a double, scanned once: what does not read as JSON there (a leading zero,
  // "2.", an exponent without digits: a digit, point or exponent marker right after what was
  // read) goes through number_end() for its error.
  double fast_double() {
    data::Decimal dec;
    const char* end = scan_number(dec);
    double d;
    if (!end) {
      parse_double(d, number_end());
      return d;
    }
    d = data::decimal_to_double(dec, p_, end);
    p_ = end;
    return d;
  }

  // The end of the number at p_ as scan_decimal reads it into dec, or null where it may not
  // read as JSON there (the caller then asks number_end()).
  [[gnu::always_inline]] const char* scan_number(data::Decimal& dec) {
    const char* end = data::scan_decimal(p_, e_, dec, /*bare_point=*/false);
    const char* first = p_ + (*p_ == '-');
    const bool suspect = end == p_ || (end < e_ && (is_digit(*end) || *end == '.' || *end == 'e' || *end == 'E')) ||
                         (*first == '0' && first + 1 < end && is_digit(first[1]));
    return suspect ? nullptr : end;
  }

  // A number of a column not asked for: its grammar checked, its value not worked out.
  void skip_number() {
    const char* t = p_ + (*p_ == '-');
    if (t < e_ && (*t == 'I' || *t == 'N')) {  // Infinity and NaN, or the error for what is neither
      int64_t i;
      double d;
      number(i, d);
      return;
    }
    data::Decimal dec;
    const char* end = scan_number(dec);
    p_ = end ? end : number_end();
  }

  // The double of the number at p_, which ends at end (number_end()): the nearest one;
  // overflow gives ±inf and underflow ±0, as float() does.
  void parse_double(double& d, const char* end) {
    if (!data::parse_double(p_, end, d, /*bare_point=*/false)) fail(p_, "expected a number");
    p_ = end;
  }

  // ---- values ------------------------------------------------------------------------------
  void conflict(ColumnBuilder& b, Kind got, bool list) {
    fail(p_,
         str("column '", b.name(), "' holds ", kind_name(b.kind(), b.is_list()), " in earlier lines but this line has ",
             kind_name(got, list), "; fix the file or leave the column out with columns="),
         true);
  }

  // Makes b ready for a value of kind k (numbers widen Int → Float).
  void want(ColumnBuilder& b, Kind k, bool list) {
    if (b.kind() == Kind::Null) return b.set_kind(k, list, line_);
    if (b.is_list() != list) conflict(b, k, list);
    if (b.kind() == k) return;
    if (b.kind() == Kind::Int && k == Kind::Float) return b.promote_to_float();
    if (b.kind() == Kind::Float && k == Kind::Int) return;
    conflict(b, k, list);
  }

  void push_number(ColumnBuilder& b, bool list) {
    int64_t i = 0;
    double d = 0;
    if (const IntRange* r = b.int_range()) {  // dtypes= asks for int32/int64: integers that fit
      const char* s = p_;
      Num n = number(i, d);
      std::string_view text(s, size_t(p_ - s));
      if (n == Num::Float) fail(s, not_an_integer(b.name(), text, *r), true);
      if (n == Num::BigInt || i < r->lo || i > r->hi) fail(s, out_of_range(b.name(), text, *r), true);
      want(b, Kind::Int, list);
      return b.push_int(i);
    }
    if (b.kind() == Kind::Float && *p_ != 'N' && *p_ != 'I' && !(*p_ == '-' && p_ + 1 < e_ && p_[1] == 'I')) {
      if (!is_digit(*p_) && *p_ != '-') fail(p_, "expected a number");
      return b.push_float(fast_double());
    }
    if (number(i, d) == Num::Int) {
      want(b, Kind::Int, list);
      if (b.kind() == Kind::Float) b.push_float(double(i));
      else b.push_int(i);
    } else {
      want(b, Kind::Float, list);
      b.push_float(d);
    }
  }

  void literal(const char* word, size_t n) {
    if (size_t(e_ - p_) < n || std::memcmp(p_, word, n) != 0) fail(p_, "expected a value");
    p_ += n;
  }

  void value(int col) {
    ColumnBuilder& b = cols_[size_t(col)];
    if (b.touched(row_)) b.rollback();  // a duplicate key: the last value wins, as in json.loads
    else touched_.push_back(col);
    b.begin_row(row_);
    expect_more("a value");
    switch (*p_) {
      case '"':
        want(b, Kind::String, false);
        string_into(b.chars());
        b.end_string();
        b.end_value(0);
        return;
      case 't':
      case 'f': {
        bool v = *p_ == 't';
        literal(v ? "true" : "false", v ? 4 : 5);
        want(b, Kind::Bool, false);
        b.push_bool(v);
        b.end_value(0);
        return;
      }
      case 'n':
        literal("null", 4);
        b.push_missing();
        return;
      case '[': return list(b);
      case '{':
        fail(p_, str("column '", b.name(),
                     "' holds a nested object, which is not converted; "
                     "leave it out with columns="));
      default: push_number(b, false); b.end_value(0);
    }
  }

  void list(ColumnBuilder& b) {
    ++p_;
    ws();
    if (b.kind() == Kind::Null) b.set_kind(Kind::Int, true, line_);
    else if (!b.is_list()) conflict(b, Kind::Float, true);
    int64_t n = 0;
    expect_more("a number or ']'");
    if (*p_ == ']') {
      ++p_;
    } else {
      for (;;) {
        expect_more("a number");
        char c = *p_;
        if (!(is_digit(c) || c == '-' || c == 'N' || c == 'I'))
          fail(p_, str("column '", b.name(),
                       "': expected a number in the list (only lists of "
                       "numbers are converted; leave it out with columns=)"));
        push_number(b, true);
        ++n;
        ws();
        expect_more("',' or ']'");
        if (*p_ == ',') {
          ++p_;
          ws();
          continue;
        }
        if (*p_ == ']') {
          ++p_;
          break;
        }
        fail(p_, "expected ',' or ']' in a list");
      }
    }
    if (!b.end_value(n))
      fail(p_,
           str("column '", b.name(), "' holds lists of length ", b.width(), " but this list has ", n,
               " values (lists become 2-D arrays, so every row needs the same length)"),
           true);
  }

  // Validates and skips a value of a column that was not asked for.
  void skip_value(int depth) {
    if (depth > 64) fail(p_, "nesting deeper than 64 levels");
    expect_more("a value");
    char c = *p_;
    if (c == '"') {
      tmp_.clear();
      return string_into(tmp_);
    }
    if (c == 't') return literal("true", 4);
    if (c == 'f') return literal("false", 5);
    if (c == 'n') return literal("null", 4);
    if (c == '[' || c == '{') {
      char close = c == '[' ? ']' : '}';
      ++p_;
      ws();
      expect_more("a value");
      if (*p_ == close) {
        ++p_;
        return;
      }
      for (;;) {
        if (close == '}') {
          expect_more("'\"' to start a key");
          if (*p_ != '"') fail(p_, "expected '\"' to start a key");
          tmp_.clear();
          string_into(tmp_);
          ws();
          if (p_ >= e_ || *p_ != ':') fail(p_, "expected ':' after the key");
          ++p_;
          ws();
        }
        skip_value(depth + 1);
        ws();
        expect_more(close == '}' ? "',' or '}'" : "',' or ']'");
        if (*p_ == ',') {
          ++p_;
          ws();
          continue;
        }
        if (*p_ == close) {
          ++p_;
          return;
        }
        fail(p_, close == '}' ? "expected ',' or '}'" : "expected ',' or ']'");
      }
    }
    skip_number();
  }

  const char* data_;
  int64_t byte_base_;
  const ReadOptions& opt_;
  RangeResult& out_;
  std::vector<ColumnBuilder>& cols_;
  std::unordered_map<std::string, int> index_;     // key → column (-1: not asked for)
  std::vector<std::pair<std::string, int>> pred_;  // keys of the previous line, in order
  size_t pred_pos_ = 0;
  std::vector<int> touched_;
  std::string tmp_;
  const char* p_ = nullptr;
  const char* e_ = nullptr;
  int64_t line_ = 0, row_ = 0;
};

}  // namespace

Table parse_jsonl_lines(const char* data, size_t begin, size_t size, const ReadOptions& opt, int64_t line_base,
                        int64_t byte_base) {
  auto ranges = split_lines(data, begin, size, range_count(size - begin, opt.threads));
  std::vector<RangeResult> results(ranges.size());
  parse_ranges(int64_t(ranges.size()), opt.threads, [&](int64_t i) {
    RangeParser parser(data, byte_base, opt, results[size_t(i)]);
    parser.run(data + ranges[size_t(i)].first, data + ranges[size_t(i)].second);
  });
  Table t = stitch(results, opt, line_base);
  t.stats.bytes = int64_t(size);
  return t;
}

Table parse_jsonl(const char* data, size_t size, const ReadOptions& opt) {
  return parse_jsonl_lines(data, utf8_bom(data, size), size, opt, 0, 0);
}

Table read_jsonl(const std::string& path, const ReadOptions& opt) {
  Source src = Source::map_file(path);
  return parse_jsonl(src.data(), src.size(), opt);
}

}  // namespace nexus::data
