# Header-only and small dependencies: the Debian packages' CMake configurations, or, on a machine
# without them (a GPU machine that has only CUDA and the Python torch package), the same headers
# copied beside the source by `make carry-headers` into third_party/include (git-ignored).
set(STRATOS_THIRD_PARTY_INCLUDE ${PROJECT_SOURCE_DIR}/third_party/include CACHE PATH
    "headers of Eigen, nlohmann-json, toml++, CLI11, fmt and doctest where no package has them")

# Defines `target` as an interface target over the carried headers unless a package defined it.
function(stratos_carried_headers target header subdir definitions)
  if(TARGET ${target})
    return()
  endif()
  if(NOT EXISTS ${STRATOS_THIRD_PARTY_INCLUDE}/${header})
    message(FATAL_ERROR "${target}: no package found and no ${header} under "
                        "${STRATOS_THIRD_PARTY_INCLUDE} (install the Debian packages with "
                        "`make deps`, or copy the headers there with `make carry-headers`)")
  endif()
  add_library(${target} INTERFACE IMPORTED GLOBAL)
  set_target_properties(${target} PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES ${STRATOS_THIRD_PARTY_INCLUDE}${subdir}
    INTERFACE_COMPILE_DEFINITIONS "${definitions}")
  message(STATUS "${target}: carried headers in ${STRATOS_THIRD_PARTY_INCLUDE}${subdir}")
endfunction()

find_package(Eigen3 QUIET NO_MODULE)
find_package(nlohmann_json QUIET)
find_package(tomlplusplus QUIET)
find_package(CLI11 QUIET)
find_package(fmt QUIET)
find_package(doctest QUIET)
stratos_carried_headers(Eigen3::Eigen eigen3/Eigen/Core /eigen3 "")
stratos_carried_headers(nlohmann_json::nlohmann_json nlohmann/json.hpp "" "")
stratos_carried_headers(tomlplusplus::tomlplusplus toml++/toml.h "" "TOML_HEADER_ONLY=1")
stratos_carried_headers(CLI11::CLI11 CLI/CLI.hpp "" "")
stratos_carried_headers(fmt::fmt fmt/format.h "" "FMT_HEADER_ONLY=1")
stratos_carried_headers(doctest::doctest doctest/doctest.h "" "")

# Fast C++ CSV parser (libfccp-dev): a header with no CMake configuration.
find_path(STRATOS_CSV_INCLUDE libfccp/csv.h HINTS ${STRATOS_THIRD_PARTY_INCLUDE})
if(NOT STRATOS_CSV_INCLUDE)
  message(FATAL_ERROR "libfccp/csv.h not found (make deps, or make carry-headers)")
elseif(NOT STRATOS_CSV_INCLUDE STREQUAL "/usr/include")
  include_directories(SYSTEM ${STRATOS_CSV_INCLUDE})
endif()
