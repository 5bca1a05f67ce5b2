// The C API (include/attnjit/attnjit.h) over the C++ facade
// (include/attnjit/jit.hpp). Every entry point catches everything: no C++
// exception crosses into C. Errors go to a thread-local message.
#include <cstdio>
#include <cstring>
#include <exception>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "attnjit/attnjit.h"
#include "attnjit/jit.hpp"
#include "compiler/ops/PagedAttentionPlanning.h"
#include "runtime/Stream.h"

struct attnjit_jit {
  attnjit::Jit jit;
};

struct attnjit_kernel {
  attnjit::Kernel kernel;
  std::vector<std::string> parameterTypes;  // kept for attnjit_param_info.type
  std::mutex ptxMutex;
  std::string ptx;  // kept for attnjit_kernel_ptx
};

namespace support = attnjit::support;

namespace {

using attnjit::Status;

thread_local std::string lastErrorMessage;

attnjit_status fail(attnjit_status code, std::string message) {
  lastErrorMessage = std::move(message);
  return code;
}

// "file:line:col: error: message" where the error has a place (a spec line, the
// driver), else the bare message: "<builder>" would mean nothing to a C caller.
attnjit_status fail(attnjit_status code, const support::Status& status) {
  const attnjit::Diagnostic& d = status.diagnostic();
  return fail(code, d.loc.file.empty() ? d.message : d.str());
}

attnjit_status succeed() {
  lastErrorMessage.clear();
  return ATTNJIT_OK;
}

// A step that needs the GPU failed: for want of a driver, or in the driver.
attnjit_status gpuFailure(const support::Status& status) {
  return fail(attnjit::runtime::driverAvailable() ? ATTNJIT_ERROR_CUDA : ATTNJIT_ERROR_NO_DRIVER, status);
}

template <typename Body>
attnjit_status guarded(Body&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(ATTNJIT_ERROR_INTERNAL, "out of host memory");
  } catch (const std::exception& e) {
    return fail(ATTNJIT_ERROR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(ATTNJIT_ERROR_INTERNAL, "internal error: unknown exception");
  }
}

attnjit_status nullArgument(const char* function, const char* argument) {
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + argument + " is NULL");
}

// Reads a caller's input struct: its first struct_size bytes over `*out`, which
// holds the defaults (fields appended after the caller's header was written).
template <typename T>
attnjit_status readVersioned(const char* function, const char* argument, const T* in, T* out) {
  if (in == nullptr) return nullArgument(function, argument);
  const size_t size = in->struct_size;
  if (size < sizeof(size_t))
    return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + argument +
                                                    "->struct_size is " + std::to_string(size) +
                                                    "; initialize the struct with its _init function");
  if (size > sizeof(T))
    return fail(ATTNJIT_ERROR_INVALID_ARGUMENT,
                std::string(function) + ": " + argument + "->struct_size is " + std::to_string(size) +
                    ", larger than this library's " + std::to_string(sizeof(T)) +
                    ": the program was built against a newer attnjit.h than the library it loaded");
  std::memcpy(static_cast<void*>(out), in, size);
  out->struct_size = sizeof(T);
  return ATTNJIT_OK;
}

// Writes `value` into a caller's output struct, as much of it as its struct_size holds.
template <typename T>
attnjit_status writeVersioned(const char* function, const char* argument, const T& value, T* out) {
  if (out == nullptr) return nullArgument(function, argument);
  const size_t size = out->struct_size;
  if (size < sizeof(size_t))
    return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": " + argument +
                                                    "->struct_size is " + std::to_string(size) +
                                                    "; set it to sizeof the struct");
  T copy = value;
  copy.struct_size = size < sizeof(T) ? size : sizeof(T);
  std::memcpy(static_cast<void*>(out), &copy, copy.struct_size);
  return ATTNJIT_OK;
}

// A C caller may store any int in an enum field; reading such a value as the C++
// enum type is undefined (UBSan: "not a valid value for type"), so enum fields
// are read as the int they are stored as, then compared with the enumerators.
template <typename Enum>
int enumValue(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "C enums are int-sized on every supported ABI");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

attnjit_status toScalarKind(const char* function, int dtype, attnjit::ir::ScalarKind* out) {
  switch (dtype) {
    case ATTNJIT_DTYPE_F32: *out = attnjit::ir::ScalarKind::F32; return ATTNJIT_OK;
    case ATTNJIT_DTYPE_F16: *out = attnjit::ir::ScalarKind::F16; return ATTNJIT_OK;
    case ATTNJIT_DTYPE_BF16: *out = attnjit::ir::ScalarKind::BF16; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": dtype " +
                                                  std::to_string(dtype) +
                                                  " is not an attnjit_dtype (F32, F16, BF16)");
}

