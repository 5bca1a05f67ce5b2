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
#include "compiler/kernels/SequenceSearch.h"
#include "compiler/kernels/Broadcasts.h"
#include "compiler/kernels/ConfigChecks.h"
#include "compiler/kernels/KvDequantization.h"
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
  Value* asRow(Value* vec, int64_t rows, std::string name = {}) {
    return broadcastAsRow(b_, vec, rows, std::move(name));
  }
  Value* loadScalar(Value* base, Value* index, std::string name) {
    return b_.load(b_.addPtr(base, index), nullptr, nullptr, std::move(name));
  }

  Value* findSequence(Value* qBlockGlobalIdx);
  // Everything a (query block, KV head) needs: its sequence, its queries, the
  // program body (kvHeadIdx_ set).
  void buildWorkItem(Value* qBlockGlobalIdx);
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
  // Quantized cache tiles (compiler/kernels/KvDequantization.h) in this kernel's format and data type.
  // K tiles convert to Q·K's operand type, V tiles to P·V's.
  std::vector<Value*> keyGroups(Value* raw, const std::string& name, Value* zeroPoints = nullptr) {
    return compiler::dequantizedGroups(b_, config_.kvCacheFormat, config_.queryKeyDotKind(), raw, name, zeroPoints);
  }
  std::vector<Value*> valueGroups(Value* raw, Value* zeroPoints) {
    return compiler::dequantizedGroups(b_, config_.kvCacheFormat, config_.valueDotKind(), raw, "v", zeroPoints);
  }
  Value* loadRowScales(Value* rowBase, Value* slotOffset, Value* tileMask, int rowHeadSize, const std::string& name) {
    return compiler::loadRowScales(b_, config_.kvCacheFormat, config_.kvStrideDivisibility(), rowBase, slotOffset,
                                   tileMask, rowHeadSize, name);
  }
  Value* zeroTile(std::vector<int64_t> shape, ScalarKind kind, std::string name = {});
  // q's element type in memory, and a loaded Q tile in the dots' operand type.
  ScalarKind qKind() const { return config_.queryFp8 ? ScalarKind::F8E4M3 : config_.dtype; }
  Value* queryInDtype(Value* qTile, const std::string& suffix) {
    return qKind() != config_.queryKeyDotKind() ? b_.cast(qTile, config_.queryKeyDotKind(), "q_values" + suffix)
                                                : qTile;
  }
  // One program's work, in the order the kernel computes it; the stages share
  // their values through p_.
  void buildProgramBody(Value* seqIdx, Value* qBlockLocalIdx, Value* queryStart, Value* queryLen);
  // The query tile: the rows' tokens and heads, their masks, Q loaded (one tile
  // per group or DiffKV piece), the output's columns.
  void buildQueryTile(Value* queryStart, Value* qBlockLocalIdx, Value* queryLen);
  // The program's keys: seq_len, the causal reach of its last row, the tiles the
  // window and the split-KV segment leave.
  void buildKeyRange(Value* seqIdx, Value* queryLen);
  // Loop-invariant K/V addressing: block-table row, K and V bases (and the
  // bounds check of the block-table entries the loop will read).
  void buildKvAddressing(Value* seqIdx);
  // What turns Q·Kᵀ into scores: visibility limits (causal, window), the scale
  // in log2 units, softcap, ALiBi.
  void buildScoreModifiers();
  // The online softmax's initial state (sinks included) and the loop's choices:
  // lazy rescaling, the per-column row sum, masking before the scale, padding skipped.
  void buildSoftmaxState();
  // The keys of KV tile `tileIdx` and where their cache rows are: positions,
  // which to load (tile_mask), and the rows' offsets from the K/V bases.
  struct TileAddress {
    Value *seqOffset = nullptr, *tileMask = nullptr, *blockValid = nullptr, *physicalBlock = nullptr,
          *tokenInBlock = nullptr, *slotOffset = nullptr;
    std::vector<Value*> keyInRange;  // mm_prefix_range: the keys of each range the program uses
  };
  // `tileInRange` (a scalar i1, optional) masks the whole tile, block numbers included.
  TileAddress tileAddress(Value* tileIdx, const std::string& suffix, Value* tileInRange = nullptr);
  // The V tile of KV tile `tileIdx` (masked keys read zero).
  Value* loadValueTile(const TileAddress& at, const std::string& suffix);
  // overlap_softmax: tile `tileIdx`'s V, none of it loaded before the program's
  // first tile (the zero P carried into the first iteration meets zeros).
  Value* loadLaggingValueTile(Value* tileIdx, const std::string& suffix);
  // A KV tile's K as loaded: one [D, N] tile, or DiffKV's pieces.
  struct KeyTiles {
    Value* whole = nullptr;
    std::vector<Value*> pieces;
  };
  KeyTiles loadKeyTiles(const TileAddress& at, const std::string& suffix);
  // Those tiles as Q·Kᵀ's B operands, one per Q group or piece.
  std::vector<Value*> keyOperands(const KeyTiles& k, Value* kZeroPoints, const std::string& suffix);
  // Q·Kᵀ over the groups (f32, unscaled, unmasked).
  Value* queryKeyDots(const std::vector<Value*>& kGroups, const std::string& suffix);
  // Whether the KV loop's K and V tiles are load_tensor tiles of the cache
  // (UnifiedAttentionConfig::tensorMemoryAccelerator); their loads.
  bool tensorTiles(bool masked) const;
  // The block numbers of tile `tileIdx`'s blocks (tile_size / block_size).
  Value* tileBlocks(Value* tileIdx, const std::string& name);
  // K (kv = 0) or V (1) of those blocks as a [tile_size, head_size_padded] load_tensor.
  Value* loadCacheTile(Value* blocks, int kv, const std::string& name);
  // One KV loop over tiles [from, to) carrying `inits`; `masked` = false leaves
  // out the per-score mask (tiles whose every key each row of the program sees),
  // `biased` = false the qq_bias (tiles before the first query's key).
  std::vector<Value*> buildKvLoop(Value* from, Value* to, const std::vector<Value*>& inits, bool masked,
                                  bool biased = true);
  // The KV loop, or an unmasked loop then a masked one (prefill tiles); each
  // cut where qq_bias's keys begin.
  std::vector<Value*> buildKvLoops();
  // The tile of the sequence's first query key (context_len), where qq_bias begins.
  Value* qqBiasFirstTile() { return b_.div(p_.contextLen, p_.tileSize, "qq_bias_tile"); }
  // The body after the key range: addressing, the KV loops and the epilogue
  // (split-KV: the segment's partials).
  void buildSegmentBody(Value* seqIdx);
  // Row (token·Hq + head)·num_segments + segment of each query row in the split-KV scratch.
  Value* segmentRows();
  // The partial outputs of a split-KV segment at `segmentRow`'s rows (a null
  // partial: zeros).
  void storeSegmentOutputs(Value* segmentRow, const std::vector<Value*>& partials);
  // cluster_split: the cluster's segments merged into this program's rows, and
  // the store masks narrowed to this rank's share.
  void mergeClusterSegments(std::vector<Value*>& results, Value*& mFinal, Value*& lFinal);
  // Split-KV stage 1: the segment's unnormalized output, maximum and sum.
  void storeSegmentPartials(const std::vector<Value*>& results, Value* mFinal, Value* lFinal);
  // acc / l cast to the output type, and the LSE.
  void normalizeAndStore(const std::vector<Value*>& results, Value* mFinal, Value* lFinal);
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

  // The values one program's stages share, set in the order of the stages above.
  struct ProgramValues {
    // Query tile.
    Value *offsM = nullptr, *offsD = nullptr, *qBlockFirstPos = nullptr, *queryPos = nullptr, *queryToken = nullptr,
          *queryHead = nullptr, *dimMask = nullptr, *queryHeadMask = nullptr, *rowMask = nullptr, *qMask = nullptr,
          *offsD64 = nullptr, *dimMaskV = nullptr, *oMask = nullptr, *offsDV64 = nullptr, *queryToken64 = nullptr,
          *queryHead64 = nullptr;
    std::vector<Value*> groupColumns, valueGroupColumns, qTiles, pieceColumns;
    std::vector<QkPiece> pieces;
    // Key range.
    Value *seqLen = nullptr, *contextLen = nullptr, *maxSeqPrefixLen = nullptr, *seqCausal = nullptr,
          *tileSize = nullptr, *numTiles = nullptr, *tileStart = nullptr, *tileEnd = nullptr,
          *firstAllowedKey = nullptr, *window = nullptr, *rightWindow = nullptr, *segmentIdx = nullptr,
          *chunkSize = nullptr, *firstRowPos = nullptr, *lastRowPos = nullptr;
    bool mayBeCausal = false, mayBeNonCausal = false;
    // mm_prefix_ranges: each range's first and last position (last = -1 for a
    // range the program does not use), as scalars and splat along the keys,
    // and whether each row's query lies in it.
    std::vector<Value*> rangeFirst, rangeLast, rangeFirstKeys, rangeLastKeys, rowInRange2d;
    // K/V addressing.
    Value *kScaleBase = nullptr, *vScaleBase = nullptr;  // separate per-token-head scales, this KV head's
    Value *blockSizeN = nullptr, *offsN = nullptr, *blockTableRow = nullptr, *kBase = nullptr, *vBase = nullptr,
          *dimMaskCol = nullptr;
    // Score modifiers.
    Value *keyFloor2d = nullptr, *keyLimit2d = nullptr, *rowMask2d = nullptr, *qkScaleTile = nullptr,
          *qkScaleRow = nullptr, *capOutputScaleTile = nullptr, *vScaleValue = nullptr, *alibiSlope2d = nullptr,
          *alibiQueryPos = nullptr, *zeroDistance2d = nullptr, *negInfTile = nullptr, *zeroScores = nullptr,
          *negInfRow = nullptr, *qqBiasRowOffset2d = nullptr, *qqBiasRowMask2d = nullptr, *qqBiasLog2e = nullptr,
          *qqBiasColumns = nullptr;
    // Online softmax state and loop choices.
    Value *rescaleThresholdRow = nullptr, *zeroRow = nullptr, *noBlock = nullptr, *zeroKTile = nullptr,
          *zeroVTile = nullptr;
    std::vector<Value*> zeroKPieceTiles, loopInits;
    std::vector<std::string> loopNames;
    bool lazyRescale = false, deferRowSum = false, maskBeforeScale = false, rowScales = false;
    // overlap_softmax: the loop carries the previous tile's P operand (last
    // of the loop values) and runs its P·V next to this tile's Q·Kᵀ.
    bool overlapSoftmax = false;
    size_t lagP = 0;  // its index among the loop values
    // prefetch_scores: the loop carries the Q·Kᵀ of the tile it works on,
    // computed by the previous iteration (or before the first loop), and
    // computes the next tile's before its softmax.
    bool prefetchScores = false;
    size_t nextScores = 0;  // its index among the loop values
    Builder::DotOptions qkDot{0, 0}, pvDot{0, 0};
  };

  Builder& b_;
  const UnifiedAttentionConfig& config_;
  const KernelConstants& c_;

  // Parameters.
  Value *qScale_ = nullptr;
  Value *out_ = nullptr, *q_ = nullptr, *kvCache_ = nullptr, *blockTables_ = nullptr, *seqLens_ = nullptr,
        *cuSeqlensQ_ = nullptr, *scale_ = nullptr, *numSeqs_ = nullptr, *seqSearchSteps_ = nullptr;
  Value *alibiSlopes_ = nullptr, *sinks_ = nullptr;  // present only with their feature
  Value *qqBias_ = nullptr, *qqBiasStride_ = nullptr;  // qq_bias
  Value* mmPrefixRange_ = nullptr;                    // mm_prefix_ranges
  Value* outputScale_ = nullptr;                      // 2D with output_fp8
  Value *kScale_ = nullptr, *vScale_ = nullptr;       // per-tensor fp8 caches
  // Separate per-token-head scales: the tensors and their strides (f32 elements).
  Value *kScaleCache_ = nullptr, *vScaleCache_ = nullptr, *scaleStrideBlock_ = nullptr,
        *scaleStrideToken_ = nullptr, *scaleStrideHead_ = nullptr;
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
  ProgramValues p_;
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
  q_ = kernel.addParameter(Type::pointer(config_.queryFp8 ? ScalarKind::F8E4M3 : dt), "q", aligned);
  kvCache_ = kernel.addParameter(Type::pointer(kvCachePointerKind(config_.kvCacheFormat, dt)), "kv_cache", aligned);
  blockTables_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "block_tables", aligned);
  seqLens_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "seq_lens", aligned);
  cuSeqlensQ_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "cu_seqlens_q", aligned);
  if (config_.perSequenceCausal) causalFlags_ = kernel.addParameter(Type::pointer(ScalarKind::I8), "causal_flags");
  if (isPerTensorFp8(config_.kvCacheFormat)) {
    kScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale");
    vScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale");
  }
  if (config_.queryFp8) qScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "q_scale");
  if (config_.alibi) alibiSlopes_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "alibi_slopes");
  if (config_.sinks) sinks_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "sinks");
  if (config_.qqBias) qqBias_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "qq_bias");
  if (config_.mmPrefixRanges > 0)
    mmPrefixRange_ = kernel.addParameter(Type::pointer(ScalarKind::I32), "mm_prefix_range");
  if (config_.outputFp8 && !config_.splitKv)
    outputScale_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "output_scale");
  if (config_.outputLse && !config_.splitKv) lse_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "lse");
  if (config_.separateScales()) {
    kScaleCache_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "k_scale_cache");
    vScaleCache_ = kernel.addParameter(Type::pointer(ScalarKind::F32), "v_scale_cache");
  }
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
  if (config_.qqBias) qqBiasStride_ = kernel.addParameter(i64(), "qq_bias_stride");
  if (config_.separateScales()) {
    scaleStrideBlock_ = kernel.addParameter(i64(), "scale_stride_block");
    scaleStrideToken_ = kernel.addParameter(i64(), "scale_stride_token");
    scaleStrideHead_ = kernel.addParameter(i64(), "scale_stride_head");
  }
  if (config_.splitKv) {
    numSegments_ = kernel.addParameter(i32(), "num_segments");
    segmentTiles_ = kernel.addParameter(i32(), "segment_tiles");
  }
  if (config_.clusterSplit > 0) segmentTiles_ = kernel.addParameter(i32(), "segment_tiles");
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
// cu_seqlens_q[s] / BLOCK_Q + s <= q_block_global_idx. seq_search_steps < 0
// says every sequence has exactly one query token (decode): cu_seqlens_q[s] = s,
// so sequence s owns q block s + s / BLOCK_Q and block b belongs to
// b - (b + 1) / (BLOCK_Q + 1), found without the search's chain of dependent
// loads (clamped to the last sequence, so a wrong claim stays in bounds).
Value* AttentionBuilder::findSequence(Value* qBlockGlobalIdx) {
  Value* oneTokenEach = b_.cmp(CmpPredicate::Lt, seqSearchSteps_, zeroI32_, "one_token_each");
  Value* steps = b_.max(seqSearchSteps_, zeroI32_, "search_steps");
  const SequenceSearch search{qBlockGlobalIdx, steps, numSeqs_, zeroI32_, oneI32_};
  Value* searched = searchSequence(
      b_, search,
      [&](Value* mid, Value*) {
        // mid <= num_seqs always (lo <= hi <= num_seqs), and cu_seqlens_q has num_seqs + 1 entries.
        Value* midStart = loadScalar(cuSeqlensQ_, mid, "mid_query_start");
        return b_.add(b_.div(midStart, blockQ_), mid, "mid_q_block");
      },
      "seq_idx_searched");
  Value* blocksPerCycle = b_.add(blockQ_, oneI32_, "block_q_plus_one");
  Value* cycles = b_.div(b_.add(qBlockGlobalIdx, oneI32_), blocksPerCycle, "block_cycles");
  Value* direct = b_.sub(qBlockGlobalIdx, cycles, "seq_idx_one_token");
  direct = b_.min(direct, b_.sub(numSeqs_, oneI32_), "seq_idx_one_token_clamped");
  return b_.select(oneTokenEach, direct, searched, "seq_idx");
}

