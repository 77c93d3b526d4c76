// Calibrated cluster files: the optional keys are read strictly, a written cluster reads back
// equal, and without the keys the cost model gives exactly the numbers it gave before them.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "calibrate/cluster_writer.h"
#include "costmodel/cluster_io.h"
#include "costmodel/collective.h"
#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/matmul_efficiency.h"
#include "costmodel/zoo.h"
#include "test_util.h"

namespace stratos {
using testing::InputErrorMessage;
using testing::Contains;
namespace {

// Relative equality of SI values after a TOML round trip (unit conversions cost a few ulps).
bool Close(double a, double b) { return a == b || std::abs(a - b) <= 1e-14 * std::abs(b); }

void CheckSameCluster(const ClusterSpec& a, const ClusterSpec& b) {
  CHECK(a.name == b.name);
  REQUIRE(a.devices.size() == b.devices.size());
  for (size_t i = 0; i < a.devices.size(); ++i) {
    const DeviceSpec& x = a.devices[i];
    const DeviceSpec& y = b.devices[i];
    CHECK(x.name == y.name);
    CHECK(Close(x.peak_flops, y.peak_flops));
    CHECK(Close(x.memory_bytes, y.memory_bytes));
    CHECK(Close(x.hbm_bytes_per_second, y.hbm_bytes_per_second));
    CHECK(Close(x.matmul_efficiency, y.matmul_efficiency));
    CHECK(Close(x.reserved_memory_bytes, y.reserved_memory_bytes));
    CHECK(Close(x.memory_fragmentation, y.memory_fragmentation));
    CHECK(x.source == y.source);
    REQUIRE(x.matmul_curve.has_value() == y.matmul_curve.has_value());
    if (x.matmul_curve) {
      CHECK(Close(x.matmul_curve->max_efficiency, y.matmul_curve->max_efficiency));
      CHECK(Close(x.matmul_curve->half_efficiency_dim, y.matmul_curve->half_efficiency_dim));
      CHECK(Close(x.matmul_curve->overhead_seconds, y.matmul_curve->overhead_seconds));
    }
    REQUIRE(x.layer_curve.has_value() == y.layer_curve.has_value());
    if (x.layer_curve) {
      CHECK(Close(x.layer_curve->forward_scale, y.layer_curve->forward_scale));
      CHECK(Close(x.layer_curve->backward_scale, y.layer_curve->backward_scale));
      CHECK(Close(x.layer_curve->forward_floor_seconds, y.layer_curve->forward_floor_seconds));
      CHECK(Close(x.layer_curve->backward_floor_seconds, y.layer_curve->backward_floor_seconds));
      CHECK(Close(x.layer_curve->power, y.layer_curve->power));
    }
  }
  REQUIRE(a.node_groups.size() == b.node_groups.size());
  for (size_t i = 0; i < a.node_groups.size(); ++i) {
    CHECK(a.node_groups[i].count == b.node_groups[i].count);
    CHECK(a.node_groups[i].gpus_per_node == b.node_groups[i].gpus_per_node);
    CHECK(a.node_groups[i].device == b.node_groups[i].device);
    CHECK(a.GroupName(static_cast<int>(i)) == b.GroupName(static_cast<int>(i)));
    CHECK(a.node_groups[i].intra_node_network == b.node_groups[i].intra_node_network);
    CHECK(a.node_groups[i].inter_node_network == b.node_groups[i].inter_node_network);
  }
  REQUIRE(a.group_links.size() == b.group_links.size());
  for (size_t i = 0; i < a.group_links.size(); ++i) {
    CHECK(a.group_links[i].first_group == b.group_links[i].first_group);
    CHECK(a.group_links[i].second_group == b.group_links[i].second_group);
    CHECK(a.group_links[i].network == b.group_links[i].network);
  }
  REQUIRE(a.networks.size() == b.networks.size());
  for (size_t i = 0; i < a.networks.size(); ++i) {
    const NetworkLevel& x = a.networks[i];
    const NetworkLevel& y = b.networks[i];
    CHECK(x.name == y.name);
    CHECK(Close(x.bandwidth_bytes_per_second, y.bandwidth_bytes_per_second));
    CHECK(Close(x.latency_seconds, y.latency_seconds));
    CHECK(Close(x.efficiency, y.efficiency));
    CHECK(x.ring_links_per_gpu == y.ring_links_per_gpu);
    CHECK(x.source == y.source);
    for (int c = 0; c < kNumCollectives; ++c) {
      REQUIRE(x.collective_fits[c].has_value() == y.collective_fits[c].has_value());
      if (!x.collective_fits[c]) continue;
      CHECK(Close(x.collective_fits[c]->bandwidth_bytes_per_second,
                  y.collective_fits[c]->bandwidth_bytes_per_second));
      CHECK(Close(x.collective_fits[c]->latency_seconds, y.collective_fits[c]->latency_seconds));
      CHECK(Close(x.collective_fits[c]->pipeline_seconds_per_sqrt_byte,
                  y.collective_fits[c]->pipeline_seconds_per_sqrt_byte));
    }
  }
  for (int c = 0; c < kNumCollectives; ++c) {
    CHECK(Close(a.collectives[c].launch_seconds, b.collectives[c].launch_seconds));
    CHECK(a.collectives[c].inter_node_algorithm == b.collectives[c].inter_node_algorithm);
  }
  CHECK(a.calibration.source == b.calibration.source);
  CHECK(a.calibration.collective_rows == b.calibration.collective_rows);
  CHECK(a.calibration.matmul_rows == b.calibration.matmul_rows);
}

ClusterSpec CalibratedExample() {
  ClusterSpec cluster = ReadClusterFile(ResolveClusterPath("p3.16xlarge-datasheet"));
  cluster.name = "p3-test";
  cluster.devices[0].matmul_curve = MatmulCurve{0.9476, 557.4, 29.0e-6};
  cluster.devices[0].matmul_efficiency = 0.8162;
  cluster.devices[0].layer_curve = LayerCurve{1.08, 1.19, 509e-6, 1198e-6, 3};
  cluster.devices[0].reserved_memory_bytes = 0.75 * 1024 * 1024 * 1024;
  cluster.devices[0].memory_fragmentation = 0.079;
  cluster.networks[0].ring_links_per_gpu = 6;
  cluster.networks[0].collective_fits[0] = LinkFit{22.95e9, 10.89e-6, 11.9e-9};
  cluster.networks[0].collective_fits[2] = LinkFit{17.41e9 / 3, 29.2e-6 / 7};
  cluster.networks[1].collective_fits[1] = LinkFit{2.589e9, 138.7e-6};
  cluster.collectives[1] = {38.03e-6, InterNodeAlgorithm::kRing};
  cluster.collectives[2] = {0.0, InterNodeAlgorithm::kRing};
  cluster.calibration = {"stratos calibrate --alpa-csv x.csv: fitted on \"rows\"", 1064, 18};
  return cluster;
}

TEST_CASE("a calibrated cluster written as TOML reads back equal, and rewrites identically") {
  const ClusterSpec cluster = CalibratedExample();
  const std::string text = ClusterToToml(cluster, "header\nsecond line");
  CHECK(text.rfind("# header\n# second line\n", 0) == 0);
  const ClusterSpec read = ParseClusterToml(text, "written.toml");
  CheckSameCluster(read, cluster);
  CHECK(ClusterToToml(read, "header\nsecond line") == text);
}

TEST_CASE("every zoo cluster round-trips through the writer") {
  for (const std::string& name : ZooClusters()) {
    INFO("cluster: ", name);
    const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath(name));
    CheckSameCluster(ParseClusterToml(ClusterToToml(cluster, ""), name + ".toml"), cluster);
  }
}

TEST_CASE("calibrated keys are validated with file, key, value and rule") {
  const std::string base = R"(
[cluster]
name = "t"
[[device]]
name = "gpu"
peak_TFLOPS = 100
memory_GB = 16
hbm_GBps = 900
[[node_group]]
count = 2
gpus_per_node = 8
device = "gpu"
[[network]]
name = "nvlink"
bandwidth_GBps = 100
latency_us = 5
[[network]]
name = "eth"
bandwidth_GBps = 3
latency_us = 10
)";
  CHECK_NOTHROW(ParseClusterToml(base, "c.toml"));
  auto error = [&](const std::string& extra) {
    return InputErrorMessage([&] { ParseClusterToml(base + extra, "c.toml"); });
  };
  // Appended tables attach to the last [[network]] (the inter-node level) or stand alone.
  CHECK(Contains(error("ring_links_per_gpu = 6\n"),
                 "c.toml: network[1].ring_links_per_gpu = 6: only an intra-node level has ring "
                 "links; this one is node_group[0]'s inter-node level"));
  CHECK(Contains(error("[network.all_reduce]\nbandwidth_GBps = 2\n"),
                 "c.toml: network[1].all_reduce.latency_us: missing required key"));
  CHECK(Contains(error("[network.all_reduce]\nbandwidth_GBps = 0\nlatency_us = 1\n"),
                 "c.toml: network[1].all_reduce.bandwidth_GBps = 0: must be > 0"));
  CHECK(Contains(error("[network.broadcast]\nbandwidth_GBps = 1\nlatency_us = 1\n"),
                 "network[1].broadcast: unknown key"));
  CHECK(Contains(error("[collective.all_gather]\ninter_node_algorithm = \"tree\"\n"),
                 "c.toml: collective.all_gather.inter_node_algorithm = \"tree\": must be "
                 "\"hierarchical\" or \"ring\""));
  CHECK(Contains(error("[collective.all_gather]\nlaunch_us = -1\n"),
                 "collective.all_gather.launch_us = -1: must be >= 0"));
  auto device_error = [&](const std::string& key_value) {
    std::string text = base;
    text.replace(text.find("hbm_GBps = 900\n"), 15, "hbm_GBps = 900\n" + key_value + "\n");
    return InputErrorMessage([&] { ParseClusterToml(text, "c.toml"); });
  };
  CHECK(Contains(device_error("memory_fragmentation = 1.2"),
                 "c.toml: device[0].memory_fragmentation = 1.2: must be < 1"));
  CHECK(Contains(device_error("memory_fragmentation = -0.5"),
                 "c.toml: device[0].memory_fragmentation = -0.5: must be >= 0"));
  CHECK(Contains(error("[calibration]\nmatmul_rows = 3\n"),
                 "c.toml: calibration.source: missing required key"));
  const std::string device_curve = ClusterToToml(CalibratedExample(), "");
  CHECK(Contains(InputErrorMessage([&] {
                   std::string text = device_curve;
                   text.replace(text.find("max_efficiency = "), 17, "max_efficiency = 1.5 #");
                   ParseClusterToml(text, "c.toml");
                 }),
                 "device[0].matmul_curve.max_efficiency = 1.5: must be in (0, 1]"));
  CHECK(Contains(InputErrorMessage([&] {
                   std::string text = device_curve;
                   text.replace(text.find("power = "), 8, "power = 0.5 #");
                   ParseClusterToml(text, "c.toml");
                 }),
                 "device[0].layer_curve.power = 0.5: must be >= 1"));
  CHECK(Contains(InputErrorMessage([&] {
                   std::string text = device_curve;
                   text.replace(text.find("forward_floor_us = "), 19, "forward_floor_us = -1 #");
                   ParseClusterToml(text, "c.toml");
                 }),
                 "device[0].layer_curve.forward_floor_us = -1: must be >= 0"));
}

