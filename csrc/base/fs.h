// Files for caches shared by many processes (MPI ranks): private directories, atomic writes
// (temp file in the same directory + rename), and an advisory per-file lock (flock).
#pragma once

#include <string>

namespace nexus::fs {

// Creates `dir` and its missing parents with mode 0700 (existing directories are left as they
// are). Throws ValueError naming the path and the OS error when it cannot.
void make_private_dirs(const std::string& dir);

bool exists(const std::string& path);
// The whole file; throws ValueError when it cannot be read.
std::string read_file(const std::string& path);
// Writes `data` to a temp file next to `path` (mode 0600) and renames it over `path`, so a
// reader sees the old file or the new one, never a partial write.
void write_atomic(const std::string& path, const std::string& data);
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
