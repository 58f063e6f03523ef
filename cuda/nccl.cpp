// NCCL through dlopen (nccl.h): the few entry points used, declared below as NCCL's public
// header gives them (stable since NCCL 2.11, which added ncclRedOpCreatePreMulSum).
#include "nccl.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

#include "backend.h"
#include "base/error.h"
#include "device_guard.h"
#include "dynlib.h"
#include "tensor/half.h"

namespace nexus::cuda {
namespace {

// ---- the NCCL C API, as documented ----------------------------------------------------------
using ncclComm_t = struct ncclComm*;
struct ncclUniqueId {
  char internal[128];
};
using ncclResult_t = int;                // ncclSuccess = 0
using ncclDataType_t = int;              // ncclFloat16 6, ncclFloat32 7, ncclFloat64 8, ncclBfloat16 9
using ncclRedOp_t = int;                 // ncclSum 0; ncclRedOpCreatePreMulSum makes others
constexpr int kScalarHostImmediate = 1;  // ncclScalarResidence_t: the scalar is read at the call
using GetVersionFn = ncclResult_t (*)(int*);
using GetUniqueIdFn = ncclResult_t (*)(ncclUniqueId*);
using CommInitRankFn = ncclResult_t (*)(ncclComm_t*, int, ncclUniqueId, int);
using CommDestroyFn = ncclResult_t (*)(ncclComm_t);
using GetErrorStringFn = const char* (*)(ncclResult_t);
using AllReduceFn = ncclResult_t (*)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
using GroupFn = ncclResult_t (*)();
using RedOpCreatePreMulSumFn = ncclResult_t (*)(ncclRedOp_t*, void*, ncclDataType_t, int, ncclComm_t);
using RedOpDestroyFn = ncclResult_t (*)(ncclRedOp_t, ncclComm_t);

struct Nccl {
  std::string error;  // why it cannot be used ("" when it can)
  int version = 0;    // NCCL_VERSION_CODE: major * 10000 + minor * 100 + patch
  GetUniqueIdFn get_unique_id = nullptr;
  CommInitRankFn comm_init_rank = nullptr;
  CommDestroyFn comm_destroy = nullptr;
  GetErrorStringFn error_string = nullptr;
  AllReduceFn all_reduce = nullptr;
  GroupFn group_start = nullptr, group_end = nullptr;
  RedOpCreatePreMulSumFn premul_sum = nullptr;
  RedOpDestroyFn red_op_destroy = nullptr;
};

Nccl load() {
  Nccl n;
  const Library lib =
      open_library({{"nvidia/nccl/lib", "libnccl.so.2"}, {"nvidia/cu13/lib", "libnccl.so.2"}, {"", "libnccl.so.2"}});
  if (!lib.handle) {
    n.error = str("NCCL could not be loaded (pip install nvidia-nccl-cu13, or nvidia-nccl-cu12 for CUDA 12). Tried:",
                  lib.tried);
    return n;
  }
  std::string missing;
  auto sym = [&](const char* name) {
    void* p = dlsym(lib.handle, name);
    if (!p) missing += str(" ", name);
    return p;
  };
  auto get_version = reinterpret_cast<GetVersionFn>(sym("ncclGetVersion"));
  n.get_unique_id = reinterpret_cast<GetUniqueIdFn>(sym("ncclGetUniqueId"));
  n.comm_init_rank = reinterpret_cast<CommInitRankFn>(sym("ncclCommInitRank"));
  n.comm_destroy = reinterpret_cast<CommDestroyFn>(sym("ncclCommDestroy"));
  n.error_string = reinterpret_cast<GetErrorStringFn>(sym("ncclGetErrorString"));
  n.all_reduce = reinterpret_cast<AllReduceFn>(sym("ncclAllReduce"));
  n.group_start = reinterpret_cast<GroupFn>(sym("ncclGroupStart"));
  n.group_end = reinterpret_cast<GroupFn>(sym("ncclGroupEnd"));
  n.premul_sum = reinterpret_cast<RedOpCreatePreMulSumFn>(sym("ncclRedOpCreatePreMulSum"));
  n.red_op_destroy = reinterpret_cast<RedOpDestroyFn>(sym("ncclRedOpDestroy"));
  if (!missing.empty()) {
    n.error = str(lib.path, " lacks", missing, ": NCCL 2.11 or newer is needed");
    return n;
  }
  if (get_version(&n.version) != 0 || n.version < 21100)
    n.error = str(lib.path, " is NCCL ", n.version, "; 2.11 or newer is needed");
  return n;
}

const Nccl& nccl() {
  static const Nccl n = load();
  return n;
}

const Nccl& loaded() {
  const Nccl& n = nccl();
  if (!n.error.empty()) throw DeviceError(n.error);
  return n;
}

void check_nccl(ncclResult_t r, const char* what) {
  if (r != 0) throw DeviceError(str("NCCL ", what, " failed: ", loaded().error_string(r), " (", r, ")"));
}

// NCCL's data type for a tensor dtype, and weight as that type's bytes (the PreMulSum scalar).
ncclDataType_t nccl_type(DType t, double weight, uint64_t* scalar) {
  switch (t) {
    case DType::Float32: {
      const float w = float(weight);
      std::memcpy(scalar, &w, sizeof w);
      return 7;
    }
    case DType::Float64: std::memcpy(scalar, &weight, sizeof weight); return 8;
    case DType::Float16: *scalar = float_to_fp16(float(weight)); return 6;
    case DType::BFloat16: *scalar = float_to_bf16(float(weight)); return 9;
    default: break;
  }
  throw ValueError(str("NCCL weighted sum of ", dtype_name(t), " gradients: only float32, float64, float16 and ",
                       "bfloat16 are reduced on the device"));
}

class NcclCollective final : public device::Collective {
 public:
  NcclCollective(ncclComm_t comm, int index) : comm_(comm), index_(index) {}
  ~NcclCollective() override { (void)nccl().comm_destroy(comm_); }
  NcclCollective(const NcclCollective&) = delete;
  NcclCollective& operator=(const NcclCollective&) = delete;

