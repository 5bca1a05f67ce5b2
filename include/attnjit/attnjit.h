/* attnjit's C API: the JIT handle, kernels from specs, launches, compile
 * statistics and the paged-attention, cache-write, merge, MLA cache-write and
 * MLA decode ops,
 * for C and for any language with a C FFI (Rust, Go, Python's ctypes:
 * python/attnjit).
 * Plain C99; link libattnjit.so (CMake: find_package(attnjit), target
 * attnjit::attnjit).
 *
 * Conventions
 * - Every function that can fail returns an attnjit_status; ATTNJIT_OK is 0.
 *   On failure attnjit_last_error_message() holds a readable message (the
 *   calling thread's, valid until its next attnjit call); on success it is "".
 * - Handles are opaque; each *_create / kernel_from_* has its *_destroy, which
 *   accepts NULL. Destroy them in any order: a kernel keeps what it needs of
 *   its JIT handle.
 * - Structs passed in or out start with `struct_size`: set it with the struct's
 *   *_init function (inputs) or to sizeof (outputs). Fields are only ever
 *   appended, so a program built against an older header keeps working (the
 *   missing fields take their defaults).
 * - Device pointers are uint64_t (CUdeviceptr); streams are CUstream passed as
 *   void* (NULL: the default stream). Strides are in elements.
 * - Thread-safe: handles may be shared between threads. No function throws or
 *   aborts on bad input.
 */
#ifndef ATTNJIT_ATTNJIT_H
#define ATTNJIT_ATTNJIT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attnjit_status {
  ATTNJIT_OK = 0,
  ATTNJIT_ERROR_INVALID_ARGUMENT = 1, /* a NULL handle, bad shape, stride, pointer or option */
  ATTNJIT_ERROR_SPEC = 2,             /* the spec (text or file) is malformed, or no such variant */
  ATTNJIT_ERROR_COMPILE = 3,          /* the kernel failed to compile */
  ATTNJIT_ERROR_NO_DRIVER = 4,        /* no CUDA driver or GPU: only CPU work is possible */
  ATTNJIT_ERROR_CUDA = 5,             /* a CUDA driver call failed (load, launch) */
  ATTNJIT_ERROR_INTERNAL = 6          /* out of host memory, or an attnjit bug */
} attnjit_status;

/* The library's version, e.g. "0.1.0". */
const char* attnjit_version(void);
/* Why the calling thread's last failing call failed ("" after a success). */
const char* attnjit_last_error_message(void);
/* "ok", "invalid-argument", "spec", "compile", "no-driver", "cuda", "internal". */
const char* attnjit_status_name(attnjit_status status);
/* ATTNJIT_OK when a CUDA driver and at least one GPU are usable, else
 * ATTNJIT_ERROR_NO_DRIVER with the reason. */
attnjit_status attnjit_driver_status(void);

typedef enum attnjit_dtype { ATTNJIT_DTYPE_F32 = 0, ATTNJIT_DTYPE_F16 = 1, ATTNJIT_DTYPE_BF16 = 2 } attnjit_dtype;

/* vLLM's kv_cache_dtype (compiler/kernels/CacheWrite.h). */
typedef enum attnjit_kv_cache_format {
  ATTNJIT_KV_CACHE_AUTO = 0,                /* the keys' and values' dtype */
  ATTNJIT_KV_CACHE_FP8_E4M3 = 1,            /* per-tensor scale */
  ATTNJIT_KV_CACHE_FP8_E5M2 = 2,            /* per-tensor scale */
  ATTNJIT_KV_CACHE_INT8_PER_TOKEN_HEAD = 3, /* f32 scale per (token, head) row, inline or separate */
  ATTNJIT_KV_CACHE_FP8_PER_TOKEN_HEAD = 4,  /* e4m3, f32 scale per (token, head) row, likewise */
  ATTNJIT_KV_CACHE_INT4_PER_TOKEN_HEAD = 5  /* two values per byte, f32 scale per row (see the layout below) */
} attnjit_kv_cache_format;

/* How f32 attention computes its dots (dtype F32 only). */
typedef enum attnjit_fp32_precision {
  /* Q·K^T and P·V on the TF32 tensor cores: operands rounded to 11
   * significant bits (to nearest, ties away), f32 sums; vLLM's numerics */
  ATTNJIT_FP32_TF32 = 0,
  ATTNJIT_FP32_IEEE = 1 /* exact f32 products (FMAs) */
} attnjit_fp32_precision;

/* Whether a paged-attention call takes a plan measured for its bucket
 * (attnjit_paged_attention_tune, `attnjit tune`) over the op's rules. */
