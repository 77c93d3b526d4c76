#pragma once
// Helpers shared by the cost-model tests.
#include <doctest/doctest.h>

#include <string>

#include "costmodel/error.h"

namespace stratos::testing {

// The message of the InputError that f() throws; fails the test if it throws none.
template <typename F>
std::string InputErrorMessage(F&& f) {
  try {
    f();
  } catch (const InputError& error) {
    return error.what();
  }
  FAIL("expected an InputError");
  return "";
}

inline bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace stratos::testing
