// NVRTC, loaded at run time with dlopen (no CUDA headers or libraries at build time): compiles
// the CUDA dialect of a fused kernel to PTX. Works on machines without a GPU.
#pragma once

#include <string>
#include <vector>

namespace nexus::codegen {

// Tries `candidates` (full paths, e.g. from the nvidia-cuda-nvrtc wheel), then the loader's
// search path (libnvrtc.so.13, .so.12, .so). Throws ValueError saying what to install when none
// loads. Returns "major.minor (path)".
std::string nvrtc_version(const std::vector<std::string>& candidates);

// PTX for `source` (CUDA C) for the virtual architecture `arch` (e.g. "compute_80").
std::string nvrtc_ptx(const std::string& source, const std::string& name, const std::string& arch,
                      const std::vector<std::string>& candidates);

}  // namespace nexus::codegen
