#pragma once
// Shared by `stratos calibrate` and `stratos validate alpa-comm`: loading a profile from the
// command line's flags, and the fit table both print.
#include <string>
#include <vector>

#include "calibrate/calibrate.h"
#include "calibrate/profile.h"

namespace stratos {

struct LoadedProfile {
  Profile profile;
  std::string flag;         // "--profile DIR" or "--alpa-csv FILE", paths as PathForDisplay
  std::string description;  // what was read and what was left out, for reports and files
  // Alpa rows make_monotonic filled in (lower bounds, not measurements); empty for profiles.
  std::vector<CollectiveRow> filled_collectives;
};

// Reads `profile_dir` if given, else the Alpa CSV `alpa_csv` ("" = DefaultAlpaProfilePath()).
// Throws InputError from the readers.
LoadedProfile LoadProfile(const std::string& profile_dir, const std::string& alpa_csv);

// Per collective and network level: launch cost, latency, bandwidth, MAPE and max error on the
// fitted and held-out rows; then the matmul curve and the rows the model does not cover.
std::string CalibrationTable(const CalibrationResult& result);

// "12.3%" for a fraction, "-" for NaN (no rows).
std::string Percent(double fraction);

}  // namespace stratos
