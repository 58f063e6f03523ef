// ops/cpu/vec_math.h against double-precision libm: the error bounds its header states, over every
// float bit pattern in steps of kStride plus every float in windows around each function's hard
// places (clamps, branch switches, overflow and underflow, multiples of pi/2), and the special
// values it promises. Built twice on x86-64 (tests/cpp/CMakeLists.txt): as the tests are, and
// with -mavx2 -mfma, so both of fmadd()'s paths are held to the same bounds.
#include "ops/cpu/vec_math.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <numbers>
#include <vector>

#include "check.h"

namespace vec = nexus::ops::vec;
using nexus::test::ulp_error;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kHalfPi = std::numbers::pi / 2;
constexpr double kGeluA = 2 * 0.7978845608028654;  // 2*sqrt(2/pi)
constexpr uint32_t kStride = 1021;                 // odd: the sweep meets every pattern of the low 22 bits

void require_build_cpu() {
#if defined(__x86_64__) && defined(__FMA__)
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma"))
    SKIP("built for AVX2+FMA: this CPU lacks them");
#endif
}

float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t to_bits(float f) { return std::bit_cast<uint32_t>(f); }

// Every bit pattern in steps of kStride (NaNs, infinities and subnormals among them), then `per`
// consecutive floats on each side of every center.
std::vector<float> inputs(const std::vector<float>& centers, uint32_t per = 4096) {
  std::vector<float> xs;
  xs.reserve((uint64_t(1) << 32) / kStride + centers.size() * 2 * per + 1);
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += kStride) xs.push_back(from_bits(uint32_t(u)));
  for (float c : centers) {
    const uint32_t b = to_bits(c);
    for (uint32_t k = 0; k < 2 * per; ++k) xs.push_back(from_bits(b - per + k));
  }
  return xs;
}

std::vector<float> with_negatives(std::vector<float> centers) {
  const size_t n = centers.size();
  for (size_t i = 0; i < n; ++i) centers.push_back(-centers[i]);
  return centers;
}

// The largest ulp_error of f against ref over xs, and where.
struct Worst {
  double err = 0;
  float x = 0;
};
Worst worst_ulp(const std::vector<float>& xs, float (*f)(float), double (*ref)(double)) {
  Worst w;
  for (float x : xs) {
    const double e = ulp_error(f(x), ref(double(x)));
    if (!(e <= w.err)) w = {e, x};  // NaN errors count as the worst
  }
  return w;
}

#define CHECK_WORST(w, bound) \
  CHECK_MSG((w).err <= (bound), (w).err << " ulp (bound " << (bound) << ") at x = " << std::hexfloat << (w).x)

double ref_exp(double x) { return std::exp(x); }
double ref_log(double x) { return std::log(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_erf(double x) { return std::erf(x); }
double ref_sin(double x) { return std::sin(x); }
double ref_cos(double x) { return std::cos(x); }
double ref_sigmoid(double x) { return x < 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x)); }
// gelu's tanh approximation as x * sigmoid(u), accurate for negative x too (1 + tanh(u) cancels).
double ref_gelu(double x) { return x * ref_sigmoid(kGeluA * (x + 0.044715 * x * x * x)); }
double ref_gelu_grad(double x) {
  const double u = kGeluA * (x + 0.044715 * x * x * x), du = kGeluA * (1 + 3 * 0.044715 * x * x);
  const double s = ref_sigmoid(u);
  return s + x * du * s * (1 - s);
}

}  // namespace

TEST(fmadd_rounds_once_exactly_where_the_build_has_fma) {
  require_build_cpu();
  const float a = 1.0f + 0x1p-12f;  // a * a = 1 + 2^-11 + 2^-24: the 2^-24 is lost when rounded alone
  const float fused = 0x1p-11f + 0x1p-24f, unfused = 0x1p-11f;
#ifdef __FMA__
  CHECK_SAME(vec::detail::fmadd(a, a, -1.0f), fused);
#else
  CHECK_SAME(vec::detail::fmadd(a, a, -1.0f), unfused);
  (void)fused;
#endif
  (void)unfused;
}

TEST(exp_is_within_1_01_ulp) {
  require_build_cpu();
  // the clamps, the overflow threshold, the normal/subnormal boundary, Cody-Waite's half steps
  std::vector<float> c = {-104.0f, -103.9721f, -87.33655f, 88.72284f, 89.0f, 0.34657359f, -0.34657359f, 1e-6f, -1e-6f};
  CHECK_WORST(worst_ulp(inputs(c), vec::exp, ref_exp), 1.01);
}

TEST(log_is_within_0_91_ulp) {
  require_build_cpu();
  // around 1 (log1p's f near 0), sqrt(1/2) (where the reduction switches), the smallest normal,
  // the largest float
  std::vector<float> c = {1.0f, 0.70710677f, 1.4142135f, 0x1p-126f, 0x1p-149f * 4096, 3.4e38f, 2.0f, 0.5f};
  CHECK_WORST(worst_ulp(inputs(c), vec::log, ref_log), 0.91);
}

