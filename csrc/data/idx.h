// IDX files (MNIST's format): a 4-byte magic (0, 0, type code, number of dimensions), the sizes
// as big-endian uint32, then the values, big-endian. Values come back in native byte order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/column.h"

namespace nexus::data {

struct IdxArray {
  Buffer values;
  std::string dtype;  // numpy name: uint8, int8, int16, int32, float32, float64
  std::vector<int64_t> shape;
};

IdxArray parse_idx(const char* data, size_t size);  // ValueError naming what is wrong
IdxArray read_idx(const std::string& path);         // raw (not gzip) files

}  // namespace nexus::data
