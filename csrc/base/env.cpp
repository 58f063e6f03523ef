#include "base/env.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "base/cpu_variant.h"
#include "base/error.h"

namespace nexus {

const std::vector<Knob>& knobs() {
  using K = KnobKind;
  static const std::vector<Knob> list = {
      {"NEXUS_NUM_THREADS", "",
       "intra-op threads for kernels and BLAS, 1..1024 (default: the cores this process may use, shared among "
       "the unbound MPI ranks of its node)",
       K::Int, 1, 1024},
      {"NEXUS_ALLOC_CACHE_MB", "1024", "MiB of freed tensor memory kept for reuse (0: give it back at once)", K::Int, 0,
       int64_t(1) << 30},
      {"NEXUS_JIT", "1",
       "1/true/yes/on: compile fused kernels with the C++ compiler ($CXX or c++); "
       "0/false/no/off: run them in the interpreter",
       K::Bool},
      {"NEXUS_CACHE_DIR", "", "compiled-kernel cache (default: $XDG_CACHE_HOME/nexus or ~/.cache/nexus)"},
      {"NEXUS_JIT_CXXFLAGS", "",
       "optimisation flags for fused kernels, split on spaces (default: -O3 and the -march of the CPU variant "
       "in use, so fused kernels compute as the eager kernels do) "
       "(-std=c++20 -fPIC -shared -ffp-contract=off are always added; flags that change floating-point "
       "results, such as -ffast-math, are refused)",
       K::CxxFlags},
      {"NEXUS_CPU_VARIANT", "auto",
       "the CPU kernels' instruction set: auto (the best this CPU runs) or one the build carries (baseline, "
       "avx2, avx512 on x86; baseline on ARM; native for a NEXUS_ARCH build); `nexus info` lists them",
       K::CpuVariant},
      {"NEXUS_NVRTC", "",
       "libnvrtc to load for f.ptx(), the only one tried when set (default: the nvidia-cuda-nvrtc wheel, then "
       "$CUDA_HOME, /usr/local/cuda)"},
      {"NEXUS_CUDA_TF32", "0",
       "1/true/yes/on: float32 matmuls on CUDA may round their inputs to TF32 on tensor cores (faster, 10-bit "
       "mantissa; nx.cuda.set_allow_tf32 changes it at run time)",
       K::Bool},
      {"NEXUS_COMM_TIMEOUT", "300",
       "seconds any one distributed wait (ring message, barrier, broadcast) may take before CommError", K::Seconds},
      {"NEXUS_DP_SHARED_MEMORY", "1",
       "1/true/yes/on: data-parallel ranks on one machine step through a shared-memory segment, the optimizer "
       "update sharded among them; 0/false/no/off: through the ring (one rank saying 0 makes every rank use it)",
       K::Bool},
      {"NEXUS_NCCL", "1",
       "1/true/yes/on: data-parallel ranks whose models are all on GPUs sum their gradients there with NCCL; "
       "0/false/no/off: through host copies and the MPI ring (one rank saying 0 makes every rank use the ring)",
       K::Bool},
  };
  return list;
}

namespace {

const Knob& find(const char* name) {
  for (const Knob& k : knobs())
    if (std::strcmp(k.name, name) == 0) return k;
  NX_ASSERT(false, "unknown knob ", name);
  return knobs().front();
}

std::string trimmed(const std::string& s) {
  size_t b = s.find_first_not_of(" \t\n\r"), e = s.find_last_not_of(" \t\n\r");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

std::string lower(std::string s) {
  for (char& c : s) c = char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  return s;
}

// Flags that change what a floating-point operation returns (GCC and Clang manuals). Fused
// kernels are compared bit for bit with the eager ops, so none of these may reach the compiler.
// Allowed for a reason: -fno-math-errno (only errno, which kernels never read) and
// -fno-trapping-math (only which FP exceptions may be raised; values are unchanged).
struct Refused {
  const char* flag;
  const char* why;
};
constexpr Refused kRefused[] = {
    {"-ffast-math", "assumes there is no NaN or infinity and reorders arithmetic"},
    {"-Ofast", "turns on -ffast-math"},
    {"-funsafe-math-optimizations", "reorders arithmetic and replaces division by reciprocals"},
    {"-fassociative-math", "reorders sums and products"},
    {"-freciprocal-math", "replaces x / y by x * (1 / y)"},
    {"-ffinite-math-only", "assumes there is no NaN or infinity"},
    {"-fno-honor-infinities", "assumes there is no infinity"},
    {"-fno-honor-nans", "assumes there is no NaN"},
    {"-fno-signed-zeros", "treats -0.0 as 0.0"},
    {"-fcx-limited-range", "drops the scaling in complex division"},
    {"-fcx-fortran-rules", "drops the scaling in complex division"},
    {"-fapprox-func", "lets math functions be replaced by approximations"},
    {"-menable-unsafe-fp-math", "reorders arithmetic"},
    {"-mdaz-ftz", "flushes subnormal numbers to zero in the whole process"},
    {"-fexcess-precision=fast", "keeps intermediates in wider precision"},
};
// Options with a value: only `allowed` values pass.
struct Pinned {
  const char* prefix;
  const char* allowed;  // space separated
  const char* why;
};
constexpr Pinned kPinned[] = {
    {"-ffp-contract=", "off",
     "fuses a * b + c into one rounding (kernels are built with -ffp-contract=off so "
     "fused and unfused results are bit-identical)"},
    {"-ffp-model=", "precise strict", "relaxes floating-point semantics"},
    {"-mfpmath=", "sse", "computes in x87 extended precision"},
    {"-fdenormal-fp-math=", "ieee", "flushes subnormal numbers to zero"},
    {"-fdenormal-fp-math-f32=", "ieee", "flushes subnormal numbers to zero"},
};

// Throws ValueError when a flag in `flags` would change floating-point results.
void check_cxx_flags(const Knob& k, const std::string& flags) {
  auto refuse = [&](const std::string& flag, const std::string& why) {
    throw ValueError(str(k.name, "='", flags, "': ", flag, " is refused: it ", why,
                         ", so fused kernels would not compute what the eager ops compute. Remove it; "
                         "optimisation flags such as -O2, -O3, -march=native are fine"));
  };
  for (const std::string& w : split_flags(flags)) {
    if (w[0] == '@') refuse(w, "reads flags from a file, which cannot be checked");
    for (const Refused& r : kRefused)
      if (w == r.flag) refuse(w, r.why);
    for (const Pinned& p : kPinned) {
      size_t n = std::strlen(p.prefix);
      if (w.compare(0, n, p.prefix) != 0) continue;
      std::istringstream ok(p.allowed);
      bool allowed = false;
      for (std::string a; ok >> a;) allowed |= w.substr(n) == a;
      if (!allowed) refuse(w, str(p.why, " (allowed: ", p.prefix, p.allowed, ")"));
    }
  }
}

std::optional<std::string> from_env(const Knob& k) {
  const char* v = std::getenv(k.name);
  if (v && *v) return std::string(v);
  return std::nullopt;
}

std::string text_of(const Knob& k) { return from_env(k).value_or(k.default_value); }

bool parse_bool(const Knob& k, const std::string& text) {
  std::string v = lower(trimmed(text));
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  throw ValueError(
      str(k.name, "='", text, "' is not a boolean; valid: 1, 0, true, false, yes, no, on, off ", "(any case)"));
}

std::optional<int64_t> parse_int(const Knob& k, const std::string& text) {
  std::string v = trimmed(text);
  if (v.empty()) return std::nullopt;  // the default is computed (e.g. the core count)
  int64_t n = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < k.min || n > k.max)
    throw ValueError(str(k.name, "='", text, "' is not valid; expected an integer in [", k.min, ", ", k.max, "]"));
  return n;
}

double parse_seconds(const Knob& k, const std::string& text) {
  std::string v = trimmed(text);
  double s = -1;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), s);
  if (ec != std::errc() || end != v.data() + v.size() || !(s > 0) || !std::isfinite(s))
    throw ValueError(str(k.name, "='", text, "' is not valid; expected a finite number of seconds > 0 (e.g. 60)"));
  return s;
}

