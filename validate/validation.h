#pragma once
// The validation reports by CLI name: `stratos validate <name>`.
#include <string>
#include <vector>

#include "validate/report.h"

namespace stratos {

// "megatron-h100", "amp", "korthikanti", "zero", "alpa-point", "vtrain", "vtrain-shapes",
// "nccl".
const std::vector<std::string>& ValidationReportNames();

// One line per report: what it compares with what.
std::string ValidationReportDescription(const std::string& name);

// Runs report `name` on its published table(s) in ../shared/data/reference. Throws InputError
// for an unknown name (listing the known ones) and for unreadable or malformed tables.
ValidationReport RunValidationReport(const std::string& name);

}  // namespace stratos
