// Unified paged attention, 2D launch: the tile program of vLLM's
// kernel_unified_attention_2d (triton_unified_attention.py).
//
// Algorithm. Program (x, y) handles one block of BLOCK_Q query tokens of one
// sequence for KV head y. Query blocks are numbered globally so that sequence s's
// blocks start at cu_seqlens_q[s] / BLOCK_Q + s; the program finds its sequence by a
// branch-free binary search over that quantity (a fixed number of iterations,
// seq_search_steps, with lo/hi carried through a loop and updated by select), and
// programs past the end of their sequence's queries do nothing. The BLOCK_Q tokens
// times the Hq/Hkv query heads that share KV head y are packed into the M = BLOCK_M
// rows of one query tile (row m = token m / (Hq/Hkv), head m % (Hq/Hkv)), so every
// K/V tile is read once for all of them. The program then walks the keys of the
// sequence in tiles of TILE_SIZE tokens, translating token positions to cache
// slots through the block table: scores S = Q·K (f32 accumulation) are scaled by
// scale·log2(e) so the softmax can use exp2, keys a query must not see (causal:
// beyond its own position; always: beyond the sequence) get -inf, and an online
// softmax keeps a running row maximum M, a running denominator L and an
// unnormalized accumulator acc = Σ P·V, rescaled by exp2(M_old - M_new) whenever the
// maximum grows. The output is acc / L, cast to the data type and stored for the
// valid rows. As in vLLM, M starts at -inf and L at 1: the first tile's rescale
// factor exp2(-inf - m) is 0 and wipes the initial 1, and a row whose current
// maximum is still -inf uses 0 instead, so exp2 never sees -inf - (-inf). Every valid
// query row sees key 0 in the first tile (causal or not), so L > 0 at the end; only
// masked-off rows (padding tokens, heads >= Hq) can end with 0/0, and they are never
// stored.
//
// Optional score modifiers (UnifiedAttentionConfig), in vLLM's order and units
// (s = scale·q·k, natural log): softcap s = c·tanh(s/c); then the causal, window
// and padding masks (-inf); then ALiBi s += slope·(j - context_len). The kernel
// works in log2 units, so each term is multiplied by log2(e) where it enters (the
// softcap's output, the slopes, the sinks). The sliding window also narrows the
// tile loop to [first tile holding a key in the window of the program's first row,
// last tile) and masks keys before that row's window out of the loads, so stale
// cache blocks outside the window are never read (vLLM zeroes V there instead).
// With a window a row can meet a tile with no visible key before any other; the
// M = -inf guard above covers it, and every row still sees its own key in some
// later tile. Sinks start M at the sink logit and L at 1, so the sink's weight
// exp(sink - M) is carried through every rescale like a key without a value.
#include "compiler/kernels/UnifiedAttention.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <limits>
#include <numbers>
#include <numeric>
#include <vector>

#include "compiler/kernels/BoundsCheck.h"
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

// How far (log2 units: a factor 2^8) a row's score may pass the online softmax's
// reference maximum before the reference moves (lazy rescaling, buildProgramBody).
constexpr double kRescaleThreshold = 8.0;

// The softcap in a kernel name: the shortest decimal that reads back as the value,
// with 'p' for the point (30 -> "30", 2.5 -> "2p5") so the name stays an identifier.
std::string softcapNameText(double softcap) {
  char text[64];
  auto [end, ec] = std::to_chars(text, text + sizeof text, softcap, std::chars_format::fixed);
  std::string result = ec == std::errc() ? std::string(text, end) : std::to_string(softcap);
  std::replace(result.begin(), result.end(), '.', 'p');
  return result;
}

// The kernel's compile-time constants, recorded in the IR (constexprs) and baked
// into tile shapes.
struct KernelConstants {
  int blockM, blockQ, tileSize, headSize, headSizePadded, blockSize, queriesPerKv, numQueryHeads;
  int valueHeadSize, valueHeadSizePadded;  // Dv (DiffKV), equal to the above otherwise
  // Prefill tiles: 64 query rows or more per program (the op API's prefill
  // tiling), which are compute-bound where decode programs are memory-bound.
  bool prefillTiles() const { return blockM >= 64; }
};

// Emits the kernel into a Builder: parameters first, then the body. The helpers
// below spell out broadcasting, which the IR keeps explicit: scalars are splatted,
// vectors become rows or columns of a 2D tile by expand_dims + broadcast.
class AttentionBuilder {
 public:
  AttentionBuilder(Builder& b, const UnifiedAttentionConfig& config, const KernelConstants& c)
      : b_(b), config_(config), c_(c) {}

  void declareParameters(ir::Kernel& kernel);
  void build();

 private:
  Type i32() const { return Type::scalar(ScalarKind::I32); }
  Type i64() const { return Type::scalar(ScalarKind::I64); }
  Type f32() const { return Type::scalar(ScalarKind::F32); }
  Value* constI32(int64_t v, std::string name = {}) { return b_.constInt(v, i32(), std::move(name)); }
  Value* splatTo(Value* scalar, std::vector<int64_t> shape, std::string name = {}) {
    return b_.splat(scalar, std::move(shape), std::move(name));
  }
  // [n] -> [n, 1] broadcast to [n, cols], or [n] -> [1, n] broadcast to [rows, n].
  Value* asColumn(Value* vec, int64_t cols, std::string name = {}) {
    return broadcastAsColumn(b_, vec, cols, std::move(name));
  }
  Value* asRow(Value* vec, int64_t rows, std::string name = {}) { return broadcastAsRow(b_, vec, rows, std::move(name)); }
  Value* loadScalar(Value* base, Value* index, std::string name) {
    return b_.load(b_.addPtr(base, index), nullptr, nullptr, std::move(name));
  }

  Value* findSequence(Value* qBlockGlobalIdx);
  // Head-dimension groups: int4 rows hold elements 2i and 2i + 1 in one byte, so the
  // kernel works on the even and the odd columns as two groups; otherwise one group
  // holds every column. Group g's column i is head-dimension element i·groups + g.
  int groups() const { return config_.kvCacheFormat == KvCacheFormat::Int4PerTokenHead ? 2 : 1; }
  // DiffKV with a Dqk that is not a power of two (192 = 128 + 64): Q·Kᵀ runs over
  // exact power-of-two column ranges [start, start + width) of the head dimension
  // instead of one tile padded to next_pow2(Dqk), so no padded column is loaded or
  // multiplied. Empty (one padded, masked tile) for equal head sizes (whose kernel
  // stays as it was), power-of-two Dqk, int4 (already two groups), Dqk not a
  // multiple of 16 (mma's K step), or more than three pieces.
  struct QkPiece {
    int start, width;
  };
  std::vector<QkPiece> qkPieces() const;
  // A loaded cache tile (pointer element type) → one tile per group in the data
  // type. Quantized values convert exactly (int8, int4 and fp8 are all exact in
  // f16, bf16 and f32); scales are applied to the scores and to P. fp8 and int8
  // are plain casts, which codegen converts two registers at a time
  // (ElementwiseLowering's castFp8Pair / castInt8Pair).
  std::vector<Value*> dequantizedGroups(Value* raw, const std::string& name);
  // int4 nibbles → dtype through f32's 2^23 magic: the biased value OR'ed into
  // 2^23's mantissa, minus (2^23 + bias): exact, one add and one cvt.
  Value* smallIntAsDtype(Value* unsignedBiased, int bias, const std::string& name);
  // The inline f32 scale of each key's row (per-token-head formats): four byte
  // loads at the row's scale offset, assembled little-endian.
  // rowHeadSize is the row's head size (Dqk for K rows, Dv for V rows).
  Value* loadRowScales(Value* rowBase, Value* slotOffset, Value* tileMask, int rowHeadSize, const std::string& name);
  Value* zeroTile(std::vector<int64_t> shape, ScalarKind kind, std::string name = {});
  void buildProgramBody(Value* seqIdx, Value* qBlockLocalIdx, Value* queryStart, Value* queryLen);
  // Bounds checks (config_.checkBounds). recordViolation stores [code, sequence,
  // index, value] into bounds_record where `violated` (a scalar i1) holds.
  void recordViolation(Value* violated, BoundsViolation code, Value* sequence, Value* index, Value* value);
  Value* notOp(Value* condition);
  // True when cu_seqlens_q[seq] and [seq + 1] are valid query offsets (records otherwise).
  Value* checkQueryOffsets(Value* seqIdx, Value* queryStart, Value* queryStop);
  // seq_len if it is valid for the sequence, else 0 (an empty sequence; recorded).
  Value* checkedSeqLen(Value* seqIdx, Value* seqLen, Value* queryLen);
  // Walks the block-table entries of tiles [tileStart, tileEnd) (the main loop's
  // addressing and masks) and records the first one outside [0, num_blocks).
  void checkBlockTableEntries(Value* seqIdx, Value* blockTableRow, Value* tileStart, Value* tileEnd,
                              Value* maxSeqPrefixLen, Value* firstAllowedKey);

  Builder& b_;
  const UnifiedAttentionConfig& config_;
  const KernelConstants& c_;

  // Parameters.
  Value *out_ = nullptr, *q_ = nullptr, *kvCache_ = nullptr, *blockTables_ = nullptr, *seqLens_ = nullptr,
        *cuSeqlensQ_ = nullptr, *scale_ = nullptr, *numSeqs_ = nullptr, *seqSearchSteps_ = nullptr;
  Value *alibiSlopes_ = nullptr, *sinks_ = nullptr;  // present only with their feature
  Value* outputScale_ = nullptr;                      // 2D with output_fp8
  Value *kScale_ = nullptr, *vScale_ = nullptr;       // per-tensor fp8 caches
  Value* causalFlags_ = nullptr;                      // per-sequence causal flags
  Value *lse_ = nullptr, *lseStrideHead_ = nullptr;   // 2D with output_lse
  Value *boundsRecord_ = nullptr, *numBlocks_ = nullptr, *numTokens_ = nullptr;  // check_bounds
  // 3D (split-KV) stage 1: per-segment partial results instead of out.
  Value *segmOutput_ = nullptr, *segmMax_ = nullptr, *segmExpsum_ = nullptr, *numSegments_ = nullptr,
        *segmentTiles_ = nullptr;
  Value *qStrideToken_ = nullptr, *qStrideHead_ = nullptr, *oStrideToken_ = nullptr, *oStrideHead_ = nullptr,
        *blockTableStride_ = nullptr, *kvStrideBlock_ = nullptr, *kvStrideKv_ = nullptr, *kvStrideToken_ = nullptr,
        *kvStrideHead_ = nullptr;
  Value* kvHeadIdx_ = nullptr;
  // Scalars used throughout: compile-time constants and the i32 0 and 1.
  Value *blockQ_ = nullptr, *queriesPerKv_ = nullptr;
  Value *zeroI32_ = nullptr, *oneI32_ = nullptr;
};

