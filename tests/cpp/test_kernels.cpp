// The eager elementwise, reduction and GEMM kernels through the core's op API (ops/ops.h), against scalar
// reference loops: contiguous, strided and broadcast operands; float32, float64, int32, int64;
// edge values (NaN, +-inf, -0.0, subnormals, the largest magnitudes, integer extremes that wrap as
// the op table says); sizes on both sides of the vector width and of the thread pool's split
// (kElementwiseGrain), on a pool of 3 threads so that large loops are split.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/thread_pool.h"
#include "check.h"
#include "tensors.h"
#include "threads.h"
#include "ops/cpu/vec_math.h"
#include "ops/derivatives.h"
#include "ops/ops.h"

using namespace nexus;
using ops::BinaryOp;
using ops::UnaryOp;
using test::elements;
using test::tensor;
using test::Threads;

namespace {

const int64_t kSizes[] = {0, 1, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 1000, 32767, 32768, 32769, 100003};
const Shape kShapes2[] = {{3, 5}, {17, 33}, {64, 129}, {257, 129}};

template <class T> std::vector<T> edges() {
  using L = std::numeric_limits<T>;
  const T big = L::max(), low = L::lowest();
  if constexpr (std::is_floating_point_v<T>) {
    const T inf = L::infinity(), nan = L::quiet_NaN(), tiny = L::denorm_min(), small = L::min();
    return {0,     -T(0), 1,   -1,  0.5,      nan,      inf,          -inf,         tiny,
            -tiny, small, big, low, T(1e-30), T(-7.25), L::epsilon(), 3 * small / 4};
  } else {
    const T wide = sizeof(T) == 8 ? T(3037000500LL) : T(-65536);  // its square wraps
    return {0, 1, -1, big, low, T(big - 1), T(low + 1), 46341, -46341, 65536, -7, 12345, wide};
  }
}

// n values: edge values among random ones of every magnitude (floats) or the whole range (ints).
template <class T> std::vector<T> sample(int64_t n, unsigned seed) {
  std::mt19937_64 rng(seed);
  const std::vector<T> e = edges<T>();
  std::vector<T> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    if (rng() % 5 == 0) {
      v[size_t(i)] = e[rng() % e.size()];
    } else if constexpr (std::is_floating_point_v<T>) {
      v[size_t(i)] = T(std::normal_distribution<double>()(rng) * std::pow(10.0, double(int(rng() % 13) - 6)));
    } else {
      v[size_t(i)] = rng() % 2 ? T(rng()) : T(int64_t(rng() % 2001) - 1000);
    }
  }
  return v;
}

// One check for a whole result: the first mismatch and how many there are.
template <class T> void expect_same(const std::vector<T>& got, const std::vector<T>& want, const std::string& what) {
  size_t bad = 0, first = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i)
    if (!test::same(got[i], want[i]) && bad++ == 0) first = i;
  CHECK_MSG(got.size() == want.size() && bad == 0,
            what << ": " << bad << " of " << want.size() << " differ; first [" << first << "] "
                 << (bad ? test::show(got[first]) + " vs " + test::show(want[first]) : "") << " (sizes " << got.size()
                 << ", " << want.size() << ")");
}

template <class T> using Wide = std::make_unsigned_t<T>;

// The op table's scalar rules, from kernel_ops.h's comments: integers wrap, NaN propagates.
template <class T> T ref_binary(BinaryOp op, T a, T b) {
  constexpr bool kInt = std::is_integral_v<T>;
  switch (op) {
    case BinaryOp::Add:
      if constexpr (kInt) return T(Wide<T>(a) + Wide<T>(b));
      else return a + b;
    case BinaryOp::Sub:
      if constexpr (kInt) return T(Wide<T>(a) - Wide<T>(b));
      else return a - b;
    case BinaryOp::Mul:
      if constexpr (kInt) return T(Wide<T>(a) * Wide<T>(b));
      else return a * b;
    case BinaryOp::Maximum: return std::isnan(double(a)) ? a : std::isnan(double(b)) ? b : a > b ? a : b;
    case BinaryOp::Minimum: return std::isnan(double(a)) ? a : std::isnan(double(b)) ? b : a < b ? a : b;
    default: throw std::logic_error("no reference");
  }
}

const BinaryOp kArith[] = {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Maximum, BinaryOp::Minimum};

