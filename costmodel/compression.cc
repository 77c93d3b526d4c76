#include "costmodel/compression.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>

#include "costmodel/error.h"
#include "costmodel/model.h"

namespace stratos {

const char* GradCompressionName(GradCompression kind) {
  switch (kind) {
    case GradCompression::kNone: return "none";
    case GradCompression::kBf16: return "bf16";
    case GradCompression::kFp16: return "fp16";
    case GradCompression::kTopK: return "topk";
    case GradCompression::kPowerSgd: return "powersgd";
    case GradCompression::kTernGrad: return "terngrad";
    case GradCompression::kSign: return "sign";
  }
  return "unknown";
}

const std::vector<GradCompression>& AllGradCompressions() {
  static const std::vector<GradCompression> kinds = {
      GradCompression::kNone, GradCompression::kBf16,     GradCompression::kFp16,
      GradCompression::kTopK, GradCompression::kPowerSgd, GradCompression::kTernGrad,
      GradCompression::kSign};
  return kinds;
}

GradCompression ParseGradCompression(const std::string& text, const std::string& where,
                                     const std::string& key) {
  std::string allowed;
  for (GradCompression kind : AllGradCompressions()) {
    if (text == GradCompressionName(kind)) return kind;
    allowed += fmt::format("{}\"{}\"", allowed.empty() ? "" : ", ", GradCompressionName(kind));
  }
  ThrowInputError(where, key, fmt::format("\"{}\"", text),
                  fmt::format("must be one of {}", allowed));
}

std::string CompressionSpec::Label() const {
  switch (kind) {
    case GradCompression::kTopK:
      return topk_momentum > 0
                 ? fmt::format("topk(density={:g}, momentum={:g})", topk_density, topk_momentum)
                 : fmt::format("topk(density={:g})", topk_density);
    case GradCompression::kPowerSgd: return fmt::format("powersgd(rank={})", powersgd_rank);
    default: return GradCompressionName(kind);
  }
}

// Parameters of other kinds do not matter: a "bf16" spec equals every other "bf16" spec.
bool CompressionSpec::operator==(const CompressionSpec& o) const {
  if (kind != o.kind) return false;
  if (kind == GradCompression::kTopK)
    return topk_density == o.topk_density && topk_momentum == o.topk_momentum;
  if (kind == GradCompression::kPowerSgd) return powersgd_rank == o.powersgd_rank;
  return true;
}

std::string CheckCompressionSpec(const CompressionSpec& spec) {
  if (spec.kind == GradCompression::kTopK) {
    if (!(spec.topk_density > 0 && spec.topk_density <= 1))
      return fmt::format("topk_density {} must be in (0, 1]", spec.topk_density);
    if (!(spec.topk_momentum >= 0 && spec.topk_momentum < 1))
      return fmt::format("topk_momentum {} must be in [0, 1)", spec.topk_momentum);
  }
  if (spec.kind == GradCompression::kPowerSgd && spec.powersgd_rank < 1)
    return fmt::format("powersgd_rank {} must be >= 1", spec.powersgd_rank);
  return "";
}

std::string CheckStageCompression(const CompressionSpec& spec, int zero_stage) {
  std::string rule = CheckCompressionSpec(spec);
  if (!rule.empty()) return rule;
  if (spec.kind != GradCompression::kNone && zero_stage > 1)
    return fmt::format("grad_compression {} needs the full gradient on every DP rank: zero_stage "
                       "{} shards it (use ZeRO 0 or 1)",
                       spec.Label(), zero_stage);
  return "";
}

bool UsesAllGather(GradCompression kind) {
  return kind == GradCompression::kTopK || kind == GradCompression::kTernGrad ||
         kind == GradCompression::kSign;
}

GradientTensorShape ShapeOf(const std::vector<int64_t>& sizes) {
  GradientTensorShape shape;
  if (sizes.empty()) {
    shape.rows = 1;  // a scalar
    return shape;
  }
  shape.rows = static_cast<double>(sizes[0]);
  for (size_t d = 1; d < sizes.size(); ++d) shape.cols *= static_cast<double>(sizes[d]);
  return shape;
}

double TopKCount(double density, double elements) {
  if (elements <= 0) return 0;
  const double k = std::ceil(std::round(density * elements * 1e9) / 1e9);
  return std::min(elements, std::max(1.0, k));
}

int64_t TopKCount(double density, int64_t elements) {
  return static_cast<int64_t>(TopKCount(density, static_cast<double>(elements)));
}

bool PowerSgdCompresses(const GradientTensorShape& shape, int rank) {
  return shape.IsMatrix() && rank * (shape.rows + shape.cols) < shape.Elements();
}

CompressedMessage MessageBytes(const CompressionSpec& spec, const GradientTensorShape& shape,
                               double grad_dtype_bytes) {
  const double elements = shape.Elements();
  CompressedMessage message;
  switch (spec.kind) {
    case GradCompression::kNone:
      message.all_reduce_bytes = elements * grad_dtype_bytes;
      break;
    case GradCompression::kBf16:
    case GradCompression::kFp16:
      message.all_reduce_bytes = elements * 2;
      break;
    case GradCompression::kPowerSgd:
      message.all_reduce_bytes =
          PowerSgdCompresses(shape, spec.powersgd_rank)
              ? spec.powersgd_rank * (shape.rows + shape.cols) * grad_dtype_bytes
              : elements * grad_dtype_bytes;
      break;
    case GradCompression::kTopK:
      message.all_gather_bytes = TopKCount(spec.topk_density, elements) * (grad_dtype_bytes + 4);
      break;
    case GradCompression::kTernGrad:
      message.all_gather_bytes = std::ceil(elements / 4) + 4;
      break;
    case GradCompression::kSign:
      message.all_gather_bytes = std::ceil(elements / 8) + 4;
      break;
  }
  return message;
}

double WireBytes(const CompressionSpec& spec, const GradientTensorShape& shape,
                 double grad_dtype_bytes, int group_size) {
  if (group_size <= 1) return 0;
  const double n = group_size;
  const CompressedMessage message = MessageBytes(spec, shape, grad_dtype_bytes);
  return 2 * (n - 1) / n * message.all_reduce_bytes + (n - 1) * message.all_gather_bytes;
}

double WireBytes(const CompressionSpec& spec, double elements, double grad_dtype_bytes,
                 int group_size) {
  return WireBytes(spec, GradientTensorShape{elements, 1}, grad_dtype_bytes, group_size);
}

CompressionWork CompressionWorkOf(const CompressionSpec& spec, const GradientTensorShape& shape,
                                  double grad_dtype_bytes, int group_size) {
  const double E = shape.Elements();
  const double g = grad_dtype_bytes;
  const double n = std::max(1, group_size);
  CompressionWork work;
  switch (spec.kind) {
    case GradCompression::kNone:
      break;
    case GradCompression::kBf16:
    case GradCompression::kFp16:
      if (g > 2) work.memory_bytes = 2 * E * (g + 2);
      break;
    case GradCompression::kTopK: {
      const double k = TopKCount(spec.topk_density, E);
      const double passes = 3 + (spec.topk_momentum > 0 ? 3 : 0) + 2 + 1;
      work.memory_bytes = passes * E * g + n * k * (8 + 2 * g);
      break;
    }
    case GradCompression::kTernGrad:
      work.memory_bytes = 2 * E * g + 2 * 4 * E + E / 4 + n * (E / 4 + 2 * E * g);
      break;
    case GradCompression::kSign:
      work.memory_bytes = 7 * E * g + E / 8 + n * (E / 8 + 2 * E * g);
      break;
    case GradCompression::kPowerSgd:
      if (PowerSgdCompresses(shape, spec.powersgd_rank)) {
        const double r = spec.powersgd_rank;
        work.memory_bytes = 6 * E * g;
        work.flops = 3 * 2 * r * E + 2 * shape.rows * r * r;
      }
      break;
  }
  return work;
}

std::vector<double> LayerWeightMatrixRows(const ModelSpec& model, LayerKind kind) {
  const double h = model.hidden_size;
  if (h <= 0) return {};
  const double f = model.ffn_hidden_size;
  const double heads = model.num_attention_heads;
  const double hkv =
      (model.num_key_value_heads > 0 ? model.num_key_value_heads : heads) * (h / heads);
  const double V = model.vocab_size;
  std::vector<double> others;
  switch (kind) {
    case LayerKind::kEmbedding:
      others = {V};
      if (model.family != "llama") others.push_back(model.max_position_embeddings);
      break;
    case LayerKind::kTransformer:
      others = {h + 2 * hkv, h, f, f};
      if (model.family == "llama") others.push_back(f);
      break;
    case LayerKind::kHead:
      others = {V};
      if (model.family == "bert") others.insert(others.end(), {h, h});
      break;
    case LayerKind::kExplicit:
      break;
  }
  return others;
}

std::vector<GradientTensorShape> LayerGradientShapes(const ModelSpec& model,
                                                     const LayerSpec& layer, int tp) {
  const double stored = layer.stored_param_count / tp;
  std::vector<GradientTensorShape> shapes;
  if (stored <= 0) return shapes;
  const double h = model.hidden_size;
  const bool transformer_family = h > 0 && layer.kind != LayerKind::kExplicit;
  if (!transformer_family) {
    const double side = std::sqrt(stored);
    return {GradientTensorShape{side, side}};
  }
  const std::vector<double> others = LayerWeightMatrixRows(model, layer.kind);
  double matrix_elements = 0;
  for (double other : others) {
    shapes.push_back({other / tp, h});
    matrix_elements += other / tp * h;
  }
  const double vector_elements = stored - matrix_elements;
  STRATOS_CHECK(vector_elements > -1e-6 * stored,
                "layer {}: weight matrices of {} elements exceed its {} parameters", layer.name,
                matrix_elements, stored);
  if (vector_elements > 0) shapes.push_back({vector_elements, 1});
  return shapes;
}

std::vector<double> LayerParameterTensorElements(const ModelSpec& model, const LayerSpec& layer,
                                                 int tp) {
  if (layer.block_operator) {  // one operator's weight (and bias): a submodule
    if (layer.stored_param_count <= 0) return {};
    return {layer.stored_param_count / tp};
  }
  const std::vector<GradientTensorShape> shapes = LayerGradientShapes(model, layer, tp);
  const size_t matrices = LayerWeightMatrixRows(model, layer.kind).size();
  const int vectors = layer.vector_param_tensors;
  std::vector<double> elements;
  for (const GradientTensorShape& shape : shapes) {
    const double n = shape.Elements();
    if (elements.size() < matrices || vectors <= 1) {
      elements.push_back(n);
    } else {
      elements.insert(elements.end(), vectors, n / vectors);
    }
  }
  return elements;
}

namespace {

std::string Trim(const std::string& text) {
  const size_t first = text.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(" \t") - first + 1);
}

// Splits at the commas outside parentheses; `unbalanced` is set if a parenthesis is left open
// or closed without one open.
std::vector<std::string> SplitTopLevel(const std::string& text, bool* unbalanced) {
  std::vector<std::string> items(1);
  int depth = 0;
  *unbalanced = false;
  for (char c : text) {
    if (c == '(') ++depth;
    if (c == ')' && --depth < 0) *unbalanced = true;
    if (c == ',' && depth == 0) {
      items.emplace_back();
    } else {
      items.back() += c;
    }
  }
  if (depth != 0) *unbalanced = true;
  return items;
}

}  // namespace