  void weighted_sum(const std::vector<Tensor>& grads, double weight) override {
    const Nccl& n = loaded();
    DeviceGuard guard(index_);
    const cudaStream_t stream = current_stream();
    // One reduction op per dtype present (premultiplied by this rank's weight, made before the
    // group and destroyed once the group has queued the collectives), every all-reduce in one
    // group so that NCCL fuses them.
    std::vector<std::pair<ncclDataType_t, ncclRedOp_t>> ops;
    std::vector<ncclDataType_t> types;
    auto destroy = [&] {
      for (const auto& o : ops) (void)n.red_op_destroy(o.second, comm_);
    };
    try {
      for (const Tensor& g : grads) {
        if (!g.defined() || g.numel() == 0) continue;
        NX_CHECK(g.is_contiguous() && g.device() == Device::cuda(index_),
                 "NCCL weighted sum: a gradient must be contiguous on cuda:", index_, ", got one on ",
                 g.device().str());
        uint64_t scalar = 0;
        const ncclDataType_t type = nccl_type(g.dtype(), weight, &scalar);
        types.push_back(type);
        if (std::any_of(ops.begin(), ops.end(), [&](const auto& o) { return o.first == type; })) continue;
        ncclRedOp_t op = 0;
        check_nccl(n.premul_sum(&op, &scalar, type, kScalarHostImmediate, comm_), "ncclRedOpCreatePreMulSum");
        ops.emplace_back(type, op);
      }
      check_nccl(n.group_start(), "ncclGroupStart");
      size_t k = 0;
      ncclResult_t failed = 0;
      for (const Tensor& g : grads) {
        if (!g.defined() || g.numel() == 0) continue;
        const ncclDataType_t type = types[k++];
        const ncclRedOp_t op =
            std::find_if(ops.begin(), ops.end(), [&](const auto& o) { return o.first == type; })->second;
        failed = n.all_reduce(g.raw_data(), g.raw_data(), size_t(g.numel()), type, op, comm_, stream);
        if (failed != 0) break;
      }
      const ncclResult_t ended = n.group_end();
      check_nccl(failed, "ncclAllReduce");
      check_nccl(ended, "ncclGroupEnd");
    } catch (...) {
      destroy();
      throw;
    }
    destroy();
  }

 private:
  ncclComm_t comm_;
  int index_;
};

}  // namespace

std::string nccl_unavailable() { return nccl().error; }

std::string CudaBackend::collective_unavailable() {
  if (device_count() == 0) return unavailable_reason();
  return nccl_unavailable();
}

std::string CudaBackend::device_uid(int index) {
  check_device(index);
  char bus[32] = {};
  check(cudaDeviceGetPCIBusId(bus, int(sizeof bus), index), "cudaDeviceGetPCIBusId");
  return bus;
}

std::string CudaBackend::collective_id() { return nccl_unique_id(); }

std::unique_ptr<device::Collective> CudaBackend::make_collective(const std::string& id, int size, int rank, int index) {
  check_device(index);
  return make_nccl_collective(id, size, rank, index);
}

std::string nccl_version() {
  const Nccl& n = nccl();
  if (!n.error.empty() && n.version == 0) return "none";
  return str(n.version / 10000, ".", n.version / 100 % 100, ".", n.version % 100);
}

std::string nccl_unique_id() {
  ncclUniqueId id{};
  check_nccl(loaded().get_unique_id(&id), "ncclGetUniqueId");
  return std::string(id.internal, sizeof id.internal);
}

std::unique_ptr<device::Collective> make_nccl_collective(const std::string& id, int size, int rank, int index) {
  const Nccl& n = loaded();
  NX_CHECK(id.size() == sizeof(ncclUniqueId), "NCCL communicator id of ", id.size(), " bytes, expected ",
           sizeof(ncclUniqueId));
  ncclUniqueId uid{};
  std::memcpy(uid.internal, id.data(), sizeof uid.internal);
  DeviceGuard guard(index);
  ncclComm_t comm = nullptr;
  check_nccl(n.comm_init_rank(&comm, size, uid, rank), "ncclCommInitRank");
  return std::make_unique<NcclCollective>(comm, index);
}

}  // namespace nexus::cuda
