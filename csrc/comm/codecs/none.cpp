// "none": float32 as is. Lossless; the ring's reference wire format.
#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

class NoneCodec final : public Codec {
 public:
  std::string spec() const override { return "none"; }
  bool lossless() const override { return true; }
  size_t max_encoded_bytes(size_t n) const override { return n * sizeof(float); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    if (n) std::memcpy(out, x, n * sizeof(float));
    return n * sizeof(float);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (!accumulate) {
      if (n) std::memcpy(out, in, bytes);
      return;
    }
    for (size_t i = 0; i < n; ++i) out[i] += detail::load<float>(in + i * sizeof(float));
  }
};

}  // namespace

std::shared_ptr<const Codec> make_none_codec() { return std::make_shared<NoneCodec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
