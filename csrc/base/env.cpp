#include "base/env.h"

#include <cstdlib>
#include <cstring>

#include "base/error.h"

namespace nexus {

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> list = {
      {"NEXUS_NUM_THREADS", "", "intra-op threads for kernels and BLAS (default: the cores this process may use)"},
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