// The pre-calibration collective formula, copied from cost_model.cc as it was before the
// calibrated keys existed, but for the inter-node latency of an all-reduce (factor 2): NCCL's
// tree, 2 floor(log2 k) steps for k nodes (collective.h; it charged 2 (k - 1) then), and for
// all-gather and reduce-scatter (factor 1) across nodes NCCL's flat ring through all n = k x gpn
// ranks (cluster.h DefaultInterNodeAlgorithm; hierarchical before 2026-11-28): (n - 1)/n of the
// buffer over each GPU's intra-node link and each node's NICs, n - k intra-node and k - 1
// inter-node steps.
double OldRingCollectiveSeconds(const ClusterSpec& cluster, double bytes, double factor, int nodes,
                                int gpn, int concurrent, bool with_latency) {
  if (bytes <= 0 && !with_latency) return 0.0;
  const bool flat_ring = factor == 1.0 && nodes > 1;
  const int n = nodes * gpn;
  double seconds = 0.0;
  if (gpn > 1) {
    const NetworkLevel& level = cluster.IntraNode();
    if (flat_ring) {
      seconds += factor * (n - 1) / n * bytes / level.EffectiveBandwidth();
      if (with_latency) seconds += factor * nodes * (gpn - 1) * level.latency_seconds;
    } else {
      seconds += factor * (gpn - 1) / gpn * bytes / level.EffectiveBandwidth();
      if (with_latency) seconds += factor * (gpn - 1) * level.latency_seconds;
    }
  }
  if (nodes > 1) {
    const NetworkLevel& level = cluster.InterNode();
    const int ring = flat_ring ? n : nodes;  // ranks of the ring the NICs carry
    seconds += concurrent * factor * (ring - 1) / ring * bytes / level.EffectiveBandwidth();
    const double steps = factor == 2.0 ? 2.0 * std::floor(std::log2(nodes)) : nodes - 1.0;
    if (with_latency) seconds += steps * level.latency_seconds;
  }
  return seconds;
}

