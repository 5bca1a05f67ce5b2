# cmake --install: libattnjit.so (JIT: compiler + runtime, LLVM inside),
# libattnjit_runtime.so (runtime only, no LLVM), the attnjit CLI, the public
# headers and a CMake package, so that an embedder writes
#
#   find_package(attnjit 0.1 REQUIRED)
#   target_link_libraries(server PRIVATE attnjit::attnjit)   # or attnjit::runtime
#
# or, without CMake, `-I <prefix>/include -L <prefix>/lib -lattnjit`.
#
# Layout under the prefix:
#   include/attnjit/attnjit.h, jit.hpp       the public API (C and C++)
#   include/attnjit/{support,ir,runtime,compiler}/...
#                                             the repository headers the public ones
#                                             include, their includes rewritten to
#                                             "attnjit/<path>": -I include suffices and
#                                             no generic name (runtime/Stream.h) lands
#                                             on a consumer's include path
#   lib/libattnjit.so.X.Y.Z, lib/libattnjit_runtime.so.X.Y.Z
#                                             with SONAME libattnjit.so.X.Y (0.x: a
#                                             minor version may change the ABI) and the
#                                             usual symlinks; stripped unless
#                                             ATTNJIT_INSTALL_STRIP=OFF
#   lib/cmake/attnjit/attnjitConfig.cmake, attnjitConfigVersion.cmake
#   bin/attnjit
#   share/attnjit/python/attnjit              the Python package (PYTHONPATH=<that>/..),
#                                             which finds lib/libattnjit.so from there
#
# libattnjit.so needs the system's libyaml-cpp.so.0.7 at run time (Debian 12:
# libyaml-cpp0.7; cmake/StaticDependencies.cmake says why it is not linked in).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ATTNJIT_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnjit)
option(ATTNJIT_INSTALL_STRIP "strip the installed libraries and CLI (their exported symbols stay)" ON)

# $ORIGIN: a yaml-cpp copied next to libattnjit.so is found there, as in a
# device bundle (cmake/StaticDependencies.cmake); else the system's.
set_target_properties(attnjit_shared PROPERTIES INSTALL_RPATH "$ORIGIN")
install(TARGETS attnjit_shared attnjit_runtime_shared LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The installed CLI finds libattnjit.so as the build tree's does: in ../lib.
set_target_properties(attnjit PROPERTIES INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS attnjit RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(ATTNJIT_INSTALL_STRIP AND CMAKE_STRIP)
  # LLVM's static symbols make up most of an unstripped libattnjit.so; the dynamic
  # symbol table (the API) is what --strip-unneeded keeps.
  foreach(installed ${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:attnjit_shared>
                    ${CMAKE_INSTALL_LIBDIR}/$<TARGET_FILE_NAME:attnjit_runtime_shared>
                    ${CMAKE_INSTALL_BINDIR}/$<TARGET_FILE_NAME:attnjit>)
    install(CODE "execute_process(COMMAND \"${CMAKE_STRIP}\" --strip-unneeded
                                  \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${installed}\"
                                  COMMAND_ERROR_IS_FATAL ANY)")
  endforeach()
endif()

file(GLOB ATTNJIT_PUBLIC_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/include/attnjit/*.h
     ${PROJECT_SOURCE_DIR}/include/attnjit/*.hpp)

# The repository headers to install: every `#include "..."` reachable from the
# public headers and from runtime/'s headers (attnjit::runtime's API), found by
# following the includes at configure time, so a header the lead adds to an op
# travels without a list to update. Headers that include CUDA or driver
# internals stay out: they are reachable from no public header.
function(attnjit_reachable_headers out_var)
  set(pending ${ARGN})
  set(found "")
  while(pending)
    list(POP_FRONT pending header)
    if(header IN_LIST found)
      continue()
    endif()
    list(APPEND found ${header})
    if(header MATCHES "^attnjit/")
      set(path ${PROJECT_SOURCE_DIR}/include/${header})
    else()
      set(path ${PROJECT_SOURCE_DIR}/${header})
    endif()
    # Re-run the scan when a header's includes change.
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${path})
    file(STRINGS ${path} lines REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line IN LISTS lines)
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*$" "\\1" included "${line}")
      if(EXISTS ${PROJECT_SOURCE_DIR}/${included} OR EXISTS ${PROJECT_SOURCE_DIR}/include/${included})
        list(APPEND pending ${included})
      endif()
    endforeach()
  endwhile()
  list(FILTER found EXCLUDE REGEX "^attnjit/")
  set(${out_var} ${found} PARENT_SCOPE)
endfunction()

file(GLOB ATTNJIT_RUNTIME_API_HEADERS RELATIVE ${PROJECT_SOURCE_DIR} CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/runtime/*.h)
list(FILTER ATTNJIT_RUNTIME_API_HEADERS EXCLUDE REGEX "(CudaDriverApi|DriverInternal)\\.h$")
set(ATTNJIT_PUBLIC_HEADER_NAMES "")
foreach(header IN LISTS ATTNJIT_PUBLIC_HEADERS)
  get_filename_component(name ${header} NAME)
  list(APPEND ATTNJIT_PUBLIC_HEADER_NAMES attnjit/${name})
endforeach()
attnjit_reachable_headers(ATTNJIT_INTERNAL_HEADERS ${ATTNJIT_PUBLIC_HEADER_NAMES} ${ATTNJIT_RUNTIME_API_HEADERS})
# Each installed header is a copy (in the build tree, refreshed at every configure)
# whose quoted includes of the headers above read "attnjit/<path>".
set(ATTNJIT_STAGED_INCLUDEDIR ${CMAKE_CURRENT_BINARY_DIR}/installed-headers)
function(attnjit_stage_header source destination)
  file(READ ${source} text)
  foreach(internal IN LISTS ATTNJIT_INTERNAL_HEADERS)
    string(REPLACE "#include \"${internal}\"" "#include \"attnjit/${internal}\"" text "${text}")
  endforeach()
  set(staged ${ATTNJIT_STAGED_INCLUDEDIR}/${destination})
  if(EXISTS ${staged})
    file(READ ${staged} previous)
  endif()
  if(NOT previous STREQUAL text)
    file(WRITE ${staged} "${text}")
  endif()
  get_filename_component(directory ${destination} DIRECTORY)
  install(FILES ${staged} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/${directory})
endfunction()
foreach(header IN LISTS ATTNJIT_PUBLIC_HEADER_NAMES)
  attnjit_stage_header(${PROJECT_SOURCE_DIR}/include/${header} ${header})
endforeach()
foreach(header IN LISTS ATTNJIT_INTERNAL_HEADERS)
  attnjit_stage_header(${PROJECT_SOURCE_DIR}/${header} attnjit/${header})
endforeach()

configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/attnjitConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/generated/attnjitConfig.cmake
  INSTALL_DESTINATION ${ATTNJIT_INSTALL_CMAKEDIR}
  PATH_VARS CMAKE_INSTALL_INCLUDEDIR CMAKE_INSTALL_LIBDIR)
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/generated/attnjitConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/attnjitConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/generated/attnjitConfigVersion.cmake
        DESTINATION ${ATTNJIT_INSTALL_CMAKEDIR})

install(DIRECTORY ${PROJECT_SOURCE_DIR}/python/attnjit DESTINATION ${CMAKE_INSTALL_DATADIR}/attnjit/python
        FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