attnjit_status toCacheFormat(const char* function, int format, attnjit::compiler::KvCacheFormat* out) {
  using attnjit::compiler::KvCacheFormat;
  switch (format) {
    case ATTNJIT_KV_CACHE_AUTO: *out = KvCacheFormat::Auto; return ATTNJIT_OK;
    case ATTNJIT_KV_CACHE_FP8_E4M3: *out = KvCacheFormat::Fp8E4M3; return ATTNJIT_OK;
    case ATTNJIT_KV_CACHE_FP8_E5M2: *out = KvCacheFormat::Fp8E5M2; return ATTNJIT_OK;
    case ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD: *out = KvCacheFormat::Int8PerTokenHead; return ATTNJIT_OK;
    case ATTNJIT_KV_CACHE_FP8_PER_TOKEN_HEAD: *out = KvCacheFormat::Fp8PerTokenHead; return ATTNJIT_OK;
    case ATTNJIT_KV_CACHE_INT4_PER_TOKEN_HEAD: *out = KvCacheFormat::Int4PerTokenHead; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": cache_format " +
                                                  std::to_string(format) +
                                                  " is not an attnjit_kv_cache_format");
}

attnjit_status toFp32Precision(const char* function, int precision, attnjit::compiler::Fp32Precision* out) {
  using attnjit::compiler::Fp32Precision;
  switch (precision) {
    case ATTNJIT_FP32_TF32: *out = Fp32Precision::Tf32; return ATTNJIT_OK;
    case ATTNJIT_FP32_IEEE: *out = Fp32Precision::Ieee; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": fp32_precision " +
                                                  std::to_string(precision) +
                                                  " is not an attnjit_fp32_precision (TF32, IEEE)");
}

attnjit_status toScaleLayout(const char* function, int layout, attnjit::compiler::KvScaleLayout* out) {
  switch (layout) {
    case ATTNJIT_KV_SCALES_INLINE: *out = attnjit::compiler::KvScaleLayout::Inline; return ATTNJIT_OK;
    case ATTNJIT_KV_SCALES_SEPARATE: *out = attnjit::compiler::KvScaleLayout::Separate; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": kv_scale_layout " + std::to_string(layout) +
                                                  " is not an attnjit_kv_scale_layout (INLINE, SEPARATE)");
}

// The scale layout and the separate scale tensors, the same fields in the
// paged-attention and the cache-write structs (the layout's member named by each op).
template <typename CParams, typename Params>
attnjit_status toSeparateScales(const char* function, const CParams& c, attnjit::compiler::KvScaleLayout* layout,
                                Params* p) {
  if (attnjit_status s = toScaleLayout(function, enumValue(c.kv_scale_layout), layout); s != ATTNJIT_OK) return s;
  p->kScaleCache = c.k_scale_cache;
  p->vScaleCache = c.v_scale_cache;
  p->scaleStrideBlock = c.scale_stride_block;
  p->scaleStrideToken = c.scale_stride_token;
  p->scaleStrideHead = c.scale_stride_head;
  return ATTNJIT_OK;
}

attnjit_status toPlanTuning(const char* function, int tuning, attnjit::ops::PlanTuning* out) {
  using attnjit::ops::PlanTuning;
  switch (tuning) {
    case ATTNJIT_PLAN_TUNING_ENVIRONMENT: *out = PlanTuning::FromEnvironment; return ATTNJIT_OK;
    case ATTNJIT_PLAN_TUNING_OFF: *out = PlanTuning::Off; return ATTNJIT_OK;
    case ATTNJIT_PLAN_TUNING_RECORDED: *out = PlanTuning::Recorded; return ATTNJIT_OK;
    case ATTNJIT_PLAN_TUNING_FIRST_USE: *out = PlanTuning::OnFirstUse; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": plan_tuning " + std::to_string(tuning) +
                                                  " is not an attnjit_plan_tuning (ENVIRONMENT, OFF, RECORDED, "
                                                  "FIRST_USE)");
}

// ---- C structs → op parameters: one line per field ----