void AttentionBuilder::declareParameters(ir::Kernel& kernel) {
  ir::Attributes aligned;
  aligned.set("align", int64_t{16});
  const ScalarKind dt = config_.dtype;
  if (config_.splitKv) {
    segmOutput_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_output", aligned);
    segmMax_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_max", aligned);
    segmExpsum_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "segm_expsum", aligned);
  } else {
    out_ = kernel.addParameter(Type::pointer(config_.outputFp8 ? ScalarKind::F8E4M3 : dt), "out", aligned);
  }
  q_ = kernel.addParameter(Type::pointer(dt), "q", aligned);
  kvCache_ = kernel.addParameter(Type::pointer(kvCachePointerKind(config_.kvCacheFormat, dt)), "kv_cache", aligned);
  blockTables_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "block_tables", aligned);
  seqLens_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "seq_lens", aligned);
  cuSeqlensQ_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "cu_seqlens_q", aligned);
  if (config_.perSequenceCausal) causalFlags_ = kernel.addParameter(Type::pointer(ScalarKind::I8), "causal_flags");
  if (isPerTensorFp8(config_.kvCacheFormat)) {
    kScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale");
    vScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale");
  }
  if (config_.alibi) alibiSlopes_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "alibi_slopes");
  if (config_.sinks) sinks_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "sinks");
  if (config_.outputFp8 && !config_.splitKv)
    outputScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "output_scale");
  if (config_.outputLse && !config_.splitKv) lse_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "lse");
  if (config_.checkBounds) boundsRecord_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "bounds_record");
  scale_ = kernel.addParameter(f32(), "scale");
  numSeqs_ = kernel.addParameter(i32(), "num_seqs");
  seqSearchSteps_ = kernel.addParameter(i32(), "seq_search_steps");
  // Row strides of q, o and the cache are multiples of 8 elements whenever the
  // head size is (every head size vLLM serves): saying so lets codegen move 16-byte
  // vectors. The launcher checks the promise against the actual strides.
  ir::Attributes rowStride;
  if (config_.headSize % 8 == 0) rowStride.set("divisibility", int64_t{8});
  qStrideToken_ = kernel.addParameter(i64(), "q_stride_token", rowStride);
  qStrideHead_ = kernel.addParameter(i64(), "q_stride_head", rowStride);
  if (!config_.splitKv) {
    // The output's rows are Dv wide (DiffKV), the same as q's otherwise.
    ir::Attributes outputRowStride;
    if (config_.effectiveValueHeadSize() % 8 == 0) outputRowStride.set("divisibility", int64_t{8});
    oStrideToken_ = kernel.addParameter(i64(), "o_stride_token", outputRowStride);
    oStrideHead_ = kernel.addParameter(i64(), "o_stride_head", outputRowStride);
  }
  blockTableStride_ = kernel.addParameter(i64(), "block_table_stride");
  ir::Attributes cacheStride;
  if (const int divisibility = config_.kvStrideDivisibility(); divisibility > 1)
    cacheStride.set("divisibility", int64_t{divisibility});
  kvStrideBlock_ = kernel.addParameter(i64(), "kv_stride_block", cacheStride);
  kvStrideKv_ = kernel.addParameter(i64(), "kv_stride_kv", cacheStride);
  kvStrideToken_ = kernel.addParameter(i64(), "kv_stride_token", cacheStride);
  kvStrideHead_ = kernel.addParameter(i64(), "kv_stride_head", cacheStride);
  if (lse_) lseStrideHead_ = kernel.addParameter(i64(), "lse_stride_head");
  if (config_.splitKv) {
    numSegments_ = kernel.addParameter(i32(), "num_segments");
    segmentTiles_ = kernel.addParameter(i32(), "segment_tiles");
  }
  if (config_.checkBounds) {
    numBlocks_ = kernel.addParameter(i32(), "num_blocks");
    numTokens_ = kernel.addParameter(i32(), "num_tokens");
  }
}

void AttentionBuilder::recordViolation(Value* violated, BoundsViolation code, Value* sequence, Value* index,
                                       Value* value) {
  Value* fields[kBoundsRecordInts] = {constI32(static_cast<int32_t>(code), "violation_code"), sequence, index, value};
  for (int i = 0; i < kBoundsRecordInts; ++i)
    b_.store(i == 0 ? boundsRecord_ : b_.addPtr(boundsRecord_, constI32(i)), fields[i], violated);
}

Value* AttentionBuilder::notOp(Value* condition) {
  const Type i1 = Type::scalar(ScalarKind::I1);
  return b_.select(condition, b_.constInt(0, i1), b_.constInt(1, i1));
}

Value* AttentionBuilder::checkQueryOffsets(Value* seqIdx, Value* queryStart, Value* queryStop) {
  auto outOfRange = [&](Value* offset) {
    return b_.orOp(b_.cmp(CmpPredicate::Lt, offset, zeroI32_), b_.cmp(CmpPredicate::Gt, offset, numTokens_));
  };
  // cu_seqlens_q[0] must be 0 (vLLM's layout); a non-zero first entry is also what
  // sends a program's binary search to sequence -1 (clamped to 0 in build()).
  Value* firstNotZero = b_.andOp(b_.cmp(CmpPredicate::Eq, seqIdx, zeroI32_),
                                 b_.cmp(CmpPredicate::Ne, queryStart, zeroI32_), "first_offset_not_zero");
  Value* startBad = b_.orOp(outOfRange(queryStart), firstNotZero, "query_start_bad");
  Value* stopBad = outOfRange(queryStop);
  Value* rangeBad = b_.orOp(startBad, stopBad, "query_offsets_out_of_range");
  Value* nextSeq = b_.add(seqIdx, oneI32_);
  recordViolation(rangeBad, BoundsViolation::QueryOffsetOutOfRange, seqIdx, b_.select(startBad, seqIdx, nextSeq),
                  b_.select(startBad, queryStart, queryStop));
  Value* decreasing =
      b_.andOp(notOp(rangeBad), b_.cmp(CmpPredicate::Lt, queryStop, queryStart), "query_offsets_decrease");
  recordViolation(decreasing, BoundsViolation::QueryOffsetsDecreasing, seqIdx, nextSeq, queryStop);
  return notOp(b_.orOp(rangeBad, decreasing, "query_offsets_bad"));
}

Value* AttentionBuilder::checkedSeqLen(Value* seqIdx, Value* seqLen, Value* queryLen) {
  Value* blockSize = b_.cast(b_.constexprValue("BLOCK_SIZE", ScalarKind::I32), ScalarKind::I64);
  Value* capacity = b_.mul(blockTableStride_, blockSize, "block_table_capacity");
  Value* below = b_.cmp(CmpPredicate::Lt, seqLen, queryLen, "seq_len_below_query_len");
  Value* beyond = b_.andOp(notOp(below), b_.cmp(CmpPredicate::Gt, b_.cast(seqLen, ScalarKind::I64), capacity),
                           "seq_len_beyond_block_table");
  recordViolation(below, BoundsViolation::SeqLenBelowQueryLen, seqIdx, seqIdx, seqLen);
  recordViolation(beyond, BoundsViolation::SeqLenBeyondBlockTable, seqIdx, seqIdx, seqLen);
  return b_.select(b_.orOp(below, beyond), zeroI32_, seqLen, "seq_len_checked");
}

void AttentionBuilder::checkBlockTableEntries(Value* seqIdx, Value* blockTableRow, Value* tileStart, Value* tileEnd,
                                              Value* maxSeqPrefixLen, Value* firstAllowedKey) {
  const int64_t N = c_.tileSize;
  const int32_t none = std::numeric_limits<int32_t>::max();
  Value* noneI32 = constI32(none, "no_bad_column");
  auto loop = b_.beginFor(tileStart, tileEnd, oneI32_, {noneI32}, "check_tile_idx", {"first_bad_column"});
  Value* tileSize = b_.constexprValue("TILE_SIZE", ScalarKind::I32);
  Value* blockSizeN = splatTo(b_.constexprValue("BLOCK_SIZE", ScalarKind::I32), {N});
  Value* seqOffset = b_.add(splatTo(b_.mul(loop.inductionVar, tileSize), {N}), b_.arange(0, N), "check_seq_offset");
  Value* tileMask = b_.cmp(CmpPredicate::Lt, seqOffset, splatTo(maxSeqPrefixLen, {N}));
  if (firstAllowedKey)
    tileMask = b_.andOp(tileMask, b_.cmp(CmpPredicate::Ge, seqOffset, splatTo(firstAllowedKey, {N})));
  Value* column = b_.div(seqOffset, blockSizeN, "check_block_column");
  Value* entry = b_.load(b_.addPtr(splatTo(blockTables_, {N}), b_.add(splatTo(blockTableRow, {N}),
                                                                        b_.cast(column, ScalarKind::I64))),
                         tileMask, b_.constInt(0, Type::tile({N}, i32())), "check_block_entry");
  Value* outside = b_.orOp(b_.cmp(CmpPredicate::Lt, entry, splatTo(zeroI32_, {N})),
                           b_.cmp(CmpPredicate::Ge, entry, splatTo(numBlocks_, {N})));
  Value* bad = b_.andOp(tileMask, outside, "check_block_bad");
  Value* badColumn = b_.reduce(Opcode::ReduceMin, b_.select(bad, column, splatTo(noneI32, {N})), 0, "tile_bad_column");
  std::vector<Value*> result = b_.endFor({b_.min(loop.iterArgs[0], badColumn)}, {"first_bad_column_final"});
  Value* anyBad = b_.cmp(CmpPredicate::Lt, result[0], noneI32, "block_table_bad");
  Value* badIdx = b_.add(blockTableRow, b_.cast(b_.select(anyBad, result[0], zeroI32_), ScalarKind::I64));
  Value* badEntry = b_.load(b_.addPtr(blockTables_, badIdx), anyBad, zeroI32_, "bad_block_entry");
  recordViolation(anyBad, BoundsViolation::BlockTableEntry, seqIdx, result[0], badEntry);
}