const Knob& checked(const char* name, KnobKind kind) {
  const Knob& k = find(name);
  NX_ASSERT(k.kind == kind, "knob ", name, " read as the wrong kind");
  return k;
}

}  // namespace

std::vector<std::string> split_flags(const std::string& flags) {
  std::vector<std::string> out;
  std::istringstream words(flags);
  for (std::string w; words >> w;) out.push_back(w);
  return out;
}

std::string knob(const char* name) {
  const Knob& k = find(name);
  std::string text = text_of(k);
  switch (k.kind) {
    case KnobKind::Bool: parse_bool(k, text); break;
    case KnobKind::Int: parse_int(k, text); break;
    case KnobKind::Seconds: parse_seconds(k, text); break;
    case KnobKind::CxxFlags: check_cxx_flags(k, text); break;
    case KnobKind::CpuVariant: parse_cpu_variant(text); break;
    case KnobKind::Text: break;
  }
  return text;
}

bool knob_bool(const char* name) {
  const Knob& k = checked(name, KnobKind::Bool);
  return parse_bool(k, text_of(k));
}

std::optional<int64_t> knob_int(const char* name) {
  const Knob& k = checked(name, KnobKind::Int);
  return parse_int(k, text_of(k));
}

double knob_seconds(const char* name) {
  const Knob& k = checked(name, KnobKind::Seconds);
  return parse_seconds(k, text_of(k));
}

static KnobValue typed(const Knob& k) {
  switch (k.kind) {
    case KnobKind::Bool: return knob_bool(k.name);
    case KnobKind::Int: {
      std::optional<int64_t> n = knob_int(k.name);
      if (n) return *n;
      return std::monostate{};
    }
    case KnobKind::Seconds: return knob_seconds(k.name);
    default: return knob(k.name);
  }
}

KnobValue knob_value(const std::string& name) {
  std::string known;
  for (const Knob& k : knobs()) {
    if (k.name == name) return typed(k);
    known += str(known.empty() ? "" : ", ", k.name);
  }
  throw ValueError(str("unknown knob '", name, "'; the knobs are ", known));
}

}  // namespace nexus
