#pragma once
// Writing cluster descriptions as TOML (TOML++), in the format costmodel/cluster_io.h reads, so
// that a calibrated cluster round-trips: ReadClusterFile(written) equals the ClusterSpec up to
// the last bit of the unit conversions (GBps <-> bytes/s, us <-> s, TFLOPS <-> FLOP/s).
#include <string>

#include "costmodel/cluster.h"

namespace stratos {

// The TOML text of `cluster`: [cluster] name, the device catalog (with [device.matmul_curve]),
// node groups, network levels (with ring_links_per_gpu and [network.<collective>] fits),
// [collective.<name>] launch costs and algorithms where they differ from the defaults, and
// [calibration] when cluster.calibration.source is set. `header` (may be empty) is written first
// as '#' comment lines. Sizes in GB (1e9 bytes), bandwidths in GBps, latencies in us, peaks in
// TFLOPS. cluster.source (the file it was read from) is not written.
std::string ClusterToToml(const ClusterSpec& cluster, const std::string& header);

// Writes ClusterToToml(cluster, header) to `path` atomically (temporary file + rename), so that
// a failure leaves an earlier file intact. Throws InputError naming the file.
void WriteClusterFile(const ClusterSpec& cluster, const std::string& path,
                      const std::string& header);

}  // namespace stratos
