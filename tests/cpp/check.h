// The core's C++ tests' own small harness (no framework to fetch). TEST(name) registers a test; the
// CHECK macros record a failure (file:line, the expression and the values) and let the test go on;
// an exception escaping a test fails it. main() runs every test, or those whose names contain an
// argument, and exits 1 when any failed. Two more outcomes, as pytest's:
//   TEST_XFAIL(name, "why")  a known bug of the core: the test must fail (-v shows how), and passing
//                            fails the run (strict, so a fix is noticed and the marker removed);
//   SKIP("why")              inside a test: it cannot run here; exit code 77 (CTest's "skipped")
//                            when every test skipped.
// A test that runs no check fails: it could never have caught anything. Checks are made on the
// test's own thread (workers record what they saw; the test checks it after).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "base/cpu_variant.h"

namespace nexus::test {

struct Case {
  const char* name;
  void (*fn)();
  const char* xfail;  // the known bug, or nullptr
};

inline std::vector<Case>& registry() {
  static std::vector<Case> cases;
  return cases;
}

struct Register {
  Register(const char* name, void (*fn)(), const char* xfail) { registry().push_back({name, fn, xfail}); }
};

// The running test's counts and failure messages.
struct State {
  int64_t checks = 0, failed = 0;
  std::string log;
  const char* skipped = nullptr;
};
inline State& state() {
  static State s;
  return s;
}

struct Skip {};

// Values as a failure message shows them: floats with every digit and in hex (their bits), 1-byte
// integers as numbers.
template <class T> std::string show(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_floating_point_v<T>) {
    os.precision(std::numeric_limits<T>::max_digits10);
    os << v << " (" << std::hexfloat << v << ")";
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_enum_v<T>) {
    os << "enum " << static_cast<int64_t>(v);
  } else if constexpr (std::is_integral_v<T> && sizeof(T) == 1) {
    os << int(v);
  } else {
    os << v;
  }
  return os.str();
}

inline void fail(const char* file, int line, const std::string& what) {
  State& s = state();
  ++s.failed;
  if (s.failed <= 10) s.log += "  " + std::string(file) + ":" + std::to_string(line) + ": " + what + "\n";
  if (s.failed == 11) s.log += "  (further failures of this test not shown)\n";
}

// Bitwise equal, or both NaN: the check for results that have one right answer (-0.0 != +0.0).
template <class T> bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (a != a || b != b) return a != a && b != b;
    return a == b && std::signbit(a) == std::signbit(b);
  } else {
    return a == b;
  }
}

// |got - want| in units in the last place of float at want (the spacing of floats in want's
// binade; 2^-149 among subnormals). Both NaN, or the same infinity: 0. A float result of a
// function is checked against its double (or better) reference this way.
inline double ulp_error(float got, double want) {
  if (got != got || want != want) return got != got && want != want ? 0.0 : HUGE_VAL;
  if (std::isinf(got) || std::isinf(want)) {
    if (double(got) == want) return 0.0;
    // an infinite result for a finite reference beyond FLT_MAX is correctly rounded overflow
    if (std::isinf(got) && std::fabs(want) >= 0x1.ffffffp127 && std::signbit(got) == std::signbit(want)) return 0.0;
    return HUGE_VAL;
  }
  int e = want == 0 ? -149 : std::ilogb(want) - 23;
  if (e < -149) e = -149;
  return std::fabs(double(got) - want) / std::ldexp(1.0, e);
}

}  // namespace nexus::test

