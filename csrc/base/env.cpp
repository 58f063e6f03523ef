#include "base/env.h"

#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace nexus {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> list = {
      {"NEXUS_NUM_THREADS", "", "intra-op threads for kernels and BLAS (default: the cores this process may use)"},
      {"NEXUS_ALLOC_CACHE_MB", "1024", "MiB of freed tensor memory kept for reuse (0: give it back at once)"},
      {"NEXUS_JIT", "1", "1: compile fused kernels with the C++ compiler ($CXX or c++); 0: run them in the interpreter"},
      {"NEXUS_CACHE_DIR", "", "compiled-kernel cache (default: $XDG_CACHE_HOME/nexus or ~/.cache/nexus)"},
      {"NEXUS_JIT_CXXFLAGS", "-O3 -march=native", "optimisation flags for fused kernels (-std=c++20 -fPIC -shared are always added)"},
      {"NEXUS_NVRTC", "", "libnvrtc to load for f.ptx(), the only one tried when set (default: the nvidia-cuda-nvrtc wheel, then $CUDA_HOME, /usr/local/cuda)"},
      {"NEXUS_COMM_TIMEOUT", "300", "seconds any one distributed wait (ring message, barrier, broadcast) may take before CommError"},
  };
  return list;
}

std::string knob(const char* name) {
  for (const Knob& k : knobs()) {
    if (std::strcmp(k.name, name) != 0) continue;
    const char* v = std::getenv(name);
    return v && *v ? v : k.default_value;
  }
  NX_ASSERT(false, "unknown knob ", name);
  return {};
}

}  // namespace nexus
