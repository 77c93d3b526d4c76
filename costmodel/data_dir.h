#pragma once
// Where stratos finds the files it ships: the zoo (data/models, data/clusters), the plot script
// (experiments/plot.py) and the experiment specs (experiments/specs), all under one data
// directory laid out as the source tree is; and the shared data sets (HuggingFace configs,
// tinyshakespeare, published reference tables, Alpa's profile, the seed partition cases).
//
// The data directory is the first of:
//   1. the directory set by SetDataDir (the global flag `stratos --data-dir DIR`),
//   2. the environment variable STRATOS_DATA_DIR,
//   3. <directory of the executable>/../share/stratos, if it exists (`make install` puts the
//      data there, so an installed stratos runs from anywhere),
//   4. the source tree stratos was built from (compiled in).
// The shared data sets are in <data directory>/shared/data where that exists (an installed
// stratos), else in <data directory>/../shared/data (beside a source tree).
#include <string>

namespace stratos {

// The data directory. Throws InputError "STRATOS_DATA_DIR = <dir>: <rule>" when the environment
// names a directory that is not a data directory (one holding data/models and data/clusters).
std::string DataDir();

// DataDir() + "/" + `relative`, e.g. DataPath("experiments/plot.py").
std::string DataPath(const std::string& relative);

// The shared data file or directory `relative`, e.g. SharedDataPath("tinyshakespeare.txt").
std::string SharedDataPath(const std::string& relative);

// Makes `dir` the data directory of this process and of the processes it starts (it sets
// STRATOS_DATA_DIR). Throws InputError "command line: --data-dir = <dir>: <rule>" unless `dir`
// is a data directory.
void SetDataDir(const std::string& dir);

}  // namespace stratos