TEST_CASE("a cluster file without [collective] runs NCCL's inter-node algorithms, and the "
          "writer leaves them out") {
  const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath("dgx-a100-80gb-datasheet"));
  CHECK(cluster.collectives[0].inter_node_algorithm == InterNodeAlgorithm::kHierarchical);
  CHECK(cluster.collectives[1].inter_node_algorithm == InterNodeAlgorithm::kRing);
  CHECK(cluster.collectives[2].inter_node_algorithm == InterNodeAlgorithm::kRing);
  CHECK(ClusterToToml(cluster, "").find("[collective") == std::string::npos);
  ClusterSpec hierarchical = cluster;
  hierarchical.collectives[1].inter_node_algorithm = InterNodeAlgorithm::kHierarchical;
  const std::string text = ClusterToToml(hierarchical, "");
  CHECK(text.find("[collective.all_gather]") != std::string::npos);
  CHECK(text.find("[collective.reduce_scatter]") == std::string::npos);
  CHECK(ParseClusterToml(text, "c.toml").collectives[1].inter_node_algorithm ==
        InterNodeAlgorithm::kHierarchical);
}

TEST_CASE("without calibrated keys collectives cost exactly what they did before calibration") {
  for (const std::string& name : ZooClusters()) {
    const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath(name)).WithNodes(4);
    if (!cluster.calibration.source.empty()) continue;  // calibrated zoo files differ on purpose
    INFO("cluster: ", name);
    Problem problem;
    problem.cluster = cluster;
    const CostModel cost_model(problem);
    for (double bytes : {0.0, 1.0, 12345.678, 1e9 / 7}) {
      for (const GroupLayout& g :
           {GroupLayout{1, 1, 1}, GroupLayout{1, 8, 1}, GroupLayout{1, 2, 4}, GroupLayout{4, 8, 1},
            GroupLayout{4, 2, 4}, GroupLayout{3, 1, 8}}) {
        CHECK(cost_model.AllReduceSeconds(bytes, g.nodes, g.gpus_per_node, g.concurrent_groups) ==
              OldRingCollectiveSeconds(cluster, bytes, 2.0, g.nodes, g.gpus_per_node,
                                       g.concurrent_groups, true));
        CHECK(cost_model.AllGatherSeconds(bytes, g.nodes, g.gpus_per_node, g.concurrent_groups) ==
              OldRingCollectiveSeconds(cluster, bytes, 1.0, g.nodes, g.gpus_per_node,
                                       g.concurrent_groups, true));
        for (Collective kind : kAllCollectives) {
          const double factor = kind == Collective::kAllReduce ? 2.0 : 1.0;
          CHECK(CollectiveSeconds(cluster, kind, bytes, g, false) ==
                OldRingCollectiveSeconds(cluster, bytes, factor, g.nodes, g.gpus_per_node,
                                         g.concurrent_groups, false));
        }
      }
    }
  }
}

