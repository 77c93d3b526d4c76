// Calibration (calibrate/): the fits recover constants from times the model itself generated,
// relative weighting and bounds behave, profiles round-trip and bad rows name file, line and
// column, the Alpa reader reads what Alpa ran, and the validation split stays within target.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "calibrate/alpa_profile.h"
#include "calibrate/calibrate.h"
#include "calibrate/collective_fit.h"
#include "calibrate/layer_fit.h"
#include "calibrate/least_squares.h"
#include "calibrate/matmul_fit.h"
#include "calibrate/memory_fit.h"
#include "calibrate/profile.h"
#include "costmodel/cluster_io.h"
#include "costmodel/collective.h"
#include "costmodel/error.h"
#include "costmodel/matmul_efficiency.h"
#include "costmodel/statistics.h"
#include "costmodel/zoo.h"
#include "test_util.h"
#include "tests/scratch_dir.h"

namespace stratos {
using testing::InputErrorMessage;
using testing::Contains;
namespace {

namespace fs = std::filesystem;

// A fresh empty directory of this test process (removed when it exits).
std::string TempDir(const std::string& name) { return testing::ScratchDir("calibrate_" + name); }

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// Two nodes of 8 GPUs with known calibrated constants: the ground truth of the recovery tests.
ClusterSpec KnownCluster() {
  ClusterSpec cluster;
  cluster.name = "known";
  cluster.devices.push_back({"gpu", 125e12, 16e9, 900e9, 1.0, 0.0, "test"});
  cluster.node_groups.push_back({2, 8, "gpu"});
  cluster.networks = {{"nvlink", 1e9, 1e-6, 1.0, "test"}, {"eth", 1e9, 1e-6, 1.0, "test"}};
  cluster.networks[0].ring_links_per_gpu = 6;
  cluster.networks[0].collective_fits[0] = LinkFit{23e9, 11e-6};
  cluster.networks[1].collective_fits[0] = LinkFit{2.3e9, 130e-6};
  cluster.networks[0].collective_fits[1] = LinkFit{22e9, 28e-6};
  cluster.networks[1].collective_fits[1] = LinkFit{2.6e9, 140e-6};
  cluster.collectives[0] = {45e-6, InterNodeAlgorithm::kHierarchical};
  cluster.collectives[1] = {38e-6, InterNodeAlgorithm::kRing};
  return cluster;
}

// Rows of `op` on the layouts of Alpa's 1x2, 1x4, 1x8 and 2x8 meshes, 1 KiB to 1 GiB, timed by
// `cluster` itself.
std::vector<CollectiveRow> GeneratedRows(const ClusterSpec& cluster, const std::string& op) {
  struct Layout {
    int nodes, gpus_per_node, group_size, num_groups;
    bool crosses;
  };
  const Layout layouts[] = {{1, 2, 2, 1, false}, {1, 4, 4, 1, false}, {1, 8, 8, 1, false},
                            {2, 8, 2, 8, true},  {2, 8, 4, 4, true},  {2, 8, 16, 1, true}};
  std::vector<CollectiveRow> rows;
  for (const Layout& l : layouts) {
    for (double bytes = 1024; bytes <= 1024.0 * 1024 * 1024; bytes *= 4) {
      CollectiveRow row{op,        "f16", l.nodes, l.gpus_per_node, l.group_size, l.num_groups,
                        l.crosses, bytes, 0.0};
      row.seconds = PredictCollectiveSeconds(cluster, row);
      rows.push_back(row);
    }
  }
  return rows;
}

TEST_CASE("the collective fit recovers launch, latency and bandwidth of both levels exactly") {
  const ClusterSpec known = KnownCluster();
  for (Collective kind : {Collective::kAllReduce, Collective::kAllGather}) {
    const int i = static_cast<int>(kind);
    INFO("collective: ", CollectiveName(kind));
    const CollectiveFit fit = FitCollective(kind, known.collectives[i].inter_node_algorithm, 6,
                                            GeneratedRows(known, CollectiveName(kind)));
    REQUIRE(fit.intra.has_value());
    REQUIRE(fit.inter.has_value());
    CHECK(fit.note.empty());
    CHECK(fit.launch_seconds == doctest::Approx(known.collectives[i].launch_seconds).epsilon(1e-9));
    CHECK(fit.intra->latency_seconds ==
          doctest::Approx(known.networks[0].collective_fits[i]->latency_seconds).epsilon(1e-9));
    CHECK(fit.intra->bandwidth_bytes_per_second ==
          doctest::Approx(known.networks[0].collective_fits[i]->bandwidth_bytes_per_second)
              .epsilon(1e-9));
    CHECK(fit.inter->latency_seconds ==
          doctest::Approx(known.networks[1].collective_fits[i]->latency_seconds).epsilon(1e-9));
    CHECK(fit.inter->bandwidth_bytes_per_second ==
          doctest::Approx(known.networks[1].collective_fits[i]->bandwidth_bytes_per_second)
              .epsilon(1e-9));
  }
}

TEST_CASE("the collective fit with pipelining recovers every level's coefficient too") {
  ClusterSpec known = KnownCluster();
  known.networks[0].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 12e-9;
  known.networks[1].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 200e-9;
  const CollectiveFit fit = FitCollective(Collective::kAllReduce, InterNodeAlgorithm::kHierarchical,
                                          6, GeneratedRows(known, "all_reduce"), true);
  REQUIRE(fit.intra.has_value());
  REQUIRE(fit.inter.has_value());
  CHECK(fit.launch_seconds == doctest::Approx(45e-6).epsilon(1e-6));
  CHECK(fit.intra->pipeline_seconds_per_sqrt_byte == doctest::Approx(12e-9).epsilon(1e-6));
  CHECK(fit.inter->pipeline_seconds_per_sqrt_byte == doctest::Approx(200e-9).epsilon(1e-6));
  CHECK(fit.inter->bandwidth_bytes_per_second == doctest::Approx(2.3e9).epsilon(1e-6));
  // Without it the coefficients stay 0 and the line misses the generated times.
  const CollectiveFit plain = FitCollective(Collective::kAllReduce,
                                            InterNodeAlgorithm::kHierarchical, 6,
                                            GeneratedRows(known, "all_reduce"));
  CHECK(plain.intra->pipeline_seconds_per_sqrt_byte == 0.0);
  CHECK(plain.inter->pipeline_seconds_per_sqrt_byte == 0.0);
}

TEST_CASE("pipelining term by hand: c sqrt(steps x bytes) per level, with or without latency") {
  ClusterSpec cluster = KnownCluster();  // 2 nodes of 8, ring links 6 on the intra level
  cluster.networks[0].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 0.5e-9;
  cluster.networks[1].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 2e-9;
  ClusterSpec without = cluster;
  without.networks[0].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 0;
  without.networks[1].collective_fits[0]->pipeline_seconds_per_sqrt_byte = 0;
  const double S = 64e6;
  // One node, 8 GPUs: 2 x 7 steps; each GPU's links carry 2 x 7/8 S over min(7, 6) = 6 links.
  const double intra = 0.5e-9 * std::sqrt(14.0 * (2.0 * 7.0 / 8.0 * S / 6.0));
  for (bool with_latency : {true, false}) {
    CHECK(CollectiveSeconds(cluster, Collective::kAllReduce, S, {1, 8, 1}, with_latency) -
              CollectiveSeconds(without, Collective::kAllReduce, S, {1, 8, 1}, with_latency) ==
          doctest::Approx(intra));
  }
  // Two nodes (hierarchical: 2 floor(log2 2) = 2 inter-node steps; each node's NICs move
  // 2 x 1/2 S): both levels' terms.
  const double inter = 2e-9 * std::sqrt(2.0 * (2.0 * 1.0 / 2.0 * S));
  CHECK(CollectiveSeconds(cluster, Collective::kAllReduce, S, {2, 8, 1}) -
            CollectiveSeconds(without, Collective::kAllReduce, S, {2, 8, 1}) ==
        doctest::Approx(intra + inter));
}

TEST_CASE("a profile without node-crossing rows fits the intra-node level only") {
  std::vector<CollectiveRow> rows;
  for (const CollectiveRow& row : GeneratedRows(KnownCluster(), "all_reduce")) {
    if (!row.crosses_nodes) rows.push_back(row);
  }
  const CollectiveFit fit =
      FitCollective(Collective::kAllReduce, InterNodeAlgorithm::kHierarchical, 6, rows);
  CHECK(fit.intra.has_value());
  CHECK_FALSE(fit.inter.has_value());
  CHECK(fit.intra->bandwidth_bytes_per_second == doctest::Approx(23e9).epsilon(1e-9));
}

TEST_CASE("one group layout only: the launch cost is fixed at 0 and the fit says why") {
  std::vector<CollectiveRow> rows;
  for (const CollectiveRow& row : GeneratedRows(KnownCluster(), "all_gather")) {
    if (row.nodes == 1 && row.group_size == 4) rows.push_back(row);
  }
  const CollectiveFit fit =
      FitCollective(Collective::kAllGather, InterNodeAlgorithm::kRing, 6, rows);
  CHECK(fit.launch_seconds == 0.0);
  CHECK(Contains(fit.note, "launch cost fixed at 0"));
  // launch + 3 steps of latency are one constant: 38 us + 3 x 28 us.
  CHECK(3 * fit.intra->latency_seconds == doctest::Approx(38e-6 + 3 * 28e-6).epsilon(1e-9));
}

TEST_CASE("relative weighting: a constant fitted to 1 and 100 is near 1, not their mean") {
  Eigen::MatrixXd A = Eigen::MatrixXd::Ones(2, 1);
  Eigen::VectorXd y(2);
  y << 1.0, 100.0;
  const Eigen::VectorXd lower = Eigen::VectorXd::Constant(1, -INFINITY);
  const Eigen::VectorXd x = FitRelativeLeastSquares(A, y, lower, {"c"}, "test");
  // argmin (c/1 - 1)^2 + (c/100 - 1)^2 = (1 + 1/100) / (1 + 1/100^2).
  CHECK(x(0) == doctest::Approx((1 + 0.01) / (1 + 1e-4)).epsilon(1e-12));
  const ErrorStats errors = RelativeErrors({x(0), x(0)}, {1.0, 100.0});
  CHECK(errors.rows == 2);
  CHECK(errors.max_ape == doctest::Approx(1 - x(0) / 100).epsilon(1e-12));  // the 100 row
}

TEST_CASE("a lower bound that binds holds the coefficient at the bound") {
  // y = 1 * x, fitted with a >= 2: the optimum on the box is a = 2.
  Eigen::MatrixXd A(3, 1);
  A << 1, 2, 3;
  Eigen::VectorXd y(3);
  y << 1, 2, 3;
  const Eigen::VectorXd x =
      FitRelativeLeastSquares(A, y, Eigen::VectorXd::Constant(1, 2.0), {"a"}, "test");
  CHECK(x(0) == 2.0);
}

TEST_CASE("coefficients the rows cannot tell apart are an InputError naming them") {
  Eigen::MatrixXd A(3, 2);
  A << 1, 2, 1, 2, 1, 2;  // second column = 2 x first
  Eigen::VectorXd y(3);
  y << 1, 1, 1;
  const std::string message = InputErrorMessage([&] {
    FitRelativeLeastSquares(A, y, Eigen::VectorXd::Zero(2), {"alpha", "beta"}, "fit of x");
  });
  CHECK(Contains(message, "fit of x"));
  CHECK(Contains(message, "cannot be told apart"));
  const std::string zero = InputErrorMessage([&] {
    Eigen::MatrixXd B = A;
    B.col(1).setZero();
    FitRelativeLeastSquares(B, y, Eigen::VectorXd::Zero(2), {"alpha", "beta"}, "fit of x");
  });
  CHECK(Contains(zero, "'beta' cannot be fitted"));
}

std::vector<MatmulRow> SquareGemms(const MatmulCurve& curve, double peak, int max_n) {
  std::vector<MatmulRow> rows;
  for (long long n = 128; n <= max_n; n += 256) {
    MatmulRow row{n, n, n, "f16", 2.0 * n * n * n, 0.0};
    row.seconds = PredictMatmulSeconds(curve, peak, row);
    rows.push_back(row);
  }
  return rows;
}

TEST_CASE("the matmul fit recovers each curve from times it generated") {
  const double peak = 125e12;
  const MatmulCurve truth{0.9, 600, 25e-6};
  const MatmulFit fit =
      FitMatmulCurve(MatmulModel::kSaturatingOverhead, SquareGemms(truth, peak, 8192), peak);
  CHECK(fit.curve.max_efficiency == doctest::Approx(0.9).epsilon(1e-9));
  CHECK(fit.curve.half_efficiency_dim == doctest::Approx(600).epsilon(1e-9));
  CHECK(fit.curve.overhead_seconds == doctest::Approx(25e-6).epsilon(1e-9));
  const MatmulFit overhead =
      FitMatmulCurve(MatmulModel::kOverhead, SquareGemms({0.8, 0, 10e-6}, peak, 8192), peak);
  CHECK(overhead.curve.max_efficiency == doctest::Approx(0.8).epsilon(1e-9));
  CHECK(overhead.curve.overhead_seconds == doctest::Approx(10e-6).epsilon(1e-9));
  CHECK(overhead.curve.half_efficiency_dim == 0.0);
  // Leave-one-out picks the model that generated the data (the others cannot reach 0 error).
  const MatmulChoice choice = ChooseMatmulCurve(SquareGemms(truth, peak, 8192), peak);
  CHECK(choice.fit.model == MatmulModel::kSaturatingOverhead);
  CHECK(choice.cross_validation_mape.size() == 3);
}

// Block rows on the GPU profile's grid whose times `truth` generated from the cost model's device
// times on `device`.
std::vector<LayerRow> GeneratedBlocks(const DeviceSpec& device, const LayerCurve& truth) {
  std::vector<LayerRow> rows;
  for (int hidden : {1024, 2048, 4096})
    for (int head_dim : {64, 128})
      for (int seq : {1024, 2048})
        for (int micro_batch : {1, 4})
          for (int tp : {1, 2}) rows.push_back({hidden, hidden / head_dim, seq, micro_batch, tp,
                                                "bf16", 0.0, 0.0, 0.0});
  const auto x = LayerRowDeviceSeconds(rows, device);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i].forward_seconds = truth.Forward(x[i].first);
    rows[i].backward_seconds = truth.Backward(x[i].second);
  }
  return rows;
}

