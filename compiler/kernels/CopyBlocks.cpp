// copy_blocks as tile IR: program (p, c) reads pair p's two block numbers,
// scales them by the strides (whose divisibility the parameters promise, so
// the byte offsets keep the vector width) and copies one chunk of the block.
#include "compiler/kernels/CopyBlocks.h"

#include <tuple>

#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/FlatKernel.h"
#include "ir/Builder.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::ScalarKind;
using ir::Type;
using ir::Value;

namespace {

void buildBody(Builder& b, const CopyBlocksConfig& config, ir::Kernel& kernel) {
  const auto aligned = [&](const char* key) {
    ir::Attributes attributes;
    if (config.alignment > 1) attributes.set(key, int64_t{config.alignment});
    return attributes;
  };
  const ScalarKind I8 = ScalarKind::I8, I64 = ScalarKind::I64;
  Value* src = kernel.addParameter(Type::pointer(I8), "src", aligned("align"));
  Value* dst = kernel.addParameter(Type::pointer(I8), "dst", aligned("align"));
  Value* mapping = kernel.addParameter(Type::pointer(I64), "block_mapping");
  Value* srcStride = kernel.addParameter(Type::scalar(I64), "src_stride", aligned("divisibility"));
  Value* dstStride = kernel.addParameter(Type::scalar(I64), "dst_stride", aligned("divisibility"));
  Value* blockBytes = kernel.addParameter(Type::scalar(I64), "block_bytes", aligned("divisibility"));

  const int64_t n = config.chunkBytes;
  Value* pair = b.cast(b.programId(0, "pair"), I64, "pair_i64");
  Value* chunk = b.cast(b.programId(1, "chunk"), I64, "chunk_i64");
  Value* two = b.constInt(2, Type::scalar(I64));
  Value* srcBlock = b.load(b.addPtr(mapping, b.mul(pair, two)), nullptr, nullptr, "src_block");
  Value* dstBlock = b.load(b.addPtr(mapping, b.add(b.mul(pair, two), b.constInt(1, Type::scalar(I64)))), nullptr,
                           nullptr, "dst_block");
  Value* first = b.mul(chunk, b.cast(b.constexprValue("CHUNK_BYTES", ScalarKind::I32), I64), "first_byte");
  Value* byte = b.add(b.splat(first, {n}), b.cast(b.arange(0, n), I64), "byte");
  Value* inBlock = b.cmp(CmpPredicate::Lt, byte, b.splat(blockBytes, {n}), "in_block");
  Value* from = b.add(b.splat(b.mul(srcBlock, srcStride, "src_offset"), {n}), byte, "src_byte");
  Value* to = b.add(b.splat(b.mul(dstBlock, dstStride, "dst_offset"), {n}), byte, "dst_byte");
  Value* bytes = b.load(b.addPtr(b.splat(src, {n}), from), inBlock, nullptr, "bytes");
  b.store(b.addPtr(b.splat(dst, {n}), to), bytes, inBlock);
}

}  // namespace

std::string CopyBlocksConfig::kernelName() const {
  std::string name = "copy_blocks";
  const CopyBlocksConfig defaults;
  if (chunkBytes != defaults.chunkBytes) name += "_c" + std::to_string(chunkBytes);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  if (alignment != defaults.alignment) name += "_a" + std::to_string(alignment);
  return name;
}

support::Status CopyBlocksConfig::validate() const {
  for (const auto& [field, value, low, high] :
       {std::tuple{"chunk_bytes", chunkBytes, 256, 65536}, std::tuple{"num_warps", numWarps, 1, 16},
        std::tuple{"alignment", alignment, 1, 16}})
    if (support::Status s = checkPowerOfTwo(field, value, low, high); !s) return s;
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildCopyBlocks(const CopyBlocksConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  return buildFlatKernel(config.kernelName(),
                         "copy_blocks: dst block mapping[2p+1] = src block mapping[2p]; grid = (num_pairs, "
                         "ceil(block_bytes / CHUNK_BYTES)).",
                         config.numWarps, {{"CHUNK_BYTES", int64_t{config.chunkBytes}}},
                         [&](Builder& b, ir::Kernel& kernel) { buildBody(b, config, kernel); });
}

int64_t copyBlocksGridY(const CopyBlocksConfig& config, int64_t blockBytes) {
  return (blockBytes + config.chunkBytes - 1) / config.chunkBytes;
}

}  // namespace attnjit::compiler