// vLLM's find_seq_idx in query-block mode: the largest s in [0, num_seqs) with
// cu_seqlens_q[s] / BLOCK_Q + s <= q_block_global_idx. The search interval [lo, hi)
// shrinks while lo < hi; once empty, further iterations leave it unchanged, so
// running a fixed ceil(log2(num_seqs + 1)) iterations is exact.
Value* AttentionBuilder::findSequence(Value* qBlockGlobalIdx) {
  Value* two = constI32(2, "two");
  auto loop = b_.beginFor(zeroI32_, seqSearchSteps_, oneI32_, {zeroI32_, numSeqs_}, "search_step", {"lo", "hi"});
  Value* lo = loop.iterArgs[0];
  Value* hi = loop.iterArgs[1];
  Value* searching = b_.cmp(CmpPredicate::Lt, lo, hi, "searching");
  Value* mid = b_.div(b_.add(lo, hi), two, "mid");
  // mid <= num_seqs always (lo <= hi <= num_seqs), and cu_seqlens_q has num_seqs + 1 entries.
  Value* midStart = loadScalar(cuSeqlensQ_, mid, "mid_query_start");
  Value* midBlock = b_.add(b_.div(midStart, blockQ_), mid, "mid_q_block");
  Value* midNotAfter = b_.cmp(CmpPredicate::Le, midBlock, qBlockGlobalIdx, "mid_not_after");
  Value* goRight = b_.andOp(searching, midNotAfter, "go_right");
  Value* goLeft = b_.andOp(searching, b_.cmp(CmpPredicate::Gt, midBlock, qBlockGlobalIdx, "mid_after"), "go_left");
  Value* newLo = b_.select(goRight, b_.add(mid, oneI32_), lo, "lo_next");
  Value* newHi = b_.select(goLeft, mid, hi, "hi_next");
  std::vector<Value*> bounds = b_.endFor({newLo, newHi}, {"lo_final", "hi_final"});
  return b_.sub(bounds[0], oneI32_, "seq_idx");
}

void AttentionBuilder::build() {
  // With prefill tiles, the programs of a sequence's last query blocks see the
  // most keys (causal): numbered from the end, they start first and the short
  // ones fill the tail of the launch instead of the long ones (H200, 8 × 2048
  // causal: 1.482 → 1.462 ms). A permutation of axis 0, so results are unchanged.
  const bool longestFirst = c_.prefillTiles();
  Value* qBlockGlobalIdx = b_.programId(0, longestFirst ? "program_idx" : "q_block_global_idx");
  kvHeadIdx_ = b_.programId(1, "kv_head_idx");
  blockQ_ = b_.constexprValue("BLOCK_Q", ScalarKind::I32, "block_q");
  zeroI32_ = constI32(0, "zero");
  oneI32_ = constI32(1, "one");
  if (longestFirst)
    qBlockGlobalIdx = b_.sub(b_.sub(b_.numPrograms(0), oneI32_), qBlockGlobalIdx, "q_block_global_idx");
  queriesPerKv_ = b_.constexprValue("NUM_QUERIES_PER_KV", ScalarKind::I32, "queries_per_kv");

  Value* seqIdx = findSequence(qBlockGlobalIdx);
  // Checked: a corrupted cu_seqlens_q[0] > 0 can send the search to -1 (then
  // recorded below as cu_seqlens_q[0] != 0).
  if (config_.checkBounds) seqIdx = b_.max(seqIdx, zeroI32_, "seq_idx_clamped");
  Value* queryStart = loadScalar(cuSeqlensQ_, seqIdx, "query_start");
  Value* queryStop = loadScalar(cuSeqlensQ_, b_.add(seqIdx, oneI32_, "next_seq_idx"), "query_stop");
  Value* qBlockStartIdx = b_.add(b_.div(queryStart, blockQ_), seqIdx, "q_block_start_idx");
  Value* qBlockLocalIdx = b_.sub(qBlockGlobalIdx, qBlockStartIdx, "q_block_local_idx");
  Value* queryLen = b_.sub(queryStop, queryStart, "query_len");
  // Programs beyond the last query block of their sequence have nothing to do.
  Value* hasQueries = b_.cmp(CmpPredicate::Lt, b_.mul(qBlockLocalIdx, blockQ_), queryLen, "has_queries");
  if (config_.checkBounds)
    hasQueries = b_.andOp(checkQueryOffsets(seqIdx, queryStart, queryStop), hasQueries, "has_valid_queries");
  b_.beginIf(hasQueries);
  buildProgramBody(seqIdx, qBlockLocalIdx, queryStart, queryLen);
  b_.endIf();
}

Value* AttentionBuilder::zeroTile(std::vector<int64_t> shape, ScalarKind kind, std::string name) {
  const Type type = Type::tile(std::move(shape), Type::scalar(kind));
  return ir::isFloat(kind) ? b_.constFloat(0.0, type, std::move(name)) : b_.constInt(0, type, std::move(name));
}

Value* AttentionBuilder::smallIntAsDtype(Value* unsignedBiased, int bias, const std::string& name) {
  const Type i32Tile = unsignedBiased->type();
  Value* bits = b_.binary(Opcode::Or, unsignedBiased, b_.constInt(0x4B000000, i32Tile), name + "_magic_bits");
  Value* magic = b_.bitcast(bits, ScalarKind::F32);
  Value* value = b_.sub(magic, b_.constFloat(8388608.0 + bias, i32Tile.withScalarKind(ScalarKind::F32)), name + "_f32");
  return config_.dtype == ScalarKind::F32 ? value : b_.cast(value, config_.dtype, name + "_values");
}

std::vector<Value*> AttentionBuilder::dequantizedGroups(Value* raw, const std::string& name) {
  const ScalarKind dt = config_.dtype;
  const Type i32Tile = raw->type().withScalarKind(ScalarKind::I32);
  switch (config_.kvCacheFormat) {
    case KvCacheFormat::Auto:
      return {raw};
    case KvCacheFormat::Fp8E4M3:
    case KvCacheFormat::Fp8E5M2:
      return {b_.cast(raw, dt, name + "_values")};
    case KvCacheFormat::Fp8PerTokenHead:
      return {b_.cast(b_.bitcast(raw, ScalarKind::F8E4M3, name + "_fp8"), dt, name + "_values")};
    case KvCacheFormat::Int8PerTokenHead:
      return {b_.cast(raw, dt, name + "_values")};
    case KvCacheFormat::Int4PerTokenHead: {
      // Each nibble n (two's complement) plus 8 is n ^ 8 in [0, 15].
      Value* bytes = b_.andOp(b_.cast(raw, ScalarKind::I32), b_.constInt(0xFF, i32Tile), name + "_bytes");
      Value* low = b_.binary(Opcode::Xor, b_.andOp(bytes, b_.constInt(0xF, i32Tile)), b_.constInt(8, i32Tile), name + "_low_biased");
      Value* high = b_.binary(Opcode::Xor, b_.binary(Opcode::Shr, bytes, b_.constInt(4, i32Tile)), b_.constInt(8, i32Tile),
                             name + "_high_biased");
      return {smallIntAsDtype(low, 8, name + "_even"), smallIntAsDtype(high, 8, name + "_odd")};
    }
  }
  return {raw};
}

Value* AttentionBuilder::loadRowScales(Value* rowBase, Value* slotOffset, Value* tileMask, int rowHeadSize,
                                       const std::string& name) {
  // The f32 scale after the row's values, loaded as an f32 through the row's byte
  // pointer reinterpreted (4-byte aligned: rows are D + 4 bytes and D is a
  // multiple of 4): one 4-byte load per key, carried by the pipeliner as one
  // register per thread. Loaded as four bytes and summed into an f32, the bytes
  // of the next tile were pulled apart right after their load, at the end of
  // the iteration that issued it, so each tile waited for that load (H200 ncu,
  // session 15: the most sampled stall of the per-token-head kernels).
  const int64_t N = c_.tileSize;
  Value* scaleOffset = b_.add(slotOffset, b_.constInt(kvCacheScaleByteOffset(config_.kvCacheFormat, rowHeadSize),
                                                     slotOffset->type()), name + "_scale_offset");
  if (config_.kvStrideDivisibility() >= 4) {
    Value* scaleBytePointers = b_.addPtr(splatTo(rowBase, {N}), scaleOffset, name + "_scale_byte_ptrs");
    Value* scalePointers = b_.bitcast(scaleBytePointers, ScalarKind::F32, name + "_scale_ptrs");
    return b_.load(scalePointers, tileMask, b_.constFloat(0.0, Type::tile({N}, f32())), name + "_scale");
  }
  // Rows that are not 4-byte multiples (D or D/2 not a multiple of 4) leave the
  // scale unaligned: its four bytes as one [TILE, 4] tile, assembled
  // little-endian by a sum of shifted bytes along the row, in the layout they
  // were loaded in, so that only the f32 moves to the score layout.
  const Type bytesI32 = Type::tile({N, 4}, i32());
  Value* byteIndex = b_.arange(0, 4, name + "_scale_byte_index");
  Value* offsets = b_.add(asColumn(scaleOffset, 4), asRow(b_.cast(byteIndex, slotOffset->type().scalarKind()), N),
                          name + "_scale_byte_offsets");
  Value* bytes = b_.load(b_.addPtr(splatTo(rowBase, {N, 4}), offsets), asColumn(tileMask, 4),
                         zeroTile({N, 4}, ScalarKind::I8), name + "_scale_bytes");
  Value* unsignedBytes = b_.andOp(b_.cast(bytes, ScalarKind::I32), b_.constInt(0xFF, bytesI32));
  Value* shifts = asRow(b_.mul(byteIndex, b_.constInt(8, byteIndex->type())), N);
  Value* placed = b_.binary(Opcode::Shl, unsignedBytes, shifts, name + "_scale_placed");
  return b_.bitcast(b_.reduce(Opcode::ReduceSum, placed, 1, name + "_scale_bits"), ScalarKind::F32, name + "_scale");
}

