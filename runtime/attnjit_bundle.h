/* attnjit ahead-of-time bundles, plain C: open a bundle directory written by `attnjit aot`,
   look up a kernel, check arguments, launch on a CUDA stream. No LLVM is involved: the runtime
   library loads the bundle's cubin for the device (or has the driver compile its PTX).

   Every function that can fail returns an attnjit_bundle_status; on failure
   attnjit_bundle_last_error() returns the message (per thread, valid until the thread's next
   attnjit_bundle_* call). Handles are opaque; a bundle may be used from several threads at
   once. Kernel handles belong to their bundle and stay valid until it is closed.

   The generated DIR/attnjit_bundle_kernels.h wraps attnjit_bundle_launch in one typed
   function per kernel. */
#ifndef ATTNJIT_BUNDLE_H
#define ATTNJIT_BUNDLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum attnjit_bundle_status {
  ATTNJIT_BUNDLE_OK = 0,
  /* A null handle or output pointer, or a kernel name the bundle does not have. */
  ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT = 1,
  /* The bundle directory, its manifest or an image file is missing, malformed or modified. */
  ATTNJIT_BUNDLE_ERROR_BAD_BUNDLE = 2,
  /* A launch argument breaks the kernel's signature or a compiled-in promise (null or
     misaligned pointer, indivisible stride, wrong kind or count). */
  ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT = 3,
  /* No CUDA driver (libcuda.so.1) could be loaded, or it has no usable GPU. */
  ATTNJIT_BUNDLE_ERROR_NO_DRIVER = 4,
  /* The bundle has no image that runs on the current device. */
  ATTNJIT_BUNDLE_ERROR_NO_IMAGE = 5,
  /* The CUDA driver failed (loading, PTX compilation, launch). */
  ATTNJIT_BUNDLE_ERROR_CUDA = 6
} attnjit_bundle_status;

typedef struct attnjit_bundle attnjit_bundle;
typedef struct attnjit_bundle_kernel attnjit_bundle_kernel;

typedef enum attnjit_bundle_arg_kind {
  ATTNJIT_BUNDLE_ARG_POINTER = 0,
  ATTNJIT_BUNDLE_ARG_INTEGER = 1,
  ATTNJIT_BUNDLE_ARG_FLOAT = 2
} attnjit_bundle_arg_kind;

/* One kernel argument; `kind` says which member holds it. */
typedef struct attnjit_bundle_arg {
  attnjit_bundle_arg_kind kind;
  const void* pointer; /* a device address */
  int64_t integer;
  double floating;
} attnjit_bundle_arg;

typedef struct attnjit_bundle_dim3 {
  unsigned x, y, z;
} attnjit_bundle_dim3;

/* The message of the calling thread's last failure ("" when none). */
const char* attnjit_bundle_last_error(void);

/* Opens the bundle in `directory` (manifest read, every image checked against its sha256). */
attnjit_bundle_status attnjit_bundle_open(const char* directory, attnjit_bundle** out);
/* Unloads the bundle's modules; accepts null. */
void attnjit_bundle_close(attnjit_bundle* bundle);

size_t attnjit_bundle_kernel_count(const attnjit_bundle* bundle);
/* The name of the kernel at `index` (< kernel_count), or null. */
const char* attnjit_bundle_kernel_name(const attnjit_bundle* bundle, size_t index);
attnjit_bundle_status attnjit_bundle_find_kernel(attnjit_bundle* bundle, const char* name,
                                                 attnjit_bundle_kernel** out);
size_t attnjit_bundle_kernel_parameter_count(const attnjit_bundle_kernel* kernel);

/* Checks `count` arguments against the kernel's parameters without touching the GPU. */
attnjit_bundle_status attnjit_bundle_check_args(const attnjit_bundle_kernel* kernel,
                                                const attnjit_bundle_arg* args, size_t count);
/* Checks, then launches on `stream` (a CUstream; null: the default stream) in the calling
   thread's current CUDA context (device 0's primary context when none is current). */
attnjit_bundle_status attnjit_bundle_launch(attnjit_bundle_kernel* kernel, const attnjit_bundle_arg* args,
                                            size_t count, attnjit_bundle_dim3 grid, void* stream);

/* Argument constructors. */
static inline attnjit_bundle_arg attnjit_bundle_pointer_arg(const void* pointer) {
  attnjit_bundle_arg arg = {ATTNJIT_BUNDLE_ARG_POINTER, pointer, 0, 0.0};
  return arg;
}
static inline attnjit_bundle_arg attnjit_bundle_integer_arg(int64_t value) {
  attnjit_bundle_arg arg = {ATTNJIT_BUNDLE_ARG_INTEGER, 0, value, 0.0};
  return arg;
}
static inline attnjit_bundle_arg attnjit_bundle_float_arg(double value) {
  attnjit_bundle_arg arg = {ATTNJIT_BUNDLE_ARG_FLOAT, 0, 0, value};
  return arg;
}

#ifdef __cplusplus
}
#endif

#endif /* ATTNJIT_BUNDLE_H */