// op(a, b) against the reference on the broadcast operands' elements.
template <class T> void check_binary(BinaryOp op, const Tensor& a, const Tensor& b, const std::string& layout) {
  Tensor out = ops::binary(op, a, b);
  const Shape shape = out.shape();
  CHECK(out.dtype() == DTypeOf<T>::value);
  std::vector<T> ea = elements<T>(ops::expand(a, shape)), eb = elements<T>(ops::expand(b, shape)), want(ea.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = ref_binary(op, ea[i], eb[i]);
  expect_same(elements<T>(out), want,
              std::string(op_name(op)) + " " + std::string(dtype_name(DTypeOf<T>::value)) + " " + layout);
}

template <class T> void binary_layouts() {
  for (BinaryOp op : kArith) {
    for (int64_t n : kSizes) {
      const std::string at = "n=" + std::to_string(n);
      Tensor a = tensor<T>({n}, sample<T>(n, 1)), b = tensor<T>({n}, sample<T>(n, 2));
      check_binary<T>(op, a, b, "contiguous " + at);
      Tensor s = tensor<T>({}, {edges<T>()[size_t(n) % edges<T>().size()]});
      check_binary<T>(op, a, s, "tensor-scalar " + at);
      check_binary<T>(op, s, b, "scalar-tensor " + at);
      Tensor wide = tensor<T>({2 * n + 1}, sample<T>(2 * n + 1, 3));  // every other element
      check_binary<T>(op, ops::slice(wide, 0, 0, 2 * n, 2), ops::slice(wide, 0, 1, 2 * n + 1, 2), "step 2 " + at);
    }
    for (const Shape& sh : kShapes2) {
      const int64_t r = sh[0], c = sh[1];
      const std::string at = shape_str(sh);
      Tensor col = tensor<T>({r, 1}, sample<T>(r, 4)), row = tensor<T>({c}, sample<T>(c, 5));
      check_binary<T>(op, col, row, "outer broadcast " + at);
      Tensor xt = ops::transpose(tensor<T>({c, r}, sample<T>(r * c, 6)), 0, 1);  // (r, c), strides (1, r)
      check_binary<T>(op, xt, row, "transposed with row " + at);
      check_binary<T>(op, col, xt, "column with transposed " + at);
      Tensor y = tensor<T>(sh, sample<T>(r * c, 7));
      check_binary<T>(op, xt, y, "transposed with contiguous " + at);
    }
  }
}

}  // namespace

TEST(binary_ops_match_the_scalar_rules_on_every_layout_float32) {
  Threads t(3);
  binary_layouts<float>();
}
TEST(binary_ops_match_the_scalar_rules_on_every_layout_float64) {
  Threads t(3);
  binary_layouts<double>();
}
TEST(binary_ops_match_the_scalar_rules_on_every_layout_int32) {
  Threads t(3);
  binary_layouts<int32_t>();
}
TEST(binary_ops_match_the_scalar_rules_on_every_layout_int64) {
  Threads t(3);
  binary_layouts<int64_t>();
}

TEST(integer_arithmetic_wraps_as_the_op_table_says) {
  constexpr int32_t kMax = INT32_MAX, kMin = INT32_MIN;
  auto i32 = [](std::vector<int32_t> v) { return tensor<int32_t>({int64_t(v.size())}, v); };
  auto i64 = [](std::vector<int64_t> v) { return tensor<int64_t>({int64_t(v.size())}, v); };
  CHECK(elements<int32_t>(ops::add(i32({kMax, kMin, -1}), i32({1, -1, kMin}))) ==
        (std::vector<int32_t>{kMin, kMax, kMax}));
  CHECK(elements<int32_t>(ops::mul(i32({kMin, 65536, 46341}), i32({-1, 65536, 46341}))) ==
        (std::vector<int32_t>{kMin, 0, -2147479015}));
  CHECK(elements<int32_t>(ops::unary(UnaryOp::Neg, i32({kMin, kMax, 0}))) == (std::vector<int32_t>{kMin, -kMax, 0}));
  CHECK(elements<int32_t>(ops::unary(UnaryOp::Abs, i32({kMin, -5}))) == (std::vector<int32_t>{kMin, 5}));
  CHECK(elements<int64_t>(ops::add(i64({INT64_MAX, INT64_MIN}), i64({1, -1}))) ==
        (std::vector<int64_t>{INT64_MIN, INT64_MAX}));
  CHECK(elements<int64_t>(ops::mul(i64({INT64_MIN, 3037000500LL}), i64({-1, 3037000500LL}))) ==
        (std::vector<int64_t>{INT64_MIN, -9223372036709301616LL}));
  CHECK(elements<int64_t>(ops::unary(UnaryOp::Neg, i64({INT64_MIN}))) == (std::vector<int64_t>{INT64_MIN}));
  // pow by squaring wraps too: 3^40 mod 2^64, 2^31 in int32
  CHECK(elements<int64_t>(ops::binary(BinaryOp::Pow, i64({3, -2, 0, 7}), i64({40, 3, 0, 1}))) ==
        (std::vector<int64_t>{int64_t(12157665459056928801ULL), -8, 1, 7}));
  CHECK(elements<int32_t>(ops::binary(BinaryOp::Pow, i32({2}), i32({31}))) == (std::vector<int32_t>{kMin}));
  CHECK_THROWS(ops::binary(BinaryOp::Pow, i32({2}), i32({-1})), ValueError, "negative integer powers");
  // an int32 sum accumulates in int64 (no wrap); an int64 sum wraps
  Tensor s32 = ops::sum(i32({kMax, kMax, 2}), {}, false);
  CHECK(s32.dtype() == DType::Int64);
  CHECK_EQ(elements<int64_t>(s32)[0], 2 * int64_t(kMax) + 2);
  CHECK_EQ(elements<int64_t>(ops::sum(i64({INT64_MAX, 1, 5}), {}, false))[0], INT64_MIN + 5);
}