attnjit_status toParams(const char* function, const attnjit_paged_attention_params& c,
                        attnjit::PagedAttentionParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  p->numQueryHeads = c.num_query_heads;
  p->numKvHeads = c.num_kv_heads;
  p->headSize = c.head_size;
  p->blockSize = c.block_size;
  p->causal = c.causal != 0;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.kv_cache_format), &p->kvCacheFormat); s != ATTNJIT_OK)
    return s;
  p->slidingWindow = c.sliding_window;
  p->softcap = c.softcap;
  p->batchInvariant = c.batch_invariant != 0;
  p->numSeqs = c.num_seqs;
  p->numTokens = c.num_tokens;
  p->maxQueryLen = c.max_query_len;
  p->maxSeqLen = c.max_seq_len;
  p->scale = c.scale;
  p->out = c.out;
  p->q = c.q;
  p->kvCache = c.kv_cache;
  p->blockTables = c.block_tables;
  p->seqLens = c.seq_lens;
  p->cuSeqlensQ = c.cu_seqlens_q;
  p->kScale = c.k_scale;
  p->vScale = c.v_scale;
  p->alibiSlopes = c.alibi_slopes;
  p->sinks = c.sinks;
  p->lse = c.lse;
  p->lseStrideHead = c.lse_stride_head;
  p->workspace = c.workspace;
  p->workspaceBytes = c.workspace_bytes;
  p->qStrideToken = c.q_stride_token;
  p->qStrideHead = c.q_stride_head;
  p->oStrideToken = c.o_stride_token;
  p->oStrideHead = c.o_stride_head;
  p->blockTableStride = c.block_table_stride;
  p->kvStrideBlock = c.kv_stride_block;
  p->kvStrideKv = c.kv_stride_kv;
  p->kvStrideToken = c.kv_stride_token;
  p->kvStrideHead = c.kv_stride_head;
  p->stream = c.stream;
  p->causalFlags = c.causal_flags;
  p->numSms = c.num_sms;
  p->valueHeadSize = c.value_head_size;
  p->checkBounds = c.check_bounds != 0;
  p->numBlocks = c.num_blocks;
  p->minSeqLen = c.min_seq_len;
  p->alibiSqrt = c.alibi_sqrt != 0;
  p->outputScale = c.output_scale;
  p->slidingWindowRight = c.sliding_window_right;
  p->qScale = c.q_scale;
  p->runtimeScratch = c.no_runtime_scratch == 0;
  p->attentionChunkSize = c.attention_chunk_size;
  p->mmPrefixRange = c.mm_prefix_range;
  p->mmPrefixRanges = c.mm_prefix_ranges;
  p->qqBias = c.qq_bias;
  p->qqBiasStride = c.qq_bias_stride;
  if (attnjit_status s = toFp32Precision(function, enumValue(c.fp32_precision), &p->fp32Precision); s != ATTNJIT_OK)
    return s;
  if (attnjit_status s = toPlanTuning(function, enumValue(c.plan_tuning), &p->tuning); s != ATTNJIT_OK) return s;
  return toSeparateScales(function, c, &p->kvScaleLayout, p);
}

attnjit_status toParams(const char* function, const attnjit_cache_write_params& c, attnjit::CacheWriteParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.cache_format), &p->cacheFormat); s != ATTNJIT_OK) return s;
  p->numKvHeads = c.num_kv_heads;
  p->headSize = c.head_size;
  p->blockSize = c.block_size;
  p->numTokens = c.num_tokens;
  p->key = c.key;
  p->value = c.value;
  p->kvCache = c.kv_cache;
  p->slotMapping = c.slot_mapping;
  p->kScale = c.k_scale;
  p->vScale = c.v_scale;
  p->keyStrideToken = c.key_stride_token;
  p->keyStrideHead = c.key_stride_head;
  p->valueStrideToken = c.value_stride_token;
  p->valueStrideHead = c.value_stride_head;
  p->kvStrideBlock = c.kv_stride_block;
  p->kvStrideKv = c.kv_stride_kv;
  p->kvStrideToken = c.kv_stride_token;
  p->kvStrideHead = c.kv_stride_head;
  p->stream = c.stream;
  p->valueHeadSize = c.value_head_size;
  p->checkBounds = c.check_bounds != 0;
  p->numBlocks = c.num_blocks;
  p->perHeadScales = c.per_head_scales != 0;
  if (attnjit_status s = toSeparateScales(function, c, &p->scaleLayout, p); s != ATTNJIT_OK) return s;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char* function, const attnjit_merge_attn_states_params& c,
                        attnjit::MergeAttnStatesParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  p->numHeads = c.num_heads;
  p->headSize = c.head_size;
  p->numTokens = c.num_tokens;
  p->output = c.output;
  p->outputLse = c.output_lse;
  p->prefixOutput = c.prefix_output;
  p->prefixLse = c.prefix_lse;
  p->suffixOutput = c.suffix_output;
  p->suffixLse = c.suffix_lse;
  p->outputStrideToken = c.output_stride_token;
  p->outputStrideHead = c.output_stride_head;
  p->prefixStrideToken = c.prefix_stride_token;
  p->prefixStrideHead = c.prefix_stride_head;
  p->suffixStrideToken = c.suffix_stride_token;
  p->suffixStrideHead = c.suffix_stride_head;
  p->stream = c.stream;
  p->outputScale = c.output_scale;
  p->prefillTokensWithContext = c.prefill_tokens_with_context;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char* function, const attnjit_merge_partials_params& c,
                        attnjit::MergePartialsParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  p->numHeads = c.num_heads;
  p->headSize = c.head_size;
  p->numPartials = c.num_partials;
  p->numTokens = c.num_tokens;
  p->output = c.output;
  p->outputLse = c.output_lse;
  p->partialOutputs = c.partial_outputs;
  p->partialLses = c.partial_lses;
  p->outputStrideToken = c.output_stride_token;
  p->outputStrideHead = c.output_stride_head;
  p->partialStridePartial = c.partial_stride_partial;
  p->partialStrideToken = c.partial_stride_token;
  p->partialStrideHead = c.partial_stride_head;
  p->lseStridePartial = c.lse_stride_partial;
  p->stream = c.stream;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char* function, const attnjit_mla_cache_write_params& c,
                        attnjit::MlaCacheWriteParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.cache_format), &p->cacheFormat); s != ATTNJIT_OK) return s;
  p->kvLoraRank = c.kv_lora_rank;
  p->ropeDim = c.rope_dim;
  p->blockSize = c.block_size;
  p->numTokens = c.num_tokens;
  p->kvC = c.kv_c;
  p->kPe = c.k_pe;
  p->kvCache = c.kv_cache;
  p->slotMapping = c.slot_mapping;
  p->scale = c.scale;
  p->kvCStrideToken = c.kv_c_stride_token;
  p->kPeStrideToken = c.k_pe_stride_token;
  p->cacheStrideBlock = c.cache_stride_block;
  p->cacheStrideToken = c.cache_stride_token;
  p->stream = c.stream;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char* function, const attnjit_gather_cache_params& c, attnjit::GatherCacheParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.cache_format), &p->cacheFormat); s != ATTNJIT_OK) return s;
  p->entrySize = c.entry_size;
  p->blockSize = c.block_size;
  p->numSeqs = c.num_seqs;
  p->numTokens = c.num_tokens;
  p->dst = c.dst;
  p->cache = c.cache;
  p->blockTable = c.block_table;
  p->cuSeqLens = c.cu_seq_lens;
  p->seqStarts = c.seq_starts;
  p->scale = c.scale;
  p->dstStrideToken = c.dst_stride_token;
  p->blockTableStride = c.block_table_stride;
  p->cacheStrideBlock = c.cache_stride_block;
  p->cacheStrideToken = c.cache_stride_token;
  p->stream = c.stream;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char*, const attnjit_swap_blocks_params& c, attnjit::SwapBlocksParams* p) {
  p->blockBytes = c.block_bytes;
  p->srcBlockStride = c.src_block_stride;
  p->dstBlockStride = c.dst_block_stride;
  p->srcNumBlocks = c.src_num_blocks;
  p->dstNumBlocks = c.dst_num_blocks;
  p->src = c.src;
  p->dst = c.dst;
  p->blockMapping = c.block_mapping;
  p->numPairs = c.num_pairs;
  p->stream = c.stream;
  return ATTNJIT_OK;
}

