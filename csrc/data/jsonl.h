// JSON Lines → columns. One JSON object per line; the file is split into ranges at line ends,
// the ranges are parsed in parallel on the pool and stitched in order (data/column.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/column.h"

namespace nexus::data {

Table read_jsonl(const std::string& path, const ReadOptions& opt);
Table parse_jsonl(const char* data, size_t size, const ReadOptions& opt);
// Parses the lines in [begin, size) of data (begin skips a byte order mark). Line numbers count
// from line_base, byte offsets in errors from data's first byte plus byte_base (streaming).
Table parse_jsonl_lines(const char* data, size_t begin, size_t size, const ReadOptions& opt, int64_t line_base,
                        int64_t byte_base);

// Streams a file in chunks of chunk_rows rows (the last may hold fewer; blank lines do not count,
// lines skipped under on_error="skip" do), reading it in blocks (never all of it). Line numbers
// in errors and stats count from the start of the file. A dtypes= key that no line of the file
// has raises once the file is exhausted.
class JsonlReader {
 public:
  JsonlReader(const std::string& path, ReadOptions opt, int64_t chunk_rows);
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;
  bool next(Table& out);  // false once the file is exhausted

 private:
  bool fill();                                 // reads one more block; false at end of file
  bool blank(size_t begin, size_t end) const;  // buf_[begin, end) is a blank line
  int fd_ = -1;
  std::string path_;
  ReadOptions opt_;
  int64_t chunk_rows_;
  std::vector<char> buf_;
  size_t len_ = 0;
  bool eof_ = false;
  int64_t line_base_ = 0, byte_base_ = 0;
  int64_t rows_ = 0;               // rows returned so far
  std::vector<std::string> seen_;  // the columns of the chunks returned so far
};

}  // namespace nexus::data
