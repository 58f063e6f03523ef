// Loading NVIDIA's libraries at run time (dynlib.h).
#include "dynlib.h"

#include <dlfcn.h>

#include "base/error.h"

namespace nexus::cuda {

std::string site_packages() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&site_packages), &info) || !info.dli_fname) return "";
  std::string path = info.dli_fname;  // .../site-packages/nexus/_C_cuda...so
  for (int up = 0; up < 2; ++up) {
    const size_t slash = path.rfind('/');
    if (slash == std::string::npos) return "";
    path.resize(slash);
  }
  return path;
}

Library open_library(const std::vector<std::pair<std::string, std::string>>& candidates) {
  Library lib;
  const std::string site = site_packages();
  for (const auto& [dir, name] : candidates) {
    if (!dir.empty() && site.empty()) continue;
    const std::string path = dir.empty() ? name : site + "/" + dir + "/" + name;
    lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib.handle) {
      lib.path = path;
      return lib;
    }
    const char* err = dlerror();
    lib.tried += str("\n  ", path, ": ", err ? err : "not found");
  }
  return lib;
}

}  // namespace nexus::cuda
