// The C API (include/attnjit/attnjit.h): a C99 program compiled with the system
// C compiler against the header and linked to libattnjit.so
// (tests/data/capi/capi_smoke.c), and the API's contracts checked from here:
// status codes and messages, the thread-local last error, versioned structs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "attnjit/attnjit.h"
#include "compiler/ops/MlaDecodeOp.h"
#include "compiler/ops/PagedAttentionOp.h"
#include "compiler/kernels/MlaCacheWrite.h"
#include "runtime/DeviceBuffer.h"
#include "test_paths.h"
#include "test_tools.h"
#include "compiler/validation/reference/CompanionReference.h"

namespace validation = attnjit::validation;

namespace {

// libattnjit.so: ATTNJIT_LIBRARY where set (a bundle), else the build tree's.
std::string sharedLibraryPath() {
  return attnjit::tests::environmentOr("ATTNJIT_LIBRARY", ATTNJIT_SHARED_LIBRARY_PATH);
}

bool haveCCompiler() {
  int code = 0;
  attnjit::tests::runShell("cc --version", &code);
  return code == 0;
}

// A decode batch that passes validation: Hq 32 over Hkv 8, D 128, block 16.
attnjit_paged_attention_params validPagedAttention() {
  attnjit_paged_attention_params paged;
  attnjit_paged_attention_params_init(&paged);
  paged.num_query_heads = 32;
  paged.num_kv_heads = 8;
  paged.head_size = 128;
  paged.block_size = 16;
  paged.num_seqs = 2;
  paged.num_tokens = 2;
  paged.max_query_len = 1;
  paged.scale = 0.088f;
  paged.out = 0x1000;
  paged.q = 0x2000;
  paged.kv_cache = 0x3000;
  paged.block_tables = 0x4000;
  paged.seq_lens = 0x5000;
  paged.cu_seqlens_q = 0x6000;
  paged.q_stride_token = paged.o_stride_token = 32 * 128;
  paged.q_stride_head = paged.o_stride_head = 128;
  paged.block_table_stride = 64;
  paged.kv_stride_block = 2 * 16 * 8 * 128;
  paged.kv_stride_kv = 16 * 8 * 128;
  paged.kv_stride_token = 8 * 128;
  paged.kv_stride_head = 128;
  return paged;
}

// Three bf16 tokens of 8 KV heads of 128 into a block-16 cache.
attnjit_cache_write_params validCacheWrite() {
  attnjit_cache_write_params write;
  attnjit_cache_write_params_init(&write);
  write.num_kv_heads = 8;
  write.head_size = 128;
  write.block_size = 16;
  write.num_tokens = 3;
  write.key = 0x1000;
  write.value = 0x2000;
  write.kv_cache = 0x3000;
  write.slot_mapping = 0x4000;
  write.key_stride_token = write.value_stride_token = 8 * 128;
  write.key_stride_head = write.value_stride_head = 128;
  write.kv_stride_block = 2 * 16 * 8 * 128;
  write.kv_stride_kv = 16 * 8 * 128;
  write.kv_stride_token = 8 * 128;
  write.kv_stride_head = 128;
  return write;
}

// DeepSeek's decode shape: 4 sequences, 16 heads, latent 512 + 64, block 64.
attnjit_mla_decode_params validMlaDecode() {
  attnjit_mla_decode_params mla;
  attnjit_mla_decode_params_init(&mla);
  mla.num_heads = 16;
  mla.block_size = 64;
  mla.num_seqs = 4;
  mla.max_seq_len = 1000;
  mla.scale = 0.0417f;
  mla.out = 0x1000;
  mla.q = 0x2000;
  mla.kv_cache = 0x3000;
  mla.block_tables = 0x4000;
  mla.seq_lens = 0x5000;
  mla.q_stride_batch = 16 * 576;
  mla.q_stride_head = 576;
  mla.o_stride_batch = 16 * 512;
  mla.o_stride_head = 512;
  mla.block_table_stride = 32;
  mla.kv_stride_block = 64 * 576;
  mla.kv_stride_token = 576;
  return mla;
}

// Four partials of 5 tokens, 8 heads of 128, f16.
attnjit_merge_partials_params validMergePartials() {
  attnjit_merge_partials_params merge;
  attnjit_merge_partials_params_init(&merge);
  merge.dtype = ATTNJIT_DTYPE_F16;
  merge.num_heads = 8;
  merge.head_size = 128;
  merge.num_partials = 4;
  merge.num_tokens = 5;
  merge.output = 0x1000;
  merge.partial_outputs = 0x2000;
  merge.partial_lses = 0x3000;
  merge.output_stride_token = merge.partial_stride_token = 8 * 128;
  merge.output_stride_head = merge.partial_stride_head = 128;
  merge.partial_stride_partial = 5 * 8 * 128;
  merge.lse_stride_partial = 8 * 5;
  return merge;
}

// Seven bf16 tokens into an fp8_e4m3 latent cache of 512 + 64, block 64: kv_c
// and k_pe are two slices of one [7, 576] projection output.
attnjit_mla_cache_write_params validMlaCacheWrite() {
  attnjit_mla_cache_write_params write;
  attnjit_mla_cache_write_params_init(&write);
  write.cache_format = ATTNJIT_KV_CACHE_FP8_E4M3;
  write.block_size = 64;
  write.num_tokens = 7;
  write.kv_c = 0x10000;
  write.k_pe = 0x10000 + 1024;
  write.kv_cache = 0x20000;
  write.slot_mapping = 0x30000;
  write.scale = 0x40000;
  write.kv_c_stride_token = write.k_pe_stride_token = 576;
  write.cache_stride_block = 64 * 576;
  write.cache_stride_token = 576;
  return write;
}

std::string lastError() { return attnjit_last_error_message(); }

}  // namespace

