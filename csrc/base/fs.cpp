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

// The folder `path` would be created in ("." for a bare name).
static std::string parent_of(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// An OSError about writing `path` for the errno just set; names the target, never the temp file.
[[noreturn]] static void write_failed(const std::string& path, int err) {
  const std::string dir = parent_of(path);
  struct stat st;
  if (err == ENOENT && ::stat(dir.c_str(), &st) != 0)
    throw OSError(err, str("cannot write: the folder '", dir, "' does not exist (create it first)"), path);
  if (err == ENOTDIR) throw OSError(err, str("cannot write: '", dir, "' is not a folder"), path);
  throw OSError(err, str("cannot write: ", std::strerror(err)), path);
}

void write_atomic(const std::string& path, std::string_view data, unsigned mode, bool durable) {
  const std::string tmp = temp_path_for(path);
  // The umask applies to `mode` as it would for a plain open().
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
  if (fd < 0) write_failed(path, errno);
  size_t done = 0;
  while (done < data.size()) {
    ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : EIO;
      ::close(fd);
      remove_file(tmp);
      write_failed(path, err);
    }
    done += size_t(n);
  }
  if (durable && ::fsync(fd) != 0) {
    int err = errno;
    ::close(fd);
    remove_file(tmp);
    write_failed(path, err);
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    remove_file(tmp);
    write_failed(path, err);
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
