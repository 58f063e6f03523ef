// iter_jsonl: a JSONL file streamed in chunks of rows, read in blocks (data/jsonl.h).
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "data/jsonl.h"
#include "data/source.h"

namespace nexus::data {

JsonlReader::JsonlReader(const std::string& path, ReadOptions opt, int64_t chunk_rows)
    : path_(path), opt_(std::move(opt)), chunk_rows_(chunk_rows) {
  NX_CHECK(chunk_rows >= 1, "iter_jsonl: chunk_rows must be >= 1, got ", chunk_rows);
  fd_ = open_file(path);
  opt_.require_columns = false;
}

JsonlReader::~JsonlReader() {
  if (fd_ >= 0) ::close(fd_);
}

bool JsonlReader::fill() {
  constexpr size_t kBlock = size_t(8) << 20;
  if (buf_.size() < len_ + kBlock) buf_.resize(std::max(buf_.size() * 2, len_ + kBlock));
  ssize_t n;
  do n = ::read(fd_, buf_.data() + len_, kBlock);
  while (n < 0 && errno == EINTR);
  NX_CHECK(n >= 0, "cannot read '", path_, "': ", std::strerror(errno));
  len_ += size_t(n);
  return n > 0;
}

bool JsonlReader::blank(size_t begin, size_t end) const {
  if (byte_base_ == 0 && begin == 0) begin = utf8_bom(buf_.data(), end);
  for (size_t k = begin; k < end; ++k)
    if (buf_[k] != ' ' && buf_[k] != '\t' && buf_[k] != '\r') return false;
  return true;
}

bool JsonlReader::next(Table& out) {
  // the lines of the next chunk_rows rows (blank lines ride along with them), read in blocks
  size_t scan = 0;
  int64_t rows = 0;
  for (;;) {
    while (rows < chunk_rows_ && scan < len_) {
      auto* q = static_cast<const char*>(std::memchr(buf_.data() + scan, '\n', len_ - scan));
      if (!q) break;
      size_t end = size_t(q - buf_.data());
      rows += blank(scan, end) ? 0 : 1;
      scan = end + 1;
    }
    if (rows == chunk_rows_ || eof_) break;
    if (!fill()) eof_ = true;
  }
  size_t cut = scan;
  if (rows < chunk_rows_) {  // end of file: the rest, however many lines
    if (scan < len_ && !blank(scan, len_)) ++rows;
    cut = len_;
  }
  if (rows == 0) {  // nothing left but blank lines
    len_ = 0;
    // a dtypes= key that no line of the file had (known only now; read_jsonl checks it at once)
    if (rows_ > 0 && opt_.columns.empty()) check_dtype_keys(opt_, seen_, "no line has");
    return false;
  }
  size_t begin = byte_base_ == 0 ? utf8_bom(buf_.data(), cut) : 0;
  out = parse_jsonl_lines(buf_.data(), begin, cut, opt_, line_base_, byte_base_);
  line_base_ += out.stats.lines;
  byte_base_ += int64_t(cut);
  rows_ += out.stats.rows;
  for (const auto& c : out.columns)
    if (std::find(seen_.begin(), seen_.end(), c.name) == seen_.end()) seen_.push_back(c.name);
  std::memmove(buf_.data(), buf_.data() + cut, len_ - cut);
  len_ -= cut;
  return true;
}

}  // namespace nexus::data