attnjit_status toParams(const char* function, const attnjit_convert_cache_params& c, attnjit::ConvertCacheParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.cache_format), &p->cacheFormat); s != ATTNJIT_OK) return s;
  p->toFp8 = c.to_fp8 != 0;
  p->numElements = c.num_elements;
  p->src = c.src;
  p->dst = c.dst;
  p->scale = c.scale;
  p->stream = c.stream;
  return ATTNJIT_OK;
}

attnjit_status toSplitRule(const char* function, int rule, attnjit::MlaSplitRule* out) {
  switch (rule) {
    case ATTNJIT_MLA_SPLIT_BALANCED: *out = attnjit::MlaSplitRule::Balanced; return ATTNJIT_OK;
    case ATTNJIT_MLA_SPLIT_VLLM: *out = attnjit::MlaSplitRule::Vllm; return ATTNJIT_OK;
  }
  return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": split_rule " + std::to_string(rule) +
                                                  " is not an attnjit_mla_split_rule (BALANCED, VLLM)");
}

attnjit_status toParams(const char* function, const attnjit_mla_decode_params& c, attnjit::MlaDecodeParams* p) {
  if (attnjit_status s = toScalarKind(function, enumValue(c.dtype), &p->dtype); s != ATTNJIT_OK) return s;
  if (attnjit_status s = toCacheFormat(function, enumValue(c.kv_cache_format), &p->kvCacheFormat); s != ATTNJIT_OK)
    return s;
  if (attnjit_status s = toSplitRule(function, enumValue(c.split_rule), &p->splitRule); s != ATTNJIT_OK) return s;
  p->kvLoraRank = c.kv_lora_rank;
  p->ropeDim = c.rope_dim;
  p->numHeads = c.num_heads;
  p->blockSize = c.block_size;
  p->batchInvariant = c.batch_invariant != 0;
  p->numSeqs = c.num_seqs;
  p->maxSeqLen = c.max_seq_len;
  p->sumSeqLens = c.sum_seq_lens;
  p->numSms = c.num_sms;
  p->scale = c.scale;
  p->out = c.out;
  p->q = c.q;
  p->kvCache = c.kv_cache;
  p->blockTables = c.block_tables;
  p->seqLens = c.seq_lens;
  p->kvScale = c.kv_scale;
  p->lse = c.lse;
  p->lseStrideBatch = c.lse_stride_batch;
  p->lseStrideHead = c.lse_stride_head;
  p->workspace = c.workspace;
  p->workspaceBytes = c.workspace_bytes;
  p->qStrideBatch = c.q_stride_batch;
  p->qStrideHead = c.q_stride_head;
  p->oStrideBatch = c.o_stride_batch;
  p->oStrideHead = c.o_stride_head;
  p->blockTableStride = c.block_table_stride;
  p->kvStrideBlock = c.kv_stride_block;
  p->kvStrideToken = c.kv_stride_token;
  p->stream = c.stream;
  p->runtimeScratch = c.no_runtime_scratch == 0;
  if (attnjit_status s = toFp32Precision(function, enumValue(c.fp32_precision), &p->fp32Precision); s != ATTNJIT_OK)
    return s;
  return ATTNJIT_OK;
}