TEST(floor_divide_and_remainder_follow_python) {
  auto f64 = [](std::vector<double> v) { return tensor<double>({int64_t(v.size())}, v); };
  auto i32 = [](std::vector<int32_t> v) { return tensor<int32_t>({int64_t(v.size())}, v); };
  CHECK(elements<int32_t>(ops::binary(BinaryOp::FloorDiv, i32({7, -7, 7, -7, INT32_MIN}), i32({2, 2, -2, -2, -1}))) ==
        (std::vector<int32_t>{3, -4, -4, 3, INT32_MIN}));
  CHECK(elements<int32_t>(ops::binary(BinaryOp::Remainder, i32({7, -7, 7, -7, INT32_MIN}), i32({2, 2, -2, -2, -1}))) ==
        (std::vector<int32_t>{1, 1, -1, -1, 0}));
  CHECK_THROWS(ops::binary(BinaryOp::FloorDiv, i32({1}), i32({0})), ZeroDivisionError, "integer division by zero");
  CHECK_THROWS(ops::binary(BinaryOp::Remainder, i32({1, 2}), i32({1, 0})), ZeroDivisionError, "%");
  const double inf = HUGE_VAL;
  expect_same(
      elements<double>(ops::binary(BinaryOp::FloorDiv, f64({-7.5, 7.5, 1, -1, 0, 5}), f64({2, -2, 0, 0, 0, inf}))),
      {-4.0, -4.0, inf, -inf, std::nan(""), 0.0}, "float floor_divide");
  expect_same(elements<double>(
                  ops::binary(BinaryOp::Remainder, f64({-7.5, 7.5, -0.0, 1, 5, -5}), f64({2, -2, 3, 0, inf, inf}))),
              {0.5, -0.5, 0.0, std::nan(""), 5.0, inf}, "float remainder");
}

namespace {

// float32 transcendentals: vec_math's polynomials within its documented bounds of libm in double.
struct Transcendental {
  UnaryOp op;
  double (*ref)(double);
  double ulp;
};
const Transcendental kTranscendentals[] = {
    {UnaryOp::Exp, [](double x) { return std::exp(x); }, 1.01},
    {UnaryOp::Log, [](double x) { return std::log(x); }, 0.91},
    {UnaryOp::Tanh, [](double x) { return std::tanh(x); }, 1.51},
    {UnaryOp::Sigmoid, [](double x) { return x < 0 ? std::exp(x) / (1 + std::exp(x)) : 1 / (1 + std::exp(-x)); }, 2.40},
    {UnaryOp::Sin, [](double x) { return std::sin(x); }, 0.501},
    {UnaryOp::Cos, [](double x) { return std::cos(x); }, 0.501},
    {UnaryOp::Sqrt, [](double x) { return std::sqrt(x); }, 0.5},  // correctly rounded
};

// Exact unary rules: the same result on every path.
template <class T> T ref_exact(UnaryOp op, T v) {
  switch (op) {
    case UnaryOp::Neg:
      if constexpr (std::is_integral_v<T>) return T(Wide<T>(0) - Wide<T>(v));
      else return -v;
    case UnaryOp::Abs:
      if constexpr (std::is_integral_v<T>) return v < 0 ? T(Wide<T>(0) - Wide<T>(v)) : v;
      else return std::fabs(v);
    case UnaryOp::Relu: return v > 0 || v != v ? v : T(0);  // keeps NaN; relu(-0.0) = +0
    default: throw std::logic_error("no reference");
  }
}

template <class T> void exact_unary() {
  for (UnaryOp op : {UnaryOp::Neg, UnaryOp::Abs, UnaryOp::Relu}) {
    for (int64_t n : kSizes) {
      std::vector<T> x = sample<T>(n, 8), want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = ref_exact(op, x[i]);
      expect_same(
          elements<T>(ops::unary(op, tensor<T>({n}, x))), want,
          std::string(op_name(op)) + " " + std::string(dtype_name(DTypeOf<T>::value)) + " n=" + std::to_string(n));
    }
    Tensor xt = ops::transpose(tensor<T>({33, 17}, sample<T>(33 * 17, 9)), 0, 1);
    std::vector<T> x = elements<T>(xt), want(x.size());
    for (size_t i = 0; i < x.size(); ++i) want[i] = ref_exact(op, x[i]);
    expect_same(elements<T>(ops::unary(op, xt)), want, std::string(op_name(op)) + " transposed");
  }
}

}  // namespace

TEST(exact_unary_ops_keep_signs_nan_and_wrap) {
  Threads t(3);
  exact_unary<float>();
  exact_unary<double>();
  exact_unary<int32_t>();
  exact_unary<int64_t>();
}

TEST(float32_transcendentals_are_within_vec_math_bounds) {
  Threads t(3);
  for (const Transcendental& tr : kTranscendentals) {
    for (int64_t n : {int64_t(1), int64_t(17), int64_t(65), int64_t(32769), int64_t(100003)}) {
      std::vector<float> x = sample<float>(n, 10);
      if (tr.op == UnaryOp::Log || tr.op == UnaryOp::Sqrt)  // mostly in the domain, some below it
        for (size_t i = 0; i < x.size(); ++i) x[i] = i % 4 ? std::fabs(x[i]) : -std::fabs(x[i]);
      std::vector<float> got = elements<float>(ops::unary(tr.op, tensor<float>({n}, x)));
      double worst = 0;
      size_t at = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        const double e = test::ulp_error(got[i], tr.ref(double(x[i])));
        if (!(e <= worst)) worst = e, at = i;
      }
      CHECK_MSG(worst <= tr.ulp, op_name(tr.op) << " n=" << n << ": " << worst << " ulp at x = " << test::show(x[at])
                                                << " -> " << test::show(got[at]));
    }
  }
  // integers compute in float32
  Tensor e = ops::unary(UnaryOp::Exp, tensor<int32_t>({2}, {0, 1}));
  CHECK(e.dtype() == DType::Float32);
  CHECK_EQ(elements<float>(e)[0], 1.0f);
  CHECK(e.dtype() == DType::Float32 && test::ulp_error(elements<float>(e)[1], std::exp(1.0)) <= 1.01);
}

