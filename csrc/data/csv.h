// CSV → columns (RFC 4180 quoting: a quoted field may hold the delimiter, "" and newlines).
// Ranges are cut at line ends outside quotes and parsed in parallel, as for JSONL. Each field is a
// bool, an integer, a float or a string, inferred per column; a column that mixes numbers and
// text is read again as strings (the original text, not a re-rendered number).
#pragma once

#include <string>
#include <vector>

#include "data/column.h"

namespace nexus::data {

struct CsvOptions {
  char delimiter = ',';
  char quote = '"';
  bool header = true;              // the first record names the columns
  std::vector<std::string> names;  // overrides the header (or names a headerless file)
};

Table read_csv(const std::string& path, const ReadOptions& opt, const CsvOptions& csv);
Table parse_csv(const char* data, size_t size, const ReadOptions& opt, const CsvOptions& csv);

// True for the texts read as a missing value: "", NA, N/A, n/a, NULL, null, NaN, nan, -NaN,
// -nan, None, <NA>, #N/A (pandas' defaults, less the rare ones).
bool is_missing_text(const char* p, size_t n);

}  // namespace nexus::data