TEST_CASE("a C99 program builds against attnjit.h and runs", "[capi]") {
#ifdef ATTNJIT_SANITIZED_BUILD
  attnjit::tests::skipTest(
      "under ASan: a C program cannot load the instrumented libattnjit.so (runs in the Release suite)");
  return;
#endif
  namespace fs = std::filesystem;
  const fs::path source = fs::path(attnjit::tests::sourceDir()) / "tests/data/capi/capi_smoke.c";
  const fs::path include = fs::path(attnjit::tests::sourceDir()) / "include";
  if (!haveCCompiler() || !fs::exists(include / "attnjit/attnjit.h")) {
    attnjit::tests::skipTest("no C compiler ('cc') or no include/attnjit here");
    return;
  }
  const fs::path library = sharedLibraryPath();
  REQUIRE(fs::exists(library));
  const fs::path program = fs::temp_directory_path() / ("attnjit_capi_smoke_" + std::to_string(getpid()));
  int code = 0;
  const std::string compile = "cc -std=c99 -Wall -Wextra -Wpedantic -Werror '" + source.string() + "' -I'" +
                              include.string() + "' -L'" + library.parent_path().string() +
                              "' -lattnjit -Wl,-rpath,'" + library.parent_path().string() + "' -o '" +
                              program.string() + "'";
  const std::string compileOutput = attnjit::tests::runShell(compile, &code);
  INFO(compile << "\n" << compileOutput);
  REQUIRE(code == 0);
  const std::string output = attnjit::tests::runShell("'" + program.string() + "'", &code);
  fs::remove(program);
  INFO(output);
  CHECK(code == 0);
  CHECK_THAT(output, Catch::Contains("capi_smoke: ok"));
  CHECK_THAT(output, Catch::Contains("kernel merge_attn_states_bf16_h8_d128_nolse"));
  if (!attnjit::runtime::driverAvailable()) CHECK_THAT(output, Catch::Contains("GPU part skipped: "));
}

