// The op-level paged-attention API (compiler/ops/PagedAttentionOp.h): argument
// validation and variant selection on the CPU; [gpu] launches on device buffers
// checked against the float64 reference through the attention harness.
#include <catch2/catch.hpp>

#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <optional>
#include <string>

#include "tests/test_op_params.h"
#include "tests/test_tools.h"
#include "compiler/validation/AttentionGpu.h"
#include "compiler/validation/AttentionProblem.h"
#include "compiler/driver/DeviceTarget.h"
#include "compiler/kernels/ReduceSegments.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "runtime/DeviceBuffer.h"
#include "runtime/Driver.h"

using namespace attnjit;
using ir::ScalarKind;
using support::Status;

namespace {

ops::PagedAttentionParams validParams() { return tests::validPagedAttentionParams(); }

// Decode of 64 sequences with up to maxSeqLen keys on a 132-SM GPU (the H200).
ops::PagedAttentionParams fullDecodeBatch(int maxSeqLen) {
  ops::PagedAttentionParams p = validParams();
  p.numSeqs = 64;
  p.numTokens = 64;
  p.maxQueryLen = 1;
  p.numSms = 132;
  p.maxSeqLen = maxSeqLen;
  return p;
}

std::string validationMessage(const ops::PagedAttentionParams& p) {
  support::Status s = ops::validatePagedAttention(p);
  return s ? std::string("ok") : s.diagnostic().message;
}

}  // namespace

TEST_CASE("paged attention op: arguments are validated before the GPU is touched", "[op]") {
  CHECK(validationMessage(validParams()) == "ok");
  auto p = validParams();
  p.kvCache = 0;
  CHECK(validationMessage(p) == "paged attention: kv_cache is a null pointer");
  p = validParams();
  p.q += 2;
  CHECK(validationMessage(p) ==
        "paged attention: q (0x20002) is not 16-byte aligned, as the kernel is compiled to assume");
  p = validParams();
  p.numQueryHeads = 12;
  CHECK(validationMessage(p) == "paged attention: num_query_heads (12) is not a multiple of num_kv_heads (8)");
  p = validParams();
  p.kvStrideToken = 1028;
  CHECK(validationMessage(p) ==
        "paged attention: kv_stride_token (1028) must be a multiple of 8 for head size 128 and kv_cache_dtype auto");
  p = validParams();
  p.oStrideHead = 0;
  CHECK(validationMessage(p) == "paged attention: o_stride_head (0) must be positive");
  p = validParams();
  p.numTokens = 3;
  CHECK(validationMessage(p) ==
        "paged attention: num_tokens (3) is less than num_seqs (4): every sequence brings at least one query token");
  p = validParams();
  p.maxQueryLen = 9;
  CHECK(validationMessage(p) == "paged attention: max_query_len (9) must be between 1 and num_tokens (4)");
  p = validParams();
  p.scale = 0;
  CHECK(validationMessage(p).find("scale") != std::string::npos);
  p = validParams();
  p.headSize = 1100;
  CHECK(validationMessage(p) == "paged attention: head_size (1100) must be between 1 and 1024");
  p = validParams();
  p.dtype = ScalarKind::I8;
  CHECK(validationMessage(p).find("dtype (i8) is not supported") != std::string::npos);
  p = validParams();
  p.numSms = -3;
  CHECK(validationMessage(p) == "paged attention: num_sms (-3) must be 0 (the device's) or positive");
  // The plan functions take any parameters: a negative SM count means device 0's, and
  // with no device to ask (no driver) the plan does not split instead of dividing by 0.
  p.maxSeqLen = 8192;
  p.workspace = 0x70000;
  p.workspaceBytes = uint64_t{1} << 30;
  const int segments = ops::pagedAttentionSplitPlan(p).numSegments;
  CHECK(segments >= 1);
  CHECK(segments <= ops::kSplitKvMaxSegments);
  if (!runtime::driverAvailable()) CHECK(segments == 1);
  p.numQueryHeads = (1 << 30) + 1;
  p.numKvHeads = 1;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  // Without a driver the call itself fails cleanly after validating.
  if (!runtime::driverAvailable()) {
    support::Status s = ops::pagedAttention(validParams());
    REQUIRE_FALSE(s.isOk());
    CHECK(s.diagnostic().message.find("CUDA driver not available") != std::string::npos);
  }
}

