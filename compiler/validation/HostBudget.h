// What a checked run (`attnjit run`, `bench`, the spec-wide tests) will ask of the
// host before it asks: the memory for the logical inputs, their device-layout copies,
// the float64 reference and the read-back outputs, and, for the interpreter, the
// number of multiply-adds it will execute one by one. A run beyond either budget is
// refused with an error that names the estimate and the knob, instead of being
// killed by the kernel's OOM handler or running for hours.
//
// Budgets: ATTNJIT_HOST_MEMORY_BUDGET (bytes; suffixes K, M, G, T for powers of 1024;
// default three quarters of the memory the process may use: physical memory, the
// address-space limit and the cgroup limit, whichever is least) and
// ATTNJIT_INTERPRETER_WORK_BUDGET (multiply-adds, same suffixes as powers of 1000;
// default 4e12: the interpreter executes about 1e9 a second, so about an hour).
#pragma once

#include <cstdint>
#include <string>

#include "compiler/spec/Spec.h"
#include "support/Diagnostics.h"

namespace attnjit::validation {

struct HostEstimate {
  double bytes = 0;           // host memory at the peak of the run
  double multiplyAdds = 0;    // the kernel's arithmetic, as the interpreter executes it
};

HostEstimate estimateHostWork(const compiler::Variant& variant, const compiler::BatchShape& shape);

// The budgets in force (environment, else defaults); a malformed variable is an error
// naming it.
support::Expected<double> hostMemoryBudget();
support::Expected<double> interpreterWorkBudget();

// An error located at the variant when the run would exceed a budget; `interpreted`
// adds the work budget.
support::Status checkHostBudget(const compiler::Variant& variant, const compiler::BatchShape& shape,
                                bool interpreted);

// The error for an allocation that failed anyway (the estimate is an estimate): names
// the run, the estimate and the budget variable.
support::Diagnostic outOfHostMemory(const compiler::Variant& variant, const compiler::BatchShape& shape);

}  // namespace attnjit::validation