TEST(float64_transcendentals_are_libm_bit_for_bit) {
  Threads t(3);
  for (const Transcendental& tr : kTranscendentals) {
    std::vector<double> x = sample<double>(40000, 11);
    std::vector<double> want(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      want[i] = tr.op == UnaryOp::Sigmoid ? 1.0 / (1.0 + std::exp(-x[i])) : tr.ref(x[i]);
    expect_same(elements<double>(ops::unary(tr.op, tensor<double>({40000}, x))), want,
                std::string(op_name(tr.op)) + " f64");
  }
  std::vector<double> x = sample<double>(1000, 12), want(x.size());
  for (size_t i = 0; i < x.size(); ++i) want[i] = ops::vec::gelu(x[i]);
  expect_same(elements<double>(ops::unary(UnaryOp::Gelu, tensor<double>({1000}, x))), want, "gelu f64");
}

TEST(comparisons_and_where) {
  Threads t(3);
  const float nan = std::nanf("");
  Tensor a = tensor<float>({6}, {1, nan, nan, -0.0f, 2, HUGE_VALF});
  Tensor b = tensor<float>({6}, {1, 1, nan, 0.0f, 3, HUGE_VALF});
  Tensor eq = ops::binary(BinaryOp::Eq, a, b);
  CHECK(eq.dtype() == DType::Bool);
  CHECK(elements<bool>(eq) == (std::vector<bool>{true, false, false, true, false, true}));
  CHECK(elements<bool>(ops::binary(BinaryOp::Ne, a, b)) == (std::vector<bool>{false, true, true, false, true, false}));
  CHECK(elements<bool>(ops::binary(BinaryOp::Lt, a, b)) ==
        (std::vector<bool>{false, false, false, false, true, false}));
  CHECK(elements<bool>(ops::binary(BinaryOp::Ge, a, b)) == (std::vector<bool>{true, false, false, true, false, true}));
  // where: the condition, a and b broadcast together; NaN is carried, not compared
  for (int64_t n : {int64_t(7), int64_t(33), int64_t(100003)}) {
    std::vector<float> av = sample<float>(n, 13), bv = sample<float>(n, 14);
    Tensor cond = ops::binary(BinaryOp::Gt, tensor<float>({n}, av), tensor<float>({n}, bv));
    std::vector<bool> c = elements<bool>(cond);
    std::vector<float> want(static_cast<size_t>(n));
    for (size_t i = 0; i < want.size(); ++i) want[i] = c[i] ? av[i] : bv[i];
    expect_same(elements<float>(ops::where(cond, tensor<float>({n}, av), tensor<float>({n}, bv))), want, "where");
  }
  Tensor col = tensor<bool>({3, 1}, {true, false, true});
  Tensor w = ops::where(col, tensor<int32_t>({4}, {1, 2, 3, 4}), tensor<float>({}, {nan}));
  CHECK(w.dtype() == DType::Float32);  // int32 with float32 promotes
  std::vector<float> we = elements<float>(w);
  CHECK(we.size() == 12 && we[0] == 1 && we[3] == 4 && std::isnan(we[4]) && std::isnan(we[7]) && we[11] == 4);
}

TEST(astype_rounds_and_saturates) {
  const float nan = std::nanf(""), inf = HUGE_VALF;
  Tensor f = tensor<float>({10}, {nan, inf, -inf, 3.99f, -3.99f, 1e10f, -1e10f, 2147483520.0f, -0.0f, 0x1p31f});
  CHECK(elements<int32_t>(ops::astype(f, DType::Int32)) ==
        (std::vector<int32_t>{0, INT32_MAX, INT32_MIN, 3, -3, INT32_MAX, INT32_MIN, 2147483520, 0, INT32_MAX}));
  CHECK(elements<int64_t>(ops::astype(f, DType::Int64)) ==
        (std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 3, -3, 10000000000LL, -10000000000LL, 2147483520, 0,
                              2147483648LL}));
  CHECK(elements<bool>(ops::astype(f, DType::Bool)) ==
        (std::vector<bool>{true, true, true, true, true, true, true, true, false, true}));
  // float64 -> float32 rounds to nearest even, overflows to inf, keeps -0 and subnormals
  Tensor d = tensor<double>({6}, {1.0 + 0x1p-24, 1.0 + 3 * 0x1p-24, 1e39, -1e39, -0.0, 0x1p-149});
  expect_same(elements<float>(ops::astype(d, DType::Float32)), {1.0f, 1.0f + 0x1p-22f, inf, -inf, -0.0f, 0x1p-149f},
              "float64 -> float32");
  // int64 -> float32 rounds once; int32 -> float64 is exact
  Tensor i = tensor<int64_t>({3}, {(int64_t(1) << 24) + 1, (int64_t(1) << 24) + 3, INT64_MAX});
  expect_same(elements<float>(ops::astype(i, DType::Float32)), {16777216.0f, 16777220.0f, 0x1p63f}, "int64 -> float32");
  // float16 and bfloat16: round to nearest even; float16 overflows to inf (tensors do not saturate)
  Tensor h = ops::astype(tensor<float>({5}, {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65520.0f, 0x1p-25f, 2049.0f}),
                         DType::Float16);
  expect_same(elements<float>(ops::astype(h, DType::Float32)), {1.0f, 1.0f + 0x1p-9f, inf, 0.0f, 2048.0f}, "float16");
  Tensor bf = ops::astype(tensor<float>({3}, {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -3.0f}), DType::BFloat16);
  expect_same(elements<float>(ops::astype(bf, DType::Float32)), {1.0f, 1.0f + 0x1p-6f, -3.0f}, "bfloat16");
  // half-precision arithmetic computes in float32 and rounds the result once
  Tensor hs = ops::add(ops::astype(tensor<float>({1}, {1.0f}), DType::Float16),
                       ops::astype(tensor<float>({1}, {0x1p-11f + 0x1p-12f}), DType::Float16));
  CHECK(hs.dtype() == DType::Float16);
  CHECK_EQ(elements<float>(ops::astype(hs, DType::Float32))[0], 1.0f + 0x1p-10f);
}

