// Codec: how a float32 segment travels on the wire. Spec strings (make_codec):
//   "none"        4 bytes/element, lossless
//   "fp16"        2 bytes/element, IEEE half (round to nearest even; finite values beyond +-65504
//                 saturate to +-65504 instead of becoming inf)
//   "bf16"        2 bytes/element, bfloat16 (round to nearest even)
//   "int8"        per block of kInt8Block elements: one float32 scale = max|x| / 127 (rounded up
//                 in blocks of subnormal magnitude, where the quotient rounds too far down for
//                 the bound), then one int8 per element q = round(x / scale); |x - q*scale| <= scale/2
//   "topk:RATIO"  the k = ceil(RATIO * n) entries of largest |x| (ties: lower index; NaN counts
//                 as largest), sent as k uint32 indices then k float32 values; the rest decode
//                 as 0. 0 < RATIO <= 1
//   "sign"        scaled 1-bit: one float32 scale = mean|x| of the segment, then one bit per
//                 element (set: negative); decodes to +-scale (0 decodes to +scale)
// Every built-in codec encodes n elements into exactly max_encoded_bytes(n) bytes (0 for n = 0),
// so the receiver knows the size from n alone. Codecs hold no mutable state: one instance may be
// shared by all ranks' threads.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace nexus::comm {

inline constexpr size_t kInt8Block = 256;

class Codec {
 public:
  virtual ~Codec() = default;
  // The spec string this codec was parsed from, normalised ("topk:0.01").
  virtual std::string spec() const = 0;
  virtual bool lossless() const { return false; }
  // "topk:RATIO" answers RATIO: the all-reduce then gathers every rank's own top entries
  // instead of re-sparsifying partial sums along the ring (ring.cpp). Others: 0.
  virtual double topk_ratio() const { return 0.0; }
  virtual size_t max_encoded_bytes(size_t n) const = 0;
  // Encodes x[0..n) into out (at least max_encoded_bytes(n) bytes); returns the bytes written.
  virtual size_t encode(const float* x, size_t n, std::byte* out) const = 0;
  // Decodes `bytes` bytes holding n elements: out[i] = v (accumulate: out[i] += v).
  // A byte count that does not fit n is a ValueError.
  virtual void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const = 0;
};

// Parses a spec string; a bad one is a ValueError listing the valid specs.
std::shared_ptr<const Codec> make_codec(std::string_view spec);

// Convenience for tests and bindings: encode into a fresh vector / decode into a fresh vector.
std::vector<std::byte> encode_to_vector(const Codec& codec, const float* x, size_t n);
std::vector<float> decode_to_vector(const Codec& codec, const std::byte* in, size_t bytes, size_t n);

// Factories, one per file in codecs/.
std::shared_ptr<const Codec> make_none_codec();
std::shared_ptr<const Codec> make_fp16_codec();
std::shared_ptr<const Codec> make_bf16_codec();
std::shared_ptr<const Codec> make_int8_block_codec();
std::shared_ptr<const Codec> make_topk_codec(double ratio);
std::shared_ptr<const Codec> make_sign_codec();

}  // namespace nexus::comm
