// MLA latent decode as tile IR (vLLM's TRITON_MLA decode_attention_fwd, both
// stages' first half; see MlaDecode.h for the layouts).
//
// Per KV tile the program loads each latent row once: kv_c as L / 128 column
// chunks [TILE, 128] and k_pe as [TILE, R]. The scores need them as B operands
// [128, TILE] and [R, TILE]: `transpose` makes those views of the same registers
// (a renumbering, no data movement), and layout assignment then moves each view
// into its mma operand layout through shared memory — each kv_c chunk twice, once
// as Kᵀ for the scores and once as V for P·kv_c (ldmatrix plain and .trans), from
// one global load. One dot per chunk plus one for the rope part build S, so
// W = 576 is never padded to 1024:
//
//   S = Σ_c q_nope[:, c]·kv_c[:, c]ᵀ + q_pe·k_peᵀ       [BLOCK_H, TILE], f32
//   online softmax in log2 units (scale·log2(e) folded into S), as the unified kernel
//   acc_c = acc_c·α + P·kv_c[:, c]                      [BLOCK_H, 128] per chunk, f32
//
// Registers and q. Layout assignment puts warps along M only up to M / 16 and the
// rest along N, so with BLOCK_H = 16 every warp needs all of q's rows as A
// fragments (with 64 heads on 8 warps, 4 x 2, each warp needs 16 rows): held
// across the loop, q_nope alone would be 128 registers per thread at BLOCK_H =
// 16. So q is either re-read per tile and chunk from global memory (L1 hits after
// the first tile, unmasked: rows of heads >= H read head H - 1), or, with
// q_in_shared, loaded once before the loop and kept by codegen in a shared-memory
// buffer (BLOCK_H x W x 2 bytes) that each dot reads with ldmatrix, next to
// its mma (codegen/lower/SharedOperands.cpp): 2.7x faster at 32 or 64 heads per
// program (docs/perf-log.md 2026-12-03). The chunks keep each product's operands
// small. The accumulator is BLOCK_H x L f32 spread over the warps (64 per thread
// at 16 heads on 4 warps, 128 at 32 heads on 4 or 64 on 8).
//
// Keys at or beyond seq_len are masked (-inf) and their rows never read; a
// sequence with no key leaves M = -inf, L = 1 and acc = 0: output 0, LSE -inf
// (vLLM's convention for an empty row, and weight 0 as a split partial).
//
// fp8_e4m3 latents are cast in registers to the dots' operand type, the dtype or
// f16 (fp8_dot_dtype, Fp8Dots.h; exact either way: every e4m3 value is an f16 and
// a bf16); the scores and the output take kv_scale.
#include "compiler/kernels/MlaDecode.h"

#include <limits>
#include <numbers>
#include <vector>

#include "compiler/kernels/Broadcasts.h"
#include "compiler/kernels/ConfigChecks.h"
#include "ir/Builder.h"
#include "ir/KernelAttributes.h"

namespace attnjit::compiler {

using ir::Builder;
using ir::CmpPredicate;
using ir::Opcode;
using ir::ScalarKind;
using support::Status;
using ir::Type;
using ir::Value;

namespace {

// Columns of kv_c (and q_nope, and the accumulator) handled together; see the loop.
constexpr int64_t kLatentChunk = 128;

class MlaDecodeBuilder {
 public:
  MlaDecodeBuilder(Builder& b, const MlaDecodeConfig& config) : b_(b), config_(config) {}

  void declareParameters(ir::Kernel& kernel);
  void build();

 private:
  Type i32() const { return Type::scalar(ScalarKind::I32); }
  Type f32() const { return Type::scalar(ScalarKind::F32); }
  Value* splat(Value* scalar, std::vector<int64_t> shape, std::string name = {}) {
    return b_.splat(scalar, std::move(shape), std::move(name));
  }
  Value* asColumn(Value* vec, int64_t cols, std::string name = {}) {
    return broadcastAsColumn(b_, vec, cols, std::move(name));
  }
  Value* asRow(Value* vec, int64_t rows, std::string name = {}) {
    return broadcastAsRow(b_, vec, rows, std::move(name));
  }
  Value* zeros(std::vector<int64_t> shape, ScalarKind kind, std::string name = {}) {
    const Type type = Type::tile(std::move(shape), Type::scalar(kind));
    return ir::isFloat(kind) ? b_.constFloat(0.0, type, std::move(name)) : b_.constInt(0, type, std::move(name));
  }

