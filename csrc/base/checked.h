// Overflow-checked int64 arithmetic for sizes computed from user input (shapes, padding,
// kernel sizes): false where the exact result does not fit, so that the caller raises the error
// that names its op instead of computing with a wrapped value (undefined behaviour in C++).
#pragma once

#include <cstdint>

namespace nexus {

inline bool checked_add(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }
inline bool checked_mul(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }

}  // namespace nexus
