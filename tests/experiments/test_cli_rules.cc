// Value rules of command-line flags (experiments/cli_rules.h): checked while CLI11 parses, and
// reported as "<flag> = <value>: <rule>".
#include <doctest/doctest.h>

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "experiments/cli_rules.h"

namespace stratos {
namespace {

// The message of the parse error of `args` on a command with the flags below; "" if none.
std::string ParseError(std::vector<std::string> args) {
  CLI::App app{"t"};
  int nodes = 0, zero = 0;
  double time_limit = 1, fraction = 0.5, overlap = 0;
  std::vector<std::string> algorithms;
  app.add_option("--nodes", nodes)->check(cli::IntAtLeast(1));
  app.add_option("--zero", zero)->check(cli::IntIn(0, 3));
  app.add_option("--time-limit", time_limit)->check(cli::NumberAbove(0));
  app.add_option("--density", fraction)->check(cli::NumberInterval(0, 1, "(0, 1]"));
  app.add_option("--overlap", overlap)->check(cli::NumberIn(0, 1));
  app.add_option("--algo", algorithms)->delimiter(',')->check(cli::OneOf({"dp", "grid"}));
  std::vector<std::string> argv = {"t"};
  argv.insert(argv.end(), args.begin(), args.end());
  std::vector<const char*> pointers;
  for (const std::string& a : argv) pointers.push_back(a.c_str());
  try {
    app.parse(static_cast<int>(pointers.size()), pointers.data());
  } catch (const CLI::ParseError& e) {
    return cli::ParseErrorMessage(e);
  }
  return "";
}

}  // namespace

TEST_CASE("flag rules name the flag, the value and the rule") {
  CHECK(ParseError({"--nodes", "4", "--zero", "3", "--time-limit", "0.5", "--density", "1",
                    "--overlap", "0", "--algo", "dp,grid"}) == "");
  CHECK(ParseError({"--nodes", "0"}) == "--nodes = 0: must be >= 1");
  CHECK(ParseError({"--nodes", "-3"}) == "--nodes = -3: must be >= 1");
  CHECK(ParseError({"--nodes", "2.5"}) == "--nodes = 2.5: must be an integer");
  CHECK(ParseError({"--nodes", "99999999999"}) == "--nodes = 99999999999: must be <= 2147483647");
  CHECK(ParseError({"--nodes", "99999999999999999999"}) ==
        "--nodes = 99999999999999999999: must be <= 2147483647");
  CHECK(ParseError({"--zero", "4"}) == "--zero = 4: must be in [0, 3]");
  CHECK(ParseError({"--time-limit", "0"}) == "--time-limit = 0: must be > 0");
  CHECK(ParseError({"--time-limit", "-1"}) == "--time-limit = -1: must be > 0");
  CHECK(ParseError({"--time-limit", "inf"}) == "--time-limit = inf: must be a finite number");
  CHECK(ParseError({"--density", "0"}) == "--density = 0: must be in (0, 1]");
  CHECK(ParseError({"--overlap", "1.5"}) == "--overlap = 1.5: must be in [0, 1]");
  CHECK(ParseError({"--algo", "dp,simplex"}) == "--algo = \"simplex\": must be one of \"dp\", \"grid\"");
  // CLI11's own errors pass through unchanged.
  CHECK(ParseError({"--bogus"}) == "The following argument was not expected: --bogus");
}

}  // namespace stratos