  bool fp8() const { return config_.kvCacheFormat == KvCacheFormat::Fp8E4M3; }
  // e4m3 latents → dtype values (the raw tile itself for bf16/f16 caches).
  Value* decodeLatent(Value* raw, const std::string& name);
  // [rows, cols] of q or the cache: base + rowOffset[r] + columnStart + c.
  Value* loadRows(Value* base, Value* rowOffset, int64_t columnStart, int64_t cols, Value* rowMask, ScalarKind kind,
                  const std::string& name);

  Builder& b_;
  const MlaDecodeConfig& config_;

  Value *out_ = nullptr, *q_ = nullptr, *kvCache_ = nullptr, *blockTables_ = nullptr, *seqLens_ = nullptr;
  Value *kvScale_ = nullptr, *lse_ = nullptr;
  Value *segmOutput_ = nullptr, *segmMax_ = nullptr, *segmExpsum_ = nullptr;
  Value *scale_ = nullptr, *qStrideBatch_ = nullptr, *qStrideHead_ = nullptr, *oStrideBatch_ = nullptr,
        *oStrideHead_ = nullptr, *blockTableStride_ = nullptr, *kvStrideBlock_ = nullptr, *kvStrideToken_ = nullptr,
        *lseStrideBatch_ = nullptr, *lseStrideHead_ = nullptr, *numSegments_ = nullptr, *segmentTiles_ = nullptr;
};

void MlaDecodeBuilder::declareParameters(ir::Kernel& kernel) {
  ir::Attributes aligned;
  aligned.set("align", int64_t{16});
  const ScalarKind dt = config_.dtype;
  const Type i64 = Type::scalar(ScalarKind::I64);
  if (config_.splitKv) {
    segmOutput_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_output", aligned);
    segmMax_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_max", aligned);
    segmExpsum_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_expsum", aligned);
  } else {
    out_ = kernel.addParameter(Type::pointer(dt), "out", aligned);
  }
  q_ = kernel.addParameter(Type::pointer(dt), "q", aligned);
  kvCache_ = kernel.addParameter(Type::pointer(kvCachePointerKind(config_.kvCacheFormat, dt)), "kv_cache", aligned);
  blockTables_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "block_tables", aligned);
  seqLens_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "seq_lens", aligned);
  if (fp8()) kvScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "kv_scale");
  if (config_.outputLse && !config_.splitKv) lse_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "lse");
  scale_ = kernel.addParameter(f32(), "scale");
  // q/o rows are W (a multiple of 64) and L wide: promising 8-element strides lets
  // codegen move 16-byte vectors; the launcher checks the promise.
  ir::Attributes rowStride;
  rowStride.set("divisibility", int64_t{8});
  qStrideBatch_ = kernel.addParameter(i64, "q_stride_batch", rowStride);
  qStrideHead_ = kernel.addParameter(i64, "q_stride_head", rowStride);
  if (!config_.splitKv) {
    oStrideBatch_ = kernel.addParameter(i64, "o_stride_batch", rowStride);
    oStrideHead_ = kernel.addParameter(i64, "o_stride_head", rowStride);
  }
  blockTableStride_ = kernel.addParameter(i64, "block_table_stride");
  ir::Attributes cacheStride;
  cacheStride.set("divisibility", int64_t{config_.kvStrideDivisibility()});
  kvStrideBlock_ = kernel.addParameter(i64, "kv_stride_block", cacheStride);
  kvStrideToken_ = kernel.addParameter(i64, "kv_stride_token", cacheStride);
  if (lse_) {
    lseStrideBatch_ = kernel.addParameter(i64, "lse_stride_batch");
    lseStrideHead_ = kernel.addParameter(i64, "lse_stride_head");
  }
  if (config_.splitKv) {
    numSegments_ = kernel.addParameter(i32(), "num_segments");
    segmentTiles_ = kernel.addParameter(i32(), "segment_tiles");
  }
}

Value* MlaDecodeBuilder::decodeLatent(Value* raw, const std::string& name) {
  if (!fp8()) return raw;
  return b_.cast(raw, config_.dotKind(), name + "_values");
}

