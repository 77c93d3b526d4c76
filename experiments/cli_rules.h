#pragma once
// Value rules of command-line flags, as CLI11 validators: a value that breaks one is refused
// while the command line is parsed, and main() prints it as every other input error,
// "command line: <flag> = <value>: <rule>", with exit code 2:
//   command->add_option("--nodes", args.nodes, "nodes")->check(cli::IntAtLeast(1));
//   stratos search --nodes 0   ->   stratos: error: command line: --nodes = 0: must be >= 1
// (CLI11 reports a failed validator as "<flag>: <message>"; these validators' messages read
// "= <value>: <rule>", which main() joins to the flag.) The rule shows in --help beside the
// flag's type ("INT:>= 1").
#include <CLI/CLI.hpp>

#include <climits>
#include <string>
#include <vector>

namespace stratos::cli {

// An integer >= min (and <= INT_MAX): "must be an integer", "must be >= <min>".
CLI::Validator IntAtLeast(long long min);
// An integer in [min, max]: "must be an integer", "must be in [<min>, <max>]".
CLI::Validator IntIn(long long min, long long max);
// A finite number > `min`: "must be a number", "must be > <min>".
CLI::Validator NumberAbove(double min);
// A finite number in [min, max]: "must be >= <min>" (max = inf), "must be in [<min>, <max>]".
CLI::Validator NumberIn(double min, double max);
// A finite number in the interval written `interval` ("(0, 1]", "[0, 1)") with ends min, max.
CLI::Validator NumberInterval(double min, double max, const std::string& interval);
// One of `names` (for a list option: each element): "must be one of "a", "b", ...".
CLI::Validator OneOf(const std::vector<std::string>& names);
// A directory a command writes several files and folders into: not empty and not the
// filesystem root ("must be a directory other than the filesystem root").
CLI::Validator OutputDirectory();

// The one-line message of a command-line parse error: "<flag> = <value>: <rule>" for the
// validators above, CLI11's own message otherwise.
std::string ParseErrorMessage(const CLI::ParseError& error);

}  // namespace stratos::cli