typedef enum attnjit_plan_tuning {
  ATTNJIT_PLAN_TUNING_ENVIRONMENT = 0, /* ATTNJIT_TUNE: recorded (unset), off, first-use */
  ATTNJIT_PLAN_TUNING_OFF = 1,         /* the rules */
  ATTNJIT_PLAN_TUNING_RECORDED = 2,    /* a recorded plan where this device has one */
  ATTNJIT_PLAN_TUNING_FIRST_USE = 3    /* recorded; a bucket without one is tuned by its first call */
} attnjit_plan_tuning;

/* Where the per-token-head formats keep their f32 row scales. */
typedef enum attnjit_kv_scale_layout {
  ATTNJIT_KV_SCALES_INLINE = 0,  /* after each row's values (rows of D + 4 bytes, D/2 + 4 for int4) */
  ATTNJIT_KV_SCALES_SEPARATE = 1 /* vLLM's current layout: rows of D bytes (D/2 for int4), scales in
                                  * k_scale_cache / v_scale_cache [num_blocks, block_size, Hkv] f32;
                                  * int4 is then vLLM's asymmetric format (unsigned nibbles, the zero
                                  * point in each scale's low four mantissa bits) */
} attnjit_kv_scale_layout;

/* ---- JIT handle ------------------------------------------------------- */

typedef struct attnjit_jit attnjit_jit;

typedef struct attnjit_jit_options {
  size_t struct_size;
  int device;            /* CUDA device ordinal (default 0) */
  const char* cache_dir; /* disk kernel cache; NULL: ATTNJIT_CACHE_DIR, else ~/.cache/attnjit */
  int bypass_cache;      /* nonzero: compile every kernel afresh */
  const char* target;    /* e.g. "sm_90a"; NULL: the device's, else each spec's */
} attnjit_jit_options;

void attnjit_jit_options_init(attnjit_jit_options* options);
/* `options` may be NULL (defaults). Succeeds without a CUDA driver, for
 * compiling and validating on a CPU machine. */
attnjit_status attnjit_jit_create(const attnjit_jit_options* options, attnjit_jit** jit);
void attnjit_jit_destroy(attnjit_jit* jit);
/* The code generation target ("" when none is known). Valid while the JIT handle lives. */
const char* attnjit_jit_target(const attnjit_jit* jit);

/* ---- Kernels from specs ----------------------------------------------- */

typedef struct attnjit_kernel attnjit_kernel;

/* A kernel from a YAML spec (specs/README.md), as text or a file. `variant`
 * names one of the spec's variants (`attnjit list SPEC`); NULL or "" when the
 * spec has exactly one. */
attnjit_status attnjit_kernel_from_spec_text(attnjit_jit* jit, const char* yaml, const char* variant,
                                             attnjit_kernel** kernel);
attnjit_status attnjit_kernel_from_spec_file(attnjit_jit* jit, const char* path, const char* variant,
                                             attnjit_kernel** kernel);
void attnjit_kernel_destroy(attnjit_kernel* kernel);
/* The kernel's name; valid while the kernel lives. */
const char* attnjit_kernel_name(const attnjit_kernel* kernel);

typedef enum attnjit_arg_kind { ATTNJIT_ARG_POINTER = 0, ATTNJIT_ARG_INT = 1, ATTNJIT_ARG_REAL = 2 } attnjit_arg_kind;

typedef struct attnjit_param_info {
  size_t struct_size;
  const char* name; /* valid while the kernel lives */
  const char* type; /* tile-IR type, e.g. "ptr<global, bf16>", "i64" */
  attnjit_arg_kind kind;
  int64_t align_bytes;  /* pointers: the alignment the kernel assumes (0: none) */
  int64_t divisibility; /* integers: the value must be a multiple of this (0: none) */
} attnjit_param_info;

attnjit_status attnjit_kernel_num_params(const attnjit_kernel* kernel, size_t* count);
/* info->struct_size must be set (sizeof(attnjit_param_info)). */
attnjit_status attnjit_kernel_param(const attnjit_kernel* kernel, size_t index, attnjit_param_info* info);

/* Compiles to PTX for the JIT handle's target; needs no GPU. */
attnjit_status attnjit_kernel_compile(attnjit_kernel* kernel);
/* The PTX, NUL-terminated (compiles first when needed); valid while the kernel lives. */
attnjit_status attnjit_kernel_ptx(attnjit_kernel* kernel, const char** ptx);
/* Loads the kernel on the JIT handle's device (memory cache, disk cache, else compile). */
attnjit_status attnjit_kernel_load(attnjit_kernel* kernel);

