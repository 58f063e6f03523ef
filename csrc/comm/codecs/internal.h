// Shared helpers for the codec files, and their table (not a public header).
#pragma once

#include <cstring>

#include "base/cpu_variant.h"
#include "base/error.h"
#include "comm/codec.h"

namespace nexus::comm::detail {

inline void check_bytes(const Codec& c, size_t bytes, size_t n) {
  NX_CHECK(bytes == c.max_encoded_bytes(n), "codec \"", c.spec(), "\": ", bytes, " bytes cannot hold ", n,
           " encoded elements (expected ", c.max_encoded_bytes(n),
           "); the sender used a different codec or segment size");
}

inline void put(float out_value, float* out, size_t i, bool accumulate) {
  out[i] = accumulate ? out[i] + out_value : out_value;
}

template <class T> T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T> void store(std::byte* p, T v) { std::memcpy(p, &v, sizeof(T)); }

// The codecs' factories, one table per CPU variant (base/cpu_variant.h): the files in codecs/
// are compiled once per variant (fp16 converts with F16C on x86-64-v3, for one). codec.cpp's
// make_*_codec() take the active variant's.
struct CodecFactories {
  std::shared_ptr<const Codec> (*none)();
  std::shared_ptr<const Codec> (*fp16)();
  std::shared_ptr<const Codec> (*bf16)();
  std::shared_ptr<const Codec> (*int8_block)();
  std::shared_ptr<const Codec> (*topk)(double ratio);
  std::shared_ptr<const Codec> (*sign)();
};

NX_CPU_VARIANT_TABLES(CodecFactories, factories_for);

}  // namespace nexus::comm::detail

#ifdef NX_CPU_VARIANT
namespace nexus::comm::NX_CPU_VARIANT {
// One per file in codecs/.
std::shared_ptr<const Codec> make_none_codec();
std::shared_ptr<const Codec> make_fp16_codec();
std::shared_ptr<const Codec> make_bf16_codec();
std::shared_ptr<const Codec> make_int8_block_codec();
std::shared_ptr<const Codec> make_topk_codec(double ratio);
std::shared_ptr<const Codec> make_sign_codec();
}  // namespace nexus::comm::NX_CPU_VARIANT
#endif
