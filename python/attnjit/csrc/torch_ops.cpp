// torch.ops.attnjit.paged_attention and torch.ops.attnjit.cache_write in C++: the
// operators an engine calls once per layer, registered with the dispatcher
// (a CUDA kernel and a Meta kernel for torch.compile's fake tensors) so that a
// call costs the dispatcher, the argument checks and the C API call, without the
// Python function of attnjit/ops.py. The checks and their messages are that
// function's; attnjit/_torch_extension.py builds this file on first use and hands
// it the C API's entry points (the library Python already loaded).
#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <tuple>

#include "attnjit/attnjit.h"

namespace {

// Messages are assembled here into one std::string (std::to_string for numbers)
// and handed to TORCH_CHECK whole. TORCH_CHECK's own formatting, which streams
// numbers and shapes through std::ostringstream, crashed this extension with
// SIGSEGV under torch 2.11 on the GPU machine, on exactly the messages that
// held a number; strings alone went through.
std::string text(const char* value) { return value; }
std::string text(const std::string& value) { return value; }
std::string text(int64_t value) { return std::to_string(value); }
std::string text(int value) { return std::to_string(value); }
std::string text(const c10::Device& device) { return device.str(); }
std::string text(at::IntArrayRef values) {
  std::string joined = "(";
  for (size_t i = 0; i < values.size(); ++i) joined += (i ? ", " : "") + std::to_string(values[i]);
  return joined + (values.size() == 1 ? ",)" : ")");
}
template <typename... Parts>
std::string message(const Parts&... parts) {
  std::string joined;
  ((joined += text(parts)), ...);
  return joined;
}
#define CHECK_ARGUMENT(condition, ...) TORCH_CHECK(condition, message(__VA_ARGS__))

// The C API, resolved by the Python package (attnjit._library) and passed in.
struct EntryPoints {
  attnjit_jit* jit = nullptr;
  void (*pagedAttentionInit)(attnjit_paged_attention_params*) = nullptr;
  attnjit_status (*pagedAttention)(attnjit_jit*, const attnjit_paged_attention_params*) = nullptr;
  void (*cacheWriteInit)(attnjit_cache_write_params*) = nullptr;
  attnjit_status (*cacheWrite)(attnjit_jit*, const attnjit_cache_write_params*) = nullptr;
  const char* (*lastErrorMessage)() = nullptr;
};
EntryPoints entry;

void setEntryPoints(int64_t jit, int64_t pagedAttentionInit, int64_t pagedAttention, int64_t cacheWriteInit,
                    int64_t cacheWrite, int64_t lastErrorMessage) {
  entry.jit = reinterpret_cast<attnjit_jit*>(jit);
  entry.pagedAttentionInit = reinterpret_cast<decltype(entry.pagedAttentionInit)>(pagedAttentionInit);
  entry.pagedAttention = reinterpret_cast<decltype(entry.pagedAttention)>(pagedAttention);
  entry.cacheWriteInit = reinterpret_cast<decltype(entry.cacheWriteInit)>(cacheWriteInit);
  entry.cacheWrite = reinterpret_cast<decltype(entry.cacheWrite)>(cacheWrite);
  entry.lastErrorMessage = reinterpret_cast<decltype(entry.lastErrorMessage)>(lastErrorMessage);
}

std::string shapeText(const at::Tensor& t) { return text(t.sizes()); }

// torch's Python spelling, as attnjit/ops.py's messages print dtypes.
std::string dtypeName(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "torch.float32";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kDouble: return "torch.float64";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    case at::kFloat8_e4m3fn: return "torch.float8_e4m3fn";
    case at::kFloat8_e5m2: return "torch.float8_e5m2";
    default: return std::string("torch.") + c10::toString(type);
  }
}

void checkTensor(const char* name, const at::Tensor& t, int64_t ndim, std::optional<at::ScalarType> dtype = {},
                 const at::Tensor* sameDevice = nullptr, bool unitLastStride = true) {
  CHECK_ARGUMENT(t.dim() == ndim, name, " must have ", ndim, " dimensions, got shape ", shapeText(t));
  CHECK_ARGUMENT(!dtype || t.scalar_type() == *dtype, name, " has dtype ", dtypeName(t.scalar_type()), "; expected ",
                 dtypeName(*dtype));
  CHECK_ARGUMENT(t.is_cuda(), name, " is on ", t.device(), "; attnjit ops take CUDA tensors");
  CHECK_ARGUMENT(!sameDevice || t.device() == sameDevice->device(), name, " is on ", t.device(),
                 ", the other tensors on ", sameDevice->device());
  CHECK_ARGUMENT(!unitLastStride || t.numel() == 0 || t.stride(-1) == 1, name,
                 " must have unit stride in its last dimension, got strides ", t.strides());
}

