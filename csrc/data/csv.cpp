#include "data/csv.h"

#include <algorithm>
#include <charconv>
#include <cstring>
#include <string_view>

#include "base/error.h"
#include "base/thread_pool.h"
#include "data/float_parse.h"
#include "data/source.h"

namespace nexus::data {

bool is_missing_text(const char* p, size_t n) {
  static constexpr std::string_view kMissing[] = {"",    "NA",   "N/A",  "n/a",  "NULL", "null", "NaN",
                                                  "nan", "-NaN", "-nan", "None", "<NA>", "#N/A"};
  std::string_view s(p, n);
  for (auto m : kMissing)
    if (s == m) return true;
  return false;
}

namespace {

struct Fail {
  const char* at;
  std::string what;
  bool fatal = false;  // about the dtype asked for, not the line: raised even under "skip"
};

inline bool is_line_end(char c) { return c == '\n' || c == '\r'; }

// Past the line end at p ("\n", "\r\n" or a lone "\r", as pandas reads them).
inline const char* after_line_end(const char* p, const char* end) {
  if (p < end && *p == '\r') ++p;
  else if (p < end && *p == '\n') return p + 1;
  else return p;
  return p < end && *p == '\n' ? p + 1 : p;
}

// The first delimiter or line end in [p, end), or end: eight bytes at a time (a column that is not
// asked for, or a text field without quotes, is only looked through for its end).
const char* field_end(const char* p, const char* end, char delimiter) {
  constexpr uint64_t kOnes = 0x0101010101010101, kHighs = 0x8080808080808080;
  const auto zero_bytes = [](uint64_t x) { return (x - kOnes) & ~x & kHighs; };  // the lowest is exact
  const uint64_t delims = kOnes * uint8_t(delimiter);
  for (; end - p >= 8; p += 8) {
    const uint64_t v = detail::load8(p);
    const uint64_t stop = zero_bytes(v ^ delims) | zero_bytes(v ^ (kOnes * '\n')) | zero_bytes(v ^ (kOnes * '\r'));
    if (stop) return p + __builtin_ctzll(stop) / 8;
  }
  while (p < end && *p != delimiter && !is_line_end(*p)) ++p;
  return p;
}

// The number of line ends in [p, end) (a "\r\n" is one).
int64_t count_line_ends(const char* p, const char* end) {
  int64_t n = 0;
  for (; p < end; ++p) n += *p == '\n' || (*p == '\r' && (p + 1 == end || p[1] != '\n'));
  return n;
}

// An optional sign and digits: an integer, however large.
bool integer_text(std::string_view s) {
  size_t k = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  if (k == s.size()) return false;
  for (; k < s.size(); ++k)
    if (s[k] < '0' || s[k] > '9') return false;
  return true;
}

// The layout every range shares: the field → column map and forced string columns.
struct Layout {
  size_t fields = 0;
  std::vector<int> column_of;      // field index → builder index, -1 when not asked for
  std::vector<uint8_t> as_string;  // per builder: dtypes said "str"
  std::vector<std::string> names;  // per builder
};

bool parse_bool(std::string_view s, bool& v) {
  if (s == "true" || s == "True" || s == "TRUE") return v = true, true;
  if (s == "false" || s == "False" || s == "FALSE") return v = false, true;
  return false;
}

template <class T> bool parse_whole(std::string_view s, T& v) {
  const char* b = s.data();
  const char* e = b + s.size();
  if (b < e && *b == '+' && ++b < e && *b == '-') return false;  // from_chars takes no '+'; "+-1" is text
  if (b == e || !(*b == '-' || *b == '.' || (*b >= '0' && *b <= '9') || (*b | 0x20) == 'i')) return false;
  if constexpr (std::is_same_v<T, double>) {  // digits: ours; inf and nan: from_chars's spellings
    const char* digits = b + (*b == '-');
    if (digits < e && (*digits == '.' || (*digits >= '0' && *digits <= '9'))) return data::parse_double(b, e, v);
  }
  auto r = std::from_chars(b, e, v);
  if (r.ec == std::errc::result_out_of_range && std::is_floating_point_v<T>) {
    v = T(std::strtod(std::string(b, e).c_str(), nullptr));
    return r.ptr == e;
  }
  return r.ec == std::errc() && r.ptr == e;
}

class RangeParser {
 public:
  RangeParser(const char* data, const ReadOptions& opt, const CsvOptions& csv, const Layout& lay, RangeResult& out,
              std::vector<uint8_t>& mixed)
      : data_(data), opt_(opt), csv_(csv), lay_(lay), out_(out), mixed_(mixed) {
    for (const auto& n : lay.names) out_.columns.emplace_back(n, pinned_int_range(opt, n));
  }

