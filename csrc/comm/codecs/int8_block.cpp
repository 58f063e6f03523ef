// "int8": blocks of kInt8Block elements (the last one may be shorter), each sent as one float32
// scale = max|x| / 127 followed by q = round(x / scale) in int8 (|q| <= 127). Layout: all block
// scales first, then the n int8 values. Size: n + 4 * ceil(n / 256) bytes, 0.254x of float32.
#include <algorithm>
#include <cmath>
#include <limits>

#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

size_t num_blocks(size_t n) { return (n + kInt8Block - 1) / kInt8Block; }

class Int8BlockCodec final : public Codec {
 public:
  std::string spec() const override { return "int8"; }
  size_t max_encoded_bytes(size_t n) const override { return n + sizeof(float) * num_blocks(n); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    std::byte* q = out + sizeof(float) * num_blocks(n);
    for (size_t b = 0; b * kInt8Block < n; ++b) {
      const size_t lo = b * kInt8Block, hi = std::min(n, lo + kInt8Block);
      float maxabs = 0;
      for (size_t i = lo; i < hi; ++i) maxabs = std::max(maxabs, std::fabs(x[i]));
      // maxabs / 127, rounded up where it rounded down so far that maxabs would round to |q| > 127
      // (or to 0): in a block of subnormal magnitude the quotient loses most of its bits.
      constexpr float kInf = std::numeric_limits<float>::infinity();
      float scale = maxabs / 127.0f;
      while (maxabs > 0 && (scale == 0 || maxabs / scale >= 127.5f)) scale = std::nextafter(scale, kInf);
      detail::store(out + sizeof(float) * b, scale);
      for (size_t i = lo; i < hi; ++i) {
        float r = scale > 0 ? std::nearbyint(x[i] / scale) : 0.0f;
        if (r != r) r = 0.0f;  // NaN cannot be sent as int8; it encodes as 0
        q[i] = std::byte(uint8_t(int8_t(std::clamp(r, -127.0f, 127.0f))));
      }
    }
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    const std::byte* q = in + sizeof(float) * num_blocks(n);
    for (size_t i = 0; i < n; ++i) {
      const float scale = detail::load<float>(in + sizeof(float) * (i / kInt8Block));
      detail::put(float(int8_t(q[i])) * scale, out, i, accumulate);
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_int8_block_codec() { return std::make_shared<Int8BlockCodec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