void AttentionBuilder::build() {
  // With prefill tiles, the programs of a sequence's last query blocks see the
  // most keys (causal): numbered from the end, they start first and the short
  // ones fill the tail of the launch instead of the long ones (1.4% on causal
  // prefill; docs/perf-log.md, 2026-11-30). A permutation of axis 0, so
  // results are unchanged.
  const bool longestFirst = c_.prefillTiles();
  Value* qBlockGlobalIdx = nullptr;
  if (!config_.persistent) {
    qBlockGlobalIdx = b_.programId(0, longestFirst ? "program_idx" : "q_block_global_idx");
    kvHeadIdx_ = b_.programId(1, "kv_head_idx");
  }
  blockQ_ = b_.constexprValue("BLOCK_Q", ScalarKind::I32, "block_q");
  zeroI32_ = constI32(0, "zero");
  oneI32_ = constI32(1, "one");
  if (config_.clusterSplit > 0) numSegments_ = constI32(config_.clusterSplit, "num_segments");
  if (longestFirst && !config_.persistent)
    qBlockGlobalIdx = b_.sub(b_.sub(b_.numPrograms(0), oneI32_), qBlockGlobalIdx, "q_block_global_idx");
  queriesPerKv_ = b_.constexprValue("NUM_QUERIES_PER_KV", ScalarKind::I32, "queries_per_kv");
  if (config_.persistent) {
    // Work item i is query block (q_blocks - 1 - i mod q_blocks) of KV head
    // i / q_blocks: the order in which a full grid's programs start (x fastest,
    // numbered from the end), so that program p's items p, p + P, ... add up
    // to about the same work as the others' (with the heads as the fast index
    // a causal 8 x 2048 batch leaves the busiest program 13% above the mean
    // work, 3% in this order).
    // q_blocks is the full grid's x (num_seqs + num_tokens / BLOCK_Q),
    // computed here, so any launch covers every item.
    Value* program = b_.add(b_.programId(0, "program_x"), b_.mul(b_.programId(1, "program_y"), b_.numPrograms(0)),
                            "program_idx");
    Value* programs = b_.mul(b_.numPrograms(0), b_.numPrograms(1), "programs");
    Value* numTokens = loadScalar(cuSeqlensQ_, numSeqs_, "num_tokens");
    Value* qBlocks = b_.add(numSeqs_, b_.div(numTokens, blockQ_), "q_blocks");
    Value* kvHeads = constI32(config_.numKvHeads, "num_kv_heads");
    auto items = b_.beginFor(program, b_.mul(qBlocks, kvHeads, "work_items"), programs, {}, "work_item");
    kvHeadIdx_ = b_.div(items.inductionVar, qBlocks, "kv_head_idx");
    qBlockGlobalIdx =
        b_.sub(b_.sub(qBlocks, oneI32_), b_.rem(items.inductionVar, qBlocks), "q_block_global_idx");
    buildWorkItem(qBlockGlobalIdx);
    b_.endFor({});
    return;
  }
  buildWorkItem(qBlockGlobalIdx);
}

void AttentionBuilder::buildWorkItem(Value* qBlockGlobalIdx) {
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
  buildQueryTile(queryStart, qBlockLocalIdx, queryLen);
  buildKeyRange(seqIdx, queryLen);
  // Split-KV: a segment with no tile of its sequence's range (past its keys,
  // before its window: most of a short sequence's segments in a call that
  // knows no lengths) writes only its maxima, -inf, and skips the rest of the
  // body (block-table lookups, pipeline fill, 4·D bytes of partial output a
  // row). reduce_segments reads the sums and outputs of the run of segments
  // that saw a key alone, and without sinks such a segment lies outside it.
  // Segment 0 carries the sinks, so it always runs and counts as keyed: the
  // empty segments between it and a window's tiles then write zero sums and
  // outputs as well.
  const bool skipEmptySegments = config_.splitKv;
  if (skipEmptySegments) {
    Value* hasTiles = b_.cmp(CmpPredicate::Lt, p_.tileStart, p_.tileEnd, "segment_has_tiles");
    if (config_.sinks)
      hasTiles = b_.orOp(hasTiles, b_.cmp(CmpPredicate::Eq, p_.segmentIdx, zeroI32_, "sink_segment"),
                         "segment_has_work");
    b_.beginIf(hasTiles);
  }
  buildSegmentBody(seqIdx);
  if (skipEmptySegments) {
    b_.beginElse();
    const int64_t M = c_.blockM;
    Value* rows = segmentRows();
    b_.store(b_.addPtr(splatTo(segmMax_, {M}), rows),
             b_.constFloat(-std::numeric_limits<double>::infinity(), Type::tile({M}, f32()), "empty_segment_max"),
             p_.rowMask);
    if (config_.sinks) {
      b_.store(b_.addPtr(splatTo(segmExpsum_, {M}), rows), b_.constFloat(0.0, Type::tile({M}, f32()), "empty_sum"),
               p_.rowMask);
      storeSegmentOutputs(rows, std::vector<Value*>(static_cast<size_t>(groups()), nullptr));
    }
    b_.endIf();
  }
}

void AttentionBuilder::buildSegmentBody(Value* seqIdx) {
  buildKvAddressing(seqIdx);
  buildScoreModifiers();
  buildSoftmaxState();
  std::vector<Value*> results = buildKvLoops();
  const int G = groups();
  if (p_.overlapSoftmax) {
    // The last tile's P·V, which no iteration followed.
    const std::vector<Value*> vGroups = valueGroups(loadLaggingValueTile(b_.sub(p_.tileEnd, oneI32_), "_last"), nullptr);
    for (int g = 0; g < G; ++g) {
      const size_t acc = static_cast<size_t>(2 + g);
      results[acc] = b_.dot(results[p_.lagP], vGroups[static_cast<size_t>(g)], results[acc], p_.pvDot,
                            G == 1 ? "acc_last" : "acc_last" + std::to_string(g));
    }
  }
  Value* mFinal = results[0];
  Value* lFinal =
      p_.deferRowSum
          ? b_.add(results[1], b_.reduce(Opcode::ReduceSum, results[static_cast<size_t>(2 + G)], 1), "l_final_sum")
          : results[1];
  if (config_.splitKv) {
    storeSegmentPartials(results, mFinal, lFinal);
    return;
  }
  if (config_.clusterSplit > 0) mergeClusterSegments(results, mFinal, lFinal);
  normalizeAndStore(results, mFinal, lFinal);
}

void AttentionBuilder::buildQueryTile(Value* queryStart, Value* qBlockLocalIdx, Value* queryLen) {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, D = c_.headSizePadded / G, DV = c_.valueHeadSizePadded / G;
  const ScalarKind I64 = ScalarKind::I64;
  // ---- Query tile: row m is token q_block_local_idx·BLOCK_Q + m / QPK, head
  // kv_head·QPK + m % QPK. ----
  p_.offsM = b_.arange(0, M, "offs_m");
  p_.offsD = b_.arange(0, D, "offs_d");
  Value* qpkM = splatTo(queriesPerKv_, {M});
  p_.qBlockFirstPos = b_.mul(qBlockLocalIdx, blockQ_, "q_block_first_pos");
  p_.queryPos = b_.add(splatTo(p_.qBlockFirstPos, {M}), b_.div(p_.offsM, qpkM), "query_pos");
  p_.queryToken = b_.add(splatTo(queryStart, {M}), p_.queryPos, "query_token");
  p_.queryHead = b_.add(splatTo(b_.mul(kvHeadIdx_, queriesPerKv_), {M}), b_.rem(p_.offsM, qpkM), "query_head");

  // Columns of a group: i < HEAD_SIZE / groups (int4 needs an even head size).
  Value* headSize = G == 1 ? b_.constexprValue("HEAD_SIZE", ScalarKind::I32, "head_size")
                           : constI32(c_.headSize / G, "group_size");
  p_.dimMask = b_.cmp(CmpPredicate::Lt, p_.offsD, splatTo(headSize, {D}), "dim_mask");
  Value* queryPosMask = b_.cmp(CmpPredicate::Lt, p_.queryPos, splatTo(queryLen, {M}), "query_pos_mask");
  Value* numQueryHeads = b_.constexprValue("NUM_QUERY_HEADS", ScalarKind::I32, "num_query_heads");
  p_.queryHeadMask = b_.cmp(CmpPredicate::Lt, p_.queryHead, splatTo(numQueryHeads, {M}), "query_head_mask");
  p_.rowMask = b_.andOp(queryPosMask, p_.queryHeadMask, "row_mask");
  Value* dimMaskRow = asRow(p_.dimMask, M, "dim_mask_2d");
  p_.qMask = b_.andOp(asColumn(p_.rowMask, D), dimMaskRow, "q_mask");

  p_.offsD64 = b_.cast(p_.offsD, I64, "offs_d_i64");
  // Head-dimension element of each group column.
  p_.groupColumns = {};
  for (int g = 0; g < G; ++g)
    p_.groupColumns.push_back(G == 1 ? p_.offsD64
                                  : b_.add(b_.mul(p_.offsD64, b_.constInt(G, p_.offsD64->type())),
                                           b_.constInt(g, p_.offsD64->type()), "group_column" + std::to_string(g)));
  // The V side (V tiles, the accumulator, the output): with equal head sizes the
  // same values as above (and the same IR); DiffKV builds its own from Dv.
  p_.dimMaskV = p_.dimMask;
  p_.oMask = p_.qMask;
  p_.offsDV64 = p_.offsD64;
  p_.valueGroupColumns = p_.groupColumns;
  if (config_.differentValueHeadSize()) {
    Value* offsDV = b_.arange(0, DV, "offs_dv");
    Value* valueHeadSize = G == 1 ? b_.constexprValue("VALUE_HEAD_SIZE", ScalarKind::I32, "value_head_size")
                                  : constI32(c_.valueHeadSize / G, "value_group_size");
    p_.dimMaskV = b_.cmp(CmpPredicate::Lt, offsDV, splatTo(valueHeadSize, {DV}), "dim_mask_v");
    p_.oMask = b_.andOp(asColumn(p_.rowMask, DV), asRow(p_.dimMaskV, M, "dim_mask_v_2d"), "o_mask");
    p_.offsDV64 = b_.cast(offsDV, I64, "offs_dv_i64");
    p_.valueGroupColumns.clear();
    for (int g = 0; g < G; ++g)
      p_.valueGroupColumns.push_back(G == 1 ? p_.offsDV64
                                            : b_.add(b_.mul(p_.offsDV64, b_.constInt(G, p_.offsDV64->type())),
                                                     b_.constInt(g, p_.offsDV64->type()),
                                                     "value_group_column" + std::to_string(g)));
  }
  p_.queryToken64 = b_.cast(p_.queryToken, I64, "query_token_i64");
  p_.queryHead64 = b_.cast(p_.queryHead, I64, "query_head_i64");
  Value* qRowOffset = b_.add(b_.mul(p_.queryToken64, splatTo(qStrideToken_, {M})),
                             b_.mul(p_.queryHead64, splatTo(qStrideHead_, {M})), "q_row_offset");
  p_.qTiles = {};
  p_.pieces = qkPieces();
  // Head-dimension columns of each Q·Kᵀ piece (exact: no mask beyond the rows').
  p_.pieceColumns = {};
  for (size_t i = 0; i < p_.pieces.size(); ++i) {
    const std::string suffix = "_piece" + std::to_string(i);
    p_.pieceColumns.push_back(b_.add(b_.cast(b_.arange(0, p_.pieces[i].width), I64),
                                  b_.constInt(p_.pieces[i].start, Type::tile({p_.pieces[i].width}, i64())),
                                  "qk_columns" + suffix));
    const int64_t W = p_.pieces[i].width;
    Value* qOffset = b_.add(asColumn(qRowOffset, W), asRow(p_.pieceColumns[i], M), "q_offset" + suffix);
    Value* qTile = b_.load(b_.addPtr(splatTo(q_, {M, W}), qOffset, "q_ptrs" + suffix), asColumn(p_.rowMask, W),
                           zeroTile({M, W}, qKind()), "q_tile" + suffix);
    p_.qTiles.push_back(queryInDtype(qTile, suffix));
  }
  for (int g = 0; g < G && p_.pieces.empty(); ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* qOffset = b_.add(asColumn(qRowOffset, D), asRow(p_.groupColumns[g], M), "q_offset" + suffix);
    Value* qPtrs = b_.addPtr(splatTo(q_, {M, D}), qOffset, "q_ptrs" + suffix);
    Value* qTile = b_.load(qPtrs, p_.qMask, zeroTile({M, D}, qKind()), "q_tile" + suffix);
    p_.qTiles.push_back(queryInDtype(qTile, suffix));
  }
}