TEST(copy_into_strided_and_broadcast_destinations) {
  Threads t(3);
  for (int64_t n : {int64_t(5), int64_t(40000)}) {
    Tensor dst = tensor<double>({n, 2}, std::vector<double>(size_t(2 * n), -1.0));
    std::vector<float> src = sample<float>(n, 15);
    ops::copy_(ops::select(dst, 1, 1), tensor<float>({n}, src));  // a column: stride 2, float -> double
    std::vector<double> e = elements<double>(dst);
    size_t bad = 0;
    for (int64_t i = 0; i < n; ++i)
      bad += e[size_t(2 * i)] != -1.0 || !test::same(e[size_t(2 * i + 1)], double(src[size_t(i)]));
    CHECK_MSG(bad == 0, "n=" << n << ": " << bad << " elements wrong");
  }
  Tensor m = tensor<int32_t>({3, 4}, std::vector<int32_t>(12, 0));
  ops::copy_(ops::transpose(m, 0, 1), tensor<int32_t>({3}, {7, 8, 9}));  // broadcast into a (4, 3) view
  CHECK(elements<int32_t>(m) == (std::vector<int32_t>{7, 7, 7, 7, 8, 8, 8, 8, 9, 9, 9, 9}));
  CHECK_THROWS(ops::copy_(m, tensor<int32_t>({5}, {1, 2, 3, 4, 5})), ValueError, "cannot be broadcast");
  CHECK_THROWS(ops::copy_(m, tensor<int32_t>({2, 1, 4}, std::vector<int32_t>(8))), ValueError, "could not broadcast");
}

// ---- reductions ----------------------------------------------------------------------------

