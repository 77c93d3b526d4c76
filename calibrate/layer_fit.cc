#include "calibrate/layer_fit.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/model.h"

namespace stratos {
namespace {

// Sum of squared relative errors of Combine(scale, floor, x_i) against t_i.
double SquaredRelativeError(const LayerCurve& shape, double scale, double floor_seconds,
                            const std::vector<double>& x, const std::vector<double>& t) {
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = shape.Combine(scale, floor_seconds, x[i]) / t[i] - 1.0;
    sum += e * e;
  }
  return sum;
}

// (scale, floor) minimising SquaredRelativeError: a 33 x 33 grid over scale in [1/8, 8]
// (logarithmic) and floor in [0, max t], refined four times around its best point.
std::pair<double, double> FitOneDirection(double power, const std::vector<double>& x,
                                          const std::vector<double>& t) {
  LayerCurve shape;
  shape.power = power;
  const double t_max = *std::max_element(t.begin(), t.end());
  double log_lo = std::log(0.125), log_hi = std::log(8.0), floor_lo = 0, floor_hi = t_max;
  double best_scale = 1, best_floor = 0, best = std::numeric_limits<double>::infinity();
  constexpr int kSteps = 32;
  for (int level = 0; level < 5; ++level) {
    for (int i = 0; i <= kSteps; ++i) {
      const double scale = std::exp(log_lo + (log_hi - log_lo) * i / kSteps);
      for (int j = 0; j <= kSteps; ++j) {
        const double floor_seconds = floor_lo + (floor_hi - floor_lo) * j / kSteps;
        const double e = SquaredRelativeError(shape, scale, floor_seconds, x, t);
        if (e < best) {
          best = e;
          best_scale = scale;
          best_floor = floor_seconds;
        }
      }
    }
    const double log_step = (log_hi - log_lo) / kSteps, floor_step = (floor_hi - floor_lo) / kSteps;
    log_lo = std::log(best_scale) - 2 * log_step;
    log_hi = std::log(best_scale) + 2 * log_step;
    floor_lo = std::max(0.0, best_floor - 2 * floor_step);
    floor_hi = best_floor + 2 * floor_step;
  }
  return {best_scale, best_floor};
}

}  // namespace

std::vector<std::pair<double, double>> LayerRowDeviceSeconds(const std::vector<LayerRow>& rows,
                                                             const DeviceSpec& device,
                                                             bool flash_attention) {
  std::vector<std::pair<double, double>> out;
  for (const LayerRow& row : rows) {
    ModelSpec model;
    model.name = fmt::format("profiled block h{} a{} s{}", row.hidden, row.heads, row.seq_len);
    model.family = "gpt";
    model.hidden_size = row.hidden;
    model.num_attention_heads = row.heads;
    model.num_layers = 1;
    model.vocab_size = 64;
    model.seq_length = row.seq_len;
    try {
      BuildTransformerLayers(model);
      if (flash_attention) UseFlashAttention(model);
    } catch (const InputError& e) {
      throw InputError(fmt::format("layer row hidden {} heads {} seq_len {}: {}", row.hidden,
                                   row.heads, row.seq_len, e.what()));
    }
    TrainingSpec training;
    training.activation_dtype_bytes = row.dtype == "f32" ? 4 : 2;
    const LayerCompute c = LayerComputeSeconds(model, 1, device, training, row.micro_batch,
                                               row.tensor_parallel, Recompute::kNone,
                                               /*use_layer_curve=*/false);
    out.emplace_back(c.forward_seconds, c.backward_seconds);
  }
  return out;
}

LayerCurve FitLayerCurve(const std::vector<LayerRow>& rows,
                         const std::vector<std::pair<double, double>>& device_seconds,
                         double power) {
  STRATOS_CHECK(rows.size() == device_seconds.size(), "{} rows, {} device times", rows.size(),
                device_seconds.size());
  if (rows.size() < 3)
    throw InputError(fmt::format("layer curve: {} block rows, at least 3 needed", rows.size()));
  std::vector<double> xf, xb, tf, tb;
  for (size_t i = 0; i < rows.size(); ++i) {
    xf.push_back(device_seconds[i].first);
    xb.push_back(device_seconds[i].second);
    tf.push_back(rows[i].forward_seconds);
    tb.push_back(rows[i].backward_seconds);
  }
  LayerCurve curve;
  curve.power = power;
  std::tie(curve.forward_scale, curve.forward_floor_seconds) = FitOneDirection(power, xf, tf);
  std::tie(curve.backward_scale, curve.backward_floor_seconds) = FitOneDirection(power, xb, tb);
  return curve;
}

LayerChoice ChooseLayerCurve(const std::vector<LayerRow>& rows, const DeviceSpec& device,
                             bool flash_attention) {
  if (rows.size() < 4)
    throw InputError(fmt::format("layer curve: {} block rows, at least 4 needed", rows.size()));
  const std::vector<std::pair<double, double>> x =
      LayerRowDeviceSeconds(rows, device, flash_attention);
  LayerChoice choice;
  choice.rows = static_cast<int>(rows.size());
  double best = std::numeric_limits<double>::infinity();
  for (double power : kLayerCurvePowers) {
    double sum = 0;
    for (size_t out = 0; out < rows.size(); ++out) {
      std::vector<LayerRow> kept;
      std::vector<std::pair<double, double>> kept_x;
      for (size_t i = 0; i < rows.size(); ++i) {
        if (i == out) continue;
        kept.push_back(rows[i]);
        kept_x.push_back(x[i]);
      }
      const LayerCurve c = FitLayerCurve(kept, kept_x, power);
      const double ef = c.Forward(x[out].first) / rows[out].forward_seconds;
      const double eb = c.Backward(x[out].second) / rows[out].backward_seconds;
      sum += (std::abs(ef - 1) + std::abs(eb - 1)) / 2;
    }
    const double mape = sum / rows.size();
    choice.cross_validation_mape.emplace_back(power, mape);
    if (mape < best) {
      best = mape;
      choice.curve = FitLayerCurve(rows, x, power);
    }
  }
  return choice;
}

std::vector<std::pair<double, double>> PredictLayerRows(const std::vector<LayerRow>& rows,
                                                        const DeviceSpec& device,
                                                        const LayerCurve& curve,
                                                        bool flash_attention) {
  std::vector<std::pair<double, double>> out;
  for (const auto& [f, b] : LayerRowDeviceSeconds(rows, device, flash_attention)) {
    out.emplace_back(curve.Forward(f), curve.Backward(b));
  }
  return out;
}

}  // namespace stratos