/* One launch argument; build it with the helpers below. */
typedef struct attnjit_arg {
  attnjit_arg_kind kind;
  uint64_t pointer;
  int64_t integer;
  double real;
} attnjit_arg;

static inline attnjit_arg attnjit_arg_pointer(uint64_t device_pointer) {
  attnjit_arg a = {ATTNJIT_ARG_POINTER, 0, 0, 0.0};
  a.pointer = device_pointer;
  return a;
}
static inline attnjit_arg attnjit_arg_int(int64_t value) {
  attnjit_arg a = {ATTNJIT_ARG_INT, 0, 0, 0.0};
  a.integer = value;
  return a;
}
static inline attnjit_arg attnjit_arg_real(double value) {
  attnjit_arg a = {ATTNJIT_ARG_REAL, 0, 0, 0.0};
  a.real = value;
  return a;
}

typedef struct attnjit_dim3 {
  unsigned x, y, z;
} attnjit_dim3;

/* Checks the arguments against the kernel's parameters (count, kinds, NULL or
 * misaligned pointers, stride divisibility), loads the kernel if needed and
 * launches `grid` blocks on `stream`. Asynchronous. */
attnjit_status attnjit_kernel_launch(attnjit_kernel* kernel, attnjit_dim3 grid, const attnjit_arg* args,
                                     size_t num_args, void* stream);

typedef enum attnjit_kernel_origin {
  ATTNJIT_ORIGIN_NOT_LOADED = 0, /* compiled to PTX at most */
  ATTNJIT_ORIGIN_COMPILED = 1,   /* compiled by this process */
  ATTNJIT_ORIGIN_DISK_CACHE = 2, /* cubin from the disk cache */
  ATTNJIT_ORIGIN_MEMORY = 3      /* already loaded in this process */
} attnjit_kernel_origin;

typedef struct attnjit_compile_stats {
  size_t struct_size;
  char target[16];
  attnjit_kernel_origin origin;
  /* Milliseconds per stage; 0 for a stage that did not run in this process. */
  double passes_ms, llvm_lower_ms, llvm_optimize_ms, ptx_emit_ms;
  double load_ms; /* the whole load: passes, cache lookup, any compile, module load */
  int threads, dynamic_shared_bytes;
  int registers, spill_bytes, static_shared_bytes; /* -1 until loaded */
} attnjit_compile_stats;

/* stats->struct_size must be set (sizeof(attnjit_compile_stats)). */
attnjit_status attnjit_kernel_stats(const attnjit_kernel* kernel, attnjit_compile_stats* stats);

/* ---- Ops ---------------------------------------------------------------- */
/* Each op validates without touching the GPU (errors name the argument), then
 * compiles or loads its kernel on first use and launches on `stream`, on the
 * stream's device (the default stream: the calling thread's current context,
 * else the Jit's device), restoring the caller's current context after. The
 * *_validate functions run the checks only. Layouts: compiler/ops/PagedAttentionOp.h,
 * compiler/ops/CompanionOps.h and compiler/ops/MlaDecodeOp.h. */

