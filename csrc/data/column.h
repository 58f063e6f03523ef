// Columns for the text parsers (JSONL, CSV). A range of lines is parsed into ColumnBuilders, one
// per column, whose kind is inferred as values arrive (Null → Bool | Int → Float | String) and
// which remember the rows that had no value. stitch() merges the builders of every range, in file
// order, into a Table of final Columns: one contiguous buffer each, ready to hand to numpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/allocator.h"

namespace nexus::data {

// The dtype of a finished column. String columns keep UTF-8 bytes plus offsets; `valid` marks
// the rows that have a value (empty vector: all rows do).
enum class DType : uint8_t { Bool, Int32, Int64, Float32, Float64, String };
const char* dtype_name(DType d);
DType dtype_from_name(const std::string& name);  // "float32", "str", ... ; ValueError otherwise

// An uninitialised buffer from the host allocator (huge pages from 4 MiB, reused by size class)
// whose ownership moves to numpy without a copy.
struct BlockRelease {
  size_t capacity = 0;
  void operator()(std::byte* p) const noexcept { alloc::release({p, capacity}); }
};
struct Buffer {
  std::unique_ptr<std::byte, BlockRelease> data;
  size_t bytes = 0;
  static Buffer allocate(size_t bytes);
  template <class T> T* as() { return reinterpret_cast<T*>(data.get()); }
};

struct Column {
  std::string name;
  DType dtype = DType::Float64;
  int64_t rows = 0;
  int64_t width = -1;            // -1: one value per row (1-D); w >= 0: lists of w values (2-D)
  Buffer values;                 // numeric dtypes: rows * max(width, 1) elements
  std::string chars;             // String: the UTF-8 bytes of every row, back to back
  std::vector<int64_t> offsets;  // String: rows + 1 offsets into chars
  std::vector<uint8_t> valid;    // String: 1 where the row has a value; empty when all do
};

struct Stats {
  int64_t rows = 0;
  int64_t lines = 0;                   // physical lines read (blank and skipped ones included)
  int64_t skipped = 0;                 // malformed lines skipped under on_error="skip"
  std::vector<int64_t> skipped_lines;  // their 1-based line numbers, the first kMaxSkippedLines
  int64_t bytes = 0;
};
inline constexpr size_t kMaxSkippedLines = 100;

struct Table {
  std::vector<Column> columns;
  Stats stats;
};

// What the caller asked for, shared by the JSONL and CSV readers.
struct ReadOptions {
  std::vector<std::string> columns;                     // empty: every column, in file order
  std::unordered_map<std::string, std::string> dtypes;  // per-column override by dtype name
  bool skip_errors = false;                             // on_error="skip"
  int threads = 0;                                      // 0: the pool's size
  bool require_columns = true;                          // a name in `columns` that no line has is an error
};

// The range of an integer dtype that dtypes= pins a column to. The parsers check every integer
// of such a column where they read it, so that a value the dtype cannot hold raises naming its
// line (never wraps when int64 values are narrowed, never becomes a float).
struct IntRange {
  const char* dtype;
  int64_t lo, hi;
};
// The range for `column` (nullptr when dtypes= does not ask for int32 or int64).
const IntRange* pinned_int_range(const ReadOptions& opt, const std::string& column);
// "column 'a': 3000000000 does not fit in int32 (-2147483648 to 2147483647)"
std::string out_of_range(const std::string& column, std::string_view text, const IntRange& r);
// "column 'a': 1.5 is not an integer (dtypes= asks for int32)"
std::string not_an_integer(const std::string& column, std::string_view text, const IntRange& r);

// Every key of opt.dtypes must be one of `names` (the columns read): ValueError naming the first
// other one (in sorted order), "dtypes= names column 'x', which <absent>; columns: a, b".
void check_dtype_keys(const ReadOptions& opt, const std::vector<std::string>& names, const char* absent);

enum class Kind : uint8_t { Null, Bool, Int, Float, String };
const char* kind_name(Kind k, bool list);

// A builder's values: megabytes per column of a large file, so from the host allocator's cache
// (huge pages, reused from one read to the next) rather than faulted in 4 KiB at a time.
template <class T> using Values = std::vector<T, alloc::CachedAllocator<T>>;

// One column of one range. Every row of the range has exactly one entry (a value or a
// placeholder for a missing row), so rows == number of rows parsed so far once a row ends.
class ColumnBuilder {
 public:
  explicit ColumnBuilder(std::string name, const IntRange* int_range = nullptr)
      : name_(std::move(name)), int_range_(int_range) {}

