#include "comm/codec.h"

#include <charconv>
#include <cmath>

#include "base/cpu_variant_dispatch.h"
#include "base/error.h"
#include "comm/codecs/internal.h"

namespace nexus::comm {

namespace {

const detail::CodecFactories& factories() {
  static const detail::CodecFactories& table =
      with_cpu_variant([](auto v) -> const detail::CodecFactories& { return detail::factories_for(v); });
  return table;
}

constexpr const char* kValidSpecs =
    "valid codecs: \"none\", \"fp16\", \"bf16\", \"int8\", "
    "\"topk:RATIO\" with 0 < RATIO <= 1 (e.g. \"topk:0.01\"), \"sign\"";
}  // namespace

std::shared_ptr<const Codec> make_none_codec() { return factories().none(); }
std::shared_ptr<const Codec> make_fp16_codec() { return factories().fp16(); }
std::shared_ptr<const Codec> make_bf16_codec() { return factories().bf16(); }
std::shared_ptr<const Codec> make_int8_block_codec() { return factories().int8_block(); }
std::shared_ptr<const Codec> make_topk_codec(double ratio) { return factories().topk(ratio); }
std::shared_ptr<const Codec> make_sign_codec() { return factories().sign(); }

std::shared_ptr<const Codec> make_codec(std::string_view spec) {
  if (spec == "none" || spec.empty()) return make_none_codec();
  if (spec == "fp16") return make_fp16_codec();
  if (spec == "bf16") return make_bf16_codec();
  if (spec == "int8") return make_int8_block_codec();
  if (spec == "sign") return make_sign_codec();
  if (spec.starts_with("topk:")) {
    std::string_view num = spec.substr(5);
    double ratio = 0;
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), ratio);
    NX_CHECK(ec == std::errc() && end == num.data() + num.size() && ratio > 0 && ratio <= 1, "codec \"", spec,
             "\": RATIO must be a number with 0 < RATIO <= 1; ", kValidSpecs);
    return make_topk_codec(ratio);
  }
  throw ValueError(str("unknown codec \"", spec, "\"; ", kValidSpecs));
}

std::vector<std::byte> encode_to_vector(const Codec& codec, const float* x, size_t n) {
  std::vector<std::byte> out(codec.max_encoded_bytes(n));
  out.resize(codec.encode(x, n, out.data()));
  return out;
}

std::vector<float> decode_to_vector(const Codec& codec, const std::byte* in, size_t bytes, size_t n) {
  std::vector<float> out(n);
  codec.decode(in, bytes, out.data(), n, false);
  return out;
}

}  // namespace nexus::comm
