// Builder: the C++ way to write tile IR. Each method creates one op at the current
// insertion point, infers its result type, and verifies it at once; the first
// failure is kept (status()) so a kernel builder checks once at the end. Values
// produced after a failure are still valid objects (their types may be wrong).
#pragma once

#include <string>
#include <vector>

#include "ir/IR.h"
#include "ir/LoadTensor.h"

namespace attnjit::ir {

class Builder {
 public:
  // Builds into the kernel's body.
  explicit Builder(Kernel& kernel);

  Kernel& kernel() { return kernel_; }
  // The first verification failure, or ok.
  const support::Status& status() const { return status_; }
  // Location given to the ops created from now on.
  void setLocation(support::Location loc) { loc_ = std::move(loc); }

  // ---- scalars and tile creation ----
  Value* programId(int axis, std::string name = {});
  Value* numPrograms(int axis, std::string name = {});
  Value* constInt(int64_t v, const Type& type, std::string name = {});
  Value* constFloat(double v, const Type& type, std::string name = {});
  Value* i32(int64_t v) { return constInt(v, Type::scalar(ScalarKind::I32)); }
  Value* i64(int64_t v) { return constInt(v, Type::scalar(ScalarKind::I64)); }
  Value* f32(double v) { return constFloat(v, Type::scalar(ScalarKind::F32)); }
  Value* constexprValue(const std::string& constexprName, ScalarKind kind, std::string name = {});
  Value* arange(int64_t start, int64_t end, std::string name = {});
  Value* splat(Value* scalar, std::vector<int64_t> shape, std::string name = {});
  Value* broadcast(Value* tile, std::vector<int64_t> shape, std::string name = {});
  Value* expandDims(Value* tile, int axis, std::string name = {});
  Value* reshape(Value* tile, std::vector<int64_t> shape, std::string name = {});
  Value* transpose(Value* tile, std::vector<int64_t> perm, std::string name = {});
  Value* convertLayout(Value* tile, LayoutRef layout, std::string name = {});

  // ---- elementwise ----
  Value* binary(Opcode op, Value* a, Value* b, std::string name = {});
  Value* add(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Add, a, b, std::move(name)); }
  Value* sub(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Sub, a, b, std::move(name)); }
  Value* mul(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Mul, a, b, std::move(name)); }
  Value* div(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Div, a, b, std::move(name)); }
  // Float division to 2 ulp (div {approx = 1}: PTX div.full.f32, see ir/Ops.def).
  Value* divApprox(Value* a, Value* b, std::string name = {});
  // a·b where b is usually exactly 1.0 (mul {skip_ones = 1}, ir/Ops.def).
  Value* mulSkipOnes(Value* a, Value* b, std::string name = {});
  Value* rem(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Rem, a, b, std::move(name)); }
  Value* min(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Min, a, b, std::move(name)); }
  Value* max(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Max, a, b, std::move(name)); }
  Value* andOp(Value* a, Value* b, std::string name = {}) { return binary(Opcode::And, a, b, std::move(name)); }
  Value* orOp(Value* a, Value* b, std::string name = {}) { return binary(Opcode::Or, a, b, std::move(name)); }
  Value* unary(Opcode op, Value* a, std::string name = {});
  // cluster_reduce_max / cluster_reduce_sum of a tile across the programs of a cluster.
  Value* clusterReduce(Opcode op, Value* tile, std::string name = {}) { return unary(op, tile, std::move(name)); }
  Value* cmp(CmpPredicate pred, Value* a, Value* b, std::string name = {});
  Value* select(Value* cond, Value* a, Value* b, std::string name = {});
  Value* cast(Value* v, ScalarKind to, std::string name = {});
  Value* bitcast(Value* v, ScalarKind to, std::string name = {});
  // The nibble `high` selects of each byte, XOR `flip`, minus the low four bits
  // of `zeroPoints` (i32, bytes' shape), as `to` (unpack_nibbles, ir/Ops.def).
  Value* unpackNibbles(Value* bytes, Value* zeroPoints, bool high, int flip, ScalarKind to, std::string name = {});

  // ---- memory ----
  Value* addPtr(Value* ptr, Value* offset, std::string name = {});
  // mask and other may be null (unmasked load); other must be given with mask.
  Value* load(Value* ptr, Value* mask = nullptr, Value* other = nullptr, std::string name = {});
  void store(Value* ptr, Value* value, Value* mask = nullptr);
  // A rows × columns tile of the tensor `tensor` describes (load_tensor, ir/Ops.def).
  Value* loadTensor(const LoadTensorOperands& tensor, int64_t rows, int64_t columns, std::string name = {});

  // ---- tensor ops ----
  // acc + a·b with f32 accumulation. tf32: round f32 operands to tf32 (tensor cores).
  Value* dot(Value* a, Value* b, Value* acc, bool tf32 = false, std::string name = {});
  // The same with the zero products the caller guarantees (dot's k_extent /
  // n_extent, ir/Ops.def; 0 = the whole dimension, no attribute): every
  // a[m, k]·b[k, n] with k >= options.k or n >= options.n is 0; and tf32 as above.
  struct DotOptions {
    int64_t k = 0;
    int64_t n = 0;
    bool tf32 = false;
  };
  Value* dot(Value* a, Value* b, Value* acc, DotOptions options, std::string name = {});
  Value* reduce(Opcode op, Value* tile, int axis, std::string name = {});

  // ---- control flow ----
  struct ForLoop {
    Value* inductionVar;
    std::vector<Value*> iterArgs;
  };
  // Opens `for iv = lo to hi step step iter_args(inits)`; ops go into its body
  // until endFor, which yields `yielded` and returns the loop's results.
  ForLoop beginFor(Value* lo, Value* hi, Value* step, const std::vector<Value*>& inits,
                   std::string ivName = "iv", const std::vector<std::string>& iterNames = {});
  std::vector<Value*> endFor(const std::vector<Value*>& yielded, const std::vector<std::string>& resultNames = {});
  // Opens `if cond -> (resultTypes)`; ops go into the then region until beginElse
  // (which yields thenValues), then into the else region until endIf (which
  // yields elseValues and returns the results).
  void beginIf(Value* cond, std::vector<Type> resultTypes = {});
  void beginElse(const std::vector<Value*>& thenValues = {});
  std::vector<Value*> endIf(const std::vector<Value*>& elseValues = {},
                            const std::vector<std::string>& resultNames = {});
  // Ends the kernel body with `return` and verifies the whole kernel.
  support::Status finish();

  // Generic creation used by the helpers above (and by passes): creates the op
  // with the given operands, result types and attributes at the insertion point
  // and verifies it.
  Operation* create(Opcode opcode, const std::vector<Value*>& operands, const std::vector<Type>& resultTypes,
                    Attributes attrs = {}, const std::vector<std::string>& resultNames = {});

 private:
  void record(support::Status s);
  Block& current() { return *insertion_.back(); }

  Kernel& kernel_;
  std::vector<Block*> insertion_;
  std::vector<Operation*> openOps_;
  support::Location loc_;
  support::Status status_;
};

}  // namespace attnjit::ir