void checkShape(const char* name, const at::Tensor& t, at::IntArrayRef expected) {
  CHECK_ARGUMENT(t.sizes().equals(expected), name, " has shape ", shapeText(t), "; expected ", expected);
}

attnjit_dtype floatDtype(const char* name, const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat: return ATTNJIT_DTYPE_F32;
    case at::kHalf: return ATTNJIT_DTYPE_F16;
    case at::kBFloat16: return ATTNJIT_DTYPE_BF16;
    default: break;
  }
  CHECK_ARGUMENT(false, name, " has dtype ", dtypeName(t.scalar_type()),
                 "; attnjit takes float32, float16 or bfloat16");
  return ATTNJIT_DTYPE_F32;  // not reached: CHECK_ARGUMENT(false) throws
}

attnjit_kv_cache_format cacheFormat(const char* argument, const std::string& name) {
  if (name == "auto") return ATTNJIT_KV_CACHE_AUTO;
  if (name == "fp8" || name == "fp8_e4m3") return ATTNJIT_KV_CACHE_FP8_E4M3;
  if (name == "fp8_e5m2") return ATTNJIT_KV_CACHE_FP8_E5M2;
  if (name == "int8_per_token_head") return ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD;
  if (name == "fp8_per_token_head") return ATTNJIT_KV_CACHE_FP8_PER_TOKEN_HEAD;
  if (name == "int4_per_token_head") return ATTNJIT_KV_CACHE_INT4_PER_TOKEN_HEAD;
  CHECK_ARGUMENT(false, argument, " '", name, "' is not one of auto, fp8, fp8_e4m3, fp8_e5m2, ",
                 "int8_per_token_head, fp8_per_token_head, int4_per_token_head");
  return ATTNJIT_KV_CACHE_AUTO;  // not reached
}

attnjit_fp32_precision fp32Precision(const std::string& name) {
  if (name == "tf32") return ATTNJIT_FP32_TF32;
  if (name == "ieee") return ATTNJIT_FP32_IEEE;
  CHECK_ARGUMENT(false, "fp32_precision '", name, "' is not one of tf32, ieee");
  return ATTNJIT_FP32_TF32;  // not reached
}

attnjit_plan_tuning planTuning(const std::string& name) {
  if (name == "environment") return ATTNJIT_PLAN_TUNING_ENVIRONMENT;
  if (name == "off") return ATTNJIT_PLAN_TUNING_OFF;
  if (name == "recorded") return ATTNJIT_PLAN_TUNING_RECORDED;
  if (name == "first-use") return ATTNJIT_PLAN_TUNING_FIRST_USE;
  CHECK_ARGUMENT(false, "plan_tuning '", name, "' is not one of environment, off, recorded, first-use");
  return ATTNJIT_PLAN_TUNING_ENVIRONMENT;  // not reached
}

// Elements of one (token, head) K or V row: D, then the inline f32 scale of the
// per-token-head formats (4 bytes; int4 packs two values per byte).
// Separate scales: the per-token-head rows hold values only.
int64_t rowElements(attnjit_kv_cache_format format, int64_t headSize, bool separateScales = false) {
  const int64_t scaleBytes = separateScales ? 0 : 4;
  switch (format) {
    case ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD:
    case ATTNJIT_KV_CACHE_FP8_PER_TOKEN_HEAD: return headSize + scaleBytes;
    case ATTNJIT_KV_CACHE_INT4_PER_TOKEN_HEAD: return headSize / 2 + scaleBytes;
    default: return headSize;
  }
}

struct CacheLayout {
  int64_t numBlocks = 0, blockSize = 0, heads = 0;
  int64_t strideBlock = 0, strideKv = 0, strideToken = 0, strideHead = 0;
};