TEST_CASE("the layer fit recovers the block curve and its power from times it generated") {
  DeviceSpec device = ReadClusterFile(ResolveClusterPath("h200-node-datasheet")).Device();
  device.matmul_curve = MatmulCurve{0.82, 0, 30e-6};
  const LayerCurve truth{1.08, 1.19, 510e-6, 1200e-6, 3};
  const std::vector<LayerRow> rows = GeneratedBlocks(device, truth);
  const LayerCurve fit = FitLayerCurve(rows, LayerRowDeviceSeconds(rows, device), 3);
  CHECK(fit.forward_scale == doctest::Approx(1.08).epsilon(1e-3));
  CHECK(fit.backward_scale == doctest::Approx(1.19).epsilon(1e-3));
  CHECK(fit.forward_floor_seconds == doctest::Approx(510e-6).epsilon(1e-3));
  CHECK(fit.backward_floor_seconds == doctest::Approx(1200e-6).epsilon(1e-3));
  // Leave-one-out picks the power that generated the times.
  const LayerChoice choice = ChooseLayerCurve(rows, device);
  CHECK(choice.curve.power == 3);
  CHECK(choice.rows == static_cast<int>(rows.size()));
  CHECK(choice.cross_validation_mape.size() == std::size(kLayerCurvePowers));
  for (const auto& [power, mape] : choice.cross_validation_mape)
    if (power != 3) CHECK(mape > 1e-3);
  // Too few rows to leave one out.
  CHECK_THROWS_AS(ChooseLayerCurve({rows[0], rows[1], rows[2]}, device), InputError);
}

