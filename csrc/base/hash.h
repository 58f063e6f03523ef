// A small, stable, non-cryptographic hash (two independent 64-bit FNV-1a lanes = 128 bits) for
// cache keys and kernel names. Stable across processes, builds and machines: keys on disk use it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace nexus {

class Hasher {
 public:
  Hasher& add(std::string_view s) {
    for (unsigned char c : s) {
      a_ = (a_ ^ c) * 0x100000001b3ull;
      b_ = (b_ ^ c) * 0x100000001b3ull + 0x9e3779b97f4a7c15ull;
    }
    // A separator, so ("ab","c") and ("a","bc") differ.
    a_ = (a_ ^ 0xffu) * 0x100000001b3ull;
    b_ = (b_ ^ 0xfeu) * 0x100000001b3ull;
    return *this;
  }
  Hasher& add(int64_t v) { return add(std::to_string(v)); }

  // 32 lowercase hex digits.
  std::string hex() const {
    char buf[33];
    std::snprintf(buf, sizeof buf, "%016llx%016llx", (unsigned long long)a_, (unsigned long long)b_);
    return buf;
  }

 private:
  uint64_t a_ = 0xcbf29ce484222325ull;
  uint64_t b_ = 0x84222325cbf29ce4ull;
};

inline std::string hash_hex(std::string_view s) { return Hasher().add(s).hex(); }

}  // namespace nexus
