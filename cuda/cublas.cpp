// cuBLAS loaded with dlopen at the first matmul: libcublas.so.13, then .so.12, each first from the
// NVIDIA wheels next to the nexus package in site-packages (nvidia/cu13/lib for CUDA 13 wheels,
// nvidia/cublas/lib for CUDA 12 ones), then wherever the dynamic loader finds it. There are no
// cuBLAS headers here: the few entry points and enum values used are declared below, as the
// public cuBLAS documentation gives them (all of them stable across cuBLAS 11-13).
#include "cublas.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

#include "base/env.h"
#include "base/error.h"
#include "dynlib.h"

namespace nexus::cuda {
namespace {

// ---- the cuBLAS C API, as documented ---------------------------------------------------------
using cublasHandle_t = struct cublasContext*;
using cublasStatus_t = int;  // CUBLAS_STATUS_SUCCESS = 0
constexpr int CUBLAS_OP_N = 0;
constexpr int CUBLAS_OP_T = 1;
constexpr int CUBLAS_DEFAULT_MATH = 0;         // full precision: no TF32 for float32
constexpr int CUBLAS_TF32_TENSOR_OP_MATH = 3;  // float32 GEMMs may round inputs to TF32
using CreateFn = cublasStatus_t (*)(cublasHandle_t*);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using SetMathModeFn = cublasStatus_t (*)(cublasHandle_t, int);
// cublasGemmStridedBatchedEx: inputs and output of one cudaDataType, computed in another.
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, int transa, int transb, int m, int n, int k, const void* alpha,
                                    const void* A, int a_type, int lda, long long stride_a, const void* B, int b_type,
                                    int ldb, long long stride_b, const void* beta, void* C, int c_type, int ldc,
                                    long long stride_c, int batch, int compute_type, int algo);
constexpr int CUDA_R_16F = 2;           // cudaDataType (library_types.h)
constexpr int CUDA_R_16BF = 14;         //
constexpr int CUBLAS_COMPUTE_32F = 68;  // cublasComputeType_t: float32 accumulation
constexpr int CUBLAS_GEMM_DEFAULT = -1;
template <class T> using GemmFn = cublasStatus_t (*)(cublasHandle_t, int transa, int transb, int m, int n, int k,
                                                     const T* alpha, const T* A, int lda, long long stride_a,
                                                     const T* B, int ldb, long long stride_b, const T* beta, T* C,
                                                     int ldc, long long stride_c, int batch);

const char* status_name(cublasStatus_t s) {
  switch (s) {
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_?";
  }
}

void check_status(cublasStatus_t s, const char* what) {
  if (s != 0) throw DeviceError(str("cuBLAS ", what, " failed: ", status_name(s), " (", s, ")"));
}

struct Cublas {
  void* lib = nullptr;
  std::string path;
  std::string error;  // why nothing loaded
  CreateFn create = nullptr;
  SetStreamFn set_stream = nullptr;
  SetMathModeFn set_math_mode = nullptr;
  GemmFn<float> sgemm = nullptr;
  GemmFn<double> dgemm = nullptr;
  GemmExFn gemm_ex = nullptr;
};

Cublas load() {
  Cublas c;
  const Library lib = open_library({{"nvidia/cu13/lib", "libcublas.so.13"},
                                    {"nvidia/cublas/lib", "libcublas.so.13"},
                                    {"", "libcublas.so.13"},
                                    {"nvidia/cublas/lib", "libcublas.so.12"},
                                    {"", "libcublas.so.12"}});
  c.lib = lib.handle;
  c.path = lib.path;
  c.error = lib.tried;
  if (!c.lib) return c;
  auto sym = [&](const char* name) {
    void* p = dlsym(c.lib, name);
    if (!p) c.error += str("\n  ", c.path, " has no ", name);
    return p;
  };
  c.create = reinterpret_cast<CreateFn>(sym("cublasCreate_v2"));
  c.set_stream = reinterpret_cast<SetStreamFn>(sym("cublasSetStream_v2"));
  c.set_math_mode = reinterpret_cast<SetMathModeFn>(sym("cublasSetMathMode"));
  c.sgemm = reinterpret_cast<GemmFn<float>>(sym("cublasSgemmStridedBatched"));
  c.dgemm = reinterpret_cast<GemmFn<double>>(sym("cublasDgemmStridedBatched"));
  c.gemm_ex = reinterpret_cast<GemmExFn>(sym("cublasGemmStridedBatchedEx"));
  if (!c.create || !c.set_stream || !c.set_math_mode || !c.sgemm || !c.dgemm || !c.gemm_ex) c.lib = nullptr;
  return c;
}

const Cublas& cublas() {
  static const Cublas c = load();
  if (!c.lib)
    throw DeviceError(str("matmul on CUDA needs cuBLAS, which could not be loaded: pip install nvidia-cublas ",
                          "(CUDA 13; nvidia-cublas-cu12 for CUDA 12). Tried:", c.error));
  return c;
}

// One handle per device (a handle belongs to the device current when it was created), made on
// first use and kept for the process.
std::atomic<bool>& tf32_flag() {
  static std::atomic<bool> flag{knob_bool("NEXUS_CUDA_TF32")};
  return flag;
}

cublasHandle_t handle(const Cublas& c, int device) {
  static std::mutex mu;
  static std::map<int, cublasHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  cublasHandle_t& h = handles[device];
  if (!h) check_status(c.create(&h), "cublasCreate");
  // TF32 trades float32 GEMM precision (10-bit mantissa inputs) for tensor-core speed; a host-side
  // setting of the handle, applied before every call so that set_allow_tf32 takes effect at once.
  check_status(c.set_math_mode(h, allow_tf32() ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH),
               "cublasSetMathMode");
  return h;
}

int as_int(int64_t v, const char* what) {
  NX_CHECK(v >= 0 && v <= INT_MAX, "matmul on CUDA: ", what, " = ", v, " is past cuBLAS's 32-bit limit");
  return int(v);
}

}  // namespace

