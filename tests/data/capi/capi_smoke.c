/* The C API from C99 (tests/test_capi.cpp compiles this with the system C
 * compiler, -std=c99 -Wall -Werror, links libattnjit.so and runs it). Prints
 * "capi_smoke: ok" and exits 0 when every check passes; otherwise names the
 * failed check and exits 1. The GPU part runs where a driver is present. */
#include <stdio.h>
#include <string.h>

#include "attnjit/attnjit.h"

static int failures = 0;

#define EXPECT(condition)                                                               \
  do {                                                                                  \
    if (!(condition)) {                                                                 \
      printf("FAILED line %d: %s (last error: %s)\n", __LINE__, #condition,             \
             attnjit_last_error_message());                                             \
      ++failures;                                                                       \
    }                                                                                   \
  } while (0)

/* The call fails with `status` and a message containing `text`. */
#define EXPECT_ERROR(call, status, text)                                                \
  do {                                                                                  \
    attnjit_status got_ = (call);                                                       \
    if (got_ != (status) || strstr(attnjit_last_error_message(), (text)) == NULL) {     \
      printf("FAILED line %d: %s gave %s '%s', expected %s with '%s'\n", __LINE__,      \
             #call, attnjit_status_name(got_), attnjit_last_error_message(),            \
             attnjit_status_name(status), (text));                                      \
      ++failures;                                                                       \
    } else {                                                                            \
      printf("error as expected: %s\n", attnjit_last_error_message());                  \
    }                                                                                   \
  } while (0)

static const char* const merge_spec =
    "family: merge_attn_states\n"
    "params:\n"
    "  dtype: bf16\n"
    "  num_heads: 8\n"
    "  head_size: 128\n"
    "  output_lse: false\n";