  void run(const char* p, const char* end) {
    e_ = end;
    const char* first = p;
    while (p < end) {
      p_ = p;
      int64_t start_line = line_;
      done_ = false;
      try {
        record();
      } catch (Fail& f) {
        for (auto& c : out_.columns)
          if (c.touched(row_)) c.rollback();
        if (!opt_.skip_errors || f.fatal) {
          out_.failed = true;
          out_.error = {start_line, f.at - data_, std::move(f.what)};
          return;
        }
        ++out_.skipped;
        if (out_.skipped_lines.size() < kMaxSkippedLines) out_.skipped_lines.push_back(start_line);
        if (!done_) skip_record();  // resynchronise at the next line end outside quotes
      }
      p = p_;
      if ((row_ == 1 || row_ == kReserveSample) && p > first)
        for (auto& c : out_.columns) c.reserve(expected_rows(size_t(end - first), size_t(p - first), row_));
    }
    out_.rows = row_;
    out_.lines = line_;
  }

 private:
  [[noreturn]] void fail(const char* at, std::string what, bool fatal = false) {
    throw Fail{at, std::move(what), fatal};
  }

  void skip_record() {
    bool inside = false;
    while (p_ < e_) {
      if (is_line_end(*p_)) {
        p_ = after_line_end(p_, e_);
        ++line_;
        if (!inside) return;
        continue;
      }
      if (*p_++ == csv_.quote) inside = !inside;
    }
  }

  // One record from p_, leaving p_ after its line end.
  void record() {
    const char* start = p_;
    if (p_ < e_ && is_line_end(*p_)) {  // blank line
      p_ = after_line_end(p_, e_);
      ++line_;
      return;
    }
    size_t field = 0;
    for (;;) {
      std::string_view text;
      field_ = p_;
      const int col = field < lay_.fields ? lay_.column_of[field] : -1;
      if (col >= 0 && number_in_place(out_.columns[size_t(col)], size_t(col))) {
        ++field;
        if (p_ < e_ && *p_ == csv_.delimiter) {
          ++p_;
          continue;
        }
        break;
      }
      bool quoted = p_ < e_ && *p_ == csv_.quote;
      if (quoted) text = quoted_field();
      else text = plain_field();
      if (field < lay_.fields && lay_.column_of[field] >= 0)
        convert(out_.columns[size_t(lay_.column_of[field])], text, size_t(lay_.column_of[field]));
      ++field;
      if (p_ < e_ && *p_ == csv_.delimiter) {
        ++p_;
        continue;
      }
      break;  // at a line end or the end of the range
    }
    p_ = after_line_end(p_, e_);
    ++line_;
    done_ = true;
    if (field != lay_.fields) fail(start, str("expected ", lay_.fields, " fields, got ", field));
    ++row_;
  }

  // A float or integer column's field read where it stands, in one pass: true (p_ past it) when
  // the whole field is one number of the column's kind; false, with nothing read, for everything
  // else (quotes, missing values, a kind change), which takes the general path.
  bool number_in_place(ColumnBuilder& b, size_t col) {
    const Kind k = b.kind();
    if ((k != Kind::Float && k != Kind::Int) || lay_.as_string[col] || b.int_range() != nullptr) return false;
    const auto field_ends = [&](const char* q) { return q == e_ || *q == csv_.delimiter || is_line_end(*q); };
    if (k == Kind::Int) {
      int64_t i;
      const auto r = std::from_chars(p_, e_, i);
      if (r.ec != std::errc() || r.ptr == p_ || !field_ends(r.ptr)) return false;
      b.begin_row(row_);
      b.push_int(i);
      b.end_value(0);
      p_ = r.ptr;
      return true;
    }
    data::Decimal dec;
    const char* end = data::scan_decimal(p_, e_, dec, /*bare_point=*/true);
    if (end == p_ || !field_ends(end)) return false;
    b.begin_row(row_);
    b.push_float(data::decimal_to_double(dec, p_, end));
    b.end_value(0);
    p_ = end;
    return true;
  }

  std::string_view plain_field() {
    const char* s = p_;
    p_ = field_end(p_, e_, csv_.delimiter);
    return {s, size_t(p_ - s)};
  }

