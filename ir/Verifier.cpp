// TEMPORARY: replaced by the real verifier (helper in progress).
#include "ir/Verifier.h"
namespace attnjit::ir {
Status verifyOperation(const Operation&, const Kernel&) { return Status::ok(); }
Status verifyKernel(const Kernel&) { return Status::ok(); }
Status verifyModule(const Module&) { return Status::ok(); }
}  // namespace attnjit::ir
