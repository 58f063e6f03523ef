// Gradient codecs (comm/codec.h) against scalar references written from what codec.h documents:
// sizes, rounding (nearest, ties to even), fp16 saturation, int8's per-block error bound, top-k's
// choice and tie rule, sign's scale, decoding with and without accumulation, n = 0 and n that is
// not a multiple of a block.
#include "comm/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "check.h"

using namespace nexus;
using namespace nexus::comm;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Every codec, with the size codec.h documents for n elements.
struct Spec {
  const char* spec;
  size_t (*bytes)(size_t n);
};
const Spec kSpecs[] = {
    {"none", [](size_t n) { return 4 * n; }},
    {"fp16", [](size_t n) { return 2 * n; }},
    {"bf16", [](size_t n) { return 2 * n; }},
    {"int8", [](size_t n) { return n + 4 * ((n + kInt8Block - 1) / kInt8Block); }},  // scales, then int8s
    {"topk:0.1", [](size_t n) { return 8 * ((n + 9) / 10); }},                       // ceil(n / 10) entries
    {"topk:0.25", [](size_t n) { return 8 * ((n + 3) / 4); }},
    {"topk:1", [](size_t n) { return 8 * n; }},
    {"sign", [](size_t n) { return n ? 4 + (n + 7) / 8 : 0; }},  // the scale, then one bit each
};
// Around every block and byte boundary: 0, 1, one block -1/+1, several blocks and a ragged end.
const size_t kSizes[] = {0, 1, 2, 7, 8, 9, 31, 255, 256, 257, 511, 512, 513, 1000, 4099};

// Gradients of every magnitude: normal values scaled by 10^-6 ... 10^6, with signs.
std::vector<float> gradients(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exp10(-6, 6);
  std::vector<float> x(n);
  for (auto& v : x) v = normal(rng) * std::pow(10.0f, float(exp10(rng)));
  return x;
}

std::vector<std::byte> encode(const Codec& c, const std::vector<float>& x) {
  return encode_to_vector(c, x.data(), x.size());
}
std::vector<float> roundtrip(const Codec& c, const std::vector<float>& x) {
  std::vector<std::byte> e = encode(c, x);
  return decode_to_vector(c, e.data(), e.size(), x.size());
}

template <class T> T load(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// The nearest value with `bits` significand bits (the leading one included) and smallest exponent
// `emin`, ties to even: an IEEE format's rounding, computed exactly in double.
double round_to_format(float f, int bits, int emin) {
  const double a = std::fabs(double(f));
  if (a == 0) return f;
  const double q = std::ldexp(1.0, std::max(std::ilogb(a), emin) - (bits - 1));
  return std::copysign(std::nearbyint(a / q) * q, double(f));  // a / q is exact; nearbyint: ties to even
}

// fp16 as documented: round to nearest even; finite values beyond +-65504 saturate there.
float ref_fp16(float f) {
  if (std::fabs(f) >= 65504.0f) return std::copysign(65504.0f, f);
  return float(round_to_format(f, 11, -14));  // half: 11 significand bits, exponents from -14
}

// bf16: float's exponent range, 8 significand bits, ties to even; past the largest bf16, inf.
float ref_bf16(float f) {
  if (std::isinf(f)) return f;
  const double r = round_to_format(f, 8, -126);
  return std::fabs(r) >= 0x1p128 ? std::copysign(kInf, f) : float(r);
}

}  // namespace

TEST(specs_parse_and_bad_ones_list_the_valid_ones) {
  CHECK_EQ(make_codec("none")->spec(), "none");
  CHECK_EQ(make_codec("")->spec(), "none");
  CHECK(make_codec("none")->lossless());
  for (const char* s : {"fp16", "bf16", "int8", "sign"}) {
    CHECK_EQ(make_codec(s)->spec(), s);
    CHECK(!make_codec(s)->lossless());
    CHECK_EQ(make_codec(s)->topk_ratio(), 0.0);
  }
  CHECK_EQ(make_codec("topk:0.1")->spec(), "topk:0.1");
  CHECK_EQ(make_codec("topk:0.1")->topk_ratio(), 0.1);
  CHECK_EQ(make_codec("topk:1")->topk_ratio(), 1.0);
  for (const char* bad : {"topk:0", "topk:-0.5", "topk:1.5", "topk:", "topk:0.1x", "topk:nan"})
    CHECK_THROWS(make_codec(bad), ValueError, "0 < RATIO <= 1");
  for (const char* bad : {"fp32", "gzip", "TOPK:0.1", "Int8", " none"})
    CHECK_THROWS(make_codec(bad), ValueError, "valid codecs: \"none\", \"fp16\"");
}