// The two layouts of attnjit/ops.py's _paged_cache_layout: (num_blocks, 2,
// block_size, Hkv, row) for equal head sizes, vLLM's packed (num_blocks,
// block_size, Hkv, K row + V row) for any.
CacheLayout pagedCacheLayout(const at::Tensor& cache, const at::Tensor& device, at::ScalarType dtype,
                             const char* formatName, attnjit_kv_cache_format format, const std::string& formatText,
                             int64_t headSize, int64_t valueHeadSize, bool separateScales = false) {
  const int64_t keyRow = rowElements(format, headSize, separateScales),
                valueRow = rowElements(format, valueHeadSize, separateScales);
  const std::string packed = "(num_blocks, block_size, num_kv_heads, " + std::to_string(keyRow) + " + " +
                             std::to_string(valueRow) + ")";
  CHECK_ARGUMENT(cache.dim() == 4 || cache.dim() == 5, "kv_cache must have 5 dimensions (num_blocks, 2, block_size, ",
                 "num_kv_heads, ", keyRow, ") or 4 (the packed ", packed, "), got shape ", shapeText(cache));
  checkTensor("kv_cache", cache, cache.dim(), {}, &device);
  CHECK_ARGUMENT(format != ATTNJIT_KV_CACHE_AUTO || cache.scalar_type() == dtype, "kv_cache has dtype ",
                 dtypeName(cache.scalar_type()), "; ", formatName, " 'auto' stores ", dtypeName(dtype));
  CHECK_ARGUMENT(format == ATTNJIT_KV_CACHE_AUTO || cache.element_size() == 1, "kv_cache has dtype ",
                 dtypeName(cache.scalar_type()), "; ", formatName, " '", formatText,
                 "' stores one-byte elements (uint8, int8 or float8)");
  CacheLayout layout;
  if (cache.dim() == 5) {
    CHECK_ARGUMENT(valueHeadSize == headSize, "kv_cache has shape ", shapeText(cache), "; a value head size (",
                   valueHeadSize, ") other than the key head size (", headSize, ") (DiffKV) needs vLLM's packed cache ",
                   packed);
    CHECK_ARGUMENT(cache.size(1) == 2 && cache.size(4) == keyRow, "kv_cache has shape ", shapeText(cache),
                   "; expected (num_blocks, 2, block_size, num_kv_heads, ", keyRow, ")");
    layout = {cache.size(0), cache.size(2), cache.size(3), cache.stride(0), cache.stride(1), cache.stride(2),
              cache.stride(3)};
  } else {
    CHECK_ARGUMENT(cache.size(3) == keyRow + valueRow, "kv_cache has shape ", shapeText(cache),
                   "; the packed layout for key head size ", headSize, " and value head size ", valueHeadSize, " is ",
                   packed);
    // V starts right after the K part of the same (token, head) row.
    layout = {cache.size(0), cache.size(1), cache.size(2), cache.stride(0), keyRow, cache.stride(1), cache.stride(2)};
  }
  return layout;
}

int narrow(const char* name, int64_t value) {
  CHECK_ARGUMENT(value >= INT32_MIN && value <= INT32_MAX, name, " (", value, ") does not fit in 32 bits");
  return static_cast<int>(value);
}

// The cache's shape and strides into either op's C struct (same field names).
template <typename Params>
void setCacheFields(Params& p, const CacheLayout& cache) {
  p.num_blocks = narrow("num_blocks", cache.numBlocks);
  p.block_size = narrow("block_size", cache.blockSize);
  p.num_kv_heads = narrow("num_kv_heads", cache.heads);
  p.kv_stride_block = cache.strideBlock;
  p.kv_stride_kv = cache.strideKv;
  p.kv_stride_token = cache.strideToken;
  p.kv_stride_head = cache.strideHead;
}

// A float32 tensor of `elements` elements (any shape) on q's device: its address.
uint64_t scalarTensor(const char* name, const std::optional<at::Tensor>& t, int64_t elements,
                      const at::Tensor& device) {
  if (!t) return 0;
  const at::Tensor flat = t->reshape({-1});
  checkTensor(name, flat, 1, at::kFloat, &device);
  checkShape(name, flat, {elements});
  return reinterpret_cast<uint64_t>(t->data_ptr());
}

void raiseOnError(attnjit_status status) {
  if (status == ATTNJIT_OK) return;
  CHECK_ARGUMENT(false, entry.lastErrorMessage());
}