void AttentionBuilder::buildKeyRange(Value* seqIdx, Value* queryLen) {
  // ---- Key range of this program. ----
  p_.seqLen = loadScalar(seqLens_, seqIdx, "seq_len");
  if (config_.checkBounds) p_.seqLen = checkedSeqLen(seqIdx, p_.seqLen, queryLen);
  p_.contextLen = b_.sub(p_.seqLen, queryLen, "context_len");
  p_.maxSeqPrefixLen = p_.seqLen;
  // Per-sequence flags decide at run time what config_.causal decides otherwise;
  // both forms are then computed and selected.
  p_.seqCausal = nullptr;
  if (causalFlags_)
    p_.seqCausal = b_.cmp(CmpPredicate::Ne, loadScalar(causalFlags_, seqIdx, "causal_flag"),
                       b_.constInt(0, Type::scalar(ScalarKind::I8)), "seq_causal");
  p_.mayBeCausal = config_.causal || p_.seqCausal;
  p_.mayBeNonCausal = !config_.causal || p_.seqCausal;
  if (p_.mayBeCausal) {
    // The last row of the block sees keys up to context_len + its position.
    Value* lastRowReach = b_.add(b_.add(p_.contextLen, p_.qBlockFirstPos),
                                 constI32((c_.blockM - 1) / c_.queriesPerKv + 1, "query_rows_span"), "last_row_reach");
    p_.maxSeqPrefixLen = b_.min(lastRowReach, p_.seqLen, "max_seq_prefix_len");
    if (p_.seqCausal)
      p_.maxSeqPrefixLen = b_.select(p_.seqCausal, p_.maxSeqPrefixLen, p_.seqLen, "max_seq_prefix_len_flagged");
  }
  // The absolute positions of the program's first and last valid rows.
  Value* firstRowPos = b_.add(p_.contextLen, p_.qBlockFirstPos, "first_row_pos");
  Value* lastRow = b_.min(b_.add(p_.qBlockFirstPos, constI32((c_.blockM - 1) / c_.queriesPerKv)),
                          b_.sub(queryLen, oneI32_), "qpos_hi");
  Value* lastRowPos = b_.add(p_.contextLen, lastRow, "last_row_pos");
  p_.firstRowPos = firstRowPos;
  p_.lastRowPos = lastRowPos;
  // mm_prefix_range: the ranges that hold one of the program's rows open their
  // keys to it (a range holding none changes none of its scores, so it is
  // turned off for the program: its keys are neither walked nor read). The
  // program then reaches the end of those ranges, and starts at their first key.
  p_.rangeFirst.clear();
  p_.rangeLast.clear();
  Value *rangeFloor = nullptr, *rangeReach = nullptr;
  if (mmPrefixRange_) {
    const int ranges = config_.mmPrefixRanges;
    Value* rangeRow = b_.mul(seqIdx, constI32(2 * ranges, "range_row_ints"), "range_row");
    rangeReach = zeroI32_;
    rangeFloor = p_.seqLen;
    for (int r = 0; r < ranges; ++r) {
      const std::string suffix = std::to_string(r);
      Value* first = loadScalar(mmPrefixRange_, b_.add(rangeRow, constI32(2 * r)), "range_first" + suffix);
      Value* last = loadScalar(mmPrefixRange_, b_.add(rangeRow, constI32(2 * r + 1)), "range_last" + suffix);
      Value* holdsRow = b_.andOp(b_.andOp(b_.cmp(CmpPredicate::Lt, first, last),
                                          b_.cmp(CmpPredicate::Le, first, lastRowPos)),
                                 b_.cmp(CmpPredicate::Ge, last, firstRowPos), "range_holds_row" + suffix);
      rangeReach = b_.select(holdsRow, b_.max(rangeReach, b_.min(b_.add(last, oneI32_), p_.seqLen)), rangeReach,
                             "range_reach" + suffix);
      rangeFloor = b_.select(holdsRow, b_.min(rangeFloor, b_.max(first, zeroI32_)), rangeFloor,
                             "range_floor" + suffix);
      p_.rangeFirst.push_back(first);
      p_.rangeLast.push_back(b_.select(holdsRow, last, constI32(-1), "range_last_used" + suffix));
    }
    p_.maxSeqPrefixLen = b_.max(p_.maxSeqPrefixLen, rangeReach, "max_seq_prefix_len_ranges");
  }
  p_.tileSize = b_.constexprValue("TILE_SIZE", ScalarKind::I32, "tile_size");
  p_.numTiles = b_.div(b_.sub(b_.add(p_.maxSeqPrefixLen, p_.tileSize), oneI32_), p_.tileSize, "num_tiles");
  // Sliding window: vLLM's tile pruning. The first row of the program sees keys
  // from context_len + its position - sw + 1 on, and later rows start later, so
  // earlier keys (and tiles holding only such keys) serve no row. Causal, vLLM's
  // tile_end (the tile of the last valid row's own key, plus one) is num_tiles.
  p_.tileStart = zeroI32_;
  p_.tileEnd = p_.numTiles;
  p_.firstAllowedKey = nullptr;
  p_.window = nullptr;
  p_.rightWindow = nullptr;
  p_.chunkSize = nullptr;
  if (config_.slidingWindow > 0) {
    p_.window = b_.constexprValue("SLIDING_WINDOW", ScalarKind::I32, "sliding_window");
    p_.firstAllowedKey =
        b_.max(b_.add(b_.sub(firstRowPos, p_.window), oneI32_), zeroI32_, "first_allowed_key");
  }
  Value* chunkEndKey = nullptr;  // the last key of the last row's chunk
  if (config_.attentionChunkSize > 0) {
    // Local chunks: no row sees a key before the first row's chunk.
    p_.chunkSize = b_.constexprValue("ATTENTION_CHUNK_SIZE", ScalarKind::I32, "attention_chunk_size");
    Value* chunkStart = b_.mul(b_.div(firstRowPos, p_.chunkSize), p_.chunkSize, "first_row_chunk_start");
    p_.firstAllowedKey =
        p_.firstAllowedKey ? b_.max(p_.firstAllowedKey, chunkStart, "first_allowed_key_chunk") : chunkStart;
    chunkEndKey = b_.sub(b_.mul(b_.add(b_.div(lastRowPos, p_.chunkSize), oneI32_), p_.chunkSize), oneI32_,
                         "last_row_chunk_end");
  }
  if (p_.firstAllowedKey) {
    Value* firstKey = rangeFloor ? b_.min(p_.firstAllowedKey, rangeFloor, "first_walked_key") : p_.firstAllowedKey;
    p_.tileStart = b_.div(firstKey, p_.tileSize, "tile_start");
  }
  if (p_.mayBeNonCausal && (config_.rightWindow() > 0 || chunkEndKey)) {
    // A non-causal window also ends r - 1 keys after the program's last valid
    // row, and a chunk at its end (causal rows end at their own key anyway).
    Value* lastAllowedKey = chunkEndKey;
    if (config_.rightWindow() > 0) {
      p_.rightWindow = config_.slidingWindowRight > 0
                           ? b_.constexprValue("SLIDING_WINDOW_RIGHT", ScalarKind::I32, "sliding_window_right")
                           : p_.window;
      Value* windowEnd = b_.add(lastRowPos, b_.sub(p_.rightWindow, oneI32_), "last_allowed_key");
      lastAllowedKey = lastAllowedKey ? b_.min(lastAllowedKey, windowEnd, "last_allowed_key_chunk") : windowEnd;
    }
    p_.tileEnd = b_.min(b_.add(b_.div(lastAllowedKey, p_.tileSize), oneI32_), p_.numTiles, "tile_end");
    if (p_.seqCausal) p_.tileEnd = b_.select(p_.seqCausal, p_.numTiles, p_.tileEnd, "tile_end_flagged");
    if (rangeReach)
      p_.tileEnd = b_.max(p_.tileEnd, b_.div(b_.sub(b_.add(rangeReach, p_.tileSize), oneI32_), p_.tileSize),
                          "tile_end_ranges");
  }

  // Split-KV: program z walks only the tiles of segment z of the range above
  // (possibly none: it then reports an empty segment). segment_tiles > 0: the
  // segments are [z, z + 1)·segment_tiles for every sequence (the host sized
  // them by max_seq_len). segment_tiles = -m: the host knows no lengths, so each
  // sequence's own range is cut into num_segments equal segments of at least m
  // tiles, starting at its first tile.
  p_.segmentIdx = nullptr;
  if (config_.splitKv || config_.clusterSplit > 0) {
    p_.segmentIdx = b_.programId(2, "segment_idx");
    Value* fixedLength = b_.cmp(CmpPredicate::Gt, segmentTiles_, zeroI32_, "fixed_segments");
    Value* span = b_.max(b_.sub(p_.tileEnd, p_.tileStart), zeroI32_, "range_tiles");
    Value* evenLength = b_.max(b_.div(b_.sub(b_.add(span, numSegments_), oneI32_), numSegments_),
                               b_.sub(zeroI32_, segmentTiles_), "even_segment_tiles");
    Value* segmentLength = b_.select(fixedLength, segmentTiles_, evenLength, "segment_length");
    Value* segmentOrigin = b_.select(fixedLength, zeroI32_, p_.tileStart, "segment_origin");
    Value* segmentFirst = b_.add(segmentOrigin, b_.mul(p_.segmentIdx, segmentLength), "segment_first_tile");
    p_.tileStart = b_.max(p_.tileStart, segmentFirst, "segment_tile_start");
    p_.tileEnd = b_.min(p_.tileEnd, b_.add(segmentFirst, segmentLength), "segment_tile_end");
  }
}

void AttentionBuilder::buildKvAddressing(Value* seqIdx) {
  const int64_t N = c_.tileSize;
  const ScalarKind I64 = ScalarKind::I64;
  // Loop-invariant pieces of the K/V addressing and masks.
  Value* blockSize = b_.constexprValue("BLOCK_SIZE", ScalarKind::I32, "block_size");
  p_.blockSizeN = splatTo(blockSize, {N});
  p_.offsN = b_.arange(0, N, "offs_n");
  p_.blockTableRow = b_.mul(b_.cast(seqIdx, I64), blockTableStride_, "block_table_row");
  Value* kvHeadOffset = b_.mul(b_.cast(kvHeadIdx_, I64), kvStrideHead_, "kv_head_offset");
  p_.kBase = b_.addPtr(kvCache_, kvHeadOffset, "k_base");
  p_.vBase = b_.addPtr(p_.kBase, kvStrideKv_, "v_base");
  if (config_.separateScales()) {
    Value* scaleHeadOffset = b_.mul(b_.cast(kvHeadIdx_, I64), scaleStrideHead_, "scale_head_offset");
    p_.kScaleBase = b_.addPtr(kScaleCache_, scaleHeadOffset, "k_scale_base");
    p_.vScaleBase = b_.addPtr(vScaleCache_, scaleHeadOffset, "v_scale_base");
  }
  p_.dimMaskCol = asColumn(p_.dimMask, N, "dim_mask_col");
  if (config_.checkBounds)
    checkBlockTableEntries(seqIdx, p_.blockTableRow, p_.tileStart, p_.tileEnd, p_.maxSeqPrefixLen, p_.firstAllowedKey);
}

