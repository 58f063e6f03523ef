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

int64_t reduce_parts(int64_t n_out, int64_t n_red) {
  constexpr int64_t kEnoughBlocks = 512;  // a few per multiprocessor on the largest GPUs
  constexpr int64_t kMinChunk = 8192;     // elements a block reduces at least
  if (n_out <= 0 || n_out >= kEnoughBlocks || n_red < 2 * kMinChunk) return 1;
  const int64_t by_size = n_red / kMinChunk;
  const int64_t by_blocks = (kEnoughBlocks + n_out - 1) / n_out;
  return std::max<int64_t>(1, std::min(by_size, by_blocks));
}

}  // namespace nexus::cuda
