// Finds and runs the system C++ compiler for generated kernels.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>

#include "base/cpu_variant.h"
#include "base/env.h"
#include "base/error.h"
#include "codegen/compile.h"

namespace nexus::codegen {
namespace {

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string which(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return ::access(prog.c_str(), X_OK) == 0 ? prog : "";
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string d; std::getline(dirs, d, ':');) {
    std::string cand = (d.empty() ? "." : d) + "/" + prog;
    if (::access(cand.c_str(), X_OK) == 0) return cand;
  }
  return "";
}

// Runs a shell command line; returns (exit status, stdout+stderr).
std::pair<int, std::string> run(const std::string& cmd) {
  FILE* f = ::popen((cmd + " 2>&1").c_str(), "r");
  if (!f) return {-1, "popen failed"};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
  int st = ::pclose(f);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

// cmd += " 'word'" (appended in place: GCC 12 warns falsely on " " + std::string at -O3).
void add_word(std::string& cmd, const std::string& word) {
  if (!cmd.empty()) cmd += ' ';
  cmd += shell_quote(word);
}

std::string command_line(const Compiler& c) {
  std::string s;
  for (const std::string& a : c.command) add_word(s, a);
  return s;
}

// NEXUS_JIT_CXXFLAGS, else -O3 and the -march of the CPU variant the eager kernels run: a fused
// kernel then has the instructions (FMA or not) of the ops it replaces and gives their bits.
std::string jit_cxxflags() {
  std::string set = knob("NEXUS_JIT_CXXFLAGS");
  if (!set.empty()) return set;
  std::string flags = "-O3";
  if (const char* march = cpu_variant_march(active_cpu_variant()); *march) flags.append(" -march=").append(march);
  return flags;
}

Compiler find_compiler(const std::string& cxx) {
  Compiler c;
  c.flags = jit_cxxflags();
  std::istringstream words(cxx);
  for (std::string w; words >> w;) c.command.push_back(w);
  if (c.command.empty()) c.command.push_back("c++");
  std::string path = which(c.command[0]);
  if (path.empty()) {
    c.why_not = str("no C++ compiler: '", c.command[0], "' (from ", std::getenv("CXX") ? "$CXX" : "the default c++",
                    ") is not an executable on PATH");
    return c;
  }
  c.command[0] = path;
  auto [status, out] = run(command_line(c) + " --version");
  if (status != 0) {
    c.why_not = str("'", path, " --version' failed: ", out.substr(0, 200));
    return c;
  }
  c.identity = out;
  c.found = true;
  // What the flags resolve to on this machine: the macros the compiler predefines with them
  // (__AVX2__, __AVX512F__, ... from -march=native). Nodes of different CPUs sharing one cache
  // directory then key their kernels apart, though their compiler and flags read the same.
  std::string probe = command_line(c);
  for (const std::string& w : split_flags(c.flags)) add_word(probe, w);
  auto [probe_status, macros] = run(probe + " -std=c++20 -dM -E -x c++ /dev/null");
  c.target = probe_status == 0 ? macros : "";
  return c;
}

}  // namespace

std::string Compiler::describe() const {
  if (!found) return why_not;
  std::string first = identity.substr(0, identity.find('\n'));
  std::string cmd;
  for (const std::string& a : command) cmd += (cmd.empty() ? "" : " ") + a;
  return cmd + " (" + first + ")";
}

const Compiler& host_compiler() {
  static std::mutex mu;
  static std::map<std::string, Compiler> found;  // by $CXX value and flags
  const char* env = std::getenv("CXX");
  std::string cxx = env && *env ? env : "c++";
  std::string k = cxx + "\n" + jit_cxxflags();
  std::lock_guard<std::mutex> lock(mu);
  auto it = found.find(k);
  if (it == found.end()) it = found.emplace(k, find_compiler(cxx)).first;
  return it->second;
}

// The words after the compiler's name. -ffp-contract=off: no a*b+c fused across instructions, so
// compiled kernels give the bits the interpreter and the eager ops give (flags that would change
// that are refused when the knob is read, base/env.cpp). -fno-math-errno lets sqrt vectorise.
static std::vector<std::string> flag_words(const Compiler& c) {
  std::vector<std::string> words = split_flags(c.flags);
  for (const char* w : {"-std=c++20", "-fPIC", "-shared", "-fno-math-errno", "-ffp-contract=off"}) words.push_back(w);
  return words;
}

std::string full_flags(const Compiler& c) {
  std::string out;
  for (const std::string& w : flag_words(c)) out += (out.empty() ? "" : " ") + w;
  return out;
}

bool jit_enabled() { return knob_bool("NEXUS_JIT") && host_compiler().found; }

namespace {

// Runs the compiler with the kernels' flags, `extra` words, then `src_path -o out_path`.
void compile(const Compiler& c, const std::vector<std::string>& extra, const std::string& src_path,
             const std::string& out_path, const char* what) {
  NX_CHECK(c.found, "cannot compile a ", what, ": ", c.why_not, "; set CXX to a C++20 compiler or NEXUS_JIT=0");
  std::string cmd = command_line(c);  // each word quoted: the flags reach the compiler as written
  for (const std::string& w : flag_words(c)) add_word(cmd, w);
  for (const std::string& w : extra) add_word(cmd, w);
  for (const std::string& w : {src_path, std::string("-o"), out_path}) add_word(cmd, w);
  auto [status, out] = run(cmd);
  NX_CHECK(status == 0, "compiling ", what, " ", src_path, " failed (exit ", status, "):\n", cmd, "\n",
           out.substr(0, 4000));
}

}  // namespace

void compile_shared(const Compiler& c, const std::string& src_path, const std::string& out_path) {
  compile(c, {}, src_path, out_path, "fused kernel");
}

// GCC's --version names its copyright holder; clang (whose precompiled headers are read only
// when a flag names them) and others say something else and parse the prelude every time.
bool takes_precompiled_headers(const Compiler& c) {
  return c.found && c.identity.find("Free Software Foundation") != std::string::npos;
}

// -shared is a link option, so it stays: the header is made with exactly the kernels' words.
void compile_header(const Compiler& c, const std::string& header_path, const std::string& out_path) {
  compile(c, {"-x", "c++-header"}, header_path, out_path, "precompiled header");
}

}  // namespace nexus::codegen