TEST_CASE("blocks profiled with fused attention are priced without attention scores") {
  DeviceSpec device = ReadClusterFile(ResolveClusterPath("h200-node-datasheet")).Device();
  const std::vector<LayerRow> rows = {{2048, 16, 2048, 4, 1, "bf16", 0.0, 0.0, 0.0}};
  const auto materialized = LayerRowDeviceSeconds(rows, device, false);
  const auto fused = LayerRowDeviceSeconds(rows, device, true);
  // The scores (5 a s^2 bytes per sample) leave the HBM roofline: written once in forward, read
  // and written in backward. The kernel computes the causal share of the score GEMMs (4 b s^2 h
  // FLOPs, at the datasheet device's scalar efficiency) forward and 2.5 times that backward,
  // against all of them forward and twice that backward.
  const double scores = 4 * 5.0 * 16 * 2048 * 2048 / device.hbm_bytes_per_second;
  const double core =
      4.0 * 4 * 2048 * 2048 * 2048 / (device.peak_flops * device.matmul_efficiency);
  const double share = 2049.0 / 4096;
  CHECK(materialized[0].first - fused[0].first == doctest::Approx(scores + (1 - share) * core));
  CHECK(materialized[0].second - fused[0].second ==
        doctest::Approx(2 * scores + (2 - 2.5 * share) * core));
  ProfileInfo info{"cuda:0", "nccl", "stratos profile", ""};
  CHECK(info.FlashAttention());  // a CUDA profile from before the key: LibTorch 2.x
  info.attention = "materialized";
  CHECK(!info.FlashAttention());
  info = {"cpu-worker", "gloo", "stratos profile", "", "fused"};
  CHECK(info.FlashAttention());
}

