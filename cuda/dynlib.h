// NVIDIA libraries loaded at run time (cuBLAS, NVRTC, NCCL): no headers or link-time dependency,
// so the backend imports where they are missing and only the feature that needs one says what
// to install. They come first from the NVIDIA wheels beside the nexus package in site-packages
// (nvidia/<name>/lib), then from wherever the dynamic loader finds them.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace nexus::cuda {

// The site-packages directory the nexus package is installed in ("" when it cannot be told).
std::string site_packages();

struct Library {
  void* handle = nullptr;  // null: none of the candidates loaded
  std::string path;        // the one that did
  std::string tried;       // "\n  <path>: <dlerror>" per candidate that failed
};

// The first of `candidates` dlopen accepts (RTLD_NOW | RTLD_LOCAL): each a (directory under
// site-packages, file name) pair, or ("", name) for the dynamic loader's own search.
Library open_library(const std::vector<std::pair<std::string, std::string>>& candidates);

}  // namespace nexus::cuda
