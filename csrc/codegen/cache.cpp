// The on-disk kernel cache. Entries are plain files named by key; a reader never trusts one: it
// must load and carry the same key in its nx_key symbol, or it is rebuilt.
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "base/env.h"
#include "base/error.h"
#include "base/fs.h"
#include "base/hash.h"
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

// Runs make(tmp) on a temp path beside `path`, then makes the file private and renames it over
// `path` (a reader sees the old file or the new one); the temp file is removed when make throws.
template <class Make> void publish(const std::string& path, const Make& make) {
  const std::string tmp = fs::temp_path_for(path);
  try {
    make(tmp);
    ::chmod(tmp.c_str(), 0600);
    fs::rename_file(tmp, path);
  } catch (...) {
    fs::remove_file(tmp);
    throw;
  }
}

// The precompiled preludes this process made, found or gave up on.
std::mutex g_prelude_mu;
std::map<std::string, std::string> g_preludes;  // name -> header ("" when making or using it failed)

// The prelude as a header, "prelude-<hash>.h", with its precompiled form beside it (".gch"),
// made in dir once per prelude, compiler and flags (under a flock, by temp file + rename, like a
// kernel): the header's absolute path, or "" where the compiler takes none or making it failed
// (kernels then parse the prelude themselves: slower, the same binary). A process remembers the
// one it made or found, and uses it for kernels of other cache directories too while it exists:
// only their compiles read it (a test suite gives every test a cache of its own). A directory
// whose name could not stand in an #include line takes none.
std::string precompiled_prelude(const std::string& dir, const std::string& prelude) {
  const Compiler& c = host_compiler();
  if (!takes_precompiled_headers(c)) return "";
  const std::string name =
      "prelude-" + Hasher().add(prelude).add(c.identity).add(full_flags(c)).add(c.target).hex() + ".h";
  std::lock_guard<std::mutex> lock(g_prelude_mu);
  if (auto it = g_preludes.find(name);
      it != g_preludes.end() && (it->second.empty() || fs::exists(it->second + ".gch")))
    return it->second;
  std::string header = dir + "/" + name;
  if (header.front() != '/') {
    char cwd[4096];
    if (::getcwd(cwd, sizeof cwd) == nullptr) return "";
    header = std::string(cwd) + "/" + header;
  }
  if (header.find_first_of("\"\\\n") != std::string::npos) return "";
  const std::string gch = header + ".gch";
  if (!fs::exists(gch)) {
    fs::FileLock file_lock(header + ".lock");
    if (!fs::exists(gch)) {
      try {
        fs::write_atomic(header, prelude);
        publish(gch, [&](const std::string& tmp) { compile_header(c, header, tmp); });
      } catch (const std::exception&) {
        header.clear();
      }
    }
  }
  g_preludes[name] = header;
  return header;
}

// Compiles `source` into `out` with its prelude (text it holds before its own code; only
// comments come first) replaced by an #include of the precompiled one. False, with nothing
// left behind, when there is none or that compile failed: the caller compiles the whole source
// then, so a precompiled header a compiler rejects costs time, never the kernel.
bool compile_with_prelude(const std::string& dir, const std::string& key, const std::string& source,
                          const std::string& prelude, const std::string& out) {
  const size_t at = prelude.empty() ? std::string::npos : source.find(prelude);
  if (at == std::string::npos) return false;
  const std::string header = precompiled_prelude(dir, prelude);
  if (header.empty()) return false;
  const std::string unit = fs::temp_path_for(dir + "/" + key) + ".cpp";
  bool ok = true;
  try {
    std::string text = source.substr(0, at);  // appended in place: GCC 12 warns falsely on chained +
    text.append("#include \"").append(header).append("\"\n").append(source, at + prelude.size());
    fs::write_atomic(unit, text);
    compile_shared(host_compiler(), unit, out);
  } catch (const std::exception&) {
    fs::remove_file(out);
    ok = false;
    std::lock_guard<std::mutex> lock(g_prelude_mu);  // not again in this process: each try costs a compile
    for (auto& [name, made] : g_preludes)
      if (made == header) made.clear();
  }
  fs::remove_file(unit);
  return ok;
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

Loaded load_or_build(const std::string& key, const std::string& symbol, const std::string& source,
                     const std::string& prelude) {
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
  publish(so, [&](const std::string& tmp) {
    if (!compile_with_prelude(dir, key, source, prelude, tmp)) compile_shared(host_compiler(), src, tmp);
  });
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