typedef struct attnjit_paged_attention_params {
  size_t struct_size;
  /* static: select the kernel */
  attnjit_dtype dtype; /* q, out (unless output_scale) and the KV cache */
  int num_query_heads, num_kv_heads, head_size, block_size;
  int causal; /* default 1 */
  attnjit_kv_cache_format kv_cache_format;
  int sliding_window;  /* 0: off (compiled into the kernel) */
  double softcap;      /* 0: off (compiled into the kernel) */
  int batch_invariant; /* nonzero: one fixed tiling, no split-KV, whatever the batch */
  /* the batch */
  int num_seqs;
  int64_t num_tokens; /* total query tokens (cu_seqlens_q[num_seqs]) */
  int max_query_len;  /* longest query of the batch (picks the tiling) */
  int max_seq_len;    /* longest seq_len of the batch; 0: unknown (split-KV then
                       * cuts each sequence's keys evenly on the GPU) */
  float scale;        /* softmax scale, usually 1/sqrt(head_size) */
  /* device pointers, 16-byte aligned: out, q [num_tokens, Hq, D]; kv_cache
   * (num_blocks, 2, block_size, Hkv, row); block_tables [num_seqs, max_blocks]
   * i32; seq_lens [num_seqs] i32; cu_seqlens_q [num_seqs + 1] i32 */
  uint64_t out, q, kv_cache, block_tables, seq_lens, cu_seqlens_q;
  uint64_t k_scale, v_scale;      /* f32 scalars: the per-tensor fp8 formats */
  uint64_t alibi_slopes, sinks;   /* f32 [Hq] or 0 (off) */
  uint64_t lse;                   /* f32 LSE out at lse[head * lse_stride_head + token], or 0 */
  int64_t lse_stride_head;
  uint64_t workspace;             /* split-KV scratch, or 0 (see no_runtime_scratch) */
  uint64_t workspace_bytes;       /* see attnjit_paged_attention_workspace_bytes */
  /* strides, in elements */
  int64_t q_stride_token, q_stride_head, o_stride_token, o_stride_head;
  int64_t block_table_stride;
  int64_t kv_stride_block, kv_stride_kv, kv_stride_token, kv_stride_head;
  void* stream;
  /* added later (older callers' struct_size leaves them at their defaults) */
  uint64_t causal_flags; /* i8 [num_seqs], nonzero = causal, or 0: `causal` for all */
  int num_sms;           /* SMs the split-KV plan fills; 0: the device's */
  /* DiffKV: the head size Dv of v and out (0: head_size). The cache is then
   * usually the packed (num_blocks, block_size, Hkv, head_size + Dv) with
   * kv_stride_kv = head_size; out, its strides and the workspace are Dv-sized. */
  int value_head_size;
  /* Debugging: nonzero runs the bounds-checked kernel, which checks
   * cu_seqlens_q, seq_lens and every block-table entry it uses against
   * num_blocks and reports a violation as this call's error (also
   * ATTNJIT_CHECK_BOUNDS=1). Synchronizes the stream: not for CUDA graphs. */
  int check_bounds;
  int num_blocks; /* blocks of the KV cache; required by check_bounds */
  /* shortest seq_len of the batch, or 0 (unknown): with max_seq_len it marks
   * batches of nearly equal lengths, which decode launches run at two CTAs
   * per SM (faster there, slower with mixed lengths), and batches of uneven
   * lengths, which a call with a workspace splits into segments of at most
   * 3/8 of the longest sequence */
  int min_seq_len;
  /* nonzero (with alibi_slopes): vLLM's sqrt-ALiBi, each score gets
   * -slope * sqrt(p - j) for keys j at or before the query position p */
  int alibi_sqrt;
  /* f32 scalar in device memory, or 0: vLLM's fp8 output. When set, out holds
   * fp8 e4m3 (one byte per element, strides still in elements): the output
   * divided by *output_scale, saturated at +-448. */
  uint64_t output_scale;
  /* non-causal rows' right window bound (compiled into the kernel): 0 = the
   * sliding window's own (symmetric), r > 0: key j visible iff j - p < r,
   * -1: none (a left-only window) */
  int sliding_window_right;
  /* f32 scalar in device memory, or 0: fp8 queries. When set, q holds fp8 e4m3
   * (one byte per element, strides in elements) standing for q * *q_scale;
   * dtype is then the compute and output dtype. */
  uint64_t q_scale;
  /* Without a workspace, a call that splits takes its
   * scratch from a stream-ordered pool the runtime owns, allocated and freed on
   * `stream` (no synchronization; graph capture records allocation nodes).
   * Nonzero: such calls run unsplit instead. */
  int no_runtime_scratch;
  /* chunked local attention (Llama 4's attention_chunk_size; compiled into the
   * kernel): a query sees only keys of its own chunk of this many positions;
   * 0: off */
  int attention_chunk_size;
  /* i32 [num_seqs, mm_prefix_ranges, 2], or 0: vLLM's mm_prefix_range,
   * bidirectional [first, last] position ranges per sequence (first >= last:
   * unused): a query inside a range also sees the range's keys.
   * mm_prefix_ranges: the tensor's second extent, 1 to 32. */
  uint64_t mm_prefix_range;
  int mm_prefix_ranges;
  /* f32 [n, n], or 0: vLLM's qq_bias, added to the score of a sequence's
   * query i against the key of its query k (i, k < n); qq_bias_stride = n,
   * at most 46340 (32-bit offsets) */
  uint64_t qq_bias;
  int64_t qq_bias_stride;
  /* dtype F32: TF32 tensor-core dots (default) or exact IEEE f32; ignored
   * for F16 and BF16 */
  attnjit_fp32_precision fp32_precision;
  /* recorded plans and tuning on first use (compiler/ops/PagedAttentionTuning.h);
   * calls without max_seq_len, batch-invariant and bounds-checked ones keep the rules */
  attnjit_plan_tuning plan_tuning;
  /* per-token-head formats: where the row scales are. SEPARATE needs
   * k_scale_cache and v_scale_cache (f32, 4-byte aligned) with strides in f32
   * elements, shared by both; INLINE (default) needs them 0 */
  attnjit_kv_scale_layout kv_scale_layout;
  uint64_t k_scale_cache, v_scale_cache;
  int64_t scale_stride_block, scale_stride_token, scale_stride_head;
} attnjit_paged_attention_params;

