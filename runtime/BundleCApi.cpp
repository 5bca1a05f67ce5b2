// The C face of runtime/Bundle.h (runtime/attnjit_bundle.h): opaque handles over the C++
// objects, statuses by the stage that failed, messages in a per-thread slot.
#include "runtime/attnjit_bundle.h"

#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "runtime/Bundle.h"

struct attnjit_bundle_kernel {
  attnjit::runtime::Bundle* bundle;
  const attnjit::runtime::BundleKernel* kernel;
};

struct attnjit_bundle {
  std::unique_ptr<attnjit::runtime::Bundle> bundle;
  // One handle per kernel, made at open: find_kernel hands out stable pointers without locking.
  std::vector<attnjit_bundle_kernel> kernels;
};

namespace support = attnjit::support;

namespace {

using attnjit::runtime::BundleArgument;

thread_local std::string lastError;

attnjit_bundle_status fail(attnjit_bundle_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

attnjit_bundle_status fail(attnjit_bundle_status status, const support::Status& error) {
  return fail(status, error.diagnostic().str());
}

attnjit_bundle_status succeed() {
  lastError.clear();
  return ATTNJIT_BUNDLE_OK;
}

std::vector<BundleArgument> toArguments(const attnjit_bundle_arg* args, size_t count) {
  std::vector<BundleArgument> arguments;
  arguments.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    switch (args[i].kind) {
      case ATTNJIT_BUNDLE_ARG_POINTER: arguments.push_back(BundleArgument::fromPointer(args[i].pointer)); break;
      case ATTNJIT_BUNDLE_ARG_INTEGER: arguments.push_back(BundleArgument::fromInteger(args[i].integer)); break;
      case ATTNJIT_BUNDLE_ARG_FLOAT: arguments.push_back(BundleArgument::fromFloat(args[i].floating)); break;
    }
  }
  return arguments;
}

// Null checks shared by check_args and launch; ok when the arguments can be looked at.
attnjit_bundle_status validateArgumentArray(const attnjit_bundle_kernel* kernel, const attnjit_bundle_arg* args,
                                            size_t count) {
  if (kernel == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "kernel handle is null");
  if (args == nullptr && count != 0) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "argument array is null");
  for (size_t i = 0; i < count; ++i) {
    if (args[i].kind != ATTNJIT_BUNDLE_ARG_POINTER && args[i].kind != ATTNJIT_BUNDLE_ARG_INTEGER &&
        args[i].kind != ATTNJIT_BUNDLE_ARG_FLOAT) {
      return fail(ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT,
                  "argument " + std::to_string(i) + " has an unknown kind " + std::to_string(args[i].kind));
    }
  }
  return ATTNJIT_BUNDLE_OK;
}

// C callers cannot catch C++ exceptions (allocation failure is the only source here).
template <typename F>
attnjit_bundle_status guarded(F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    return fail(ATTNJIT_BUNDLE_ERROR_CUDA, std::string("internal error: ") + e.what());
  }
}

}  // namespace

