#include "costmodel/synthetic.h"

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"

namespace stratos {

SeedCase MakeSeedPartitionCase(int num_layers, int num_stages, int num_microbatches,
                               double layer_cost, double cut_cost) {
  STRATOS_CHECK(num_layers >= num_stages && num_stages >= 1 && num_microbatches >= 1,
                "L={} k={} B={}", num_layers, num_stages, num_microbatches);
  SeedCase seed;
  ModelSpec& model = seed.problem.model;
  model.name = fmt::format("seed-L{}-k{}-B{}", num_layers, num_stages, num_microbatches);
  model.family = "explicit";
  model.source = "seed_pipeline_partition_cases.csv";
  model.cut_cost_seconds = cut_cost;
  // The seed's layer cost is the whole forward + backward of a microbatch: a forward of
  // `layer_cost` FLOPs on a 1 FLOP/s device, and no separate backward.
  model.backward_to_forward_ratio = 0.0;
  for (int l = 0; l < num_layers; ++l) {
    LayerSpec layer;
    layer.name = fmt::format("layer.{}", l);
    layer.kind = LayerKind::kExplicit;
    layer.cost_class = 0;
    layer.forward_flops = layer_cost;  // per sample; each microbatch is one sample
    model.layers.push_back(layer);
  }
  ClusterSpec& cluster = seed.problem.cluster;
  cluster.name = "seed-unit-devices";
  cluster.source = "synthetic";
  cluster.devices.push_back({"unit", 1.0, 1e18, 1e18, 1.0, 0.0, "synthetic: 1 FLOP/s"});
  cluster.node_groups.push_back({1, num_stages, "unit"});
  cluster.networks.push_back({"synthetic", 1e18, 0.0, 1.0, "synthetic"});
  seed.problem.training.global_batch_size = num_microbatches;
  seed.space.min_stages = num_stages;
  seed.space.max_stages = num_stages;
  seed.space.max_data_parallel = 1;
  seed.space.max_tensor_parallel = 1;
  seed.space.allow_zero = false;
  seed.space.recompute = {Recompute::kNone};
  seed.space.num_microbatches = {num_microbatches};
  return seed;
}

std::string DefaultSeedCasesPath() {
  return SharedDataPath("seed_pipeline_partition_cases.csv");
}

std::vector<SeedCaseRow> ReadSeedPartitionCases(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open seed cases", path));
  const std::string kHeader =
      "num_layers,num_stages,num_microbatches,layer_cost,cut_cost,optimal_cost,one_optimal_split";
  std::string line;
  if (!std::getline(in, line) || line != kHeader)
    throw InputError(fmt::format("{}:1: header must be \"{}\"", path, kHeader));
  std::vector<SeedCaseRow> rows;
  for (int number = 2; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    std::vector<std::string> fields;
    std::stringstream stream(line);
    std::string field;
    while (std::getline(stream, field, ',')) fields.push_back(field);
    try {
      if (fields.size() != 7) throw std::invalid_argument("7 fields expected");
      SeedCaseRow row;
      row.num_layers = std::stoi(fields[0]);
      row.num_stages = std::stoi(fields[1]);
      row.num_microbatches = std::stoi(fields[2]);
      row.layer_cost = std::stod(fields[3]);
      row.cut_cost = std::stod(fields[4]);
      row.optimal_cost = std::stod(fields[5]);
      std::stringstream split(fields[6]);
      for (int size; split >> size;) row.optimal_split.push_back(size);
      rows.push_back(row);
    } catch (const std::exception& e) {
      throw InputError(fmt::format("{}:{}: \"{}\": malformed row ({})", path, number, line, e.what()));
    }
  }
  return rows;
}

Problem MakeRandomSmallProblem(std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto pick = [&rng](std::initializer_list<int> values) {
    std::uniform_int_distribution<size_t> index(0, values.size() - 1);
    return *(values.begin() + index(rng));
  };
  Problem problem;
  ModelSpec& model = problem.model;
  model.name = fmt::format("random-{}", seed);
  model.family = "gpt";
  model.source = model.name;
  model.hidden_size = pick({256, 512, 1024});
  model.num_layers = pick({2, 3, 4});
  model.num_attention_heads = pick({4, 8});
  model.num_key_value_heads = model.num_attention_heads;
  model.ffn_hidden_size = 4 * model.hidden_size;
  model.vocab_size = pick({1000, 8000, 32000});
  model.seq_length = pick({256, 1024});
  model.max_position_embeddings = model.seq_length;
  model.tie_word_embeddings = pick({0, 1}) == 1;
  BuildTransformerLayers(model);

  ClusterSpec& cluster = problem.cluster;
  cluster.name = model.name + "-cluster";
  cluster.source = "synthetic";
  const int nodes = pick({1, 2});
  const int gpus_per_node = nodes == 2 ? 2 : pick({2, 4});
  // Memory between 40% and 200% of one full replica's model states (16 bytes/param), so that
  // memory binds on some problems and not on others.
  std::uniform_real_distribution<double> memory_share(0.4, 2.0);
  const double memory = memory_share(rng) * 16.0 * model.ParameterCount();
  std::uniform_real_distribution<double> log_bandwidth(9.0, 11.5);
  cluster.devices.push_back({"random-gpu", 100e12, memory, 1e12, 0.8, 0.0, "synthetic"});
  cluster.node_groups.push_back({nodes, gpus_per_node, "random-gpu"});
  cluster.networks.push_back(
      {"intra", std::pow(10.0, log_bandwidth(rng) + 0.5), 5e-6, 1.0, "synthetic"});
  cluster.networks.push_back({"inter", std::pow(10.0, log_bandwidth(rng)), 10e-6, 1.0, "synthetic"});
  problem.training.global_batch_size = pick({4, 8, 16});
  problem.training.schedule = pick({0, 1}) == 1 ? Schedule::kGpipe : Schedule::kOneFOneB;
  return problem;
}

Problem MakeRandomSmallHeterogeneousProblem(std::uint64_t seed) {
  Problem problem = MakeRandomSmallProblem(seed);
  std::mt19937_64 rng(seed * 7919 + 1);
  std::uniform_int_distribution<int> coin(0, 1);
  std::uniform_real_distribution<double> speed(0.2, 1.0);
  std::uniform_real_distribution<double> memory_share(0.3, 1.5);
  std::uniform_real_distribution<double> log_bandwidth(9.0, 11.5);
  ClusterSpec& cluster = problem.cluster;
  const double memory = problem.cluster.devices.front().memory_bytes;
  cluster.name = problem.model.name + "-mixed";
  cluster.devices.clear();
  cluster.node_groups.clear();
  cluster.networks.clear();
  const int groups = 2 + coin(rng);
  for (int g = 0; g < groups; ++g) {
    const std::string device = fmt::format("gpu-{}", g);
    cluster.devices.push_back(
        {device, 100e12 * speed(rng), memory * memory_share(rng), 1e12 * speed(rng), 0.8, 0.0,
         "synthetic"});
    NodeGroup group{1, 1 + coin(rng), device, fmt::format("g{}", g)};
    group.intra_node_network = static_cast<int>(cluster.networks.size());
    group.inter_node_network = group.intra_node_network + 1;
    cluster.networks.push_back(
        {fmt::format("intra-{}", g), std::pow(10.0, log_bandwidth(rng) + 0.5), 5e-6, 1.0, ""});
    cluster.networks.push_back(
        {fmt::format("inter-{}", g), std::pow(10.0, log_bandwidth(rng)), 10e-6, 1.0, ""});
    cluster.node_groups.push_back(group);
  }
  if (coin(rng) == 1) {
    // 10 MB/s to 3 GB/s: slow enough that crossing it weighs against the groups' speed.
    std::uniform_real_distribution<double> log_link(7.0, 9.5);
    cluster.networks.push_back({"between", std::pow(10.0, log_link(rng)), 50e-6, 1.0, "synthetic"});
    cluster.group_links.push_back({0, 1, static_cast<int>(cluster.networks.size()) - 1});
  }
  return problem;
}

}  // namespace stratos
