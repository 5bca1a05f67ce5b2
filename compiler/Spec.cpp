// TEMPORARY placeholder until the spec loader lands (helper in progress).
#include "compiler/Spec.h"
