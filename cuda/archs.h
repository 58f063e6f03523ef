// Which GPUs a build runs on. The build carries machine code (SASS) for some architectures and
// PTX for others (NEXUS_CUDA_ARCHS, CMake's syntax: "80-real" is SASS only, "90" SASS and PTX).
// SASS for sm_XY runs on devices of the same major version and a minor one at least Y; PTX for
// compute_XY is compiled by the driver for any device of capability XY or newer. Plain C++:
// tests check the rules without a GPU.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nexus::cuda {

struct BuildArch {
  int cc;    // 10 * major + minor: 75 for sm_75
  bool ptx;  // PTX is embedded too (an entry without -real)
};

// "75-real,80-real,90" (CMake's list, commas for semicolons) -> {75, no PTX}, {80, no PTX}, {90, PTX}.
std::vector<BuildArch> parse_archs(std::string_view list);
// The archs of this build (NEXUS_CUDA_ARCHS at compile time).
const std::vector<BuildArch>& build_archs();
// Whether code built for `archs` runs on a device of compute capability `cc` (10 * major + minor).
bool runs_on(const std::vector<BuildArch>& archs, int cc);
// "sm_75 sm_80 sm_86 sm_89 sm_90 + PTX compute_90"
std::string describe(const std::vector<BuildArch>& archs);

}  // namespace nexus::cuda