std::vector<AttentionBuilder::QkPiece> AttentionBuilder::qkPieces() const {
  const int headSize = config_.headSize;
  if (!config_.differentValueHeadSize() || groups() != 1 || isPowerOfTwo(headSize) || headSize % 16 != 0) return {};
  std::vector<QkPiece> pieces;
  int start = 0;
  for (int width = nextPowerOfTwo(headSize); width >= 16; width /= 2)
    if ((headSize - start) >= width) {
      pieces.push_back({start, width});
      start += width;
    }
  return pieces.size() <= 3 ? pieces : std::vector<QkPiece>{};
}

void AttentionBuilder::buildProgramBody(Value* seqIdx, Value* qBlockLocalIdx, Value* queryStart, Value* queryLen) {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, D = c_.headSizePadded / G, DV = c_.valueHeadSizePadded / G, N = c_.tileSize;
  const ScalarKind dt = config_.dtype;
  const ScalarKind I64 = ScalarKind::I64;
  const double negInf = -std::numeric_limits<double>::infinity();

  // ---- Query tile: row m is token q_block_local_idx·BLOCK_Q + m / QPK, head
  // kv_head·QPK + m % QPK. ----
  Value* offsM = b_.arange(0, M, "offs_m");
  Value* offsD = b_.arange(0, D, "offs_d");
  Value* qpkM = splatTo(queriesPerKv_, {M});
  Value* qBlockFirstPos = b_.mul(qBlockLocalIdx, blockQ_, "q_block_first_pos");
  Value* queryPos = b_.add(splatTo(qBlockFirstPos, {M}), b_.div(offsM, qpkM), "query_pos");
  Value* queryToken = b_.add(splatTo(queryStart, {M}), queryPos, "query_token");
  Value* queryHead = b_.add(splatTo(b_.mul(kvHeadIdx_, queriesPerKv_), {M}), b_.rem(offsM, qpkM), "query_head");

  // Columns of a group: i < HEAD_SIZE / groups (int4 needs an even head size).
  Value* headSize = G == 1 ? b_.constexprValue("HEAD_SIZE", ScalarKind::I32, "head_size")
                           : constI32(c_.headSize / G, "group_size");
  Value* dimMask = b_.cmp(CmpPredicate::Lt, offsD, splatTo(headSize, {D}), "dim_mask");
  Value* queryPosMask = b_.cmp(CmpPredicate::Lt, queryPos, splatTo(queryLen, {M}), "query_pos_mask");
  Value* numQueryHeads = b_.constexprValue("NUM_QUERY_HEADS", ScalarKind::I32, "num_query_heads");
  Value* queryHeadMask = b_.cmp(CmpPredicate::Lt, queryHead, splatTo(numQueryHeads, {M}), "query_head_mask");
  Value* rowMask = b_.andOp(queryPosMask, queryHeadMask, "row_mask");
  Value* dimMaskRow = asRow(dimMask, M, "dim_mask_2d");
  Value* qMask = b_.andOp(asColumn(rowMask, D), dimMaskRow, "q_mask");

  Value* offsD64 = b_.cast(offsD, I64, "offs_d_i64");
  // Head-dimension element of each group column.
  std::vector<Value*> groupColumns;
  for (int g = 0; g < G; ++g)
    groupColumns.push_back(G == 1 ? offsD64
                                  : b_.add(b_.mul(offsD64, b_.constInt(G, offsD64->type())),
                                           b_.constInt(g, offsD64->type()), "group_column" + std::to_string(g)));
  // The V side (V tiles, the accumulator, the output): with equal head sizes the
  // same values as above (and the same IR); DiffKV builds its own from Dv.
  Value* dimMaskV = dimMask;
  Value* oMask = qMask;
  Value* offsDV64 = offsD64;
  std::vector<Value*> valueGroupColumns = groupColumns;
  if (config_.differentValueHeadSize()) {
    Value* offsDV = b_.arange(0, DV, "offs_dv");
    Value* valueHeadSize = G == 1 ? b_.constexprValue("VALUE_HEAD_SIZE", ScalarKind::I32, "value_head_size")
                                  : constI32(c_.valueHeadSize / G, "value_group_size");
    dimMaskV = b_.cmp(CmpPredicate::Lt, offsDV, splatTo(valueHeadSize, {DV}), "dim_mask_v");
    oMask = b_.andOp(asColumn(rowMask, DV), asRow(dimMaskV, M, "dim_mask_v_2d"), "o_mask");
    offsDV64 = b_.cast(offsDV, I64, "offs_dv_i64");
    valueGroupColumns.clear();
    for (int g = 0; g < G; ++g)
      valueGroupColumns.push_back(G == 1 ? offsDV64
                                         : b_.add(b_.mul(offsDV64, b_.constInt(G, offsDV64->type())),
                                                  b_.constInt(g, offsDV64->type()), "value_group_column" + std::to_string(g)));
  }
  Value* queryToken64 = b_.cast(queryToken, I64, "query_token_i64");
  Value* queryHead64 = b_.cast(queryHead, I64, "query_head_i64");
  Value* qRowOffset = b_.add(b_.mul(queryToken64, splatTo(qStrideToken_, {M})),
                             b_.mul(queryHead64, splatTo(qStrideHead_, {M})), "q_row_offset");
  std::vector<Value*> qTiles;
  const std::vector<QkPiece> pieces = qkPieces();
  // Head-dimension columns of each Q·Kᵀ piece (exact: no mask beyond the rows').
  std::vector<Value*> pieceColumns;
  for (size_t i = 0; i < pieces.size(); ++i) {
    const std::string suffix = "_piece" + std::to_string(i);
    pieceColumns.push_back(b_.add(b_.cast(b_.arange(0, pieces[i].width), I64),
                                  b_.constInt(pieces[i].start, Type::tile({pieces[i].width}, i64())),
                                  "qk_columns" + suffix));
    const int64_t W = pieces[i].width;
    Value* qOffset = b_.add(asColumn(qRowOffset, W), asRow(pieceColumns[i], M), "q_offset" + suffix);
    Value* qTile = b_.load(b_.addPtr(splatTo(q_, {M, W}), qOffset, "q_ptrs" + suffix), asColumn(rowMask, W),
                           zeroTile({M, W}, dt), "q_tile" + suffix);
    qTiles.push_back(qTile);
  }
  for (int g = 0; g < G && pieces.empty(); ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* qOffset = b_.add(asColumn(qRowOffset, D), asRow(groupColumns[g], M), "q_offset" + suffix);
    Value* qPtrs = b_.addPtr(splatTo(q_, {M, D}), qOffset, "q_ptrs" + suffix);
    Value* qTile = b_.load(qPtrs, qMask, zeroTile({M, D}, dt), "q_tile" + suffix);
    qTiles.push_back(qTile);
  }

  // ---- Key range of this program. ----
  Value* seqLen = loadScalar(seqLens_, seqIdx, "seq_len");
  if (config_.checkBounds) seqLen = checkedSeqLen(seqIdx, seqLen, queryLen);
  Value* contextLen = b_.sub(seqLen, queryLen, "context_len");
  Value* maxSeqPrefixLen = seqLen;
  // Per-sequence flags decide at run time what config_.causal decides otherwise;
  // both forms are then computed and selected.
  Value* seqCausal = nullptr;
  if (causalFlags_)
    seqCausal = b_.cmp(CmpPredicate::Ne, loadScalar(causalFlags_, seqIdx, "causal_flag"),
                       b_.constInt(0, Type::scalar(ScalarKind::I8)), "seq_causal");
  const bool mayBeCausal = config_.causal || seqCausal;
  const bool mayBeNonCausal = !config_.causal || seqCausal;
  if (mayBeCausal) {
    // The last row of the block sees keys up to context_len + its position.
    Value* lastRowReach = b_.add(b_.add(contextLen, qBlockFirstPos),
                                 constI32((c_.blockM - 1) / c_.queriesPerKv + 1, "query_rows_span"), "last_row_reach");
    maxSeqPrefixLen = b_.min(lastRowReach, seqLen, "max_seq_prefix_len");
    if (seqCausal) maxSeqPrefixLen = b_.select(seqCausal, maxSeqPrefixLen, seqLen, "max_seq_prefix_len_flagged");
  }
  Value* tileSize = b_.constexprValue("TILE_SIZE", ScalarKind::I32, "tile_size");
  Value* numTiles = b_.div(b_.sub(b_.add(maxSeqPrefixLen, tileSize), oneI32_), tileSize, "num_tiles");
  // Sliding window: vLLM's tile pruning. The first row of the program sees keys
  // from context_len + its position - sw + 1 on, and later rows start later, so
  // earlier keys (and tiles holding only such keys) serve no row. Causal, vLLM's
  // tile_end (the tile of the last valid row's own key, plus one) is num_tiles.
  Value* tileStart = zeroI32_;
  Value* tileEnd = numTiles;
  Value* firstAllowedKey = nullptr;
  Value* window = nullptr;
  if (config_.slidingWindow > 0) {
    window = b_.constexprValue("SLIDING_WINDOW", ScalarKind::I32, "sliding_window");
    firstAllowedKey = b_.max(b_.add(b_.sub(b_.add(contextLen, qBlockFirstPos), window), oneI32_), zeroI32_,
                             "first_allowed_key");
    tileStart = b_.div(firstAllowedKey, tileSize, "tile_start");
    if (mayBeNonCausal) {
      // The encoder window also ends sw - 1 keys after the program's last valid row.
      Value* lastRow = b_.min(b_.add(qBlockFirstPos, constI32((c_.blockM - 1) / c_.queriesPerKv)),
                              b_.sub(queryLen, oneI32_), "qpos_hi");
      Value* lastAllowedKey = b_.add(b_.add(contextLen, lastRow), b_.sub(window, oneI32_), "last_allowed_key");
      tileEnd = b_.min(b_.add(b_.div(lastAllowedKey, tileSize), oneI32_), numTiles, "tile_end");
      if (seqCausal) tileEnd = b_.select(seqCausal, numTiles, tileEnd, "tile_end_flagged");
    }
  }

  // Split-KV: program z walks only the tiles of segment z, [z, z + 1)·segment_tiles,
  // of the range above (possibly none: it then reports an empty segment).
  Value* segmentIdx = nullptr;
  if (config_.splitKv) {
    segmentIdx = b_.programId(2, "segment_idx");
    Value* segmentFirst = b_.mul(segmentIdx, segmentTiles_, "segment_first_tile");
    tileStart = b_.max(tileStart, segmentFirst, "segment_tile_start");
    tileEnd = b_.min(tileEnd, b_.add(segmentFirst, segmentTiles_), "segment_tile_end");
  }

  // Loop-invariant pieces of the K/V addressing and masks.
  Value* blockSize = b_.constexprValue("BLOCK_SIZE", ScalarKind::I32, "block_size");
  Value* blockSizeN = splatTo(blockSize, {N});
  Value* offsN = b_.arange(0, N, "offs_n");
  Value* blockTableRow = b_.mul(b_.cast(seqIdx, I64), blockTableStride_, "block_table_row");
  Value* kvHeadOffset = b_.mul(b_.cast(kvHeadIdx_, I64), kvStrideHead_, "kv_head_offset");
  Value* kBase = b_.addPtr(kvCache_, kvHeadOffset, "k_base");
  Value* vBase = b_.addPtr(kBase, kvStrideKv_, "v_base");
  Value* dimMaskCol = asColumn(dimMask, N, "dim_mask_col");
  if (config_.checkBounds)
    checkBlockTableEntries(seqIdx, blockTableRow, tileStart, tileEnd, maxSeqPrefixLen, firstAllowedKey);
  // Key j is visible to row m iff j < key_limit[m]: causal, j <= context_len + query_pos[m];
  // otherwise every key of the sequence (the encoder window: those before p + sw).
  // With a window also j > key_floor[m] = p - sw, p = context_len + query_pos[m].
  Value* causalLimit =
      mayBeCausal ? b_.add(splatTo(b_.add(contextLen, oneI32_), {M}), queryPos, "key_limit_causal") : nullptr;
  Value* nonCausalLimit = mayBeNonCausal ? splatTo(seqLen, {M}, "key_limit_all") : nullptr;
  Value* keyFloor2d = nullptr;
  if (config_.slidingWindow > 0) {
    Value* queryAbsPos = b_.add(splatTo(contextLen, {M}), queryPos, "query_abs_pos");
    if (nonCausalLimit)
      nonCausalLimit = b_.min(nonCausalLimit, b_.add(queryAbsPos, splatTo(window, {M})), "key_limit_window");
    keyFloor2d = asColumn(b_.sub(queryAbsPos, splatTo(window, {M}), "key_floor"), N, "key_floor_2d");
  }
  Value* keyLimit = seqCausal ? b_.select(splatTo(seqCausal, {M}), causalLimit, nonCausalLimit, "key_limit")
                    : causalLimit ? causalLimit
                                  : nonCausalLimit;
  Value* keyLimit2d = asColumn(keyLimit, N, "key_limit_2d");
  Value* rowMask2d = asColumn(rowMask, N, "row_mask_2d");
  const double log2e = std::numbers::log2e;
  // Scores in log2 units: (q·k)·scale·log2(e); with a softcap c,
  // c·log2(e)·tanh((q·k)·(scale / c)), vLLM's c·tanh(s / c) times log2(e).
  Value* qkScaleTile = nullptr;
  Value* qkScaleRow = nullptr;  // the same scale per row, without a softcap
  Value* capOutputScaleTile = nullptr;
  // A per-tensor fp8 cache stands for x·k_scale: the scale joins the softmax scale.
  Value* scoreScale = scale_;
  if (kScale_) scoreScale = b_.mul(scale_, b_.load(kScale_, nullptr, nullptr, "k_scale_value"), "qk_scale_fp8");
  Value* vScaleValue = vScale_ ? b_.load(vScale_, nullptr, nullptr, "v_scale_value") : nullptr;
  if (config_.softcap > 0) {
    qkScaleTile = splatTo(b_.div(scoreScale, b_.f32(config_.softcap), "softcap_input_scale"), {M, N});
    capOutputScaleTile = splatTo(b_.f32(config_.softcap * log2e), {M, N}, "softcap_output_scale");
  } else {
    Value* qkScale = b_.mul(scoreScale, b_.f32(log2e), "qk_scale");
    qkScaleTile = splatTo(qkScale, {M, N});
    qkScaleRow = splatTo(qkScale, {M});
  }
  // ALiBi slope of each row's head, times log2(e); heads >= Hq get 0 (as vLLM).
  Value* alibiSlope2d = nullptr;
  if (config_.alibi) {
    Value* slopes = b_.load(b_.addPtr(splatTo(alibiSlopes_, {M}), queryHead), queryHeadMask,
                            b_.constFloat(0.0, Type::tile({M}, f32())), "alibi_slope");
    alibiSlope2d = asColumn(b_.mul(slopes, splatTo(b_.f32(log2e), {M})), N, "alibi_slope_log2");
  }
  // sqrt-ALiBi measures each key from its row's query, p = context_len + query_pos
  // (a row vector, broadcast along the keys where the loop uses it).
  Value* alibiQueryPos = config_.alibiSqrt ? b_.add(splatTo(contextLen, {M}), queryPos, "alibi_query_pos") : nullptr;
  Value* zeroDistance2d = config_.alibiSqrt ? b_.constInt(0, Type::tile({M, N}, i32()), "alibi_zero_distance") : nullptr;
  Value* negInfTile = b_.constFloat(negInf, Type::tile({M, N}, f32()), "neg_inf");
  Value* zeroScores = b_.constFloat(0.0, Type::tile({M, N}, f32()), "zero_scores");
  Value* negInfRow = b_.constFloat(negInf, Type::tile({M}, f32()), "neg_inf_row");
  // Lazy rescaling (in the KV loop below) where each warp owns 32 rows or more
  // (the op API's prefill tiling: 128 rows over 4 warps), whose accumulator
  // rescale is 128 multiplies per thread and tile. H200, bf16, 32/8 heads,
  // D=128, 8 x 2048: causal prefill 1.041-1.049 -> 0.987 ms, non-causal
  // 1.894-1.904 -> 1.781. With fewer rows per warp the branch cost more than
  // the multiplies it skips: DiffKV prefill (16 rows per warp) 1.504 -> 1.603,
  // int8 per-token-head decode 0.344 -> 0.355-0.361, bf16 and fp8 decode
  // within 1% (session 13).
  const bool lazyRescale = c_.prefillTiles() && c_.blockM / config_.numWarps >= 32;
  Value* rescaleThresholdRow =
      lazyRescale ? b_.constFloat(kRescaleThreshold, Type::tile({M}, f32()), "rescale_threshold") : nullptr;
  Value* zeroRow = b_.constFloat(0.0, Type::tile({M}, f32()), "zero_row");

  Value* mInit = b_.constFloat(negInf, Type::tile({M}, f32()), "m_init");
  if (config_.sinks) {
    // vLLM loads the sink of each row's head (-inf for heads >= Hq) as the initial M.
    Value* sinkLogit = b_.load(b_.addPtr(splatTo(sinks_, {M}), queryHead), queryHeadMask, mInit, "sink_logit");
    Value* sinkInit = b_.mul(sinkLogit, splatTo(b_.f32(log2e), {M}), "m_init_sink");
    // Split-KV: the sink joins the softmax once, in segment 0 (as vLLM).
    mInit = segmentIdx ? b_.select(splatTo(b_.cmp(CmpPredicate::Eq, segmentIdx, zeroI32_, "first_segment"), {M}),
                                   sinkInit, mInit, "m_init_segment")
                       : sinkInit;
  }
  Value* lInit = b_.constFloat(1.0, Type::tile({M}, f32()), "l_init");
  Value* accInit = b_.constFloat(0.0, Type::tile({M, DV}, f32()), "acc_init");
  Value* noBlock = b_.constInt(0, Type::tile({N}, i32()), "no_block");
  const ScalarKind cacheKind = kvCachePointerKind(config_.kvCacheFormat, dt);
  Value* zeroKTile = zeroTile({D, N}, cacheKind, "zero_k_tile");
  std::vector<Value*> zeroKPieceTiles;
  for (size_t i = 0; i < pieces.size(); ++i)
    zeroKPieceTiles.push_back(zeroTile({pieces[i].width, N}, cacheKind, "zero_k_tile_piece" + std::to_string(i)));
  Value* zeroVTile = zeroTile({N, DV}, cacheKind, "zero_v_tile");
  const bool rowScales = isPerTokenHead(config_.kvCacheFormat);

  // ---- Loop over KV tiles with the online softmax. ----
  std::vector<Value*> loopInits = {mInit, lInit};
  std::vector<std::string> loopNames = {"m", "l"};
  for (int g = 0; g < G; ++g) {
    loopInits.push_back(accInit);
    loopNames.push_back(G == 1 ? "acc" : "acc" + std::to_string(g));
  }
  // Fewer than 16 rows per warp (decode: one m16 tile) puts the warps side by
  // side along the keys (tensor cores' #mma warps, LayoutAssignment), so a
  // tile's row sum crosses warps through shared memory, two barriers per tile.
  // Such programs keep the sum per column instead: each thread adds its P
  // elements to a running partial rescaled like acc, reduced once after the
  // loop (l itself then carries only the initial 1, rescaled).
  const bool deferRowSum = config_.deferRowSum && dt != ScalarKind::F32 && M / 16 < config_.numWarps;
  if (deferRowSum) {
    loopInits.push_back(b_.constFloat(0.0, Type::tile({M, N}, f32()), "l_partial_init"));
    loopNames.push_back("l_partial");
  }
  // Masked scores are -inf. Where the score scale is known positive (the
  // softmax scale, which the op API checks, without a per-tensor k_scale or a
  // softcap), the mask is applied before scaling: -inf·scale is still -inf,
  // and the scaling multiply then fuses with exp2's subtraction (a select
  // between them keeps them apart). H200, B=64 ctx 4096, 128-key tiles: int4
  // per-token-head decode 0.356 -> 0.331 ms; bf16, fp8 and int8 within 1-2%.
  // Prefill tiles, whose masked loop runs a tile or two per program, keep the
  // select after the scale: with it before, 8 x 2048 causal D=128 took 1.130 ms
  // against 1.106 (ptxas' choices for the whole kernel).
  const bool maskBeforeScale = !capOutputScaleTile && !kScale_ && !c_.prefillTiles();
  // A head size below its power of two leaves Q's and K's columns past it zero
  // (masked loads), and V's: the dots say so (k_extent, n_extent), and skip
  // those mma steps (D=80: 5 of Q·Kᵀ's 8 k-steps, 10 of P·V's 16 n-tiles).
  // DiffKV's pieces are exact widths. Where it pays, measured on the H200
  // (session 12, bf16, 32/8 heads): prefill tiles (8 x 2048 causal, D=80 /
  // 96 / 112: 1.22 / 1.19 / 1.18 -> 1.03 / 1.06 / 1.13 ms) and the f32 FMA
  // path (the k loop shrinks; not timed). Half-precision decode, memory-bound,
  // came out slower with them (B=64 ctx 4096: 0.222 / 0.235 / 0.258 -> 0.248 /
  // 0.265 / 0.302 ms, the same copies and barriers in the PTX), so it keeps
  // the padded steps.
  const bool skipPadding = c_.prefillTiles() || dt == ScalarKind::F32;
  const Builder::DotExtents qkExtents{skipPadding && pieces.empty() && c_.headSize / G < D ? c_.headSize / G : 0, 0};
  const Builder::DotExtents pvExtents{0, skipPadding && c_.valueHeadSize / G < DV ? c_.valueHeadSize / G : 0};
  // One KV loop over tiles [from, to) carrying `inits`; `masked` = false leaves
  // out the per-score mask (tiles whose every key each row of the program sees).
  auto kvLoop = [&](Value* from, Value* to, const std::vector<Value*>& inits, bool masked) {
    auto loop = b_.beginFor(from, to, oneI32_, inits, "tile_idx", loopNames);
    Value* mOld = loop.iterArgs[0];
    Value* lOld = loop.iterArgs[1];

    Value* seqOffset = b_.add(splatTo(b_.mul(loop.inductionVar, tileSize), {N}), offsN, "seq_offset");
    Value* tileMask = b_.cmp(CmpPredicate::Lt, seqOffset, splatTo(maxSeqPrefixLen, {N}), "tile_mask");
    if (firstAllowedKey)
      tileMask = b_.andOp(tileMask, b_.cmp(CmpPredicate::Ge, seqOffset, splatTo(firstAllowedKey, {N})),
                          "tile_mask_window");
    Value* blockTableIdx =
        b_.add(splatTo(blockTableRow, {N}), b_.cast(b_.div(seqOffset, blockSizeN), I64), "block_table_idx");
    Value* physicalBlock32 =
        b_.load(b_.addPtr(splatTo(blockTables_, {N}), blockTableIdx), tileMask, noBlock, "physical_block_i32");
    // Checked: keys of a block outside the cache are masked (never loaded, never
    // scored); checkBlockTableEntries recorded the entry.
    Value* blockValid = nullptr;
    if (config_.checkBounds) {
      blockValid = b_.andOp(b_.cmp(CmpPredicate::Ge, physicalBlock32, noBlock),
                            b_.cmp(CmpPredicate::Lt, physicalBlock32, splatTo(numBlocks_, {N})), "block_valid");
      physicalBlock32 = b_.select(blockValid, physicalBlock32, noBlock, "physical_block_checked");
      tileMask = b_.andOp(tileMask, blockValid, "tile_mask_checked");
    }
    Value* physicalBlock = b_.cast(physicalBlock32, I64, "physical_block");
    Value* tokenInBlock = b_.cast(b_.rem(seqOffset, blockSizeN), I64, "token_in_block");
    Value* slotOffset = b_.add(b_.mul(physicalBlock, splatTo(kvStrideBlock_, {N})),
                               b_.mul(tokenInBlock, splatTo(kvStrideToken_, {N})), "slot_offset");

    // K is read transposed, [HEAD_SIZE_PADDED, TILE_SIZE], so S = Q·K needs no transpose.
    // (DiffKV pieces: one [width, TILE_SIZE] tile per piece, masked by key only.)
    Value* kTile = nullptr;
    std::vector<Value*> kPieceTiles;
    for (size_t i = 0; i < pieces.size(); ++i) {
      const std::string suffix = "_piece" + std::to_string(i);
      const int64_t W = pieces[i].width;
      Value* offset = b_.add(asColumn(pieceColumns[i], N), asRow(slotOffset, W), "k_offset" + suffix);
      kPieceTiles.push_back(b_.load(b_.addPtr(splatTo(kBase, {W, N}), offset), asRow(tileMask, W),
                                    zeroKPieceTiles[i], "k_tile" + suffix));
    }
    if (pieces.empty()) {
      Value* kOffset = b_.add(asColumn(offsD64, N), asRow(slotOffset, D), "k_offset");
      Value* kMask = b_.andOp(dimMaskCol, asRow(tileMask, D), "k_mask");
      kTile = b_.load(b_.addPtr(splatTo(kBase, {D, N}), kOffset), kMask, zeroKTile, "k_tile");
    }
    Value* vOffset = b_.add(asColumn(slotOffset, DV), asRow(offsDV64, N), "v_offset");
    Value* vMask = b_.andOp(asColumn(tileMask, DV), asRow(dimMaskV, N), "v_mask");
    Value* vTile = b_.load(b_.addPtr(splatTo(vBase, {N, DV}), vOffset), vMask, zeroVTile, "v_tile");
    std::vector<Value*> kGroups;
    for (size_t i = 0; i < kPieceTiles.size(); ++i)
      kGroups.push_back(dequantizedGroups(kPieceTiles[i], "k_piece" + std::to_string(i))[0]);
    if (kTile) kGroups = dequantizedGroups(kTile, "k");
    const bool vDequantizedEarly = M > 16 && config_.numWarps > 1;
    std::vector<Value*> vGroups;
    if (vDequantizedEarly) vGroups = dequantizedGroups(vTile, "v");
    Value* kRowScale = rowScales ? loadRowScales(kBase, slotOffset, tileMask, c_.headSize, "k") : nullptr;
    Value* vRowScale = rowScales ? loadRowScales(vBase, slotOffset, tileMask, c_.valueHeadSize, "v") : nullptr;

    // Scores in log2 units: S = (q·k)·scale·log2(e), so exp2(S - m) = exp((q·k)·scale - m').
    Value* qk = zeroScores;
    const size_t qkOperands = qTiles.size();
    for (size_t g = 0; g < qkOperands; ++g)
      qk = b_.dot(qTiles[g], kGroups[g], qk, qkExtents, qkOperands == 1 ? "qk" : "qk" + std::to_string(g));
    // Per-token-head caches: key j's row stands for k·k_scale[j] (vLLM scales S).
    if (kRowScale) qk = b_.mul(qk, asRow(kRowScale, M), "qk_dequantized");
    auto maskScores = [&](Value* unmasked, const std::string& name) {
      if (!masked) return unmasked;
      Value* keyPos2d = asRow(seqOffset, M);
      Value* visible = b_.cmp(CmpPredicate::Lt, keyPos2d, keyLimit2d, "key_visible");
      if (keyFloor2d) visible = b_.andOp(visible, b_.cmp(CmpPredicate::Gt, keyPos2d, keyFloor2d), "key_in_window");
      if (blockValid) visible = b_.andOp(visible, asRow(blockValid, M), "key_in_cache");
      return b_.select(b_.andOp(rowMask2d, visible, "score_mask"), unmasked, negInfTile, name);
    };
    Value* scores = nullptr;
    // The row maximum of the (masked) unscaled Q·K times a positive scale is the
    // scaled scores' maximum exactly (rounding is monotonic). Taken that way the
    // scaled scores only feed exp2's subtraction, where the multiply fuses (an
    // FFMA): 32 multiplies fewer per thread and 32-key prefill tile.
    Value* unscaledForMax = nullptr;
    if (maskBeforeScale) {
      unscaledForMax = maskScores(qk, "qk_masked");
      scores = b_.mul(unscaledForMax, qkScaleTile, "s");
    } else if (!masked && !capOutputScaleTile && !kScale_) {
      unscaledForMax = qk;
      scores = b_.mul(qk, qkScaleTile, "s");
    } else {
      Value* scaledScores = b_.mul(qk, qkScaleTile, "scaled_scores");
      if (capOutputScaleTile)
        scaledScores = b_.mul(b_.unary(Opcode::Tanh, scaledScores), capOutputScaleTile, "capped_scores");
      scores = maskScores(scaledScores, "s");
    }
    if (alibiSlope2d && alibiQueryPos) {
      // sqrt-ALiBi: s -= slope·sqrt(p - j) for keys at or before the query (a key
      // after it, visible only without causality, gets no bias), as vLLM.
      Value* distance =
          b_.max(b_.sub(asColumn(alibiQueryPos, N), asRow(seqOffset, M)), zeroDistance2d, "alibi_distance");
      Value* root = b_.unary(Opcode::Sqrt, b_.cast(distance, ScalarKind::F32), "alibi_sqrt_distance");
      scores = b_.sub(scores, b_.mul(alibiSlope2d, root), "s_alibi");
    } else if (alibiSlope2d) {
      Value* keyDistance = b_.cast(b_.sub(seqOffset, splatTo(contextLen, {N})), ScalarKind::F32, "alibi_distance");
      scores = b_.add(scores, b_.mul(alibiSlope2d, asRow(keyDistance, M)), "s_alibi");
    }

    // Lazy rescaling (as FlashAttention-4; `lazyRescale`): the running maximum m
    // is a reference that moves only when a row's tile maximum passes it by more
    // than kRescaleThreshold (log2 units). Until then exp2(s - m) <= 2^threshold
    // (256: representable in bf16 and f16 P, far from overflow in the f32 sums),
    // alpha is exactly 1, and the accumulator's rescale (mul {skip_ones}) is
    // branched around: after a row's first tiles it almost never moves. l, acc
    // and the LSE (m + log2 l) are exact in any reference. Elsewhere m is the
    // running maximum.
    Value* tileRowMax =
        unscaledForMax && !alibiSlope2d
            ? b_.mul(b_.reduce(Opcode::ReduceMax, unscaledForMax, 1, "qk_row_max"), qkScaleRow, "tile_row_max")
            : b_.reduce(Opcode::ReduceMax, scores, 1, "tile_row_max");
    Value* mCandidate = nullptr;
    if (lazyRescale) {
      Value* mGrows = b_.cmp(CmpPredicate::Gt, tileRowMax, b_.add(mOld, rescaleThresholdRow), "m_grows");
      mCandidate = b_.select(mGrows, tileRowMax, mOld, "m_candidate");
    } else {
      mCandidate = b_.max(mOld, tileRowMax, "m_candidate");
    }
    // A row that has seen only masked keys keeps -inf; use 0 so exp2 below gets
    // -inf - 0 = -inf (weight 0) instead of -inf - (-inf) = NaN.
    Value* mNew = b_.select(b_.cmp(CmpPredicate::Gt, mCandidate, negInfRow), mCandidate, zeroRow, "m_new");
    Value* p = b_.unary(Opcode::Exp2, b_.sub(scores, asColumn(mNew, N)), "p");
    Value* alpha = b_.unary(Opcode::Exp2, b_.sub(mOld, mNew), "alpha");
    Value* lNew = nullptr;
    Value* lPartialNew = nullptr;
    if (deferRowSum) {
      lNew = b_.mul(lOld, alpha, "l_new");
      lPartialNew = b_.add(b_.mul(loop.iterArgs[static_cast<size_t>(2 + G)], asColumn(alpha, N)), p, "l_partial_new");
    } else {
      lNew = b_.add(b_.mul(lOld, alpha), b_.reduce(Opcode::ReduceSum, p, 1, "l_tile"), "l_new");
    }
    // P·V runs in the data type (tensor-core operands); f32 keeps P in f32. With
    // per-token-head scales, value j's row stands for v·v_scale[j]: P's column j is
    // scaled instead (the denominator keeps the unscaled P).
    Value* pForValues = vRowScale ? b_.mul(p, asRow(vRowScale, M), "p_dequantized") : p;
    Value* pOperand = dt == ScalarKind::F32 ? pForValues : b_.cast(pForValues, dt, "p_operand");
    // With one m-tile of rows (decode: the warps split every dot's columns) V
    // is dequantized here, next to P·V: a quantized tile read straight into
    // registers in its operand layout (LayoutAssignment's thread-major byte
    // operands, which need that layout) is converted where the tile IR
    // converts it, and converted at the top of the body its 64 or more
    // registers stayed live through Q·Kᵀ and the softmax. Taller tiles keep
    // it at the top (their V goes through shared memory, and read late there
    // fp8 prefill took 179 -> 246 registers, not measured on the GPU).
    if (!vDequantizedEarly) vGroups = dequantizedGroups(vTile, "v");
    std::vector<Value*> yields = {mNew, lNew};
    std::vector<std::string> finalNames = {"m_final", "l_final"};
    for (int g = 0; g < G; ++g) {
      const std::string suffix = G == 1 ? "" : std::to_string(g);
      Value* accScaled = lazyRescale ? b_.mulSkipOnes(loop.iterArgs[2 + g], asColumn(alpha, DV), "acc_scaled" + suffix)
                                     : b_.mul(loop.iterArgs[2 + g], asColumn(alpha, DV), "acc_scaled" + suffix);
      yields.push_back(b_.dot(pOperand, vGroups[g], accScaled, pvExtents, "acc_new" + suffix));
      finalNames.push_back("acc_final" + suffix);
    }
    if (deferRowSum) {
      yields.push_back(lPartialNew);
      finalNames.push_back("l_partial_final");
    }
    return b_.endFor(yields, finalNames);
  };
  // Prefill tiles: the tiles before the first row's own key (causal), or before
  // the sequence's last tile, hold only keys every row sees, so a first loop
  // over them skips the mask; a second, masked loop takes the rest. Rows past
  // the query length or the heads compute on zero Q there and are never stored.
  // The second loop doubles the IR and so LLVM's time (causal prefill: 62 ms to
  // compile, 44 with one loop), but one loop costs the kernel more (H200, 8 x
  // 2048, 32/8 heads, D=128, session 12): masking every tile 1.29 ms causal and
  // 2.26 non-causal against 1.10 / 2.07, masking under a branch uniform across
  // the program 1.35 / 2.42 (ptxas spills 4-8 times as much), DiffKV 192/128
  // 1.86 / 1.82 against 1.70.
  const bool splitMaskedTiles = c_.prefillTiles() && config_.slidingWindow == 0 && !config_.checkBounds &&
                                !config_.splitKv;
  std::vector<Value*> results;
  if (splitMaskedTiles) {
    Value* seenByAll = seqLen;
    if (mayBeCausal) {
      Value* firstRowLimit = b_.add(b_.add(contextLen, qBlockFirstPos), oneI32_, "first_row_key_limit");
      seenByAll = seqCausal ? b_.select(seqCausal, firstRowLimit, seqLen, "keys_seen_by_all_flagged") : firstRowLimit;
    }
    Value* fullTiles = b_.min(b_.max(b_.div(seenByAll, tileSize), tileStart), tileEnd, "unmasked_tile_end");
    results = kvLoop(fullTiles, tileEnd, kvLoop(tileStart, fullTiles, loopInits, false), true);
  } else {
    results = kvLoop(tileStart, tileEnd, loopInits, true);
  }
  Value* mFinal = results[0];
  Value* lFinal = deferRowSum ? b_.add(results[1], b_.reduce(Opcode::ReduceSum, results[static_cast<size_t>(2 + G)], 1),
                                       "l_final_sum")
                              : results[1];

  if (config_.splitKv) {
    // ---- Split-KV: this segment's unnormalized output, its maximum and sum. ----
    // Scratch rows are (token, query head, segment): index (token·Hq + head)·num_segments
    // + segment, times HEAD_SIZE_PADDED (Dv's, DiffKV) for the output. A row that saw no key (an
    // empty segment, or only masked keys) reports maximum -inf: weight 0 in the
    // reduction, whatever its running maximum was.
    Value* numQueryHeads64 = b_.i64(c_.numQueryHeads);
    Value* segmentRow = b_.add(
        b_.mul(b_.add(b_.mul(queryToken64, splatTo(numQueryHeads64, {M})), queryHead64),
               splatTo(b_.cast(numSegments_, I64), {M})),
        splatTo(b_.cast(segmentIdx, I64), {M}), "segment_row");
    Value* segmentOutputRow = b_.mul(segmentRow, splatTo(b_.i64(c_.valueHeadSizePadded), {M}), "segment_output_row");
    for (int g = 0; g < G; ++g) {
      Value* offset = b_.add(asColumn(segmentOutputRow, DV), asRow(valueGroupColumns[g], M));
      Value* partial = results[2 + g];
      if (vScaleValue) partial = b_.mul(partial, splatTo(vScaleValue, {M, DV}), "segment_v_scaled");
      b_.store(b_.addPtr(splatTo(segmOutput_, {M, DV}), offset, "segm_output_ptrs"), partial, oMask);
    }
    Value* sawKeys = b_.cmp(CmpPredicate::Gt, lFinal, zeroRow, "segment_saw_keys");
    b_.store(b_.addPtr(splatTo(segmMax_, {M}), segmentRow), b_.select(sawKeys, mFinal, negInfRow, "segment_max"),
             rowMask);
    b_.store(b_.addPtr(splatTo(segmExpsum_, {M}), segmentRow), lFinal, rowMask);
    return;
  }

  // ---- Normalize and store. ----
  Value* oRowOffset = b_.add(b_.mul(queryToken64, splatTo(oStrideToken_, {M})),
                             b_.mul(queryHead64, splatTo(oStrideHead_, {M})), "o_row_offset");
  // One division per row, then a multiply per element: a rounded f32 division
  // is a dozen SASS instructions (a refined reciprocal, a range check, a called
  // slow path), and prefill's 128 per thread were a third of its code (5080 ->
  // 3376 SASS instructions). A per-tensor v_scale joins the row factor.
  // fp8 output divides by output_scale: its reciprocal joins the row factor too,
  // and the cast saturates (vLLM clamps to ±448, then converts).
  Value* outputFactor = vScaleValue;
  if (outputScale_) {
    Value* inverse = b_.div(b_.f32(1.0), b_.load(outputScale_, nullptr, nullptr, "output_scale_value"),
                            "inv_output_scale");
    outputFactor = vScaleValue ? b_.mul(vScaleValue, inverse, "v_scale_over_output_scale") : inverse;
  }
  Value* rowNumerator = outputFactor ? splatTo(outputFactor, {M}) : b_.constFloat(1.0, Type::tile({M}, f32()));
  Value* normalizer = asColumn(b_.div(rowNumerator, lFinal, outputFactor ? "out_row_factor" : "inv_l"), DV);
  const ScalarKind outKind = config_.outputFp8 ? ScalarKind::F8E4M3 : dt;
  for (int g = 0; g < G; ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* normalized = b_.mul(results[2 + g], normalizer, "out_f32" + suffix);
    Value* outTile = outKind == ScalarKind::F32 ? normalized : b_.cast(normalized, outKind, "out_tile" + suffix);
    Value* oOffset = b_.add(asColumn(oRowOffset, DV), asRow(valueGroupColumns[g], M), "o_offset" + suffix);
    b_.store(b_.addPtr(splatTo(out_, {M, DV}), oOffset, "o_ptrs" + suffix), outTile, oMask);
  }
  if (lse_) {
    // Natural-log LSE of each row: (M + log2 L)·ln 2 (M is in log2 units), the
    // layout merge_attn_states reads: lse[head · lse_stride_head + token].
    Value* lseLog2 = b_.add(mFinal, b_.unary(Opcode::Log2, lFinal), "lse_log2");
    Value* lseValue = b_.mul(lseLog2, splatTo(b_.f32(std::numbers::ln2), {M}), "lse");
    Value* lseOffset = b_.add(b_.mul(queryHead64, splatTo(lseStrideHead_, {M})), queryToken64, "lse_offset");
    b_.store(b_.addPtr(splatTo(lse_, {M}), lseOffset, "lse_ptrs"), lseValue, rowMask);
  }
}

}  // namespace