void attnjit_paged_attention_params_init(attnjit_paged_attention_params* params);
/* *bytes = the split-KV workspace for batches of at most max_num_tokens query
 * tokens and sequences of at most max_seq_len keys (0 when such batches never
 * split): allocate once, pass to every call. Sizes out of range (negative, more
 * than 2^31 - 1 tokens, more than 1024 heads, head_size above 1024) are
 * ATTNJIT_ERROR_INVALID_ARGUMENT. */
attnjit_status attnjit_paged_attention_workspace_bytes(int64_t max_num_tokens, int num_query_heads, int head_size,
                                                       int max_seq_len, uint64_t* bytes);
attnjit_status attnjit_paged_attention_validate(attnjit_jit* jit, const attnjit_paged_attention_params* params);
attnjit_status attnjit_paged_attention(attnjit_jit* jit, const attnjit_paged_attention_params* params);
/* Compiles or loads, on up to `threads` threads (0: every core), every kernel
 * attnjit_paged_attention may launch for calls with these static fields (dtype,
 * heads, head sizes, block size, cache format, window, softcap, the feature
 * pointers' presence; batch fields and pointer values are ignored), so that the
 * first steps do not compile; *kernels_ready = how many (may be NULL). */
attnjit_status attnjit_paged_attention_warmup(attnjit_jit* jit, const attnjit_paged_attention_params* params,
                                              int threads, int* kernels_ready);

/* Measures this call's candidate plans (KV tile and warps; for decode the
 * split-KV segments and the CTAs-per-SM cap) on its own buffers and stream,
 * records the fastest for the call's bucket on this device (memory and the disk
 * cache) and runs it, so out holds its result. Synchronizes the stream; seconds
 * per bucket; ATTNJIT_ERROR_INVALID_ARGUMENT for calls that are never tuned
 * (no max_seq_len, batch-invariant, bounds-checked) and inside a graph capture.
 * *rule_ms and *tuned_ms (may be NULL): the medians of the rule's plan and of
 * the recorded one. */
attnjit_status attnjit_paged_attention_tune(attnjit_jit* jit, const attnjit_paged_attention_params* params,
                                            double* rule_ms, double* tuned_ms);

typedef struct attnjit_cache_write_params {
  size_t struct_size;
  attnjit_dtype dtype; /* keys and values */
  attnjit_kv_cache_format cache_format;
  int num_kv_heads, head_size, block_size;
  int64_t num_tokens; /* rows of key/value, entries of slot_mapping (0: nothing to do) */
  /* device pointers, 16-byte aligned: key, value [num_tokens, Hkv, D]; kv_cache
   * (num_blocks, 2, block_size, Hkv, row); slot_mapping [num_tokens] i64 (-1:
   * skip); k_scale, v_scale: f32 scalars, for the per-tensor fp8 formats only */
  uint64_t key, value, kv_cache, slot_mapping, k_scale, v_scale;
  int64_t key_stride_token, key_stride_head, value_stride_token, value_stride_head;
  int64_t kv_stride_block, kv_stride_kv, kv_stride_token, kv_stride_head; /* in cache elements */
  void* stream;
  /* added later (older callers' struct_size leaves them at their defaults) */
  int value_head_size; /* DiffKV: the values' head size Dv (0: head_size) */
  /* Debugging: nonzero runs the bounds-checked kernel, which skips and reports
   * a slot_mapping entry that is neither -1 nor inside the cache's
   * num_blocks * block_size slots (also ATTNJIT_CHECK_BOUNDS=1). Synchronizes
   * the stream: not for CUDA graphs. */
  int check_bounds;
  int num_blocks; /* blocks of the KV cache; required by check_bounds */
  /* nonzero (fp8_e4m3 / fp8_e5m2): k_scale and v_scale hold one f32 per KV
   * head, [num_kv_heads], instead of one for the tensor */
  int per_head_scales;
  /* per-token-head formats: where the row scales go (see
   * attnjit_paged_attention_params: the same fields) */
  attnjit_kv_scale_layout kv_scale_layout;
  uint64_t k_scale_cache, v_scale_cache;
  int64_t scale_stride_block, scale_stride_token, scale_stride_head;
} attnjit_cache_write_params;

void attnjit_cache_write_params_init(attnjit_cache_write_params* params);
attnjit_status attnjit_cache_write_validate(attnjit_jit* jit, const attnjit_cache_write_params* params);
attnjit_status attnjit_cache_write(attnjit_jit* jit, const attnjit_cache_write_params* params);

