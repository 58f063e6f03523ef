// "int8": blocks of kInt8Block elements (the last one may be shorter), each sent as one float32
// scale = max|x| / 127 followed by q = round(x / scale) in int8 (|q| <= 127). Layout: all block
// scales first, then the n int8 values. Size: n + 4 * ceil(n / 256) bytes, 0.254x of float32.
#include <algorithm>
#include <bit>
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
    auto* q = reinterpret_cast<int8_t*>(out + sizeof(float) * num_blocks(n));
    for (size_t lo = 0; lo < n; lo += kInt8Block) {
      const size_t len = std::min(n - lo, kInt8Block);
      const float scale = block_scale(x + lo, len);
      detail::store(out + sizeof(float) * (lo / kInt8Block), scale);
      quantize(x + lo, len, scale, q + lo);
    }
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    const auto* q = reinterpret_cast<const int8_t*>(in + sizeof(float) * num_blocks(n));
    for (size_t lo = 0; lo < n; lo += kInt8Block) {
      const float scale = detail::load<float>(in + sizeof(float) * (lo / kInt8Block));
      const size_t len = std::min(n - lo, kInt8Block);
      const int8_t* qb = q + lo;
      float* ob = out + lo;
      if (accumulate) {
        for (size_t i = 0; i < len; ++i) ob[i] += float(qb[i]) * scale;
      } else {
        for (size_t i = 0; i < len; ++i) ob[i] = float(qb[i]) * scale;
      }
    }
  }

 private:
  // max|x| / 127, rounded up where it rounded down so far that max|x| would round to |q| > 127
  // (or to 0): in a block of subnormal magnitude the quotient loses most of its bits.
  static float block_scale(const float* x, size_t len) {
    // max|x| over the bits: for non-negative floats the integer order is the float order. NaN
    // is left out (it encodes as 0).
    uint32_t maxbits = 0;
    for (size_t i = 0; i < len; ++i) {
      const uint32_t a = std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu;
      maxbits = std::max(maxbits, a & (0u - uint32_t(a <= 0x7f800000u)));  // NaN: 0
    }
    const float maxabs = std::bit_cast<float>(maxbits);
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float scale = maxabs / 127.0f;
    while (maxabs > 0 && (scale == 0 || maxabs / scale >= 127.5f)) scale = std::nextafter(scale, kInf);
    return scale;
  }

  // q = round(x / scale), ties to even by the 1.5 * 2^23 shifter. No clamp is needed:
  // block_scale makes max|x| / scale < 127.5, and division rounds monotonically, so every
  // |x / scale| < 127.5 and |q| <= 127. NaN (and 0 / 0 in an all-zero block) encodes as 0: it
  // cannot be sent as int8; so does every element of a block holding inf (its scale is inf).
  static void quantize(const float* x, size_t len, float scale, int8_t* q) {
    constexpr float kShifter = 12582912.0f;
    for (size_t i = 0; i < len; ++i) {
      const float r = (x[i] / scale + kShifter) - kShifter;
      q[i] = int8_t(int32_t(r == r ? r : 0.0f));
    }
  }
};

}  // namespace

std::shared_ptr<const Codec> make_int8_block_codec() { return std::make_shared<Int8BlockCodec>(); }

}  // namespace nexus::comm::NX_CPU_VARIANT
