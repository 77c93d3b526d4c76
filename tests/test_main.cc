// The test executables' main: doctest's, with the user's own zoo (costmodel/zoo.h UserZooDir)
// pointed at a directory that does not exist, so that the clusters of whoever runs the tests do
// not join the zoo the tests enumerate. Tests of the user zoo set STRATOS_USER_ZOO themselves.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("STRATOS_USER_ZOO", "/nonexistent/stratos-tests-have-no-user-zoo", 1);
  return doctest::Context(argc, argv).run();
}
