// Kinds of failure (STYLE habit 9):
//   NX_CHECK*  — the caller passed something wrong; becomes ValueError / TypeError / IndexError in
//                Python, with a message naming the op, the shapes and what would be valid.
//   OSError    — a file operation failed; becomes FileNotFoundError, PermissionError, ...
//   MemoryError — an impossible size or a failed allocation; becomes MemoryError.
//   NX_ASSERT  — a Nexus invariant broke; becomes NexusError "internal error, please report".
// Library code never exits the process.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace nexus {

class ValueError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class TypeError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class IndexError : public std::out_of_range {
 public:
  using std::out_of_range::out_of_range;
};

// A system call failed on a file: becomes the OSError subclass for `error_number` in Python
// (ENOENT: FileNotFoundError, EACCES: PermissionError, ...), with `path` as its filename.
class OSError : public std::runtime_error {
 public:
  OSError(int error_number, const std::string& message, std::string path)
      : std::runtime_error(message), error_number_(error_number), path_(std::move(path)) {}
  int error_number() const { return error_number_; }
  const std::string& path() const { return path_; }

 private:
  int error_number_;
  std::string path_;
};

// Integer division or remainder by zero (Python's ZeroDivisionError).
class ZeroDivisionError : public std::domain_error {
 public:
  using std::domain_error::domain_error;
};

// A size no allocation can have (an element count or byte size past what the process can
// address), or an allocation that failed: Python's MemoryError, naming the shape and the bytes.
class MemoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device that cannot be used: no driver, no device, a backend not built or not loaded.
// Python's RuntimeError, saying what is missing and what to install.
class DeviceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An op that exists but not for this device yet: Python's NotImplementedError.
class NotImplementedError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

template <class... Args> std::string str(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

}  // namespace nexus

#define NX_THROW_IF_NOT_(Err, cond, ...)    \
  do {                                      \
    if (!(cond)) [[unlikely]]               \
      throw Err(::nexus::str(__VA_ARGS__)); \
  } while (0)

#define NX_CHECK(cond, ...) NX_THROW_IF_NOT_(::nexus::ValueError, cond, __VA_ARGS__)
#define NX_CHECK_TYPE(cond, ...) NX_THROW_IF_NOT_(::nexus::TypeError, cond, __VA_ARGS__)
#define NX_CHECK_INDEX(cond, ...) NX_THROW_IF_NOT_(::nexus::IndexError, cond, __VA_ARGS__)
#define NX_ASSERT(cond, ...)                                                                                 \
  NX_THROW_IF_NOT_(::nexus::InternalError, cond, "internal error, please report: ", __FILE__, ":", __LINE__, \
                   ": " #cond " ", ##__VA_ARGS__)