typedef struct attnjit_merge_attn_states_params {
  size_t struct_size;
  attnjit_dtype dtype; /* the three outputs; LSEs are f32 */
  int num_heads, head_size;
  int64_t num_tokens; /* 0: nothing to do */
  /* device pointers, 16-byte aligned: outputs [num_tokens, num_heads, head_size];
   * LSEs f32 [num_heads, num_tokens]; output_lse may be 0 (not written) */
  uint64_t output, output_lse, prefix_output, prefix_lse, suffix_output, suffix_lse;
  int64_t output_stride_token, output_stride_head, prefix_stride_token, prefix_stride_head;
  int64_t suffix_stride_token, suffix_stride_head;
  void* stream;
  /* fp8 output: a f32 scalar in device memory; non-zero makes output fp8 e4m3,
   * merged * (1 / scale) saturated at +-448. 0: output in dtype. */
  uint64_t output_scale;
  /* tokens at or after this one take the suffix's output and LSE as they are
   * (their prefix is not read); -1 (the default) or >= num_tokens: all merge */
  int64_t prefill_tokens_with_context;
} attnjit_merge_attn_states_params;

void attnjit_merge_attn_states_params_init(attnjit_merge_attn_states_params* params);
attnjit_status attnjit_merge_attn_states_validate(attnjit_jit* jit,
                                                  const attnjit_merge_attn_states_params* params);
attnjit_status attnjit_merge_attn_states(attnjit_jit* jit, const attnjit_merge_attn_states_params* params);

/* The N-way merge (context-parallel decode): N partial outputs merged by
 * their LSEs (compiler/kernels/MergePartials.h). One kernel serves every N. */
typedef struct attnjit_merge_partials_params {
  size_t struct_size;
  attnjit_dtype dtype; /* partial outputs and output; LSEs are f32 */
  int num_heads, head_size;
  int num_partials;   /* N >= 1 */
  int64_t num_tokens; /* 0: nothing to do */
  /* device pointers, 16-byte aligned: output [num_tokens, num_heads, head_size];
   * output_lse f32 [num_heads, num_tokens] contiguous, or 0 (not written);
   * partial_outputs [N, num_tokens, num_heads, head_size]; partial_lses f32,
   * partial i at i * lse_stride_partial, each [num_heads, num_tokens] */
  uint64_t output, output_lse, partial_outputs, partial_lses;
  int64_t output_stride_token, output_stride_head;
  int64_t partial_stride_partial, partial_stride_token, partial_stride_head;
  int64_t lse_stride_partial; /* at least num_heads * num_tokens when N > 1 */
  void* stream;
} attnjit_merge_partials_params;

void attnjit_merge_partials_params_init(attnjit_merge_partials_params* params);
attnjit_status attnjit_merge_partials_validate(attnjit_jit* jit, const attnjit_merge_partials_params* params);
attnjit_status attnjit_merge_partials(attnjit_jit* jit, const attnjit_merge_partials_params* params);

/* The MLA latent cache write (vLLM's concat_and_cache_mla;
 * compiler/kernels/MlaCacheWrite.h): token t's kv_c ‖ k_pe becomes row
 * slot_mapping[t] of the latent cache that attnjit_mla_decode reads. */
typedef struct attnjit_mla_cache_write_params {
  size_t struct_size;
  attnjit_dtype dtype;                  /* kv_c and k_pe (default BF16) */
  attnjit_kv_cache_format cache_format; /* AUTO (dtype), FP8_E4M3 or FP8_E5M2 */
  int kv_lora_rank;                     /* L: 512 (default) or 256 */
  int rope_dim;                         /* R: 64 (default) */
  int block_size;
  int64_t num_tokens; /* rows of kv_c and k_pe, entries of slot_mapping (0: nothing to do) */
  /* device pointers, 16-byte aligned: kv_c [num_tokens, L], k_pe [num_tokens,
   * R] (unit element stride; often two slices of one projection output);
   * kv_cache (num_blocks, block_size, L + R); slot_mapping [num_tokens] i64
   * (-1: skip); scale: f32 scalar, for the FP8 formats only (stores x / scale) */
  uint64_t kv_c, k_pe, kv_cache, slot_mapping, scale;
  int64_t kv_c_stride_token, k_pe_stride_token;    /* multiples of 8 */
  int64_t cache_stride_block, cache_stride_token;  /* in cache elements, multiples of 16 */
  void* stream;
} attnjit_mla_cache_write_params;