TEST_CASE("paged attention op: quantized caches, modifiers, LSE and workspace are validated", "[op]") {
  // The variants' names without a split: where a GPU is present a call without
  // a workspace would split into the runtime's scratch (tested elsewhere).
  auto unsplit = [](ops::PagedAttentionParams params) {
    params.runtimeScratch = false;
    return ops::selectPagedAttentionVariant(params).kernelName();
  };
  auto p = validParams();
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  CHECK(validationMessage(p) == "paged attention: k_scale is a null pointer");
  p.kScale = 0x70000;
  p.vScale = 0x70004;
  CHECK(validationMessage(p) == "ok");
  // Decode meets bf16 q in f16 (one conversion per pair of cache bytes);
  // prefill keeps bf16, where f16 gained nothing.
  CHECK(unsplit(p) == "unified_attention_bf16_h32kv8_d128_bs16_causal_fp8_e4m3_f16dots_t128");
  ops::PagedAttentionParams prefill = p;
  prefill.maxQueryLen = 64;
  prefill.numTokens = 256;
  CHECK(validationMessage(prefill) == "ok");
  CHECK(unsplit(prefill).find("_f16dots") == std::string::npos);
  CHECK(unsplit(prefill).find("_m128") != std::string::npos);
  p.kvStrideHead = 136;  // a multiple of 8, not of the 16 one-byte values fp8 rows promise
  CHECK(validationMessage(p) ==
        "paged attention: kv_stride_head (136) must be a multiple of 16 for head size 128 and kv_cache_dtype fp8_e4m3");
  p = validParams();
  p.kScale = 0x70000;
  CHECK(validationMessage(p) ==
        "paged attention: k_scale/v_scale are only used by the per-tensor fp8 caches; kv_cache_dtype is auto");
  p = validParams();
  p.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  p.kvStrideHead = 132;  // D + 4 bytes
  p.kvStrideToken = 8 * 132;
  p.kvStrideKv = 16 * 8 * 132;
  p.kvStrideBlock = 2 * p.kvStrideKv;
  CHECK(validationMessage(p) == "ok");
  CHECK(unsplit(p) ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_int8_per_token_head_f16dots_t128");  // cp.async: no spills at 64
  p = validParams();
  p.lse = 0x80000;
  p.lseStrideHead = 3;
  CHECK(validationMessage(p) == "paged attention: lse_stride_head (3) must be at least num_tokens (4)");
  p.lseStrideHead = 4;
  p.sinks = 0x90002;
  CHECK(validationMessage(p) ==
        "paged attention: sinks (0x90002) is not 4-byte aligned, as the kernel is compiled to assume");
  p.sinks = 0x90000;
  p.alibiSlopes = 0xA0000;
  p.slidingWindow = 128;
  CHECK(validationMessage(p) == "ok");
  CHECK(unsplit(p) ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_sw128_alibi_sinks_lse_t64");
  p.causalFlags = 0xC0000;
  CHECK(unsplit(p) ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_sw128_alibi_sinks_seqcausal_lse_t64");
  p.alibiSqrt = true;
  CHECK(validationMessage(p) == "ok");
  CHECK(unsplit(p) ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_sw128_alibisqrt_sinks_seqcausal_lse_t64");
  p.alibiSlopes = 0;
  CHECK(validationMessage(p) == "paged attention: alibi_sqrt needs alibi_slopes (its slopes)");
  p.alibiSqrt = false;
  p.outputScale = 0xD0001;
  CHECK(validationMessage(p) ==
        "paged attention: output_scale (0xd0001) is not 4-byte aligned, as the kernel is compiled to assume");
  p.outputScale = 0xD0000;
  CHECK(validationMessage(p) == "ok");
  CHECK(unsplit(p) ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_sw128_sinks_seqcausal_outfp8_lse_t64");

  // Split-KV: a decode batch too small to fill the GPU is split, into the
  // caller's workspace or, without one, the runtime's scratch.
  p = validParams();  // 4 sequences x 8 KV heads: 32 programs in 2D
  p.maxSeqLen = 4096;
  p.numSms = 132;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 8);  // no workspace: the runtime's scratch
  CHECK(ops::selectPagedAttentionVariant(p).splitKv);
  CHECK(validationMessage(p) == "ok");
  p.runtimeScratch = false;  // no workspace and no runtime scratch: 2D
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  p.runtimeScratch = true;
  p.maxSeqLen = 0;  // no maxSeqLen hint: 264 / 32 = 9 segments per sequence, cut on the GPU,
  const ops::SplitKvPlan unsized = ops::pagedAttentionSplitPlan(p);  // of at least 512 keys (8 tiles of 64)
  CHECK(unsized.numSegments == 9);
  CHECK(unsized.segmentTiles == -8);
  CHECK(validationMessage(p) == "ok");
  p.workspace = 0xB0000;  // a caller's workspace bounds them as it bounds sized segments
  p.workspaceBytes = 4ull * 32 * 3 * (128 + 2) * 4 + 64;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 3);
  p.workspaceBytes = 1000;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.workspace = p.workspaceBytes = 0;
  p.numSeqs = p.numTokens = 64;  // 512 programs fill the GPU: 2D
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.numSeqs = p.numTokens = 4;
  p.maxSeqLen = 1 << 20;  // the runtime's scratch holds any plan: 9 segments, as with a large workspace
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 9);
  p.maxSeqLen = 4096;
  const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(64, 32, 128, 4096).value();
  CHECK(bytes == 64ull * 32 * 8 * 128 * 4 + 2 * (64ull * 32 * 8 * 4));  // 8 segments of 512 keys
  p.workspace = 0xB0000;
  p.workspaceBytes = bytes;
  auto plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 8);   // 264 CTAs wanted / 32 programs = 9, but segments keep >= 512 keys
  CHECK(plan.segmentTiles == 8);  // 8 tiles of 64 keys
  CHECK(ops::selectPagedAttentionVariant(p).splitKv);
  CHECK(validationMessage(p) == "ok");
  p.maxSeqLen = 1 << 20;  // long contexts: 9 segments, no more (the grid is full)
  plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 9);
  CHECK(plan.segmentTiles == 1821);
  p.numSeqs = p.numTokens = 64;  // 512 programs fill 132 SMs: 2D
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  {
    // A workspace from pagedAttentionWorkspaceBytes holds the fill rule's plan for
    // a few long sequences: 3 MQA sequences take 64 segments (192 CTAs), as with
    // the runtime's scratch, not the 16 (48 CTAs on 132 SMs) of 16 per token.
    ops::PagedAttentionParams mqa = validParams();
    mqa.numKvHeads = 1;
    mqa.numSeqs = mqa.numTokens = 3;
    mqa.maxSeqLen = 131072;
    mqa.numSms = 132;
    CHECK(ops::pagedAttentionSplitPlan(mqa).numSegments == 64);
    mqa.workspace = 0xB0000;
    mqa.workspaceBytes = ops::pagedAttentionWorkspaceBytes(3, 32, 128, 131072).value();
    CHECK(ops::pagedAttentionSplitPlan(mqa).numSegments == 64);
    mqa.workspaceBytes = ops::pagedAttentionWorkspaceBytes(4096, 32, 128, 131072).value();  // an engine's max tokens
    CHECK(ops::pagedAttentionSplitPlan(mqa).numSegments == 64);
    // 64 MQA sequences of 4096 keys: 32-row tiles run two CTAs per SM, so the
    // fill rule's 5 segments (320 CTAs, a second wave of 56) round down to 4
    // (256 CTAs, one wave); 16-row tiles keep the rounding up.
    mqa.numSeqs = mqa.numTokens = 64;
    mqa.maxSeqLen = 4096;
    mqa.workspaceBytes = ops::pagedAttentionWorkspaceBytes(64, 32, 128, 4096).value();
    plan = ops::pagedAttentionSplitPlan(mqa);
    CHECK(plan.numSegments == 4);
    CHECK(plan.segmentTiles == 16);
    mqa.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
    CHECK(ops::pagedAttentionSplitPlan(mqa).numSegments == 4);
    mqa.kvCacheFormat = compiler::KvCacheFormat::Auto;
    mqa.numQueryHeads = 16;  // 16 rows: 5 segments
    CHECK(ops::pagedAttentionSplitPlan(mqa).numSegments == 5);
  }
  p.numSeqs = p.numTokens = 4;
  p.maxSeqLen = 700;  // two 512-key segments at most
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 2);
  p.maxSeqLen = 512;  // one segment: 2D
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  p.maxSeqLen = 4096;
  p.workspaceBytes = 4ull * 32 * 3 * (128 + 2) * 4 + 64;  // room for 3 segments of this batch
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 3);
  // Too small to split this batch (a workspace sized for smaller batches): a 2D launch,
  // never an error.
  p.workspaceBytes = 1000;
  CHECK(validationMessage(p) == "ok");
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  p.workspaceBytes = bytes;
  p.maxSeqLen = 4096;
  p.batchInvariant = true;  // one fixed tiling, never split
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).splitKv);
  p.numTokens = 40;
  p.maxQueryLen = 32;
  CHECK(ops::selectPagedAttentionVariant(p).blockM() == 16);
  p.maxSeqLen = 10;
  CHECK(validationMessage(p) == "paged attention: max_seq_len (10) must be 0 (unknown) or at least max_query_len (32)");
  CHECK(ops::pagedAttentionWorkspaceBytes(64, 32, 128, 512).value() == 0);  // one segment: never split
}

