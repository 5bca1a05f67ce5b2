# Which third-party libraries libattnjit.so carries inside itself and which it
# loads at run time. Inside, their symbols stay private (cmake/attnjit.map).
#
# zlib and zstd (LLVMSupport uses them for compressed sections) go inside.
# LLVM's CMake package links LLVMSupport against the targets ZLIB::ZLIB and
# zstd::libzstd_shared, and its find modules (FindZLIB, LLVM's Findzstd) create
# those targets only if they do not exist yet. Defining them here first, as
# Debian's static archives, puts the archives on LLVM's link line (FindZLIB
# still reports the shared libz it found; zstd::libzstd_shared is the name LLVM
# asks for, not a promise of a shared library). Debian compiles those archives for
# executables (GCC's default -fPIE): their code reaches their own globals
# PC-relatively. That links into a shared library only because the version
# script makes every symbol they define local, so nothing can interpose on them.
#
# yaml-cpp stays a shared library: Debian's libyaml-cpp.a refers PC-relatively
# to libstdc++ and glibc data (vtables, __libc_single_threaded), which a shared
# library can only reach through the GOT, so it cannot be linked into one.
# scripts/device-bundle carries libyaml-cpp.so.0.7 next to libattnjit.so (the
# GPU machine has 0.8, a different soname), found there through its RUNPATH.
foreach(dependency IN ITEMS "ZLIB::ZLIB;libz.a" "zstd::libzstd_shared;libzstd.a")
  list(GET dependency 0 target)
  list(GET dependency 1 archive_name)
  string(MAKE_C_IDENTIFIER "ATTNJIT_${archive_name}" archive_variable)
  find_library(${archive_variable} NAMES ${archive_name})
  if(${archive_variable})
    add_library(${target} STATIC IMPORTED GLOBAL)
    set_target_properties(${target} PROPERTIES IMPORTED_LOCATION "${${archive_variable}}")
  endif()
endforeach()

find_package(yaml-cpp REQUIRED)
