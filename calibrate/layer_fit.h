#pragma once
// Fitting a device's transformer-block curve (cluster.h LayerCurve) to profiled block times
// (profile layer.csv: one GPT block of one TP rank, forward and backward, timed as training runs
// it; runtime/profiler.h ProfileLayers). A row's device time x is the cost model's own
// (cost_model.h LayerComputeSeconds without a layer curve, on the device with its fitted matmul
// curve, activations at the row's dtype), so the curve corrects exactly what the cost model
// misses. For each power p in kLayerCurvePowers, the forward and the backward (scale, floor)
// each minimise the summed squared relative error
//   sum_i (((scale x_i)^p + floor^p)^(1/p) / t_i - 1)^2
// (a grid refined around its best point; the problem has two unknowns), and ChooseLayerCurve
// keeps the power with the lowest leave-one-out error over the rows, forward and backward
// together, so that the rows left out never shape the choice.
#include <utility>
#include <vector>

#include "calibrate/profile.h"
#include "costmodel/cluster.h"

namespace stratos {

inline constexpr double kLayerCurvePowers[] = {1, 2, 3, 4, 8};

// The cost model's device time of each row's block, forward and backward (seconds, per block
// and microbatch) on `device`, without any layer curve; with `flash_attention` the blocks store
// no attention scores (UseFlashAttention), as blocks profiled with a fused attention kernel.
// Throws InputError naming the row for a shape the cost model cannot build (e.g. heads not
// dividing the hidden size).
std::vector<std::pair<double, double>> LayerRowDeviceSeconds(const std::vector<LayerRow>& rows,
                                                             const DeviceSpec& device,
                                                             bool flash_attention = false);

// Forward and backward (scale, floor) at `power`, fitted to `rows` given their device times
// (`device_seconds`, as LayerRowDeviceSeconds returns). Throws InputError for fewer than 3 rows.
LayerCurve FitLayerCurve(const std::vector<LayerRow>& rows,
                         const std::vector<std::pair<double, double>>& device_seconds,
                         double power);

struct LayerChoice {
  LayerCurve curve;  // the chosen power, fitted on all rows
  int rows = 0;
  // Leave-one-out MAPE (fraction; forward and backward errors averaged) of each power.
  std::vector<std::pair<double, double>> cross_validation_mape;
};

// Fits every power of kLayerCurvePowers and keeps the one with the lowest leave-one-out MAPE
// (`flash_attention` as for LayerRowDeviceSeconds). Throws InputError for fewer than 4 rows.
LayerChoice ChooseLayerCurve(const std::vector<LayerRow>& rows, const DeviceSpec& device,
                             bool flash_attention = false);

// The cost model's forward and backward time for each row with `curve` on `device`.
std::vector<std::pair<double, double>> PredictLayerRows(const std::vector<LayerRow>& rows,
                                                        const DeviceSpec& device,
                                                        const LayerCurve& curve,
                                                        bool flash_attention = false);

}  // namespace stratos