TEST_CASE("paged attention op: separate per-token-head scales are validated and select their kernel",
          "[op][sepscales]") {
  auto p = validParams();  // rows of D = 128 bytes: the bf16 strides halved
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8PerTokenHead;
  p.kvScaleLayout = compiler::KvScaleLayout::Separate;
  p.kvStrideBlock = 2 * 16 * 8 * 128, p.kvStrideKv = 16 * 8 * 128, p.kvStrideToken = 8 * 128, p.kvStrideHead = 128;
  CHECK(validationMessage(p) == "paged attention: k_scale_cache is a null pointer");
  p.kScaleCache = 0x70000;
  p.vScaleCache = 0x70002;
  CHECK(validationMessage(p) ==
        "paged attention: v_scale_cache (0x70002) is not 4-byte aligned, as the kernel is compiled to assume");
  p.vScaleCache = 0x78000;
  CHECK(validationMessage(p) == "paged attention: scale_stride_block (0) must be positive");
  p.scaleStrideBlock = 16 * 8, p.scaleStrideToken = 8, p.scaleStrideHead = 1;
  CHECK(validationMessage(p) == "ok");
  p.runtimeScratch = false;
  CHECK(ops::selectPagedAttentionVariant(p).kernelName() ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_fp8_per_token_head_sepscales_f16dots_t128");
  p.kvStrideHead = 132;  // rows of values only promise 16-byte multiples
  CHECK(validationMessage(p) == "paged attention: kv_stride_head (132) must be a multiple of 16 for head size 128 "
                                "and kv_cache_dtype fp8_per_token_head");
  // Scale tensors without the layout, or the layout on a cache without row scales.
  p = validParams();
  p.kScaleCache = 0x70000;
  CHECK(validationMessage(p) ==
        "paged attention: k_scale_cache/v_scale_cache and their strides are only used with separate per-token-head "
        "scales (kv_scale_layout separate); kv_cache_dtype is auto, kv_scale_layout inline");
  p = validParams();
  p.kvScaleLayout = compiler::KvScaleLayout::Separate;
  CHECK(validationMessage(p).find("kv_scales separate needs a per-token-head cache") != std::string::npos);
}

TEST_CASE("paged attention op: chunked local attention, ranges and qq_bias select and validate", "[op][masks]") {
  auto unsplit = [](ops::PagedAttentionParams params) {
    params.runtimeScratch = false;
    return ops::selectPagedAttentionVariant(params).kernelName();
  };
  ops::PagedAttentionParams p = validParams();
  // The SM count pinned, so the plan is the same with or without a GPU: 32
  // CTAs on 132 SMs are latency-bound and take 128-key tiles.
  p.numSms = 132;
  p.attentionChunkSize = 8192;
  p.mmPrefixRange = 0xB0000;
  p.mmPrefixRanges = 4;
  p.qqBias = 0xE0000;
  p.qqBiasStride = 5;
  CHECK(validationMessage(p) == "ok");
  CHECK(unsplit(p) == "unified_attention_bf16_h32kv8_d128_bs16_causal_chunk8192_mm4_qqbias_t128");
  p.mmPrefixRanges = 0;
  CHECK(validationMessage(p) ==
        "paged attention: mm_prefix_ranges (0) must be the ranges per sequence of mm_prefix_range, 1 to 32");
  p.mmPrefixRanges = 33;
  CHECK(validationMessage(p) == "paged attention: mm_prefix_ranges (33) must be between 0 (off) and 32 ranges per sequence");
  p.mmPrefixRange = 0;
  CHECK(validationMessage(p) ==
        "paged attention: mm_prefix_ranges (33) is set but mm_prefix_range is null: pass the ranges or leave both 0");
  p.mmPrefixRanges = 0;
  p.qqBiasStride = 0;
  CHECK(validationMessage(p) ==
        "paged attention: qq_bias_stride (0) must be the bias's row stride and size n (qq_bias is [n, n]), 1 to "
        "46340");
  p.qqBiasStride = 46341;
  CHECK(validationMessage(p).find("qq_bias_stride (46341) must be") != std::string::npos);
  p.qqBiasStride = 46340;
  CHECK(validationMessage(p) == "ok");
  p.qqBias = 0xE0002;
  p.qqBiasStride = 4;
  CHECK(validationMessage(p) ==
        "paged attention: qq_bias (0xe0002) is not 4-byte aligned, as the kernel is compiled to assume");
  p.qqBias = 0;
  CHECK(validationMessage(p) ==
        "paged attention: qq_bias_stride (4) is set but qq_bias is null: pass the bias or leave both 0");
  p.qqBiasStride = 0;
  p.attentionChunkSize = -2;
  CHECK(validationMessage(p) ==
        "paged attention: attention_chunk_size (-2) must not be negative (0 turns chunked local attention off)");
  // A chunk caps each sequence's work like a window: uneven lengths say nothing
  // about the tail, so no 3/8 segments (the fill rule still splits small batches).
  ops::PagedAttentionParams uneven = fullDecodeBatch(8192);
  uneven.minSeqLen = 100;
  CHECK(ops::pagedAttentionSplitPlan(uneven).numSegments > 1);
  uneven.attentionChunkSize = 2048;
  CHECK(ops::pagedAttentionSplitPlan(uneven).numSegments == 1);
}

TEST_CASE("the ops' device facts: per device, and sm_90a's defaults without a GPU", "[op]") {
  const compiler::DeviceFacts& zero = compiler::deviceFacts(0);
  CHECK(&zero == &compiler::deviceFacts(0));                   // queried once
  CHECK(&compiler::deviceFacts(70) == &compiler::deviceFacts(70));  // past the lock-free table too
  CHECK(&compiler::deviceFacts(70) != &zero);
  if (attnjit::runtime::driverAvailable()) {
    if (!zero.target) return;  // a GPU attnjit has no target for: its error is the facts' status
    CHECK_FALSE(zero.targetName.empty());
    CHECK(zero.smCount > 0);
    CHECK(zero.sharedMemory.maxPerBlock > 0);
    return;
  }
  // No driver: the ops plan for device 0 as for the CLI's default target.
  CHECK(compiler::opDeviceOrdinal() == 0);
  CHECK(&compiler::opDeviceFacts() == &zero);
  CHECK_FALSE(zero.target);
  CHECK(zero.targetName.empty());
  CHECK(zero.warpgroupMma);
  CHECK(zero.smCount == 0);
  CHECK(zero.sharedMemory.maxPerBlock == 0);
}

TEST_CASE("paged attention op: decode-like and prefill-like batches get their tilings", "[op]") {
  auto p = validParams();
  auto decode = ops::selectPagedAttentionVariant(p);
  CHECK(decode.blockM() == 16);
  CHECK(decode.tileSize == 64);
  CHECK(decode.numWarps == 4);
  p.numTokens = 40;
  p.maxQueryLen = 32;  // 32 tokens x 4 heads = 128 rows
  auto prefill = ops::selectPagedAttentionVariant(p);
  CHECK(prefill.blockM() == 128);
  if (compiler::opDeviceFacts().warpgroupMma) {
    // wgmma: a warpgroup per 64 rows, 64-key tiles, Q in registers, producer
    // warps issuing the copies.
    CHECK(prefill.numWarps == 8);
    CHECK(prefill.tileSize == 64);
    CHECK_FALSE(prefill.qInShared);
    CHECK(prefill.warpSpecialize);
    // Bidirectional: 128-key tiles with Q in shared memory (in registers the
    // compute warps run out at 216).
    p.causal = false;
    auto bidirectional = ops::selectPagedAttentionVariant(p);
    CHECK(bidirectional.tileSize == 128);
    CHECK(bidirectional.qInShared);
    CHECK(bidirectional.warpSpecialize);
    // Per-sequence flags may make any row causal: 64-key tiles. They, fp8
    // queries and bounds checks keep the producers.
    p.causalFlags = 0x1000;
    CHECK(ops::selectPagedAttentionVariant(p).tileSize == 64);
    CHECK(ops::selectPagedAttentionVariant(p).warpSpecialize);
    p.causalFlags = 0;
    p.qScale = 0x2000;
    CHECK(ops::selectPagedAttentionVariant(p).warpSpecialize);
    CHECK(ops::selectPagedAttentionVariant(p).tileSize == 128);
    p.qScale = 0;
    p.checkBounds = true;
    CHECK(ops::selectPagedAttentionVariant(p).warpSpecialize);
    p.checkBounds = false;
    p.headSize = 192;  // DiffKV 192/128, bidirectional: producers, 64-key tiles
    p.valueHeadSize = 128;
    CHECK(ops::selectPagedAttentionVariant(p).warpSpecialize);
    CHECK(ops::selectPagedAttentionVariant(p).tileSize == 64);
    p.headSize = 256;  // unmeasured with producers
    CHECK_FALSE(ops::selectPagedAttentionVariant(p).warpSpecialize);
    p.headSize = 128;
    p.valueHeadSize = 0;
    p.causal = true;
  } else {
    CHECK_FALSE(prefill.warpSpecialize);
    CHECK(prefill.numWarps == 4);  // FlashAttention-2's 32 rows per warp, Q read from shared memory
    CHECK(prefill.qInShared);
  }
  p.headSize = 96;  // below 128 the 4-warp tiling wins on either tensor-core path
  CHECK(ops::selectPagedAttentionVariant(p).numWarps == 4);
  CHECK(ops::selectPagedAttentionVariant(p).qInShared);
  p.headSize = 64;  // except at 64 on wgmma: 8 warps on 64-key tiles, no producers
  auto narrowPrefill = ops::selectPagedAttentionVariant(p);
  CHECK(narrowPrefill.numWarps == (compiler::opDeviceFacts().warpgroupMma ? 8 : 4));
  CHECK(narrowPrefill.qInShared == !compiler::opDeviceFacts().warpgroupMma);
  CHECK_FALSE(narrowPrefill.warpSpecialize);
  p.headSize = 256;  // the accumulator of 32 rows would not fit in registers
  auto widePrefill = ops::selectPagedAttentionVariant(p);
  CHECK(widePrefill.numWarps == 8);
  CHECK_FALSE(widePrefill.qInShared);
  CHECK(widePrefill.tileSize == (compiler::opDeviceFacts().warpgroupMma ? 64 : 32));
  CHECK_FALSE(widePrefill.warpSpecialize);  // m64n256's accumulator does not fit the launch's registers
  p.headSize = 128;
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8PerTokenHead;  // K/V converted in registers: 8 warps
  auto quantizedPrefill = ops::selectPagedAttentionVariant(p);
  CHECK_FALSE(quantizedPrefill.warpSpecialize);
  CHECK(quantizedPrefill.blockM() == 128);
  CHECK(quantizedPrefill.numWarps == 8);
  CHECK_FALSE(quantizedPrefill.qInShared);
  // wgmma reads the dequantized tiles from one store per tile: 64 keys halve
  // the stores' barriers per key (at D ≤ 128).
  CHECK(quantizedPrefill.tileSize == (compiler::opDeviceFacts().warpgroupMma ? 64 : 32));
  // A per-tensor fp8 cache at D=128: producer warps cast its tiles on the way.
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  const compiler::UnifiedAttentionConfig fp8Prefill = ops::selectPagedAttentionVariant(p);
  CHECK(fp8Prefill.warpSpecialize == compiler::opDeviceFacts().warpgroupMma);
  CHECK(fp8Prefill.numWarps == 8);
  CHECK(fp8Prefill.tileSize == (compiler::opDeviceFacts().warpgroupMma ? 64 : 32));
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8PerTokenHead;
  p.headSize = 256;
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 32);
  p.headSize = 64;
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == (compiler::opDeviceFacts().warpgroupMma ? 64 : 32));
  p.kvCacheFormat = compiler::KvCacheFormat::Int4PerTokenHead;  // half-width groups: mma.sync
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 32);
  p.headSize = 128;
  p.kvCacheFormat = compiler::KvCacheFormat::Auto;
  p.maxQueryLen = 31;
  CHECK(ops::selectPagedAttentionVariant(p).blockM() == 16);
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 64);
  // Decode with heads above 128: 32-key tiles, except DiffKV (64).
  for (int headSize : {192, 256}) {
    p.headSize = headSize;
    CHECK(ops::selectPagedAttentionVariant(p).tileSize == 32);
  }
  p.headSize = 192;
  p.valueHeadSize = 128;
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 64);
  p.valueHeadSize = 0;
  p.headSize = 128;
  p.dtype = ScalarKind::F32;
  p.maxQueryLen = 1;
  // TF32 decode keeps vLLM's 32-key tile (the copy rate there, docs/perf-log.md
  // 2026-12-03); the precision reaches the kernel and its name.
  const compiler::UnifiedAttentionConfig tf32Decode = ops::selectPagedAttentionVariant(p);
  CHECK(tf32Decode.tileSize == 32);
  CHECK(tf32Decode.fp32Precision == compiler::Fp32Precision::Tf32);
  CHECK(tf32Decode.tensorCoreDots());
  p.fp32Precision = compiler::Fp32Precision::Ieee;
  // Exact f32 decode: FMA dots over one token's heads (4 rows at GQA 4, not
  // 16), 64-key tiles over 2 warps.
  const compiler::UnifiedAttentionConfig exactDecode = ops::selectPagedAttentionVariant(p);
  CHECK_FALSE(exactDecode.tensorCoreDots());
  CHECK(exactDecode.blockM() == 4);
  CHECK(exactDecode.tileSize == 64);
  CHECK(exactDecode.numWarps == 2);
  CHECK(exactDecode.kernelName().find("_ieee") != std::string::npos);
  CHECK(tf32Decode.blockM() == 16);
  // Prefill: TF32 takes the 8-warp 128-row tiling, exact f32 32 spill-free rows
  // over 4 warps on 16-key tiles.
  p.maxQueryLen = 2048;
  const compiler::UnifiedAttentionConfig exactPrefill = ops::selectPagedAttentionVariant(p);
  CHECK(exactPrefill.blockM() == 32);
  CHECK(exactPrefill.numWarps == 4);
  CHECK(exactPrefill.tileSize == 16);
  p.fp32Precision = compiler::Fp32Precision::Tf32;
  const compiler::UnifiedAttentionConfig tf32Prefill = ops::selectPagedAttentionVariant(p);
  CHECK(tf32Prefill.blockM() == 128);
  CHECK(tf32Prefill.numWarps == 8);
  // Above D=128 the 128-row tiling spills kilobytes: 64 rows on TF32, 32 exact,
  // over 8 warps on 16-key tiles.
  p.headSize = 256;
  const compiler::UnifiedAttentionConfig wideTf32Prefill = ops::selectPagedAttentionVariant(p);
  CHECK(wideTf32Prefill.blockM() == 64);
  CHECK(wideTf32Prefill.numWarps == 8);
  CHECK(wideTf32Prefill.tileSize == 16);
  p.fp32Precision = compiler::Fp32Precision::Ieee;
  CHECK(ops::selectPagedAttentionVariant(p).blockM() == 32);
  p.fp32Precision = compiler::Fp32Precision::Tf32;
  p.headSize = 128;
  p.maxQueryLen = 1;
  // Quantized caches: raw tiles go by cp.async, so wide tiles pay (measured,
  // compiler/ops/PagedAttentionOp.cpp), for every format up to head size 128.
  p.dtype = ScalarKind::BF16;
  for (auto format : {compiler::KvCacheFormat::Fp8E4M3, compiler::KvCacheFormat::Int8PerTokenHead,
                      compiler::KvCacheFormat::Fp8PerTokenHead, compiler::KvCacheFormat::Int4PerTokenHead}) {
    p.kvCacheFormat = format;
    CHECK(ops::selectPagedAttentionVariant(p).tileSize == 128);
    CHECK(ops::selectPagedAttentionVariant(p).asyncCopy);
  }
  p.headSize = 256;
  CHECK(ops::selectPagedAttentionVariant(p).tileSize == 64);
}