TEST(every_codec_encodes_exactly_max_encoded_bytes) {
  for (const auto& [spec, bytes] : kSpecs) {
    auto c = make_codec(spec);
    for (size_t n : kSizes) {
      const size_t expect = bytes(n);
      CHECK_MSG(c->max_encoded_bytes(n) == expect, spec << " n=" << n << ": " << c->max_encoded_bytes(n));
      // the encoder writes exactly that many bytes and not one more
      std::vector<float> x = gradients(n, unsigned(n));
      std::vector<std::byte> buf(expect + 64, std::byte{0x5a});
      CHECK_EQ(c->encode(x.data(), n, buf.data()), expect);
      CHECK_MSG(
          std::all_of(buf.begin() + ptrdiff_t(expect), buf.end(), [](std::byte b) { return b == std::byte{0x5a}; }),
          spec << " n=" << n << " wrote past max_encoded_bytes");
      // a byte count that does not fit n is refused, naming the codec
      std::vector<float> out(n + 1);
      CHECK_THROWS(c->decode(buf.data(), expect + 1, out.data(), n, false), ValueError, "bytes cannot hold");
      if (c->max_encoded_bytes(n + 1) != expect)  // (top-k and sign sizes may not change with n)
        CHECK_THROWS(c->decode(buf.data(), expect, out.data(), n + 1, false), ValueError, "encoded elements");
    }
  }
}

TEST(none_is_lossless_bit_for_bit) {
  std::vector<float> x = gradients(1000, 1);
  x.insert(x.end(), {-0.0f, 0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 0x1p-149f, -0x1p-149f});
  std::vector<float> y = roundtrip(*make_codec("none"), x);
  for (size_t i = 0; i < x.size(); ++i) CHECK_MSG(std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(x[i]), i);
}

TEST(fp16_rounds_to_nearest_even_and_saturates) {
  std::vector<float> x = gradients(4000, 2);
  // ties (1 + 2^-11 is halfway between 1 and 1 + 2^-10; even is 1), subnormal halves and their
  // ties (2^-25 is halfway between 0 and 2^-24), the saturation edge, float subnormals, -0
  for (float v : {1.0f + 0x1p-11f,
                  1.0f + 3 * 0x1p-11f,
                  1.0f + 0x1p-11f + 0x1p-23f,
                  0x1p-14f,
                  0x1p-24f,
                  0x1p-25f,
                  3 * 0x1p-26f,
                  0x1p-26f,
                  5 * 0x1p-25f,
                  65504.0f,
                  65519.0f,
                  65520.0f,
                  65536.0f,
                  1e6f,
                  3.4e38f,
                  0x1p-149f,
                  0.0f,
                  2047.5f,
                  2048.0f + 1.0f,
                  4096.0f + 2.0f,
                  0.1f,
                  1.0f / 3})
    x.insert(x.end(), {v, -v});
  std::vector<float> y = roundtrip(*make_codec("fp16"), x);
  for (size_t i = 0; i < x.size(); ++i)
    CHECK_MSG(test::same(y[i], ref_fp16(x[i])),
              "x = " << test::show(x[i]) << ": got " << test::show(y[i]) << ", want " << test::show(ref_fp16(x[i])));
  // NaN stays NaN
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN()};
  for (float v : roundtrip(*make_codec("fp16"), nan)) CHECK(std::isnan(v));
}