void attnjit_mla_cache_write_params_init(attnjit_mla_cache_write_params* params);
attnjit_status attnjit_mla_cache_write_validate(attnjit_jit* jit,
                                                const attnjit_mla_cache_write_params* params);
attnjit_status attnjit_mla_cache_write(attnjit_jit* jit, const attnjit_mla_cache_write_params* params);

/* The gather of a batch's cached rows (vLLM's cp_gather_cache and, for the
 * FP8 formats, gather_and_maybe_dequant_cache; compiler/kernels/GatherCache.h):
 * dst[cu_seq_lens[s] + i] = cache row of position seq_starts[s] + i of sequence
 * s (through block_table), times scale for FP8 caches. */
typedef struct attnjit_gather_cache_params {
  size_t struct_size;
  attnjit_dtype dtype;                  /* dst, and the cache for AUTO (default BF16) */
  attnjit_kv_cache_format cache_format; /* AUTO (copy), FP8_E4M3 or FP8_E5M2 (dequantize) */
  int entry_size;                       /* elements of a cache row (default 576 = 512 + 64) */
  int block_size;
  int num_seqs;
  int64_t num_tokens; /* rows of dst: cu_seq_lens[num_seqs] (0: nothing to do) */
  /* device pointers, 16-byte aligned: dst [num_tokens, entry]; cache (num_blocks,
   * block_size, entry); block_table [num_seqs, max_blocks] i32; cu_seq_lens
   * [num_seqs + 1] i32; seq_starts [num_seqs] i32 or 0 (every sequence from
   * position 0); scale: f32 scalar, for the FP8 formats only */
  uint64_t dst, cache, block_table, cu_seq_lens, seq_starts, scale;
  int64_t dst_stride_token, block_table_stride;
  int64_t cache_stride_block, cache_stride_token; /* in cache elements */
  void* stream;
} attnjit_gather_cache_params;

void attnjit_gather_cache_params_init(attnjit_gather_cache_params* params);
attnjit_status attnjit_gather_cache_validate(attnjit_jit* jit, const attnjit_gather_cache_params* params);
attnjit_status attnjit_gather_cache(attnjit_jit* jit, const attnjit_gather_cache_params* params);

/* Whole cache blocks copied between two caches, host or device on either side,
 * or inside one (vLLM's swap_blocks and copy_blocks; compiler/ops/SwapBlocks.h):
 * for each pair i in order, block block_mapping[2i + 1] of dst = block
 * block_mapping[2i] of src, block b being the block_bytes bytes at base + b *
 * stride. Many blocks inside the current GPU: one copy_blocks kernel (its
 * mapping copied into the runtime's stream-ordered scratch). Otherwise driver
 * copies on the stream, runs of consecutive blocks merged into one copy,
 * copies that do not depend on each other issued as one cuMemcpyBatchAsync
 * where the driver has it (a call on the legacy default stream runs that
 * batch on a runtime-owned stream fenced by events). Host
 * memory should be pinned (required under CUDA-graph capture; pageable sources
 * are copied one block at a time). */
typedef struct attnjit_swap_blocks_params {
  size_t struct_size;
  int64_t block_bytes;                        /* bytes of one block */
  int64_t src_block_stride, dst_block_stride; /* bytes between blocks; 0 = block_bytes */
  int64_t src_num_blocks, dst_num_blocks;     /* every mapped index must be below them */
  uint64_t src, dst;                          /* base addresses, device or host */
  const int64_t* block_mapping;               /* host memory: num_pairs (src, dst) pairs */
  int64_t num_pairs;                          /* 0: nothing to do */
  void* stream;
} attnjit_swap_blocks_params;

void attnjit_swap_blocks_params_init(attnjit_swap_blocks_params* params);
attnjit_status attnjit_swap_blocks_validate(attnjit_jit* jit, const attnjit_swap_blocks_params* params);
attnjit_status attnjit_swap_blocks(attnjit_jit* jit, const attnjit_swap_blocks_params* params);

/* A whole cache (any contiguous tensor) converted to or from per-tensor FP8
 * (vLLM's convert_fp8; compiler/kernels/ConvertCache.h): to FP8, dst[i] =
 * fp8(src[i] / scale), rounded to nearest even and saturated; from FP8, dst[i] =
 * src[i] * scale in dtype. src and dst must not overlap. */
typedef struct attnjit_convert_cache_params {
  size_t struct_size;
  attnjit_dtype dtype;                  /* the wide side: F32, F16 or BF16 (default BF16) */
  attnjit_kv_cache_format cache_format; /* FP8_E4M3 (default) or FP8_E5M2 */
  int to_fp8;                           /* 1 (default): dtype -> FP8; 0: FP8 -> dtype */
  int64_t num_elements;                 /* 0: nothing to do */
  uint64_t src, dst;                    /* device pointers, aligned to their element size */
  float scale;                          /* finite, not 0 (default 1) */
  void* stream;
} attnjit_convert_cache_params;