TEST_CASE("the last error is per thread and cleared by a success", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  CHECK(attnjit_kernel_compile(nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnjit_last_error_message()) == "attnjit_kernel_compile: kernel is NULL");
  std::string otherThread = "unset";
  std::thread([&] { otherThread = attnjit_last_error_message(); }).join();
  CHECK(otherThread.empty());
  CHECK(std::string(attnjit_last_error_message()) == "attnjit_kernel_compile: kernel is NULL");
  size_t count = 0;
  CHECK(attnjit_kernel_num_params(nullptr, &count) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  attnjit_jit* second = nullptr;
  CHECK(attnjit_jit_create(nullptr, &second) == ATTNJIT_OK);
  CHECK(std::string(attnjit_last_error_message()).empty());
  attnjit_jit_destroy(second);
  attnjit_jit_destroy(runtime);
}

TEST_CASE("versioned structs: older callers get defaults, newer ones an error", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_paged_attention_params params;
  attnjit_paged_attention_params_init(&params);
  CHECK(params.struct_size == sizeof params);
  CHECK(params.causal == 1);
  CHECK(params.dtype == ATTNJIT_DTYPE_BF16);

  params.struct_size = sizeof params + 8;
  CHECK(attnjit_paged_attention_validate(runtime, &params) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("built against a newer attnjit.h"));

  // A caller whose header ended after num_kv_heads: the rest takes the defaults,
  // so validation reaches the batch (head_size 0 from the defaults is refused).
  params.struct_size = offsetof(attnjit_paged_attention_params, head_size);
  params.num_query_heads = 32;
  params.num_kv_heads = 8;
  params.head_size = 128;  // beyond the caller's struct_size: not read
  CHECK(attnjit_paged_attention_validate(runtime, &params) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::StartsWith("paged attention: ") && Catch::Contains("head"));

  attnjit_compile_stats stats;
  stats.struct_size = offsetof(attnjit_compile_stats, origin);  // an older, shorter struct
  stats.origin = ATTNJIT_ORIGIN_MEMORY;                         // must stay untouched
  attnjit_kernel* kernel = nullptr;
  REQUIRE(attnjit_kernel_from_spec_text(runtime,
                                        "family: merge_attn_states\nparams:\n  dtype: f16\n  num_heads: 2\n"
                                        "  head_size: 64\n  output_lse: true\n",
                                        nullptr, &kernel) == ATTNJIT_OK);
  CHECK(attnjit_kernel_stats(kernel, &stats) == ATTNJIT_OK);
  CHECK(stats.origin == ATTNJIT_ORIGIN_MEMORY);
  CHECK(std::string(stats.target).size() > 0);
  attnjit_kernel_destroy(kernel);
  attnjit_jit_destroy(runtime);
}

TEST_CASE("C op structs reach the op validators field by field", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_cache_write_params write;
  attnjit_cache_write_params_init(&write);
  write.dtype = ATTNJIT_DTYPE_F16;
  write.cache_format = ATTNJIT_KV_CACHE_FP8_E4M3;
  write.num_kv_heads = 8;
  write.head_size = 128;
  write.block_size = 16;
  write.num_tokens = 3;
  write.key = 0x1000;
  write.value = 0x2000;
  write.kv_cache = 0x3000;
  write.slot_mapping = 0x4000;
  write.k_scale = 0x5000;
  write.v_scale = 0x6000;
  write.key_stride_token = write.value_stride_token = 8 * 128;
  write.key_stride_head = write.value_stride_head = 128;
  write.kv_stride_block = 2 * 16 * 8 * 128;
  write.kv_stride_kv = 16 * 8 * 128;
  write.kv_stride_token = 8 * 128;
  write.kv_stride_head = 128;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.v_scale = 0;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("parameter 'v_scale'"));
  write.cache_format = static_cast<attnjit_kv_cache_format>(42);
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("cache_format 42"));

  attnjit_paged_attention_params paged;
  attnjit_paged_attention_params_init(&paged);
  paged.num_query_heads = 32;
  paged.num_kv_heads = 8;
  paged.head_size = 128;
  paged.block_size = 16;
  paged.num_seqs = 2;
  paged.num_tokens = 2;
  paged.max_query_len = 1;
  paged.scale = 0.088f;
  paged.out = 0x1000;
  paged.q = 0x2000;
  paged.kv_cache = 0x3000;
  paged.block_tables = 0x4000;
  paged.seq_lens = 0x5000;
  paged.cu_seqlens_q = 0x6000;
  paged.q_stride_token = paged.o_stride_token = 32 * 128;
  paged.q_stride_head = paged.o_stride_head = 128;
  paged.block_table_stride = 64;
  paged.kv_stride_block = 2 * 16 * 8 * 128;
  paged.kv_stride_kv = 16 * 8 * 128;
  paged.kv_stride_token = 8 * 128;
  paged.kv_stride_head = 128;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // Warm-up reads the static fields: a bad one is named before any GPU work.
  int kernelsReady = -1;
  CHECK(attnjit_paged_attention_warmup(nullptr, &paged, 0, &kernelsReady) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(kernelsReady == 0);
  paged.head_size = 1100;
  CHECK(attnjit_paged_attention_warmup(runtime, &paged, 0, &kernelsReady) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("head_size (1100)"));
  paged.head_size = 128;
  CHECK(attnjit_paged_attention_warmup(runtime, &paged, -1, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("threads (-1) must be 0 (every core) or positive"));
  if (!attnjit::runtime::driverAvailable()) {
    CHECK(attnjit_paged_attention_warmup(runtime, &paged, 2, &kernelsReady) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK(kernelsReady == 0);
  }
  paged.cu_seqlens_q = 0x6004;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("cu_seqlens_q") && Catch::Contains("16-byte aligned"));
  paged.cu_seqlens_q = 0x6000;
  // The quantization and split-KV fields reach the op: an fp8 cache needs its scales.
  paged.kv_cache_format = ATTNJIT_KV_CACHE_FP8_E4M3;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("k_scale"));
  paged.kv_cache_format = ATTNJIT_KV_CACHE_AUTO;
  paged.k_scale = 0x7000;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(attnjit_last_error_message(), Catch::Contains("only used by the per-tensor fp8 caches"));
  paged.k_scale = 0;
  uint64_t workspaceBytes = 1;
  CHECK(attnjit_paged_attention_workspace_bytes(64, 32, 128, 4096, &workspaceBytes) == ATTNJIT_OK);
  CHECK(workspaceBytes == attnjit::ops::pagedAttentionWorkspaceBytes(64, 32, 128, 4096).value());
  CHECK(attnjit_paged_attention_workspace_bytes(64, 32, 128, 65536, &workspaceBytes) == ATTNJIT_OK);
  CHECK(workspaceBytes > 0);
  // Sizes out of range are errors, not a workspace of 0 bytes.
  CHECK(attnjit_paged_attention_workspace_bytes(-1, 32, 128, 4096, &workspaceBytes) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "paged attention workspace: num_tokens (-1) must be between 0 and 2147483647");
  CHECK(workspaceBytes == 0);
  CHECK(attnjit_paged_attention_workspace_bytes(int64_t{1} << 40, 32, 128, 4096, &workspaceBytes) ==
        ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(attnjit_paged_attention_workspace_bytes(64, (1 << 30) + 1, 128, 4096, &workspaceBytes) ==
        ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "paged attention workspace: num_query_heads (1073741825) must be between 1 and 1024");
  CHECK(attnjit_paged_attention_workspace_bytes(64, 32, 128, 4096, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  if (attnjit_driver_status() != ATTNJIT_OK) {
    CHECK(attnjit_paged_attention(runtime, &paged) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK_THAT(attnjit_last_error_message(), Catch::Contains("CUDA driver not available"));
  }
  attnjit_jit_destroy(runtime);
}

TEST_CASE("appended paged attention and cache write fields: old struct sizes read defaults", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  const bool boundsFromEnvironment = std::getenv("ATTNJIT_CHECK_BOUNDS") != nullptr;

  attnjit_paged_attention_params paged = validPagedAttention();
  CHECK(paged.value_head_size == 0);
  CHECK(paged.check_bounds == 0);
  CHECK(paged.num_blocks == 0);
  if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // check_bounds reaches the op, which then needs num_blocks.
  paged.check_bounds = 1;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("paged attention: num_blocks (0) must be the KV cache's block count"));
  paged.num_blocks = 40;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // value_head_size reaches the kernel's config.
  paged.value_head_size = 1100;
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("value_head_size (1100) must be between 1 and 1024"));
  // A caller built before the three fields: they are not read (the bad values
  // above stay beyond its struct_size), so the defaults apply and it validates.
  paged.num_blocks = 0;
  paged.struct_size = offsetof(attnjit_paged_attention_params, value_head_size);
  if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // One that ends inside them: value_head_size read, check_bounds not.
  paged.struct_size = offsetof(attnjit_paged_attention_params, check_bounds);
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("value_head_size (1100)"));
  paged.struct_size = sizeof(attnjit_paged_attention_params) + sizeof(int);
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("built against a newer attnjit.h"));
  // fp32_precision: TF32 by default, read and checked like every enum.
  paged = validPagedAttention();
  CHECK(paged.fp32_precision == ATTNJIT_FP32_TF32);
  paged.fp32_precision = static_cast<attnjit_fp32_precision>(9);
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() ==
        "attnjit_paged_attention_validate: fp32_precision 9 is not an attnjit_fp32_precision (TF32, IEEE)");
  paged.struct_size = offsetof(attnjit_paged_attention_params, fp32_precision);  // a caller without the field
  if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  paged.struct_size = sizeof paged;
  paged.fp32_precision = ATTNJIT_FP32_IEEE;
  if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // plan_tuning: ATTNJIT_TUNE's by default, checked like every enum.
  paged = validPagedAttention();
  CHECK(paged.plan_tuning == ATTNJIT_PLAN_TUNING_ENVIRONMENT);
  paged.plan_tuning = static_cast<attnjit_plan_tuning>(4);
  CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("plan_tuning 4 is not an attnjit_plan_tuning"));
  paged.plan_tuning = ATTNJIT_PLAN_TUNING_OFF;
  if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &paged) == ATTNJIT_OK);
  // Separate per-token-head scales: the layout enum, the tensors and their strides are read.
  {
    attnjit_paged_attention_params separate = validPagedAttention();
    separate.kv_scale_layout = static_cast<attnjit_kv_scale_layout>(2);
    CHECK(attnjit_paged_attention_validate(runtime, &separate) == ATTNJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("kv_scale_layout 2 is not an attnjit_kv_scale_layout (INLINE, SEPARATE)"));
    separate.kv_scale_layout = ATTNJIT_KV_SCALES_SEPARATE;
    separate.kv_cache_format = ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD;
    separate.k_scale_cache = 0x90000;
    separate.v_scale_cache = 0x98000;
    CHECK(attnjit_paged_attention_validate(runtime, &separate) == ATTNJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("scale_stride_block (0) must be positive"));
    separate.scale_stride_block = 128;
    separate.scale_stride_token = 8;
    separate.scale_stride_head = 1;
    if (!boundsFromEnvironment) CHECK(attnjit_paged_attention_validate(runtime, &separate) == ATTNJIT_OK);
    separate.kv_scale_layout = ATTNJIT_KV_SCALES_INLINE;
    CHECK(attnjit_paged_attention_validate(runtime, &separate) == ATTNJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("only used with separate per-token-head scales"));
    attnjit_cache_write_params write;
    attnjit_cache_write_params_init(&write);
    CHECK(write.kv_scale_layout == ATTNJIT_KV_SCALES_INLINE);
    write.kv_scale_layout = static_cast<attnjit_kv_scale_layout>(-1);
    CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
    CHECK_THAT(lastError(), Catch::Contains("kv_scale_layout -1 is not an attnjit_kv_scale_layout"));
  }
  // Tuning: a call that keeps the rules (no max_seq_len) is refused before the GPU.
  double ruleMs = -1, tunedMs = -1;
  paged.max_seq_len = 0;
  CHECK(attnjit_paged_attention_tune(runtime, &paged, &ruleMs, &tunedMs) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  if (!boundsFromEnvironment) CHECK_THAT(lastError(), Catch::Contains("always takes the op's rules"));
  CHECK(ruleMs == 0);
  CHECK(tunedMs == 0);
  CHECK(attnjit_paged_attention_tune(nullptr, &paged, nullptr, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);

  attnjit_cache_write_params write = validCacheWrite();
  CHECK(write.value_head_size == 0);
  CHECK(write.check_bounds == 0);
  CHECK(write.num_blocks == 0);
  if (!boundsFromEnvironment) CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.check_bounds = 1;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("num_blocks (0) must be the KV cache's block count"));
  write.num_blocks = 40;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.value_head_size = 2000;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("value_head_size (2000) must be between 1 and 1024"));
  write.num_blocks = 0;
  write.struct_size = offsetof(attnjit_cache_write_params, value_head_size);
  if (!boundsFromEnvironment) CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.struct_size = sizeof(attnjit_cache_write_params) + 8;
  CHECK(attnjit_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("built against a newer attnjit.h"));
  attnjit_jit_destroy(runtime);
}