std::vector<CompressionSpec> ParseCompressionList(const std::string& text, const std::string& where,
                                                  const std::string& key) {
  std::vector<CompressionSpec> specs;
  bool unbalanced = false;
  const std::vector<std::string> items = SplitTopLevel(text, &unbalanced);
  if (unbalanced) ThrowInputError(where, key, text, "has unbalanced parentheses");
  for (const std::string& raw : items) {
    const std::string item = Trim(raw);
    if (item.empty()) continue;
    const size_t open = item.find('(');
    CompressionSpec spec;
    spec.kind = ParseGradCompression(Trim(item.substr(0, open)), where, key);
    if (open != std::string::npos) {
      if (item.back() != ')')
        ThrowInputError(where, key, fmt::format("\"{}\"", item),
                        "must end with ')' after its parameters");
      bool ignored = false;
      for (const std::string& raw_parameter :
           SplitTopLevel(item.substr(open + 1, item.size() - open - 2), &ignored)) {
        const std::string parameter = Trim(raw_parameter);
        const size_t equals = parameter.find('=');
        const std::string name = Trim(parameter.substr(0, equals));
        const std::string value_text =
            equals == std::string::npos ? "" : Trim(parameter.substr(equals + 1));
        const std::vector<std::string> allowed =
            spec.kind == GradCompression::kTopK       ? std::vector<std::string>{"density", "momentum"}
            : spec.kind == GradCompression::kPowerSgd ? std::vector<std::string>{"rank"}
                                                      : std::vector<std::string>{};
        if (std::find(allowed.begin(), allowed.end(), name) == allowed.end())
          ThrowInputError(where, key, fmt::format("\"{}\"", item),
                          allowed.empty()
                              ? fmt::format("{} takes no parameters", GradCompressionName(spec.kind))
                              : fmt::format("{} takes {}=VALUE", GradCompressionName(spec.kind),
                                            fmt::join(allowed, "=VALUE, ")));
        size_t used = 0;
        double value = 0;
        try {
          value = std::stod(value_text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used == 0 || used != value_text.size())
          ThrowInputError(where, key, fmt::format("\"{}\"", item),
                          fmt::format("{} must be a number", name));
        if (name == "density") spec.topk_density = value;
        if (name == "momentum") spec.topk_momentum = value;
        if (name == "rank") {
          if (value != std::floor(value) || value < 1 || value > 1e6)
            ThrowInputError(where, key, fmt::format("\"{}\"", item),
                            "rank must be an integer >= 1");
          spec.powersgd_rank = static_cast<int>(value);
        }
      }
    }
    const std::string rule = CheckCompressionSpec(spec);
    if (!rule.empty()) ThrowInputError(where, key, fmt::format("\"{}\"", item), rule);
    specs.push_back(spec);
  }
  if (specs.empty()) ThrowInputError(where, key, text, "must list at least one compression");
  return specs;
}

}  // namespace stratos