int UnifiedAttentionConfig::minimumBlockM() const {
  if (numKvHeads < 1) return 16;
  return std::max(16, nextPowerOfTwo(queriesPerKv()));
}

int UnifiedAttentionConfig::blockM() const { return blockMRows > 0 ? blockMRows : minimumBlockM(); }

int UnifiedAttentionConfig::blockQ() const {
  const int perKv = numKvHeads < 1 ? 1 : std::max(1, queriesPerKv());
  return blockM() / perKv;
}

int UnifiedAttentionConfig::headSizePadded() const { return nextPowerOfTwo(headSize); }

int UnifiedAttentionConfig::valueHeadSizePadded() const { return nextPowerOfTwo(effectiveValueHeadSize()); }

int UnifiedAttentionConfig::kvStrideDivisibility() const {
  // Per-token-head rows are D + 4 bytes (D/2 + 4 for int4): 4-byte multiples at best.
  // DiffKV's packed rows hold a K row and a V row, and kv_stride_kv is the K row.
  if (isPerTokenHead(kvCacheFormat)) {
    const bool fourByteRows = kvCacheScaleByteOffset(kvCacheFormat, headSize) % 4 == 0 &&
                              kvCacheScaleByteOffset(kvCacheFormat, effectiveValueHeadSize()) % 4 == 0;
    return fourByteRows ? 4 : 1;
  }
  // Otherwise rows of D elements: promise a 16-byte multiple where D allows it. The
  // packed DiffKV strides (Dqk, Dqk + Dv, ...) are multiples of gcd(Dqk, Dv).
  const int rowElements = std::gcd(headSize, effectiveValueHeadSize());
  const int elementBytes = ir::storageBits(kvCacheValueKind(kvCacheFormat, dtype)) / 8;
  for (int elements = 16 / elementBytes; elements > 1; elements /= 2)
    if (rowElements % elements == 0) return std::max(elements, rowElements % 8 == 0 ? 8 : 1);
  return rowElements % 8 == 0 ? 8 : 1;
}