TEST_CASE("paged attention op: batches of equal lengths run at two CTAs per SM", "[op]") {
  auto p = fullDecodeBatch(4096);
  CHECK(ops::pagedAttentionCtasPerSm(p) == 0);  // minSeqLen unknown
  p.minSeqLen = 4096;
  CHECK(ops::pagedAttentionCtasPerSm(p) == 2);  // (64 + 64 / 4) x 8 = 640 CTAs over 132 SMs
  p.minSeqLen = 3687;                           // within 90% of the longest
  CHECK(ops::pagedAttentionCtasPerSm(p) == 2);
  p.minSeqLen = 3686;
  CHECK(ops::pagedAttentionCtasPerSm(p) == 0);  // mixed lengths keep every CTA that fits
  p.minSeqLen = 4096;
  // The cap gains at head sizes 96 and 128 only; smaller CTAs (64) and wider
  // heads (192, 256) keep every CTA that fits.
  for (int headSize : {64, 96, 192, 256}) {
    p.headSize = headSize;
    INFO("head_size " << headSize);
    CHECK(ops::pagedAttentionCtasPerSm(p) == (headSize == 96 ? 2 : 0));
  }
  p.headSize = 128;
  p.numSms = 320;
  CHECK(ops::pagedAttentionCtasPerSm(p) == 0);  // at most two per SM anyway
  p.numSms = 132;
  p.numTokens = 64 * 40;
  p.maxQueryLen = 40;
  CHECK(ops::pagedAttentionCtasPerSm(p) == 0);  // prefill tiling
  p.minSeqLen = 5000;
  CHECK(
      validationMessage(p) ==
      "paged attention: min_seq_len (5000) must be 0 (unknown) or at most max_seq_len (4096), which must then be given");
  p.minSeqLen = -1;
  CHECK(validationMessage(p).find("min_seq_len (-1)") != std::string::npos);
  // H200: 228 KiB per SM, 1 KiB reserved per block, 227 KiB per block. 68 KiB
  // (three fit) becomes 76928 bytes: 3 x (76928 + 1024) > 233472 >= 2 x that.
  CHECK(ops::sharedBytesForCtasPerSm(69632, 2, 233472, 1024, 232448) == 76928);
  CHECK(3 * (76928 + 1024) > 233472);
  CHECK(ops::sharedBytesForCtasPerSm(98304, 2, 233472, 1024, 232448) == 98304);  // already two at most
  CHECK(ops::sharedBytesForCtasPerSm(69632, 0, 233472, 1024, 232448) == 69632);  // no cap
  CHECK(ops::sharedBytesForCtasPerSm(69632, 2, 0, 0, 0) == 69632);               // no GPU information
  CHECK(ops::sharedBytesForCtasPerSm(1024, 1, 233472, 1024, 100000) == 1024);    // would exceed the block limit
}

TEST_CASE("paged attention op: launches of at most one CTA per SM take 128-key tiles", "[op]") {
  // 16 decodes of 512 keys: 128 programs on 132 SMs, 2D.
  auto p = fullDecodeBatch(512);
  p.numSeqs = p.numTokens = 16;
  p.minSeqLen = 512;
  auto plan = ops::pagedAttentionPlan(p);
  CHECK(plan.config.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal_t128");
  CHECK(plan.split.numSegments == 1);
  p.numSms = 100;  // more CTAs than SMs: 64-key tiles
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 64);
  p.numSms = 132;
  // One decode of 4096 keys: 8 segments of at least 512 keys, 64 CTAs.
  p.numSeqs = p.numTokens = 1;
  p.maxSeqLen = p.minSeqLen = 4096;
  plan = ops::pagedAttentionPlan(p);
  CHECK(plan.config.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t128");
  CHECK(plan.split.numSegments == 8);
  CHECK(plan.split.segmentTiles == 4);
  // Without max_seq_len the fill rule's 33 segments are 264 CTAs: 64-key tiles.
  p.maxSeqLen = p.minSeqLen = 0;
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 64);
  p.maxSeqLen = p.minSeqLen = 4096;
  // Batch-invariant calls keep vLLM's tiling; quantized caches, MQA's 32-row
  // tiles and heads above 128 their own.
  p.batchInvariant = true;
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 64);
  p.batchInvariant = false;
  p.headSize = 256;
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 32);
  p.headSize = 128;
  p.numKvHeads = 1;
  p.kvStrideToken = 128;
  p.kvStrideKv = 16 * 128;
  p.kvStrideBlock = 2 * p.kvStrideKv;
  CHECK(ops::pagedAttentionPlan(p).config.blockM() == 32);
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 64);
  p = fullDecodeBatch(4096);
  p.numSeqs = p.numTokens = 1;
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  CHECK(ops::pagedAttentionPlan(p).config.tileSize == 128);
  p.kvCacheFormat = compiler::KvCacheFormat::Auto;
  p.numTokens = 40;  // a prefill: the 128-row tiling
  p.maxQueryLen = 40;
  CHECK(ops::pagedAttentionPlan(p).config.blockMRows == 128);
}