Value* MlaDecodeBuilder::loadRows(Value* base, Value* rowOffset, int64_t columnStart, int64_t cols, Value* rowMask,
                                  ScalarKind kind, const std::string& name) {
  const int64_t rows = rowOffset->type().shape()[0];
  Value* columns = b_.cast(b_.arange(columnStart, columnStart + cols), ScalarKind::I64, name + "_columns");
  Value* offset = b_.add(asColumn(rowOffset, cols), asRow(columns, rows), name + "_offset");
  Value* pointers = b_.addPtr(splat(base, {rows, cols}), offset, name + "_ptrs");
  if (!rowMask) return b_.load(pointers, nullptr, nullptr, name);
  return b_.load(pointers, asColumn(rowMask, cols, name + "_mask"), zeros({rows, cols}, kind), name);
}

void MlaDecodeBuilder::build() {
  const ScalarKind I32 = ScalarKind::I32, I64 = ScalarKind::I64, dt = config_.dtype;
  const int64_t BH = config_.blockH, N = config_.tileSize, L = config_.kvLoraRank, R = config_.ropeDim;
  const double negInf = -std::numeric_limits<double>::infinity();
  const ScalarKind cacheKind = kvCachePointerKind(config_.kvCacheFormat, dt);
  // q's tiles in the dots' operand type (f16 for fp8_dot_dtype f16, else dt).
  auto inDotKind = [&](Value* qTile) {
    return config_.dotKind() == dt ? qTile : b_.cast(qTile, config_.dotKind(), qTile->name() + "_dot");
  };

  // Program p runs head block p mod ceil(H / BLOCK_H) of sequence p / ceil(H /
  // BLOCK_H): the head blocks of a sequence, which read the same latent tiles,
  // run side by side, so each tile comes from DRAM once and from L2 for the
  // others even when a launch's programs take several waves (B=128, ctx 8192).
  Value* zero = b_.i32(0);
  Value* one = b_.i32(1);
  Value* blockHeads = b_.constexprValue("BLOCK_H", I32, "block_h");
  Value* numHeads = b_.constexprValue("NUM_HEADS", I32, "num_heads");
  Value* headBlocks = b_.div(b_.sub(b_.add(numHeads, blockHeads), one), blockHeads, "head_blocks");
  Value* program = b_.programId(0, "program");
  Value* batch = b_.div(program, headBlocks, "batch");
  Value* headBlock = b_.rem(program, headBlocks, "head_block");
  Value* batch64 = b_.cast(batch, I64, "batch_i64");

  // ---- Query heads of this program and their q rows (loaded once). ----
  Value* head = b_.add(splat(b_.mul(headBlock, blockHeads), {BH}), b_.arange(0, BH), "head");
  Value* headMask = b_.cmp(CmpPredicate::Lt, head, splat(numHeads, {BH}), "head_mask");
  Value* head64 = b_.cast(head, I64, "head_i64");
  // Rows of heads >= H read head H - 1's q (in bounds; their results are never
  // stored), so the per-tile q loads below need no mask.
  Value* qHead64 = b_.cast(b_.min(head, splat(b_.sub(numHeads, one), {BH})), I64, "q_head_i64");
  Value* qRow =
      b_.add(splat(b_.mul(batch64, qStrideBatch_), {BH}), b_.mul(qHead64, splat(qStrideHead_, {BH})), "q_row");

  // ---- Key tiles of this program: all of the sequence, or one segment. ----
  Value* seqLen = b_.load(b_.addPtr(seqLens_, batch), nullptr, nullptr, "seq_len");
  Value* tileSize = b_.constexprValue("TILE_SIZE", I32, "tile_size");
  Value* tileStart = zero;
  Value* tileEnd = b_.div(b_.sub(b_.add(seqLen, tileSize), one), tileSize, "num_tiles");
  Value* segment = nullptr;
  if (config_.splitKv) {
    segment = b_.programId(2, "segment");
    Value* segmentFirst = b_.mul(segment, segmentTiles_, "segment_first_tile");
    tileStart = segmentFirst;
    tileEnd = b_.min(tileEnd, b_.add(segmentFirst, segmentTiles_), "segment_tile_end");
  }

  // Scores in log2 units: S = (q·k)·scale·log2(e) (and the fp8 scale); the output
  // takes the fp8 scale once at the end.
  Value* scoreScale = b_.mul(scale_, b_.f32(std::numbers::log2e), "qk_scale");
  Value* outputFactor = nullptr;
  if (fp8()) {
    Value* kvScale = b_.load(kvScale_, nullptr, nullptr, "kv_scale_value");
    scoreScale = b_.mul(scoreScale, kvScale, "qk_scale_fp8");
    outputFactor = kvScale;
  }
  Value* qkScaleTile = splat(scoreScale, {BH, N}, "qk_scale_tile");
  Value* negInfTile = b_.constFloat(negInf, Type::tile({BH, N}, f32()), "neg_inf");
  Value* negInfRow = b_.constFloat(negInf, Type::tile({BH}, f32()), "neg_inf_row");
  Value* zeroRow = b_.constFloat(0.0, Type::tile({BH}, f32()), "zero_row");
  Value* zeroScores = b_.constFloat(0.0, Type::tile({BH, N}, f32()), "zero_scores");

  Value* blockSize = b_.constexprValue("BLOCK_SIZE", I32, "block_size");
  Value* offsN = b_.arange(0, N, "offs_n");
  Value* blockTableRow = b_.mul(batch64, blockTableStride_, "block_table_row");
  Value* noBlock = b_.constInt(0, Type::tile({N}, i32()), "no_block");

  // ---- Loop over key tiles with the online softmax. ----
  // kv_c is handled in column chunks of kLatentChunk: chunk c of q_nope meets chunk
  // c of kv_cᵀ in the scores, and chunk c of the accumulator takes P·(chunk c).
  const int64_t C = kLatentChunk, numChunks = L / C;
  std::vector<Value*> inits = {b_.constFloat(negInf, Type::tile({BH}, f32()), "m_init"),
                               b_.constFloat(1.0, Type::tile({BH}, f32()), "l_init")};
  std::vector<std::string> names = {"m", "l"};
  for (int64_t c = 0; c < numChunks; ++c) {
    inits.push_back(b_.constFloat(0.0, Type::tile({BH, C}, f32()), "acc_init" + std::to_string(c)));
    names.push_back("acc" + std::to_string(c));
  }
  // Tensor-core tilings with more warps than 16-head row blocks put the other
  // warps side by side along the keys, so a tile's row sum would cross warps
  // through shared memory (a store and two barriers per tile, which both
  // warpgroups of the 64-head tiling wait at). Each thread keeps the running
  // sum of its own P elements instead, rescaled like acc, and the rows are
  // summed once after the loop; l then carries only the initial 1, rescaled.
  const bool tensorCoreDots = dt != ScalarKind::F32 || config_.tf32Dots();
  const bool deferRowSum = tensorCoreDots && config_.numWarps > BH / 16;
  if (deferRowSum) {
    inits.push_back(b_.constFloat(0.0, Type::tile({BH, N}, f32()), "l_partial_init"));
    names.push_back("l_partial");
  }
  // q_in_shared: q loaded once, its chunks kept in shared memory by codegen
  // (q_nope's chunks, then q_pe).
  std::vector<Value*> qResident;
  if (config_.qInShared) {
    for (int64_t c = 0; c < numChunks; ++c)
      qResident.push_back(inDotKind(loadRows(q_, qRow, c * C, C, nullptr, dt, "q_nope" + std::to_string(c))));
    qResident.push_back(inDotKind(loadRows(q_, qRow, L, R, nullptr, dt, "q_pe")));
  }
  auto loop = b_.beginFor(tileStart, tileEnd, one, inits, "tile_idx", names);
  Value* mOld = loop.iterArgs[0];
  Value* lOld = loop.iterArgs[1];
  Value* key = b_.add(splat(b_.mul(loop.inductionVar, tileSize), {N}), offsN, "key");
  Value* keyMask = b_.cmp(CmpPredicate::Lt, key, splat(seqLen, {N}), "key_mask");
  Value* blockTableIdx = b_.add(splat(blockTableRow, {N}), b_.cast(b_.div(key, splat(blockSize, {N})), I64),
                                "block_table_idx");
  Value* physicalBlock =
      b_.cast(b_.load(b_.addPtr(splat(blockTables_, {N}), blockTableIdx), keyMask, noBlock, "physical_block_i32"), I64,
              "physical_block");
  Value* tokenInBlock = b_.cast(b_.rem(key, splat(blockSize, {N})), I64, "token_in_block");
  Value* slot = b_.add(b_.mul(physicalBlock, splat(kvStrideBlock_, {N})),
                       b_.mul(tokenInBlock, splat(kvStrideToken_, {N})), "slot");
  std::vector<Value*> latent;
  for (int64_t c = 0; c < numChunks; ++c) {
    const std::string name = "kv_c" + std::to_string(c);
    latent.push_back(decodeLatent(loadRows(kvCache_, slot, c * C, C, keyMask, cacheKind, name), name));
  }
  Value* rope = decodeLatent(loadRows(kvCache_, slot, L, R, keyMask, cacheKind, "k_pe"), "k_pe");

  // q's chunks: loaded before the loop (q_in_shared), or again for every tile.
  Value* qk = zeroScores;
  for (int64_t c = 0; c < numChunks; ++c) {
    const std::string suffix = std::to_string(c);
    Value* qChunk = qResident.empty() ? inDotKind(loadRows(q_, qRow, c * C, C, nullptr, dt, "q_nope" + suffix))
                                      : qResident[static_cast<size_t>(c)];
    qk = b_.dot(qChunk, b_.transpose(latent[static_cast<size_t>(c)], {1, 0}, "kv_c_t" + suffix), qk, config_.tf32Dots(),
                "qk_nope" + suffix);
  }
  Value* qPe = qResident.empty() ? inDotKind(loadRows(q_, qRow, L, R, nullptr, dt, "q_pe")) : qResident.back();
  qk = b_.dot(qPe, b_.transpose(rope, {1, 0}, "k_pe_t"), qk, config_.tf32Dots(), "qk");
  Value* scores =
      b_.select(asRow(keyMask, BH, "key_mask_2d"), b_.mul(qk, qkScaleTile, "scaled_scores"), negInfTile, "s");
  Value* mCandidate = b_.max(mOld, b_.reduce(Opcode::ReduceMax, scores, 1, "tile_row_max"), "m_candidate");
  // Every tile holds a key < seq_len, so mCandidate is finite; the guard keeps a
  // row that somehow saw none at -inf - 0 (weight 0) instead of NaN.
  Value* mNew = b_.select(b_.cmp(CmpPredicate::Gt, mCandidate, negInfRow), mCandidate, zeroRow, "m_new");
  Value* p = b_.unary(Opcode::Exp2, b_.sub(scores, asColumn(mNew, N)), "p");
  Value* alpha = b_.unary(Opcode::Exp2, b_.sub(mOld, mNew), "alpha");
  const size_t lPartialArg = static_cast<size_t>(2 + numChunks);
  Value* lNew = deferRowSum
                    ? b_.mul(lOld, alpha, "l_new")
                    : b_.add(b_.mul(lOld, alpha), b_.reduce(Opcode::ReduceSum, p, 1, "l_tile"), "l_new");
  Value* pOperand = b_.cast(p, config_.dotKind(), "p_operand");
  std::vector<Value*> yields = {mNew, lNew};
  std::vector<std::string> finalNames = {"m_final", "l_final"};
  for (int64_t c = 0; c < numChunks; ++c) {
    const std::string suffix = std::to_string(c);
    Value* accScaled = b_.mul(loop.iterArgs[static_cast<size_t>(2 + c)], asColumn(alpha, C), "acc_scaled" + suffix);
    yields.push_back(b_.dot(pOperand, latent[static_cast<size_t>(c)], accScaled, config_.tf32Dots(), "acc_new" + suffix));
    finalNames.push_back("acc_final" + suffix);
  }
  if (deferRowSum) {
    yields.push_back(b_.add(b_.mul(loop.iterArgs[lPartialArg], asColumn(alpha, N)), p, "l_partial_new"));
    finalNames.push_back("l_partial_final");
  }
  std::vector<Value*> results = b_.endFor(yields, finalNames);
  Value* mFinal = results[0];
  Value* lFinal = deferRowSum ? b_.add(results[1], b_.reduce(Opcode::ReduceSum, results[lPartialArg], 1), "l_final_sum")
                              : results[1];

  Value* chunkColumns = b_.cast(b_.arange(0, C), I64, "offs_chunk");
  auto columnsOf = [&](int64_t c) {
    return c == 0 ? chunkColumns : b_.add(chunkColumns, b_.constInt(c * C, chunkColumns->type()), "offs_l");
  };
  Value* outMask = asColumn(headMask, C, "out_mask");
  if (config_.splitKv) {
    // reduce_segments' scratch: row (batch·H + head)·num_segments + segment, times L
    // for the output. A segment without keys (past the sequence's end) reports
    // maximum -inf, weight 0.
    Value* segmentRow = b_.add(
        b_.mul(b_.add(splat(b_.mul(batch64, b_.i64(config_.numHeads)), {BH}), head64),
               splat(b_.cast(numSegments_, I64), {BH})),
        splat(b_.cast(segment, I64), {BH}), "segment_row");
    Value* outputRow = b_.mul(segmentRow, splat(b_.i64(L), {BH}), "segment_output_row");
    for (int64_t c = 0; c < numChunks; ++c) {
      Value* partial = results[static_cast<size_t>(2 + c)];
      if (outputFactor) partial = b_.mul(partial, splat(outputFactor, {BH, C}), "segment_output_scaled");
      Value* offset = b_.add(asColumn(outputRow, C), asRow(columnsOf(c), BH));
      b_.store(b_.addPtr(splat(segmOutput_, {BH, C}), offset, "segm_output_ptrs"), partial, outMask);
    }
    Value* sawKeys = b_.cmp(CmpPredicate::Lt, tileStart, tileEnd, "segment_has_keys");
    b_.store(b_.addPtr(splat(segmMax_, {BH}), segmentRow),
             b_.select(splat(sawKeys, {BH}), mFinal, negInfRow, "segment_max"), headMask);
    b_.store(b_.addPtr(splat(segmExpsum_, {BH}), segmentRow), lFinal, headMask);
    return;
  }

  Value* oRow = b_.add(splat(b_.mul(batch64, oStrideBatch_), {BH}), b_.mul(head64, splat(oStrideHead_, {BH})), "o_row");
  // One division per row, a multiply per element (a rounded division is a
  // dozen SASS instructions); the output factor joins the row's.
  Value* rowNumerator = outputFactor ? splat(outputFactor, {BH}) : b_.constFloat(1.0, Type::tile({BH}, f32()));
  Value* rowFactor = asColumn(b_.div(rowNumerator, lFinal, "out_row_factor"), C);
  for (int64_t c = 0; c < numChunks; ++c) {
    Value* normalized = b_.mul(results[static_cast<size_t>(2 + c)], rowFactor, "out_f32");
    Value* oOffset = b_.add(asColumn(oRow, C), asRow(columnsOf(c), BH), "o_offset");
    b_.store(b_.addPtr(splat(out_, {BH, C}), oOffset, "o_ptrs"), b_.cast(normalized, dt, "out_tile"), outMask);
  }
  if (lse_) {
    // Natural log: (M + log2 L)·ln 2; an empty sequence keeps M = -inf, L = 1.
    Value* lseValue = b_.mul(b_.add(mFinal, b_.unary(Opcode::Log2, lFinal)), splat(b_.f32(std::numbers::ln2), {BH}),
                             "lse");
    Value* lseOffset = b_.add(splat(b_.mul(batch64, lseStrideBatch_), {BH}),
                              b_.mul(head64, splat(lseStrideHead_, {BH})), "lse_offset");
    b_.store(b_.addPtr(splat(lse_, {BH}), lseOffset, "lse_ptrs"), lseValue, headMask);
  }
}

}  // namespace

