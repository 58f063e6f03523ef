// CPU variants. The hot loops (ops/cpu kernels, the fused-kernel interpreter, the codecs) are
// compiled once per instruction set the build carries -- x86-64-v2 (baseline), x86-64-v3
// (AVX2+FMA+F16C) and x86-64-v4 (AVX-512) on x86; armv8-a (NEON) alone on ARM so far; a
// NEXUS_ARCH=<march> build carries one, "native" -- and the rest of the core for the baseline.
// One variant is chosen per process, at first use: NEXUS_CPU_VARIANT when set, else the best the
// CPU supports. An explicit table of function pointers per subsystem (ops::cpu::kernels(), ...)
// rather than GCC's target_clones: the kernels are templates and lambdas run on the thread pool,
// which function multiversioning does not reach, and a table makes the choice one visible value
// that `nexus info` prints and tests force.
//
// A variant's sources are compiled with -DNX_CPU_VARIANT=<name> and put their code in
// namespace <subsystem>::NX_CPU_VARIANT; headers whose inline code they share with baseline code
// (vec_math.h, kernel_ops.h, loops.h) open an inline namespace of that name, so no function
// compiled for AVX-512 can stand in for the baseline's copy at link time.
#pragma once

#include <string>
#include <type_traits>
#include <vector>

namespace nexus {

enum class CpuVariant { baseline, avx2, avx512, native };
template <CpuVariant V> using VariantTag = std::integral_constant<CpuVariant, V>;

// Declares a subsystem's table getter, `const Type& name(VariantTag<V>)`, once per variant; each
// variant's sources define theirs, and with_cpu_variant (cpu_variant_dispatch.h) calls the
// active one.
#define NX_CPU_VARIANT_TABLES(Type, name)                               \
  const Type& name(::nexus::VariantTag<::nexus::CpuVariant::baseline>); \
  const Type& name(::nexus::VariantTag<::nexus::CpuVariant::avx2>);     \
  const Type& name(::nexus::VariantTag<::nexus::CpuVariant::avx512>);   \
  const Type& name(::nexus::VariantTag<::nexus::CpuVariant::native>)

const char* cpu_variant_name(CpuVariant v);
// The -march the variant was compiled with ("x86-64-v3"; "native" for NEXUS_ARCH=native).
const char* cpu_variant_march(CpuVariant v);
// The variants this build carries, baseline first.
std::vector<CpuVariant> built_cpu_variants();
// Whether this CPU (and OS) can run the variant; when not, `why` names the missing features.
bool cpu_supports(CpuVariant v, std::string* why = nullptr);
// The features the choice looked at, as the kernel names them ("sse4_2 avx2 fma f16c avx512f ...").
std::string cpu_features();
// The variant NEXUS_CPU_VARIANT's text names: "auto" is the best this CPU runs. A name the build
// does not carry, or one this CPU cannot run, is a ValueError naming the valid ones.
CpuVariant parse_cpu_variant(const std::string& text);
// The variant in use: parse_cpu_variant(NEXUS_CPU_VARIANT), read once.
CpuVariant active_cpu_variant();

}  // namespace nexus