// A two-block GPT (hidden 2048, sequence 1024) on a DGX A100, global batch 8.
Problem SmallGptProblem() {
  Problem problem;
  ModelSpec& m = problem.model;
  m.family = "gpt";
  m.hidden_size = 2048;
  m.num_layers = 2;
  m.num_attention_heads = 16;
  m.seq_length = 1024;
  m.vocab_size = 50000;
  BuildTransformerLayers(m);
  problem.cluster = ReadClusterFile(ResolveClusterPath("dgx-a100-80gb-datasheet"));
  problem.training.global_batch_size = 8;
  return problem;
}

TEST_CASE("usable memory: the device's memory less what lies outside the allocator, over its "
          "fragmentation") {
  Problem problem = SmallGptProblem();
  DeviceSpec& device = problem.cluster.devices.front();
  const double memory = device.memory_bytes;  // 80 GB
  CHECK(CostModel(problem).DeviceMemoryCapacityBytes() == memory);
  device.reserved_memory_bytes = 2e9;
  device.memory_fragmentation = 0.25;
  // (80 - 2) GB / 1.25 = 62.4 GB for tensors.
  CHECK(CostModel(problem).DeviceMemoryCapacityBytes() == doctest::Approx(62.4e9).epsilon(1e-12));
  CHECK(memory == 80e9);
}

