// The C API (include/attnjit/attnjit.h): a C99 program compiled with the system
// C compiler against the header and linked to libattnjit.so
// (tests/data/capi/capi_smoke.c), and the API's contracts checked from here:
// status codes and messages, the thread-local last error, versioned structs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <unistd.h>

#include "attnjit/attnjit.h"
#include "compiler/PagedAttentionOp.h"
#include "test_paths.h"
#include "test_tools.h"

namespace {

// libattnjit.so: ATTNJIT_LIBRARY where set (a bundle), else the build tree's.
std::string sharedLibraryPath() { return attnjit::tests::environmentOr("ATTNJIT_LIBRARY", ATTNJIT_SHARED_LIBRARY_PATH); }

bool haveCCompiler() {
  int code = 0;
  attnjit::tests::runShell("cc --version", &code);
  return code == 0;
}

}  // namespace

TEST_CASE("a C99 program builds against attnjit.h and runs", "[capi]") {
#ifdef ATTNJIT_SANITIZED_BUILD
  WARN("skipped under ASan: a C program cannot load the instrumented libattnjit.so (runs in the Release suite)");
  return;
#endif
  namespace fs = std::filesystem;
  const fs::path source = fs::path(attnjit::tests::sourceDir()) / "tests/data/capi/capi_smoke.c";
  const fs::path include = fs::path(attnjit::tests::sourceDir()) / "include";
  if (!haveCCompiler() || !fs::exists(include / "attnjit/attnjit.h")) {
    WARN("skipped: no C compiler ('cc') or no include/attnjit here");
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
  attnjit_runtime* runtime = nullptr;
  REQUIRE(attnjit_runtime_create(nullptr, &runtime) == ATTNJIT_OK);
  CHECK(attnjit_kernel_compile(nullptr) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  CHECK(std::string(attnjit_last_error_message()) == "attnjit_kernel_compile: kernel is NULL");
  std::string otherThread = "unset";
  std::thread([&] { otherThread = attnjit_last_error_message(); }).join();
  CHECK(otherThread.empty());
  CHECK(std::string(attnjit_last_error_message()) == "attnjit_kernel_compile: kernel is NULL");
  size_t count = 0;
  CHECK(attnjit_kernel_num_params(nullptr, &count) == ATTNJIT_ERROR_INVALID_ARGUMENT);
  attnjit_runtime* second = nullptr;
  CHECK(attnjit_runtime_create(nullptr, &second) == ATTNJIT_OK);
  CHECK(std::string(attnjit_last_error_message()).empty());
  attnjit_runtime_destroy(second);
  attnjit_runtime_destroy(runtime);
}

TEST_CASE("versioned structs: older callers get defaults, newer ones an error", "[capi]") {
  attnjit_runtime* runtime = nullptr;
  REQUIRE(attnjit_runtime_create(nullptr, &runtime) == ATTNJIT_OK);
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
  attnjit_runtime_destroy(runtime);
}

TEST_CASE("C op structs reach the op validators field by field", "[capi]") {
  attnjit_runtime* runtime = nullptr;
  REQUIRE(attnjit_runtime_create(nullptr, &runtime) == ATTNJIT_OK);
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
  CHECK(attnjit_paged_attention_workspace_bytes(64, 32, 128, 4096) ==
        attnjit::ops::pagedAttentionWorkspaceBytes(64, 32, 128, 4096));
  CHECK(attnjit_paged_attention_workspace_bytes(64, 32, 128, 65536) > 0);
  if (attnjit_driver_status() != ATTNJIT_OK) {
    CHECK(attnjit_paged_attention(runtime, &paged) == ATTNJIT_ERROR_NO_DRIVER);
    CHECK_THAT(attnjit_last_error_message(), Catch::Contains("CUDA driver not available"));
  }
  attnjit_runtime_destroy(runtime);
}