TEST_CASE("C MLA decode: defaults and argument errors with the op's message", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_mla_decode_params mla;
  attnjit_mla_decode_params_init(&mla);
  const attnjit::ops::MlaDecodeParams cppDefaults;
  CHECK(mla.struct_size == sizeof mla);
  CHECK(mla.dtype == ATTNJIT_DTYPE_BF16);
  CHECK(mla.kv_lora_rank == cppDefaults.kvLoraRank);
  CHECK(mla.rope_dim == cppDefaults.ropeDim);
  CHECK(mla.split_rule == ATTNJIT_MLA_SPLIT_BALANCED);
  CHECK(attnjit_mla_decode_validate(runtime, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_decode_validate: params is NULL");
  CHECK(attnjit_mla_decode_validate(nullptr, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_decode_validate: jit is NULL");

  mla = validMlaDecode();
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  CHECK(lastError().empty());
  mla.q = 0;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla decode: q is a null pointer");
  mla.q = 0x2000;
  mla.kv_lora_rank = 128;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("mla decode: the latent width kv_lora_rank + rope_dim = 128 + 64"));
  mla.kv_lora_rank = 512;
  mla.dtype = ATTNJIT_DTYPE_F32;  // f32 MLA runs FMA dots
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  mla.dtype = static_cast<attnjit_dtype>(9);
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  mla.dtype = ATTNJIT_DTYPE_BF16;
  mla.kv_cache_format = ATTNJIT_KV_CACHE_FP8_E4M3;  // needs its scale
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla decode: kv_scale is a null pointer");
  mla.kv_scale = 0x6000;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  mla.split_rule = static_cast<attnjit_mla_split_rule>(7);
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_decode_validate: split_rule 7 is not an attnjit_mla_split_rule (BALANCED, VLLM)");
  mla.split_rule = ATTNJIT_MLA_SPLIT_VLLM;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  mla.lse = 0x7000;
  mla.lse_stride_batch = 1;
  mla.lse_stride_head = 1;  // [B, H] and [H, B] overlap
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("lse strides (batch 1, head 1) overlap"));
  mla.lse_stride_head = 4;  // the merge kernels' [H, B]
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  mla.workspace = 0x10000;
  mla.workspace_bytes = 16;  // too small to split: runs unsplit
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  REQUIRE(attnjit_mla_decode_workspace_bytes(4, 16, 512, 1000, &mla.workspace_bytes) == ATTNJIT_OK);
  CHECK(mla.workspace_bytes == attnjit::ops::mlaDecodeWorkspaceBytes(4, 16, 512, 1000).value());
  CHECK(mla.workspace_bytes > 0);
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  uint64_t mlaBytes = 1;
  CHECK(attnjit_mla_decode_workspace_bytes(4, 16, 512, 200, &mlaBytes) == ATTNJIT_OK);
  CHECK(mlaBytes == 0);  // one segment: never splits
  CHECK(attnjit_mla_decode_workspace_bytes(-1, 16, 512, 4096, &mlaBytes) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla decode workspace: max_num_seqs (-1) must not be negative");

  // struct_size: a newer caller's is refused; one that ends before num_seqs
  // leaves it at its default, 0, which the op refuses.
  mla.struct_size = sizeof(attnjit_mla_decode_params) + 8;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("built against a newer attnjit.h"));
  mla.struct_size = offsetof(attnjit_mla_decode_params, num_seqs);
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla decode: num_seqs (0) must be at least 1");
  mla.struct_size = sizeof mla;
  // fp32_precision: TF32 by default, checked like every enum.
  CHECK(mla.fp32_precision == ATTNJIT_FP32_TF32);
  mla.fp32_precision = static_cast<attnjit_fp32_precision>(-1);
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_decode_validate: fp32_precision -1 is not an attnjit_fp32_precision (TF32, IEEE)");
  mla.fp32_precision = ATTNJIT_FP32_IEEE;
  CHECK(attnjit_mla_decode_validate(runtime, &mla) == ATTNJIT_OK);
  mla.fp32_precision = ATTNJIT_FP32_TF32;

  if (attnjit_driver_status() != ATTNJIT_OK) {
    CHECK(attnjit_mla_decode(runtime, &mla) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK_THAT(lastError(), Catch::Contains("CUDA driver not available"));
  }
  mla.q = 0;  // argument errors come first, with or without a driver
  CHECK(attnjit_mla_decode(runtime, &mla) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla decode: q is a null pointer");
  attnjit_jit_destroy(runtime);
}

TEST_CASE("C merge partials: defaults and argument errors with the op's message", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_merge_partials_params merge;
  attnjit_merge_partials_params_init(&merge);
  CHECK(merge.struct_size == sizeof merge);
  CHECK(merge.dtype == ATTNJIT_DTYPE_BF16);
  CHECK(merge.num_partials == 0);

  merge = validMergePartials();
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_OK);
  merge.num_partials = 0;
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "merge_partials: num_partials (0) must be at least 1");
  merge.num_partials = 4;
  merge.lse_stride_partial = 39;  // partials would share LSEs
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("merge_partials: lse_stride_partial (39) is smaller than"));
  merge.lse_stride_partial = 40;
  merge.dtype = static_cast<attnjit_dtype>(9);
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("dtype 9 is not an attnjit_dtype"));
  merge.dtype = ATTNJIT_DTYPE_F16;
  merge.partial_lses = 0x3004;
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("merge_partials: ") && Catch::Contains("partial_lses"));
  merge.partial_lses = 0x3000;
  merge.num_tokens = 0;  // nothing to do: valid, and launches nothing even without a driver
  CHECK(attnjit_merge_partials(runtime, &merge) == ATTNJIT_OK);
  merge.num_tokens = 5;

  merge.struct_size = sizeof(attnjit_merge_partials_params) + 8;
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("built against a newer attnjit.h"));
  merge.struct_size = offsetof(attnjit_merge_partials_params, num_partials);
  CHECK(attnjit_merge_partials_validate(runtime, &merge) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "merge_partials: num_partials (0) must be at least 1");
  merge.struct_size = sizeof merge;
  if (attnjit_driver_status() != ATTNJIT_OK) {
    CHECK(attnjit_merge_partials(runtime, &merge) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK_THAT(lastError(), Catch::Contains("CUDA driver not available"));
  }
  attnjit_jit_destroy(runtime);
}

