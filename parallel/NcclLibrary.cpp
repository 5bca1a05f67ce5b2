#include "parallel/NcclLibrary.h"

#include <dlfcn.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace attnjit::parallel::nccl {

using support::Status;

namespace {

struct Loaded {
  Api api;
  std::string error;  // empty when loaded
};

template <typename Function>
bool resolve(void* library, const char* name, Function& function, std::string& error) {
  function = reinterpret_cast<Function>(dlsym(library, name));
  if (function == nullptr && error.empty()) error = std::string("libnccl.so.2 has no symbol ") + name;
  return function != nullptr;
}

Loaded load() {
  Loaded loaded;
  // ATTNJIT_NCCL_LIBRARY names a library to use; else the loader's search
  // path, then the one found when attnjit was configured. Deliberately never
  // dlclose'd: communicators may outlive any scope here.
  std::vector<std::string> candidates;
  if (const char* chosen = std::getenv("ATTNJIT_NCCL_LIBRARY"); chosen != nullptr && *chosen != '\0')
    candidates.push_back(chosen);
  candidates.push_back("libnccl.so.2");
#ifdef ATTNJIT_NCCL_CONFIGURED_PATH
  candidates.push_back(ATTNJIT_NCCL_CONFIGURED_PATH);
#endif
  void* library = nullptr;
  std::string reasons;
  for (const std::string& candidate : candidates) {
    library = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library != nullptr) break;
    const char* reason = dlerror();
    reasons += "\n  " + candidate + ": " + (reason ? reason : "unknown reason");
  }
  if (library == nullptr) {
    loaded.error =
        "NCCL is not available (it ships with the CUDA toolkit; ATTNJIT_NCCL_LIBRARY may name it):" + reasons;
    return loaded;
  }
  std::string& e = loaded.error;
  Api& a = loaded.api;
  resolve(library, "ncclGetUniqueId", a.getUniqueId, e);
  resolve(library, "ncclCommInitRank", a.commInitRank, e);
  resolve(library, "ncclCommDestroy", a.commDestroy, e);
  resolve(library, "ncclAllGather", a.allGather, e);
  resolve(library, "ncclGroupStart", a.groupStart, e);
  resolve(library, "ncclGroupEnd", a.groupEnd, e);
  resolve(library, "ncclGetErrorString", a.getErrorString, e);
  a.getLastError = reinterpret_cast<const char* (*)(Comm)>(dlsym(library, "ncclGetLastError"));
  return loaded;
}

const Loaded& loadedOnce() {
  static const Loaded loaded = load();
  return loaded;
}

}  // namespace

support::Expected<const Api*> api() {
  const Loaded& loaded = loadedOnce();
  if (!loaded.error.empty()) return support::Status::error({}, loaded.error);
  return &loaded.api;
}

support::Status check(Result result, const char* call, Comm comm) {
  if (result == 0) return support::Status::ok();
  const Loaded& loaded = loadedOnce();
  std::string message = std::string(call) + " failed: ";
  const char* text = loaded.api.getErrorString ? loaded.api.getErrorString(result) : nullptr;
  message += text ? text : ("NCCL error " + std::to_string(result));
  const char* last = comm && loaded.api.getLastError ? loaded.api.getLastError(comm) : nullptr;
  if (last != nullptr && *last != '\0') message += std::string(" (") + last + ")";
  return support::Status::error({}, message);
}

}  // namespace attnjit::parallel::nccl
