// Access to the resolved driver entry points for runtime/*.cpp. PRIVATE to runtime/ (and its
// tests): it exposes CUDA types.
#pragma once

#include <string>
#include <string_view>

#include "support/Diagnostics.h"
#include "runtime/CudaDriverApi.h"

namespace attnjit::runtime {

// The entry-point table of the loaded driver, or why there is none.
support::Expected<const cuda::DriverApi*> driverApi();

// Loads a driver library by name into a fresh table, without touching the process-wide one.
// Used by tests to check the "no driver" path on every machine (with a name that does not exist).
support::Status probeDriverLibrary(const char* libraryName);

// A diagnostic for the runtime (location "attnjit-runtime").
support::Status runtimeError(std::string message);

// "<what> failed: CUDA_ERROR_NAME (driver's description)" for a failed call `result`.
support::Status cudaCallError(const cuda::DriverApi& api, cuda::CUresult result, std::string_view what);

// CUDA_ERROR_NAME (description), or "CUresult <n>" when the driver does not know the code.
std::string describeCudaResult(const cuda::DriverApi& api, cuda::CUresult result);

}  // namespace attnjit::runtime