TEST(tanh_is_within_1_51_ulp) {
  require_build_cpu();
  // the switch from the polynomial to the exp form at |x| = 0.625, where tanh rounds to 1
  std::vector<float> c = with_negatives({0.625f, 9.010913f, 1e-3f, 0.3f, 2.0f});
  CHECK_WORST(worst_ulp(inputs(c), vec::tanh, ref_tanh), 1.51);
}

TEST(erf_is_within_2_6_ulp) {
  require_build_cpu();
  // the switch from x*P(x^2) to 1 - e^{-x^2}Q(1/x) at |x| = 1, where erf rounds to 1, tiny x
  std::vector<float> c = with_negatives({1.0f, 0.99999994f, 3.9192059f, 4.0f, 1e-3f, 1e-30f, 0.5f, 2.0f});
  CHECK_WORST(worst_ulp(inputs(c), vec::erf, ref_erf), 2.6);
}

TEST(sigmoid_is_within_2_40_ulp) {
  require_build_cpu();
  std::vector<float> c = with_negatives({1e-3f, 1.0f, 16.63553f, 87.33655f, 103.97208f});
  CHECK_WORST(worst_ulp(inputs(c), vec::sigmoid, ref_sigmoid), 2.40);
}

TEST(sin_and_cos_are_within_0_501_ulp_for_every_magnitude) {
  require_build_cpu();
  // the floats nearest to multiples of pi/2, small and huge (where the reduction is hardest)
  std::vector<float> c;
  for (int k = 1; k <= 64; ++k) c.push_back(float(k * kHalfPi));
  for (double k : {1e4, 12345678.0, 1e9, 7.77e12, 1e15, 3e18, 1e22, 1e27, 5e33, 1e38}) c.push_back(float(k * kHalfPi));
  c = with_negatives(c);
  std::vector<float> xs = inputs(c, 256);
  CHECK_WORST(worst_ulp(xs, vec::sin, ref_sin), 0.501);
  CHECK_WORST(worst_ulp(xs, vec::cos, ref_cos), 0.501);
}

TEST(gelu_is_within_its_relative_or_absolute_bound) {
  require_build_cpu();
  std::vector<float> c = with_negatives({1e-3f, 0.5f, 1.0f, 3.0f, 5.0f, 10.0f});
  Worst everywhere, above_minus3;  // (the error in units of the bound, x)
  for (float x : inputs(c)) {
    if (std::isnan(x) || std::isinf(x)) continue;  // the special values test
    const double r = ref_gelu(double(x)), err = std::fabs(double(vec::gelu(x)) - r);
    // rel. <= 1e-6 or abs. <= 1e-7 everywhere
    const double over = r == 0 ? err / 1e-7 : std::min(err / (1e-6 * std::fabs(r)), err / 1e-7);
    if (!(over <= everywhere.err)) everywhere = {over, x};
    // rel. <= 9.9e-7 for x > -3 (results that are normal floats: below, float itself cannot)
    if (x > -3.0f && std::fabs(r) >= 0x1p-126) {
      const double rel = err / std::fabs(r) / 9.9e-7;
      if (!(rel <= above_minus3.err)) above_minus3 = {rel, x};
    }
  }
  CHECK_MSG(everywhere.err <= 1.0,
            "error " << everywhere.err << "x the bound at x = " << std::hexfloat << everywhere.x);
  CHECK_MSG(above_minus3.err <= 1.0,
            "relative error " << above_minus3.err << "x 9.9e-7 at x = " << std::hexfloat << above_minus3.x);
}

TEST(gelu_grad_is_within_2_2e_7_absolute) {
  require_build_cpu();
  std::vector<float> c = with_negatives({0.7525f, 1e-3f, 1.0f, 3.0f, 20.0f});
  Worst w;
  for (float x : inputs(c)) {
    if (std::isnan(x)) continue;
    const double err = std::fabs(double(vec::gelu_grad(x)) - ref_gelu_grad(double(x)));
    if (!(err <= w.err)) w = {err, x};
  }
  CHECK_MSG(w.err <= 2.2e-7, "absolute error " << w.err << " at x = " << std::hexfloat << w.x);
}

