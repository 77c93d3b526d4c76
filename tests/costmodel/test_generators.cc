// Instance generators (costmodel/generators.h): deterministic, within their stated ranges, and
// the operator-granularity view sums to the block-level model.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/generators.h"
#include "costmodel/model_io.h"
#include "costmodel/cluster_io.h"
#include "costmodel/zoo.h"

namespace stratos {

TEST_CASE("generators: non-uniform models are deterministic per seed and stay in their range") {
  NonUniformModelOptions options;
  options.num_layers = 400;
  const ModelSpec a = MakeNonUniformModel(options, 3);
  const ModelSpec b = MakeNonUniformModel(options, 3);
  const ModelSpec c = MakeNonUniformModel(options, 4);
  REQUIRE(a.NumLayers() == 400);
  CHECK(a.name == "nonuniform-L400-s3");
  bool differs = false;
  for (int l = 0; l < a.NumLayers(); ++l) {
    CHECK(a.layers[l].forward_flops == b.layers[l].forward_flops);
    CHECK(a.layers[l].output_bytes == b.layers[l].output_bytes);
    differs = differs || a.layers[l].forward_flops != c.layers[l].forward_flops;
  }
  CHECK(differs);
  // The base block, and the spread of each quantity in decades.
  ModelSpec shape;
  shape.family = "gpt";
  shape.hidden_size = 4096;
  shape.num_layers = 1;
  shape.num_attention_heads = 32;
  shape.vocab_size = 51200;
  shape.seq_length = 2048;
  BuildTransformerLayers(shape);
  const LayerSpec& base = shape.layers[1];
  double lo = 1e9, hi = -1e9;
  for (int l = 0; l < a.NumLayers(); ++l) {
    const LayerSpec& layer = a.layers[l];
    const double d = std::log10(layer.forward_flops / base.forward_flops);
    lo = std::min(lo, d);
    hi = std::max(hi, d);
    CHECK(std::abs(d) <= 0.75 + 1e-12);
    CHECK(std::abs(std::log10(layer.param_count / base.param_count)) <= 0.75 + 1e-12);
    CHECK(std::abs(std::log10(layer.ActivationBytes() / base.ActivationBytes())) <= 0.75 + 1e-12);
    CHECK(std::abs(std::log10(layer.output_bytes / base.output_bytes)) <= 0.75 + 1e-12);
    CHECK(layer.cost_class == l);
    if (l > 0) CHECK(layer.input_bytes == a.layers[l - 1].output_bytes);
  }
  CHECK(hi - lo > 1.3);  // 400 draws cover most of the 1.5 decades
  options.spread_decades = -1;
  CHECK_THROWS_WITH_AS(MakeNonUniformModel(options, 0),
                       "spread_decades = -1: must be in [0, 12]", InputError);
}

TEST_CASE("generators: operator granularity sums to the block-level model (gpt and llama)") {
  for (const char* name : {"gpt3-6.7b", "llama3-8b"}) {
    CAPTURE(name);
    const ModelSpec block = ReadModelFile(ResolveModelPath(name));
    const ModelSpec ops = MakeOperatorGranularityModel(block);
    CHECK(ops.NumLayers() == 2 + 10 * block.num_layers);
    CHECK(ops.name == std::string(name) + "-ops");
    auto total = [](const ModelSpec& m, double LayerSpec::*field) {
      double sum = 0;
      for (const LayerSpec& l : m.layers) sum += l.*field;
      return sum;
    };
    for (double LayerSpec::*field :
         {&LayerSpec::forward_flops, &LayerSpec::attention_flops, &LayerSpec::param_count,
          &LayerSpec::stored_param_count, &LayerSpec::activation_replicated_bytes,
          &LayerSpec::activation_sharded_bytes, &LayerSpec::activation_attention_bytes,
          &LayerSpec::input_bytes})
      CHECK(total(ops, field) == doctest::Approx(total(block, field)).epsilon(1e-12));
    CHECK(ops.ParameterCount() == block.ParameterCount());
    int allreduces_ops = 0, allreduces_block = 0;
    for (const LayerSpec& l : ops.layers) allreduces_ops += l.tp_allreduces_per_forward;
    for (const LayerSpec& l : block.layers) allreduces_block += l.tp_allreduces_per_forward;
    CHECK(allreduces_ops == allreduces_block);
    CHECK(ops.NumCostClasses() == 12);

    // A one-stage plan costs the same compute and memory in both views (same GEMM shape, sums)
    // on a device without a block curve; with one, the curve prices whole blocks only.
    Problem p_block, p_ops;
    p_block.model = block;
    p_ops.model = ops;
    p_block.cluster = p_ops.cluster =
        ReadClusterFile(ResolveClusterPath("dgx-a100-80gb-datasheet")).WithNodes(1);
    CHECK(std::all_of(ops.layers.begin(), ops.layers.end(), [](const LayerSpec& l) {
      return l.block_operator == (l.kind == LayerKind::kTransformer);
    }));
    p_block.training.global_batch_size = p_ops.training.global_batch_size = 64;
    for (int tp : {1, 8}) {
      for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
        CAPTURE(tp);
        CAPTURE(RecomputeName(recompute));
        auto plan_for = [&](const Problem& p) {
          Plan plan;
          plan.global_batch_size = 64;
          plan.num_microbatches = 8;
          StagePlan stage;
          stage.first_layer = 0;
          stage.last_layer = p.NumLayers();
          stage.config.mesh_nodes = 1;
          stage.config.mesh_gpus_per_node = 8;
          stage.config.tensor_parallel = tp;
          stage.config.data_parallel = 8 / tp;
          stage.config.recompute = recompute;
          plan.stages.push_back(stage);
          return plan;
        };
        const Estimate eb = Evaluate(p_block, plan_for(p_block));
        const Estimate eo = Evaluate(p_ops, plan_for(p_ops));
        CHECK(eo.iteration_seconds == doctest::Approx(eb.iteration_seconds).epsilon(1e-9));
        // Full recomputation re-materializes one layer at a time (CostModel::StageOverhead): a
        // sublayer's activations, not a block's, so the operator view needs less working memory.
        if (recompute == Recompute::kFull) {
          CHECK(eo.stages[0].peak_memory_bytes < eb.stages[0].peak_memory_bytes);
        } else {
          CHECK(eo.stages[0].peak_memory_bytes ==
                doctest::Approx(eb.stages[0].peak_memory_bytes).epsilon(1e-9));
        }
      }
    }
  }
  ModelSpec explicit_model = MakeNonUniformModel(NonUniformModelOptions{}, 0);
  CHECK_THROWS_AS(MakeOperatorGranularityModel(explicit_model), InputError);
}

}  // namespace stratos