void checkLoaded() {
  CHECK_ARGUMENT(entry.jit != nullptr && entry.pagedAttention != nullptr,
                 "attnjit's torch extension was loaded without its entry points; import attnjit.torch_ops");
}

uint64_t address(const at::Tensor& t) { return reinterpret_cast<uint64_t>(t.data_ptr()); }


// Separate per-token-head scales into either op's C struct (same field names):
// both float32 [num_blocks, block_size, Hkv] with the same strides.
template <typename Params>
void setScaleCacheFields(Params& p, const CacheLayout& cache, const std::string& formatText,
                         const std::optional<at::Tensor>& kScaleCache, const std::optional<at::Tensor>& vScaleCache,
                         const at::Tensor& device) {
  CHECK_ARGUMENT(kScaleCache && vScaleCache, "k_scale_cache and v_scale_cache go together: pass both or neither");
  CHECK_ARGUMENT(formatText.size() > 14 && formatText.compare(formatText.size() - 14, 14, "per_token_head") == 0,
                 "k_scale_cache/v_scale_cache need a per-token-head format, got '", formatText, "'");
  for (const auto& [name, tensor] :
       {std::pair{"k_scale_cache", &*kScaleCache}, std::pair{"v_scale_cache", &*vScaleCache}}) {
    checkTensor(name, *tensor, 3, at::kFloat, &device);
    checkShape(name, *tensor, {cache.numBlocks, cache.blockSize, cache.heads});
  }
  CHECK_ARGUMENT(kScaleCache->strides() == vScaleCache->strides(),
                 "k_scale_cache and v_scale_cache must have the same strides, got ", kScaleCache->strides(), " and ",
                 vScaleCache->strides());
  p.kv_scale_layout = ATTNJIT_KV_SCALES_SEPARATE;
  p.k_scale_cache = address(*kScaleCache);
  p.v_scale_cache = address(*vScaleCache);
  p.scale_stride_block = kScaleCache->stride(0);
  p.scale_stride_token = kScaleCache->stride(1);
  p.scale_stride_head = kScaleCache->stride(2);
}