TEST_CASE("the median of an odd count is the middle value, of an even one the middle mean") {
  CHECK(Median({3, 1, 2}) == 2);
  CHECK(Median({4, 1, 3, 2}) == 2.5);
  CHECK(std::isnan(Median({})));
}

TEST_CASE("device memory constants: the driver's total and medians over the runs") {
  constexpr double GiB = 1024.0 * 1024 * 1024;
  // Allocator overheads +5%, +10%, +50% (median 10%); outside 0.7, 0.8, 3 GiB (median 0.8).
  const std::vector<RunMemoryRow> rows = {{"a", 139.8 * GiB, 0.7 * GiB, 20 * GiB, 21 * GiB},
                                          {"b", 139.8 * GiB, 0.8 * GiB, 40 * GiB, 44 * GiB},
                                          {"c", 139.8 * GiB, 3.0 * GiB, 10 * GiB, 15 * GiB}};
  const MemoryFit fit = FitDeviceMemory(rows, "runs");
  CHECK(fit.runs == 3);
  CHECK(fit.memory_bytes == 139.8 * GiB);
  CHECK(fit.reserved_memory_bytes == 0.8 * GiB);
  CHECK(fit.memory_fragmentation == doctest::Approx(0.10));
  const DeviceSpec device = WithMemoryFit(DeviceSpec{}, fit);
  CHECK(device.memory_fragmentation == fit.memory_fragmentation);
  CHECK(device.memory_bytes == fit.memory_bytes);
  // Runs on another device: the framework's constants only, the device keeps its memory.
  DeviceSpec v100;
  v100.memory_bytes = 16e9;
  const DeviceSpec framework = WithFrameworkMemoryFit(v100, fit);
  CHECK(framework.memory_bytes == 16e9);
  CHECK(framework.reserved_memory_bytes == 0.8 * GiB);
  CHECK(framework.memory_fragmentation == doctest::Approx(0.10));
  CHECK(Contains(InputErrorMessage([&] { FitDeviceMemory({}, "--memory-runs d"); }),
                 "--memory-runs d: no run with device memory measurements"));
  std::vector<RunMemoryRow> bad = rows;
  bad[1].peak_reserved_bytes = 30 * GiB;
  CHECK(Contains(InputErrorMessage([&] { FitDeviceMemory(bad, "runs"); }),
                 "b: peak_reserved_bytes = 32212254720: must be >= peak_allocated_bytes"));
}

