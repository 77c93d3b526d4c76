#pragma once
// Private to calibrate/: the CSV reader (Ben Strasser's fast-cpp-csv-parser, Debian libfccp-dev)
// configured once for every file calibrate reads, and its errors turned into InputError
// "<file>:<line>: <column> = <value>: <rule>".
#include <limits>  // csv.h uses std::numeric_limits without including it

#define CSV_IO_NO_THREAD  // read on the caller's thread: no std::thread inside the library
// csv.h copies file names with strncpy into fixed buffers, which GCC flags once inlined (clang
// has no such warning).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#endif
#include <libfccp/csv.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <fmt/format.h>

#include <string>

#include "costmodel/error.h"

namespace stratos {

// Quoted fields ("0 1|2 3", "a,b"), blanks trimmed around fields.
template <unsigned kColumns>
using CsvReader =
    io::CSVReader<kColumns, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>>;

// The message of a parser error in `file`, e.g. "m.csv:3: m = \"x\": must be an integer".
std::string CsvErrorMessage(const std::string& file, const io::error::base& error);

// Position of a value in a CSV file, for errors "<file>:<line>: <column> = <value>: <rule>".
struct CsvCell {
  const std::string& file;
  unsigned line;
  const char* column;
};

// Throws InputError "<file>:<line>: <column> = <value>: <rule>".
[[noreturn]] void FailCell(const CsvCell& cell, const std::string& value, const std::string& rule);

// The whole field as a number (strtod syntax); throws "must be a finite number" otherwise, so
// "inf", "nan" and "1.5x" are errors.
double ParseFinite(const CsvCell& cell, const std::string& text);
// As ParseFinite, also > 0 (rule "must be > 0") or >= 0 ("must be >= 0").
double ParsePositive(const CsvCell& cell, const std::string& text);
double ParseNonNegative(const CsvCell& cell, const std::string& text);

// Throws "must be >= <min>" when value < min.
template <typename Int>
void RequireAtLeast(const CsvCell& cell, Int value, Int min) {
  if (value < min) FailCell(cell, fmt::format("{}", value), fmt::format("must be >= {}", min));
}

// Runs `read`, turning the parser's exceptions into InputError(CsvErrorMessage(...)).
template <typename Read>
void TranslateCsvErrors(const std::string& file, Read&& read) {
  try {
    read();
  } catch (const io::error::base& error) {
    throw InputError(CsvErrorMessage(file, error));
  }
}

}  // namespace stratos