int main(void) {
  attnjit_jit* runtime = NULL;
  attnjit_jit* unused = NULL;
  attnjit_kernel* kernel = NULL;
  attnjit_jit_options options;
  attnjit_merge_attn_states_params merge;
  attnjit_mla_cache_write_params mla_write;
  attnjit_compile_stats stats;
  attnjit_param_info info;
  attnjit_arg args[2];
  attnjit_dim3 grid = {1, 8, 1};
  const char* ptx = NULL;
  size_t count = 0;

  printf("attnjit %s\n", attnjit_version());
  EXPECT(strlen(attnjit_version()) > 0);

  /* Bad arguments: a status and a message, never a crash. */
  attnjit_jit_options_init(&options);
  options.device = -1;
  EXPECT_ERROR(attnjit_jit_create(&options, &unused), ATTNJIT_ERROR_INVALID_ARGUMENT,
               "attnjit::Jit: device -1 is not a device ordinal");
  EXPECT(unused == NULL);
  options.struct_size = 0;
  EXPECT_ERROR(attnjit_jit_create(&options, &unused), ATTNJIT_ERROR_INVALID_ARGUMENT, "struct_size");
  EXPECT_ERROR(attnjit_jit_create(NULL, NULL), ATTNJIT_ERROR_INVALID_ARGUMENT, "jit is NULL");

  EXPECT(attnjit_jit_create(NULL, &runtime) == ATTNJIT_OK);
  EXPECT(runtime != NULL);
  EXPECT(strcmp(attnjit_last_error_message(), "") == 0);

  EXPECT_ERROR(attnjit_kernel_from_spec_text(runtime, NULL, NULL, &kernel), ATTNJIT_ERROR_INVALID_ARGUMENT,
               "yaml is NULL");
  EXPECT_ERROR(attnjit_kernel_from_spec_text(runtime, "family: merge_attn_states\nparams: [1]\n", NULL, &kernel),
               ATTNJIT_ERROR_SPEC, "<spec text>:2:");
  EXPECT_ERROR(attnjit_kernel_from_spec_file(runtime, "/nonexistent.yaml", NULL, &kernel), ATTNJIT_ERROR_SPEC,
               "/nonexistent.yaml");

  attnjit_merge_attn_states_params_init(&merge);
  merge.num_heads = 8;
  merge.head_size = 128;
  merge.num_tokens = 4;
  merge.output_stride_token = merge.prefix_stride_token = merge.suffix_stride_token = 8 * 128;
  merge.output_stride_head = merge.prefix_stride_head = merge.suffix_stride_head = 128;
  EXPECT_ERROR(attnjit_merge_attn_states_validate(runtime, &merge), ATTNJIT_ERROR_INVALID_ARGUMENT,
               "parameter 'output'");
  merge.dtype = (attnjit_dtype)9;
  EXPECT_ERROR(attnjit_merge_attn_states(runtime, &merge), ATTNJIT_ERROR_INVALID_ARGUMENT, "dtype 9");

  /* The MLA cache write: defaults, a located argument error, and zero tokens,
   * which launch nothing and so succeed without a driver. */
  attnjit_mla_cache_write_params_init(&mla_write);
  EXPECT(mla_write.struct_size == sizeof mla_write && mla_write.dtype == ATTNJIT_DTYPE_BF16);
  EXPECT(mla_write.kv_lora_rank == 512 && mla_write.rope_dim == 64);
  mla_write.block_size = 16;
  mla_write.num_tokens = 2;
  mla_write.k_pe = 0x10400;
  mla_write.kv_cache = 0x20000;
  mla_write.slot_mapping = 0x30000;
  mla_write.kv_c_stride_token = mla_write.k_pe_stride_token = 576;
  mla_write.cache_stride_block = 16 * 576;
  mla_write.cache_stride_token = 576;
  EXPECT_ERROR(attnjit_mla_cache_write_validate(runtime, &mla_write), ATTNJIT_ERROR_INVALID_ARGUMENT,
               "mla cache write: parameter 'kv_c'");
  mla_write.kv_c = 0x10000;
  EXPECT(attnjit_mla_cache_write_validate(runtime, &mla_write) == ATTNJIT_OK);
  mla_write.num_tokens = 0;
  EXPECT(attnjit_mla_cache_write(runtime, &mla_write) == ATTNJIT_OK);

  /* A kernel from spec text, compiled to PTX without a GPU. */
  EXPECT(attnjit_kernel_from_spec_text(runtime, merge_spec, NULL, &kernel) == ATTNJIT_OK);
  if (kernel != NULL) {
    printf("kernel %s\n", attnjit_kernel_name(kernel));
    EXPECT(strcmp(attnjit_kernel_name(kernel), "merge_attn_states_bf16_h8_d128_nolse") == 0);
    EXPECT(attnjit_kernel_num_params(kernel, &count) == ATTNJIT_OK && count == 12);
    info.struct_size = sizeof info;
    EXPECT(attnjit_kernel_param(kernel, 0, &info) == ATTNJIT_OK);
    EXPECT(strcmp(info.name, "output") == 0 && info.kind == ATTNJIT_ARG_POINTER && info.align_bytes == 16);
    EXPECT_ERROR(attnjit_kernel_param(kernel, 12, &info), ATTNJIT_ERROR_INVALID_ARGUMENT, "out of range");
    EXPECT(attnjit_kernel_compile(kernel) == ATTNJIT_OK);
    EXPECT(attnjit_kernel_ptx(kernel, &ptx) == ATTNJIT_OK && strstr(ptx, ".entry merge_attn_states") != NULL);
    stats.struct_size = sizeof stats;
    EXPECT(attnjit_kernel_stats(kernel, &stats) == ATTNJIT_OK);
    printf("compiled for %s: passes %.2f ms, LLVM %.2f + %.2f ms, PTX %.2f ms, %d threads\n", stats.target,
           stats.passes_ms, stats.llvm_lower_ms, stats.llvm_optimize_ms, stats.ptx_emit_ms, stats.threads);
    EXPECT(stats.passes_ms > 0 && stats.ptx_emit_ms > 0 && stats.threads > 0);
    EXPECT(stats.origin == ATTNJIT_ORIGIN_NOT_LOADED && stats.registers == -1);

    args[0] = attnjit_arg_pointer(0x10000);
    args[1] = attnjit_arg_int(4);
    EXPECT_ERROR(attnjit_kernel_launch(kernel, grid, args, 2, NULL), ATTNJIT_ERROR_INVALID_ARGUMENT,
                 "takes 12 arguments, got 2");

    if (attnjit_driver_status() == ATTNJIT_OK) {
      EXPECT(attnjit_kernel_load(kernel) == ATTNJIT_OK);
      EXPECT(attnjit_kernel_stats(kernel, &stats) == ATTNJIT_OK);
      printf("loaded (%d): %d registers, %d spill bytes, %.2f ms\n", (int)stats.origin, stats.registers,
             stats.spill_bytes, stats.load_ms);
      EXPECT(stats.origin != ATTNJIT_ORIGIN_NOT_LOADED && stats.registers > 0);
    } else {
      printf("GPU part skipped: %s\n", attnjit_last_error_message());
      EXPECT_ERROR(attnjit_kernel_load(kernel), ATTNJIT_ERROR_NO_DRIVER, "CUDA driver");
    }
  }
  attnjit_kernel_destroy(kernel);
  attnjit_jit_destroy(runtime);
  attnjit_jit_destroy(NULL);

  if (failures != 0) {
    printf("capi_smoke: %d check(s) failed\n", failures);
    return 1;
  }
  printf("capi_smoke: ok\n");
  return 0;
}