TEST_CASE("calibrate fits the block curve on the matmul dtype's block rows") {
  const ClusterSpec base = ReadClusterFile(ResolveClusterPath("h200-node-datasheet"));
  Profile profile;
  profile.info.device = base.Device().name;
  for (long long n : {1024, 2048, 4096, 8192})
    for (long long k : {1024, 4096}) profile.matmuls.push_back({n, n, k, "bf16", 2.0 * n * n * k,
                                                                2.0 * n * n * k / 800e12 + 30e-6});
  DeviceSpec device = base.Device();
  device.matmul_curve = MatmulCurve{800e12 / device.peak_flops, 0, 30e-6};
  profile.layers = GeneratedBlocks(device, LayerCurve{1.1, 1.2, 500e-6, 1000e-6, 2});
  LayerRow other = profile.layers.front();
  other.dtype = "f32";
  profile.layers.push_back(other);
  CalibrateOptions options;
  options.matmul_dtype = "bf16";
  options.source = "test";
  const CalibrationResult result = Calibrate(base, profile, options);
  REQUIRE(result.layer.has_value());
  CHECK(result.layer->other_dtype_rows == 1);
  CHECK(result.layer->choice.curve.power == 2);
  CHECK(result.layer->forward.mape < 1e-3);
  REQUIRE(result.cluster.Device().layer_curve.has_value());
  CHECK(result.cluster.Device().layer_curve->backward_scale == doctest::Approx(1.2).epsilon(1e-3));
  CHECK(result.cluster.calibration.layer_rows == static_cast<int>(profile.layers.size()) - 1);
}

TEST_CASE("the matmul curve never claims more than the peak") {
  const double peak = 125e12;
  // Faster than peak on the largest GEMM: the bound max_efficiency <= 1 binds.
  std::vector<MatmulRow> rows = SquareGemms({1.0, 0, 0}, peak, 4096);
  for (MatmulRow& row : rows) row.seconds *= 0.8;
  const MatmulFit fit = FitMatmulCurve(MatmulModel::kOverhead, rows, peak);
  CHECK(fit.curve.max_efficiency <= 1.0);
  CHECK(fit.curve.max_efficiency == doctest::Approx(1.0));
}

TEST_CASE("GEMM efficiency follows the layer's MLP GEMM and falls back to the scalar") {
  DeviceSpec device{"gpu", 100e12, 1e12, 1e12, 0.7, 0.0, "test"};
  ModelSpec model;
  model.family = "gpt";
  model.hidden_size = 1024;
  model.num_layers = 1;
  model.num_attention_heads = 16;
  model.seq_length = 512;
  model.vocab_size = 1000;
  BuildTransformerLayers(model);
  const LayerSpec& block = model.layers[1];
  const GemmShape shape = LayerGemmShape(model, block, 2, 4);
  CHECK(shape.m == 1024);  // 2 samples x 512 tokens
  CHECK(shape.n == 1024);  // ffn 4096 / tp 4
  CHECK(shape.k == 1024);
  CHECK_FALSE(LayerGemmShape(model, model.layers[0], 2, 4).Known());  // embedding: no GEMM
  CHECK(MatmulEfficiency(device, shape) == 0.7);                      // no curve: the scalar
  device.matmul_curve = MatmulCurve{0.9, 1024, 0};
  CHECK(MatmulEfficiency(device, shape) == doctest::Approx(0.45));  // 0.9 x 1024 / (1024 + 1024)
  CHECK(MatmulEfficiency(device, GemmShape{}) == 0.7);
}

TEST_CASE("a block's GEMMs add up to its FLOPs, shape by shape") {
  for (const char* family : {"gpt", "llama"}) {
    CAPTURE(family);
    ModelSpec model;
    model.family = family;
    model.hidden_size = 1024;
    model.num_layers = 1;
    model.num_attention_heads = 16;
    model.num_key_value_heads = std::string(family) == "llama" ? 4 : 0;
    model.ffn_hidden_size = std::string(family) == "llama" ? 2816 : 0;
    model.seq_length = 512;
    model.vocab_size = 1000;
    BuildTransformerLayers(model);
    const LayerSpec& block = model.layers[1];
    const BlockGemms gemms = TransformerBlockGemms(model, 2, 4);
    CHECK(gemms.dense.size() == (std::string(family) == "llama" ? 5u : 4u));
    CHECK(gemms.DenseFlops() + gemms.AttentionFlops() ==
          doctest::Approx(block.forward_flops * 2 / 4).epsilon(1e-12));
    CHECK(gemms.AttentionFlops() == doctest::Approx(block.attention_flops * 2 / 4));
    // QKV: 1024 tokens x (1024 + 2 kv width) / 4 @ 1024; one head: 512 x 512 @ 64, 2 x 16 / 4 times.
    const double kv_width = std::string(family) == "llama" ? 256 : 1024;
    CHECK(gemms.dense[0].m == 1024);
    CHECK(gemms.dense[0].n == (1024 + 2 * kv_width) / 4);
    CHECK(gemms.dense[0].k == 1024);
    CHECK(gemms.dense[1].k == 256);  // output projection, row-parallel
    CHECK(gemms.attention.m == 512);
    CHECK(gemms.attention.k == 64);
    CHECK(gemms.attention_batch == 8);
  }
}

