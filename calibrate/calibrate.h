#pragma once
// Calibration (DESIGN.md §5): fit the free constants of the cost model (per-collective launch
// cost, latency and bandwidth per network level; the GEMM efficiency curve) to a profile, and
// return the base cluster description with those constants filled in, plus the fit reports
// (error on the fitted rows and on held-out rows).
#include <array>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "calibrate/collective_fit.h"
#include "calibrate/layer_fit.h"
#include "calibrate/least_squares.h"
#include "calibrate/matmul_fit.h"
#include "calibrate/profile.h"
#include "costmodel/cluster.h"

namespace stratos {

// Which profile rows are held out: not fitted, only predicted, so that their error measures
// how well the calibrated model extrapolates.
struct Holdout {
  // A set of collective rows: mesh nodes x gpus_per_node, optionally one group size and/or
  // only groups inside a node ("local") or crossing nodes ("cross").
  struct MeshSelector {
    int nodes = 0;
    int gpus_per_node = 0;
    int group_size = 0;  // 0: any
    enum class Where { kAny, kLocal, kCross } where = Where::kAny;
  };
  std::vector<MeshSelector> meshes;
  long long matmul_min_dim_above = 0;  // hold out GEMMs with min(m, n, k) above this; 0: none

  bool HoldsOut(const CollectiveRow& row) const;
  bool HoldsOut(const MatmulRow& row) const;
  // The selectors in ParseHoldout's syntax ("none" when empty).
  std::string ToString() const;
};

// Parses a comma list of selectors: "NxG" (all collective rows of that mesh), "NxG/gS" (its
// groups of S ranks), "NxG/local" or "NxG/cross" (groups inside a node / crossing nodes), which
// combine ("2x8/g16/cross"), and "gemm>D" (matmul rows whose smallest dimension exceeds D).
// "" or "none": nothing held out. Throws InputError "--holdout = <text>: <rule>".
Holdout ParseHoldout(const std::string& text);

struct CalibrateOptions {
  Holdout holdout;
  // Links per GPU of the intra-node topology (NetworkLevel::ring_links_per_gpu); -1: keep the
  // base cluster's. Not fitted: it is a property of the hardware (V100 SXM2: 6 NVLink2 links).
  int ring_links_per_gpu = -1;
  // Inter-node algorithm per collective (index: Collective). Default: what NCCL runs between
  // nodes (DefaultInterNodeAlgorithm).
  std::array<InterNodeAlgorithm, kNumCollectives> algorithms = {
      DefaultInterNodeAlgorithm(Collective::kAllReduce),
      DefaultInterNodeAlgorithm(Collective::kAllGather),
      DefaultInterNodeAlgorithm(Collective::kReduceScatter)};
  // Fit each network level's pipelining coefficient beside its latency and bandwidth
  // (costmodel/collective.h: the bus bandwidth's ramp over message sizes).
  bool collective_pipeline = true;
  // GEMM rows of this dtype fit the device's curve (the cost model prices fp16/bf16 GEMMs
  // against peak_TFLOPS, the dense fp16/bf16 peak).
  std::string matmul_dtype = "f16";
  // Fit the block curve (calibrate/layer_fit.h) when the profile has >= 4 blocks of matmul_dtype.
  bool fit_layer_curve = true;
  // The device's memory is set from measured runs after the fit (--memory-runs): its source
  // then names only peak_TFLOPS and hbm_GBps as the base's.
  bool memory_from_runs = false;
  std::string name;    // of the calibrated cluster; "": "<base name>-calibrated"
  std::string source;  // prose for [calibration] source: the command and the profile
};

struct CollectiveReport {
  CollectiveFit fit;
  ErrorStats fitted;    // on the rows fitted
  ErrorStats held_out;  // on the held-out rows of this collective
};

struct MatmulReport {
  MatmulChoice choice;
  ErrorStats fitted;
  ErrorStats held_out;
  int other_dtype_rows = 0;  // matmul rows of another dtype, not used
};

struct LayerReport {
  LayerChoice choice;
  ErrorStats forward;   // on the rows fitted
  ErrorStats backward;
  int other_dtype_rows = 0;  // layer rows of another dtype, not used
};

struct CalibrationResult {
  ClusterSpec cluster;                        // the base with the calibrated constants
  std::vector<CollectiveReport> collectives;  // one per collective with rows, Collective order
  std::optional<MatmulReport> matmul;         // nullopt: no matmul rows of the dtype
  std::map<std::string, int> skipped_rows;    // reason -> collective rows the model does not cover
  std::optional<LayerReport> layer;  // nullopt: fewer than 4 layer rows of the matmul dtype
};

// Fits every collective with rows and the matmul curve, on the rows `options.holdout` does not
// hold out, and writes the constants into a copy of `base` (its first node group's device gets
// the curve; its matmul_efficiency becomes the curve's efficiency at the largest fitted GEMM;
// each network level's own bandwidth and latency become its all-reduce fit (else its first
// collective fit), the best estimate left for point-to-point sends). Throws InputError if a fit fails (calibrate/collective_fit.h,
// matmul_fit.h), if nothing is left to fit, or if the base cluster is heterogeneous.
CalibrationResult Calibrate(const ClusterSpec& base, const Profile& profile,
                            const CalibrateOptions& options);

// `device` when `slowdown` processes share each of its compute units (e.g. CPU worker processes
// beyond the machine's hardware threads, each profiled alone on one thread): every compute term
// `slowdown` times slower -- peak FLOP/s and memory bandwidth divided, the GEMM curve's per-GEMM
// overhead and the block curve's floors multiplied (a block's time is homogeneous of degree 1 in
// its device time and floor, so it scales exactly). Throws InputError if slowdown < 1.
DeviceSpec SlowedDevice(DeviceSpec device, double slowdown);

}  // namespace stratos