// An op call: read the struct, convert, validate (ATTNJIT_ERROR_INVALID_ARGUMENT),
// then run unless `validateOnly` (a failure there needs the GPU).
template <typename CParams, typename Params>
attnjit_status runOp(const char* function, attnjit_jit* jit, const CParams* cParams, CParams defaults,
                     support::Status (attnjit::Jit::*validate)(const Params&) const,
                     support::Status (attnjit::Jit::*run)(const Params&), bool validateOnly) {
  return guarded([&] {
    if (jit == nullptr) return nullArgument(function, "jit");
    if (attnjit_status s = readVersioned(function, "params", cParams, &defaults); s != ATTNJIT_OK) return s;
    Params params;
    if (attnjit_status s = toParams(function, defaults, &params); s != ATTNJIT_OK) return s;
    if (support::Status s = (jit->jit.*validate)(params); !s) return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, s);
    if (validateOnly) return succeed();
    if (support::Status s = (jit->jit.*run)(params); !s) return gpuFailure(s);
    return succeed();
  });
}

attnjit_status makeKernel(attnjit::Expected<attnjit::Kernel> kernel, attnjit_kernel** out) {
  if (!kernel) return fail(ATTNJIT_ERROR_SPEC, kernel.status());
  auto* handle = new attnjit_kernel{std::move(*kernel), {}, {}, {}};
  for (const attnjit::KernelParameter& p : handle->kernel.parameters()) handle->parameterTypes.push_back(p.type.str());
  *out = handle;
  return succeed();
}

}  // namespace

extern "C" {

const char* attnjit_last_error_message(void) { return lastErrorMessage.c_str(); }

const char* attnjit_status_name(attnjit_status status) {
  switch (status) {
    case ATTNJIT_OK: return "ok";
    case ATTNJIT_ERROR_INVALID_ARGUMENT: return "invalid-argument";
    case ATTNJIT_ERROR_SPEC: return "spec";
    case ATTNJIT_ERROR_COMPILE: return "compile";
    case ATTNJIT_ERROR_NO_DRIVER: return "no-driver";
    case ATTNJIT_ERROR_CUDA: return "cuda";
    case ATTNJIT_ERROR_INTERNAL: return "internal";
  }
  return "unknown";
}

attnjit_status attnjit_driver_status(void) {
  return guarded([] {
    if (support::Status s = attnjit::runtime::driverStatus(); !s) return fail(ATTNJIT_ERROR_NO_DRIVER, s);
    auto count = attnjit::runtime::deviceCount();
    if (!count) return fail(ATTNJIT_ERROR_NO_DRIVER, count.status());
    if (*count == 0) return fail(ATTNJIT_ERROR_NO_DRIVER, "the CUDA driver reports no GPU");
    return succeed();
  });
}

void attnjit_jit_options_init(attnjit_jit_options* options) {
  if (options == nullptr) return;
  *options = attnjit_jit_options{};
  options->struct_size = sizeof *options;
}

attnjit_status attnjit_jit_create(const attnjit_jit_options* options, attnjit_jit** jit) {
  return guarded([&] {
    if (jit == nullptr) return nullArgument("attnjit_jit_create", "jit");
    *jit = nullptr;
    attnjit_jit_options c;
    attnjit_jit_options_init(&c);
    if (options != nullptr)
      if (attnjit_status s = readVersioned("attnjit_jit_create", "options", options, &c); s != ATTNJIT_OK)
        return s;
    attnjit::JitOptions cpp;
    cpp.device = c.device;
    cpp.cacheDirectory = c.cache_dir != nullptr ? c.cache_dir : "";
    cpp.bypassCache = c.bypass_cache != 0;
    cpp.target = c.target != nullptr ? c.target : "";
    auto created = attnjit::Jit::create(cpp);
    if (!created) return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, created.status());
    *jit = new attnjit_jit{std::move(*created)};
    return succeed();
  });
}

void attnjit_jit_destroy(attnjit_jit* jit) { delete jit; }

const char* attnjit_jit_target(const attnjit_jit* jit) {
  return jit != nullptr ? jit->jit.target().c_str() : "";
}

attnjit_status attnjit_kernel_from_spec_text(attnjit_jit* jit, const char* yaml, const char* variant,
                                             attnjit_kernel** kernel) {
  return guarded([&] {
    const char* function = "attnjit_kernel_from_spec_text";
    if (jit == nullptr) return nullArgument(function, "jit");
    if (yaml == nullptr) return nullArgument(function, "yaml");
    if (kernel == nullptr) return nullArgument(function, "kernel");
    *kernel = nullptr;
    return makeKernel(jit->jit.kernelFromSpecText(yaml, variant != nullptr ? variant : ""), kernel);
  });
}

attnjit_status attnjit_kernel_from_spec_file(attnjit_jit* jit, const char* path, const char* variant,
                                             attnjit_kernel** kernel) {
  return guarded([&] {
    const char* function = "attnjit_kernel_from_spec_file";
    if (jit == nullptr) return nullArgument(function, "jit");
    if (path == nullptr) return nullArgument(function, "path");
    if (kernel == nullptr) return nullArgument(function, "kernel");
    *kernel = nullptr;
    return makeKernel(jit->jit.kernelFromSpecFile(path, variant != nullptr ? variant : ""), kernel);
  });
}

