#include "codegen/nvrtc.h"

#include <dlfcn.h>

#include <mutex>

#include "base/env.h"
#include "base/error.h"

namespace nexus::codegen {
namespace {

using Prog = void*;
struct Api {
  void* lib = nullptr;
  std::string path;
  int (*create)(Prog*, const char*, const char*, int, const char* const*, const char* const*) = nullptr;
  int (*compile)(Prog, int, const char* const*) = nullptr;
  int (*ptx_size)(Prog, size_t*) = nullptr;
  int (*ptx)(Prog, char*) = nullptr;
  int (*log_size)(Prog, size_t*) = nullptr;
  int (*log)(Prog, char*) = nullptr;
  int (*destroy)(Prog*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  int (*version)(int*, int*) = nullptr;
};

const Api& load(const std::vector<std::string>& candidates) {
  static std::mutex mu;
  static Api api;
  std::lock_guard<std::mutex> lock(mu);
  if (api.lib) return api;
  std::vector<std::string> names = candidates;
  for (const char* n : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) names.push_back(n);
  if (const std::string chosen = knob("NEXUS_NVRTC"); !chosen.empty()) names = {chosen};
  std::string tried;
  for (const std::string& n : names) {
    if (void* h = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      api.lib = h;
      api.path = n;
      break;
    }
    tried += (tried.empty() ? "" : ", ") + n;
  }
  NX_CHECK(api.lib, "NVRTC was not found (tried ", tried,
           "). Install it with "
           "`pip install nvidia-cuda-nvrtc-cu12` (or a CUDA toolkit whose lib64 has libnvrtc.so)");
  auto sym = [&](const char* s) {
    void* p = ::dlsym(api.lib, s);
    NX_CHECK(p, "NVRTC at ", api.path, " lacks the symbol ", s);
    return p;
  };
  api.create = reinterpret_cast<decltype(api.create)>(sym("nvrtcCreateProgram"));
  api.compile = reinterpret_cast<decltype(api.compile)>(sym("nvrtcCompileProgram"));
  api.ptx_size = reinterpret_cast<decltype(api.ptx_size)>(sym("nvrtcGetPTXSize"));
  api.ptx = reinterpret_cast<decltype(api.ptx)>(sym("nvrtcGetPTX"));
  api.log_size = reinterpret_cast<decltype(api.log_size)>(sym("nvrtcGetProgramLogSize"));
  api.log = reinterpret_cast<decltype(api.log)>(sym("nvrtcGetProgramLog"));
  api.destroy = reinterpret_cast<decltype(api.destroy)>(sym("nvrtcDestroyProgram"));
  api.error_string = reinterpret_cast<decltype(api.error_string)>(sym("nvrtcGetErrorString"));
  api.version = reinterpret_cast<decltype(api.version)>(sym("nvrtcVersion"));
  return api;
}

}  // namespace

std::string nvrtc_version(const std::vector<std::string>& candidates) {
  const Api& a = load(candidates);
  int major = 0, minor = 0;
  a.version(&major, &minor);
  return str(major, ".", minor, " (", a.path, ")");
}

std::string nvrtc_ptx(const std::string& source, const std::string& name, const std::string& arch,
                      const std::vector<std::string>& candidates) {
  const Api& a = load(candidates);
  Prog prog = nullptr;
  int rc = a.create(&prog, source.c_str(), (name + ".cu").c_str(), 0, nullptr, nullptr);
  NX_CHECK(rc == 0, "nvrtcCreateProgram failed: ", a.error_string(rc));
  const std::string arch_opt = "--gpu-architecture=" + arch;
  const char* opts[] = {arch_opt.c_str(), "-std=c++17", "--fmad=false"};
  rc = a.compile(prog, 3, opts);
  std::string log;
  size_t n = 0;
  if (a.log_size(prog, &n) == 0 && n > 1) {
    log.resize(n);
    a.log(prog, log.data());
    log.resize(n - 1);
  }
  std::string ptx;
  if (rc == 0 && a.ptx_size(prog, &n) == 0) {
    ptx.resize(n);
    a.ptx(prog, ptx.data());
    if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();
  }
  a.destroy(&prog);
  NX_CHECK(rc == 0, "NVRTC could not compile ", name, " for ", arch, ": ", a.error_string(rc), "\n", log);
  return ptx;
}

}  // namespace nexus::codegen