TEST_CASE("C MLA cache write: defaults and argument errors with the op's message", "[capi]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_mla_cache_write_params write;
  attnjit_mla_cache_write_params_init(&write);
  const attnjit::compiler::MlaCacheWriteConfig kernelDefaults;
  CHECK(write.struct_size == sizeof write);
  CHECK(write.dtype == ATTNJIT_DTYPE_BF16);
  CHECK(write.cache_format == ATTNJIT_KV_CACHE_AUTO);
  CHECK(write.kv_lora_rank == kernelDefaults.kvLoraRank);
  CHECK(write.rope_dim == kernelDefaults.ropeDim);
  CHECK(write.block_size == 0);
  CHECK(write.scale == 0);
  CHECK(write.stream == nullptr);
  CHECK(attnjit_mla_cache_write_validate(runtime, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_cache_write_validate: params is NULL");
  CHECK(attnjit_mla_cache_write(nullptr, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_cache_write: jit is NULL");

  write = validMlaCacheWrite();
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  CHECK(lastError().empty());
  write.kv_c = 0;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: parameter 'kv_c' (ptr<global, bf16>) is a null pointer");
  write.kv_c = 0x10000;
  write.k_pe = 0x10000 + 8;  // one bf16 row of 4 elements: not 16-byte aligned
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("mla cache write: parameter 'k_pe'") && Catch::Contains("16-byte aligned"));
  write.k_pe = 0x10000 + 1024;
  // Shapes: the latent width, the cache row and the token strides.
  write.kv_lora_rank = 448;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: unsupported MLA latent width kv_lora_rank + rope_dim = 448 + 64; "
                       "supported: 512 + 64 and 256 + 64");
  write.kv_lora_rank = 512;
  write.cache_stride_token = 560;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: cache_stride_token (560) is smaller than a cache row, kv_lora_rank + "
                       "rope_dim = 576");
  write.cache_stride_token = 576;
  write.kv_c_stride_token = 580;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("'kv_c_stride_token' (i64) is 580, not a multiple of 8"));
  write.kv_c_stride_token = 576;
  write.k_pe_stride_token = 0;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: k_pe_stride_token (0) must be positive");
  write.k_pe_stride_token = 576;
  write.num_tokens = -1;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("mla cache write: num_tokens (-1) must be between 0 and"));
  write.num_tokens = 7;
  // Formats: fp8 needs its scale; auto refuses one; per-token-head is no MLA format.
  write.scale = 0;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: parameter 'scale' (ptr<global, f32>) is a null pointer");
  write.cache_format = ATTNJIT_KV_CACHE_AUTO;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.scale = 0x40000;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: scale is given, but the cache format auto has no per-tensor scale (only "
                       "fp8_e4m3 and fp8_e5m2 do)");
  write.cache_format = ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: kv_cache_dtype int8_per_token_head is not supported for the MLA cache; "
                       "use auto, fp8_e4m3 or fp8_e5m2");
  write.cache_format = static_cast<attnjit_kv_cache_format>(42);
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_cache_write_validate: cache_format 42 is not an attnjit_kv_cache_format");
  write.cache_format = ATTNJIT_KV_CACHE_FP8_E5M2;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  write.dtype = static_cast<attnjit_dtype>(9);
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_cache_write_validate: dtype 9 is not an attnjit_dtype (F32, F16, BF16)");
  write.dtype = ATTNJIT_DTYPE_F16;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_OK);

  // struct_size: unset is refused, a newer caller's too. A caller whose struct
  // ends before kv_lora_rank: the bad width beyond it is not read (the default
  // 512 is), so validation reaches the default block_size, 0. One that ends
  // before num_tokens has nothing to do: valid, and runs without a driver.
  write = validMlaCacheWrite();
  write.struct_size = 0;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_mla_cache_write_validate: params->struct_size is 0; initialize the struct with its "
                       "_init function");
  write.struct_size = sizeof(attnjit_mla_cache_write_params) + 8;
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("built against a newer attnjit.h"));
  write.kv_lora_rank = 448;
  write.struct_size = offsetof(attnjit_mla_cache_write_params, kv_lora_rank);
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: block_size (0) must be between 1 and 4096");
  write.kv_lora_rank = 512;
  write.struct_size = offsetof(attnjit_mla_cache_write_params, num_tokens);
  CHECK(attnjit_mla_cache_write_validate(runtime, &write) == ATTNJIT_OK);
  CHECK(attnjit_mla_cache_write(runtime, &write) == ATTNJIT_OK);
  write.struct_size = sizeof write;
  write.num_tokens = 0;  // nothing to do: valid, and launches nothing even without a driver
  CHECK(attnjit_mla_cache_write(runtime, &write) == ATTNJIT_OK);
  write.num_tokens = 7;

  if (attnjit_driver_status() != ATTNJIT_OK) {
    CHECK(attnjit_mla_cache_write(runtime, &write) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK_THAT(lastError(), Catch::Contains("CUDA driver not available"));
  }
  write.slot_mapping = 0;  // argument errors come first, with or without a driver
  CHECK(attnjit_mla_cache_write(runtime, &write) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "mla cache write: parameter 'slot_mapping' (ptr<global, i64>) is a null pointer");
  attnjit_jit_destroy(runtime);
}

