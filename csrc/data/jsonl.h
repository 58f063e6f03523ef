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

// Streams a file in chunks of at most chunk_rows lines, reading it in blocks (never all of it).
// Line numbers in errors and stats count from the start of the file.
class JsonlReader {
 public:
  JsonlReader(const std::string& path, ReadOptions opt, int64_t chunk_rows);
  ~JsonlReader();
  JsonlReader(const JsonlReader&) = delete;
  JsonlReader& operator=(const JsonlReader&) = delete;
  bool next(Table& out);  // false once the file is exhausted

 private:
  bool fill();  // reads one more block; false at end of file
  int fd_ = -1;
  std::string path_;
  ReadOptions opt_;
  int64_t chunk_rows_;
  std::vector<char> buf_;
  size_t len_ = 0;
  bool eof_ = false;
  int64_t line_base_ = 0, byte_base_ = 0;
};

}  // namespace nexus::data