std::string UnifiedAttentionConfig::kernelName() const {
  std::string name = std::string("unified_attention_") + ir::scalarName(dtype) + "_h" + std::to_string(numQueryHeads) +
                     "kv" + std::to_string(numKvHeads) + "_d" + std::to_string(headSize) +
                     (differentValueHeadSize() ? "v" + std::to_string(effectiveValueHeadSize()) : std::string()) + "_bs" +
                     std::to_string(blockSize) + (causal ? "_causal" : "_noncausal");
  // Score modifiers change the kernel's meaning: each on one is part of the name.
  if (slidingWindow != 0) name += "_sw" + std::to_string(slidingWindow);
  if (softcap != 0) name += "_softcap" + softcapNameText(softcap);
  if (alibi) name += alibiSqrt ? "_alibisqrt" : "_alibi";
  if (sinks) name += "_sinks";
  if (perSequenceCausal) name += "_seqcausal";
  if (kvCacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(kvCacheFormat);
  if (outputFp8) name += "_outfp8";
  if (outputLse) name += "_lse";
  if (splitKv) name += "_3d";
  if (checkBounds) name += "_checked";
  // Non-default tuning knobs are part of the name so that variants stay distinct.
  const UnifiedAttentionConfig defaults;
  if (tileSize != defaults.tileSize) name += "_t" + std::to_string(tileSize);
  if (numWarps != defaults.numWarps) name += "_w" + std::to_string(numWarps);
  if (blockMRows != defaults.blockMRows) name += "_m" + std::to_string(blockMRows);
  if (numStages != defaults.numStages) name += "_s" + std::to_string(numStages);
  if (!asyncCopy) name += "_noasync";
  if (!sinkSlotReads) name += "_nosink";
  if (!deferRowSum) name += "_rowsum";
  if (qInShared) name += "_qs";
  return name;
}

support::Status UnifiedAttentionConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (numKvHeads < 1) return configError("num_kv_heads (" + std::to_string(numKvHeads) + ") must be at least 1");
  if (numQueryHeads < 1)
    return configError("num_query_heads (" + std::to_string(numQueryHeads) + ") must be at least 1");
  if (numQueryHeads % numKvHeads != 0)
    return configError("num_query_heads (" + std::to_string(numQueryHeads) + ") is not a multiple of num_kv_heads (" +
                       std::to_string(numKvHeads) + ")");
  if (headSize < 32 || headSize > 256)
    return configError("head_size (" + std::to_string(headSize) + ") must be between 32 and 256");
  if (valueHeadSize != 0 && (valueHeadSize < 32 || valueHeadSize > 256))
    return configError("value_head_size (" + std::to_string(valueHeadSize) +
                       ") must be between 32 and 256 (0 = head_size: equal QK and V head sizes)");
  if (blockSize < 16 || blockSize > 256 || blockSize % 16 != 0)
    return configError("block_size (" + std::to_string(blockSize) + ") must be a multiple of 16 between 16 and 256");
  if (tileSize < 16 || tileSize > 256 || !isPowerOfTwo(tileSize))
    return configError("tile_size (" + std::to_string(tileSize) + ") must be a power of two between 16 and 256");
  if (numWarps < 1 || numWarps > 16 || !isPowerOfTwo(numWarps))
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  if (numStages < 1 || numStages > 2)
    return configError("num_stages (" + std::to_string(numStages) +
                       ") must be 1 (no pipelining) or 2 (next KV tile loaded during this one's compute)");
  if (slidingWindow < 0)
    return configError("sliding_window (" + std::to_string(slidingWindow) +
                       ") must not be negative (0 turns the window off)");
  if (!std::isfinite(softcap) || softcap < 0)
    return configError("softcap (" + numberText(softcap) + ") must be a finite number >= 0 (0 turns it off)");
  if (alibiSqrt && !alibi) return configError("alibi_sqrt needs alibi: true (it changes the ALiBi bias's form)");
  if (kvCacheFormat == KvCacheFormat::Int4PerTokenHead && headSize % 2 != 0)
    return configError("head_size (" + std::to_string(headSize) +
                       ") must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  if (kvCacheFormat == KvCacheFormat::Int4PerTokenHead && effectiveValueHeadSize() % 2 != 0)
    return configError("value_head_size (" + std::to_string(effectiveValueHeadSize()) +
                       ") must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  if (blockMRows != 0 && (!isPowerOfTwo(blockMRows) || blockMRows < minimumBlockM() || blockMRows > 256))
    return configError("block_m (" + std::to_string(blockMRows) + ") must be a power of two between " +
                       std::to_string(minimumBlockM()) + " (one token's " + std::to_string(queriesPerKv()) +
                       " query heads, at least 16) and 256");
  return support::Status::ok();
}

support::Expected<std::unique_ptr<ir::Kernel>> buildUnifiedAttention(const UnifiedAttentionConfig& config) {
  if (support::Status s = config.validate(); !s) return s;
  const KernelConstants constants{.blockM = config.blockM(),
                                  .blockQ = config.blockQ(),
                                  .tileSize = config.tileSize,
                                  .headSize = config.headSize,
                                  .headSizePadded = config.headSizePadded(),
                                  .blockSize = config.blockSize,
                                  .queriesPerKv = config.queriesPerKv(),
                                  .numQueryHeads = config.numQueryHeads,
                                  .valueHeadSize = config.effectiveValueHeadSize(),
                                  .valueHeadSizePadded = config.valueHeadSizePadded()};

  auto kernel = std::make_unique<ir::Kernel>(config.kernelName());
  kernel->docLines().push_back(
      "vLLM unified paged attention (2D launch): grid = (num_seqs + num_tokens / BLOCK_Q, Hkv).");
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumWarps, config.numWarps);
  ir::setKernelAttribute(*kernel, ir::KernelAttribute::NumStages, config.numStages);
  if (!config.asyncCopy) ir::setKernelAttribute(*kernel, ir::KernelAttribute::AsyncCopy, 0);
  if (!config.sinkSlotReads) ir::setKernelAttribute(*kernel, ir::KernelAttribute::SinkSlotReads, 0);
  if (config.qInShared) ir::setKernelAttribute(*kernel, ir::KernelAttribute::SharedInvariantOperands, 1);
  // Block numbers two tiles ahead (Pipelining.cpp) where layout assignment
  // converts them into the copy layouts anyway: decode tiles of 128 keys (8
  // block numbers per thread there). With 64 keys, and in int4 rows' narrower
  // copy layouts, it loads them again in each layout (at most 4 per thread),
  // which a carried value cannot do: there the carried row would cost 4 more
  // barriers per tile. H200, B=64 ctx 4096: fp8 per-tensor 0.157 -> 0.152 ms,
  // fp8 / int8 per-token-head 0.231 -> 0.226 / 0.251 -> 0.250 (docs/perf-log.md,
  // session 15).
  if (config.numStages >= 2 && constants.tileSize >= 128 && !constants.prefillTiles() &&
      config.kvCacheFormat != KvCacheFormat::Int4PerTokenHead)
    ir::setKernelAttribute(*kernel, ir::KernelAttribute::PrefetchIndices, 1);
  auto& cx = kernel->constexprs();
  cx.push_back({"BLOCK_M", int64_t{constants.blockM}});
  cx.push_back({"BLOCK_Q", int64_t{constants.blockQ}});
  cx.push_back({"TILE_SIZE", int64_t{constants.tileSize}});
  cx.push_back({"HEAD_SIZE", int64_t{constants.headSize}});
  cx.push_back({"HEAD_SIZE_PADDED", int64_t{constants.headSizePadded}});
  cx.push_back({"BLOCK_SIZE", int64_t{constants.blockSize}});
  cx.push_back({"NUM_QUERIES_PER_KV", int64_t{constants.queriesPerKv}});
  cx.push_back({"NUM_QUERY_HEADS", int64_t{constants.numQueryHeads}});
  if (config.differentValueHeadSize()) {
    cx.push_back({"VALUE_HEAD_SIZE", int64_t{constants.valueHeadSize}});
    cx.push_back({"VALUE_HEAD_SIZE_PADDED", int64_t{constants.valueHeadSizePadded}});
  }
  if (config.slidingWindow > 0) cx.push_back({"SLIDING_WINDOW", int64_t{config.slidingWindow}});
  if (config.softcap > 0) cx.push_back({"SOFTCAP", config.softcap});

  Builder builder(*kernel);
  AttentionBuilder attention(builder, config, constants);
  attention.declareParameters(*kernel);
  attention.build();
  if (support::Status s = builder.finish(); !s) return s;
  return kernel;
}

int64_t unifiedAttentionGridX(const UnifiedAttentionConfig& config, int64_t numSeqs, int64_t totalQueryTokens) {
  return numSeqs + totalQueryTokens / config.blockQ();
}

}  // namespace attnjit::compiler
