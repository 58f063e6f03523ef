// Elementwise float math written so that GCC auto-vectorizes `for (i) out[i] = vec::f(in[i]);`
// (-O3 -march=native -fno-math-errno: AVX2/FMA code, no libm calls). Everything is branch-free:
// bits move through std::bit_cast, selects and clamps are bitwise blends (select()), there are no
// tables (no gathers), and rounding uses the 1.5*2^23 shifter or std::nearbyint (vroundpd; sin
// and cos need SSE4.1 for it, or they fall back to scalar nearbyint calls).
//
// Max error vs libm's double result rounded to float, all 2^32 inputs (AVX2+FMA build):
//   exp 1.01 ulp, log 0.91, tanh 1.51, sigmoid 2.40, sin 0.501, cos 0.501.
//   gelu: rel. err <= 1e-6 or abs. err <= 1e-7 everywhere (rel. <= 9.9e-7 for x > -3; below,
//   gelu ~ x*e^{-1.6|x|^3/22} is ill-conditioned: rel. err up to 1.2e-5 at values < 4e-3).
//   gelu_grad: abs. err <= 2.2e-7 (relative is unbounded at its root x ~ -0.7525).
// Special values follow libm: NaN -> NaN everywhere; exp(+-inf) = inf/0; log(0) = -inf,
// log(x<0) = NaN, log(inf) = inf; tanh(+-inf) = +-1; sigmoid(-inf/inf) = 0/1 (never NaN);
// gelu(-inf) = -0, gelu(inf) = inf; sin/cos(+-inf) = NaN; odd functions keep -0.
// Subnormals are produced and consumed correctly (exp(-100) = 3.8e-44); only a thread running
// with FTZ/DAZ set in MXCSR flushes them to zero, as it would for any float code.
// Without FMA (no __FMA__) fmadd() falls back to a*b+c; the bounds above still hold (checked).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace nexus::ops::vec {
#ifdef NX_CPU_VARIANT
inline namespace NX_CPU_VARIANT {  // a CPU variant's own copy (base/cpu_variant.h)
#endif
namespace detail {

inline std::uint32_t to_bits(float f) { return std::bit_cast<std::uint32_t>(f); }
inline float from_bits(std::uint32_t u) { return std::bit_cast<float>(u); }

// a*b + c: one rounding (vfmadd) where the target has FMA, else two.
template <class T> inline T fmadd(T a, T b, T c) {
#ifdef __FMA__
  return std::fma(a, b, c);
#else
  return a * b + c;
#endif
}

// c ? a : b as a bitwise blend. A plain ternary lets GCC sink the work of an arm into a branch,
// and with -ftrapping-math (the default) that branch then blocks if-conversion and vectorization;
// this form is computed unconditionally and still compiles to one vblendv.
inline float select(bool c, float a, float b) {
  const std::uint32_t m = 0u - static_cast<std::uint32_t>(c);
  return from_bits((to_bits(a) & m) | (to_bits(b) & ~m));
}
inline double select(bool c, double a, double b) {
  const std::uint64_t m = 0u - static_cast<std::uint64_t>(c);
  return std::bit_cast<double>((std::bit_cast<std::uint64_t>(a) & m) | (std::bit_cast<std::uint64_t>(b) & ~m));
}

// min(max(x, lo), hi) that keeps NaN; as selects, so GCC cannot thread the clamped constants.
inline float clamp(float x, float lo, float hi) {
  x = select(x < lo, lo, x);
  return select(x > hi, hi, x);
}

// Horner: poly(x, c0, c1, ..., cn) = c0 + x*(c1 + x*(... + x*cn)).
template <class T> inline T poly(T, T c0) { return c0; }
template <class T, class... C> inline T poly(T x, T c0, C... cs) { return fmadd(poly(x, cs...), x, c0); }

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kShifter = 0x1.8p23f;             // adding it rounds |v| < 2^22 to an integer
constexpr float kLog2e = 0x1.715476p+0f;          // 1/ln 2
constexpr float kLn2Hi = 0x1.63p-1f;              // ln 2 = kLn2Hi + kLn2Lo; kLn2Hi has 9 bits, so
constexpr float kLn2Lo = -0x1.bd0106p-13f;        // n*kLn2Hi is exact for |n| < 2^15 (Cody-Waite)
constexpr float kGeluA = 0x1.988454p+0f;          // 2*sqrt(2/pi): gelu(x) = x*sigmoid(A*(x + B*x^3))
constexpr float kGeluB = 0x1.6e4e26p-5f;          // 0.044715
constexpr double kGeluAd = 0x1.9884533d43651p+0;  // 2*sqrt(2/pi) in double

// 2/pi cut into 29-bit pieces (bits 1-29, 30-58, ... 175-203 after the binary point), so a float
// (24-bit significand) times a piece is exact in double. 203 bits reduce every finite float.
constexpr double kTwoOverPi[7] = {0x1.45f306dp-1,   0x1.9391054p-30, 0x1.4fe13abp-59, 0x1.d1f534dp-88,
                                  0x1.b81b6c5p-117, 0x1.5993c4p-148, 0x1.c820ff2p-175};

// y mod 4, into [-2, 2], exact for every double y. (std::floor would not vectorize under the
// default -ftrapping-math; nearbyint does.)
inline double mod4(double y) { return fmadd(-4.0, std::nearbyint(y * 0.25), y); }

// Payne-Hanek reduction without tables, valid for all finite x: x*2/pi = n + t (mod 4) with n
// an integer and |t| <= 1/2 (+2^-50); t is accurate to ~2^-100 absolute, far below the closest
// approach of any float to a multiple of pi/2. Pieces are summed in double-double (TwoSum).
inline double reduce_quarter_turns(float x, double& n) {
  const double xd = x;
  double hi = mod4(xd * kTwoOverPi[0]), lo = 0.0;
  for (int i = 1; i < 7; ++i) {
    const double y = mod4(xd * kTwoOverPi[i]);
    const double s = hi + y, b = s - hi;
    lo += (hi - (s - b)) + (y - b);
    hi = s;
  }
  n = std::nearbyint(hi);
  return (hi - n) + lo;
}

// sin(x + shift*pi/2) for shift in {0, 1}.
inline float sin_shifted(float x, double shift) {
  double n;
  const double t = reduce_quarter_turns(x, n);  // x = (n + t)*pi/2
  // Quadrant (n + shift) mod 4 as q in {-2..2}: 0 -> s, 1 -> c, +-2 -> -s, -1 -> -c.
  // NaN for inf/NaN x, and then the result is NaN.
  const double q = mod4(n + shift);
  const double z = t * t;
  // sin(t*pi/2)/t and cos(t*pi/2) for t^2 in [0, 0.2505]: own minimax fits in double,
  // relative error 4.6e-12 and 5.7e-11 (the float result then rounds once).
  const double s = t * poly(z, 0x1.921fb5443ae19p+0, -0x1.4abbce5633eeap-1, 0x1.466bba7992656p-4, -0x1.32ca7ccc8f535p-8,
                            0x1.4bbfecdf2798dp-13);
  const double c = poly(z, 0x1.ffffffff836fdp-1, -0x1.3bd3cc6e1d398p+0, 0x1.03c1da8ab409dp-2, -0x1.55c4da4506798p-6,
                        0x1.d99b02daba48fp-11);
  const double v = select(std::fabs(q) == 1.0, c, s);
  return static_cast<float>(select((q < 0.0) | (q > 1.5), -v, v));
}

}  // namespace detail

// e^x. x is clamped to [-104, 89] (e^-104 < 2^-150 rounds to 0, e^89 > FLT_MAX) and split as
// x = n*ln2 + r, |r| <= ln2/2; 2^n is applied as two factors so subnormal results round once.
inline float exp(float x) {
  using namespace detail;
  x = clamp(x, -104.0f, 89.0f);  // NaN compares false and passes through
  const float t = fmadd(x, kLog2e, kShifter);
  const float n = t - kShifter;  // round(x/ln2), exact
  float r = fmadd(n, -kLn2Hi, x);
  r = fmadd(n, -kLn2Lo, r);
  // e^r = 1 + r + r^2*P(r) on |r| <= ln2/2: own minimax fit, relative error 3.1e-9.
  const float p = poly(r, 0x1.fffffcp-2f, 0x1.555492p-3f, 0x1.5558f2p-5f, 0x1.1239d4p-7f, 0x1.6a244cp-10f);
  const float er = 1.0f + fmadd(r * r, p, r);
  const auto ni = static_cast<std::int32_t>(to_bits(t) - to_bits(kShifter));  // [-150, 129]
  const std::int32_t n1 = ni >> 1, n2 = ni - n1;
  const float s1 = from_bits(static_cast<std::uint32_t>(n1 + 127) << 23);
  const float s2 = from_bits(static_cast<std::uint32_t>(n2 + 127) << 23);
  return er * s1 * s2;
}

// Natural log. x = 2^k * m with m in [sqrt(1/2), sqrt(2)) (subnormals pre-scaled by 2^23), so
// log x = k*ln2 + log1p(f), f = m - 1 in [-0.293, 0.415] (exact).
inline float log(float x) {
  using namespace detail;
  const bool sub = x < 0x1p-126f;  // subnormal, zero or negative (the last two fixed below)
  const float xs = select(sub, x * 0x1p23f, x);
  const std::uint32_t ix = to_bits(xs) - 0x3f3504f3u;  // 0x3f3504f3 = bits of sqrt(1/2)
  const auto k = static_cast<std::int32_t>(ix) >> 23;
  const float f = from_bits((ix & 0x7fffffu) + 0x3f3504f3u) - 1.0f;
  const float kf = static_cast<float>(k) - select(sub, 23.0f, 0.0f);
  // log1p(f) = f + f^2*Q(f): own minimax fit, relative error of Q 7.5e-9.
  const float q = poly(f, -0x1p-1f, 0x1.55554ep-2f, -0x1p-2f, 0x1.99a138p-3f, -0x1.555cf0p-3f, 0x1.237beap-3f,
                       -0x1.fc57f4p-4f, 0x1.e35276p-4f, -0x1.dbab24p-4f, 0x1.1929cep-4f);
  float r = fmadd(kf, kLn2Hi, fmadd(kf, kLn2Lo, fmadd(f * f, q, f)));
  r = select(x == kInf, kInf, r);
  r = select(x == 0.0f, -kInf, r);       // log(+-0) = -inf
  return select(!(x >= 0.0f), kNaN, r);  // negative or NaN
}

// tanh: odd polynomial for |x| < 0.625, else (1 - e^{-2|x|})/(1 + e^{-2|x|}); sign of x.
inline float tanh(float x) {
  using namespace detail;
  const float z = x * x;
  // tanh(x) = x + x^3*T(x^2) on x^2 <= 0.390625: own minimax fit, relative error of T 1.3e-7.
  const float small =
      fmadd(x * z, poly(z, -0x1.555552p-2f, 0x1.110e1ep-3f, -0x1.b925a2p-5f, 0x1.58054cp-6f, -0x1.8f91b4p-8f), x);
  const float e = vec::exp(-2.0f * std::fabs(x));  // in [0, 1]: no overflow, tanh(+-inf) = +-1
  const float big = (1.0f - e) / (1.0f + e);
  // NaN takes `big`, which is NaN; copysign also keeps tanh(-0) = -0.
  return std::copysign(select(std::fabs(x) < 0.625f, small, big), x);
}

// 1/(1 + e^-x), written as {1 or e}/(1 + e) with e = e^{-|x|} so it never overflows and is
// accurate in the left tail (subnormal results included).
inline float sigmoid(float x) {
  const float e = vec::exp(-std::fabs(x));
  return detail::select(x < 0.0f, e, 1.0f) / (1.0f + e);
}

// gelu, tanh approximation: 0.5*x*(1 + tanh(sqrt(2/pi)*(x + 0.044715x^3))) == x*sigmoid(u),
// u = 2*sqrt(2/pi)*(x + 0.044715x^3). The sigmoid form keeps relative accuracy for x < 0.
inline float gelu(float x) {
  using namespace detail;
  const float g = x * sigmoid(kGeluA * fmadd(kGeluB * x, x * x, x));
  return select(x == -kInf, -0.0f, g);  // -inf * sigmoid(-inf) would be NaN
}

// d/dx gelu = s + x*u'*s*(1 - s), s = sigmoid(u), u' = 2*sqrt(2/pi)*(1 + 3*0.044715x^2).
// |x| > 20 is clamped: there s is exactly 0 or 1 and s*(1-s) = 0 (this also keeps inf*0 away).
inline float gelu_grad(float x) {
  using namespace detail;
  x = clamp(x, -20.0f, 20.0f);
  const float x2 = x * x;
  const float u = kGeluA * fmadd(kGeluB * x, x2, x);
  const float du = kGeluA * fmadd(3.0f * kGeluB, x2, 1.0f);
  const float e = vec::exp(-std::fabs(u));
  const float d = 1.0f / (1.0f + e);
  const float s = select(u < 0.0f, e, 1.0f) * d;
  return fmadd(x * du, e * d * d, s);  // e/(1+e)^2 == s*(1-s)
}

// erf, within 2.6 ulp: x*P(x^2) for |x| < 1 (relative error 1.7e-7); else 1 - e^{-x^2}*Q(1/|x|),
// Q fitted to erfc(x)*e^{x^2} on [1, 4] (absolute error 7e-8; past 3.92 the float result is 1).
// Own Chebyshev fits; the sign of x, so erf(-0) = -0; erf(+-inf) = +-1, NaN stays NaN.
inline float erf(float x) {
  using namespace detail;
  const float a = std::fabs(x);
  const float small = a * poly(a * a, 0x1.20dd74p+0f, -0x1.81264cp-2f, 0x1.ce073cp-4f, -0x1.b59f10p-6f, 0x1.426c34p-8f,
                               -0x1.28447ap-11f);
  const float t = 1.0f / select(a < 1.0f, 1.0f, a);  // in (0, 1] (NaN stays NaN); not std::fmax,
                                                     // which GCC does not vectorise
  const float q = poly(t, 0x1.7729a2p-12f, 0x1.1d8250p-1f, 0x1.a687d6p-5f, -0x1.03dd4cp-1f, 0x1.2823c4p-1f,
                       -0x1.6d16b6p-2f, 0x1.f294d0p-4f, -0x1.276560p-6f);
  const float big = 1.0f - vec::exp(-a * a) * q;
  return std::copysign(select(a < 1.0f, small, big), x);
}

// Double versions for autograd in float64 (scalar libm calls; they need not vectorize).
inline double gelu(double x) {
  using detail::kGeluAd;
  if (std::isinf(x)) return x > 0 ? x : -0.0;
  const double u = kGeluAd * (x + 0.044715 * x * x * x);
  const double e = std::exp(-std::fabs(u));
  return x * ((u < 0 ? e : 1.0) / (1.0 + e));
}

inline double gelu_grad(double x) {
  using detail::kGeluAd;
  if (std::isnan(x)) return x;
  x = x < -40.0 ? -40.0 : (x > 40.0 ? 40.0 : x);  // beyond, the result is exactly 0 or 1
  const double x2 = x * x;
  const double u = kGeluAd * (x + 0.044715 * x2 * x), du = kGeluAd * (1.0 + 3.0 * 0.044715 * x2);
  const double e = std::exp(-std::fabs(u)), d = 1.0 / (1.0 + e);
  return (u < 0 ? e : 1.0) * d + x * du * e * d * d;
}

// sin and cos of every finite float, with no range limit (see reduce_quarter_turns).
inline float sin(float x) {
  return detail::select(x == 0.0f, x, detail::sin_shifted(x, 0.0));  // sin(-0) = -0
}
inline float cos(float x) { return detail::sin_shifted(x, 1.0); }

#ifdef NX_CPU_VARIANT
}  // namespace NX_CPU_VARIANT
#endif
}  // namespace nexus::ops::vec