void AttentionBuilder::buildScoreModifiers() {
  const int64_t M = c_.blockM, N = c_.tileSize;
  const double negInf = -std::numeric_limits<double>::infinity();
  // Key j is visible to row m iff j < key_limit[m]: causal, j <= context_len + query_pos[m];
  // otherwise every key of the sequence (the encoder window: those before p + sw).
  // With a window also j > key_floor[m] = p - sw, p = context_len + query_pos[m].
  Value* causalLimit =
      p_.mayBeCausal ? b_.add(splatTo(b_.add(p_.contextLen, oneI32_), {M}), p_.queryPos, "key_limit_causal") : nullptr;
  Value* nonCausalLimit = p_.mayBeNonCausal ? splatTo(p_.seqLen, {M}, "key_limit_all") : nullptr;
  p_.keyFloor2d = nullptr;
  p_.rangeFirstKeys.clear();
  p_.rangeLastKeys.clear();
  p_.rowInRange2d.clear();
  if (config_.slidingWindow > 0 || p_.rightWindow || p_.chunkSize || !p_.rangeFirst.empty()) {
    Value* queryAbsPos = b_.add(splatTo(p_.contextLen, {M}), p_.queryPos, "query_abs_pos");
    if (nonCausalLimit && p_.rightWindow)
      nonCausalLimit = b_.min(nonCausalLimit, b_.add(queryAbsPos, splatTo(p_.rightWindow, {M})), "key_limit_window");
    Value* keyFloor = config_.slidingWindow > 0 ? b_.sub(queryAbsPos, splatTo(p_.window, {M}), "key_floor") : nullptr;
    if (p_.chunkSize) {
      // Chunked local attention: keys from the row's chunk start on, and
      // (non-causal) before the next chunk's.
      Value* chunk = splatTo(p_.chunkSize, {M});
      Value* rowChunkStart = b_.mul(b_.div(queryAbsPos, chunk), chunk, "row_chunk_start");
      Value* chunkFloor = b_.sub(rowChunkStart, splatTo(oneI32_, {M}), "key_floor_chunk");
      keyFloor = keyFloor ? b_.max(keyFloor, chunkFloor, "key_floor_window_chunk") : chunkFloor;
      if (nonCausalLimit) nonCausalLimit = b_.min(nonCausalLimit, b_.add(rowChunkStart, chunk), "key_limit_chunk");
    }
    if (keyFloor) p_.keyFloor2d = asColumn(keyFloor, N, "key_floor_2d");
    for (size_t r = 0; r < p_.rangeFirst.size(); ++r) {
      const std::string suffix = std::to_string(r);
      p_.rangeFirstKeys.push_back(splatTo(p_.rangeFirst[r], {N}, "range_first_keys" + suffix));
      p_.rangeLastKeys.push_back(splatTo(p_.rangeLast[r], {N}, "range_last_keys" + suffix));
      Value* rowInRange = b_.andOp(b_.cmp(CmpPredicate::Ge, queryAbsPos, splatTo(p_.rangeFirst[r], {M})),
                                   b_.cmp(CmpPredicate::Le, queryAbsPos, splatTo(p_.rangeLast[r], {M})),
                                   "row_in_range" + suffix);
      p_.rowInRange2d.push_back(asColumn(rowInRange, N, "row_in_range_2d" + suffix));
    }
  }
  Value* keyLimit = p_.seqCausal ? b_.select(splatTo(p_.seqCausal, {M}), causalLimit, nonCausalLimit, "key_limit")
                    : causalLimit ? causalLimit
                                  : nonCausalLimit;
  p_.keyLimit2d = asColumn(keyLimit, N, "key_limit_2d");
  p_.rowMask2d = asColumn(p_.rowMask, N, "row_mask_2d");
  const double log2e = std::numbers::log2e;
  // Scores in log2 units: (q·k)·scale·log2(e); with a softcap c,
  // c·log2(e)·tanh((q·k)·(scale / c)), vLLM's c·tanh(s / c) times log2(e).
  p_.qkScaleTile = nullptr;
  p_.qkScaleRow = nullptr;  // the same scale per row, without a softcap
  p_.capOutputScaleTile = nullptr;
  // A per-tensor fp8 cache stands for x·k_scale: the scale joins the softmax scale.
  Value* scoreScale = scale_;
  if (kScale_) scoreScale = b_.mul(scale_, b_.load(kScale_, nullptr, nullptr, "k_scale_value"), "qk_scale_fp8");
  // fp8 queries stand for q · q_scale: the scale joins the softmax scale too.
  if (qScale_)
    scoreScale = b_.mul(scoreScale, b_.load(qScale_, nullptr, nullptr, "q_scale_value"), "qk_scale_fp8_q");
  p_.vScaleValue = vScale_ ? b_.load(vScale_, nullptr, nullptr, "v_scale_value") : nullptr;
  if (config_.softcap > 0) {
    p_.qkScaleTile = splatTo(b_.div(scoreScale, b_.f32(config_.softcap), "softcap_input_scale"), {M, N});
    p_.capOutputScaleTile = splatTo(b_.f32(config_.softcap * log2e), {M, N}, "softcap_output_scale");
  } else {
    Value* qkScale = b_.mul(scoreScale, b_.f32(log2e), "qk_scale");
    p_.qkScaleTile = splatTo(qkScale, {M, N});
    p_.qkScaleRow = splatTo(qkScale, {M});
  }
  // ALiBi slope of each row's head, times log2(e); heads >= Hq get 0 (as vLLM).
  p_.alibiSlope2d = nullptr;
  if (config_.alibi) {
    Value* slopes = b_.load(b_.addPtr(splatTo(alibiSlopes_, {M}), p_.queryHead), p_.queryHeadMask,
                            b_.constFloat(0.0, Type::tile({M}, f32())), "alibi_slope");
    p_.alibiSlope2d = asColumn(b_.mul(slopes, splatTo(b_.f32(log2e), {M})), N, "alibi_slope_log2");
  }
  // qq_bias: row i of the bias for query index i < n, log2(e) to the score's units.
  p_.qqBiasRowOffset2d = p_.qqBiasRowMask2d = p_.qqBiasLog2e = p_.qqBiasColumns = nullptr;
  if (qqBias_) {
    // 32-bit offsets (the op keeps n·n below 2^31): half the registers of a
    // 64-bit offset tile.
    p_.qqBiasColumns = b_.cast(qqBiasStride_, ScalarKind::I32, "qq_bias_columns");
    p_.qqBiasRowMask2d =
        asColumn(b_.cmp(CmpPredicate::Lt, p_.queryPos, splatTo(p_.qqBiasColumns, {M})), N, "qq_bias_row_mask");
    p_.qqBiasRowOffset2d = asColumn(b_.mul(p_.queryPos, splatTo(p_.qqBiasColumns, {M})), N, "qq_bias_row_offset");
    p_.qqBiasLog2e = splatTo(b_.f32(log2e), {M, N}, "qq_bias_log2e");
  }
  // sqrt-ALiBi measures each key from its row's query, p = context_len + query_pos
  // (a row vector, broadcast along the keys where the loop uses it).
  p_.alibiQueryPos = config_.alibiSqrt ? b_.add(splatTo(p_.contextLen, {M}), p_.queryPos, "alibi_query_pos") : nullptr;
  p_.zeroDistance2d = config_.alibiSqrt ? b_.constInt(0, Type::tile({M, N}, i32()), "alibi_zero_distance") : nullptr;
  p_.negInfTile = b_.constFloat(negInf, Type::tile({M, N}, f32()), "neg_inf");
  p_.zeroScores = b_.constFloat(0.0, Type::tile({M, N}, f32()), "zero_scores");
  p_.negInfRow = b_.constFloat(negInf, Type::tile({M}, f32()), "neg_inf_row");
}

void AttentionBuilder::buildSoftmaxState() {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, D = c_.headSizePadded / G, DV = c_.valueHeadSizePadded / G, N = c_.tileSize;
  const ScalarKind dt = config_.dtype;
  const double negInf = -std::numeric_limits<double>::infinity();
  // Lazy rescaling (in the KV loop below) on prefill tiles where each warp owns
  // 32 rows or more (128 rows over 4 warps), whose accumulator rescale is 128
  // multiplies per thread and tile (5-6% on prefill), or whose tiles have 128
  // keys or more (fewer rescales per key: the op's bidirectional wgmma tiling,
  // 16 rows a warp, 2% faster lazy; its 64-key causal tiling within 1%, either
  // way). With 16 rows a warp and shorter tiles the branch costs about what the
  // multiplies it skips do (DiffKV prefill and per-token-head decode ran slower
  // with it; docs/perf-log.md, 2026-11-30 and 2026-12-07).
  p_.lazyRescale = config_.lazyRescale.value_or(
      c_.prefillTiles() && (c_.blockM / config_.numWarps >= 32 || c_.tileSize >= 128));
  p_.rescaleThresholdRow =
      p_.lazyRescale ? b_.constFloat(kRescaleThreshold, Type::tile({M}, f32()), "rescale_threshold") : nullptr;
  p_.zeroRow = b_.constFloat(0.0, Type::tile({M}, f32()), "zero_row");

  Value* mInit = b_.constFloat(negInf, Type::tile({M}, f32()), "m_init");
  if (config_.sinks) {
    // vLLM loads the sink of each row's head (-inf for heads >= Hq) as the initial M.
    Value* sinkLogit = b_.load(b_.addPtr(splatTo(sinks_, {M}), p_.queryHead), p_.queryHeadMask, mInit, "sink_logit");
    Value* sinkInit = b_.mul(sinkLogit, splatTo(b_.f32(std::numbers::log2e), {M}), "m_init_sink");
    // Split-KV: the sink joins the softmax once, in segment 0 (as vLLM).
    mInit = p_.segmentIdx ? b_.select(splatTo(b_.cmp(CmpPredicate::Eq, p_.segmentIdx, zeroI32_, "first_segment"), {M}),
                                   sinkInit, mInit, "m_init_segment")
                       : sinkInit;
  }
  Value* lInit = b_.constFloat(1.0, Type::tile({M}, f32()), "l_init");
  Value* accInit = b_.constFloat(0.0, Type::tile({M, DV}, f32()), "acc_init");
  p_.noBlock = b_.constInt(0, Type::tile({N}, i32()), "no_block");
  const ScalarKind cacheKind = kvCachePointerKind(config_.kvCacheFormat, dt);
  p_.zeroKTile = zeroTile({D, N}, cacheKind, "zero_k_tile");
  p_.zeroKPieceTiles = {};
  for (size_t i = 0; i < p_.pieces.size(); ++i)
    p_.zeroKPieceTiles.push_back(zeroTile({p_.pieces[i].width, N}, cacheKind, "zero_k_tile_piece" + std::to_string(i)));
  p_.zeroVTile = zeroTile({N, DV}, cacheKind, "zero_v_tile");
  p_.rowScales = isPerTokenHead(config_.kvCacheFormat);

  // ---- Loop over KV tiles with the online softmax. ----
  p_.loopInits = {mInit, lInit};
  p_.loopNames = {"m", "l"};
  for (int g = 0; g < G; ++g) {
    p_.loopInits.push_back(accInit);
    p_.loopNames.push_back(G == 1 ? "acc" : "acc" + std::to_string(g));
  }
  // Fewer than 16 rows per warp (decode: one m16 tile) puts the warps side by
  // side along the keys (tensor cores' #mma warps, LayoutAssignment), so a
  // tile's row sum crosses warps through shared memory, two barriers per tile.
  // Such programs keep the sum per column instead: each thread adds its P
  // elements to a running partial rescaled like acc, reduced once after the
  // loop (l itself then carries only the initial 1, rescaled).
  p_.deferRowSum = config_.deferRowSum && config_.tensorCoreDots() && M / 16 < config_.numWarps;
  if (p_.deferRowSum) {
    p_.loopInits.push_back(b_.constFloat(0.0, Type::tile({M, N}, f32()), "l_partial_init"));
    p_.loopNames.push_back("l_partial");
  }
  // overlap_softmax: no tile precedes the first, so its lagging P·V multiplies
  // zeros (and V's rows there are never loaded).
  p_.overlapSoftmax = config_.overlapSoftmax;
  if (p_.overlapSoftmax) {
    p_.lagP = p_.loopInits.size();
    const ScalarKind pKind = dt == ScalarKind::F32 ? ScalarKind::F32 : config_.valueDotKind();
    p_.loopInits.push_back(b_.constFloat(0.0, Type::tile({M, N}, Type::scalar(pKind)), "p_lagging_init"));
    p_.loopNames.push_back("p_lagging");
  }
  // prefetch_scores: the Q·Kᵀ the loops carry; its initial value, the first
  // tile's, is computed in front of the first loop (buildKvLoops).
  p_.prefetchScores = config_.prefetchScores;
  if (p_.prefetchScores) {
    p_.nextScores = p_.loopInits.size();
    p_.loopInits.push_back(nullptr);
    p_.loopNames.push_back("qk_prefetched");
  }
  // Masked scores are -inf. Where the score scale is known positive (the
  // softmax scale, which the op API checks, without a per-tensor k_scale or a
  // softcap), the mask is applied before scaling: -inf·scale is still -inf,
  // and the scaling multiply then fuses with exp2's subtraction (a select
  // between them keeps them apart): 7% on int4 per-token-head decode, within
  // 1-2% elsewhere. Prefill tiles, whose masked loop runs a tile or two per
  // program, keep the select after the scale, which ptxas schedules better for
  // the whole kernel (docs/perf-log.md, 2026-11-30).
  p_.maskBeforeScale = !p_.capOutputScaleTile && !kScale_ && !c_.prefillTiles();
  // A head size below its power of two leaves Q's and K's columns past it zero
  // (masked loads), and V's: the dots say so (k_extent, n_extent), and skip
  // those mma steps (D=80: 5 of Q·Kᵀ's 8 k-steps, 10 of P·V's 16 n-tiles).
  // DiffKV's pieces are exact widths. It pays on prefill tiles (compute-bound:
  // D=80/96/112 prefill 5-15% faster) and on the f32 FMA path (the k loop
  // shrinks); half-precision decode, memory-bound, ran slower with it (same
  // copies and barriers, worse schedules), so tensor-core decode keeps the
  // padded steps (docs/perf-log.md, 2026-11-30).
  const bool skipPadding = c_.prefillTiles() || !config_.tensorCoreDots();
  const bool tf32 = config_.tf32Dots();
  p_.qkDot = Builder::DotOptions{skipPadding && p_.pieces.empty() && c_.headSize / G < D ? c_.headSize / G : 0, 0, tf32};
  p_.pvDot = Builder::DotOptions{0, skipPadding && c_.valueHeadSize / G < DV ? c_.valueHeadSize / G : 0, tf32};
}

