// "topk:RATIO": the k = ceil(RATIO * n) elements of largest |x| (ties: the lower index wins, so
// encoding is deterministic), sent as k uint32 indices (ascending) then their k float32 values.
// Everything else decodes as 0 (with error feedback it waits in the Residual for a later round).
// A NaN counts as larger than every number (it is sent, not hidden).
//
// Selection in O(n): a sample of the magnitudes gives a threshold a little below the k-th
// largest; one vectorised pass collects the candidates at or above it (split over the thread
// pool for large segments), and nth_element picks the k among them. The candidates hold every
// element at or above the threshold, ties included, so the choice is exactly the full sort's;
// a threshold that lets fewer than k through (an unlucky sample) is lowered and the pass rerun.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>

#include "base/thread_pool.h"
#include "comm/codecs/internal.h"

namespace nexus::comm::NX_CPU_VARIANT {
namespace {

class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(double ratio) : ratio_(ratio) {}
  std::string spec() const override { return str("topk:", ratio_); }
  double topk_ratio() const override { return ratio_; }
  size_t k(size_t n) const {
    // The small epsilon keeps ratio * n that is an integer up to rounding (0.1 * 30) from
    // rounding up to one more entry.
    return n == 0 ? 0 : std::min(n, size_t(std::ceil(ratio_ * double(n) - 1e-9)));
  }
  size_t max_encoded_bytes(size_t n) const override { return k(n) * (sizeof(uint32_t) + sizeof(float)); }
  size_t encode(const float* x, size_t n, std::byte* out) const override {
    NX_CHECK(n <= UINT32_MAX, "codec \"", spec(), "\": a segment of ", n,
             " elements is too long for 32-bit indices; use a smaller segment size");
    const size_t kk = k(n);
    if (kk == 0) return 0;
    // The candidates are (key, ~index) entries in index order. The k chosen: every candidate whose key is above the k-th largest key, then those equal
    // to it, lowest index first, as many as are still wanted. nth_element finds that key in a
    // copy; one pass over the candidates (in index order) picks them in the order they are sent.
    Scratch& s = scratch();
    const std::vector<uint64_t>& found = candidates(x, n, kk, s);
    s.keys.resize(found.size());
    for (size_t i = 0; i < found.size(); ++i) s.keys[i] = uint32_t(found[i] >> 32);
    std::nth_element(s.keys.begin(), s.keys.begin() + ptrdiff_t(kk - 1), s.keys.end(), std::greater<>());
    const uint32_t kth = s.keys[kk - 1];
    size_t ties = kk - size_t(std::count_if(s.keys.begin(), s.keys.begin() + ptrdiff_t(kk),
                                            [kth](uint32_t k) { return k > kth; }));
    size_t i = 0;
    for (uint64_t e : found) {
      const uint32_t key = uint32_t(e >> 32);
      if (key < kth || (key == kth && ties == 0)) continue;
      ties -= key == kth;
      const uint32_t at = ~uint32_t(e);
      detail::store(out + sizeof(uint32_t) * i, at);
      detail::store(out + sizeof(uint32_t) * kk + sizeof(float) * i, x[at]);
      ++i;
    }
    return max_encoded_bytes(n);
  }
  void decode(const std::byte* in, size_t bytes, float* out, size_t n, bool accumulate) const override {
    detail::check_bytes(*this, bytes, n);
    if (!accumulate) std::fill(out, out + n, 0.0f);
    const size_t kk = k(n);
    for (size_t i = 0; i < kk; ++i) {
      const uint32_t j = detail::load<uint32_t>(in + sizeof(uint32_t) * i);
      NX_CHECK(j < n, "codec \"", spec(), "\": index ", j, " out of range for ", n, " elements (corrupt message)");
      out[j] += detail::load<float>(in + sizeof(uint32_t) * kk + sizeof(float) * i);
    }
  }

 private:
  // The order of selection: |x| as bits (for non-negative floats the integer order is the float
  // order; NaN's bits are above infinity's).
  static uint32_t key(float v) { return std::bit_cast<uint32_t>(v) & 0x7fffffffu; }

  // Per-thread buffers, kept from call to call: a fresh allocation of this size is fresh pages,
  // and faulting them in cost as much as the selection.
  struct Scratch {
    std::vector<uint32_t> sample;
    std::vector<std::vector<uint64_t>> parts;
    std::vector<uint64_t> found;
    std::vector<uint32_t> keys;
  };
  static Scratch& scratch() {
    thread_local Scratch s;
    return s;
  }