TEST_CASE("without a matmul curve a layer's compute uses peak x matmul_efficiency exactly") {
  Problem problem = SmallGptProblem();
  const ModelSpec& m = problem.model;
  problem.training.sequence_parallel = false;
  const CostModel cost_model(problem);
  const StageConfig config{1, 1, 1, 1, 0, Recompute::kNone, {}};  // one GPU: compute only
  const StageTerms terms = cost_model.LayerTerms(1, config, 8);
  const DeviceSpec& device = problem.cluster.Device();
  const LayerSpec& layer = m.layers[1];
  const double forward_flops = layer.forward_flops * 1 / 1;
  const double flops_per_second = device.peak_flops * device.matmul_efficiency;
  const double activation = layer.activation_replicated_bytes / 1 +
                            layer.activation_sharded_bytes / 1 +
                            layer.activation_attention_bytes / 1;
  const double forward =
      forward_flops / flops_per_second + activation / device.hbm_bytes_per_second;
  // The backward pass also adds its weight gradients into the buffer (one microbatch's).
  const double accumulation = layer.stored_param_count *
                              GradientAccumulationBytesPerParam(problem.training) /
                              device.hbm_bytes_per_second;
  CHECK(terms.forward_seconds == forward);
  CHECK(terms.compute_seconds ==
        doctest::Approx(forward + (2.0 * forward_flops / flops_per_second +
                                   2.0 * activation / device.hbm_bytes_per_second) +
                        accumulation));
  // With a curve the same layer is priced by its GEMM shape: slower than the scalar's 0.9 x peak
  // when the curve says this GEMM reaches less.
  problem.cluster.devices[0].matmul_curve = MatmulCurve{0.9, 1024, 0};
  const CostModel curved(problem);
  CHECK(curved.LayerTerms(1, config, 8).compute_seconds > terms.compute_seconds);
  // ... each of the block's GEMMs at its own shape and the attention core by its roofline:
  // forward = sum of MatmulSeconds + AttentionCoreSeconds + activation bytes / HBM, backward
  // twice the GEMMs and the activation bytes read and written.
  problem.cluster.devices[0].matmul_curve = MatmulCurve{0.9, 1024, 5e-6};
  const DeviceSpec& with_curve = problem.cluster.devices[0];
  double gemms = 0;
  for (const GemmShape& shape : TransformerBlockGemms(m, 1, 1).dense)
    gemms += MatmulSeconds(*with_curve.matmul_curve, with_curve.peak_flops, shape);
  gemms += AttentionCoreSeconds(with_curve, m, 1, 1, layer.activation_attention_bytes > 0);
  const double hbm = with_curve.hbm_bytes_per_second;
  const StageTerms by_shape = CostModel(problem).LayerTerms(1, config, 8);
  CHECK(by_shape.forward_seconds == doctest::Approx(gemms + activation / hbm));
  CHECK(by_shape.compute_seconds ==
        doctest::Approx(3 * gemms + 3 * activation / hbm + accumulation));
}