AttentionBuilder::TileAddress AttentionBuilder::tileAddress(Value* tileIdx, const std::string& suffix,
                                                           Value* tileInRange) {
  const int64_t N = c_.tileSize;
  const ScalarKind I64 = ScalarKind::I64;
  TileAddress at;
  at.seqOffset = b_.add(splatTo(b_.mul(tileIdx, p_.tileSize), {N}), p_.offsN, "seq_offset" + suffix);
  Value* tileMask =
      b_.cmp(CmpPredicate::Lt, at.seqOffset, splatTo(p_.maxSeqPrefixLen, {N}), "tile_mask" + suffix);
  for (size_t r = 0; r < p_.rangeFirstKeys.size(); ++r)
    at.keyInRange.push_back(b_.andOp(b_.cmp(CmpPredicate::Ge, at.seqOffset, p_.rangeFirstKeys[r]),
                                     b_.cmp(CmpPredicate::Le, at.seqOffset, p_.rangeLastKeys[r]),
                                     "key_in_range" + std::to_string(r) + suffix));
  if (p_.firstAllowedKey) {
    // Keys before the window or chunk are read only where a range opens them.
    Value* afterFloor =
        b_.cmp(CmpPredicate::Ge, at.seqOffset, splatTo(p_.firstAllowedKey, {N}), "key_after_floor" + suffix);
    for (Value* keyInRange : at.keyInRange)
      afterFloor = b_.orOp(afterFloor, keyInRange, "key_after_floor_or_range" + suffix);
    tileMask = b_.andOp(tileMask, afterFloor, "tile_mask_window" + suffix);
  }
  if (tileInRange) tileMask = b_.andOp(tileMask, splatTo(tileInRange, {N}), "tile_mask_in_range" + suffix);
  Value* blockTableIdx = b_.add(splatTo(p_.blockTableRow, {N}), b_.cast(b_.div(at.seqOffset, p_.blockSizeN), I64),
                                "block_table_idx" + suffix);
  Value* physicalBlock32 = b_.load(b_.addPtr(splatTo(blockTables_, {N}), blockTableIdx), tileMask, p_.noBlock,
                                   "physical_block_i32" + suffix);
  // Checked: keys of a block outside the cache are masked (never loaded, never
  // scored); checkBlockTableEntries recorded the entry.
  if (config_.checkBounds) {
    at.blockValid = b_.andOp(b_.cmp(CmpPredicate::Ge, physicalBlock32, p_.noBlock),
                             b_.cmp(CmpPredicate::Lt, physicalBlock32, splatTo(numBlocks_, {N})),
                             "block_valid" + suffix);
    physicalBlock32 = b_.select(at.blockValid, physicalBlock32, p_.noBlock, "physical_block_checked" + suffix);
    tileMask = b_.andOp(tileMask, at.blockValid, "tile_mask_checked" + suffix);
  }
  at.tileMask = tileMask;
  at.physicalBlock = b_.cast(physicalBlock32, I64, "physical_block" + suffix);
  at.tokenInBlock = b_.cast(b_.rem(at.seqOffset, p_.blockSizeN), I64, "token_in_block" + suffix);
  at.slotOffset = b_.add(b_.mul(at.physicalBlock, splatTo(kvStrideBlock_, {N})),
                         b_.mul(at.tokenInBlock, splatTo(kvStrideToken_, {N})), "slot_offset" + suffix);
  return at;
}

Value* AttentionBuilder::loadValueTile(const TileAddress& at, const std::string& suffix) {
  const int64_t N = c_.tileSize, DV = c_.valueHeadSizePadded / groups();
  Value* vOffset = b_.add(asColumn(at.slotOffset, DV), asRow(p_.offsDV64, N), "v_offset" + suffix);
  Value* vMask = b_.andOp(asColumn(at.tileMask, DV), asRow(p_.dimMaskV, N), "v_mask" + suffix);
  return b_.load(b_.addPtr(splatTo(p_.vBase, {N, DV}), vOffset), vMask, p_.zeroVTile, "v_tile" + suffix);
}

bool AttentionBuilder::tensorTiles(bool masked) const {
  const int64_t D = c_.headSizePadded;
  return config_.tensorMemoryAccelerator && !masked && p_.pieces.empty() && !config_.differentValueHeadSize() &&
         config_.kvCacheFormat == KvCacheFormat::Auto &&
         (config_.dtype == ScalarKind::BF16 || config_.dtype == ScalarKind::F16) && !p_.overlapSoftmax &&
         (D == 64 || D == 128 || D == 256) && config_.blockSize % 8 == 0 && c_.tileSize % config_.blockSize == 0 &&
         !config_.checkBounds;
}

Value* AttentionBuilder::tileBlocks(Value* tileIdx, const std::string& name) {
  const int64_t G = c_.tileSize / config_.blockSize;
  // Entries past the sequence read -1, outside the tensor (zeros), and are
  // never looked up.
  Value* entry = b_.add(splatTo(b_.mul(tileIdx, b_.i32(G)), {G}), b_.arange(0, G), name + "_entry");
  Value* entryInUse = b_.cmp(CmpPredicate::Lt, b_.mul(entry, splatTo(b_.i32(config_.blockSize), {G})),
                             splatTo(p_.maxSeqPrefixLen, {G}), name + "_in_use");
  Value* entryIdx = b_.add(splatTo(p_.blockTableRow, {G}), b_.cast(entry, ScalarKind::I64), name + "_idx");
  return b_.load(b_.addPtr(splatTo(blockTables_, {G}), entryIdx), entryInUse, b_.constInt(-1, Type::tile({G}, i32())),
                 name);
}

Value* AttentionBuilder::loadCacheTile(Value* blocks, int kv, const std::string& name) {
  const int64_t N = c_.tileSize;
  const ScalarKind I32 = ScalarKind::I32;
  // The cache as a 5-D tensor, innermost first: head_size, KV heads, tokens
  // of a block, K/V, blocks (no extent known for the blocks: the largest).
  ir::LoadTensorOperands cache;
  cache.base = kvCache_;
  cache.dims = {b_.i32(c_.headSize), b_.i32(config_.numKvHeads), b_.constexprValue("BLOCK_SIZE", I32, "block_size"),
                b_.i32(2), b_.i32(std::numeric_limits<int32_t>::max())};
  cache.strides = {kvStrideHead_, kvStrideToken_, kvStrideKv_, kvStrideBlock_};
  cache.coords = {zeroI32_, kvHeadIdx_, zeroI32_, b_.i32(kv), blocks};
  cache.rowsDim = 2;
  cache.gatherDim = 4;
  return b_.loadTensor(cache, N, c_.headSizePadded, name);
}

Value* AttentionBuilder::loadLaggingValueTile(Value* tileIdx, const std::string& suffix) {
  Value* inRange = b_.cmp(CmpPredicate::Ge, tileIdx, p_.tileStart, "v_tile_in_range" + suffix);
  return loadValueTile(tileAddress(tileIdx, suffix, inRange), suffix);
}