void attnjit_convert_cache_params_init(attnjit_convert_cache_params* params);
attnjit_status attnjit_convert_cache_validate(attnjit_jit* jit, const attnjit_convert_cache_params* params);
attnjit_status attnjit_convert_cache(attnjit_jit* jit, const attnjit_convert_cache_params* params);

/* MLA latent decode (vLLM's TRITON_MLA decode; compiler/ops/MlaDecodeOp.h). */

/* How the MLA decode chooses its number of KV splits. */
typedef enum attnjit_mla_split_rule {
  /* Split only where the GPU would otherwise wait on a few long programs (about
   * total key work / (2 * SMs) keys per program; uses sum_seq_lens when set). */
  ATTNJIT_MLA_SPLIT_BALANCED = 0,
  /* vLLM's: min(next_pow2(max(1, max_seq_len / 512)), 2 * SMs), whatever the batch. */
  ATTNJIT_MLA_SPLIT_VLLM = 1
} attnjit_mla_split_rule;

typedef struct attnjit_mla_decode_params {
  size_t struct_size;
  /* static: select the kernel */
  attnjit_dtype dtype;                     /* q and out: F32, F16 or BF16 (default BF16) */
  attnjit_kv_cache_format kv_cache_format; /* AUTO (dtype) or FP8_E4M3 */
  int kv_lora_rank;                        /* L: 512 (default) or 256 */
  int rope_dim;                            /* R: 64 (default) */
  int num_heads;                           /* H: 16 to 128 */
  int block_size;                          /* 1 to 256 */
  int batch_invariant;                     /* nonzero: one split, one tiling, whatever the batch */
  attnjit_mla_split_rule split_rule;       /* default BALANCED */
  /* the batch */
  int num_seqs;         /* B */
  int max_seq_len;      /* longest seq_lens entry; 0: unknown (no split-KV) */
  int64_t sum_seq_lens; /* sum of seq_lens when known on the host (0: unknown) */
  int num_sms;          /* SMs to fill; 0: the op's device's */
  float scale;          /* softmax scale */
  /* device pointers, 16-byte aligned: q [B, H, L + R], out [B, H, L], kv_cache
   * (num_blocks, block_size, L + R), block_tables [B, max_blocks] i32,
   * seq_lens [B] i32 */
  uint64_t out, q, kv_cache, block_tables, seq_lens;
  uint64_t kv_scale; /* f32 scalar: FP8_E4M3 only */
  /* f32 natural-log LSE at lse[b * lse_stride_batch + h * lse_stride_head], or
   * 0: [B, H] is strides (H, 1), the merge kernels' [H, B] is (1, B) */
  uint64_t lse;
  int64_t lse_stride_batch, lse_stride_head;
  uint64_t workspace;       /* split-KV scratch, or 0 (see no_runtime_scratch) */
  uint64_t workspace_bytes; /* see attnjit_mla_decode_workspace_bytes */
  /* strides, in elements */
  int64_t q_stride_batch, q_stride_head, o_stride_batch, o_stride_head;
  int64_t block_table_stride, kv_stride_block, kv_stride_token;
  void* stream;
  /* added later (older callers' struct_size leaves them at their defaults) */
  /* as attnjit_paged_attention_params' no_runtime_scratch */
  int no_runtime_scratch;
  /* dtype F32: TF32 tensor-core dots (default) or exact IEEE f32 */
  attnjit_fp32_precision fp32_precision;
} attnjit_mla_decode_params;

void attnjit_mla_decode_params_init(attnjit_mla_decode_params* params);
/* *bytes = the split-KV workspace for batches of at most max_num_seqs sequences
 * of at most max_seq_len keys (0 when such batches never split): allocate once,
 * pass to every call. Sizes out of range are ATTNJIT_ERROR_INVALID_ARGUMENT. */
attnjit_status attnjit_mla_decode_workspace_bytes(int max_num_seqs, int num_heads, int kv_lora_rank, int max_seq_len,
                                                  uint64_t* bytes);
attnjit_status attnjit_mla_decode_validate(attnjit_jit* jit, const attnjit_mla_decode_params* params);
attnjit_status attnjit_mla_decode(attnjit_jit* jit, const attnjit_mla_decode_params* params);

#ifdef __cplusplus
}
#endif

#endif /* ATTNJIT_ATTNJIT_H */