namespace {

attnjit::runtime::DeviceBuffer uploadBytes(const void* data, size_t bytes) {
  auto buffer = attnjit::runtime::DeviceBuffer::allocate(bytes);
  REQUIRE(buffer);
  REQUIRE(buffer->copyFromHost(data, bytes));
  return std::move(*buffer);
}

}  // namespace

TEST_CASE("C convert cache: defaults and argument errors with the op's message", "[capi][convert_cache]") {
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);
  attnjit_convert_cache_params convert;
  attnjit_convert_cache_params_init(&convert);
  CHECK(convert.struct_size == sizeof convert);
  CHECK(convert.dtype == ATTNJIT_DTYPE_BF16);
  CHECK(convert.cache_format == ATTNJIT_KV_CACHE_FP8_E4M3);
  CHECK(convert.to_fp8 == 1);
  CHECK(convert.scale == 1.0f);
  CHECK(convert.num_elements == 0);
  CHECK(attnjit_convert_cache_validate(runtime, &convert) == ATTNJIT_OK);  // nothing to convert
  CHECK(attnjit_convert_cache_validate(runtime, nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() == "attnjit_convert_cache_validate: params is NULL");
  convert.num_elements = 1000;
  convert.src = 0x10000;
  convert.dst = 0x20000;
  CHECK(attnjit_convert_cache_validate(runtime, &convert) == ATTNJIT_OK);
  convert.dst = 0x10100;
  CHECK(attnjit_convert_cache_validate(runtime, &convert) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::StartsWith("convert cache: src and dst overlap"));
  convert.dst = 0x20000;
  convert.to_fp8 = 0;
  convert.cache_format = ATTNJIT_KV_CACHE_AUTO;
  CHECK(attnjit_convert_cache_validate(runtime, &convert) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(lastError() ==
        "convert cache: kv_cache_dtype auto is not supported by convert_cache; use fp8_e4m3 or fp8_e5m2");
  convert.cache_format = ATTNJIT_KV_CACHE_FP8_E5M2;
  convert.scale = -0.0f;
  CHECK(attnjit_convert_cache_validate(runtime, &convert) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK_THAT(lastError(), Catch::Contains("must be finite and not zero"));
  attnjit_jit_destroy(runtime);
}

TEST_CASE("C MLA cache write on the GPU matches the float64 reference", "[capi][gpu]") {
  if (!attnjit::tests::gpuPresent()) return;
  REQUIRE(attnjit::runtime::activatePrimaryContext(0).isOk());  // for the test's own buffers
  namespace reference = attnjit::validation::reference;
  // 256 + 64 latent rows, block 16; kv_c and k_pe are slices of one f32
  // [tokens, 320 + 16] projection (token stride 336, k_pe 16-byte aligned).
  const int tokens = 29, rank = 256, rope = 64, blockSize = 16, numBlocks = 3, row = rank + rope;
  const int64_t projectionStride = row + 16, numSlots = int64_t{numBlocks} * blockSize;
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> dist(-600, 600);  // beyond e4m3's 448 after / scale: saturates
  std::vector<float> projection(size_t(tokens) * projectionStride);
  for (float& x : projection) x = dist(rng);
  std::vector<int64_t> slots(tokens);
  for (int t = 0; t < tokens; ++t) slots[t] = (int64_t{t} * 5 + 2) % numSlots;  // a permutation: one owner per slot
  slots[4] = slots[17] = -1;                                                       // padding tokens: skipped
  reference::MlaCacheWriteInputs in;
  in.numTokens = tokens;
  in.kvLoraRank = rank;
  in.ropeDim = rope;
  in.numSlots = numSlots;
  for (int t = 0; t < tokens; ++t) {
    const float* source = projection.data() + size_t(t) * projectionStride;
    in.kvC.insert(in.kvC.end(), source, source + rank);
    in.kPe.insert(in.kPe.end(), source + rank, source + row);
  }
  in.slots = slots;
  auto dProjection = uploadBytes(projection.data(), projection.size() * 4);
  auto dSlots = uploadBytes(slots.data(), slots.size() * 8);
  attnjit_jit* runtime = nullptr;
  REQUIRE(attnjit_jit_create(nullptr, &runtime) == ATTNJIT_OK);

  for (attnjit_kv_cache_format format : {ATTNJIT_KV_CACHE_AUTO, ATTNJIT_KV_CACHE_FP8_E4M3}) {
    const bool fp8 = format == ATTNJIT_KV_CACHE_FP8_E4M3;
    INFO((fp8 ? "fp8_e4m3" : "auto"));
    const size_t elementBytes = fp8 ? 1 : 4;
    const float scale = 1.5f;
    // Poison: an e4m3 NaN, or the f32 3.39e38.
    std::vector<unsigned char> cache(size_t(numSlots) * row * elementBytes, 0x7f);
    auto dCache = uploadBytes(cache.data(), cache.size());
    auto dScale = uploadBytes(&scale, sizeof scale);
    attnjit_mla_cache_write_params p;
    attnjit_mla_cache_write_params_init(&p);
    p.dtype = ATTNJIT_DTYPE_F32;
    p.cache_format = format;
    p.kv_lora_rank = rank;
    p.rope_dim = rope;
    p.block_size = blockSize;
    p.num_tokens = tokens;
    p.kv_c = dProjection.address();
    p.k_pe = dProjection.address() + rank * 4;
    p.kv_cache = dCache.address();
    p.slot_mapping = dSlots.address();
    p.scale = fp8 ? dScale.address() : 0;
    p.kv_c_stride_token = p.k_pe_stride_token = projectionStride;
    p.cache_stride_block = int64_t{blockSize} * row;
    p.cache_stride_token = row;
    REQUIRE(attnjit_mla_cache_write(runtime, &p) == ATTNJIT_OK);
    REQUIRE(attnjit::runtime::synchronizeContext());
    REQUIRE(dCache.copyToHost(cache.data(), cache.size()));

    in.scale = fp8 ? scale : 0;
    in.quantMax = fp8 ? reference::quantMax(reference::QuantFormat::Fp8E4M3) : 0;
    const reference::MlaCacheRows expected = reference::referenceMlaCacheWrite(in);
    int mismatches = 0, untouched = 0;
    double maxError = 0;
    for (int64_t slot = 0; slot < numSlots; ++slot)
      for (int e = 0; e < row; ++e) {
        const size_t i = size_t(slot) * row + size_t(e);
        if (expected.owner[size_t(slot)] < 0) {
          // A slot no token writes keeps its poison bytes.
          for (size_t b = 0; b < elementBytes; ++b) untouched += cache[i * elementBytes + b] == 0x7f ? 0 : 1;
          continue;
        }
        const double want = expected.values[i];
        double got = 0, allowed = 0;
        if (fp8) {
          got = reference::decodeFp8E4M3(cache[i]);
          allowed = reference::halfQuantStep(want, reference::QuantFormat::Fp8E4M3) + std::ldexp(std::abs(want), -22);
        } else {
          float value = 0;
          std::memcpy(&value, &cache[i * 4], 4);
          got = value;
        }
        const double error = std::isnan(got) ? std::numeric_limits<double>::infinity() : std::abs(got - want);
        maxError = std::max(maxError, error);
        mismatches += error > allowed ? 1 : 0;
      }
    INFO("max error " << maxError);
    CHECK(mismatches == 0);
    CHECK(untouched == 0);
  }
  attnjit_jit_destroy(runtime);
}