void attnjit_kernel_destroy(attnjit_kernel* kernel) { delete kernel; }

const char* attnjit_kernel_name(const attnjit_kernel* kernel) {
  return kernel != nullptr ? kernel->kernel.name().c_str() : "";
}

attnjit_status attnjit_kernel_num_params(const attnjit_kernel* kernel, size_t* count) {
  return guarded([&] {
    if (kernel == nullptr) return nullArgument("attnjit_kernel_num_params", "kernel");
    if (count == nullptr) return nullArgument("attnjit_kernel_num_params", "count");
    *count = kernel->kernel.parameters().size();
    return succeed();
  });
}

attnjit_status attnjit_kernel_param(const attnjit_kernel* kernel, size_t index, attnjit_param_info* info) {
  return guarded([&] {
    const char* function = "attnjit_kernel_param";
    if (kernel == nullptr) return nullArgument(function, "kernel");
    const auto& parameters = kernel->kernel.parameters();
    if (index >= parameters.size())
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": index " + std::to_string(index) +
                                                      " is out of range; kernel '" + kernel->kernel.name() +
                                                      "' has " + std::to_string(parameters.size()) + " parameters");
    const attnjit::KernelParameter& p = parameters[index];
    attnjit_param_info value{};
    value.name = p.name.c_str();
    value.type = kernel->parameterTypes[index].c_str();
    value.kind = static_cast<attnjit_arg_kind>(p.kind());
    value.align_bytes = p.alignBytes;
    value.divisibility = p.divisibility;
    if (attnjit_status s = writeVersioned(function, "info", value, info); s != ATTNJIT_OK) return s;
    return succeed();
  });
}

attnjit_status attnjit_kernel_compile(attnjit_kernel* kernel) {
  return guarded([&] {
    if (kernel == nullptr) return nullArgument("attnjit_kernel_compile", "kernel");
    if (support::Status s = kernel->kernel.compile(); !s) return fail(ATTNJIT_ERROR_COMPILE, s);
    return succeed();
  });
}

attnjit_status attnjit_kernel_ptx(attnjit_kernel* kernel, const char** ptx) {
  return guarded([&] {
    if (kernel == nullptr) return nullArgument("attnjit_kernel_ptx", "kernel");
    if (ptx == nullptr) return nullArgument("attnjit_kernel_ptx", "ptx");
    std::lock_guard<std::mutex> lock(kernel->ptxMutex);
    if (kernel->ptx.empty()) {
      auto text = kernel->kernel.ptx();
      if (!text) return fail(ATTNJIT_ERROR_COMPILE, text.status());
      kernel->ptx = std::move(*text);
    }
    *ptx = kernel->ptx.c_str();
    return succeed();
  });
}

attnjit_status attnjit_kernel_load(attnjit_kernel* kernel) {
  return guarded([&] {
    if (kernel == nullptr) return nullArgument("attnjit_kernel_load", "kernel");
    if (support::Status s = kernel->kernel.load(); !s) return gpuFailure(s);
    return succeed();
  });
}

attnjit_status attnjit_kernel_launch(attnjit_kernel* kernel, attnjit_dim3 grid, const attnjit_arg* args,
                                     size_t num_args, void* stream) {
  return guarded([&] {
    const char* function = "attnjit_kernel_launch";
    if (kernel == nullptr) return nullArgument(function, "kernel");
    if (args == nullptr && num_args > 0) return nullArgument(function, "args");
    std::vector<attnjit::KernelArgument> arguments;
    arguments.reserve(num_args);
    for (size_t i = 0; i < num_args; ++i) {
      switch (args[i].kind) {
        case ATTNJIT_ARG_POINTER: arguments.push_back(attnjit::KernelArgument::devicePointer(args[i].pointer)); break;
        case ATTNJIT_ARG_INT: arguments.push_back(attnjit::KernelArgument::integerValue(args[i].integer)); break;
        case ATTNJIT_ARG_REAL: arguments.push_back(attnjit::KernelArgument::realValue(args[i].real)); break;
        default:
          return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": args[" + std::to_string(i) +
                                                          "].kind " + std::to_string(static_cast<int>(args[i].kind)) +
                                                          " is not an attnjit_arg_kind");
      }
    }
    const attnjit::GridDim dims{grid.x, grid.y, grid.z};
    if (support::Status s = kernel->kernel.checkLaunch(dims, arguments); !s)
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, s);
    if (support::Status s = kernel->kernel.launch(dims, arguments, stream); !s) return gpuFailure(s);
    return succeed();
  });
}