TEST(bf16_rounds_to_nearest_even) {
  std::vector<float> x = gradients(4000, 3);
  for (float v : {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-8f + 0x1p-23f, 0x1p-126f, 0x1p-133f, 0x1p-134f,
                  3 * 0x1p-135f, 0x1p-149f, 3.3895e38f, std::numeric_limits<float>::max(), kInf, 0.0f, 0.1f})
    x.insert(x.end(), {v, -v});
  std::vector<float> y = roundtrip(*make_codec("bf16"), x);
  for (size_t i = 0; i < x.size(); ++i)
    CHECK_MSG(test::same(y[i], ref_bf16(x[i])),
              "x = " << test::show(x[i]) << ": got " << test::show(y[i]) << ", want " << test::show(ref_bf16(x[i])));
  std::vector<float> nan = {std::numeric_limits<float>::quiet_NaN()};
  CHECK(std::isnan(roundtrip(*make_codec("bf16"), nan)[0]));
}

namespace {

// int8's documented contract for x: scale = max|x| / 127 per block of kInt8Block (the scales
// first, then one int8 per element), rounded up only where max|x| would otherwise need |q| > 127
// (subnormal blocks), and |x - q*scale| <= scale/2. The bound is for exact arithmetic:
// x / scale and q * scale are rounded to float, which may add up to 2^-16 scale.
void check_int8(const std::vector<float>& x, const char* what) {
  auto c = make_codec("int8");
  std::vector<std::byte> e = encode(*c, x);
  std::vector<float> y = decode_to_vector(*c, e.data(), e.size(), x.size());
  for (size_t lo = 0; lo < x.size(); lo += kInt8Block) {
    const size_t hi = std::min(x.size(), lo + kInt8Block);
    float maxabs = 0;
    for (size_t i = lo; i < hi; ++i) maxabs = std::max(maxabs, std::fabs(x[i]));
    const float scale = load<float>(e.data() + 4 * (lo / kInt8Block));
    const float quotient = maxabs / 127.0f;
    const bool rounded_up = maxabs / quotient >= 127.5f || (quotient == 0 && maxabs > 0);
    CHECK_MSG(rounded_up ? scale > quotient && maxabs / std::nextafter(scale, 0.0f) >= 127.5f : scale == quotient,
              what << ": block at " << lo << " scale " << test::show(scale));
    double worst = 0;
    size_t at = lo;
    for (size_t i = lo; i < hi; ++i) {
      const double err = std::fabs(double(x[i]) - double(y[i]));
      if (err > worst) worst = err, at = i;
    }
    CHECK_MSG(worst <= double(scale) * (0.5 + 0x1p-16), what << ": x[" << at << "] = " << test::show(x[at])
                                                             << " decodes to " << test::show(y[at]) << ", scale "
                                                             << test::show(scale));
  }
}

}  // namespace

TEST(int8_error_is_at_most_half_a_step_per_block) {
  for (size_t n : kSizes) check_int8(gradients(n, unsigned(10 + n)), "random");
  // blocks of very different magnitudes, each with its own scale; exact multiples and midpoints
  std::vector<float> x;
  for (int b = 0; b < 6; ++b)
    for (int i = 0; i < 256; ++i) x.push_back(std::ldexp(float(i % 2 ? i : -i) / 255.0f, 10 * b - 30));
  for (int i = 0; i < 200; ++i) x.push_back(float(i) + 0.5f);  // a ragged last block
  check_int8(x, "scaled blocks");
  // an all-zero block sends scale 0 and decodes to zeros
  std::vector<float> zeros(300, 0.0f);
  std::vector<float> z = roundtrip(*make_codec("int8"), zeros);
  CHECK(std::all_of(z.begin(), z.end(), [](float v) { return v == 0.0f; }));
}

TEST(int8_error_bound_holds_for_blocks_of_subnormal_magnitude) {
  // max|x| = 190 * 2^-149: max|x| / 127 = 1.496 * 2^-149 rounds to 2^-149, where x would need
  // q = 190 (clamped to 127: off by 63 steps); the encoder must round the scale up instead.
  check_int8({190 * 0x1p-149f, -5 * 0x1p-149f, 0x1p-149f}, "subnormal block (190)");
  // max|x| = 50 * 2^-149: max|x| / 127 rounds to 0, which would decode every element as 0.
  check_int8({50 * 0x1p-149f, 20 * 0x1p-149f}, "subnormal block (50)");
}