bool allow_tf32() { return tf32_flag().load(); }
void set_allow_tf32(bool on) { tf32_flag().store(on); }

void gemm_strided_batched(DType t, int64_t m, int64_t n, int64_t k, const GemmOperand& a, const GemmOperand& b, void* c,
                          int64_t ldc, int64_t stride_c, int64_t batch, cudaStream_t stream) {
  const Cublas& lib = cublas();
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) throw DeviceError("matmul on CUDA: no current device");
  cublasHandle_t h = handle(lib, device);
  check_status(lib.set_stream(h, stream), "cublasSetStream");
  const int im = as_int(m, "m"), in = as_int(n, "n"), ik = as_int(k, "k");
  const int lda = as_int(a.ld, "lda"), ldb = as_int(b.ld, "ldb"), ildc = as_int(ldc, "ldc");
  const int ta = a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, tb = b.trans ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t isz = itemsize(t);
  for (int64_t first = 0; first < batch; first += INT_MAX) {  // batchCount is an int
    const int count = int(std::min<int64_t>(batch - first, INT_MAX));
    const char* pa = static_cast<const char*>(a.ptr) + first * a.batch_stride * isz;
    const char* pb = static_cast<const char*>(b.ptr) + first * b.batch_stride * isz;
    char* pc = static_cast<char*>(c) + first * stride_c * isz;
    if (t == DType::Float32) {
      const float one = 1, zero = 0;
      check_status(lib.sgemm(h, ta, tb, im, in, ik, &one, reinterpret_cast<const float*>(pa), lda, a.batch_stride,
                             reinterpret_cast<const float*>(pb), ldb, b.batch_stride, &zero,
                             reinterpret_cast<float*>(pc), ildc, stride_c, count),
                   "cublasSgemmStridedBatched");
    } else if (t == DType::Float64) {
      const double one = 1, zero = 0;
      check_status(lib.dgemm(h, ta, tb, im, in, ik, &one, reinterpret_cast<const double*>(pa), lda, a.batch_stride,
                             reinterpret_cast<const double*>(pb), ldb, b.batch_stride, &zero,
                             reinterpret_cast<double*>(pc), ildc, stride_c, count),
                   "cublasDgemmStridedBatched");
    } else if (t == DType::Float16 || t == DType::BFloat16) {
      // Half-width storage on tensor cores, accumulated in float32 and rounded once into C: the
      // host's float16/bfloat16 matmul computes in float32 and rounds the result the same way.
      const float one = 1, zero = 0;
      const int type = t == DType::Float16 ? CUDA_R_16F : CUDA_R_16BF;
      check_status(
          lib.gemm_ex(h, ta, tb, im, in, ik, &one, pa, type, lda, a.batch_stride, pb, type, ldb, b.batch_stride, &zero,
                      pc, type, ildc, stride_c, count, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
          "cublasGemmStridedBatchedEx");
    } else {
      throw TypeError(str("matmul on CUDA: expected a floating dtype, got ", dtype_name(t)));
    }
  }
}

}  // namespace nexus::cuda