std::vector<Value*> AttentionBuilder::buildKvLoop(Value* from, Value* to, const std::vector<Value*>& inits,
                                                  bool masked, bool biased) {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, D = c_.headSizePadded / G, DV = c_.valueHeadSizePadded / G, N = c_.tileSize;
  const ScalarKind dt = config_.dtype;
  auto loop = b_.beginFor(from, to, oneI32_, inits, "tile_idx", p_.loopNames);
  Value* mOld = loop.iterArgs[0];
  Value* lOld = loop.iterArgs[1];

  const TileAddress at = tileAddress(loop.inductionVar, "");
  Value* seqOffset = at.seqOffset;
  Value* tileMask = at.tileMask;
  Value* blockValid = at.blockValid;
  Value* physicalBlock = at.physicalBlock;
  Value* tokenInBlock = at.tokenInBlock;
  Value* slotOffset = at.slotOffset;
  const std::vector<Value*>& keyInRange = at.keyInRange;

  // prefetch_scores: the next tile's K (its Q·Kᵀ below, before this tile's
  // softmax; with warpgroup MMAs it is waited for at the loop's end); this
  // tile's scores were carried in. Past the program's last tile it reads
  // nothing, and its Q·Kᵀ is never used.
  std::vector<Value*> nextKGroups;
  if (p_.prefetchScores) {
    Value* next = b_.add(loop.inductionVar, oneI32_, "next_tile_idx");
    Value* nextInRange = b_.cmp(CmpPredicate::Lt, next, p_.tileEnd, "next_tile_in_range");
    nextKGroups = keyOperands(loadKeyTiles(tileAddress(next, "_next", nextInRange), "_next"), nullptr, "_next");
  }
  // K is read transposed, [HEAD_SIZE_PADDED, TILE_SIZE], so S = Q·K needs no transpose.
  KeyTiles kTiles;
  Value* vTile = nullptr;
  if (tensorTiles(masked)) {
    // Whole blocks of an unmasked tile: K and V as tiles of the paged cache
    // that TMA can copy (kernel attribute tma).
    Value* blocks = tileBlocks(loop.inductionVar, "tile_blocks");
    kTiles.whole = b_.transpose(loadCacheTile(blocks, 0, "k_rows"), {1, 0}, "k_tile");
    vTile = loadCacheTile(blocks, 1, "v_tile");
  } else if (!p_.prefetchScores) {
    kTiles = loadKeyTiles(at, "");
  }
  // overlap_softmax: this iteration's P·V is the previous tile's.
  if (!vTile)
    vTile = p_.overlapSoftmax ? loadLaggingValueTile(b_.sub(loop.inductionVar, oneI32_), "_lagging")
                              : loadValueTile(at, "");
  Value *kRowScale = nullptr, *vRowScale = nullptr;
  // vLLM's asymmetric int4: per-key zero points, as [D/2, N] and [N, DV/2] tiles.
  Value *kZeroPoints = nullptr, *vZeroPoints = nullptr;
  auto loadScales = [&] {
    if (config_.separateScales()) {
      // One f32 per key from each scale tensor, masked keys reading 0.
      Value* scaleSlot = b_.add(b_.mul(physicalBlock, splatTo(scaleStrideBlock_, {N})),
                                b_.mul(tokenInBlock, splatTo(scaleStrideToken_, {N})), "scale_slot");
      Value* zeroScales = b_.constFloat(0.0, Type::tile({N}, f32()), "zero_scales");
      kRowScale = b_.load(b_.addPtr(splatTo(p_.kScaleBase, {N}), scaleSlot), tileMask, zeroScales, "k_scale");
      vRowScale = b_.load(b_.addPtr(splatTo(p_.vScaleBase, {N}), scaleSlot), tileMask, zeroScales, "v_scale");
      if (config_.asymmetricInt4()) {
        const ScaleAndZeroPoint k = splitScaleAndZeroPoint(b_, kRowScale, "k_scale");
        const ScaleAndZeroPoint v = splitScaleAndZeroPoint(b_, vRowScale, "v_scale");
        kRowScale = k.scale;
        vRowScale = v.scale;
        kZeroPoints = asRow(k.zeroPoint, D, "k_zero_points");
        vZeroPoints = asColumn(v.zeroPoint, DV, "v_zero_points");
      }
    } else if (p_.rowScales) {
      kRowScale = loadRowScales(p_.kBase, slotOffset, tileMask, c_.headSize, "k");
      vRowScale = loadRowScales(p_.vBase, slotOffset, tileMask, c_.valueHeadSize, "v");
    }
  };
  // The zero points are needed to dequantize; other scales follow the tiles' conversion.
  if (config_.asymmetricInt4()) loadScales();
  std::vector<Value*> kGroups;
  if (!p_.prefetchScores) kGroups = keyOperands(kTiles, kZeroPoints, "");
  const bool vDequantizedEarly = M > 16 && config_.numWarps > 1;
  std::vector<Value*> vGroups;
  if (vDequantizedEarly) vGroups = valueGroups(vTile, vZeroPoints);
  if (!config_.asymmetricInt4()) loadScales();

  // Scores in log2 units: S = (q·k)·scale·log2(e), so exp2(S - m) = exp((q·k)·scale - m').
  Value* qk = p_.prefetchScores ? loop.iterArgs[p_.nextScores] : queryKeyDots(kGroups, "");
  Value* qkNext = p_.prefetchScores ? queryKeyDots(nextKGroups, "_next") : nullptr;
  // overlap_softmax: the previous tile's P·V, right after Q·Kᵀ and reading
  // nothing computed from it, so that both issue together and the softmax
  // below runs while P·V does (WarpgroupMma.cpp defers its wait to the
  // rescale). acc is carried rescaled to the previous tile's maximum, as the
  // previous tile's P is.
  std::vector<Value*> accWithLagging;
  if (p_.overlapSoftmax) {
    if (!vDequantizedEarly) vGroups = valueGroups(vTile, vZeroPoints);
    for (int g = 0; g < G; ++g)
      accWithLagging.push_back(b_.dot(loop.iterArgs[p_.lagP], vGroups[g], loop.iterArgs[static_cast<size_t>(2 + g)],
                                      p_.pvDot, G == 1 ? "acc_lagging" : "acc_lagging" + std::to_string(g)));
  }
  // Per-token-head caches: key j's row stands for k·k_scale[j] (vLLM scales S).
  if (kRowScale) qk = b_.mul(qk, asRow(kRowScale, M), "qk_dequantized");
  auto maskScores = [&](Value* unmasked, const std::string& name) {
    if (!masked) return unmasked;
    Value* keyPos2d = asRow(seqOffset, M);
    Value* visible = b_.cmp(CmpPredicate::Lt, keyPos2d, p_.keyLimit2d, "key_visible");
    if (p_.keyFloor2d) visible = b_.andOp(visible, b_.cmp(CmpPredicate::Gt, keyPos2d, p_.keyFloor2d), "key_in_window");
    // (causal, window, chunk) OR both in one range, as vLLM.
    for (size_t r = 0; r < keyInRange.size(); ++r)
      visible = b_.orOp(visible, b_.andOp(p_.rowInRange2d[r], asRow(keyInRange[r], M)), "key_visible_range");
    if (blockValid) visible = b_.andOp(visible, asRow(blockValid, M), "key_in_cache");
    return b_.select(b_.andOp(p_.rowMask2d, visible, "score_mask"), unmasked, p_.negInfTile, name);
  };
  Value* scores = nullptr;
  // The row maximum of the (masked) unscaled Q·K times a positive scale is the
  // scaled scores' maximum exactly (rounding is monotonic). Taken that way the
  // scaled scores only feed exp2's subtraction, where the multiply fuses (an
  // FFMA): 32 multiplies fewer per thread and 32-key prefill tile.
  Value* unscaledForMax = nullptr;
  if (p_.maskBeforeScale) {
    unscaledForMax = maskScores(qk, "qk_masked");
    scores = b_.mul(unscaledForMax, p_.qkScaleTile, "s");
  } else if (!masked && !p_.capOutputScaleTile && !kScale_) {
    unscaledForMax = qk;
    scores = b_.mul(qk, p_.qkScaleTile, "s");
  } else {
    Value* scaledScores = b_.mul(qk, p_.qkScaleTile, "scaled_scores");
    if (p_.capOutputScaleTile)
      scaledScores = b_.mul(b_.unary(Opcode::Tanh, scaledScores), p_.capOutputScaleTile, "capped_scores");
    scores = maskScores(scaledScores, "s");
  }
  if (p_.alibiSlope2d && p_.alibiQueryPos) {
    // sqrt-ALiBi: s -= slope·sqrt(p - j) for keys at or before the query (a key
    // after it, visible only without causality, gets no bias), as vLLM.
    Value* distance =
        b_.max(b_.sub(asColumn(p_.alibiQueryPos, N), asRow(seqOffset, M)), p_.zeroDistance2d, "alibi_distance");
    Value* root = b_.unary(Opcode::Sqrt, b_.cast(distance, ScalarKind::F32), "alibi_sqrt_distance");
    scores = b_.sub(scores, b_.mul(p_.alibiSlope2d, root), "s_alibi");
  } else if (p_.alibiSlope2d) {
    Value* keyDistance = b_.cast(b_.sub(seqOffset, splatTo(p_.contextLen, {N})), ScalarKind::F32, "alibi_distance");
    scores = b_.add(scores, b_.mul(p_.alibiSlope2d, asRow(keyDistance, M)), "s_alibi");
  }
  Value* qqBias = biased ? qqBias_ : nullptr;
  if (qqBias) {
    // qq_bias[i·n + k] for the keys of query index k = j - context_len < n.
    Value* keyQueryIdx = b_.sub(seqOffset, splatTo(p_.contextLen, {N}), "key_query_idx");
    Value* keyHasBias = b_.andOp(b_.cmp(CmpPredicate::Ge, keyQueryIdx, p_.noBlock),
                                 b_.cmp(CmpPredicate::Lt, keyQueryIdx, splatTo(p_.qqBiasColumns, {N})),
                                 "key_has_qq_bias");
    Value* biasOffset = b_.add(p_.qqBiasRowOffset2d, asRow(keyQueryIdx, M), "qq_bias_offset");
    Value* bias = b_.load(b_.addPtr(splatTo(qqBias, {M, N}), biasOffset),
                          b_.andOp(p_.qqBiasRowMask2d, asRow(keyHasBias, M)), p_.zeroScores, "qq_bias_tile");
    scores = b_.add(scores, b_.mul(bias, p_.qqBiasLog2e), "s_qq_bias");
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
      unscaledForMax && !p_.alibiSlope2d && !qqBias
          ? b_.mul(b_.reduce(Opcode::ReduceMax, unscaledForMax, 1, "qk_row_max"), p_.qkScaleRow, "tile_row_max")
          : b_.reduce(Opcode::ReduceMax, scores, 1, "tile_row_max");
  Value* mCandidate = nullptr;
  if (p_.lazyRescale) {
    Value* mGrows = b_.cmp(CmpPredicate::Gt, tileRowMax, b_.add(mOld, p_.rescaleThresholdRow), "m_grows");
    mCandidate = b_.select(mGrows, tileRowMax, mOld, "m_candidate");
  } else {
    mCandidate = b_.max(mOld, tileRowMax, "m_candidate");
  }
  // A row that has seen only masked keys keeps -inf; use 0 so exp2 below gets
  // -inf - 0 = -inf (weight 0) instead of -inf - (-inf) = NaN.
  Value* mNew = b_.select(b_.cmp(CmpPredicate::Gt, mCandidate, p_.negInfRow), mCandidate, p_.zeroRow, "m_new");
  Value* p = b_.unary(Opcode::Exp2, b_.sub(scores, asColumn(mNew, N)), "p");
  Value* alpha = b_.unary(Opcode::Exp2, b_.sub(mOld, mNew), "alpha");
  Value* lNew = nullptr;
  Value* lPartialNew = nullptr;
  if (p_.deferRowSum) {
    lNew = b_.mul(lOld, alpha, "l_new");
    lPartialNew = b_.add(b_.mul(loop.iterArgs[static_cast<size_t>(2 + G)], asColumn(alpha, N)), p, "l_partial_new");
  } else {
    lNew = b_.add(b_.mul(lOld, alpha), b_.reduce(Opcode::ReduceSum, p, 1, "l_tile"), "l_new");
  }
  // P·V runs in the data type (tensor-core operands); f32 keeps P in f32. With
  // per-token-head scales, value j's row stands for v·v_scale[j]: P's column j is
  // scaled instead (the denominator keeps the unscaled P).
  Value* pForValues = vRowScale ? b_.mul(p, asRow(vRowScale, M), "p_dequantized") : p;
  Value* pOperand = dt == ScalarKind::F32 ? pForValues : b_.cast(pForValues, config_.valueDotKind(), "p_operand");
  // With one m-tile of rows (decode: the warps split every dot's columns) V
  // is dequantized here, next to P·V: a quantized tile read straight into
  // registers in its operand layout (LayoutAssignment's thread-major byte
  // operands, which need that layout) is converted where the tile IR
  // converts it, and converted at the top of the body its 64 or more
  // registers would stay live through Q·Kᵀ and the softmax. Taller tiles keep
  // it at the top: their V goes through shared memory, and read late there it
  // costs fp8 prefill about 70 more registers per thread.
  if (!vDequantizedEarly && !p_.overlapSoftmax) vGroups = valueGroups(vTile, vZeroPoints);
  std::vector<Value*> yields = {mNew, lNew};
  std::vector<std::string> finalNames = {"m_final", "l_final"};
  for (int g = 0; g < G; ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* acc = p_.overlapSoftmax ? accWithLagging[static_cast<size_t>(g)] : loop.iterArgs[static_cast<size_t>(2 + g)];
    Value* accScaled = p_.lazyRescale ? b_.mulSkipOnes(acc, asColumn(alpha, DV), "acc_scaled" + suffix)
                                   : b_.mul(acc, asColumn(alpha, DV), "acc_scaled" + suffix);
    yields.push_back(p_.overlapSoftmax ? accScaled : b_.dot(pOperand, vGroups[g], accScaled, p_.pvDot, "acc_new" + suffix));
    finalNames.push_back("acc_final" + suffix);
  }
  if (p_.deferRowSum) {
    yields.push_back(lPartialNew);
    finalNames.push_back("l_partial_final");
  }
  if (p_.overlapSoftmax) {
    yields.push_back(pOperand);
    finalNames.push_back("p_lagging_final");
  }
  if (p_.prefetchScores) {
    yields.push_back(qkNext);
    finalNames.push_back("qk_prefetched_final");
  }
  return b_.endFor(yields, finalNames);
}

AttentionBuilder::KeyTiles AttentionBuilder::loadKeyTiles(const TileAddress& at, const std::string& suffix) {
  const int64_t D = c_.headSizePadded / groups(), N = c_.tileSize;
  KeyTiles k;
  if (p_.pieces.empty()) {
    Value* kOffset = b_.add(asColumn(p_.offsD64, N), asRow(at.slotOffset, D), "k_offset" + suffix);
    Value* kMask = b_.andOp(p_.dimMaskCol, asRow(at.tileMask, D), "k_mask" + suffix);
    k.whole = b_.load(b_.addPtr(splatTo(p_.kBase, {D, N}), kOffset), kMask, p_.zeroKTile, "k_tile" + suffix);
    return k;
  }
  // DiffKV pieces: one [width, TILE_SIZE] tile per piece, masked by key only.
  for (size_t i = 0; i < p_.pieces.size(); ++i) {
    const std::string piece = "_piece" + std::to_string(i) + suffix;
    const int64_t W = p_.pieces[i].width;
    Value* offset = b_.add(asColumn(p_.pieceColumns[i], N), asRow(at.slotOffset, W), "k_offset" + piece);
    k.pieces.push_back(b_.load(b_.addPtr(splatTo(p_.kBase, {W, N}), offset), asRow(at.tileMask, W),
                               p_.zeroKPieceTiles[i], "k_tile" + piece));
  }
  return k;
}

std::vector<Value*> AttentionBuilder::keyOperands(const KeyTiles& k, Value* kZeroPoints, const std::string& suffix) {
  std::vector<Value*> kGroups;
  for (size_t i = 0; i < k.pieces.size(); ++i)
    kGroups.push_back(keyGroups(k.pieces[i], "k_piece" + std::to_string(i) + suffix)[0]);
  if (k.whole) kGroups = keyGroups(k.whole, "k" + suffix, kZeroPoints);
  return kGroups;
}

Value* AttentionBuilder::queryKeyDots(const std::vector<Value*>& kGroups, const std::string& suffix) {
  Value* qk = p_.zeroScores;
  const size_t qkOperands = p_.qTiles.size();
  for (size_t g = 0; g < qkOperands; ++g)
    qk = b_.dot(p_.qTiles[g], kGroups[g], qk, p_.qkDot,
                (qkOperands == 1 ? "qk" : "qk" + std::to_string(g)) + suffix);
  return qk;
}

std::vector<Value*> AttentionBuilder::buildKvLoops() {
  // Prefill tiles: the tiles before the first row's own key (causal), or before
  // the sequence's last tile, hold only keys every row sees, so a first loop
  // over them skips the mask; a second, masked loop takes the rest. Rows past
  // the query length or the heads compute on zero Q there and are never stored.
  // The second loop doubles the IR and so LLVM's time, but one loop costs the
  // kernel more: masking every tile, or masking under a branch uniform across
  // the program (which makes ptxas spill), ran 9-17% slower on prefill
  // (docs/perf-log.md, 2026-11-30).
  std::vector<Value*> inits = p_.loopInits;
  if (p_.prefetchScores) {
    // The first tile's Q·Kᵀ, which the first iteration takes as carried.
    const TileAddress firstAt = tileAddress(p_.tileStart, "_first",
                                            b_.cmp(CmpPredicate::Lt, p_.tileStart, p_.tileEnd, "first_tile_in_range"));
    inits[p_.nextScores] = queryKeyDots(keyOperands(loadKeyTiles(firstAt, "_first"), nullptr, "_first"), "_first");
  }
  const bool splitMaskedTiles = c_.prefillTiles() && config_.slidingWindow == 0 &&
                                config_.slidingWindowRight == 0 && !config_.checkBounds && !config_.splitKv;
  std::vector<Value*> results;
  if (splitMaskedTiles) {
    Value* seenByAll = p_.seqLen;
    if (p_.mayBeCausal) {
      Value* firstRowLimit = b_.add(b_.add(p_.contextLen, p_.qBlockFirstPos), oneI32_, "first_row_key_limit");
      seenByAll =
          p_.seqCausal ? b_.select(p_.seqCausal, firstRowLimit, p_.seqLen, "keys_seen_by_all_flagged") : firstRowLimit;
    }
    Value* fullTiles = b_.min(b_.max(b_.div(seenByAll, p_.tileSize), p_.tileStart), p_.tileEnd, "unmasked_tile_end");
    if (p_.chunkSize) {
      // Local chunks: every row sees the keys from the last row's chunk start
      // on (to its own key, or, non-causal, to the chunk's end, where tile_end
      // already stops). Unmasked tiles need that start at or before the first
      // tile's first key (a program inside one chunk, the chunk a multiple of
      // the tile); otherwise every tile is masked.
      Value* lastChunkStart = b_.mul(b_.div(p_.lastRowPos, p_.chunkSize), p_.chunkSize, "last_row_chunk_start");
      Value* unmaskedFromStart =
          b_.cmp(CmpPredicate::Ge, b_.mul(p_.tileStart, p_.tileSize), lastChunkStart, "chunk_tiles_unmasked");
      fullTiles = b_.select(unmaskedFromStart, fullTiles, p_.tileStart, "unmasked_tile_end_chunk");
    }
    if (qqBias_) {
      // qq_bias: the unmasked tiles before the first query's key skip it.
      Value* biasFrom = b_.min(b_.max(qqBiasFirstTile(), p_.tileStart), fullTiles, "qq_bias_first_unmasked_tile");
      results = buildKvLoop(p_.tileStart, biasFrom, inits, false, false);
      results = buildKvLoop(fullTiles, p_.tileEnd, buildKvLoop(biasFrom, fullTiles, results, false), true);
    } else {
      results = buildKvLoop(fullTiles, p_.tileEnd, buildKvLoop(p_.tileStart, fullTiles, inits, false), true);
    }
  } else if (qqBias_) {
    // qq_bias: the tiles before the first query's key (a decode's context)
    // skip the bias's gather: 21% of a speculative decode step otherwise.
    Value* biasFrom = b_.min(b_.max(qqBiasFirstTile(), p_.tileStart), p_.tileEnd, "qq_bias_first_tile");
    results = buildKvLoop(biasFrom, p_.tileEnd, buildKvLoop(p_.tileStart, biasFrom, inits, true, false), true);
  } else {
    results = buildKvLoop(p_.tileStart, p_.tileEnd, inits, true);
  }
  return results;
}

void AttentionBuilder::storeSegmentOutputs(Value* segmentRow, const std::vector<Value*>& partials) {
  const int G = groups();
  const int64_t M = c_.blockM, DV = c_.valueHeadSizePadded / G;
  Value* segmentOutputRow = b_.mul(segmentRow, splatTo(b_.i64(c_.valueHeadSizePadded), {M}), "segment_output_row");
  for (int g = 0; g < G; ++g) {
    Value* offset = b_.add(asColumn(segmentOutputRow, DV), asRow(p_.valueGroupColumns[g], M));
    Value* partial = partials[static_cast<size_t>(g)];
    if (!partial) partial = zeroTile({M, DV}, ScalarKind::F32, "empty_segment_output");
    b_.store(b_.addPtr(splatTo(segmOutput_, {M, DV}), offset, "segm_output_ptrs"), partial, p_.oMask);
  }
}

Value* AttentionBuilder::segmentRows() {
  const int64_t M = c_.blockM;
  const ScalarKind I64 = ScalarKind::I64;
  Value* numQueryHeads64 = b_.i64(c_.numQueryHeads);
  return b_.add(b_.mul(b_.add(b_.mul(p_.queryToken64, splatTo(numQueryHeads64, {M})), p_.queryHead64),
                       splatTo(b_.cast(numSegments_, I64), {M})),
                splatTo(b_.cast(p_.segmentIdx, I64), {M}), "segment_row");
}

void AttentionBuilder::storeSegmentPartials(const std::vector<Value*>& results, Value* mFinal, Value* lFinal) {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, DV = c_.valueHeadSizePadded / G;
  // ---- Split-KV: this segment's unnormalized output, its maximum and sum. ----
  // Scratch rows are (token, query head, segment): index (token·Hq + head)·num_segments
  // + segment, times HEAD_SIZE_PADDED (Dv's, DiffKV) for the output. A row that saw no key (an
  // empty segment, or only masked keys) reports maximum -inf: weight 0 in the
  // reduction, whatever its running maximum was.
  Value* segmentRow = segmentRows();
  std::vector<Value*> partials;
  for (int g = 0; g < G; ++g) {
    Value* partial = results[2 + g];
    if (p_.vScaleValue) partial = b_.mul(partial, splatTo(p_.vScaleValue, {M, DV}), "segment_v_scaled");
    partials.push_back(partial);
  }
  storeSegmentOutputs(segmentRow, partials);
  Value* sawKeys = b_.cmp(CmpPredicate::Gt, lFinal, p_.zeroRow, "segment_saw_keys");
  b_.store(b_.addPtr(splatTo(segmMax_, {M}), segmentRow), b_.select(sawKeys, mFinal, p_.negInfRow, "segment_max"),
           p_.rowMask);
  b_.store(b_.addPtr(splatTo(segmExpsum_, {M}), segmentRow), lFinal, p_.rowMask);
}

void AttentionBuilder::mergeClusterSegments(std::vector<Value*>& results, Value*& mFinal, Value*& lFinal) {
  const int G = groups();
  const int64_t M = c_.blockM, DV = c_.valueHeadSizePadded / G;
  // ---- Split-KV in a cluster: the segments combined through distributed shared memory. ----
  // As reduce_segments does with the partials: each segment's weight is
  // 2^(m_s − M) for the cluster's maximum M (0 for a segment that saw no key),
  // and the sums and outputs add up in rank order, identically in every
  // program of the cluster.
  Value* sawKeys = b_.cmp(CmpPredicate::Gt, lFinal, p_.zeroRow, "segment_saw_keys");
  Value* segmentMax = b_.select(sawKeys, mFinal, p_.negInfRow, "segment_max");
  Value* clusterMax = b_.clusterReduce(Opcode::ClusterReduceMax, segmentMax, "cluster_max");
  Value* weight = b_.select(sawKeys, b_.unary(Opcode::Exp2, b_.sub(segmentMax, clusterMax), "segment_weight_raw"),
                            p_.zeroRow, "segment_weight");
  lFinal = b_.clusterReduce(Opcode::ClusterReduceSum, b_.mul(lFinal, weight, "segment_sum_weighted"), "cluster_sum");
  mFinal = clusterMax;
  for (int g = 0; g < G; ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* weighted = b_.mul(results[2 + g], asColumn(weight, DV), "segment_acc_weighted" + suffix);
    results[2 + g] = b_.clusterReduce(Opcode::ClusterReduceSum, weighted, "cluster_acc" + suffix);
  }
  // Every program of the cluster now holds the same rows: rank r stores its
  // share of the columns, rank 0 the LSE.
  const int64_t share = std::max<int64_t>(1, DV / config_.clusterSplit);
  Value* ownerOfColumn = b_.div(b_.arange(0, DV, "cluster_out_columns"), b_.constInt(share, Type::tile({DV}, i32())),
                                "cluster_column_owner");
  Value* ownsColumn = b_.cmp(CmpPredicate::Eq, ownerOfColumn, splatTo(p_.segmentIdx, {DV}), "cluster_owns_column");
  p_.oMask = b_.andOp(p_.oMask, asRow(ownsColumn, M), "cluster_o_mask");
  p_.rowMask = b_.andOp(p_.rowMask, splatTo(b_.cmp(CmpPredicate::Eq, p_.segmentIdx, zeroI32_, "cluster_first_rank"), {M}),
                        "cluster_row_mask");
}

void AttentionBuilder::normalizeAndStore(const std::vector<Value*>& results, Value* mFinal, Value* lFinal) {
  const int G = groups();
  // D: columns of a Q/K group (Dqk); DV: of a V/output group (Dv, DiffKV; = D otherwise).
  const int64_t M = c_.blockM, DV = c_.valueHeadSizePadded / G;
  const ScalarKind dt = config_.dtype;
  // ---- Normalize and store. ----
  Value* oRowOffset = b_.add(b_.mul(p_.queryToken64, splatTo(oStrideToken_, {M})),
                             b_.mul(p_.queryHead64, splatTo(oStrideHead_, {M})), "o_row_offset");
  // One division per row, then a multiply per element: a rounded f32 division
  // is a dozen SASS instructions (a refined reciprocal, a range check, a called
  // slow path), and one per element made up a third of prefill's code. A
  // per-tensor v_scale joins the row factor.
  // fp8 output divides by output_scale: its reciprocal joins the row factor too,
  // and the cast saturates (vLLM clamps to ±448, then converts).
  Value* outputFactor = p_.vScaleValue;
  if (outputScale_) {
    Value* inverse = b_.div(b_.f32(1.0), b_.load(outputScale_, nullptr, nullptr, "output_scale_value"),
                            "inv_output_scale");
    outputFactor = p_.vScaleValue ? b_.mul(p_.vScaleValue, inverse, "v_scale_over_output_scale") : inverse;
  }
  Value* rowNumerator = outputFactor ? splatTo(outputFactor, {M}) : b_.constFloat(1.0, Type::tile({M}, f32()));
  Value* normalizer = asColumn(b_.div(rowNumerator, lFinal, outputFactor ? "out_row_factor" : "inv_l"), DV);
  const ScalarKind outKind = config_.outputFp8 ? ScalarKind::F8E4M3 : dt;
  for (int g = 0; g < G; ++g) {
    const std::string suffix = G == 1 ? "" : std::to_string(g);
    Value* normalized = b_.mul(results[2 + g], normalizer, "out_f32" + suffix);
    Value* outTile = outKind == ScalarKind::F32 ? normalized : b_.cast(normalized, outKind, "out_tile" + suffix);
    Value* oOffset = b_.add(asColumn(oRowOffset, DV), asRow(p_.valueGroupColumns[g], M), "o_offset" + suffix);
    b_.store(b_.addPtr(splatTo(out_, {M, DV}), oOffset, "o_ptrs" + suffix), outTile, p_.oMask);
  }
  if (lse_) {
    // Natural-log LSE of each row: (M + log2 L)·ln 2 (M is in log2 units), the
    // layout merge_attn_states reads: lse[head · lse_stride_head + token].
    Value* lseLog2 = b_.add(mFinal, b_.unary(Opcode::Log2, lFinal), "lse_log2");
    Value* lseValue = b_.mul(lseLog2, splatTo(b_.f32(std::numbers::ln2), {M}), "lse");
    Value* lseOffset = b_.add(b_.mul(p_.queryHead64, splatTo(lseStrideHead_, {M})), p_.queryToken64, "lse_offset");
    b_.store(b_.addPtr(splatTo(lse_, {M}), lseOffset, "lse_ptrs"), lseValue, p_.rowMask);
  }
}

}  // namespace

