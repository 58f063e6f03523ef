// float16 / bfloat16 <-> float conversions, bit exact, round to nearest even. Standard headers only:
// generated kernels embed this file's text (codegen/kernel_prelude.h), so keep it self-contained.
#pragma once

#include <bit>
#include <cstdint>

namespace nexus {

inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(uint32_t(h) << 16); }
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
// The compiler's IEEE half: _Float16 (gcc >= 12 and clang on x86-64), __fp16 on AArch64 (where
// gcc 12's C++ has no _Float16; conversions round to nearest even under the default FPCR). Both
// convert in one instruction where the CPU has one (F16C, AArch64's fcvt).
#if defined(__aarch64__)
using NativeHalf = __fp16;
#else
using NativeHalf = _Float16;
#endif
inline float fp16_to_float(uint16_t h) { return static_cast<float>(std::bit_cast<NativeHalf>(h)); }
inline uint16_t float_to_fp16(float f) { return std::bit_cast<uint16_t>(static_cast<NativeHalf>(f)); }

}  // namespace nexus