TEST_CASE("the attention core is priced by its roofline, per kernel") {
  // 100 TFLOP/s peak, 1 TB/s HBM; asymptote 0.5 and 10 us per GEMM kernel.
  DeviceSpec device{"gpu", 100e12, 1e12, 1e12, 0.7, 0.0, "test"};
  device.matmul_curve = MatmulCurve{0.5, 4096, 10e-6};
  ModelSpec model;
  model.family = "gpt";
  model.hidden_size = 1024;
  model.num_attention_heads = 16;
  model.seq_length = 512;
  // 1 sample, TP 1: FLOPs 4 s^2 h = 1.073741824e9 -> 21.47 us at 50 TFLOP/s. Bytes: Q, K, V, O
  // 2 x 512 x 4096 = 4.19 MB; materialized scores 2 x 2 x 16 x 512^2 = 16.78 MB more -> 20.97 us.
  const double flops_seconds = 4.0 * 512 * 512 * 1024 / 50e12;
  CHECK(AttentionCoreSeconds(device, model, 1, 1, false) ==
        doctest::Approx(flops_seconds + 10e-6));  // FlashAttention: compute bound, one kernel
  const double bytes = 2.0 * 512 * 4096 + 4.0 * 16 * 512 * 512;
  CHECK(bytes / 1e12 < flops_seconds);
  CHECK(AttentionCoreSeconds(device, model, 1, 1, true) ==
        doctest::Approx(flops_seconds + 20e-6));
  device.hbm_bytes_per_second = 0.5e12;  // now the bytes bind: 41.9 us
  CHECK(AttentionCoreSeconds(device, model, 1, 1, true) ==
        doctest::Approx(bytes / 0.5e12 + 20e-6));
  device.matmul_curve.reset();  // without a curve: the scalar efficiency, no per-kernel cost
  CHECK(AttentionCoreSeconds(device, model, 1, 1, false) ==
        doctest::Approx(4.0 * 512 * 512 * 1024 / 70e12));
}

Profile SampleProfile() {
  Profile profile;
  profile.info = {"V100-SXM2-16GB", "NCCL 2.10", "test, with \"quotes\" and, commas", "notes"};
  profile.matmuls = {{128, 256, 512, "f16", 2.0 * 128 * 256 * 512, 1.2345678901234567e-5},
                     {4096, 4096, 4096, "f32", 2.0 * 4096 * 4096 * 4096, 0.0123}};
  profile.collectives = {{"all_reduce", "f16", 1, 8, 8, 1, false, 4194304, 4.168e-4},
                         {"all_gather", "bf16", 2, 8, 4, 4, true, 1e9 / 3, 0.1},
                         {"send_recv", "f32", 2, 8, 2, 8, true, 0, 1e-5}};
  profile.layers = {{4096, 32, 2048, 1, 8, "bf16", 1.1e12, 0.012, 0.025}};
  return profile;
}

TEST_CASE("a profile directory round-trips exactly through its writer and reader") {
  const std::string dir = TempDir("roundtrip");
  const Profile written = SampleProfile();
  WriteProfileDir(written, dir);
  const Profile read = ReadProfileDir(dir);
  CHECK(read.info.device == written.info.device);
  CHECK(read.info.produced_by == written.info.produced_by);
  CHECK(read.info.notes == written.info.notes);
  CHECK(read.info.attention == "");
  CHECK(!read.info.FlashAttention());  // not recorded, not a CUDA device
  REQUIRE(read.matmuls.size() == 2);
  CHECK(read.matmuls[0].m == 128);
  CHECK(read.matmuls[0].seconds == written.matmuls[0].seconds);
  CHECK(read.matmuls[1].dtype == "f32");
  REQUIRE(read.collectives.size() == 3);
  CHECK(read.collectives[1].bytes == written.collectives[1].bytes);  // 1e9 / 3, bit for bit
  CHECK(read.collectives[1].crosses_nodes);
  CHECK(read.collectives[1].Layout().gpus_per_node == 2);
  CHECK(read.collectives[1].Layout().concurrent_groups == 4);
  CHECK(read.collectives[2].op == "send_recv");
  REQUIRE(read.layers.size() == 1);
  CHECK(read.layers[0].backward_seconds == 0.025);
  for (const auto& entry : fs::directory_iterator(dir))
    CHECK(entry.path().filename().string().find(".tmp") == std::string::npos);
}

// Writes a valid profile, replaces one file, and returns the reader's error.
std::string ProfileError(const std::string& name, const std::string& file,
                         const std::string& text) {
  const std::string dir = TempDir(name);
  WriteProfileDir(SampleProfile(), dir);
  WriteText(dir + "/" + file, text);
  return InputErrorMessage([&] { ReadProfileDir(dir); });
}