namespace {

// The top-k reference: k = ceil(p/q * n) for the ratio p/q, the k largest |x| with ties to the
// lower index, sent as ascending indices then their values.
void check_topk(const char* spec, int64_t p, int64_t q, const std::vector<float>& x) {
  auto c = make_codec(spec);
  const size_t n = x.size(), k = std::min<size_t>(n, size_t((p * int64_t(n) + q - 1) / q));
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = uint32_t(i);
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t a, uint32_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<uint32_t> want(order.begin(), order.begin() + ptrdiff_t(k));
  std::sort(want.begin(), want.end());

  std::vector<std::byte> e = encode(*c, x);
  CHECK_EQ(e.size(), 8 * k);
  size_t wrong = 0;
  for (size_t i = 0; i < k && e.size() == 8 * k; ++i) {
    const uint32_t idx = load<uint32_t>(e.data() + 4 * i);
    const float v = load<float>(e.data() + 4 * k + 4 * i);
    wrong += idx != want[i] || !test::same(v, x[want[i]]);
  }
  CHECK_MSG(wrong == 0, spec << " n=" << n << ": " << wrong << " of " << k << " entries differ");
  // decoding: the chosen values, 0 elsewhere; with accumulate, added to what is there
  std::vector<float> y = decode_to_vector(*c, e.data(), e.size(), n), acc(n, 1.5f);
  c->decode(e.data(), e.size(), acc.data(), n, true);
  std::vector<bool> chosen(n);
  for (uint32_t i : want) chosen[i] = true;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    const float v = chosen[i] ? x[i] : 0.0f;
    bad += !test::same(y[i], v) || !test::same(acc[i], 1.5f + v);
  }
  CHECK_MSG(bad == 0, spec << " n=" << n << ": " << bad << " decoded elements differ");
}

}  // namespace

TEST(topk_sends_the_k_largest_magnitudes_ties_to_the_lower_index) {
  for (size_t n : kSizes) {
    check_topk("topk:0.1", 1, 10, gradients(n, unsigned(20 + n)));
    check_topk("topk:0.25", 1, 4, gradients(n, unsigned(30 + n)));
    check_topk("topk:0.3", 3, 10, gradients(n, unsigned(40 + n)));  // 0.3 * 10 is 3.0000000000000004
    check_topk("topk:1", 1, 1, gradients(n, unsigned(50 + n)));
  }
  // ties: equal magnitudes of either sign, the lower index wins
  check_topk("topk:0.25", 1, 4, {1, -3, 3, 2, -3, 0, 3, -2});
  std::vector<float> flat(1000, 0.5f);
  for (size_t i = 0; i < flat.size(); i += 3) flat[i] = -0.5f;
  check_topk("topk:0.1", 1, 10, flat);  // every |x| ties: indices 0..99
  check_topk("topk:0.01", 1, 100, {0.0f, -0.0f, 0.0f});
}