TEST_CASE("paged attention op: launches end on a full wave of the kernel's CTAs per SM", "[op]") {
  using ops::detail::fitPlanToWaves;
  using ops::detail::heuristicPagedAttentionPlan;
  constexpr int kShortestWaveSplit = ops::kWaveSplitMinMaxSeqLen;
  // 64 decodes, lengths unknown (no hints): 512 busy programs, 2D.
  auto p = fullDecodeBatch(0);
  auto plan = heuristicPagedAttentionPlan(p);
  REQUIRE(plan.split.numSegments == 1);
  REQUIRE(plan.ctasPerSm == 0);
  CHECK_FALSE(plan.config.deferRowSum);
  // Three per SM: 512 CTAs are 1.29 waves of 396; at two, 1.94 waves of 264.
  auto fitted = fitPlanToWaves(p, plan, 3);
  CHECK(fitted.residentCtasPerSm == 3);
  CHECK(plan.residentCtasPerSm == 0);
  CHECK(fitted.ctasPerSm == 2);
  CHECK(fitted.split.numSegments == 1);
  CHECK(fitted.config.deferRowSum);  // the capped launch keeps the per-column row sum
  CHECK(fitPlanToWaves(p, plan, 2).ctasPerSm == 0);  // 1.94 waves already
  CHECK(fitPlanToWaves(p, plan, 4).ctasPerSm == 0);  // 0.97 waves of 528
  CHECK(fitPlanToWaves(p, plan, 0).ctasPerSm == 0);  // nothing known
  // Only max_seq_len (vLLM's hint): evenness still unknown, long enough to
  // split: two segments of 32 tiles, 1024 CTAs (2.59 waves).
  p.maxSeqLen = 4096;
  fitted = fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3);
  CHECK(fitted.split.numSegments == 2);
  CHECK(fitted.split.segmentTiles == 32);
  CHECK(fitted.config.splitKv);
  CHECK(fitted.config.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t64_rowsum");
  CHECK(fitted.ctasPerSm == 0);
  p.runtimeScratch = false;  // nowhere to split into: capped
  fitted = fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3);
  CHECK(fitted.split.numSegments == 1);
  CHECK(fitted.ctasPerSm == 2);
  p.workspace = 0xB0000;  // a workspace of the op's size for this batch: split
  p.workspaceBytes = ops::pagedAttentionWorkspaceBytes(64, 32, 128, 4096).value();
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).split.numSegments == 2);
  p.workspace = p.workspaceBytes = 0;
  p.runtimeScratch = true;
  p.maxSeqLen = kShortestWaveSplit - 1;  // too short for a split's second kernel: capped
  fitted = fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3);
  CHECK(fitted.split.numSegments == 1);
  CHECK(fitted.ctasPerSm == 2);
  p.maxSeqLen = 4096;
  p.minSeqLen = 1;  // uneven: the uneven-length rule's split, as it was
  plan = heuristicPagedAttentionPlan(p);
  fitted = fitPlanToWaves(p, plan, 3);
  CHECK(fitted.split.numSegments == plan.split.numSegments);
  CHECK(fitted.split.segmentTiles == plan.split.segmentTiles);
  CHECK(fitted.ctasPerSm == 0);
  p.minSeqLen = 4096;  // equal: ctasPerSmFor's cap, as it was
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).ctasPerSm == 2);
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).split.numSegments == 1);
  p.minSeqLen = 0;
  p.maxSeqLen = 0;
  p.maxSeqLen = 0;
  p.numSeqs = p.numTokens = 128;  // 1024 programs: 2.59 waves, the tail does not matter
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).ctasPerSm == 0);
  p.numSeqs = p.numTokens = 80;  // 640 programs: 1.62 waves at three, 2.42 at two: neither fits
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).ctasPerSm == 0);

  // 32 decodes: the fill rule's 2 segments per sequence (cut on the GPU) make
  // 512 CTAs, 1.29 waves at three per SM; 3 make 768, 1.94 waves.
  p.numSeqs = p.numTokens = 32;
  plan = heuristicPagedAttentionPlan(p);
  REQUIRE(plan.split.numSegments == 2);
  REQUIRE(plan.split.segmentTiles < 0);
  fitted = fitPlanToWaves(p, plan, 3);
  CHECK(fitted.split.numSegments == 3);
  CHECK(fitted.split.segmentTiles == plan.split.segmentTiles);
  CHECK(fitted.config.kernelName() == plan.config.kernelName());  // same kernel: a launch parameter
  CHECK(fitted.ctasPerSm == 0);
  CHECK(fitPlanToWaves(p, plan, 4).split.numSegments == 2);  // 0.97 waves of 528
  // Lengths known and equal: fixed segments, resized: 64 tiles in 3 of 22.
  p.maxSeqLen = p.minSeqLen = 4096;
  plan = heuristicPagedAttentionPlan(p);
  REQUIRE(plan.split.numSegments == 2);
  fitted = fitPlanToWaves(p, plan, 3);
  CHECK(fitted.split.numSegments == 3);
  CHECK(fitted.split.segmentTiles == 22);
  p.maxSeqLen = p.minSeqLen = 1024;  // two segments of 512 keys at most
  plan = heuristicPagedAttentionPlan(p);
  REQUIRE(plan.split.numSegments == 2);
  CHECK(fitPlanToWaves(p, plan, 3).split.numSegments == 2);
  // A workspace with room for two segments only keeps two.
  p.maxSeqLen = p.minSeqLen = 4096;
  p.workspace = 0xB0000;
  p.workspaceBytes = 32ull * 32 * 2 * (128 + 2) * 4 + 64;
  plan = heuristicPagedAttentionPlan(p);
  REQUIRE(plan.split.numSegments == 2);
  CHECK(fitPlanToWaves(p, plan, 3).split.numSegments == 2);
  p.workspace = 0;
  p.workspaceBytes = 0;

  // MQA (32 query heads on one KV head, 32-row tiles at two CTAs per SM), 64
  // decodes without hints: the fill rule's 5 segments are 1.21 waves of 264,
  // 6 are 1.45, 4 are 0.97: one fewer.
  {
    auto mqa = fullDecodeBatch(0);
    mqa.numKvHeads = 1;
    mqa.kvStrideToken = 128;
    mqa.kvStrideKv = 16 * 128;
    mqa.kvStrideBlock = 2 * mqa.kvStrideKv;
    const auto mqaPlan = heuristicPagedAttentionPlan(mqa);
    REQUIRE(mqaPlan.config.blockM() == 32);
    REQUIRE(mqaPlan.split.numSegments == 5);
    CHECK(fitPlanToWaves(mqa, mqaPlan, 2).split.numSegments == 4);
    CHECK(fitPlanToWaves(mqa, mqaPlan, 3).split.numSegments == 5);  // 320 of 396 fit
  }

  // Tuned plans (measured), batch-invariant calls and prefill tilings stay.
  plan = heuristicPagedAttentionPlan(p);
  plan.origin = ops::PlanOrigin::Tuned;
  CHECK(fitPlanToWaves(p, plan, 3).split.numSegments == 2);
  p.batchInvariant = true;
  CHECK(fitPlanToWaves(p, heuristicPagedAttentionPlan(p), 3).split.numSegments ==
        heuristicPagedAttentionPlan(p).split.numSegments);
  p.batchInvariant = false;
  p.numTokens = 32 * 40;
  p.maxQueryLen = 40;
  plan = heuristicPagedAttentionPlan(p);
  fitted = fitPlanToWaves(p, plan, 3);
  CHECK(fitted.split.numSegments == plan.split.numSegments);
  CHECK(fitted.ctasPerSm == plan.ctasPerSm);
}