int MlaDecodeConfig::kvStrideDivisibility() const { return kvCacheFormat == KvCacheFormat::Fp8E4M3 ? 16 : 8; }

std::string MlaDecodeConfig::kernelName() const {
  std::string name = std::string("mla_decode_") + ir::scalarName(dtype) + "_h" + std::to_string(numHeads) + "_l" +
                     std::to_string(kvLoraRank) + "_r" + std::to_string(ropeDim) + "_bs" + std::to_string(blockSize);
  if (kvCacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(kvCacheFormat);
  if (dotKind() != dtype) name += "_f16dots";
  if (dtype == ScalarKind::F32 && fp32Precision == Fp32Precision::Ieee) name += "_ieee";
  if (outputLse) name += "_lse";
  if (splitKv) name += "_3d";
  const MlaDecodeConfig defaults;
  if (blockH != defaults.blockH) name += "_bh" + std::to_string(blockH);
  if (tileSize != defaults.tileSize) name += "_t" + std::to_string(tileSize);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  if (numStages != defaults.numStages) name += "_s" + std::to_string(numStages);
  if (qInShared) name += "_qs";
  if (warpSpecialize) name += "_ws";
  return name;
}

support::Status MlaDecodeConfig::validate() const {
  if (dtype != ScalarKind::BF16 && dtype != ScalarKind::F16 && dtype != ScalarKind::F32)
    return configError(std::string("dtype (") + ir::scalarName(dtype) +
                       ") is not supported by mla_decode; use bf16, f16 or f32");
  const bool served = ropeDim == 64 && (kvLoraRank == 512 || kvLoraRank == 256);
  if (!served)
    return configError("the latent width kv_lora_rank + rope_dim = " + std::to_string(kvLoraRank) + " + " +
                       std::to_string(ropeDim) + " = " + std::to_string(int64_t{kvLoraRank} + ropeDim) +
                       " is not supported by mla_decode; supported: 576 (kv_lora_rank 512 + rope_dim 64) and 320 "
                       "(kv_lora_rank 256 + rope_dim 64)");
  if (kvCacheFormat != KvCacheFormat::Auto && kvCacheFormat != KvCacheFormat::Fp8E4M3)
    return configError(std::string("kv_cache_dtype ") + kvCacheFormatName(kvCacheFormat) +
                       " is not supported by mla_decode; use auto (the dtype) or fp8_e4m3 (per-tensor scale)");
  if (fp8DotDtype == Fp8DotDtype::F16 && kvCacheFormat != KvCacheFormat::Fp8E4M3)
    return configError(std::string("fp8_dot_dtype f16 needs the fp8 latent cache (kv_cache_dtype fp8_e4m3), got "
                                   "kv_cache_dtype ") +
                       kvCacheFormatName(kvCacheFormat));
  if (fp8DotDtype == Fp8DotDtype::F16 && dtype == ScalarKind::F32)
    return configError("fp8_dot_dtype f16 needs dtype bf16 or f16, got f32");
  if (alibi) return configError("alibi is not supported by mla_decode (MLA has no ALiBi; vLLM rejects it too)");
  if (slidingWindow != 0)
    return configError("sliding_window (" + std::to_string(slidingWindow) +
                       ") is not supported by mla_decode (vLLM's MLA backends reject it)");
  if (softcap != 0) return configError("softcap is not supported by mla_decode (vLLM's MLA backends reject it)");
  if (numHeads < 1 || numHeads > 128)
    return configError("num_heads (" + std::to_string(numHeads) + ") must be between 1 and 128");
  if (blockSize < 1 || blockSize > 256)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 256");
  if (blockH != 16 && blockH != 32 && blockH != 64)
    return configError("block_h (" + std::to_string(blockH) + ") must be 16, 32 or 64");
  if (tileSize != 16 && tileSize != 32 && tileSize != 64)
    return configError("tile_size (" + std::to_string(tileSize) + ") must be 16, 32 or 64");
  if (numWarps < 1 || numWarps > 8 || !isPowerOfTwo(numWarps))
    return configError("num_warps (" + std::to_string(numWarps) + ") must be 1, 2, 4 or 8");
  if (qInShared && dtype == ScalarKind::F32)
    return configError("q_in_shared needs dtype f16 or bf16: shared-memory operands are read with ldmatrix, which "
                       "f32 (TF32 or exact) does not use");
  return checkNumStages(numStages, warpSpecialize);
}

support::Expected<std::unique_ptr<ir::Kernel>> buildMlaDecode(const MlaDecodeConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(std::string("MLA latent decode") + (config.splitKv ? " (split-KV stage 1)" : "") +
                               ": grid = (num_seqs * ceil(H / BLOCK_H), 1" + (config.splitKv ? ", num_segments)" : ")") +
                               "; program p runs head block p % ceil(H / BLOCK_H) of sequence p / ceil(H / BLOCK_H).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumStages, config.numStages);
  if (config.qInShared) ir::setKernelAttribute(*kernel, ir::KernelAttribute::SharedInvariantOperands, 1);
  if (config.warpSpecialize) ir::setKernelAttribute(*kernel, ir::KernelAttribute::WarpSpecialize, 1);
  auto& cx = kernel->constexprs();
  cx.push_back({"BLOCK_H", int64_t{config.blockH}});
  cx.push_back({"NUM_HEADS", int64_t{config.numHeads}});
  cx.push_back({"TILE_SIZE", int64_t{config.tileSize}});
  cx.push_back({"BLOCK_SIZE", int64_t{config.blockSize}});
  cx.push_back({"KV_LORA_RANK", int64_t{config.kvLoraRank}});
  cx.push_back({"ROPE_DIM", int64_t{config.ropeDim}});
  Builder builder(*kernel);
  MlaDecodeBuilder mla(builder, config);
  mla.declareParameters(*kernel);
  mla.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

}  // namespace attnjit::compiler