extern "C" {

const char* attnjit_bundle_last_error(void) { return lastError.c_str(); }

attnjit_bundle_status attnjit_bundle_open(const char* directory, attnjit_bundle** out) {
  return guarded([&] {
    if (out == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "output handle pointer is null");
    *out = nullptr;
    if (directory == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "bundle directory is null");
    auto bundle = attnjit::runtime::Bundle::open(directory);
    if (!bundle) return fail(ATTNJIT_BUNDLE_ERROR_BAD_BUNDLE, bundle.status());
    auto handle = std::make_unique<attnjit_bundle>();
    handle->bundle = std::move(*bundle);
    for (const auto& kernel : handle->bundle->manifest().kernels) {
      handle->kernels.push_back(attnjit_bundle_kernel{handle->bundle.get(), &kernel});
    }
    *out = handle.release();
    return succeed();
  });
}

void attnjit_bundle_close(attnjit_bundle* bundle) { delete bundle; }

size_t attnjit_bundle_kernel_count(const attnjit_bundle* bundle) {
  return bundle == nullptr ? 0 : bundle->kernels.size();
}

const char* attnjit_bundle_kernel_name(const attnjit_bundle* bundle, size_t index) {
  if (bundle == nullptr || index >= bundle->kernels.size()) return nullptr;
  return bundle->kernels[index].kernel->name.c_str();
}

attnjit_bundle_status attnjit_bundle_find_kernel(attnjit_bundle* bundle, const char* name,
                                                 attnjit_bundle_kernel** out) {
  return guarded([&] {
    if (out == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "output handle pointer is null");
    *out = nullptr;
    if (bundle == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "bundle handle is null");
    if (name == nullptr) return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "kernel name is null");
    for (attnjit_bundle_kernel& kernel : bundle->kernels) {
      if (kernel.kernel->name == name) {
        *out = &kernel;
        return succeed();
      }
    }
    std::string names;
    for (const attnjit_bundle_kernel& kernel : bundle->kernels)
      names += (names.empty() ? "" : ", ") + kernel.kernel->name;
    return fail(ATTNJIT_BUNDLE_ERROR_INVALID_ARGUMENT, "the bundle in " + bundle->bundle->directory().string() +
                                                           " has no kernel '" + name + "' (kernels: " + names + ")");
  });
}

size_t attnjit_bundle_kernel_parameter_count(const attnjit_bundle_kernel* kernel) {
  return kernel == nullptr ? 0 : kernel->kernel->parameters.size();
}

attnjit_bundle_status attnjit_bundle_check_args(const attnjit_bundle_kernel* kernel, const attnjit_bundle_arg* args,
                                                size_t count) {
  return guarded([&] {
    if (attnjit_bundle_status status = validateArgumentArray(kernel, args, count); status != ATTNJIT_BUNDLE_OK) {
      return status;
    }
    auto arguments = toArguments(args, count);
    if (auto checked = attnjit::runtime::checkBundleArguments(*kernel->kernel, arguments); !checked) {
      return fail(ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT, checked);
    }
    return succeed();
  });
}

attnjit_bundle_status attnjit_bundle_launch(attnjit_bundle_kernel* kernel, const attnjit_bundle_arg* args,
                                            size_t count, attnjit_bundle_dim3 grid, void* stream) {
  return guarded([&] {
    if (attnjit_bundle_status status = validateArgumentArray(kernel, args, count); status != ATTNJIT_BUNDLE_OK) {
      return status;
    }
    auto arguments = toArguments(args, count);
    if (auto checked = attnjit::runtime::checkBundleArguments(*kernel->kernel, arguments); !checked) {
      return fail(ATTNJIT_BUNDLE_ERROR_BAD_LAUNCH_ARGUMENT, checked);
    }
    if (auto driver = attnjit::runtime::driverStatus(); !driver) return fail(ATTNJIT_BUNDLE_ERROR_NO_DRIVER, driver);
    auto launched = kernel->bundle->launch(*kernel->kernel, arguments, attnjit::runtime::Dim3{grid.x, grid.y, grid.z},
                                           stream);
    if (!launched) {
      // Which stage failed, asked only on the failure path (the steady state pays nothing).
      auto devices = attnjit::runtime::deviceCount();
      if (!devices) return fail(ATTNJIT_BUNDLE_ERROR_NO_DRIVER, devices.status());
      if (*devices == 0) return fail(ATTNJIT_BUNDLE_ERROR_NO_DRIVER, "the CUDA driver reports no GPU");
      auto deviceSm = attnjit::runtime::currentContextDeviceSm();
      if (deviceSm && !attnjit::runtime::chooseBundleImage(*kernel->kernel, *deviceSm)) {
        return fail(ATTNJIT_BUNDLE_ERROR_NO_IMAGE, launched);
      }
      return fail(ATTNJIT_BUNDLE_ERROR_CUDA, launched);
    }
    return succeed();
  });
}

}  // extern "C"
