#!/usr/bin/env bash
# Checks the dependency rules of the tree (docs/architecture.md, "Layers"):
#  1. every project #include of a folder's sources names a folder that layer may
#     use (codegen/ alone includes LLVM; compiler code sees codegen/ only
#     through Codegen.h and Target.h; runtime/'s CUDA declarations stay inside
#     runtime/);
#  2. every attnjit symbol a layer's static library uses is defined by that
#     library or by one it may link, so a call across a forbidden edge is an
#     error here even where the shared library would resolve it.
# Usage: check_layers.sh SOURCE_DIR LIBRARY_DIR
set -euo pipefail

source_dir="${1:?usage: check_layers.sh SOURCE_DIR LIBRARY_DIR}"
library_dir="${2:?usage: check_layers.sh SOURCE_DIR LIBRARY_DIR}"
cd "$source_dir"
failures=0
fail() {
  echo "check_layers: $*" >&2
  failures=$((failures + 1))
}

# folder | library | the folders (or single headers) its includes may name | the libraries it may link
layers=(
  "support|attnjit_support|support/|"
  "ir|attnjit_ir|ir/ support/|attnjit_support"
  "runtime|attnjit_runtime|runtime/ support/|attnjit_support"
  "codegen|attnjit_codegen|codegen/ ir/ support/|attnjit_ir attnjit_support"
  "compiler/kernels|attnjit_kernels|compiler/kernels/ ir/ support/|attnjit_ir attnjit_support"
  "compiler/spec|attnjit_spec|compiler/spec/ compiler/kernels/ ir/ support/|attnjit_kernels attnjit_ir attnjit_support"
  "compiler/passes|attnjit_passes|compiler/passes/ ir/ support/|attnjit_ir attnjit_support"
  "compiler/driver|attnjit_driver|compiler/driver/ compiler/passes/ codegen/Codegen.h codegen/Target.h runtime/ ir/ support/|attnjit_passes attnjit_codegen attnjit_runtime attnjit_ir attnjit_support"
  "compiler/ops|attnjit_ops|compiler/ops/ compiler/driver/ compiler/spec/ compiler/kernels/ compiler/passes/ codegen/Codegen.h codegen/Target.h runtime/ ir/ support/|attnjit_driver attnjit_spec attnjit_kernels attnjit_passes attnjit_codegen attnjit_runtime attnjit_ir attnjit_support"
  "compiler/validation/reference|attnjit_reference|compiler/validation/reference/|"
  "capi|attnjit_capi|attnjit/ compiler/ops/ compiler/driver/ compiler/spec/ compiler/kernels/ compiler/passes/ codegen/Codegen.h codegen/Target.h runtime/ ir/ support/|attnjit_ops attnjit_driver attnjit_spec attnjit_kernels attnjit_passes attnjit_codegen attnjit_runtime attnjit_ir attnjit_support"
)

for layer in "${layers[@]}"; do
  IFS='|' read -r folder library allowed _ <<<"$layer"
  while IFS= read -r line; do
    file="${line%%:*}"
    # Subfolders that are layers of their own are checked as themselves.
    [ "$folder" = compiler/validation ] || case "$file" in compiler/validation/reference/*) [ "$folder" = compiler/validation/reference ] || continue ;; esac
    included="$(sed -E 's/.*#include "([^"]+)".*/\1/' <<<"${line#*:}")"
    [ -e "$included" ] || [ -e "include/$included" ] || continue  # not a project header
    ok=0
    for prefix in $allowed; do
      case "$included" in "$prefix"*) ok=1 ;; esac
    done
    [ "$ok" = 1 ] || fail "$file includes $included, outside the layers $folder may use ($allowed)"
  done < <(grep -rn --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.def' '^[[:space:]]*#[[:space:]]*include "' "$folder" || true)
done

# LLVM is codegen's alone; the driver API's CUDA declarations are runtime's alone.
llvm="$(grep -rln --include='*.h' --include='*.hpp' --include='*.cpp' '#include <llvm/' . --exclude-dir=build\* --exclude-dir=codegen --exclude-dir=.git || true)"
[ -z "$llvm" ] || fail "LLVM included outside codegen/: $llvm"
cuda="$(grep -rln --include='*.h' --include='*.hpp' --include='*.cpp' '#include "runtime/\(CudaDriverApi\|DriverInternal\).h"' . --exclude-dir=build\* --exclude-dir=runtime --exclude-dir=tests --exclude-dir=.git || true)"
[ -z "$cuda" ] || fail "the CUDA driver declarations included outside runtime/: $cuda"

# Symbols: what each library needs from attnjit, against what it may link.
defined() {  # library names -> their defined attnjit symbols, one per line
  for name in "$@"; do nm -C --defined-only "$library_dir/lib$name.a" 2>/dev/null; done |
    awk '$2 ~ /^[TWDBRVu]$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }' | grep '^attnjit::' | sort -u
}
for layer in "${layers[@]}"; do
  IFS='|' read -r folder library _ links <<<"$layer"
  archive="$library_dir/lib$library.a"
  if [ ! -f "$archive" ]; then
    fail "$archive is not built"
    continue
  fi
  needed="$(nm -C --undefined-only "$archive" | awk '{ $1 = ""; sub(/^ /, ""); print }' | grep '^attnjit::' | sort -u || true)"
  [ -n "$needed" ] || continue
  missing="$(comm -23 <(echo "$needed") <(defined "$library" $links) || true)"
  if [ -n "$missing" ]; then
    fail "$library ($folder) uses $(wc -l <<<"$missing") attnjit symbols that neither it nor the libraries it may link ($links) define, e.g.:"
    awk 'NR <= 5' <<<"$missing" >&2
  fi
done

if [ "$failures" -ne 0 ]; then
  exit 1
fi
echo "check_layers: ${#layers[@]} layers: includes and attnjit symbols within their allowed dependencies"