  std::string_view quoted_field() {
    const char* open = p_++;
    const char* s = p_;
    bool doubled = false;
    for (;;) {
      const char* q = static_cast<const char*>(std::memchr(p_, csv_.quote, size_t(e_ - p_)));
      if (!q) fail(open, "unterminated quoted field");
      line_ += count_line_ends(p_, q);
      p_ = q + 1;
      if (p_ < e_ && *p_ == csv_.quote) {
        doubled = true;
        ++p_;
        continue;
      }
      break;
    }
    std::string_view raw(s, size_t(p_ - 1 - s));
    if (p_ < e_ && *p_ != csv_.delimiter && !is_line_end(*p_))
      fail(p_, "expected a delimiter or the end of the line after a closing quote");
    if (!doubled) return raw;
    tmp_.clear();
    for (size_t i = 0; i < raw.size(); ++i) {
      tmp_.push_back(raw[i]);
      if (raw[i] == csv_.quote) ++i;  // "" → "
    }
    return tmp_;
  }

  void push_string(ColumnBuilder& b, std::string_view s) {
    const char* bad = find_invalid_utf8(s.data(), s.data() + s.size());
    if (bad != s.data() + s.size()) fail(bad, "invalid UTF-8 in a field");
    b.chars().append(s);
    b.end_string();
    b.end_value(0);
  }

  // dtypes= asks for int32/int64: the field must be an integer that fits (or a boolean)
  void check_integer(const ColumnBuilder& b, std::string_view s, const IntRange& r) {
    int64_t i;
    bool v;
    if (parse_whole(s, i) ? i < r.lo || i > r.hi : integer_text(s)) fail(field_, out_of_range(b.name(), s, r), true);
    if (!parse_whole(s, i) && !parse_bool(s, v)) fail(field_, not_an_integer(b.name(), s, r), true);
  }

  void convert(ColumnBuilder& b, std::string_view s, size_t col) {
    b.begin_row(row_);
    if (lay_.as_string[col] || b.kind() == Kind::String) {
      if (b.kind() == Kind::Null) b.set_kind(Kind::String, false, line_);
      if (is_missing_text(s.data(), s.size())) return b.push_missing();
      return push_string(b, s);
    }
    if (is_missing_text(s.data(), s.size())) return b.push_missing();
    if (const IntRange* r = b.int_range()) check_integer(b, s, *r);
    Kind k = b.kind();
    bool v;
    if ((k == Kind::Null || k == Kind::Bool) && parse_bool(s, v)) {
      if (k == Kind::Null) b.set_kind(Kind::Bool, false, line_);
      b.push_bool(v);
      b.end_value(0);
      return;
    }
    int64_t i;
    if ((k == Kind::Null || k == Kind::Int) && parse_whole(s, i)) {
      if (k == Kind::Null) b.set_kind(Kind::Int, false, line_);
      b.push_int(i);
      b.end_value(0);
      return;
    }
    double d;
    if (k != Kind::Bool && parse_whole(s, d)) {
      if (k == Kind::Null) b.set_kind(Kind::Float, false, line_);
      if (k == Kind::Int) b.promote_to_float();
      b.push_float(d);
      b.end_value(0);
      return;
    }
    if (k == Kind::Null) {
      b.set_kind(Kind::String, false, line_);
      return push_string(b, s);
    }
    mixed_[col] = 1;  // text in a typed column: the whole file is read again with it as str
    b.push_missing();
  }