namespace {

// The reference over `axes` of x's elements (shape sh), in double (floats) or wrapping int64.
template <class T>
std::vector<double> ref_reduce(ReduceOp op, const std::vector<T>& x, const Shape& sh, const ops::Axes& axes) {
  Shape out_shape;
  std::vector<bool> red(sh.size(), axes.empty());
  for (int64_t a : axes) red[size_t(a)] = true;
  std::vector<int64_t> stride_out(sh.size(), 0);
  int64_t n_out = 1;
  for (size_t d = sh.size(); d-- > 0;)
    if (!red[d]) stride_out[d] = n_out, n_out *= sh[d];
  std::vector<double> acc(size_t(n_out), op == ReduceOp::Sum || op == ReduceOp::Mean ? 0.0 : std::nan(""));
  std::vector<int64_t> iacc(size_t(n_out), 0);
  std::vector<bool> first(size_t(n_out), true);
  std::vector<int64_t> idx(sh.size(), 0);
  for (size_t k = 0; k < x.size(); ++k) {
    int64_t o = 0;
    for (size_t d = 0; d < sh.size(); ++d) o += idx[d] * stride_out[d];
    const double v = double(x[k]);
    double& a = acc[size_t(o)];
    if (op == ReduceOp::Sum || op == ReduceOp::Mean) {
      a += v;
      if constexpr (std::is_integral_v<T>)
        iacc[size_t(o)] = int64_t(uint64_t(iacc[size_t(o)]) + uint64_t(int64_t(x[k])));
    } else if (first[size_t(o)]) {
      a = v;
    } else if (!std::isnan(a) && (std::isnan(v) || (op == ReduceOp::Max ? v > a : v < a))) {
      a = v;  // a NaN, once met, stays (numpy)
    }
    first[size_t(o)] = false;
    for (size_t d = sh.size(); d-- > 0 && ++idx[d] == sh[d];) idx[d] = 0;
  }
  if constexpr (std::is_integral_v<T>)
    if (op == ReduceOp::Sum)
      for (size_t i = 0; i < acc.size(); ++i) acc[i] = double(iacc[i]);
  return acc;
}

// Small integers as floats: every partial sum is exact, so sums have one right answer.
template <class T> std::vector<T> small_ints(int64_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::vector<T> v(static_cast<size_t>(n));
  for (auto& e : v) e = T(int(rng() % 2001) - 1000);
  return v;
}

template <class T> void check_reduction(ReduceOp op, const Tensor& x, const std::vector<T>& logical,
                                        const ops::Axes& axes, const std::string& what) {
  Tensor r1, r3;
  {
    Threads one(1);
    r1 = ops::reduce(op, x, axes, false);
  }
  {
    Threads three(3);
    r3 = ops::reduce(op, x, axes, false);
  }
  std::vector<double> want = ref_reduce<T>(op, logical, x.shape(), axes);
  const bool int_sum = std::is_integral_v<T> && op == ReduceOp::Sum;
  const bool int_mean = std::is_integral_v<T> && op == ReduceOp::Mean;
  std::vector<double> got;
  if (int_sum) {
    CHECK(r3.dtype() == DType::Int64);
    for (int64_t v : elements<int64_t>(r3)) got.push_back(double(v));
    expect_same(elements<int64_t>(r1), elements<int64_t>(r3), what + " (1 vs 3 threads)");
  } else if (int_mean) {
    CHECK(r3.dtype() == DType::Float32);
    for (float v : elements<float>(r3)) got.push_back(v);
  } else {
    CHECK(r3.dtype() == DTypeOf<T>::value);
    for (T v : elements<T>(r3)) got.push_back(double(v));
    expect_same(elements<T>(r1), elements<T>(r3), what + " (1 vs 3 threads)");
  }
  if (op == ReduceOp::Mean) {
    int64_t count = 1;
    for (int64_t a : axes) count *= x.shape()[size_t(a)];
    if (axes.empty()) count = x.numel();
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    for (double& w : want) w = double(F(w) * F(1.0 / double(count)));  // the sum, times 1/n in the dtype
  }
  if constexpr (std::is_same_v<T, float>)
    for (double& w : want) w = double(float(w));
  expect_same(got, want, what);
}

template <class T> void reductions() {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max, ReduceOp::Min}) {
    const std::string name = std::string(reduce_op_name(op)) + " " + std::string(dtype_name(DTypeOf<T>::value));
    for (int64_t n : kSizes) {
      if (n == 0 && (op == ReduceOp::Max || op == ReduceOp::Min)) continue;
      std::vector<T> v = std::is_integral_v<T> && op != ReduceOp::Sum ? small_ints<T>(n, 16) : small_ints<T>(n, 17);
      check_reduction<T>(op, tensor<T>({n}, v), v, {}, name + " n=" + std::to_string(n));
    }
    for (const Shape& sh : {Shape{37, 129}, Shape{5, 7, 33}, Shape{3, 40000}, Shape{6, 5, 7, 33}}) {
      std::vector<T> v = small_ints<T>(numel(sh), 18);
      Tensor x = tensor<T>(sh, v);
      std::vector<ops::Axes> axes_sets = {{0}, {int64_t(sh.size()) - 1}, {}};
      if (sh.size() == 3) axes_sets.insert(axes_sets.end(), {{1}, {0, 2}, {1, 2}});
      if (sh.size() == 4) axes_sets.insert(axes_sets.end(), {{0, 2, 3}, {0, 3}});  // kept axes in the middle
      for (const ops::Axes& axes : axes_sets) {
        std::ostringstream what;
        what << name << " " << shape_str(sh) << " axes " << shape_str(axes);
        check_reduction<T>(op, x, v, axes, what.str());
        Tensor xt = ops::transpose(tensor<T>({sh.back(), sh.front()}, small_ints<T>(sh.back() * sh.front(), 19)), 0, 1);
        if (sh.size() == 2) check_reduction<T>(op, xt, elements<T>(xt), axes, what.str() + " transposed");
      }
    }
  }
}

}  // namespace

TEST(reductions_match_the_reference_and_ignore_the_thread_count) {
  reductions<float>();
  reductions<double>();
  reductions<int32_t>();
  reductions<int64_t>();
}

// batch_norm_stats: per-channel mean and 1 / sqrt(var + eps) of (N, C, H, W), against long
// double sums, for channels whose mean is far from zero against their spread (the one-pass sums
// are shifted by each channel's first value); the same bits on any thread count.
template <class T> void batch_norm_statistics() {
  const int64_t N = 7, C = 3, S = 5 * 41;
  std::mt19937 rng(21);
  std::normal_distribution<double> normal;
  std::vector<T> v(size_t(N * C * S));
  for (int64_t i = 0; i < N * C * S; ++i) v[size_t(i)] = T(normal(rng) * 0.5 + (i / S % C) * 1000.0 - 300.0);
  const Tensor x = tensor<T>({N, C, 5, 41}, v);
  Tensor s1, s3;
  {
    Threads one(1);
    s1 = ops::batch_norm_stats(x, {}, {}, true, 0.1, 1e-5);
  }
  {
    Threads three(3);
    s3 = ops::batch_norm_stats(x, {}, {}, true, 0.1, 1e-5);
  }
  CHECK(s3.shape() == (Shape{1, 2, C, 1, 1}));
  expect_same(elements<T>(s1), elements<T>(s3), "batch_norm_stats (1 vs 3 threads)");
  const std::vector<T> got = elements<T>(s3);
  for (int64_t c = 0; c < C; ++c) {
    long double sum = 0, sq = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i) sum += v[size_t((n * C + c) * S + i)];
    const long double mean = sum / (N * S);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < S; ++i)
        sq += (v[size_t((n * C + c) * S + i)] - mean) * (v[size_t((n * C + c) * S + i)] - mean);
    const double rstd = double(1 / std::sqrt(sq / (N * S) + 1e-5L));
    const double tol = std::is_same_v<T, float> ? 1e-5 : 1e-12;
    CHECK(std::abs(double(got[size_t(c)]) - double(mean)) <= tol * std::max(1.0, std::abs(double(mean))));
    CHECK(std::abs(double(got[size_t(C + c)]) - rstd) <= 4 * tol * rstd);
  }
}

TEST(batch_norm_statistics_are_one_pass_yet_exact_for_offset_channels) {
  batch_norm_statistics<float>();
  batch_norm_statistics<double>();
}