TEST_CASE("bad profile rows are InputErrors naming file, line, column, value and rule") {
  const std::string collective_header =
      "op,dtype,nodes,gpus_per_node,group_size,num_groups,crosses_nodes,bytes,seconds\n";
  std::string message =
      ProfileError("op", "collective.csv",
                   collective_header +
                       "all_reduce,f16,1,8,8,1,0,1024,1e-4\nbroadcast,f16,1,8,8,1,0,1024,1e-4\n");
  CHECK(Contains(message, "collective.csv:3: op = \"broadcast\": must be one of all_reduce"));
  message = ProfileError("seconds", "collective.csv",
                         collective_header + "all_reduce,f16,1,8,8,1,0,1024,-1\n");
  CHECK(Contains(message, "collective.csv:2: seconds = -1: must be > 0"));
  message = ProfileError("inf", "collective.csv",
                         collective_header + "all_reduce,f16,1,8,8,1,0,1024,inf\n");
  CHECK(Contains(message, "collective.csv:2: seconds = \"inf\": must be a finite number"));
  message = ProfileError("layout", "collective.csv",
                         collective_header + "all_reduce,f16,2,8,3,1,1,1024,1e-4\n");
  CHECK(Contains(message, "collective.csv:2: group_size = 3: a group crossing nodes spreads"));
  message = ProfileError("int", "matmul.csv", "m,n,k,dtype,flops,seconds\nx,1,1,f16,2,1e-5\n");
  CHECK(Contains(message, "matmul.csv:2: m = \"x\": must be an integer"));
  message = ProfileError("flops", "matmul.csv", "m,n,k,dtype,flops,seconds\n2,2,2,f16,17,1e-5\n");
  CHECK(Contains(message, "matmul.csv:2: flops = 17: must be 2 m n k = 16"));
  message = ProfileError("dtype", "matmul.csv", "m,n,k,dtype,flops,seconds\n1,1,1,fp8,2,1e-5\n");
  CHECK(Contains(message, "matmul.csv:2: dtype = \"fp8\": must be one of f16, bf16, f32, f64"));
  message = ProfileError("columns", "matmul.csv", "m,n,k,dtype,flops,seconds\n1,1,1,f16,2\n");
  CHECK(Contains(message, "matmul.csv:2: fewer columns than the header"));
  message = ProfileError("header", "layer.csv", "hidden,heads\n");
  CHECK(Contains(message, "layer.csv: header:"));
  message = ProfileError("heads", "layer.csv",
                         "hidden,heads,seq_len,micro_batch,tensor_parallel,dtype,forward_flops,"
                         "forward_seconds,backward_seconds\n1000,3,2048,1,1,bf16,1e12,0.1,0.2\n");
  CHECK(Contains(message, "layer.csv:2: heads = 3: must divide hidden = 1000"));
  message = ProfileError("schema", "profile.json",
                         "{\"schema\": \"other/1\", \"device\": \"d\", \"backend\": \"b\", "
                         "\"produced_by\": \"p\"}");
  CHECK(Contains(message, "profile.json: schema = \"other/1\": must be \"stratos.profile/1\""));
  const std::string dir = TempDir("missing");
  WriteProfileDir(SampleProfile(), dir);
  fs::remove(dir + "/layer.csv");
  CHECK(Contains(InputErrorMessage([&] { ReadProfileDir(dir); }), "layer.csv: missing"));
}

TEST_CASE("holdout selectors parse, print back and select rows") {
  const Holdout holdout = ParseHoldout("1x8,2x8/g16/cross,2x8/local,gemm>4096");
  CHECK(holdout.ToString() == "1x8,2x8/g16/cross,2x8/local,gemm>4096");
  const CollectiveRow g16{"all_reduce", "f16", 2, 8, 16, 1, true, 1024, 1e-3};
  const CollectiveRow g2_cross{"all_reduce", "f16", 2, 8, 2, 8, true, 1024, 1e-3};
  const CollectiveRow g2_local{"all_reduce", "f16", 2, 8, 2, 8, false, 1024, 1e-3};
  CHECK(holdout.HoldsOut(g16));
  CHECK_FALSE(holdout.HoldsOut(g2_cross));
  CHECK(holdout.HoldsOut(g2_local));
  CHECK(holdout.HoldsOut(MatmulRow{8192, 8192, 8192, "f16", 1, 1}));
  CHECK_FALSE(holdout.HoldsOut(MatmulRow{4096, 8192, 8192, "f16", 1, 1}));
  CHECK(ParseHoldout("none").ToString() == "none");
  CHECK(Contains(InputErrorMessage([] { ParseHoldout("1x8/q2"); }),
                 "--holdout = 1x8/q2: '1x8/q2': unknown qualifier 'q2'"));
  CHECK(Contains(InputErrorMessage([] { ParseHoldout("8"); }), "expected NxG"));
}