void pagedAttention(const at::Tensor& q, const at::Tensor& kvCache, const at::Tensor& out,
                    const at::Tensor& blockTables, const at::Tensor& seqLens, const at::Tensor& cuSeqlensQ,
                    int64_t maxQueryLen, std::optional<double> scale, bool causal, c10::string_view kvCacheFormat,
                    const std::optional<at::Tensor>& kScale, const std::optional<at::Tensor>& vScale,
                    int64_t slidingWindow, double softcap, const std::optional<at::Tensor>& alibiSlopes,
                    const std::optional<at::Tensor>& sinks, const std::optional<at::Tensor>& lse,
                    const std::optional<at::Tensor>& workspace, int64_t maxSeqLen, bool batchInvariant,
                    int64_t minSeqLen, bool alibiSqrt, const std::optional<at::Tensor>& outputScale,
                    const std::optional<at::Tensor>& causalFlags, int64_t numSms, int64_t slidingWindowRight,
                    const std::optional<at::Tensor>& qScale, bool runtimeScratch, int64_t attentionChunkSize,
                    const std::optional<at::Tensor>& mmPrefixRange, const std::optional<at::Tensor>& qqBias,
                    c10::string_view fp32PrecisionText, c10::string_view planTuningText,
                    const std::optional<at::Tensor>& kScaleCache, const std::optional<at::Tensor>& vScaleCache) {
  checkLoaded();
  CHECK_ARGUMENT(q.dim() == 3, "q must have 3 dimensions, got shape ", shapeText(q));
  CHECK_ARGUMENT(q.is_cuda(), "q is on ", q.device(), "; attnjit ops take CUDA tensors");
  const int64_t numTokens = q.size(0), numQueryHeads = q.size(1), headSize = q.size(2);
  attnjit_dtype dtype;
  at::ScalarType computeDtype;
  if (!qScale) {
    checkTensor("q", q, 3);
    dtype = floatDtype("q", q);
    computeDtype = q.scalar_type();
  } else {
    checkTensor("q", q, 3, at::kFloat8_e4m3fn, &q);
    CHECK_ARGUMENT(!outputScale, "q_scale (fp8 q) with output_scale (fp8 out) leaves no tensor of the compute dtype; "
                              "use paged_attention_raw with dtype=");
    checkTensor("out", out, 3, {}, &q);
    dtype = floatDtype("out", out);
    computeDtype = out.scalar_type();
  }
  checkTensor("out", out, 3, outputScale ? at::kFloat8_e4m3fn : computeDtype, &q);
  CHECK_ARGUMENT(out.size(0) == numTokens && out.size(1) == numQueryHeads, "out has shape ", shapeText(out),
                 "; expected (", numTokens, ", ", numQueryHeads, ", value_head_size)");
  const std::string formatText(kvCacheFormat.data(), kvCacheFormat.size());
  const attnjit_kv_cache_format format = cacheFormat("kv_cache_format", formatText);
  const bool separateScales = kScaleCache.has_value() || vScaleCache.has_value();
  const CacheLayout cache = pagedCacheLayout(kvCache, q, computeDtype, "kv_cache_format", format, formatText,
                                             headSize, out.size(2), separateScales);
  checkTensor("block_tables", blockTables, 2, at::kInt, &q);
  checkTensor("seq_lens", seqLens, 1, at::kInt, &q);
  checkTensor("cu_seqlens_q", cuSeqlensQ, 1, at::kInt, &q);
  const int64_t numSeqs = seqLens.size(0);
  checkShape("cu_seqlens_q", cuSeqlensQ, {numSeqs + 1});
  CHECK_ARGUMENT(blockTables.size(0) == numSeqs, "block_tables has ", blockTables.size(0), " rows for ", numSeqs,
                 " sequences");

  attnjit_paged_attention_params p;
  entry.pagedAttentionInit(&p);
  p.k_scale = scalarTensor("k_scale", kScale, 1, q);
  p.v_scale = scalarTensor("v_scale", vScale, 1, q);
  p.alibi_slopes = scalarTensor("alibi_slopes", alibiSlopes, numQueryHeads, q);
  p.sinks = scalarTensor("sinks", sinks, numQueryHeads, q);
  p.output_scale = scalarTensor("output_scale", outputScale, 1, q);
  p.q_scale = scalarTensor("q_scale", qScale, 1, q);
  if (lse) {
    checkTensor("lse", *lse, 2, at::kFloat, &q);
    CHECK_ARGUMENT(lse->size(0) == numQueryHeads && lse->size(1) >= numTokens, "lse has shape ", shapeText(*lse),
                   "; expected (", numQueryHeads, ", >= ", numTokens, ")");
    p.lse = address(*lse);
    p.lse_stride_head = lse->stride(0);
  }
  if (causalFlags) {
    CHECK_ARGUMENT(causalFlags->scalar_type() == at::kChar || causalFlags->scalar_type() == at::kBool,
                   "causal_flags must be int8 or bool, got ", dtypeName(causalFlags->scalar_type()));
    checkTensor("causal_flags", *causalFlags, 1, {}, &q);
    checkShape("causal_flags", *causalFlags, {numSeqs});
    p.causal_flags = address(*causalFlags);
  }
  if (mmPrefixRange) {
    checkTensor("mm_prefix_range", *mmPrefixRange, 3, at::kInt, &q);
    CHECK_ARGUMENT(mmPrefixRange->size(0) == numSeqs && mmPrefixRange->size(2) == 2, "mm_prefix_range has shape ",
                   shapeText(*mmPrefixRange), "; expected (", numSeqs, ", ranges, 2)");
    CHECK_ARGUMENT(mmPrefixRange->is_contiguous(), "mm_prefix_range must be contiguous");
    p.mm_prefix_range = address(*mmPrefixRange);
    p.mm_prefix_ranges = narrow("mm_prefix_ranges", mmPrefixRange->size(1));
  }
  if (qqBias) {
    checkTensor("qq_bias", *qqBias, 2, at::kFloat, &q);
    CHECK_ARGUMENT(qqBias->size(0) == qqBias->size(1) && qqBias->stride(0) == qqBias->size(1),
                   "qq_bias must be a contiguous square [n, n] tensor, got shape ", shapeText(*qqBias), " strides ",
                   qqBias->strides());
    p.qq_bias = address(*qqBias);
    p.qq_bias_stride = qqBias->stride(0);
  }
  if (separateScales) setScaleCacheFields(p, cache, formatText, kScaleCache, vScaleCache, q);
  if (workspace) {
    const at::Tensor flat = workspace->reshape({-1});
    checkTensor("workspace", flat, 1, {}, &q);
    p.workspace = address(*workspace);
    p.workspace_bytes = static_cast<uint64_t>(workspace->numel() * workspace->element_size());
  }
  p.dtype = dtype;
  p.num_query_heads = narrow("num_query_heads", numQueryHeads);
  p.head_size = narrow("head_size", headSize);
  p.causal = causal ? 1 : 0;
  p.kv_cache_format = format;
  p.fp32_precision = fp32Precision(std::string(fp32PrecisionText.data(), fp32PrecisionText.size()));
  p.plan_tuning = planTuning(std::string(planTuningText.data(), planTuningText.size()));
  p.sliding_window = narrow("sliding_window", slidingWindow);
  p.sliding_window_right = narrow("sliding_window_right", slidingWindowRight);
  p.attention_chunk_size = narrow("attention_chunk_size", attentionChunkSize);
  p.softcap = softcap;
  p.batch_invariant = batchInvariant ? 1 : 0;
  p.num_seqs = narrow("num_seqs", numSeqs);
  p.num_tokens = numTokens;
  p.max_query_len = narrow("max_query_len", maxQueryLen);
  p.max_seq_len = narrow("max_seq_len", maxSeqLen);
  p.min_seq_len = narrow("min_seq_len", minSeqLen);
  p.num_sms = narrow("num_sms", numSms);
  p.alibi_sqrt = alibiSqrt ? 1 : 0;
  p.no_runtime_scratch = runtimeScratch ? 0 : 1;
  p.scale = static_cast<float>(scale ? *scale : 1.0 / std::sqrt(static_cast<double>(headSize)));
  p.out = address(out);
  p.q = address(q);
  p.kv_cache = address(kvCache);
  p.block_tables = address(blockTables);
  p.seq_lens = address(seqLens);
  p.cu_seqlens_q = address(cuSeqlensQ);
  p.q_stride_token = q.stride(0);
  p.q_stride_head = q.stride(1);
  p.o_stride_token = out.stride(0);
  p.o_stride_head = out.stride(1);
  p.block_table_stride = blockTables.stride(0);
  setCacheFields(p, cache);
  p.value_head_size = out.size(2) != headSize ? narrow("value_head_size", out.size(2)) : 0;
  const c10::cuda::CUDAGuard guard(q.device());
  p.stream = c10::cuda::getCurrentCUDAStream(q.device().index()).stream();
  raiseOnError(entry.pagedAttention(entry.jit, &p));
}