attnjit_status attnjit_kernel_stats(const attnjit_kernel* kernel, attnjit_compile_stats* stats) {
  return guarded([&] {
    const char* function = "attnjit_kernel_stats";
    if (kernel == nullptr) return nullArgument(function, "kernel");
    const attnjit::CompileStats s = kernel->kernel.stats();
    attnjit_compile_stats value{};
    std::snprintf(value.target, sizeof value.target, "%s", s.target.c_str());
    value.origin = static_cast<attnjit_kernel_origin>(s.origin);
    value.passes_ms = s.passesMs;
    value.llvm_lower_ms = s.llvmLowerMs;
    value.llvm_optimize_ms = s.llvmOptimizeMs;
    value.ptx_emit_ms = s.ptxEmitMs;
    value.load_ms = s.loadMs;
    value.threads = s.threads;
    value.dynamic_shared_bytes = s.dynamicSharedBytes;
    value.registers = s.registers;
    value.spill_bytes = s.spillBytes;
    value.static_shared_bytes = s.staticSharedBytes;
    if (attnjit_status st = writeVersioned(function, "stats", value, stats); st != ATTNJIT_OK) return st;
    return succeed();
  });
}

void attnjit_paged_attention_params_init(attnjit_paged_attention_params* params) {
  if (params == nullptr) return;
  *params = attnjit_paged_attention_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->causal = 1;
}

attnjit_status attnjit_paged_attention_workspace_bytes(int64_t max_num_tokens, int num_query_heads, int head_size,
                                                       int max_seq_len, uint64_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) return nullArgument("attnjit_paged_attention_workspace_bytes", "bytes");
    *bytes = 0;
    auto needed = attnjit::ops::pagedAttentionWorkspaceBytes(max_num_tokens, num_query_heads, head_size, max_seq_len);
    if (!needed) return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, needed.status());
    *bytes = *needed;
    return succeed();
  });
}

void attnjit_cache_write_params_init(attnjit_cache_write_params* params) {
  if (params == nullptr) return;
  *params = attnjit_cache_write_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->cache_format = ATTNJIT_KV_CACHE_AUTO;
}

void attnjit_merge_attn_states_params_init(attnjit_merge_attn_states_params* params) {
  if (params == nullptr) return;
  *params = attnjit_merge_attn_states_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->prefill_tokens_with_context = -1;
}

void attnjit_merge_partials_params_init(attnjit_merge_partials_params* params) {
  if (params == nullptr) return;
  *params = attnjit_merge_partials_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
}

// The entry width defaults to the kernel's (compiler/kernels/GatherCache.h):
// DeepSeek's latent row, 512 + 64.
void attnjit_gather_cache_params_init(attnjit_gather_cache_params* params) {
  if (params == nullptr) return;
  *params = attnjit_gather_cache_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->cache_format = ATTNJIT_KV_CACHE_AUTO;
  params->entry_size = attnjit::compiler::GatherCacheConfig{}.entrySize;
}

void attnjit_swap_blocks_params_init(attnjit_swap_blocks_params* params) {
  if (params == nullptr) return;
  *params = attnjit_swap_blocks_params{};
  params->struct_size = sizeof *params;
}

void attnjit_convert_cache_params_init(attnjit_convert_cache_params* params) {
  if (params == nullptr) return;
  *params = attnjit_convert_cache_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->cache_format = ATTNJIT_KV_CACHE_FP8_E4M3;
  params->to_fp8 = 1;
  params->scale = 1.0f;
}

// The latent widths default to the kernel's (compiler/kernels/MlaCacheWrite.h):
// DeepSeek's L = 512, R = 64, as attnjit_mla_decode_params_init's.
void attnjit_mla_cache_write_params_init(attnjit_mla_cache_write_params* params) {
  if (params == nullptr) return;
  const attnjit::compiler::MlaCacheWriteConfig kernel;
  *params = attnjit_mla_cache_write_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->cache_format = ATTNJIT_KV_CACHE_AUTO;
  params->kv_lora_rank = kernel.kvLoraRank;
  params->rope_dim = kernel.ropeDim;
}

// The defaults are the C++ op's (compiler/ops/MlaDecodeOp.h): DeepSeek's L = 512, R = 64.
void attnjit_mla_decode_params_init(attnjit_mla_decode_params* params) {
  if (params == nullptr) return;
  const attnjit::MlaDecodeParams cpp;
  *params = attnjit_mla_decode_params{};
  params->struct_size = sizeof *params;
  params->dtype = ATTNJIT_DTYPE_BF16;
  params->kv_cache_format = ATTNJIT_KV_CACHE_AUTO;
  params->kv_lora_rank = cpp.kvLoraRank;
  params->rope_dim = cpp.ropeDim;
  params->split_rule = ATTNJIT_MLA_SPLIT_BALANCED;
}

// attnjit_<op>_validate and attnjit_<op> of every op: runOp over the struct with
// the defaults of attnjit_<op>_params_init, the checks alone or then the launch.
#define ATTNJIT_C_OP_ENTRY_POINTS(op, Method, ValidateMethod)                                                   \
  attnjit_status attnjit_##op##_validate(attnjit_jit* jit, const attnjit_##op##_params* params) {              \
    attnjit_##op##_params defaults;                                                                              \
    attnjit_##op##_params_init(&defaults);                                                                       \
    return runOp("attnjit_" #op "_validate", jit, params, defaults, &attnjit::Jit::ValidateMethod,              \
                 &attnjit::Jit::Method, true);                                                                   \
  }                                                                                                              \
  attnjit_status attnjit_##op(attnjit_jit* jit, const attnjit_##op##_params* params) {                         \
    attnjit_##op##_params defaults;                                                                              \
    attnjit_##op##_params_init(&defaults);                                                                       \
    return runOp("attnjit_" #op, jit, params, defaults, &attnjit::Jit::ValidateMethod, &attnjit::Jit::Method,   \
                 false);                                                                                         \
  }
