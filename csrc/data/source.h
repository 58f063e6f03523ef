// Bytes to parse: a memory-mapped file or a caller's buffer, split into ranges at line ends so
// that ranges parse in parallel; plus the UTF-8 check both text parsers share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace nexus::data {

// Opens `path` for reading (O_CLOEXEC): the one place the readers open a file. A missing file
// throws OSError(ENOENT) (FileNotFoundError in Python); another failure (a directory, no permission) ValueError naming it.
int open_file(const std::string& path);

// 3 when [data, data + size) starts with the UTF-8 byte order mark EF BB BF, else 0: the text
// readers skip it (Python's "utf-8-sig", pandas and polars do the same).
size_t utf8_bom(const char* data, size_t size);

class Source {
 public:
  static Source map_file(const std::string& path);  // opens with open_file, then maps
  static Source view(const char* data, size_t size) { return Source(data, size, false); }
  Source(Source&& o) noexcept : data_(o.data_), size_(o.size_), mapped_(o.mapped_) { o.mapped_ = false; }
  Source(const Source&) = delete;
  ~Source();
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  Source(const char* d, size_t n, bool mapped) : data_(d), size_(n), mapped_(mapped) {}
  const char* data_;
  size_t size_;
  bool mapped_;
};

// Splits [begin, size) into at most `parts` ranges, each ending just after a '\n' (the last one at
// size). With `quote` set (CSV), a '\n' inside a quoted field is not a line end: the quote state
// at any byte is the parity of the quote characters before it.
std::vector<std::pair<size_t, size_t>> split_lines(const char* data, size_t begin, size_t size, int parts,
                                                   char quote = 0);

// The number of ranges to cut `bytes` bytes into for `threads` (0: the pool's size): several per
// thread (at least 64 KiB each), so that parse_ranges can balance them.
int range_count(size_t bytes, int threads);

// Calls parse(i) for every i in [0, ranges) on `threads` pool threads (0: the pool's size), each
// taking the next range not yet taken when it finishes one: a thread that the machine's other
// work slows down parses fewer ranges instead of holding up the read.
void parse_ranges(int64_t ranges, int threads, const std::function<void(int64_t)>& parse);

// The first byte of [p, end) that does not start a valid UTF-8 sequence (end if all are valid).
// Surrogates and overlong forms are invalid, as in Python's strict decoder.
const char* find_invalid_utf8(const char* p, const char* end);

// The length (1-4) of the valid UTF-8 sequence at p, or 0 when it is not valid.
int utf8_sequence(const char* p, const char* end);

// Appends the UTF-8 encoding of a code point (surrogates encoded as three bytes, "WTF-8", which
// Python decodes with errors="surrogatepass" as json.loads would give them).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace nexus::data
