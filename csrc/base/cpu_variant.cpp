#include "base/cpu_variant.h"

#include <array>

#include "base/env.h"
#include "base/error.h"
#include "nexus/config.h"

#if defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

namespace nexus {
namespace {

struct Feature {
  const char* name;
  bool present;
};

// The features each variant adds to the one below it, as /proc/cpuinfo spells them. x86-64-v3
// and -v4 are the psABI levels (https://gitlab.com/x86-psABIs/x86-64-ABI); the compiler may use
// any of their instructions once the variant is compiled with that -march.
std::vector<Feature> added(CpuVariant v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  auto f = [](const char* name, bool present) { return Feature{name, present}; };
  switch (v) {
    case CpuVariant::baseline:
      return {f("sse4_2", __builtin_cpu_supports("sse4.2")), f("popcnt", __builtin_cpu_supports("popcnt"))};
    case CpuVariant::avx2:
      return {f("avx", __builtin_cpu_supports("avx")),    f("avx2", __builtin_cpu_supports("avx2")),
              f("fma", __builtin_cpu_supports("fma")),    f("f16c", __builtin_cpu_supports("f16c")),
              f("bmi1", __builtin_cpu_supports("bmi")),   f("bmi2", __builtin_cpu_supports("bmi2")),
              f("movbe", __builtin_cpu_supports("movbe"))};
    case CpuVariant::avx512:
      return {f("avx512f", __builtin_cpu_supports("avx512f")), f("avx512bw", __builtin_cpu_supports("avx512bw")),
              f("avx512cd", __builtin_cpu_supports("avx512cd")), f("avx512dq", __builtin_cpu_supports("avx512dq")),
              f("avx512vl", __builtin_cpu_supports("avx512vl"))};
    default: return {};
  }
#elif defined(__aarch64__) && defined(__linux__)
  const unsigned long hw = getauxval(AT_HWCAP);
  switch (v) {
    case CpuVariant::baseline: return {{"asimd", (hw & HWCAP_ASIMD) != 0}};
    default: return {};
  }
#else
  return {};
#endif
}

struct Built {
  CpuVariant variant;
  const char* name;
  bool built;
  const char* march;  // "" where the compiler's default is the baseline
};

// From nexus/config.h, which CMake writes from NEXUS_ARCH (cmake/NexusOptions.cmake).
constexpr std::array<Built, 4> kVariants = {{
    {CpuVariant::baseline, "baseline", NEXUS_CPU_HAS_baseline, NEXUS_CPU_MARCH_baseline},
    {CpuVariant::avx2, "avx2", NEXUS_CPU_HAS_avx2, NEXUS_CPU_MARCH_avx2},
    {CpuVariant::avx512, "avx512", NEXUS_CPU_HAS_avx512, NEXUS_CPU_MARCH_avx512},
    {CpuVariant::native, "native", NEXUS_CPU_HAS_native, NEXUS_CPU_MARCH_native},
}};

const Built& entry(CpuVariant v) {
  for (const Built& b : kVariants)
    if (b.variant == v) return b;
  return kVariants.front();
}

// What a variant needs: its features and those of every variant below it.
std::vector<Feature> required(CpuVariant v) {
  std::vector<Feature> all;
  for (CpuVariant level : {CpuVariant::baseline, CpuVariant::avx2, CpuVariant::avx512}) {
    const std::vector<Feature> more = added(level);
    all.insert(all.end(), more.begin(), more.end());
    if (level == v) return all;
  }
  return added(v);
}

std::string built_names() {
  std::string s;
  for (CpuVariant v : built_cpu_variants()) s += std::string(s.empty() ? "" : ", ") + cpu_variant_name(v);
  return s;
}

}  // namespace

const char* cpu_variant_name(CpuVariant v) { return entry(v).name; }

const char* cpu_variant_march(CpuVariant v) { return entry(v).march; }

std::vector<CpuVariant> built_cpu_variants() {
  std::vector<CpuVariant> out;
  for (const Built& b : kVariants)
    if (b.built) out.push_back(b.variant);
  return out;
}

bool cpu_supports(CpuVariant v, std::string* why) {
  std::string missing;
  for (const Feature& f : required(v))
    if (!f.present) missing += std::string(missing.empty() ? "" : " ") + f.name;
  if (why) *why = missing.empty() ? "" : "it lacks " + missing;
  return missing.empty();
}

std::string cpu_features() {
  std::string s;
  for (const Built& b : kVariants)
    for (const Feature& f : added(b.variant))
      if (f.present) s += std::string(s.empty() ? "" : " ") + f.name;
  return s;
}

CpuVariant parse_cpu_variant(const std::string& text) {
  const std::vector<CpuVariant> built = built_cpu_variants();
  if (text == "auto") {
    CpuVariant best = built.front();  // the baseline (or the one native variant) runs anywhere built for
    for (CpuVariant v : built)
      if (cpu_supports(v)) best = v;
    return best;
  }
  for (CpuVariant v : built) {
    if (text != cpu_variant_name(v)) continue;
    std::string why;
    NX_CHECK(cpu_supports(v, &why), "NEXUS_CPU_VARIANT=", text, ": this CPU cannot run it (", why,
             "); valid here: auto or one of ", built_names());
    return v;
  }
  throw ValueError(
      str("NEXUS_CPU_VARIANT=", text, " is not a variant this build carries; valid: auto, ", built_names()));
}

CpuVariant active_cpu_variant() {
  static const CpuVariant v = parse_cpu_variant(knob("NEXUS_CPU_VARIANT"));
  return v;
}

}  // namespace nexus
