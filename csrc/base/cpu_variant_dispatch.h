// with_cpu_variant(): the switch from the active CPU variant to a subsystem's table. Apart from
// cpu_variant.h because it needs the build's list of variants (nexus/config.h), which the
// variant sources themselves do not.
#pragma once

#include "base/cpu_variant.h"
#include "nexus/config.h"

namespace nexus {

// Calls fn(VariantTag<V>{}) for the active variant V, so each subsystem picks its table (an
// overload per variant, defined for the variants built).
template <class Fn> decltype(auto) with_cpu_variant(Fn&& fn) {
  using C = CpuVariant;
#if NEXUS_CPU_HAS_native
  return fn(VariantTag<C::native>{});
#else
  switch (active_cpu_variant()) {
#if NEXUS_CPU_HAS_avx2
    case C::avx2: return fn(VariantTag<C::avx2>{});
#endif
#if NEXUS_CPU_HAS_avx512
    case C::avx512: return fn(VariantTag<C::avx512>{});
#endif
    default: return fn(VariantTag<C::baseline>{});
  }
#endif
}

}  // namespace nexus