TEST_CASE("paged attention op: batches of uneven lengths split into segments of at most 3/8", "[op]") {
  auto p = fullDecodeBatch(8192);
  p.minSeqLen = 1;
  p.workspace = 0xB0000;
  p.workspaceBytes = ops::pagedAttentionWorkspaceBytes(64, 32, 128, 8192).value();
  auto plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 3);   // 128 tiles of 64 keys: 48 + 48 + 32
  CHECK(plan.segmentTiles == 48);
  const auto mixed = ops::selectPagedAttentionVariant(p);
  CHECK(mixed.splitKv);
  CHECK(mixed.kernelName() == "unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t64_rowsum");
  CHECK(validationMessage(p) == "ok");
  p.maxSeqLen = 5000;  // 79 tiles: 30 + 30 + 19
  plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 3);
  CHECK(plan.segmentTiles == 30);
  p.maxSeqLen = 3071;  // too short to be worth three launches' worth of segments
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.maxSeqLen = 8192;
  p.minSeqLen = 0;  // unknown: could be equal lengths, where splitting is slower
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.minSeqLen = 7373;  // within 90% of the longest: equal lengths
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.minSeqLen = 7372;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 3);
  p.workspaceBytes = 64ull * 32 * 2 * (128 + 2) * 4 + 64;  // room for two segments only
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.workspaceBytes = ops::pagedAttentionWorkspaceBytes(64, 32, 128, 8192).value();
  p.batchInvariant = true;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.batchInvariant = false;
  p.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;  // 128-key tiles: 24 + 24 + 16
  plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 3);
  CHECK(plan.segmentTiles == 24);
  CHECK(ops::selectPagedAttentionVariant(p).kernelName() ==
        "unified_attention_bf16_h32kv8_d128_bs16_causal_int8_per_token_head_f16dots_3d_t128");
  p.kvCacheFormat = compiler::KvCacheFormat::Auto;
  p.dtype = ScalarKind::F32;  // not measured: 2D
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.dtype = ScalarKind::BF16;
  p.slidingWindow = 1024;  // every sequence's work is at most the window: lengths do not matter
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
  p.slidingWindow = 0;
  p.numSeqs = p.numTokens = 32;  // 256 programs: the fill rule's 2 segments of 64 tiles, cut to 3/8
  plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 3);
  CHECK(plan.segmentTiles == 48);
  p.numSeqs = p.numTokens = 4;  // 32 programs: the fill rule's 9 segments are finer
  plan = ops::pagedAttentionSplitPlan(p);
  CHECK(plan.numSegments == 9);
  CHECK(plan.segmentTiles == 15);
  p.numSeqs = p.numTokens = 64;
  p.numTokens = 64 * 40;  // prefill tiling: never split
  p.maxQueryLen = 40;
  CHECK(ops::pagedAttentionSplitPlan(p).numSegments == 1);
}

TEST_CASE("paged attention op: the per-column row sum is kept where a third CTA per SM does not matter", "[op]") {
  auto p = fullDecodeBatch(8192);
  p.minSeqLen = 8192;
  CHECK(ops::selectPagedAttentionVariant(p).deferRowSum);  // equal lengths: two CTAs per SM anyway
  p.minSeqLen = 1;
  const auto mixed = ops::selectPagedAttentionVariant(p);
  CHECK_FALSE(mixed.deferRowSum);  // 640 CTAs of uneven work: the third CTA per SM balances it
  CHECK(mixed.kernelName().find("_rowsum") != std::string::npos);
  p.numSeqs = p.numTokens = 8;
  p.runtimeScratch = false;  // unsplit:
  CHECK(ops::selectPagedAttentionVariant(p).deferRowSum);  // fewer CTAs than two per SM
  p.runtimeScratch = true;   // split into 5 segments, 320 CTAs: the third CTA per SM balances them
  CHECK_FALSE(ops::selectPagedAttentionVariant(p).deferRowSum);
  p.numSeqs = p.numTokens = 64;
  p.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  CHECK(ops::selectPagedAttentionVariant(p).deferRowSum);  // 128-key fp8 tiles run two per SM anyway
  p.kvCacheFormat = compiler::KvCacheFormat::Auto;
  // MQA (32 query heads on one KV head): 32-row tiles, split; per-token-head
  // caches take 64-key tiles (128 spill next to 32 rows).
  ops::PagedAttentionParams mqa = p;
  mqa.numKvHeads = 1;
  mqa.kvStrideToken = 128;
  mqa.kvStrideKv = 16 * 128;
  mqa.kvStrideBlock = 2 * mqa.kvStrideKv;
  const auto mqaVariant = ops::selectPagedAttentionVariant(mqa);
  CHECK(mqaVariant.blockM() == 32);
  CHECK(mqaVariant.splitKv);
  mqa.kvCacheFormat = compiler::KvCacheFormat::Int8PerTokenHead;
  CHECK(ops::selectPagedAttentionVariant(mqa).tileSize == 64);
  mqa.headSize = 256;  // wider rows: 32-key tiles (64 spill 476 bytes next to 32 rows)
  CHECK(ops::selectPagedAttentionVariant(mqa).tileSize == 32);
  mqa.numKvHeads = 2;  // 16 query heads per KV head: one m-tile
  CHECK(ops::selectPagedAttentionVariant(mqa).tileSize == 64);
  mqa.headSize = 128;  // 128-key tiles
  CHECK(ops::selectPagedAttentionVariant(mqa).tileSize == 128);
  // 0: device 0's SM count; without a device, no GPU information and the default.
  p.numSms = 0;
  const bool atZero = ops::selectPagedAttentionVariant(p).deferRowSum;
  if (compiler::opDeviceFacts().smCount > 0) {
    p.numSms = compiler::opDeviceFacts().smCount;
    CHECK(atZero == ops::selectPagedAttentionVariant(p).deferRowSum);
  } else {
    CHECK(atZero);
  }
}

namespace {

// Context lengths 0..maxContext spread over n sequences in a scrambled order.
std::vector<int> unevenLengths(int n, int maxContext) {
  std::vector<int> lengths(n);
  for (int i = 0; i < n; ++i) lengths[i] = static_cast<int>((int64_t{i} * 1543 + 211) % (maxContext + 1));
  lengths[n / 2] = maxContext;
  return lengths;
}

// 40 decodes of uneven lengths up to 4000 keys (the op splits them), every
// third token checked; and a prefill beside a chunk with context (the op's
// 128-row tiling, 2D).
compiler::BatchShape unevenDecodes() {
  compiler::BatchShape shape;
  shape.queryLens = std::vector<int>(40, 1);
  shape.contextLens = unevenLengths(40, 4000);
  shape.checkStride = 3;
  return shape;
}
compiler::BatchShape prefillAndChunk() {
  compiler::BatchShape shape;
  shape.queryLens = {100, 3};
  shape.contextLens = {0, 50};
  return shape;
}

// bench's op runner on `shape` (three timed calls), its float64 check passed.
validation::PagedAttentionOpRun runOpChecked(const compiler::UnifiedAttentionConfig& config,
                                           const compiler::BatchShape& shape) {
  validation::GpuRunOptions options;
  options.timedIterations = 3;
  auto run = validation::runPagedAttentionOpGpu(config, shape, options);
  if (!run) FAIL(run.diagnostic().str());
  INFO(run->kernelName << ": " << run->run.check.detail);
  CHECK(run->run.check.passed);
  return *run;
}

}  // namespace