TEST_CASE("the Alpa profile reads as what Alpa ran: rounded sizes, dot shapes, filled rows") {
  const AlpaProfile alpa = ReadAlpaProfile(DefaultAlpaProfilePath());
  CHECK(alpa.rows_read == 6100);
  CHECK(alpa.inf_rows == 0);
  CHECK(alpa.zero_flop_dot_rows == 10);       // n = 0 on each of 5 meshes, 2 dtypes
  CHECK(alpa.duplicate_dot_rows == 4 * 126);  // 126 dot rows repeated on 4 more meshes
  CHECK(alpa.profile.matmuls.size() + alpa.filled_matmuls.size() == 126);
  CHECK(alpa.profile.collectives.size() + alpa.filled_collectives.size() == 5460);
  for (const MatmulRow& row : alpa.profile.matmuls) {
    CHECK(row.m % 128 == 0);
    CHECK(row.flops == 2.0 * row.m * row.m * row.m);
  }
  // all-gather over 16 ranks of 40 f16 elements runs 32 of them (alpa/mesh_profiling.py).
  const std::string dir = TempDir("alpa");
  const std::string header =
      "mesh_nodes,mesh_gpus_per_node,op,dtype,num_groups,group_size,crosses_nodes,elements,"
      "seconds,replica_groups\n";
  WriteText(dir + "/a.csv", header +
                                "2,8,all_gather,f16,1,16,1,40,1e-4,0 1 2 3 4 5 6 7 8 9 10 11 12 13 "
                                "14 15\n"
                                "1,8,all_to_all,f32,2,4,0,100,1e-4,0 1 2 3|4 5 6 7\n"
                                "1,8,all_reduce,f16,2,4,0,100,inf,0 1 2 3|4 5 6 7\n");
  const AlpaProfile small = ReadAlpaProfile(dir + "/a.csv");
  REQUIRE(small.profile.collectives.size() == 2);
  CHECK(small.profile.collectives[0].bytes == 32 * 2);
  CHECK(small.profile.collectives[1].bytes == 96 / 4 * 4);  // 96 / g per rank, 4-byte f32
  CHECK(small.inf_rows == 1);
  WriteText(dir + "/b.csv", header +
                                "2,8,all_reduce,f16,8,2,1,64,1e-4,0 1|2 3|4 5|6 7|8 9|10 "
                                "11|12 13|14 15\n");
  CHECK(Contains(InputErrorMessage([&] { ReadAlpaProfile(dir + "/b.csv"); }),
                 "b.csv:2: replica_groups = \"0 1|2 3"));
  WriteText(dir + "/c.csv", header + "1,1,dot,f16,0,0,0,1000,1e-4,\n");
  CHECK(Contains(InputErrorMessage([&] { ReadAlpaProfile(dir + "/c.csv"); }),
                 "c.csv:2: elements = 1000: a dot row's FLOP count must be 2 n^3"));
}

TEST_CASE("validation split: held-out collective MAPE <= 15% and matmul held-out < 10%") {
  // The split of `stratos validate alpa-comm` (README, Calibration): fit on meshes 1x2, 1x4 and
  // the 2x8 mesh's node-crossing groups of 2-8 ranks; predict the rest.
  const AlpaProfile alpa = ReadAlpaProfile(DefaultAlpaProfilePath());
  CalibrateOptions options;
  options.holdout = ParseHoldout("1x8,2x8/g16,2x8/local,gemm>4096");
  options.ring_links_per_gpu = 6;
  const CalibrationResult result =
      Calibrate(ReadClusterFile(ResolveClusterPath("p3.16xlarge-datasheet")), alpa.profile,
                options);
  REQUIRE(result.collectives.size() == 3);
  for (const CollectiveReport& report : result.collectives) {
    INFO(CollectiveName(report.fit.kind), " held-out MAPE ", report.held_out.mape);
    CHECK(report.held_out.rows > 400);
    CHECK(report.held_out.mape <= 0.15);
  }
  REQUIRE(result.matmul.has_value());
  CHECK(result.matmul->held_out.rows == 6);
  CHECK(result.matmul->held_out.mape < 0.10);
  CHECK(result.cluster.name == "p3.16xlarge-datasheet-calibrated");
  CHECK(result.cluster.IntraNode().ring_links_per_gpu == 6);
  CHECK(result.skipped_rows.at("all_to_all: not priced by the cost model") > 0);
}

}  // namespace
}  // namespace stratos

namespace stratos {

TEST_CASE("a device shared by two processes is exactly twice as slow in every compute term") {
  DeviceSpec device;
  device.name = "cpu";
  device.peak_flops = 4e10;
  device.hbm_bytes_per_second = 2e10;
  device.matmul_curve = MatmulCurve{0.8, 64, 3e-6};
  device.layer_curve = LayerCurve{1.2, 1.1, 2e-4, 3e-4, 2};
  const DeviceSpec slowed = SlowedDevice(device, 2);
  CHECK(slowed.peak_flops == 2e10);
  CHECK(slowed.hbm_bytes_per_second == 1e10);
  CHECK(slowed.matmul_curve->overhead_seconds == 6e-6);
  CHECK(slowed.matmul_curve->max_efficiency == 0.8);
  // A block whose device time doubles takes exactly twice as long, floors included.
  for (double x : {1e-5, 2e-4, 5e-3}) {
    CHECK(slowed.layer_curve->Forward(2 * x) ==
          doctest::Approx(2 * device.layer_curve->Forward(x)));
    CHECK(slowed.layer_curve->Backward(2 * x) ==
          doctest::Approx(2 * device.layer_curve->Backward(x)));
  }
  CHECK(SlowedDevice(device, 1).peak_flops == device.peak_flops);
  CHECK_THROWS_WITH_AS(SlowedDevice(device, 0.5), "device cpu: slowdown = 0.5: must be >= 1",
                       InputError);
}

}  // namespace stratos