TEST(reductions_propagate_nan_and_infinities) {
  Threads t(3);
  const float nan = std::nanf(""), inf = HUGE_VALF;
  for (int64_t n : {int64_t(5), int64_t(100003)}) {
    for (int64_t pos : {int64_t(0), n / 2, n - 1}) {
      std::vector<float> v(size_t(n), 1.0f);
      v[size_t(pos)] = nan;
      Tensor x = tensor<float>({n}, v);
      CHECK_MSG(std::isnan(elements<float>(ops::sum(x, {}, false))[0]), "sum n=" << n << " NaN at " << pos);
      CHECK_MSG(std::isnan(elements<float>(ops::amax(x, {}, false))[0]), "max n=" << n << " NaN at " << pos);
      CHECK_MSG(std::isnan(elements<float>(ops::amin(x, {}, false))[0]), "min n=" << n << " NaN at " << pos);
    }
    std::vector<float> v(size_t(n), -inf);
    CHECK_SAME(elements<float>(ops::amax(tensor<float>({n}, v), {}, false))[0], -inf);
    v[0] = inf;
    CHECK(std::isnan(elements<float>(ops::sum(tensor<float>({n}, v), {}, false))[0]));  // inf + -inf
    CHECK_SAME(elements<float>(ops::amax(tensor<float>({n}, v), {}, false))[0], inf);
  }
  // float32 sums are accurate beyond float32 accumulation (lanes, then block totals in double):
  // adding 10^6 values in [0, 1) one by one in float32 would be off by about 1%
  std::mt19937 rng(20);
  std::vector<float> u(1000000);
  double exact = 0;
  for (float& e : u) exact += e = std::uniform_real_distribution<float>(0, 1)(rng);
  CHECK_NEAR(elements<float>(ops::sum(tensor<float>({1000000}, u), {}, false))[0], exact, 1e-6 * exact);
  // empty: a sum is 0, a mean NaN, max and min have no identity
  Tensor empty = tensor<float>({0, 3}, {});
  CHECK(elements<float>(ops::sum(empty, {0}, false)) == (std::vector<float>{0, 0, 0}));
  CHECK(std::isnan(elements<float>(ops::mean(empty, {}, false))[0]));
  CHECK_THROWS(ops::amax(empty, {0}, false), ValueError, "has no identity");
  CHECK_THROWS(ops::sum(empty, {2}, false), IndexError, "out of range");
  CHECK_THROWS(ops::sum(empty, {0, 0}, false), ValueError, "repeated axis");
}

// ---- GEMM (OpenBLAS, split over the pool for large products) ------------------------------------

// C[b, i, j] = sum_p A[b or 0, i, p] * B[b or 0, p, j] in long double, from the operands' elements.
template <class T> std::vector<T> product(const std::vector<T>& a, const std::vector<T>& b, int64_t batch,
                                          bool a_batched, bool b_batched, int64_t m, int64_t n, int64_t k) {
  std::vector<T> c(size_t(batch * m * n));
  for (int64_t s = 0; s < batch; ++s)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += (long double)a[size_t((a_batched ? s : 0) * m * k + i * k + p)] *
                 b[size_t((b_batched ? s : 0) * k * n + p * n + j)];
        c[size_t(s * m * n + i * n + j)] = T(acc);
      }
  return c;
}

template <class T> void check_matmul(const std::vector<int64_t>& sizes, bool transpose_a, bool transpose_b) {
  std::mt19937 rng(31);
  std::uniform_real_distribution<T> uniform(-1, 1);
  auto random = [&](int64_t n) {
    std::vector<T> v = std::vector<T>(size_t(n));
    for (T& e : v) e = uniform(rng);
    return v;
  };
  const T tol = std::is_same_v<T, float> ? T(2e-6) : T(1e-14);
  for (int64_t m : sizes)
    for (int64_t n : sizes)
      for (int64_t k : sizes) {
        std::vector<T> av = random(m * k), bv = random(k * n);
        // a transposed operand is a strided view of a contiguous [k, m] (or [n, k]) tensor
        Tensor a = transpose_a ? ops::transpose(tensor<T>({k, m}, av), 0, 1) : tensor<T>({m, k}, av);
        Tensor b = transpose_b ? ops::transpose(tensor<T>({n, k}, bv), 0, 1) : tensor<T>({k, n}, bv);
        std::vector<T> want = product(elements<T>(a), elements<T>(b), 1, false, false, m, n, k);
        Tensor c = ops::matmul(a, b);
        CHECK_MSG(c.shape() == (Shape{m, n}), "shape for " << m << "x" << k << " @ " << k << "x" << n);
        std::vector<T> got = elements<T>(c);
        int64_t wrong = 0;
        for (size_t i = 0; i < want.size(); ++i) wrong += !(std::abs(got[i] - want[i]) <= tol * (T(1) + T(k)));
        CHECK_MSG(wrong == 0, wrong << " wrong of " << want.size() << " for m=" << m << " n=" << n << " k=" << k
                                    << " ta=" << transpose_a << " tb=" << transpose_b);
      }
}

TEST(matmul_matches_the_scalar_product_float32) {
  Threads threads(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_matmul<float>({0, 1, 7, 33, 130}, ta, tb);
  check_matmul<float>({257}, false, false);  // large enough to be split over the pool
}

TEST(matmul_matches_the_scalar_product_float64) {
  Threads threads(3);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) check_matmul<double>({1, 5, 66}, ta, tb);
}