TEST_CASE("paged attention op: launches on device buffers match the reference", "[gpu][op]") {
  if (!tests::gpuPresent()) return;
  // The caller owns the context, as an engine (or PyTorch) would: the op launches
  // in whatever context is current.
  REQUIRE(runtime::activatePrimaryContext(0).isOk());
  struct Case {
    ScalarKind dtype;
    bool causal;
    std::vector<int> queryLens, contextLens;
    compiler::KvCacheFormat format = compiler::KvCacheFormat::Auto;
    bool sinksAndLse = false;
    bool withWorkspace = false;  // split-KV where the plan says so
    bool lengthsHint = false;    // minSeqLen given: a uniform batch runs at two CTAs per SM
    bool runtimeScratch = false; // without a workspace: split-KV into the runtime's scratch
    bool noMaxSeqLen = false;    // no length hints: segments cut per sequence on the GPU
  } cases[] = {
      {ScalarKind::BF16, true, {1, 1, 1, 1, 1}, {300, 17, 1000, 0, 64}},      // decode: tile 64
      {ScalarKind::F16, false, {1, 40, 3, 77}, {50, 0, 130, 9}},              // prefill-like: 128 rows
      {ScalarKind::BF16, true, {129, 1, 33}, {0, 700, 250}},                  // chunked prefill + decode
      // Split-KV decode: 1024-key segments over contexts up to 5000.
      {ScalarKind::BF16, true, {1, 1, 1, 1}, {5000, 17, 2100, 1024}, compiler::KvCacheFormat::Auto, false, true},
      {ScalarKind::F16, true, {1, 1, 2}, {3000, 900, 4000}, compiler::KvCacheFormat::Int8PerTokenHead, true, true},
      {ScalarKind::BF16, true, {1, 3, 1}, {2500, 60, 7}, compiler::KvCacheFormat::Fp8E4M3, true, false},
      // fp8 prefill: on warpgroup-MMA devices the producers cast its tiles on the way.
      {ScalarKind::BF16, true, {200, 1, 77}, {0, 900, 300}, compiler::KvCacheFormat::Fp8E4M3, true, false},
      {ScalarKind::BF16, false, {150, 64}, {40, 0}, compiler::KvCacheFormat::Fp8E4M3},
      {ScalarKind::BF16, true, {1, 1}, {3333, 99}, compiler::KvCacheFormat::Int4PerTokenHead, false, true},
      // 96 equal decodes (768 CTAs): launched with the shared memory that caps them at two per SM.
      {ScalarKind::BF16, true, std::vector<int>(96, 1), std::vector<int>(96, 700), compiler::KvCacheFormat::Auto,
       false, false, true},
      // 40 decodes of uneven lengths up to 4000 (320 programs fill 132 SMs): the
      // mixed-length rule splits them into three segments of 24 tiles.
      {ScalarKind::BF16, true, std::vector<int>(40, 1), unevenLengths(40, 4000), compiler::KvCacheFormat::Auto, false,
       true, true},
      // Split-KV without a workspace: stream-ordered scratch the runtime allocates and frees.
      {ScalarKind::BF16, true, {1, 1, 1, 1}, {5000, 17, 2100, 1024}, compiler::KvCacheFormat::Auto, false, false, false,
       true},
      {ScalarKind::F16, true, {1, 1, 2}, {3000, 900, 4000}, compiler::KvCacheFormat::Int8PerTokenHead, true, false,
       false, true},
      // ... and without max_seq_len: each sequence cut evenly on the GPU.
      {ScalarKind::BF16, true, {1, 1, 1, 1}, {5000, 17, 2100, 1024}, compiler::KvCacheFormat::Auto, false, false, false,
       true, true},
      {ScalarKind::F16, true, {1, 1, 2}, {3000, 900, 4000}, compiler::KvCacheFormat::Fp8E4M3, true, false, false, true,
       true},
  };
  for (const auto& c : cases) {
    compiler::UnifiedAttentionConfig config;
    config.dtype = c.dtype;
    config.causal = c.causal;
    config.kvCacheFormat = c.format;
    config.sinks = c.sinksAndLse;
    config.outputLse = c.sinksAndLse;
    compiler::BatchShape shape;
    shape.queryLens = c.queryLens;
    shape.contextLens = c.contextLens;
    shape.seed = 11;
    INFO(shape.str());
    auto problem = validation::UnifiedAttentionProblem::create(config, shape);
    REQUIRE(problem.isOk());
    std::vector<runtime::DeviceBuffer> device;
    for (auto& buffer : (*problem)->buffers()) {
      auto d = runtime::DeviceBuffer::allocate(std::max<size_t>(buffer.bytes.size(), 16));
      REQUIRE(d.isOk());
      REQUIRE(d->copyFromHost(buffer.bytes.data(), buffer.bytes.size()).isOk());
      device.push_back(std::move(*d));
    }
    auto bufferIndex = [&](const std::string& label) {
      for (size_t i = 0; i < (*problem)->buffers().size(); ++i)
        if ((*problem)->buffers()[i].label == label) return i;
      FAIL("no buffer " << label);
      return size_t{0};
    };
    const auto& s = (*problem)->scalarArguments();
    REQUIRE(s.size() == (c.sinksAndLse ? 13u : 12u));  // scale, num_seqs, search steps, 9 strides, [lse stride]
    auto integer = [&](size_t i) { return std::get<int64_t>(s[i]); };
    ops::PagedAttentionParams p;
    p.dtype = c.dtype;
    p.numQueryHeads = config.numQueryHeads;
    p.numKvHeads = config.numKvHeads;
    p.headSize = config.headSize;
    p.blockSize = config.blockSize;
    p.causal = c.causal;
    p.numSeqs = static_cast<int>(c.queryLens.size());
    p.numTokens = std::accumulate(c.queryLens.begin(), c.queryLens.end(), int64_t{0});
    p.maxQueryLen = *std::max_element(c.queryLens.begin(), c.queryLens.end());
    p.scale = static_cast<float>(std::get<double>(s[0]));
    p.out = device[0].address();
    p.q = device[1].address();
    p.kvCache = device[2].address();
    p.blockTables = device[3].address();
    p.seqLens = device[4].address();
    p.cuSeqlensQ = device[5].address();
    p.qStrideToken = integer(3);
    p.qStrideHead = integer(4);
    p.oStrideToken = integer(5);
    p.oStrideHead = integer(6);
    p.blockTableStride = integer(7);
    p.kvStrideBlock = integer(8);
    p.kvStrideKv = integer(9);
    p.kvStrideToken = integer(10);
    p.kvStrideHead = integer(11);
    p.kvCacheFormat = c.format;
    p.maxSeqLen = 0;
    for (size_t i = 0; i < c.queryLens.size(); ++i)
      p.maxSeqLen = std::max(p.maxSeqLen, c.queryLens[i] + c.contextLens[i]);
    if (c.lengthsHint) {
      p.minSeqLen = p.maxSeqLen;
      for (size_t i = 0; i < c.queryLens.size(); ++i)
        p.minSeqLen = std::min(p.minSeqLen, c.queryLens[i] + c.contextLens[i]);
      const bool even = int64_t{p.minSeqLen} * 10 >= int64_t{p.maxSeqLen} * 9;
      // 768 CTAs > 2 per SM of any GPU here; uneven lengths keep every CTA that fits.
      CHECK(ops::pagedAttentionCtasPerSm(p) == (even ? ops::kUniformDecodeCtasPerSm : 0));
    }
    if (compiler::isPerTensorFp8(c.format)) {
      p.kScale = device[bufferIndex("k_scale")].address();
      p.vScale = device[bufferIndex("v_scale")].address();
    }
    if (c.sinksAndLse) {
      p.sinks = device[bufferIndex("sinks")].address();
      p.lse = device[bufferIndex("lse")].address();
      p.lseStrideHead = integer(12);
    }
    std::optional<runtime::DeviceBuffer> workspace;
    if (c.withWorkspace) {
      p.numSms = 132;  // the H200's, so the plan below does not depend on the test machine
      const uint64_t bytes = ops::pagedAttentionWorkspaceBytes(p.numTokens, p.numQueryHeads, p.headSize, p.maxSeqLen).value();
      REQUIRE(bytes > 0);
      auto w = runtime::DeviceBuffer::allocate(bytes);
      REQUIRE(w.isOk());
      workspace = std::move(*w);
      p.workspace = workspace->address();
      p.workspaceBytes = bytes;
      CHECK(ops::selectPagedAttentionVariant(p).splitKv);
    }
    p.runtimeScratch = c.runtimeScratch;
    if (c.noMaxSeqLen) p.maxSeqLen = p.minSeqLen = 0;
    if (c.runtimeScratch) {
      p.numSms = 132;
      CHECK(ops::selectPagedAttentionVariant(p).splitKv);
      CHECK((ops::pagedAttentionSplitPlan(p).segmentTiles < 0) == c.noMaxSeqLen);
    }
    INFO(ops::selectPagedAttentionVariant(p).kernelName());
    support::Status launched = ops::pagedAttention(p);
    INFO((launched ? std::string() : launched.diagnostic().str()));
    REQUIRE(launched.isOk());
    REQUIRE(runtime::synchronizeContext().isOk());
    std::vector<uint8_t> output((*problem)->buffers()[0].bytes.size());
    REQUIRE(device[0].copyToHost(output.data(), output.size()).isOk());
    std::vector<uint8_t> lse;
    if (c.sinksAndLse) {
      lse.resize((*problem)->buffers()[bufferIndex("lse")].bytes.size());
      REQUIRE(device[bufferIndex("lse")].copyToHost(lse.data(), lse.size()).isOk());
    }
    validation::AttentionRunResult result;
    (*problem)->check(output, result, c.sinksAndLse ? &lse : nullptr);
    INFO("max abs error " << result.maxAbsError << " (tolerance " << result.tolerance << "); " << result.detail);
    CHECK(result.passed);
  }
}

TEST_CASE("paged attention op: bench's op runner launches what the op picks and checks it", "[gpu][op]") {
  if (!tests::gpuPresent()) return;
  compiler::UnifiedAttentionConfig config;  // bf16, 32/8 heads, D=128, block 16
  config.tileSize = 32;                     // ignored: the op picks the tiling
  const validation::PagedAttentionOpRun split = runOpChecked(config, unevenDecodes());
  CHECK(split.kernelName == "unified_attention_bf16_h32kv8_d128_bs16_causal_3d_t64_rowsum");
  CHECK(split.numSegments >= 3);  // the uneven-length rule (more where a larger GPU's fill rule asks)
  CHECK(split.run.medianMs > 0);
  CHECK(split.run.copyGbPerSecond > 0);
  CHECK(split.firstCallMs > 0);

  config.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;  // k_scale / v_scale found by their labels
  const validation::PagedAttentionOpRun run = runOpChecked(config, prefillAndChunk());
  CHECK(run.numSegments == 1);
  CHECK(run.kernelName.find("_m128") != std::string::npos);
}