int UnifiedAttentionConfig::minimumBlockM() const {
  // Exact f32 computes every row on FMAs: rows past one token's heads would be
  // work on padding (decode at GQA 4 ran 2.1x faster at 4 rows than at 16,
  // docs/perf-log.md 2026-12-03).
  const int floor = tensorCoreDots() ? 16 : 1;
  if (numKvHeads < 1) return floor;
  return std::max(floor, nextPowerOfTwo(queriesPerKv()));
}

int UnifiedAttentionConfig::blockM() const { return blockMRows > 0 ? blockMRows : minimumBlockM(); }

int64_t UnifiedAttentionConfig::estimatedSharedBytes(bool warpgroupMma) const {
  // Tiles span the padded head sizes; sizes in half-bytes for int4's nibbles.
  const int64_t keyColumns = headSizePadded(), valueColumns = valueHeadSizePadded();
  const int64_t dtypeBytes = ir::storageBytes(dtype);
  int64_t cacheHalfBytes = 2;  // fp8 and int8 values
  if (kvCacheFormat == KvCacheFormat::Auto) cacheHalfBytes = 2 * dtypeBytes;
  if (kvCacheFormat == KvCacheFormat::Int4PerTokenHead) cacheHalfBytes = 1;
  const int64_t rows = blockM();
  const int64_t stages = asyncCopy ? std::max(numStages, 2) : 0;
  const int64_t slots = stages * tileSize * (keyColumns + valueColumns) * cacheHalfBytes / 2;
  const int64_t operands = qInShared ? rows * keyColumns * dtypeBytes : 0;
  // On wgmma, tall query tiles convert quantized tiles once into 16-bit tiles
  // in shared memory (per stage); int4 does at head sizes above 64 only.
  const bool quantized = kvCacheFormat != KvCacheFormat::Auto;
  const bool sharedConversions = warpgroupMma && quantized && rows >= 64 &&
                                 (kvCacheFormat != KvCacheFormat::Int4PerTokenHead || headSize > 64);
  const int64_t conversions = sharedConversions ? stages * tileSize * (keyColumns + valueColumns) * 2 : 0;
  // Scratch: the output tile's staging, or where warps split the keys (fewer
  // 16-row m-tiles than warps) their P and row statistics; quantized tiles
  // taller than one m-tile whose warps split the keys convert through one
  // stage's worth of raw tiles.
  const bool warpsSplitKeys = numWarps > rows / 16;
  int64_t scratch = rows * std::max(valueColumns * dtypeBytes, warpsSplitKeys ? int64_t{tileSize} * 4 : 0);
  if (quantized && warpsSplitKeys && rows > 16)
    scratch = std::max(int64_t{tileSize} * (keyColumns + valueColumns), rows * valueColumns * 2) * cacheHalfBytes / 2;
  // Without wgmma, tall query tiles stage a dequantized 16-bit V tile there.
  if (quantized && !warpgroupMma && rows >= 64) scratch = std::max(scratch, int64_t{tileSize} * valueColumns * 2);
  return slots + operands + conversions + scratch;
}

int UnifiedAttentionConfig::blockQ() const {
  const int perKv = numKvHeads < 1 ? 1 : std::max(1, queriesPerKv());
  return blockM() / perKv;
}

int UnifiedAttentionConfig::headSizePadded() const { return nextPowerOfTwo(headSize); }

int UnifiedAttentionConfig::valueHeadSizePadded() const { return nextPowerOfTwo(effectiveValueHeadSize()); }

int UnifiedAttentionConfig::rightWindow() const {
  if (slidingWindowRight > 0) return slidingWindowRight;
  return slidingWindowRight == 0 ? slidingWindow : 0;
}