  const std::string& name() const { return name_; }
  Kind kind() const { return kind_; }
  int64_t width() const { return width_; }  // -1 scalar (or not yet known)
  bool is_list() const { return list_; }
  int64_t rows() const { return rows_; }
  int64_t first_line() const { return first_line_; }
  const IntRange* int_range() const { return int_range_; }  // dtypes= pins it to int32/int64

  // Called once per row before the first value of this row: remembers the sizes so a malformed
  // line (or a duplicate key) can be rolled back.
  void begin_row(int64_t row) {  // inline: once per value of every row
    touched_row_ = row;
    saved_ = {kind_, list_, width_, rows_, active_size(), chars_.size(), ends_.size(), missing_.size()};
  }
  void rollback();
  bool touched(int64_t row) const { return touched_row_ == row; }

  // Kind changes. set_kind() fixes the kind of a Null column (backfilling placeholders for the
  // rows before it); promote_to_float() converts Int values in place.
  void set_kind(Kind k, bool list, int64_t line);
  void promote_to_float();

  void push_int(int64_t v) { ints_.push_back(v); }
  void push_float(double v) { floats_.push_back(v); }
  void push_bool(bool v) { bools_.push_back(v ? 1 : 0); }
  std::string& chars() { return chars_; }
  void end_string() { ends_.push_back(int64_t(chars_.size())); }
  int64_t list_values() const;  // numeric values held (for list length checks)
  // Ends a value of this row; a list's width is fixed by its first value (returns false when a
  // later list has another length). Inline for a scalar with nothing to backfill: once per value.
  bool end_value(int64_t list_len) {
    if (list_ || backfill_ > 0) return end_value_slow(list_len);
    ++rows_;
    return true;
  }
  void push_missing();  // this row has no value (absent key or null)

  // Merged view, used by stitch().
  const Values<int64_t>& ints() const { return ints_; }
  const Values<double>& floats() const { return floats_; }
  const Values<uint8_t>& bools() const { return bools_; }
  const std::string& string_chars() const { return chars_; }
  const Values<int64_t>& ends() const { return ends_; }
  const std::vector<int64_t>& missing() const { return missing_; }
  // Room for `rows` rows in all, strings as long as the ones so far on average.
  void reserve(size_t rows);

 private:
  void push_placeholders(int64_t n);
  bool end_value_slow(int64_t list_len);
  size_t active_size() const {
    switch (kind_) {
      case Kind::Int: return ints_.size();
      case Kind::Float: return floats_.size();
      case Kind::Bool: return bools_.size();
      default: return 0;
    }
  }

  std::string name_;
  const IntRange* int_range_ = nullptr;
  Kind kind_ = Kind::Null;
  bool list_ = false;
  int64_t width_ = -1;
  int64_t rows_ = 0;
  int64_t first_line_ = -1;  // chunk-local 0-based line where the kind was set
  int64_t backfill_ = 0;     // missing rows before the first value, placed by end_value()
  Values<int64_t> ints_;
  Values<double> floats_;
  Values<uint8_t> bools_;
  std::string chars_;
  Values<int64_t> ends_;
  std::vector<int64_t> missing_;
  // sizes at begin_row(), for rollback()
  int64_t touched_row_ = -1;
  struct Saved {
    Kind kind;
    bool list;
    int64_t width, rows;
    size_t values, chars, ends, missing;
  } saved_{};
};

// The rows a range's builders reserve for, after its first row and again after kReserveSample
// rows (`rows` rows in `bytes` of the range's `range_bytes`): their share of the range, with an
// eighth to spare (a builder that outgrows its reserve copies everything read so far, and one
// row's length can misjudge a range by 10 %).
inline constexpr int64_t kReserveSample = 32;
inline size_t expected_rows(size_t range_bytes, size_t bytes, int64_t rows) {
  return size_t(double(range_bytes) / double(bytes) * double(rows) * 1.125) + 16;
}

// A parse error at a position: the line is 0-based and local to its range until stitched.
struct LineError {
  int64_t line = 0;
  int64_t byte = 0;
  std::string what;
};

// The columns and counts of one range of lines.
struct RangeResult {
  std::vector<ColumnBuilder> columns;
  int64_t rows = 0, lines = 0, skipped = 0;
  std::vector<int64_t> skipped_lines;  // local 0-based
  bool failed = false;                 // stopped at `error` (raise mode, or a schema conflict)
  LineError error;
  int column(const std::string& name) const;  // index or -1
};

// Merges ranges (in file order) into final columns; `line_base` is the number of lines before the
// first range (streaming). Throws ValueError for the first failed range or a schema conflict.
Table stitch(std::vector<RangeResult>& ranges, const ReadOptions& opt, int64_t line_base);

// Throws the ValueError for a failed range: "line L, byte B: what".
[[noreturn]] void throw_line_error(const LineError& e, int64_t line_base);

}  // namespace nexus::data