void cacheWrite(const at::Tensor& key, const at::Tensor& value, const at::Tensor& kvCache,
                const at::Tensor& slotMapping, c10::string_view cacheFormatText,
                const std::optional<at::Tensor>& kScale, const std::optional<at::Tensor>& vScale,
                const std::optional<at::Tensor>& kScaleCache, const std::optional<at::Tensor>& vScaleCache) {
  checkLoaded();
  checkTensor("key", key, 3);
  const attnjit_dtype dtype = floatDtype("key", key);
  const int64_t numTokens = key.size(0), numKvHeads = key.size(1), headSize = key.size(2);
  checkTensor("value", value, 3, key.scalar_type(), &key);
  CHECK_ARGUMENT(value.size(0) == numTokens && value.size(1) == numKvHeads, "value has shape ", shapeText(value),
                 "; expected (", numTokens, ", ", numKvHeads, ", value_head_size)");
  const std::string formatText(cacheFormatText.data(), cacheFormatText.size());
  const attnjit_kv_cache_format format = cacheFormat("cache_format", formatText);
  const bool separateScales = kScaleCache.has_value() || vScaleCache.has_value();
  const CacheLayout cache = pagedCacheLayout(kvCache, key, key.scalar_type(), "cache_format", format, formatText,
                                             headSize, value.size(2), separateScales);
  CHECK_ARGUMENT(cache.heads == numKvHeads, "kv_cache has shape ", shapeText(kvCache), " with ", cache.heads,
                 " KV heads; the keys have ", numKvHeads);
  checkTensor("slot_mapping", slotMapping, 1, at::kLong, &key);
  checkShape("slot_mapping", slotMapping, {numTokens});
  attnjit_cache_write_params p;
  entry.cacheWriteInit(&p);
  const bool perHead = kScale && kScale->numel() == numKvHeads && numKvHeads > 1;
  for (const auto& [name, scale, field] : {std::tuple{"k_scale", &kScale, &p.k_scale},
                                           std::tuple{"v_scale", &vScale, &p.v_scale}}) {
    if (!*scale) continue;
    *field = scalarTensor(name, *scale, perHead ? numKvHeads : 1, key);
    CHECK_ARGUMENT((*scale)->is_contiguous(), name, " must be contiguous");
  }
  p.per_head_scales = perHead ? 1 : 0;
  if (separateScales) setScaleCacheFields(p, cache, formatText, kScaleCache, vScaleCache, key);
  p.dtype = dtype;
  p.cache_format = format;
  p.head_size = narrow("head_size", headSize);
  p.value_head_size = value.size(2) != headSize ? narrow("value_head_size", value.size(2)) : 0;
  setCacheFields(p, cache);
  p.num_tokens = numTokens;
  p.key = address(key);
  p.value = address(value);
  p.kv_cache = address(kvCache);
  p.slot_mapping = address(slotMapping);
  p.key_stride_token = key.stride(0);
  p.key_stride_head = key.stride(1);
  p.value_stride_token = value.stride(0);
  p.value_stride_head = value.stride(1);
  const c10::cuda::CUDAGuard guard(key.device());
  p.stream = c10::cuda::getCurrentCUDAStream(key.device().index()).stream();
  raiseOnError(entry.cacheWrite(entry.jit, &p));
}