int UnifiedAttentionConfig::kvStrideDivisibility() const {
  // Per-token-head rows are D + 4 bytes (D/2 + 4 for int4): 4-byte multiples at best.
  // DiffKV's packed rows hold a K row and a V row, and kv_stride_kv is the K row.
  if (separateScales()) return byteRowStrideDivisibility(keyRowElements(), valueRowElements());
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
                     (differentValueHeadSize() ? "v" + std::to_string(effectiveValueHeadSize()) : std::string()) +
                     "_bs" + std::to_string(blockSize) + (causal ? "_causal" : "_noncausal");
  // Score modifiers change the kernel's meaning: each on one is part of the name.
  if (slidingWindow != 0) name += "_sw" + std::to_string(slidingWindow);
  if (slidingWindowRight != 0)
    name += "_swr" + (slidingWindowRight < 0 ? std::string("inf") : std::to_string(slidingWindowRight));
  if (attentionChunkSize != 0) name += "_chunk" + std::to_string(attentionChunkSize);
  if (mmPrefixRanges != 0) name += "_mm" + std::to_string(mmPrefixRanges);
  if (softcap != 0) name += "_softcap" + softcapNameText(softcap);
  if (alibi) name += alibiSqrt ? "_alibisqrt" : "_alibi";
  if (sinks) name += "_sinks";
  if (qqBias) name += "_qqbias";
  if (perSequenceCausal) name += "_seqcausal";
  if (kvCacheFormat != KvCacheFormat::Auto) name += std::string("_") + kvCacheFormatName(kvCacheFormat);
  if (separateScales()) name += "_sepscales";
  if (outputFp8) name += "_outfp8";
  if (queryFp8) name += "_qfp8";
  if (queryKeyDotKind() != dtype) name += "_f16dots";
  if (dtype == ir::ScalarKind::F32 && fp32Precision == Fp32Precision::Ieee) name += "_ieee";
  if (outputLse) name += "_lse";
  if (splitKv) name += "_3d";
  if (clusterSplit > 0) name += "_cl" + std::to_string(clusterSplit);
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
  if (overlapSoftmax) name += "_ovl";
  if (prefetchScores) name += "_pfs";
  if (warpSpecialize) name += pingPong ? "_wspp" : softmaxTurns ? "_wsst" : "_ws";
  if (producerRegisters != 0) name += "_pr" + std::to_string(producerRegisters);
  if (tensorMemoryAccelerator) name += "_tma";
  if (persistent) name += "_ps";
  if (lazyRescale) name += *lazyRescale ? "_lazy" : "_eager";
  return name;
}

support::Status UnifiedAttentionConfig::validate() const {
  if (support::Status s = checkIoDtype(dtype); !s) return s;
  if (numKvHeads < 1 || numKvHeads > kMaxAttentionHeads)
    return configError("num_kv_heads (" + std::to_string(numKvHeads) + ") must be between 1 and " +
                       std::to_string(kMaxAttentionHeads));
  if (numQueryHeads < 1 || numQueryHeads > kMaxAttentionHeads)
    return configError("num_query_heads (" + std::to_string(numQueryHeads) + ") must be between 1 and " +
                       std::to_string(kMaxAttentionHeads));
  if (numQueryHeads % numKvHeads != 0)
    return configError("num_query_heads (" + std::to_string(numQueryHeads) + ") is not a multiple of num_kv_heads (" +
                       std::to_string(numKvHeads) + ")");
  if (queriesPerKv() > kMaxQueriesPerKvHead)
    return configError("num_query_heads / num_kv_heads (" + std::to_string(queriesPerKv()) + ") must be at most " +
                       std::to_string(kMaxQueriesPerKvHead) + " (one program's query tile packs them)");
  if (headSize < 1 || headSize > kMaxHeadSize)
    return configError(headSizeOutOfRange("head_size", headSize));
  if (valueHeadSize != 0 && (valueHeadSize < 1 || valueHeadSize > kMaxHeadSize))
    return configError(headSizeOutOfRange("value_head_size", valueHeadSize) +
                       " (0 = head_size: equal QK and V head sizes)");
  if (blockSize < 1 || blockSize > 256)
    return configError("block_size (" + std::to_string(blockSize) + ") must be between 1 and 256");
  if (clusterSplit != 0 && (clusterSplit < 2 || clusterSplit > 16))
    return configError("cluster_split (" + std::to_string(clusterSplit) +
                       ") must be 0 (off) or a cluster of 2 to 16 programs (above 8 not portable)");
  if (clusterSplit != 0 && splitKv)
    return configError("cluster_split and split_kv are two ways to split the keys; choose one");
  if (clusterSplit != 0 && warpSpecialize)
    return configError("cluster_split is unsupported with warp_specialize (producer warps never reach the "
                       "cluster's barriers)");
  if (pingPong && !warpSpecialize)
    return configError("ping_pong needs warp_specialize: true (the compute warpgroups take turns only with "
                       "producer warps)");
  if (softmaxTurns && !warpSpecialize)
    return configError("softmax_turns needs warp_specialize: true (the compute warpgroups take turns only with "
                       "producer warps)");
  if (softmaxTurns && pingPong)
    return configError("softmax_turns and ping_pong are two ways to take turns; choose one");
  if (softmaxTurns && overlapSoftmax)
    return configError("softmax_turns is unsupported with overlap_softmax (its softmax waits for the P·V issued "
                       "with the next Q·Kᵀ, inside the turn)");
  if (prefetchScores && (softmaxTurns || tensorMemoryAccelerator || persistent))
    return configError(std::string("prefetch_scores is unsupported with ") +
                       (softmaxTurns ? "softmax_turns (the next tile's Q·Kᵀ is issued before this tile's softmax, so "
                                       "no Q·Kᵀ completes where the turn is taken)"
                        : tensorMemoryAccelerator ? "tma (the next tile's K is not a load_tensor tile)"
                                                  : "persistent (each work item's first Q·Kᵀ is computed in front of "
                                                    "its loops, outside the rings of slots)"));
  if (prefetchScores && asymmetricInt4())
    return configError("prefetch_scores is unsupported with kv_cache_dtype int4_per_token_head and kv_scales "
                       "separate (the next tile's K needs its zero points before this tile's scales are read)");
  if (tensorMemoryAccelerator && !warpSpecialize)
    return configError("tma needs warp_specialize: true (a producer thread issues the TMA copies)");
  if (producerRegisters != 0) {
    if (!warpSpecialize || numWarps != 8)
      return configError("producer_registers needs warp_specialize: true and num_warps: 8 (setmaxnreg splits the "
                         "registers of 8 compute and 4 producer warps; fewer compute warps have all they can use)");
    // 384 threads launch with 168 registers each; above 152 for the producers
    // the compute warps would get no more than that.
    if (producerRegisters < 24 || producerRegisters > 152 || producerRegisters % 8 != 0)
      return configError("producer_registers (" + std::to_string(producerRegisters) +
                         ") must be a multiple of 8 from 24 to 152 (the compute warps get what is left of 384 x "
                         "168)");
  }
  if (persistent && checkBounds)
    return configError("persistent is unsupported with check_bounds (the programs' item count comes from "
                       "cu_seqlens_q, which a checked kernel does not trust)");
  if (persistent && overlapSoftmax)
    return configError("persistent is unsupported with overlap_softmax (the last tile's P·V after the KV loop reads "
                       "a slot the next loop's fills would reuse)");
  if (persistent && (splitKv || clusterSplit != 0))
    return configError(std::string("persistent is unsupported with ") + (splitKv ? "split_kv" : "cluster_split") +
                       " (persistent programs walk the 2D launch's query blocks and KV heads)");
  if (tileSize < 16 || tileSize > 256 || !isPowerOfTwo(tileSize))
    return configError("tile_size (" + std::to_string(tileSize) + ") must be a power of two between 16 and 256");
  if (numWarps < 1 || numWarps > 16 || !isPowerOfTwo(numWarps))
    return configError("num_warps (" + std::to_string(numWarps) + ") must be a power of two between 1 and 16");
  if (support::Status s = checkNumStages(numStages, warpSpecialize); !s) return s;
  if (slidingWindow < 0)
    return configError("sliding_window (" + std::to_string(slidingWindow) +
                       ") must not be negative (0 turns the window off)");
  if (slidingWindowRight < -1)
    return configError("sliding_window_right (" + std::to_string(slidingWindowRight) +
                       ") must be -1 (no right bound), 0 (the window's own) or a positive key count");
  if (slidingWindowRight != 0 && causal && !perSequenceCausal)
    return configError("sliding_window_right (" + std::to_string(slidingWindowRight) +
                       ") needs non-causal attention (causal: false or per_sequence_causal): causal rows see no key "
                       "after their own");
  if (slidingWindowRight == -1 && slidingWindow == 0)
    return configError("sliding_window_right -1 (no right bound) needs a sliding_window: without one the window "
                       "is already unbounded");
  if (!std::isfinite(softcap) || softcap < 0)
    return configError("softcap (" + numberText(softcap) + ") must be a finite number >= 0 (0 turns it off)");
  if (attentionChunkSize < 0)
    return configError("attention_chunk_size (" + std::to_string(attentionChunkSize) +
                       ") must not be negative (0 turns chunked local attention off)");
  if (mmPrefixRanges < 0 || mmPrefixRanges > kMaxMmPrefixRanges)
    return configError("mm_prefix_ranges (" + std::to_string(mmPrefixRanges) + ") must be between 0 (off) and " +
                       std::to_string(kMaxMmPrefixRanges) + " ranges per sequence");
  if (alibiSqrt && !alibi) return configError("alibi_sqrt needs alibi: true (it changes the ALiBi bias's form)");
  if (fp8DotDtype == Fp8DotDtype::F16 && !f16QueryKeyDots(kvCacheFormat))
    return configError(std::string("fp8_dot_dtype f16 needs an fp8 or int8 cache (kv_cache_dtype fp8_e4m3, "
                                   "fp8_e5m2, int8_per_token_head or fp8_per_token_head), got kv_cache_dtype ") +
                       kvCacheFormatName(kvCacheFormat));
  if (fp8DotDtype == Fp8DotDtype::F16 && dtype == ScalarKind::F32)
    return configError("fp8_dot_dtype f16 needs dtype bf16 or f16, got f32");
  if (kvScaleLayout == KvScaleLayout::Separate && !isPerTokenHead(kvCacheFormat))
    return configError(std::string("kv_scales separate needs a per-token-head cache (int8_per_token_head, "
                                   "fp8_per_token_head or int4_per_token_head), got kv_cache_dtype ") +
                       kvCacheFormatName(kvCacheFormat));
  if (kvCacheFormat == KvCacheFormat::Int4PerTokenHead && headSize % 2 != 0)
    return configError("head_size (" + std::to_string(headSize) +
                       ") must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  if (kvCacheFormat == KvCacheFormat::Int4PerTokenHead && effectiveValueHeadSize() % 2 != 0)
    return configError("value_head_size (" + std::to_string(effectiveValueHeadSize()) +
                       ") must be even for kv_cache_dtype int4_per_token_head (two values per byte)");
  if (overlapSoftmax && asymmetricInt4())
    return configError("overlap_softmax is unsupported with kv_cache_dtype int4_per_token_head and kv_scales "
                       "separate: a lagging V tile would need its own tile's zero points");
  if (blockMRows != 0 && (!isPowerOfTwo(blockMRows) || blockMRows < minimumBlockM() || blockMRows > 256))
    return configError("block_m (" + std::to_string(blockMRows) + ") must be a power of two between " +
                       std::to_string(minimumBlockM()) + " (one token's " + std::to_string(queriesPerKv()) +
                       " query heads" + (tensorCoreDots() ? ", at least 16" : "") + ") and 256");
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
  if (config.warpSpecialize)
    ir::setKernelAttribute(*kernel, ir::KernelAttribute::WarpSpecialize,
                           config.pingPong ? 2 : config.softmaxTurns ? 3 : 1);
  if (config.clusterSplit > 0) ir::setKernelAttribute(*kernel, ir::KernelAttribute::ClusterSize, config.clusterSplit);
  if (config.tensorMemoryAccelerator) ir::setKernelAttribute(*kernel, ir::KernelAttribute::TensorMemoryAccelerator, 1);
  if (config.producerRegisters != 0)
    ir::setKernelAttribute(*kernel, ir::KernelAttribute::ProducerRegisters, config.producerRegisters);
  // Block numbers two tiles ahead (Pipelining.cpp) where layout assignment
  // converts them into the copy layouts anyway: decode tiles of 128 keys (8
  // block numbers per thread there). With 64 keys, and in int4 rows' narrower
  // copy layouts, it loads them again in each layout (at most 4 per thread),
  // which a carried value cannot do: there the carried row would cost 4 more
  // barriers per tile. 1-3% on 128-key quantized decode (docs/perf-log.md,
  // 2026-12-01).
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
  if (config.slidingWindowRight > 0) cx.push_back({"SLIDING_WINDOW_RIGHT", int64_t{config.slidingWindowRight}});
  if (config.softcap > 0) cx.push_back({"SOFTCAP", config.softcap});
  if (config.attentionChunkSize > 0) cx.push_back({"ATTENTION_CHUNK_SIZE", int64_t{config.attentionChunkSize}});
  if (config.mmPrefixRanges > 0) cx.push_back({"MAX_MM_RANGES", int64_t{config.mmPrefixRanges}});

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

int32_t unifiedAttentionSeqSearchSteps(int numSeqs, bool oneQueryTokenEach) {
  if (oneQueryTokenEach) return -1;
  return static_cast<int32_t>(std::bit_width(static_cast<unsigned>(std::max(numSeqs, 0))));
}

}  // namespace attnjit::compiler