ATTNJIT_C_OP_ENTRY_POINTS(paged_attention, pagedAttention, validatePagedAttention)
ATTNJIT_C_OP_ENTRY_POINTS(cache_write, cacheWrite, validateCacheWrite)
ATTNJIT_C_OP_ENTRY_POINTS(merge_attn_states, mergeAttnStates, validateMergeAttnStates)
ATTNJIT_C_OP_ENTRY_POINTS(merge_partials, mergePartials, validateMergePartials)
ATTNJIT_C_OP_ENTRY_POINTS(mla_cache_write, mlaCacheWrite, validateMlaCacheWrite)
ATTNJIT_C_OP_ENTRY_POINTS(gather_cache, gatherCache, validateGatherCache)
ATTNJIT_C_OP_ENTRY_POINTS(convert_cache, convertCache, validateConvertCache)
ATTNJIT_C_OP_ENTRY_POINTS(swap_blocks, swapBlocks, validateSwapBlocks)
ATTNJIT_C_OP_ENTRY_POINTS(mla_decode, mlaDecode, validateMlaDecode)
#undef ATTNJIT_C_OP_ENTRY_POINTS

attnjit_status attnjit_paged_attention_warmup(attnjit_jit* jit, const attnjit_paged_attention_params* params,
                                              int threads, int* kernels_ready) {
  return guarded([&] {
    constexpr const char* function = "attnjit_paged_attention_warmup";
    if (kernels_ready != nullptr) *kernels_ready = 0;
    if (jit == nullptr) return nullArgument(function, "jit");
    attnjit_paged_attention_params defaults;
    attnjit_paged_attention_params_init(&defaults);
    if (attnjit_status s = readVersioned(function, "params", params, &defaults); s != ATTNJIT_OK) return s;
    attnjit::PagedAttentionParams cpp;
    if (attnjit_status s = toParams(function, defaults, &cpp); s != ATTNJIT_OK) return s;
    if (auto listed = attnjit::ops::pagedAttentionWarmupKernels(cpp); !listed)
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, listed.status());
    if (threads < 0)
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, std::string(function) + ": threads (" + std::to_string(threads) +
                                                      ") must be 0 (every core) or positive");
    auto ready = jit->jit.warmupPagedAttention(cpp, threads);
    if (!ready) return gpuFailure(ready.status());
    if (kernels_ready != nullptr) *kernels_ready = *ready;
    return succeed();
  });
}

attnjit_status attnjit_paged_attention_tune(attnjit_jit* jit, const attnjit_paged_attention_params* params,
                                            double* rule_ms, double* tuned_ms) {
  return guarded([&] {
    constexpr const char* function = "attnjit_paged_attention_tune";
    if (rule_ms != nullptr) *rule_ms = 0;
    if (tuned_ms != nullptr) *tuned_ms = 0;
    if (jit == nullptr) return nullArgument(function, "jit");
    attnjit_paged_attention_params defaults;
    attnjit_paged_attention_params_init(&defaults);
    if (attnjit_status s = readVersioned(function, "params", params, &defaults); s != ATTNJIT_OK) return s;
    attnjit::PagedAttentionParams cpp;
    if (attnjit_status s = toParams(function, defaults, &cpp); s != ATTNJIT_OK) return s;
    if (support::Status s = jit->jit.validatePagedAttention(cpp); !s) return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, s);
    if (!attnjit::ops::detail::pagedAttentionTuningBucket(cpp))
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": this call always takes the op's rules (it has no max_seq_len, or is "
                                          "batch-invariant or bounds-checked)");
    if (auto capturing = attnjit::runtime::streamIsCapturing(cpp.stream); !capturing) {
      return gpuFailure(capturing.status());
    } else if (*capturing) {
      return fail(ATTNJIT_ERROR_INVALID_ARGUMENT,
                  std::string(function) + ": the stream is capturing a CUDA graph; tune outside the capture");
    }
    auto report = jit->jit.tunePagedAttention(cpp);
    if (!report) return gpuFailure(report.status());
    if (rule_ms != nullptr) *rule_ms = report->heuristic.medianMs;
    if (tuned_ms != nullptr) *tuned_ms = report->chosen.medianMs;
    return succeed();
  });
}

attnjit_status attnjit_mla_decode_workspace_bytes(int max_num_seqs, int num_heads, int kv_lora_rank, int max_seq_len,
                                                  uint64_t* bytes) {
  return guarded([&] {
    if (bytes == nullptr) return nullArgument("attnjit_mla_decode_workspace_bytes", "bytes");
    *bytes = 0;
    auto needed = attnjit::ops::mlaDecodeWorkspaceBytes(max_num_seqs, num_heads, kv_lora_rank, max_seq_len);
    if (!needed) return fail(ATTNJIT_ERROR_INVALID_ARGUMENT, needed.status());
    *bytes = *needed;
    return succeed();
  });
}

}  // extern "C"
