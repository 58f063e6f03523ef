// This variant's codec factories (internal.h).
#include "comm/codecs/internal.h"

namespace nexus::comm::detail {

const CodecFactories& factories_for(VariantTag<CpuVariant::NX_CPU_VARIANT>) {
  namespace v = NX_CPU_VARIANT;
  static const CodecFactories table{v::make_none_codec,       v::make_fp16_codec, v::make_bf16_codec,
                                    v::make_int8_block_codec, v::make_topk_codec, v::make_sign_codec};
  return table;
}

}  // namespace nexus::comm::detail
