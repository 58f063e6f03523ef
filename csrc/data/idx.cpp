#include "data/idx.h"

#include <bit>
#include <cstring>

#include "base/checked.h"
#include "base/error.h"
#include "data/source.h"

namespace nexus::data {
namespace {

struct IdxType {
  uint8_t code;
  const char* dtype;
  size_t size;
};
constexpr IdxType kTypes[] = {{0x08, "uint8", 1}, {0x09, "int8", 1},    {0x0B, "int16", 2},
                              {0x0C, "int32", 4}, {0x0D, "float32", 4}, {0x0E, "float64", 8}};

inline uint16_t bswap(uint16_t v) { return __builtin_bswap16(v); }
inline uint32_t bswap(uint32_t v) { return __builtin_bswap32(v); }
inline uint64_t bswap(uint64_t v) { return __builtin_bswap64(v); }

template <class T> void swap_all(std::byte* p, size_t n) {
  auto* v = reinterpret_cast<T*>(p);
  for (size_t i = 0; i < n; ++i) v[i] = bswap(v[i]);
}

}  // namespace

IdxArray parse_idx(const char* data, size_t size) {
  auto u8 = [&](size_t i) { return uint8_t(data[i]); };
  NX_CHECK(size >= 4 && u8(0) == 0 && u8(1) == 0,
           "read_idx: not an IDX file (expected two zero bytes, a type code and a rank; "
           "gzip files are decompressed by nx.data.read_idx)");
  const IdxType* type = nullptr;
  for (const auto& t : kTypes)
    if (t.code == u8(2)) type = &t;
  NX_CHECK(type, "read_idx: unknown type code 0x", std::hex, int(u8(2)),
           "; valid: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32, 0x0E float64");
  size_t ndim = u8(3);
  NX_CHECK(ndim >= 1, "read_idx: the header has 0 dimensions");
  NX_CHECK(size >= 4 + 4 * ndim, "read_idx: the file ends inside the header (", size, " bytes)");
  IdxArray out;
  out.dtype = type->dtype;
  int64_t count = 1;
  for (size_t d = 0; d < ndim; ++d) {
    size_t o = 4 + 4 * d;
    const int64_t n = (int64_t(u8(o)) << 24) | (u8(o + 1) << 16) | (u8(o + 2) << 8) | u8(o + 3);
    out.shape.push_back(n);
    NX_CHECK(checked_mul(count, n, &count) && count < (int64_t(1) << 48), "read_idx: the header's sizes overflow");
  }
  size_t header = 4 + 4 * ndim;
  uint64_t expect = header + uint64_t(count) * type->size;
  NX_CHECK(size == expect, "read_idx: the header says ", count, " values of ", type->dtype, " (", expect,
           " bytes in all) but the data has ", size, " bytes");
  out.values = Buffer::allocate(size - header);
  if (count) std::memcpy(out.values.data.get(), data + header, size - header);
  if constexpr (std::endian::native == std::endian::little) {
    if (type->size == 2) swap_all<uint16_t>(out.values.data.get(), count);
    if (type->size == 4) swap_all<uint32_t>(out.values.data.get(), count);
    if (type->size == 8) swap_all<uint64_t>(out.values.data.get(), count);
  }
  return out;
}

IdxArray read_idx(const std::string& path) {
  Source src = Source::map_file(path);
  return parse_idx(src.data(), src.size());
}

}  // namespace nexus::data