TEST_CASE("a layer curve reshapes each pass of a transformer block and nothing else") {
  Problem problem = SmallGptProblem();
  const ModelSpec& m = problem.model;
  const DeviceSpec plain = problem.cluster.Device();
  LayerCurve curve{1.5, 2.0, 1e-3, 2e-3, 1};  // power 1: scaled device time plus the floor
  for (Recompute recompute : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    INFO("recompute ", static_cast<int>(recompute));
    const LayerCompute raw =
        LayerComputeSeconds(m, 1, plain, problem.training, 2, 1, recompute);
    DeviceSpec curved = plain;
    curved.layer_curve = curve;
    const LayerCompute c = LayerComputeSeconds(m, 1, curved, problem.training, 2, 1, recompute);
    CHECK(c.forward_seconds == doctest::Approx(1.5 * raw.forward_seconds + 1e-3));
    CHECK(c.backward_seconds == doctest::Approx(2.0 * raw.backward_seconds + 2e-3));
    if (recompute == Recompute::kFull) CHECK(c.recompute_seconds == c.forward_seconds);
    if (recompute == Recompute::kSelective)
      CHECK(c.recompute_seconds == doctest::Approx(2.0 * raw.recompute_seconds));
    if (recompute == Recompute::kNone) CHECK(c.recompute_seconds == 0);
    // Not asked for: the raw time. The LM head is no block: untouched.
    CHECK(LayerComputeSeconds(m, 1, curved, problem.training, 2, 1, recompute, false)
              .TotalSeconds() == raw.TotalSeconds());
    const int head = m.NumLayers() - 1;
    CHECK(LayerComputeSeconds(m, head, curved, problem.training, 2, 1, recompute).TotalSeconds() ==
          LayerComputeSeconds(m, head, plain, problem.training, 2, 1, recompute).TotalSeconds());
    // One operator of a block (operator granularity) is no whole block: untouched.
    ModelSpec operators = m;
    operators.layers[1].block_operator = true;
    CHECK(LayerComputeSeconds(operators, 1, curved, problem.training, 2, 1, recompute)
              .TotalSeconds() == raw.TotalSeconds());
  }
  // A large power takes the larger of the scaled device time and the floor.
  curve.power = 64;
  CHECK(curve.Combine(1.0, 5e-3, 1e-6) == doctest::Approx(5e-3).epsilon(1e-3));
  CHECK(curve.Combine(1.0, 1e-6, 5e-3) == doctest::Approx(5e-3).epsilon(1e-3));
  curve.power = 2;
  CHECK(curve.Combine(1.0, 3.0, 4.0) == doctest::Approx(5.0));
  // The cost model's stage terms use it.
  const StageConfig config{1, 1, 1, 1, 0, Recompute::kNone, {}};
  const double before = CostModel(problem).LayerTerms(1, config, 4).compute_seconds;
  problem.cluster.devices[0].layer_curve = LayerCurve{1.0, 1.0, 1e-3, 1e-3, 1};
  CHECK(CostModel(problem).LayerTerms(1, config, 4).compute_seconds ==
        doctest::Approx(before + 2e-3));
}

TEST_CASE("the shipped calibrated zoo cluster loads, says what it was fitted on, and prices") {
  const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath("p3.16xlarge"));
  CHECK(cluster.name == "p3.16xlarge");
  CHECK(Contains(cluster.calibration.source, "stratos calibrate"));
  CHECK(Contains(cluster.calibration.source, "alpa_v100_comm_1x1_to_2x8.csv"));
  CHECK(cluster.calibration.collective_rows > 1000);
  CHECK(cluster.Device().matmul_curve.has_value());
  CHECK(cluster.IntraNode().ring_links_per_gpu == 6);
  for (Collective kind : kAllCollectives) {
    CHECK(cluster.IntraNode().collective_fits[static_cast<int>(kind)].has_value());
    CHECK(cluster.InterNode().collective_fits[static_cast<int>(kind)].has_value());
  }
  // An 8-GPU all-reduce of 256 MiB in fp16: the Alpa profile measured 3.84 ms.
  const double seconds =
      CollectiveSeconds(cluster, Collective::kAllReduce, 256.0 * 1024 * 1024, {1, 8, 1});
  CHECK(seconds == doctest::Approx(3.84e-3).epsilon(0.15));
}

}  // namespace
}  // namespace stratos