  // (key << 32 | ~index) of every element whose key is >= some threshold, at least kk of them,
  // in index order (in s.found).
  static const std::vector<uint64_t>& candidates(const float* x, size_t n, size_t kk, Scratch& s) {
    // The sample: one element in 32, in runs of 16 (one cache line each) at evenly spaced
    // positions, at most 16384. The threshold is the sample's key at the rank where the wanted
    // share, plus three standard deviations, lies above it.
    constexpr size_t kRun = 16;
    const size_t runs = std::min<size_t>(1024, n / (32 * kRun)), samples = runs * kRun;
    if (runs < 64 || kk * 8 > n) return collect(x, n, 0, s);  // small or dense: everything
    s.sample.resize(samples);
    for (size_t r = 0; r < runs; ++r)
      for (size_t j = 0; j < kRun; ++j) s.sample[r * kRun + j] = key(x[r * (n / runs) + j]);
    const double share = double(kk) / double(n) * samples;
    for (size_t rank = size_t(share + 3 * std::sqrt(share) + 4);; rank *= 2) {
      uint32_t t = 0;
      if (rank < samples) {
        std::nth_element(s.sample.begin(), s.sample.begin() + ptrdiff_t(rank), s.sample.end(), std::greater<>());
        t = s.sample[rank];
      }
      if (t == 0) return nonzeros_then_zeros(x, n, kk, s);
      collect(x, n, t, s);
      // fewer than kk: the sample was unlucky (or the data is full of ties); lower the bar
      if (s.found.size() >= kk) return s.found;
    }
  }

  // A mostly-zero buffer (a sparse gradient, or one top-k already thinned): the candidates are
  // its nonzeros and, when they are fewer than kk, the lowest-index zeros that make up kk, not
  // every element.
  static const std::vector<uint64_t>& nonzeros_then_zeros(const float* x, size_t n, size_t kk, Scratch& s) {
    collect(x, n, 1, s);
    if (s.found.size() >= kk) return s.found;
    size_t zeros = kk - s.found.size();
    s.found.clear();
    for (size_t i = 0; i < n; ++i) {
      const uint32_t k = key(x[i]);
      if (k == 0 && zeros == 0) continue;
      zeros -= k == 0;
      s.found.push_back(entry(k, i));
    }
    return s.found;
  }

  // The elements whose key is >= t, in index order, collected over the pool in chunks.
  static const std::vector<uint64_t>& collect(const float* x, size_t n, uint32_t t, Scratch& s) {
    constexpr int64_t kChunk = int64_t(1) << 18;
    const int64_t chunks = int64_t((n + kChunk - 1) / kChunk);
    s.parts.resize(size_t(chunks));
    parallel_for(chunks, 1, [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        const size_t begin = size_t(c) * kChunk, end = std::min(n, begin + size_t(kChunk));
        s.parts[size_t(c)].clear();
        collect_range(x, begin, end, t, s.parts[size_t(c)]);
      }
    });
    s.found.clear();
    for (const auto& p : s.parts) s.found.insert(s.found.end(), p.begin(), p.end());
    return s.found;
  }

  static uint64_t entry(uint32_t k, size_t i) { return uint64_t(k) << 32 | uint32_t(~uint32_t(i)); }

  static void collect_range(const float* x, size_t begin, size_t end, uint32_t t, std::vector<uint64_t>& found) {
    if (t == 0) {
      for (size_t i = begin; i < end; ++i) found.push_back(entry(key(x[i]), i));
      return;
    }
    // Blocks of 16: lane j's top bit is set when key >= t (keys and t are below 2^31), and
    // the block's mask walks only the candidates.
    size_t i = begin;
    for (; i + 16 <= end; i += 16) {
      const U32x16 above = (t - 1) - (load16<U32x16>(x + i) & 0x7fffffffu);
      for (uint32_t m = top_bits16(above); m; m &= m - 1) {
        const size_t at = i + size_t(std::countr_zero(m));
        found.push_back(entry(key(x[at]), at));
      }
    }
    for (; i < end; ++i)
      if (key(x[i]) >= t) found.push_back(entry(key(x[i]), i));
  }

  double ratio_;
};

}  // namespace

std::shared_ptr<const Codec> make_topk_codec(double ratio) { return std::make_shared<TopKCodec>(ratio); }

}  // namespace nexus::comm::NX_CPU_VARIANT