TEST(topk_selects_exactly_on_segments_large_enough_to_sample) {
  // Segments of 32768 elements and more take a threshold from a sample and collect the candidates
  // over the pool: the choice must still be the full sort's, whatever the data.
  const size_t n = size_t(1) << 19;
  check_topk("topk:0.01", 1, 100, gradients(n, 90));
  check_topk("topk:0.001", 1, 1000, gradients(n, 91));
  check_topk("topk:0.1", 1, 10, gradients(n, 92));
  check_topk("topk:0.005", 1, 200, gradients(size_t(1) << 17, 95));  // the ring's segment size
  check_topk("topk:0.01", 1, 100, gradients(32768, 96));             // the smallest sampled
  // every |x| ties: the sample's threshold lets everything through; the lowest indices win
  std::vector<float> flat(n, 0.25f);
  for (size_t i = 0; i < n; i += 7) flat[i] = -0.25f;
  check_topk("topk:0.01", 1, 100, flat);
  // the large values all sit where the sample does not look (between its runs of 16 every
  // n / 1024 elements), or only where it looks: the first threshold is too low, or lets too few
  // through and the pass is rerun with lower ones
  std::vector<float> hidden = gradients(n, 93), seen = gradients(n, 94);
  for (auto& v : hidden) v *= 1e-3f;
  for (size_t i = 100; i < n; i += n / 1024) hidden[i] = float(i);
  check_topk("topk:0.001", 1, 1000, hidden);
  for (size_t i = 0; i < n; i += n / 1024)
    for (size_t j = 0; j < 16; ++j) seen[i + j] *= 1e3f;
  check_topk("topk:0.01", 1, 100, seen);
  // mostly zeros (a sparse gradient, or the output of a top-k round): fewer nonzeros than k,
  // so the lowest-index zeros make up the rest; and more nonzeros than k
  std::vector<float> sparse(n, 0.0f), sparser(n, 0.0f);
  for (size_t i = 3; i < n; i += 211) sparse[i] = float(i % 17) - 8.0f;
  for (size_t i = 5; i < n; i += 1999) sparser[i] = float(i % 13) + 1.0f;
  check_topk("topk:0.001", 1, 1000, sparse);
  check_topk("topk:0.01", 1, 100, sparser);
  // many ties at the k-th magnitude: the lower indices among them are sent
  std::vector<float> steps(n);
  for (size_t i = 0; i < n; ++i) steps[i] = float((i * 2654435761u) % 64);
  check_topk("topk:0.01", 1, 100, steps);
}

TEST(topk_refuses_a_corrupt_index) {
  auto c = make_codec("topk:0.5");
  std::vector<float> x = {1, 2, 3, 4};
  std::vector<std::byte> e = encode(*c, x);
  const uint32_t bad = 4;  // n = 4: valid indices are 0..3
  std::memcpy(e.data(), &bad, 4);
  std::vector<float> out(4);
  CHECK_THROWS(c->decode(e.data(), e.size(), out.data(), 4, false), ValueError, "out of range");
}

TEST(sign_sends_the_mean_magnitude_and_the_signs) {
  auto c = make_codec("sign");
  for (size_t n : kSizes) {
    if (n == 0) continue;
    std::vector<float> x = gradients(n, unsigned(60 + n));
    if (n > 3) x[1] = 0.0f, x[2] = -0.0f;  // zeros decode to +scale
    double sum = 0;
    for (float v : x) sum += std::fabs(double(v));
    const float scale = float(sum / double(n));
    std::vector<std::byte> e = encode(*c, x);
    CHECK_NEAR(load<float>(e.data()), scale, 1e-6 * scale);
    std::vector<float> y = decode_to_vector(*c, e.data(), e.size(), n), acc(n, -2.0f);
    c->decode(e.data(), e.size(), acc.data(), n, true);
    const float s = load<float>(e.data());
    size_t bad = 0;
    for (size_t i = 0; i < n; ++i) {
      const float v = x[i] < 0 ? -s : s;
      bad += !test::same(y[i], v) || !test::same(acc[i], -2.0f + v);
    }
    CHECK_MSG(bad == 0, "n=" << n << ": " << bad << " elements decode to the wrong sign");
  }
}

TEST(decode_with_accumulate_adds_to_the_output) {
  for (const Spec& s : kSpecs) {
    const char* spec = s.spec;
    auto c = make_codec(spec);
    for (size_t n : {size_t(0), size_t(1), size_t(257), size_t(1000)}) {
      std::vector<float> x = gradients(n, unsigned(70 + n)), base = gradients(n, unsigned(80 + n));
      std::vector<std::byte> e = encode(*c, x);
      std::vector<float> plain = decode_to_vector(*c, e.data(), e.size(), n), acc = base;
      c->decode(e.data(), e.size(), acc.data(), n, true);
      size_t bad = 0;
      for (size_t i = 0; i < n; ++i) bad += !test::same(acc[i], base[i] + plain[i]);
      CHECK_MSG(bad == 0, spec << " n=" << n << ": " << bad << " elements are not base + decoded");
      // without accumulate, what was in the output does not matter
      std::vector<float> over(n, 123.0f);
      c->decode(e.data(), e.size(), over.data(), n, false);
      CHECK(over == plain);
    }
  }
}