#define NX_TEST_CAT_(a, b) a##b
#define NX_TEST_DEFINE_(name, xfail)                                                         \
  static void name();                                                                        \
  static const ::nexus::test::Register NX_TEST_CAT_(name, _registered){#name, &name, xfail}; \
  static void name()
#define TEST(name) NX_TEST_DEFINE_(name, nullptr)
#define TEST_XFAIL(name, why) NX_TEST_DEFINE_(name, why)

#define SKIP(why)                           \
  do {                                      \
    ::nexus::test::state().skipped = (why); \
    throw ::nexus::test::Skip{};            \
  } while (0)

#define CHECK(cond)                                                                    \
  do {                                                                                 \
    ++::nexus::test::state().checks;                                                   \
    if (!(cond)) ::nexus::test::fail(__FILE__, __LINE__, "CHECK(" #cond ") is false"); \
  } while (0)

// CHECK with a message built from the values (anything ostream takes), shown when it fails.
#define CHECK_MSG(cond, ...)                                  \
  do {                                                        \
    ++::nexus::test::state().checks;                          \
    if (!(cond)) {                                            \
      std::ostringstream nx_os_;                              \
      nx_os_ << "CHECK(" #cond ") is false: " << __VA_ARGS__; \
      ::nexus::test::fail(__FILE__, __LINE__, nx_os_.str());  \
    }                                                         \
  } while (0)

#define NX_CHECK_BINARY_(name, a, b, pred)                                                                            \
  do {                                                                                                                \
    ++::nexus::test::state().checks;                                                                                  \
    const auto nx_a_ = (a); /* copies: `a` may be an element of a temporary */                                        \
    const auto nx_b_ = (b);                                                                                           \
    if (!(pred))                                                                                                      \
      ::nexus::test::fail(                                                                                            \
          __FILE__, __LINE__,                                                                                         \
          std::string(name "(" #a ", " #b "): ") + ::nexus::test::show(nx_a_) + " vs " + ::nexus::test::show(nx_b_)); \
  } while (0)

#define CHECK_EQ(a, b) NX_CHECK_BINARY_("CHECK_EQ", a, b, nx_a_ == nx_b_)
#define CHECK_NE(a, b) NX_CHECK_BINARY_("CHECK_NE", a, b, nx_a_ != nx_b_)
#define CHECK_LE(a, b) NX_CHECK_BINARY_("CHECK_LE", a, b, nx_a_ <= nx_b_)
#define CHECK_LT(a, b) NX_CHECK_BINARY_("CHECK_LT", a, b, nx_a_ < nx_b_)
// Bitwise equal or both NaN (see same()).
#define CHECK_SAME(a, b) NX_CHECK_BINARY_("CHECK_SAME", a, b, ::nexus::test::same(nx_a_, nx_b_))
// |a - b| <= tol (as doubles; both NaN or the same infinity also pass).
#define CHECK_NEAR(a, b, tol)                                                               \
  NX_CHECK_BINARY_("CHECK_NEAR", a, b,                                                      \
                   (double(nx_a_) == double(nx_b_) || (nx_a_ != nx_a_ && nx_b_ != nx_b_) || \
                    std::fabs(double(nx_a_) - double(nx_b_)) <= double(tol)))
// A float result within max_ulp of a double reference (see ulp_error()).
#define CHECK_ULP(got, want, max_ulp) \
  NX_CHECK_BINARY_("CHECK_ULP", got, want, ::nexus::test::ulp_error(nx_a_, nx_b_) <= double(max_ulp))

// expr throws Type (or a subclass) whose what() contains the string literal `text` ("": any).
#define CHECK_THROWS(expr, Type, text)                                                                               \
  do {                                                                                                               \
    ++::nexus::test::state().checks;                                                                                 \
    std::string nx_got_ = "nothing was thrown";                                                                      \
    try {                                                                                                            \
      (void)(expr);                                                                                                  \
    } catch (const Type& e) {                                                                                        \
      nx_got_ = std::strstr(e.what(), text) ? "" : std::string(#Type " without \"" text "\": ") + e.what();          \
    } catch (const std::exception& e) {                                                                              \
      nx_got_ = std::string("another exception: ") + e.what();                                                       \
    }                                                                                                                \
    if (!nx_got_.empty()) ::nexus::test::fail(__FILE__, __LINE__, "CHECK_THROWS(" #expr ", " #Type "): " + nx_got_); \
  } while (0)

#ifndef NX_TEST_NO_MAIN
int main(int argc, char** argv) {
  using namespace nexus::test;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each line out before a crash can lose it
  bool verbose = false;
  std::vector<const char*> filters;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "-v") == 0) verbose = true;
    else filters.push_back(argv[i]);
  }
  // CMakeLists.txt runs the kernel tests once per CPU variant built; one this CPU cannot run is
  // skipped, saying why (a name the build lacks fails below, at the first kernel).
  if (const char* want = std::getenv("NEXUS_CPU_VARIANT"); want && *want) {
    for (nexus::CpuVariant v : nexus::built_cpu_variants()) {
      std::string why;
      if (std::strcmp(want, nexus::cpu_variant_name(v)) == 0 && !nexus::cpu_supports(v, &why)) {
        std::printf("SKIP  every test: NEXUS_CPU_VARIANT=%s, and this CPU cannot run it (%s)\n", want, why.c_str());
        return 77;
      }
    }
  }
  int run = 0, failed = 0, skipped = 0;
  for (const Case& c : registry()) {
    bool wanted = filters.empty();
    for (const char* f : filters) wanted = wanted || std::strstr(c.name, f);
    if (!wanted) continue;
    ++run;
    state() = State{};
    std::string error;
    try {
      c.fn();
    } catch (const Skip&) {
    } catch (const std::exception& e) {
      error = e.what();
    } catch (...) {
      error = "an exception not derived from std::exception";
    }
    State& s = state();
    if (s.skipped) {
      ++skipped;
      std::printf("SKIP  %s: %s\n", c.name, s.skipped);
      continue;
    }
    if (!error.empty()) s.log += "  uncaught exception: " + error + "\n";
    if (s.checks == 0 && error.empty()) s.log += "  the test ran no check\n";
    bool bad = s.failed > 0 || !error.empty() || s.checks == 0;
    if (c.xfail) {
      std::printf("%s %s: %s\n%s", bad ? "XFAIL" : "XPASS", c.name, c.xfail, verbose ? s.log.c_str() : "");
      if (!bad) {
        ++failed;
        std::printf("  the known bug no longer shows: make it a TEST\n");
      }
      continue;
    }
    if (bad) ++failed;
    std::printf("%s  %s (%lld checks, %lld failed)\n%s", bad ? "FAIL" : "ok  ", c.name, (long long)s.checks,
                (long long)s.failed, s.log.c_str());
  }
  std::printf("%d tests, %d failed, %d skipped\n", run, failed, skipped);
  if (run == 0) return 1;  // a filter that matches nothing is a mistake
  if (failed) return 1;
  return skipped == run ? 77 : 0;
}
#endif
