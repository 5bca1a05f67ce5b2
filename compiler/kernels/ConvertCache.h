// Kernel builder: vLLM's convert_fp8, a whole KV cache (or any tensor) converted
// to or from a per-tensor fp8 format in one pass, e.g. to requantize a cache
// offline or to read an fp8 cache back for debugging:
//
//   to fp8:   dst[i] = fp8(float(src[i]) / scale)   rounded to nearest even, saturated
//   from fp8: dst[i] = dtype(float(src[i]) · scale)
//
// for i < num_elements, both tensors contiguous (vLLM's kernel walks them as
// num_blocks rows of stride(0) elements: the same flat range). scale is a host
// float passed by value (vLLM's `scale: float`), so a call needs no device
// memory for it.
//
// Grid: (ceil(num_elements / block_elements)); program p converts elements
// [p · block_elements, (p + 1) · block_elements), the last program masked.
#pragma once

#include <memory>
#include <string>

#include "compiler/kernels/KvCacheFormat.h"
#include "ir/IR.h"

namespace attnjit::compiler {

struct ConvertCacheConfig {
  ir::ScalarKind dtype = ir::ScalarKind::BF16;         // the wide side: f32, f16 or bf16
  KvCacheFormat cacheFormat = KvCacheFormat::Fp8E4M3;  // the fp8 side: fp8_e4m3 or fp8_e5m2
  bool toFp8 = true;                                   // dtype -> fp8 (else fp8 -> dtype)
  int blockElements = 4096;  // elements per program, a power of two from 256 to 65536
  int numWarps = 4;
  // Bytes both pointers are aligned to, a power of two up to 16: elements then
  // move in vectors of up to 16 bytes. The op picks what its pointers keep.
  int alignment = 16;
  // A power of two (up to 16) that num_elements is a multiple of: masks then
  // stay constant over vectors of that many elements, so masked accesses keep
  // their width. The op picks what its call's count keeps.
  int countDivisibility = 16;

  ir::ScalarKind fp8Element() const;  // f8e4m3 or f8e5m2
  ir::ScalarKind srcElement() const;
  ir::ScalarKind dstElement() const;
  // e.g. "convert_cache_bf16_to_fp8_e4m3", "convert_cache_fp8_e5m2_to_f16_a4"
  // ("_b", "_w", "_a", "_n" for non-default block, warps, alignment and count
  // divisibility).
  std::string kernelName() const;
  support::Status validate() const;
};

// Kernel parameters, in order:
//   src ptr<srcElement>, dst ptr<dstElement>, scale f32, num_elements i64.
// Pointers are aligned to `alignment` bytes; num_elements is a multiple of
// count_divisibility.
support::Expected<std::unique_ptr<ir::Kernel>> buildConvertCache(const ConvertCacheConfig& config);

// Grid x for num_elements elements.
int64_t convertCacheGridX(const ConvertCacheConfig& config, int64_t numElements);

}  // namespace attnjit::compiler
