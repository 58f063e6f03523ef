#include "data/source.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "base/error.h"
#include "base/thread_pool.h"

namespace nexus::data {

int open_file(const std::string& path) {
  int fd;
  do fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  while (fd < 0 && errno == EINTR);
  if (fd < 0 && errno == ENOENT)
    throw OSError(ENOENT, std::strerror(ENOENT), path);  // FileNotFoundError, as open() raises
  NX_CHECK(fd >= 0, "cannot open '", path, "': ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    NX_CHECK(false, "'", path, "' is not a regular file");
  }
  return fd;
}

size_t utf8_bom(const char* data, size_t size) {
  return size >= 3 && std::memcmp(data, "\xEF\xBB\xBF", 3) == 0 ? 3 : 0;
}

Source Source::map_file(const std::string& path) {
  int fd = open_file(path);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    NX_CHECK(false, "cannot stat '", path, "': ", std::strerror(err));
  }
  size_t n = size_t(st.st_size);
  if (n == 0) {
    ::close(fd);
    return Source("", 0, false);
  }
  void* p = ::mmap(nullptr, n, PROT_READ, MAP_PRIVATE | MAP_POPULATE, fd, 0);
  int err = errno;
  ::close(fd);
  if (p == MAP_FAILED && err == ENOMEM)  // out of address space or memory: as a failed allocation
    throw MemoryError(str("cannot map '", path, "' (", n, " bytes): ", std::strerror(err)));
  NX_CHECK(p != MAP_FAILED, "cannot map '", path, "': ", std::strerror(err));
  ::madvise(p, n, MADV_SEQUENTIAL);
  return Source(static_cast<const char*>(p), n, true);
}

Source::~Source() {
  if (mapped_) ::munmap(const_cast<char*>(data_), size_);
}

namespace {

int reader_threads(int threads) { return threads > 0 ? std::min(threads, num_threads()) : num_threads(); }

}  // namespace

int range_count(size_t bytes, int threads) {
  constexpr size_t kMinRangeBytes = 1 << 16;
  constexpr size_t kRangesPerThread = 8;
  const int t = reader_threads(threads);
  return int(std::clamp<size_t>(bytes / kMinRangeBytes, 1, t == 1 ? 1 : size_t(t) * kRangesPerThread));
}

void parse_ranges(int64_t ranges, int threads, const std::function<void(int64_t)>& parse) {
  std::atomic<int64_t> next{0};
  parallel_for(std::min<int64_t>(reader_threads(threads), ranges), 1, [&](int64_t, int64_t) {
    for (int64_t i; (i = next.fetch_add(1)) < ranges;) parse(i);  // a task drains the queue
  });
}

namespace {

int64_t count_char(const char* p, const char* e, char c) {
  int64_t n = 0;
  while ((p = static_cast<const char*>(std::memchr(p, c, size_t(e - p))))) {
    ++n;
    if (++p >= e) break;
  }
  return n;
}

}  // namespace

std::vector<std::pair<size_t, size_t>> split_lines(const char* data, size_t begin, size_t size, int parts, char quote) {
  std::vector<std::pair<size_t, size_t>> out;
  size_t n = size - begin;
  parts = std::max(parts, 1);
  std::vector<size_t> nominal(size_t(parts) + 1);
  for (int i = 0; i <= parts; ++i) nominal[size_t(i)] = begin + n * size_t(i) / size_t(parts);
  // quote parity at each nominal cut (one parallel pass over the quotes; CSV only)
  std::vector<int64_t> quotes(size_t(parts) + 1, 0);
  if (quote) {
    parallel_for(parts, 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        quotes[size_t(i) + 1] = count_char(data + nominal[size_t(i)], data + nominal[size_t(i) + 1], quote);
    });
    for (int i = 0; i < parts; ++i) quotes[size_t(i) + 1] += quotes[size_t(i)];
  }
  size_t start = begin;
  for (int i = 1; i < parts && start < size; ++i) {
    size_t cut = std::max(nominal[size_t(i)], start);
    bool inside = quote && (quotes[size_t(i)] & 1);
    if (cut != nominal[size_t(i)] && quote) {  // cut moved past the nominal point: recount
      inside = (count_char(data + begin, data + cut, quote) & 1) != 0;
    }
    while (cut < size) {
      char c = data[cut++];
      if (c == quote && quote) inside = !inside;
      else if (c == '\n' && !inside) break;
    }
    if (cut >= size) break;
    out.emplace_back(start, cut);
    start = cut;
  }
  out.emplace_back(start, size);
  return out;
}

int utf8_sequence(const char* p, const char* end) {
  auto u = [](const char* q) { return uint8_t(*q); };
  uint8_t c = u(p);
  if (c < 0x80) return 1;
  int n = 0;
  uint32_t cp = 0;
  if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
  else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
  else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
  else return 0;
  if (end - p <= n) return 0;
  for (int k = 1; k <= n; ++k) {
    if ((u(p + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (u(p + k) & 0x3F);
  }
  static constexpr uint32_t kMin[4] = {0, 0x80, 0x800, 0x10000};
  if (cp < kMin[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n + 1;
}

const char* find_invalid_utf8(const char* p, const char* end) {
  while (p < end) {
    if (uint8_t(*p) < 0x80) {
      ++p;
      continue;
    }
    int n = utf8_sequence(p, end);
    if (n == 0) return p;
    p += n;
  }
  return end;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
}

}  // namespace nexus::data
