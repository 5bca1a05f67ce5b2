/* Embedding attnjit from C: a runtime, a kernel from a spec file (argv[1], with
 * the variant argv[2]) or from spec text, compiled to PTX, with statistics. */
#include <stdio.h>
#include <string.h>

#include "attnjit/attnjit.h"

static int fail(const char* what) {
  fprintf(stderr, "embed_c: %s: %s\n", what, attnjit_last_error_message());
  return 1;
}

int main(int argc, char** argv) {
  static const char spec[] =
      "family: reshape_and_cache\n"
      "params:\n"
      "  dtype: bf16\n"
      "  kv_cache_dtype: fp8_e4m3\n"
      "  num_kv_heads: 8\n"
      "  head_size: 128\n"
      "  block_size: 16\n";
  attnjit_jit* runtime = NULL;
  attnjit_kernel* kernel = NULL;
  attnjit_compile_stats stats;
  const char* ptx = NULL;
  attnjit_status status;

  printf("attnjit %s\n", attnjit_version());
  if (attnjit_jit_create(NULL, &runtime) != ATTNJIT_OK) return fail("runtime");
  status = argc > 1 ? attnjit_kernel_from_spec_file(runtime, argv[1], argc > 2 ? argv[2] : NULL, &kernel)
                    : attnjit_kernel_from_spec_text(runtime, spec, NULL, &kernel);
  if (status != ATTNJIT_OK) return fail("spec");
  if (attnjit_kernel_ptx(kernel, &ptx) != ATTNJIT_OK) return fail("compile");
  stats.struct_size = sizeof stats;
  if (attnjit_kernel_stats(kernel, &stats) != ATTNJIT_OK) return fail("stats");
  printf("%s for %s: %zu bytes of PTX, passes %.1f ms, LLVM %.1f ms, PTX %.1f ms\n", attnjit_kernel_name(kernel),
         stats.target, strlen(ptx), stats.passes_ms, stats.llvm_lower_ms + stats.llvm_optimize_ms, stats.ptx_emit_ms);
  if (attnjit_driver_status() == ATTNJIT_OK) {
    if (attnjit_kernel_load(kernel) != ATTNJIT_OK) return fail("load");
    if (attnjit_kernel_stats(kernel, &stats) != ATTNJIT_OK) return fail("stats");
    printf("loaded: %d registers, %d spill bytes\n", stats.registers, stats.spill_bytes);
  } else {
    printf("GPU part skipped: %s\n", attnjit_last_error_message());
  }
  attnjit_kernel_destroy(kernel);
  attnjit_jit_destroy(runtime);
  return 0;
}