  const char* data_;
  const ReadOptions& opt_;
  const CsvOptions& csv_;
  const Layout& lay_;
  RangeResult& out_;
  std::vector<uint8_t>& mixed_;
  std::string tmp_;
  const char* p_ = nullptr;
  const char* e_ = nullptr;
  const char* field_ = nullptr;  // where the field being converted starts
  int64_t line_ = 0, row_ = 0;
  bool done_ = false;  // the failing record was read to its line end
};

// The number of fields of the record at [p, end) (up to its line end outside quotes).
size_t count_fields(const char* p, const char* end, const CsvOptions& csv) {
  size_t fields = 1;
  bool inside = false;
  for (; p < end && (inside || !is_line_end(*p)); ++p) {
    if (*p == csv.quote) inside = !inside;
    else if (*p == csv.delimiter && !inside) ++fields;
  }
  return fields;
}

// The header (or the given names) and what each field maps to, for the text at [start, size)
// (start skips a byte order mark). Returns the offset after the header line (start if none).
size_t read_header(const char* data, size_t start, size_t size, const ReadOptions& opt, const CsvOptions& csv,
                   Layout& lay, std::vector<std::string>& all) {
  size_t body = start;
  if (csv.header && start < size) {
    ReadOptions hopt;
    hopt.skip_errors = false;
    Layout hl;
    const char* nl = data + start;
    bool inside = false;
    while (nl < data + size && (inside || !is_line_end(*nl))) inside ^= (*nl++ == csv.quote);
    body = size_t(after_line_end(nl, data + size) - data);
    // parse the header line as one all-string record with as many fields as it has
    size_t fields = count_fields(data + start, nl, csv);
    hl.fields = fields;
    for (size_t f = 0; f < fields; ++f) {
      hl.column_of.push_back(int(f));
      hl.as_string.push_back(1);
      hl.names.push_back(std::to_string(f));
    }
    RangeResult r;
    std::vector<uint8_t> mixed(fields, 0);
    RangeParser(data, hopt, csv, hl, r, mixed).run(data + start, data + body);
    if (r.failed) throw_line_error(r.error, 0);
    for (auto& c : r.columns) all.emplace_back(c.string_chars());  // one row each
  }
  if (!csv.names.empty()) all = csv.names;
  if (all.empty() && !csv.header && start < size) {
    // no header and no names: count the fields of the first line
    size_t fields = count_fields(data + start, data + size, csv);
    for (size_t f = 0; f < fields; ++f) all.push_back(str("column_", f));
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].empty()) all[i] = str("column_", i);
    for (size_t j = 0; j < i; ++j)
      NX_CHECK(all[i] != all[j], "read_csv: the header names column '", all[i], "' twice; pass names= to rename");
  }
  lay.fields = all.size();
  lay.column_of.assign(all.size(), -1);
  std::vector<std::string> want = opt.columns.empty() ? all : opt.columns;
  for (const auto& w : want) {
    auto it = std::find(all.begin(), all.end(), w);
    NX_CHECK(it != all.end(), "read_csv: column '", w, "' is not in the header");
    lay.column_of[size_t(it - all.begin())] = int(lay.names.size());
    lay.names.push_back(w);
    auto d = opt.dtypes.find(w);
    lay.as_string.push_back(d != opt.dtypes.end() && dtype_from_name(d->second) == DType::String);
  }
  check_dtype_keys(opt, all, "is not a column of the file");
  return body;
}

}  // namespace

Table parse_csv(const char* data, size_t size, const ReadOptions& opt, const CsvOptions& csv) {
  NX_CHECK(csv.delimiter != csv.quote && !is_line_end(csv.delimiter) && !is_line_end(csv.quote),
           "read_csv: the delimiter and quote character must differ and be neither '\\n' nor "
           "'\\r' (which end lines)");
  Layout lay;
  std::vector<std::string> all;
  size_t start = utf8_bom(data, size);
  size_t body = read_header(data, start, size, opt, csv, lay, all);
  int64_t header_lines = body > start ? 1 : 0;
  ReadOptions sopt = opt;
  sopt.columns = lay.names;
  sopt.require_columns = false;
  auto ranges = split_lines(data, body, size, range_count(size - body, opt.threads), csv.quote);
  for (;;) {
    std::vector<RangeResult> results(ranges.size());
    std::vector<std::vector<uint8_t>> mixed(ranges.size(), std::vector<uint8_t>(lay.names.size()));
    parse_ranges(int64_t(ranges.size()), opt.threads, [&](int64_t i) {
      RangeParser p(data, sopt, csv, lay, results[size_t(i)], mixed[size_t(i)]);
      p.run(data + ranges[size_t(i)].first, data + ranges[size_t(i)].second);
    });
    // a column with text somewhere and numbers or booleans elsewhere is read again as str
    bool again = false;
    for (size_t c = 0; c < lay.names.size(); ++c) {
      bool text = false, typed = false, boolean = false, number = false;
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].failed) continue;
        Kind k = results[i].columns[c].kind();
        text |= k == Kind::String || mixed[i][c];
        typed |= k == Kind::Bool || k == Kind::Int || k == Kind::Float;
        boolean |= k == Kind::Bool;
        number |= k == Kind::Int || k == Kind::Float;
      }
      if (!lay.as_string[c] && ((text && typed) || (boolean && number))) {
        lay.as_string[c] = 1;
        again = true;
      }
    }
    if (again) continue;
    Table t = stitch(results, sopt, header_lines);
    t.stats.lines += header_lines;
    t.stats.bytes = int64_t(size);
    return t;
  }
}

Table read_csv(const std::string& path, const ReadOptions& opt, const CsvOptions& csv) {
  Source src = Source::map_file(path);
  return parse_csv(src.data(), src.size(), opt, csv);
}

}  // namespace nexus::data
