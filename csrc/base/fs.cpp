#include "base/fs.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "base/error.h"

namespace nexus::fs {

static std::string os_error() { return std::strerror(errno); }

void make_private_dirs(const std::string& dir) {
  NX_CHECK(!dir.empty(), "cache directory: empty path");
  for (size_t pos = 1; pos <= dir.size(); ++pos) {
    if (pos != dir.size() && dir[pos] != '/') continue;
    std::string part = dir.substr(0, pos);
    if (::mkdir(part.c_str(), 0700) != 0 && errno != EEXIST)
      throw ValueError(str("cannot create directory '", part, "': ", os_error()));
  }
  struct stat st;
  NX_CHECK(::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode), "'", dir, "' is not a directory");
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

std::string read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ValueError(str("cannot open '", path, "': ", os_error()));
  std::string out;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

std::string temp_path_for(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device{}();
  return str(path, ".tmp.", ::getpid(), ".", salt % 1000003, ".", counter++);
}

void rename_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw ValueError(str("cannot rename '", from, "' to '", to, "': ", os_error()));
}

void remove_file(const std::string& path) { ::unlink(path.c_str()); }

void write_atomic(const std::string& path, const std::string& data) {
  std::string tmp = temp_path_for(path);
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw ValueError(str("cannot create '", tmp, "': ", os_error()));
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      std::string err = os_error();
      ::close(fd);
      remove_file(tmp);
      throw ValueError(str("cannot write '", tmp, "': ", err));
    }
    done += size_t(n);
  }
  ::close(fd);
  try {
    rename_file(tmp, path);
  } catch (...) {
    remove_file(tmp);
    throw;
  }
}

FileLock::FileLock(const std::string& path) {
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd_ < 0) throw ValueError(str("cannot open lock file '", path, "': ", os_error()));
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    std::string err = os_error();
    ::close(fd_);
    throw ValueError(str("cannot lock '", path, "': ", err));
  }
}

FileLock::~FileLock() {
  if (fd_ >= 0) {
    ::flock(fd_, LOCK_UN);
    ::close(fd_);
  }
}

}  // namespace nexus::fs
