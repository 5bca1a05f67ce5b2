// A concrete MLA decode problem (compiler/kernels/MlaDecode.h): random latent
// cache and queries in the kernel's layouts, the launches (the 2D kernel, or
// split-KV stage 1 then reduce_segments), the float64 reference and the check.
// The interpreter and GPU runners below run it; the CLI and the tests go through
// them (compiler/spec/VariantKernel.cpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/kernels/MlaDecode.h"
#include "ir/IR.h"

namespace attnjit::validation {

// One decode batch: sequence b has seqLens[b] keys in the cache (0 allowed: an
// empty result) and one query token.
struct MlaDecodeBatch {
  std::vector<int> seqLens = {1, 37, 100};
  uint64_t seed = 1;
  int checkStride = 1;   // check every checkStride-th sequence (and the last)
  int segmentTiles = 1;  // split-KV: KV tiles per segment; the segment count follows from max(seqLens)
  // The spec's batch description: decode only, so every query_lens entry must be
  // 1; seq_len = context_len + 1 (the new token's own latent row is in the cache).
  static support::Expected<MlaDecodeBatch> fromShape(const compiler::BatchShape& shape);
  support::Status validate() const;
};

class MlaDecodeProblem {
 public:
  static support::Expected<std::unique_ptr<MlaDecodeProblem>> create(const compiler::MlaDecodeConfig& config,
                                                               const MlaDecodeBatch& batch);
  ~MlaDecodeProblem();

  struct Buffer {
    std::string label;
    std::vector<uint8_t> bytes;
    bool written = false;  // a kernel writes it (copied back from the GPU for the check)
  };
  // out, q, kv_cache, block_tables, seq_lens, then as the config asks kv_scale
  // (fp8), lse (output_lse), segm_output, segm_max, segm_expsum (split-KV).
  // Outputs and scratch start poisoned (NaN); unused cache rows are NaN too.
  std::vector<Buffer>& buffers() { return buffers_; }
  const std::vector<Buffer>& buffers() const { return buffers_; }
  struct Launch {
    bool reduceSegments = false;  // buildMlaDecode, or buildReduceSegments for stage 2
    std::vector<size_t> pointers;  // indices into buffers(), in parameter order
    std::vector<std::variant<int64_t, double>> scalars;
    int64_t gridX = 1, gridY = 1, gridZ = 1;
  };
  const std::vector<Launch>& launches() const { return launches_; }
  support::Expected<std::unique_ptr<ir::Kernel>> buildKernel(const Launch& launch) const;
  // Unique bytes of q, the latent rows read and o; FLOPs 2·H·(W + L) per key.
  double minimumBytes() const { return minimumBytes_; }
  double flops() const { return flops_; }
  // Compares the buffers after a run (in buffers() order) with the reference:
  // output, padding left poisoned, and the LSE where asked. Only the written
  // buffers (Buffer::written) are read: the inputs may be left empty.
  void check(const std::vector<Buffer>& after, AttentionRunResult& result) const;

 private:
  MlaDecodeProblem() = default;
  struct Data;
  std::unique_ptr<Data> data_;
  std::vector<Buffer> buffers_;
  std::vector<Launch> launches_;
  double minimumBytes_ = 0, flops_ = 0;
};

// Builds the kernels, runs every launch on the CPU interpreter and checks. With
// `afterPasses` the interpreter runs the kernels as the pass pipeline leaves them.
support::Expected<AttentionRunResult> runMlaDecodeInterpreted(const compiler::MlaDecodeConfig& config,
                                                              const MlaDecodeBatch& batch, bool afterPasses = false);
support::Expected<AttentionRunResult> runMlaDecodeInterpreted(const compiler::MlaDecodeConfig& config,
                                                              const compiler::BatchShape& shape);
// JIT-compiles for the local GPU, runs once on the poisoned buffers and checks,
// then times the launches when options ask (the stage-1 kernel's registers and
// compile split are the ones reported).
support::Expected<GpuRunResult> runMlaDecodeGpu(const compiler::MlaDecodeConfig& config, const MlaDecodeBatch& batch,
                                           const GpuRunOptions& options);
support::Expected<GpuRunResult> runMlaDecodeGpu(const compiler::MlaDecodeConfig& config,
                                                const compiler::BatchShape& shape, const GpuRunOptions& options);

}  // namespace attnjit::validation