TEST_CASE("paged attention op: plain calls fitted to the kernel's waves match the reference", "[gpu][op]") {
  if (!tests::gpuPresent()) return;
  compiler::UnifiedAttentionConfig config;  // bf16, 32/8 heads, D=128, block 16
  validation::GpuRunOptions options;
  options.timedIterations = 3;
  options.opCall = validation::GpuRunOptions::OpCall::Plain;  // no hints, no workspace
  for (const int sequences : {32, 64}) {
    compiler::BatchShape shape;
    shape.queryLens = std::vector<int>(static_cast<size_t>(sequences), 1);
    shape.contextLens = std::vector<int>(static_cast<size_t>(sequences), 1500);
    shape.checkStride = 5;
    auto run = validation::runPagedAttentionOpGpu(config, shape, options);
    if (!run) FAIL(run.diagnostic().str());
    INFO(sequences << " sequences: " << run->kernelName << ", " << run->plan << ": " << run->run.check.detail);
    CHECK(run->run.check.passed);
    CHECK(!run->tunedPlan);
    // 256 programs split on the GPU (the fill rule's segments, or the wave
    // fit's); 512 fill the SMs in 2D, capped or not.
    if (sequences == 32) CHECK(run->numSegments >= 2);
    if (sequences == 64) CHECK(run->numSegments == 1);
  }
}

TEST_CASE("paged attention op: separate per-token-head scales through the op", "[gpu][op][sepscales]") {
  if (!tests::gpuPresent()) return;
  compiler::UnifiedAttentionConfig config;  // bf16, 32/8 heads, D=128, block 16
  config.kvScaleLayout = compiler::KvScaleLayout::Separate;  // scale tensors found by their labels
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Int8PerTokenHead,
                                         compiler::KvCacheFormat::Fp8PerTokenHead,
                                         compiler::KvCacheFormat::Int4PerTokenHead}) {
    config.kvCacheFormat = format;
    const validation::PagedAttentionOpRun split = runOpChecked(config, unevenDecodes());
    CHECK(split.kernelName.find("_sepscales") != std::string::npos);
    CHECK(split.numSegments >= 2);
    const validation::PagedAttentionOpRun prefill = runOpChecked(config, prefillAndChunk());
    CHECK(prefill.kernelName.find("_m128") != std::string::npos);
  }
}

TEST_CASE("paged attention op: fp8 output and sqrt-ALiBi, 2D and split, through the op", "[gpu][op]") {
  if (!tests::gpuPresent()) return;
  compiler::UnifiedAttentionConfig config;  // bf16, 32/8 heads, D=128, block 16
  config.outputFp8 = true;                  // output_scale found by its label
  config.alibi = true;
  config.alibiSqrt = true;
  config.sinks = true;
  config.outputLse = true;
  // Uneven decode lengths: the op splits them, and stage 2 writes the fp8 output.
  const validation::PagedAttentionOpRun split = runOpChecked(config, unevenDecodes());
  CHECK(split.numSegments >= 3);
  CHECK(split.kernelName.find("_alibisqrt_sinks_outfp8_lse_3d") != std::string::npos);
  const validation::PagedAttentionOpRun run = runOpChecked(config, prefillAndChunk());
  CHECK(run.numSegments == 1);
  CHECK(run.kernelName.find("_m128") != std::string::npos);
}

TEST_CASE("paged attention op: chunked local attention, ranges and qq_bias on the GPU", "[gpu][op][masks]") {
  if (!tests::gpuPresent()) return;
  // bf16, 32/8 heads, D=128, block 16, through the op's own tilings: split
  // decode, the prefill tiling (warpgroup MMAs on sm_90a) and short chunks.
  compiler::UnifiedAttentionConfig config;
  config.attentionChunkSize = 1024;
  config.mmPrefixRanges = 3;
  config.qqBias = true;
  const validation::PagedAttentionOpRun split = runOpChecked(config, unevenDecodes());
  CHECK(split.kernelName.find("_chunk1024_mm3_qqbias") != std::string::npos);
  for (bool causal : {true, false}) {
    config.causal = causal;
    config.attentionChunkSize = 48;
    const validation::PagedAttentionOpRun run = runOpChecked(config, prefillAndChunk());
    CHECK(run.kernelName.find("_m128") != std::string::npos);
  }
  // Speculative decoding: a tree of 6 queries after each context, biased.
  compiler::BatchShape speculative;
  speculative.queryLens = std::vector<int>(24, 6);
  speculative.contextLens = unevenLengths(24, 3000);
  config = compiler::UnifiedAttentionConfig{};
  config.qqBias = true;
  runOpChecked(config, speculative);
}

TEST_CASE("paged attention op: head-major (HND) caches through the strides on the GPU", "[gpu][op][hnd]") {
  if (!tests::gpuPresent()) return;
  // vLLM's HND layout, [num_blocks, 2, Hkv, block_size, D]: only the strides
  // differ (kv_stride_token = D, kv_stride_head = block_size · D). Split decode,
  // the prefill tiling (warpgroup MMAs on sm_90a), an fp8 cache and a window.
  compiler::BatchShape decode = unevenDecodes();
  decode.headMajorCache = true;
  compiler::BatchShape prefill = prefillAndChunk();
  prefill.headMajorCache = true;
  compiler::UnifiedAttentionConfig config;
  const validation::PagedAttentionOpRun split = runOpChecked(config, decode);
  CHECK(split.numSegments > 1);
  CHECK(runOpChecked(config, prefill).kernelName.find("_m128") != std::string::npos);
  config.kvCacheFormat = compiler::KvCacheFormat::Fp8E4M3;
  runOpChecked(config, decode);
  runOpChecked(config, prefill);
  config = compiler::UnifiedAttentionConfig{};
  config.slidingWindow = 100;
  config.blockSize = 32;
  runOpChecked(config, decode);
  runOpChecked(config, prefill);
}

TEST_CASE("paged attention op: warm-up lists every kernel the planner picks", "[op]") {
  // Batches of every size class and hint combination: the kernels they get
  // (and the reduce kernel of a split) are all in the warm-up list.
  for (compiler::KvCacheFormat format : {compiler::KvCacheFormat::Auto, compiler::KvCacheFormat::Fp8E4M3,
                                         compiler::KvCacheFormat::Int8PerTokenHead}) {
    for (const auto& [queryHeads, kvHeads, headSize] : {std::tuple{32, 8, 128}, std::tuple{8, 8, 64},
                                                        std::tuple{64, 4, 256}, std::tuple{16, 1, 96}}) {
      ops::PagedAttentionParams p;
      p.numQueryHeads = queryHeads;
      p.numKvHeads = kvHeads;
      p.headSize = headSize;
      p.blockSize = 16;
      p.kvCacheFormat = format;
      p.numSms = 132;
      auto listed = ops::pagedAttentionWarmupKernels(p);
      REQUIRE(listed.isOk());
      std::set<std::string> names;
      for (const ops::WarmupKernel& kernel : *listed) CHECK(names.insert(kernel.name).second);  // no duplicates
      std::mt19937 random(static_cast<unsigned>(queryHeads * 31 + headSize));
      for (int trial = 0; trial < 400; ++trial) {
        ops::PagedAttentionParams call = p;
        call.numSeqs = 1 + static_cast<int>(random() % 400);
        call.maxQueryLen = trial % 3 == 0 ? 1 + static_cast<int>(random() % 3000) : 1 + static_cast<int>(random() % 8);
        call.numTokens = int64_t{call.numSeqs} * call.maxQueryLen;
        call.maxSeqLen = trial % 4 == 0 ? 0 : call.maxQueryLen + static_cast<int>(random() % 100000);
        call.minSeqLen = call.maxSeqLen == 0 || trial % 2 ? 0 : 1 + static_cast<int>(random() % call.maxSeqLen);
        const compiler::UnifiedAttentionConfig chosen = ops::selectPagedAttentionVariant(call);
        INFO(chosen.kernelName() << " for " << call.numSeqs << " sequences, max query " << call.maxQueryLen
                                 << ", seq_len " << call.minSeqLen << ".." << call.maxSeqLen);
        CHECK(names.count(chosen.kernelName()) == 1);
        if (chosen.splitKv) CHECK(names.count(compiler::reduceSegmentsFor(chosen).kernelName()) == 1);
      }
    }
  }
  ops::PagedAttentionParams bad;
  bad.numQueryHeads = 32;
  bad.numKvHeads = 8;
  bad.headSize = 1100;
  bad.blockSize = 16;
  auto refused = ops::pagedAttentionWarmupKernels(bad);
  REQUIRE_FALSE(refused.isOk());
  CHECK(refused.diagnostic().message.find("head_size (1100)") != std::string::npos);
}
