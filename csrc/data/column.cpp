#include "data/column.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/error.h"
#include "base/thread_pool.h"
#include "tensor/shape.h"

namespace nexus::data {

const char* dtype_name(DType d) {
  switch (d) {
    case DType::Bool: return "bool";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::String: return "str";
  }
  return "?";
}

DType dtype_from_name(const std::string& n) {
  if (n == "bool") return DType::Bool;
  if (n == "int32") return DType::Int32;
  if (n == "int64") return DType::Int64;
  if (n == "float32") return DType::Float32;
  if (n == "float64") return DType::Float64;
  if (n == "str" || n == "string" || n == "object") return DType::String;
  NX_CHECK(false, "dtypes: unknown dtype '", n, "'; valid: bool, int32, int64, float32, float64, str");
  return DType::Float64;
}

const IntRange* pinned_int_range(const ReadOptions& opt, const std::string& column) {
  static constexpr IntRange kInt32{"int32", std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()};
  static constexpr IntRange kInt64{"int64", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  auto it = opt.dtypes.find(column);
  if (it == opt.dtypes.end()) return nullptr;
  DType d = dtype_from_name(it->second);
  return d == DType::Int32 ? &kInt32 : d == DType::Int64 ? &kInt64 : nullptr;
}

std::string out_of_range(const std::string& column, std::string_view text, const IntRange& r) {
  return str("column '", column, "': ", text, " does not fit in ", r.dtype, " (", r.lo, " to ", r.hi,
             "); pass dtypes={'", column, "': ", r.hi == std::numeric_limits<int64_t>::max() ? "'float64'" : "'int64'",
             "}");
}

std::string not_an_integer(const std::string& column, std::string_view text, const IntRange& r) {
  return str("column '", column, "': ", text, " is not an integer (dtypes= asks for ", r.dtype, ")");
}

void check_dtype_keys(const ReadOptions& opt, const std::vector<std::string>& names, const char* absent) {
  std::vector<std::string> keys;
  for (const auto& kv : opt.dtypes)
    if (std::find(names.begin(), names.end(), kv.first) == names.end()) keys.push_back(kv.first);
  if (keys.empty()) return;
  std::sort(keys.begin(), keys.end());
  std::string all;
  for (const auto& n : names) all += (all.empty() ? "" : ", ") + n;
  throw ValueError(
      str("dtypes= names column '", keys[0], "', which ", absent, "; columns: ", all.empty() ? "(none)" : all));
}

const char* kind_name(Kind k, bool list) {
  switch (k) {
    case Kind::Null: return "nulls";
    case Kind::Bool: return list ? "lists of booleans" : "booleans";
    case Kind::Int: return list ? "lists of integers" : "integers";
    case Kind::Float: return list ? "lists of numbers" : "numbers";
    case Kind::String: return list ? "lists of strings" : "strings";
  }
  return "?";
}

Buffer Buffer::allocate(size_t bytes) {
  Buffer b;
  const alloc::Block block = alloc::allocate(std::max<size_t>(bytes, 1));
  b.data = {static_cast<std::byte*>(block.data), BlockRelease{block.capacity}};
  b.bytes = bytes;
  return b;
}

// ---- ColumnBuilder --------------------------------------------------------------------------

int64_t ColumnBuilder::list_values() const { return int64_t(active_size()); }

void ColumnBuilder::reserve(size_t rows) {
  if (kind_ == Kind::Int) ints_.reserve(rows * std::max<int64_t>(width_, 1));
  if (kind_ == Kind::Float) floats_.reserve(rows * std::max<int64_t>(width_, 1));
  if (kind_ == Kind::String) {
    ends_.reserve(rows * std::max<int64_t>(width_, 1));
    chars_.reserve(rows * std::max<size_t>(chars_.size() / size_t(std::max<int64_t>(rows_, 1)), 1));
  }
}

void ColumnBuilder::rollback() {
  touched_row_ = -1;
  rows_ = saved_.rows;
  missing_.resize(saved_.missing);
  if (saved_.kind == Kind::Null) {  // the kind was set by the rolled-back row: forget it
    kind_ = Kind::Null;
    list_ = false;
    width_ = -1;
    first_line_ = -1;
    backfill_ = 0;
    ints_.clear(), floats_.clear(), bools_.clear(), chars_.clear(), ends_.clear();
    return;
  }
  // An Int column promoted to Float by the rolled-back row stays Float (its values are exact).
  if (kind_ == Kind::Int) ints_.resize(saved_.values);
  if (kind_ == Kind::Float) floats_.resize(saved_.values);
  if (kind_ == Kind::Bool) bools_.resize(saved_.values);
  chars_.resize(saved_.chars);
  ends_.resize(saved_.ends);
  width_ = saved_.width;
}

void ColumnBuilder::push_placeholders(int64_t n) {
  size_t count = size_t(n) * size_t(list_ ? width_ : 1);
  switch (kind_) {
    case Kind::Int: ints_.insert(ints_.end(), count, 0); break;
    case Kind::Float: floats_.insert(floats_.end(), count, std::nan("")); break;
    case Kind::Bool: bools_.insert(bools_.end(), count, 0); break;
    case Kind::String: ends_.insert(ends_.end(), size_t(n), int64_t(chars_.size())); break;
    case Kind::Null: break;
  }
}

void ColumnBuilder::set_kind(Kind k, bool list, int64_t line) {
  kind_ = k;
  list_ = list;
  width_ = -1;
  first_line_ = line;
  backfill_ = rows_;
}

void ColumnBuilder::promote_to_float() {
  floats_.assign(ints_.begin(), ints_.end());
  Values<int64_t>().swap(ints_);
  kind_ = Kind::Float;
}

bool ColumnBuilder::end_value_slow(int64_t list_len) {
  if (list_ && width_ < 0) {
    width_ = list_len;  // the first list of this range fixes the width
  } else if (list_ && list_len != width_) {
    return false;
  }
  if (backfill_ > 0) {
    // The column's first value: the rows before it (all missing) get placeholders in front.
    size_t count = size_t(backfill_) * size_t(list_ ? width_ : 1);
    if (kind_ == Kind::Int) ints_.insert(ints_.begin(), count, 0);
    if (kind_ == Kind::Float) floats_.insert(floats_.begin(), count, std::nan(""));
    if (kind_ == Kind::Bool) bools_.insert(bools_.begin(), count, 0);
    if (kind_ == Kind::String) ends_.insert(ends_.begin(), size_t(backfill_), 0);
    backfill_ = 0;
  }
  ++rows_;
  return true;
}

void ColumnBuilder::push_missing() {
  missing_.push_back(rows_);
  if (kind_ != Kind::Null && (!list_ || width_ >= 0)) push_placeholders(1);
  ++rows_;
}

int RangeResult::column(const std::string& name) const {
  for (size_t i = 0; i < columns.size(); ++i)
    if (columns[i].name() == name) return int(i);
  return -1;
}

[[noreturn]] void throw_line_error(const LineError& e, int64_t line_base) {
  throw ValueError(str("line ", line_base + e.line + 1, ", byte ", e.byte, ": ", e.what));
}

// ---- stitch ---------------------------------------------------------------------------------
namespace {

struct Plan {
  std::string name;
  std::vector<const ColumnBuilder*> parts;  // one per range, nullptr where the range lacks it
  Kind kind = Kind::Null;
  bool list = false;
  int64_t width = -1;
  bool missing = false;
  DType dtype = DType::Float64;
};

template <class T> void fill_numeric(T* out, int64_t w, const ColumnBuilder* b, int64_t rows) {
  size_t n = size_t(rows) * size_t(w);
  if (b && b->kind() != Kind::Null && b->kind() != Kind::String) {
    size_t have = b->kind() == Kind::Int     ? b->ints().size()
                  : b->kind() == Kind::Float ? b->floats().size()
                                             : b->bools().size();
    NX_ASSERT(have == n, "column '", b->name(), "': ", have, " values for ", rows, " rows");
  }
  constexpr bool kFloat = std::is_floating_point_v<T>;
  if (!b || b->kind() == Kind::Null) {
    std::fill(out, out + n, kFloat ? T(std::nan("")) : T(0));
    return;
  }
  if (b->kind() == Kind::Int) std::copy(b->ints().begin(), b->ints().begin() + n, out);
  if (b->kind() == Kind::Float) std::copy(b->floats().begin(), b->floats().begin() + n, out);
  if (b->kind() == Kind::Bool) std::copy(b->bools().begin(), b->bools().begin() + n, out);
  if constexpr (kFloat) {
    for (int64_t r : b->missing()) std::fill(out + r * w, out + (r + 1) * w, T(std::nan("")));
  }
}

void fill_part(Column& c, const Plan& p, size_t part, int64_t row0, int64_t rows, int64_t char0) {
  const ColumnBuilder* b = p.parts[part];
  int64_t w = std::max<int64_t>(c.width, 1);
  if (c.dtype == DType::String) {
    bool has = b && b->kind() == Kind::String;
    NX_ASSERT(!has || int64_t(b->ends().size()) == rows, "column '", c.name, "': string rows");
    if (has) std::memcpy(c.chars.data() + char0, b->string_chars().data(), b->string_chars().size());
    for (int64_t i = 0; i < rows; ++i) c.offsets[row0 + i + 1] = char0 + (has ? b->ends()[i] : 0);
    if (!c.valid.empty()) {
      std::fill(c.valid.begin() + row0, c.valid.begin() + row0 + rows, has ? 1 : 0);
      if (has)
        for (int64_t r : b->missing()) c.valid[row0 + r] = 0;
    }
    return;
  }
  if (c.width == 0) return;
  std::byte* base = c.values.data.get();
  switch (c.dtype) {
    case DType::Bool: fill_numeric(reinterpret_cast<bool*>(base) + row0 * w, w, b, rows); break;
    case DType::Int32: fill_numeric(reinterpret_cast<int32_t*>(base) + row0 * w, w, b, rows); break;
    case DType::Int64: fill_numeric(reinterpret_cast<int64_t*>(base) + row0 * w, w, b, rows); break;
    case DType::Float32: fill_numeric(reinterpret_cast<float*>(base) + row0 * w, w, b, rows); break;
    case DType::Float64: fill_numeric(reinterpret_cast<double*>(base) + row0 * w, w, b, rows); break;
    case DType::String: break;
  }
}

size_t dtype_size(DType d) {
  switch (d) {
    case DType::Bool: return 1;
    case DType::Int32:
    case DType::Float32: return 4;
    default: return 8;
  }
}

DType choose_dtype(const Plan& p, const ReadOptions& opt) {
  DType natural = DType::Float64;
  if (p.kind == Kind::String) natural = DType::String;
  if (p.kind == Kind::Int && !p.missing) natural = DType::Int64;
  if (p.kind == Kind::Bool && !p.missing) natural = DType::Bool;
  auto it = opt.dtypes.find(p.name);
  if (it == opt.dtypes.end()) return natural;
  DType want = dtype_from_name(it->second);
  bool numeric = p.kind != Kind::String;
  bool ok = false;
  if (want == DType::String) ok = p.kind == Kind::String || p.kind == Kind::Null;
  if (want == DType::Float32 || want == DType::Float64) ok = numeric;
  if (want == DType::Int32 || want == DType::Int64) ok = (p.kind == Kind::Int || p.kind == Kind::Bool) && !p.missing;
  if (want == DType::Bool) ok = p.kind == Kind::Bool && !p.missing;
  NX_CHECK(ok, "column '", p.name, "' holds ", kind_name(p.kind, p.list), p.missing ? " with missing values" : "",
           " and cannot be read as ", it->second, "; valid: ", numeric ? "float32, float64" : "str",
           natural == DType::Int64 ? ", int32, int64" : "");
  return want;
}

void merge_part(Plan& p, const ColumnBuilder& b, int64_t line_base) {
  if (!b.missing().empty()) p.missing = true;
  if (b.kind() == Kind::Null) return;
  if (p.kind == Kind::Null) {
    p.kind = b.kind(), p.list = b.is_list(), p.width = b.width();
    return;
  }
  bool numeric = [](Kind a, Kind b) {
    return (a == Kind::Int || a == Kind::Float) && (b == Kind::Int || b == Kind::Float);
  }(p.kind, b.kind());
  NX_CHECK((p.kind == b.kind() || numeric) && p.list == b.is_list(), "line ", line_base + b.first_line() + 1,
           ": column '", p.name, "' holds ", kind_name(b.kind(), b.is_list()), " here but ", kind_name(p.kind, p.list),
           " in earlier lines; pass dtypes= or fix the file");
  NX_CHECK(p.width == b.width(), "line ", line_base + b.first_line() + 1, ": column '", p.name,
           "' holds lists of length ", b.width(), " here but ", p.width, " in earlier lines");
  if (numeric) p.kind = std::max(p.kind, b.kind());
}

}  // namespace

Table stitch(std::vector<RangeResult>& ranges, const ReadOptions& opt, int64_t line_base) {
  std::vector<int64_t> line0(ranges.size()), row0(ranges.size() + 1, 0);
  int64_t lines = line_base;
  for (size_t i = 0; i < ranges.size(); ++i) {
    line0[i] = lines;
    if (ranges[i].failed) throw_line_error(ranges[i].error, lines);
    lines += ranges[i].lines;
    row0[i + 1] = row0[i] + ranges[i].rows;
  }
  int64_t rows = row0.back();

  std::vector<std::string> names = opt.columns;
  if (names.empty())
    for (auto& r : ranges)
      for (auto& b : r.columns)
        if (std::find(names.begin(), names.end(), b.name()) == names.end()) names.push_back(b.name());

  std::vector<Plan> plans(names.size());
  for (size_t c = 0; c < names.size(); ++c) {
    Plan& p = plans[c];
    p.name = names[c];
    bool seen = false;
    for (size_t i = 0; i < ranges.size(); ++i) {
      int k = ranges[i].column(p.name);
      p.parts.push_back(k < 0 ? nullptr : &ranges[i].columns[k]);
      if (k < 0) {
        if (ranges[i].rows > 0) p.missing = true;
        continue;
      }
      seen = true;
      merge_part(p, ranges[i].columns[k], line0[i]);
    }
    NX_CHECK(seen || !opt.require_columns || rows == 0, "column '", p.name, "' was asked for but no line has it");
  }
  if (opt.require_columns && rows > 0) check_dtype_keys(opt, names, "no line has");
  for (Plan& p : plans) {
    if (p.kind == Kind::Null) p.missing = true;
    p.dtype = choose_dtype(p, opt);
  }

  Table t;
  t.columns.resize(plans.size());
  std::vector<std::vector<int64_t>> char0(plans.size());
  for (size_t c = 0; c < plans.size(); ++c) {
    Column& col = t.columns[c];
    col.name = plans[c].name, col.dtype = plans[c].dtype, col.rows = rows;
    col.width = plans[c].list ? plans[c].width : -1;
    if (col.dtype == DType::String) {
      char0[c].assign(ranges.size() + 1, 0);
      for (size_t i = 0; i < ranges.size(); ++i) {
        const ColumnBuilder* b = plans[c].parts[i];
        char0[c][i + 1] = char0[c][i] + (b ? int64_t(b->string_chars().size()) : 0);
      }
      col.chars.resize(size_t(char0[c].back()));
      col.offsets.assign(size_t(rows) + 1, 0);
      if (plans[c].missing) col.valid.assign(size_t(rows), 1);
    } else {
      col.values = Buffer::allocate(
          checked_bytes({rows, std::max<int64_t>(col.width, 1)}, int64_t(dtype_size(col.dtype)), "a column"));
    }
  }
  int64_t parts = int64_t(plans.size() * ranges.size());
  parallel_for(parts, 1, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      size_t c = size_t(k) / ranges.size(), i = size_t(k) % ranges.size();
      fill_part(t.columns[c], plans[c], i, row0[i], ranges[i].rows, char0[c].empty() ? 0 : char0[c][i]);
    }
  });

  t.stats.rows = rows;
  t.stats.lines = lines - line_base;
  for (size_t i = 0; i < ranges.size(); ++i) {
    t.stats.skipped += ranges[i].skipped;
    for (int64_t l : ranges[i].skipped_lines)
      if (t.stats.skipped_lines.size() < kMaxSkippedLines) t.stats.skipped_lines.push_back(line0[i] + l + 1);
  }
  return t;
}

}  // namespace nexus::data
