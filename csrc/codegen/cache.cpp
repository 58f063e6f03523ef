// The on-disk kernel cache. Entries are plain files named by key; a reader never trusts one: it
// must load and carry the same key in its nx_key symbol, or it is rebuilt.
#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "base/env.h"
#include "base/error.h"
#include "base/fs.h"
#include "codegen/compile.h"

namespace nexus::codegen {
namespace {

std::mutex g_mu;  // guards g_stats; loads of one key are serialised by its file lock
CacheStats g_stats;

// dlopen + key check; nullptr (and the handle closed) when the file is missing or not ours.
void* try_load(const std::string& path, const std::string& key, const std::string& symbol) {
  if (!fs::exists(path)) return nullptr;
  void* h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) return nullptr;
  const char* k = static_cast<const char*>(::dlsym(h, "nx_key"));
  void* fn = ::dlsym(h, symbol.c_str());
  if (!k || !fn || std::strncmp(k, key.c_str(), key.size() + 1) != 0) {
    ::dlclose(h);
    return nullptr;
  }
  return fn;  // the handle stays open for the life of the process
}

}  // namespace

std::string cache_dir() {
  std::string d = knob("NEXUS_CACHE_DIR");
  if (!d.empty()) return d;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return std::string(xdg) + "/nexus";
  const char* home = std::getenv("HOME");
  NX_CHECK(home && *home, "cannot place the kernel cache: set NEXUS_CACHE_DIR (HOME is not set)");
  return std::string(home) + "/.cache/nexus";
}

CacheStats cache_stats() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_stats;
}

Loaded load_or_build(const std::string& key, const std::string& symbol, const std::string& source) {
  const std::string dir = cache_dir() + "/kernels";
  fs::make_private_dirs(dir);
  const std::string so = dir + "/" + key + ".so";
  auto hit = [&](void* fn) {
    std::lock_guard<std::mutex> lock(g_mu);
    ++g_stats.hits;
    return Loaded{fn, false, 0};
  };
  if (void* fn = try_load(so, key, symbol)) return hit(fn);
  fs::FileLock lock(dir + "/" + key + ".lock");
  if (void* fn = try_load(so, key, symbol)) return hit(fn);  // another process built it
  const bool rebuild = fs::exists(so);
  auto t0 = std::chrono::steady_clock::now();
  const std::string src = dir + "/" + key + ".cpp";
  fs::write_atomic(src, source);
  const std::string tmp = fs::temp_path_for(so);
  try {
    compile_shared(host_compiler(), src, tmp);
    ::chmod(tmp.c_str(), 0600);
    fs::rename_file(tmp, so);
  } catch (...) {
    fs::remove_file(tmp);
    throw;
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  void* fn = try_load(so, key, symbol);
  NX_CHECK(fn, "fused kernel ", so, " was compiled but does not load: ", ::dlerror() ? ::dlerror() : "symbol missing");
  std::lock_guard<std::mutex> g(g_mu);
  ++g_stats.compiles;
  g_stats.rebuilt += rebuild;
  g_stats.compile_seconds += secs;
  return Loaded{fn, true, secs};
}

}  // namespace nexus::codegen