// Fake tensors (torch.compile) and meta tensors: the ops return nothing and
// only write into their arguments, so there is nothing to compute.
void pagedAttentionMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        const at::Tensor&, const at::Tensor&, int64_t, std::optional<double>, bool,
                        c10::string_view, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        int64_t, double, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, int64_t, bool,
                        int64_t, bool, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, int64_t,
                        int64_t, const std::optional<at::Tensor>&, bool, int64_t,
                        const std::optional<at::Tensor>&, const std::optional<at::Tensor>&, c10::string_view,
                        c10::string_view, const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {}
void cacheWriteMeta(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, c10::string_view,
                    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&,
                    const std::optional<at::Tensor>&, const std::optional<at::Tensor>&) {}

}  // namespace

// A fragment: attnjit/torch_ops.py defines the namespace's other operators.
TORCH_LIBRARY_FRAGMENT(attnjit, m) {
  m.def("_set_entry_points(int jit, int paged_attention_init, int paged_attention, int cache_write_init, "
        "int cache_write, int last_error_message) -> ()",
        &setEntryPoints);
  m.def("paged_attention(Tensor q, Tensor kv_cache, Tensor(a!) out, Tensor block_tables, Tensor seq_lens, "
        "Tensor cu_seqlens_q, int max_query_len, float? scale=None, bool causal=True, "
        "str kv_cache_format=\"auto\", Tensor? k_scale=None, Tensor? v_scale=None, int sliding_window=0, "
        "float softcap=0.0, Tensor? alibi_slopes=None, Tensor? sinks=None, Tensor(b!)? lse=None, "
        "Tensor(c!)? workspace=None, int max_seq_len=0, bool batch_invariant=False, int min_seq_len=0, "
        "bool alibi_sqrt=False, Tensor? output_scale=None, Tensor? causal_flags=None, int num_sms=0, "
        "int sliding_window_right=0, Tensor? q_scale=None, bool runtime_scratch=True, "
        "int attention_chunk_size=0, Tensor? mm_prefix_range=None, Tensor? qq_bias=None, "
        "str fp32_precision=\"tf32\", str plan_tuning=\"environment\", Tensor? k_scale_cache=None, "
        "Tensor? v_scale_cache=None) -> ()");
  m.def("cache_write(Tensor key, Tensor value, Tensor(a!) kv_cache, Tensor slot_mapping, "
        "str cache_format=\"auto\", Tensor? k_scale=None, Tensor? v_scale=None, Tensor(b!)? k_scale_cache=None, "
        "Tensor(c!)? v_scale_cache=None) -> ()");
}

TORCH_LIBRARY_IMPL(attnjit, CUDA, m) {
  m.impl("paged_attention", &pagedAttention);
  m.impl("cache_write", &cacheWrite);
}

TORCH_LIBRARY_IMPL(attnjit, Meta, m) {
  m.impl("paged_attention", &pagedAttentionMeta);
  m.impl("cache_write", &cacheWriteMeta);
}
