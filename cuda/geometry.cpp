// Launch geometry (geometry.h) and the launch check the kernel files share: host code that tests
// call without a GPU.
#include "geometry.h"

#include <algorithm>

#include "device_guard.h"
#include "kernels/kernels.h"

namespace nexus::cuda {

LaunchGeometry launch_geometry(int64_t n) {
  if (n <= 0) return {0, kThreads};
  return {std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks), kThreads};
}

void check_launch(const char* what) { check(cudaGetLastError(), what); }

}  // namespace nexus::cuda