TEST(special_values_follow_libm) {
  require_build_cpu();
  using Fn = float (*)(float);
  for (Fn f : std::initializer_list<Fn>{vec::exp, vec::log, vec::tanh, vec::sigmoid, vec::gelu, vec::gelu_grad,
                                        vec::sin, vec::cos, vec::erf})
    for (uint32_t nan_bits : {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0x7fffffffu})
      CHECK(std::isnan(f(from_bits(nan_bits))));
  CHECK_SAME(vec::exp(kInf), kInf);
  CHECK_SAME(vec::exp(-kInf), 0.0f);
  CHECK_SAME(vec::exp(0.0f), 1.0f);
  CHECK_SAME(vec::exp(-0.0f), 1.0f);
  CHECK_SAME(vec::log(0.0f), -kInf);
  CHECK_SAME(vec::log(-0.0f), -kInf);
  CHECK(std::isnan(vec::log(-1.0f)));
  CHECK(std::isnan(vec::log(-0x1p-149f)));
  CHECK(std::isnan(vec::log(-kInf)));
  CHECK_SAME(vec::log(kInf), kInf);
  CHECK_SAME(vec::log(1.0f), 0.0f);
  CHECK_SAME(vec::tanh(kInf), 1.0f);
  CHECK_SAME(vec::tanh(-kInf), -1.0f);
  CHECK_SAME(vec::tanh(-0.0f), -0.0f);  // odd functions keep -0
  CHECK_SAME(vec::erf(-0.0f), -0.0f);
  CHECK_SAME(vec::erf(kInf), 1.0f);
  CHECK_SAME(vec::erf(-kInf), -1.0f);
  CHECK_SAME(vec::sin(-0.0f), -0.0f);
  CHECK_SAME(vec::sin(0.0f), 0.0f);
  CHECK_SAME(vec::cos(0.0f), 1.0f);
  CHECK_SAME(vec::sigmoid(-kInf), 0.0f);
  CHECK_SAME(vec::sigmoid(kInf), 1.0f);
  CHECK_SAME(vec::sigmoid(0.0f), 0.5f);
  CHECK_SAME(vec::gelu(-kInf), -0.0f);
  CHECK_SAME(vec::gelu(kInf), kInf);
  CHECK_SAME(vec::gelu_grad(-kInf), 0.0f);
  CHECK_SAME(vec::gelu_grad(kInf), 1.0f);
  CHECK(std::isnan(vec::sin(kInf)) && std::isnan(vec::sin(-kInf)));
  CHECK(std::isnan(vec::cos(kInf)) && std::isnan(vec::cos(-kInf)));
}

TEST(overflow_and_underflow_limits) {
  require_build_cpu();
  auto exp_ref = [](float x) { return std::exp(double(x)); };
  // e^x passes FLT_MAX between these two neighbours (ln FLT_MAX = 88.7228391...)
  const float last = from_bits(0x42b17217), first_inf = from_bits(0x42b17218);
  CHECK(std::isfinite(vec::exp(last)));
  CHECK_ULP(vec::exp(last), exp_ref(last), 1.01);
  CHECK_SAME(vec::exp(first_inf), kInf);
  CHECK_SAME(vec::exp(89.0f), kInf);
  CHECK_SAME(vec::exp(1e30f), kInf);
  // subnormal results round once: e^-100 = 3.7e-44, e^-103.9 = 2^-149-ish, e^-104 rounds to 0
  CHECK_ULP(vec::exp(-100.0f), exp_ref(-100.0f), 1.01);
  CHECK_ULP(vec::exp(-103.9f), exp_ref(-103.9f), 1.01);
  CHECK(vec::exp(-100.0f) > 0.0f);
  CHECK_SAME(vec::exp(-104.0f), 0.0f);
  CHECK_SAME(vec::exp(-1e30f), 0.0f);
  // subnormal inputs are consumed: log of the smallest subnormal, the largest float
  CHECK_ULP(vec::log(0x1p-149f), std::log(0x1p-149), 0.91);
  CHECK_ULP(vec::log(std::numeric_limits<float>::max()), std::log(double(std::numeric_limits<float>::max())), 0.91);
  // sigmoid's left tail stays accurate into the subnormals and never turns into NaN
  CHECK_ULP(vec::sigmoid(-95.0f), ref_sigmoid(-95.0), 2.40);
  for (float x : {-1e30f, -200.0f, 200.0f, 1e30f}) {
    const float s = vec::sigmoid(x);
    CHECK_MSG(s >= 0.0f && s <= 1.0f, "sigmoid(" << x << ") = " << s);
  }
  // tanh and sigmoid stay in [-1, 1] and [0, 1] over the whole sweep
  int64_t out = 0;
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 65537) {
    const float x = from_bits(uint32_t(u));
    if (std::isnan(x)) continue;
    out += !(std::fabs(vec::tanh(x)) <= 1.0f) + !(vec::sigmoid(x) >= 0.0f && vec::sigmoid(x) <= 1.0f);
  }
  CHECK_EQ(out, 0);
}

TEST(double_gelu_special_values_and_limits) {
  require_build_cpu();
  constexpr double inf = std::numeric_limits<double>::infinity();
  CHECK_SAME(vec::gelu(-inf), -0.0);
  CHECK_SAME(vec::gelu(inf), inf);
  CHECK(std::isnan(vec::gelu(std::nan(""))));
  CHECK(std::isnan(vec::gelu_grad(std::nan(""))));
  CHECK_SAME(vec::gelu_grad(-inf), 0.0);
  CHECK_SAME(vec::gelu_grad(inf), 1.0);
  CHECK_SAME(vec::gelu(0.0), 0.0);
  CHECK_SAME(vec::gelu_grad(0.0), 0.5);
  // the double versions agree with the reference formula to double rounding noise
  for (double x = -12; x <= 12; x += 0.01) {
    CHECK_NEAR(vec::gelu(x), ref_gelu(x), 1e-14 * (1 + std::fabs(x)));
    CHECK_NEAR(vec::gelu_grad(x), ref_gelu_grad(x), 1e-13);
  }
}
