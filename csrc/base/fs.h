// Files for caches shared by many processes (MPI ranks): private directories, atomic writes
// (temp file in the same directory + rename), and an advisory per-file lock (flock).
#pragma once

#include <string>
#include <string_view>

namespace nexus::fs {

// Creates `dir` and its missing parents with mode 0700 (existing directories are left as they
// are). Throws ValueError naming the path and the OS error when it cannot.
void make_private_dirs(const std::string& dir);

bool exists(const std::string& path);
// The whole file; throws ValueError when it cannot be read.
std::string read_file(const std::string& path);
// Writes `data` to a temp file next to `path` and renames it over `path`, so a reader sees the
// old file or the new one, never a partial write. The file gets `mode` less the umask (0600: private
// cache files; 0666: what a plain open() gives); `durable` fsyncs it before the rename. The one
// atomic write: the kernel cache and Python's checkpoints (nexus.checkpoint.write_atomic) use it.
// Throws OSError naming `path` (never the temp file), e.g. ENOENT when its folder does not exist.
void write_atomic(const std::string& path, std::string_view data, unsigned mode = 0600, bool durable = false);
// A unique temp path next to `path` (same directory, so rename is atomic).
std::string temp_path_for(const std::string& path);
// rename(2) with an error naming both paths.
void rename_file(const std::string& from, const std::string& to);
void remove_file(const std::string& path);  // no error when absent

// An exclusive flock on `path` (created 0600), held for this object's lifetime. Blocks until
// it is granted; flock is released by the kernel if the process dies.
class FileLock {
 public:
  explicit FileLock(const std::string& path);
  ~FileLock();
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace nexus::fs
