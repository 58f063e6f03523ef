// This variant's table of CPU kernels (kernels.h): each kernel file fills its entries.
#include "ops/cpu/kernels.h"

namespace nexus::ops::cpu {

const Kernels& kernels_for(VariantTag<CpuVariant::NX_CPU_VARIANT>) {
  static const Kernels table = [] {
    Kernels k{};
    NX_CPU_VARIANT::add_elementwise(k);
    NX_CPU_VARIANT::add_reduce(k);
    NX_CPU_VARIANT::add_conv(k);
    NX_CPU_VARIANT::add_pool(k);
    NX_CPU_VARIANT::add_xent(k);
    NX_CPU_VARIANT::add_optim(k);
    NX_CPU_VARIANT::add_gemm(k);
    return k;
  }();
  return table;
}

}  // namespace nexus::ops::cpu