// A constant right-hand side (an inference model's weights) takes the packed kernel: each sum
// runs over k in order whatever the split (by panels, or by rows from 48 or 64 rows on 2 threads), so a
// row's bits do not depend on the rows beside it, and two views of one constant storage each get
// their own packing.
TEST(matmul_with_a_constant_operand_matches_the_scalar_product_row_by_row) {
  Threads threads(2);
  std::mt19937 rng(33);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (int64_t m : {1, 2, 3, 5, 8, 9, 17, 64, 77})
    for (int64_t n : {1, 15, 16, 17, 33, 64, 70, 130})
      for (int64_t k : {1, 7, 300})
        for (bool tb : {false, true}) {
          std::vector<float> av(size_t(m * k)), bv(size_t(2 * k * n));
          for (float& e : av) e = uniform(rng);
          for (float& e : bv) e = uniform(rng);
          Tensor both = tb ? tensor<float>({2, n, k}, bv) : tensor<float>({2, k, n}, bv);
          both.storage()->mark_constant();
          for (int64_t half : {0, 1, 0}) {
            Tensor b = ops::select(both, 0, half);
            if (tb) b = ops::transpose(b, 0, 1);
            Tensor a = tensor<float>({m, k}, av);
            std::vector<float> want = product(av, elements<float>(b), 1, false, false, m, n, k);
            std::vector<float> got = elements<float>(ops::matmul(a, b));
            int64_t wrong = 0;
            for (size_t i = 0; i < want.size(); ++i) wrong += !(std::abs(got[i] - want[i]) <= 2e-6f * float(1 + k));
            CHECK_MSG(wrong == 0, wrong << " wrong for m=" << m << " n=" << n << " k=" << k << " tb=" << tb);
            std::vector<float> last(av.end() - k, av.end());  // the last row alone: the same bits
            std::vector<float> alone = elements<float>(ops::matmul(tensor<float>({1, k}, last), b));
            CHECK_MSG(std::equal(alone.begin(), alone.end(), got.end() - n), "row bits for m=" << m << " n=" << n);
          }
        }
}

// A Gemm's bias and relu folded into the product (an inference graph's epilogue) give the bits of
// matmul, then add, then relu: in registers for a constant float32 b, as those ops otherwise.
TEST(matmul_epilogues_give_the_bits_of_the_ops_they_replace) {
  Threads threads(2);
  std::mt19937 rng(34);
  std::uniform_real_distribution<float> uniform(-1, 1);
  auto random = [&](Shape shape) {
    std::vector<float> v(size_t(numel(shape)));
    for (float& e : v) e = uniform(rng);
    return tensor<float>(shape, v);
  };
  for (int64_t m : {1, 3, 9, 66})
    for (int64_t n : {1, 17, 40})
      for (int64_t k : {5, 300})
        for (bool constant : {true, false}) {
          Tensor a = random({m, k}), b = random({k, n}), bias = random({n});
          if (constant) b.storage()->mark_constant();
          for (Tensor c : {Tensor(), bias, ops::reshape(bias, {1, n})})
            for (bool relu : {false, true}) {
              Tensor want = ops::matmul(a, b);
              if (c.defined()) want = ops::add(want, c);
              if (relu) want = ops::unary(ops::UnaryOp::Relu, want);
              const std::vector<float> got = elements<float>(ops::matmul_epilogue(a, b, c, relu)),
                                       expected = elements<float>(want);
              CHECK_MSG(got == expected, "m=" << m << " n=" << n << " k=" << k << " constant=" << constant
                                              << " bias=" << c.defined() << " relu=" << relu);
            }
        }
  Tensor a = random({2, 3}), b = random({3, 4});
  a.set_requires_grad(true);
  CHECK_THROWS(ops::matmul_epilogue(a, b, Tensor(), true), ValueError, "has no backward");
  CHECK_THROWS(ops::matmul_epilogue(random({2, 3}), b, random({3}), false), ValueError, "must hold the product's 4");
}

TEST(batched_matmul_broadcasts_batches_and_promotes_vectors) {
  std::mt19937 rng(32);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> av(4 * 3 * 5), bv(5 * 2);
  for (float& e : av) e = uniform(rng);
  for (float& e : bv) e = uniform(rng);
  // [4, 3, 5] @ [5, 2]: the matrix is broadcast over the batch
  std::vector<float> want = product(av, bv, 4, true, false, 3, 2, 5);
  Tensor c = ops::matmul(tensor<float>({4, 3, 5}, av), tensor<float>({5, 2}, bv));
  CHECK(c.shape() == (Shape{4, 3, 2}));
  std::vector<float> got = elements<float>(c);
  for (size_t i = 0; i < want.size(); ++i) CHECK_NEAR(got[i], want[i], 1e-5);
  // vector @ matrix and matrix @ vector drop the promoted dimension
  std::vector<float> v(bv.begin(), bv.begin() + 5);
  CHECK(ops::matmul(tensor<float>({5}, v), tensor<float>({5, 2}, bv)).shape() == (Shape{2}));
  CHECK(ops::matmul(tensor<float>({3, 5}, std::vector<float>(av.begin(), av.begin() + 15)), tensor<float>({5}, v))
            .shape() == (Shape{3}));
  CHECK_THROWS(ops::matmul(tensor<float>({2, 5}, std::vector<float>(10)), tensor<float>({2, 5}, bv)), ValueError,
               "not aligned: 5 != 2");
}
