// Heterogeneous clusters: node groups with their own devices and network levels, links between
// groups, plans whose stages name their group, and the cost model pricing each stage on its own
// group. One test per input rule of the new keys, each checking file, key, value and rule.
#include <doctest/doctest.h>

#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "costmodel/cluster.h"
#include "costmodel/cluster_io.h"
#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/pipeline_sim.h"
#include "costmodel/plan.h"
#include "costmodel/synthetic.h"
#include "test_util.h"

namespace stratos {
using testing::InputErrorMessage;
namespace {

const char* kDevices = R"(
[cluster]
name = "mixed"
[[device]]
name = "A100"
peak_TFLOPS = 312
memory_GiB = 80
hbm_GBps = 2039
[[device]]
name = "V100"
peak_TFLOPS = 125
memory_GiB = 16
hbm_GBps = 900
)";
const char* kGroups = R"(
[[node_group]]
name = "a100"
count = 2
gpus_per_node = 8
device = "A100"
[[node_group]]
name = "v100"
count = 1
gpus_per_node = 8
device = "V100"
intra_node_network = "NVLink2"
inter_node_network = "Ethernet"
)";
const char* kNetworks = R"(
[[network]]
name = "NVLink3"
bandwidth_GBps = 232
latency_us = 5
[[network]]
name = "InfiniBand"
bandwidth_GBps = 100
latency_us = 10
[[network]]
name = "NVLink2"
bandwidth_GBps = 100
latency_us = 6
[[network]]
name = "Ethernet"
bandwidth_GBps = 3.125
latency_us = 30
efficiency = 0.8
)";

std::string Mixed(const std::string& extra = "", const std::string& groups = kGroups) {
  return std::string(kDevices) + groups + kNetworks + extra;
}

void CheckError(const std::string& toml, std::initializer_list<const char*> parts) {
  const std::string message = InputErrorMessage([&] { ParseClusterToml(toml, "c.toml"); });
  INFO("message: ", message);
  for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
}

// GPT of `layers` blocks (hidden 1024, 16 heads, sequence 512) on `cluster`, global batch 16.
Problem GptOn(const ClusterSpec& cluster, int layers = 4) {
  Problem problem;
  ModelSpec& m = problem.model;
  m.name = "test-gpt";
  m.family = "gpt";
  m.source = "test";
  m.hidden_size = 1024;
  m.num_layers = layers;
  m.num_attention_heads = 16;
  m.num_key_value_heads = 16;
  m.ffn_hidden_size = 4096;
  m.vocab_size = 51200;
  m.seq_length = 512;
  m.max_position_embeddings = 512;
  m.tie_word_embeddings = true;
  BuildTransformerLayers(m);
  problem.cluster = cluster;
  problem.training.global_batch_size = 16;
  return problem;
}

StageConfig Config(int gpus, int dp, int tp, int group) {
  StageConfig config{1, gpus, dp, tp, 0, Recompute::kNone, {}};
  config.node_group = group;
  return config;
}

// One group of the mixed cluster alone, written out by hand: its device and its two levels.
ClusterSpec OneGroup(const DeviceSpec& device, int nodes, std::vector<NetworkLevel> levels) {
  ClusterSpec cluster;
  cluster.name = device.name + "-only";
  cluster.devices.push_back(device);
  cluster.node_groups.push_back({nodes, 8, device.name});
  cluster.networks = std::move(levels);
  return cluster;
}

ClusterSpec A100Only() {
  return OneGroup({"A100", 312e12, 80.0 * (1 << 30), 2039e9, 1.0, 0.0, ""}, 2,
                  {{"NVLink3", 232e9, 5e-6, 1.0, ""}, {"InfiniBand", 100e9, 10e-6, 1.0, ""}});
}

ClusterSpec V100Only() {
  return OneGroup({"V100", 125e12, 16.0 * (1 << 30), 900e9, 1.0, 0.0, ""}, 1,
                  {{"NVLink2", 100e9, 6e-6, 1.0, ""}, {"Ethernet", 3.125e9, 30e-6, 0.8, ""}});
}

// Two stages of a 6-layer plan (layers [0, 3) and [3, 6)) with global batch 16 and 2
// microbatches.
Plan TwoStages(const StageConfig& first, const StageConfig& second) {
  Plan plan;
  plan.global_batch_size = 16;
  plan.num_microbatches = 2;
  plan.stages = {{0, 3, first}, {3, 6, second}};
  return plan;
}

}  // namespace

TEST_CASE("node groups name their device and levels; groups talk over the slower level") {
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  REQUIRE(cluster.NumGroups() == 2);
  CHECK(cluster.GroupName(0) == "a100");
  CHECK(cluster.GroupIndex("v100") == 1);
  CHECK(cluster.GroupIndex("h100") == -1);
  CHECK(cluster.GroupDevices(0) == 16);
  CHECK(cluster.NumDevices() == 24);
  CHECK(cluster.GroupDevice(1).peak_flops == 125e12);
  // The a100 group names no level: the first two.
  CHECK(cluster.GroupIntraNode(0).name == "NVLink3");
  CHECK(cluster.GroupInterNode(0).name == "InfiniBand");
  CHECK(cluster.GroupIntraNode(1).name == "NVLink2");
  CHECK(cluster.GroupInterNode(1).name == "Ethernet");
  CHECK(cluster.LinkBetween(0, 0).name == "InfiniBand");
  CHECK(cluster.LinkBetween(0, 1).name == "Ethernet");
  CHECK(cluster.LinkBetween(1, 0).name == "Ethernet");
  CHECK(cluster.GroupLabel(1) == "v100 (1 x 8 V100)");
  // A group's view is a homogeneous cluster of its own.
  const ClusterSpec view = cluster.GroupView(1);
  CHECK(view.IsHomogeneous());
  CHECK(view.Device().name == "V100");
  CHECK(view.IntraNode().name == "NVLink2");
  CHECK(view.InterNode().name == "Ethernet");
}

TEST_CASE("a group_link sets the level between two groups") {
  const ClusterSpec cluster = ParseClusterToml(
      Mixed("[[network]]\nname = \"WAN\"\nbandwidth_GBps = 1\nlatency_us = 500\n"
            "[[group_link]]\ngroups = [\"v100\", \"a100\"]\nnetwork = \"WAN\"\n"
            "source = \"two sites\"\n"),
      "c.toml");
  CHECK(cluster.LinkBetween(0, 1).name == "WAN");
  CHECK(cluster.LinkBetween(1, 0).name == "WAN");
  CHECK(cluster.LinkBetween(1, 1).name == "Ethernet");
}

TEST_CASE("groups without names go by their device, numbered when two share it") {
  const std::string groups = R"(
[[node_group]]
count = 1
gpus_per_node = 8
device = "A100"
[[node_group]]
count = 1
gpus_per_node = 4
device = "A100"
[[node_group]]
count = 1
gpus_per_node = 8
device = "V100"
)";
  const std::string networks = R"(
[[network]]
bandwidth_GBps = 100
latency_us = 5
)";
  const ClusterSpec cluster =
      ParseClusterToml(std::string(kDevices) + groups + networks, "c.toml");
  CHECK(cluster.GroupName(0) == "A100-0");
  CHECK(cluster.GroupName(1) == "A100-1");
  CHECK(cluster.GroupName(2) == "V100");
  // One level serves inside and between nodes.
  CHECK(&cluster.GroupInterNode(2) == &cluster.networks[0]);
}

TEST_CASE("every rule of the heterogeneous keys has its error message") {
  const std::string wan = "[[network]]\nname = \"WAN\"\nbandwidth_GBps = 1\nlatency_us = 500\n";
  SUBCASE("node_group keys") {
    std::string groups = kGroups;
    CheckError(Mixed("", groups + "[[node_group]]\nname = \"a100\"\ncount = 1\n"
                                  "gpus_per_node = 8\ndevice = \"A100\"\n"),
               {"c.toml: node_group[2].name = \"a100\": duplicate node group name (node_group[0])"});
    CheckError(Mixed("", groups + "[[node_group]]\nname = \"\"\ncount = 1\n"
                                  "gpus_per_node = 8\ndevice = \"A100\"\n"),
               {"c.toml: node_group[2].name = \"\": must not be empty"});
    CheckError(Mixed("", groups + "[[node_group]]\nname = 3\ncount = 1\n"
                                  "gpus_per_node = 8\ndevice = \"A100\"\n"),
               {"c.toml: node_group[2].name = 3: must be a string"});
    CheckError(Mixed("", groups + "[[node_group]]\nname = \"x\"\ncount = 1\ngpus_per_node = 8\n"
                                  "device = \"A100\"\nintra_node_network = \"PCIe\"\n"),
               {"c.toml: node_group[2].intra_node_network = \"PCIe\": names no [[network]] "
                "(known: \"NVLink3\", \"InfiniBand\", \"NVLink2\", \"Ethernet\")"});
    CheckError(Mixed("", groups + "[[node_group]]\nname = \"x\"\ncount = 1\ngpus_per_node = 8\n"
                                  "device = \"A100\"\ninter_node_network = 5\n"),
               {"c.toml: node_group[2].inter_node_network = 5: must be a string"});
    CheckError(Mixed("", groups + "[[node_group]]\nname = \"x\"\ncount = 1\ngpus_per_node = 8\n"
                                  "device = \"A100\"\nswitch = \"y\"\n"),
               {"c.toml: node_group[2].switch: unknown key"});
  }
  SUBCASE("network names a group refers to") {
    CheckError(Mixed("[[network]]\nname = \"Ethernet\"\nbandwidth_GBps = 1\nlatency_us = 1\n"),
               {"c.toml: node_group[1].inter_node_network = \"Ethernet\": is ambiguous: "
                "network[3] and network[4] share the name"});
    CheckError(Mixed(wan), {"c.toml: network[4].name = \"WAN\": is not used: a level after the "
                            "first two must be named by a node_group's intra_node_network or "
                            "inter_node_network or by a group_link's network"});
  }
  SUBCASE("ring links only inside a node") {
    std::string networks = kNetworks;
    networks.insert(networks.find("efficiency = 0.8"), "ring_links_per_gpu = 6\n");
    CheckError(std::string(kDevices) + kGroups + networks,
               {"c.toml: network[3].ring_links_per_gpu = 6: only an intra-node level has ring "
                "links; this one is node_group[1]'s inter-node level"});
    CheckError(Mixed("[[network]]\nname = \"WAN\"\nbandwidth_GBps = 1\nlatency_us = 500\n"
                     "ring_links_per_gpu = 2\n[[group_link]]\ngroups = [\"a100\", \"v100\"]\n"
                     "network = \"WAN\"\n"),
               {"c.toml: network[4].ring_links_per_gpu = 2: only an intra-node level has ring "
                "links; this one is group_link[0]'s level"});
  }
  SUBCASE("group_link keys") {
    CheckError("group_link = 3\n" + Mixed(wan),
               {"c.toml: group_link = 3: must be an array of tables ([[group_link]])"});
    CheckError(Mixed(wan + "[[group_link]]\nnetwork = \"WAN\"\n"),
               {"c.toml: group_link[0].groups: missing required key"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\"]\nnetwork = \"WAN\"\n"),
               {"c.toml: group_link[0].groups = ", "must be an array of two node group names"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"h100\"]\nnetwork = \"WAN\"\n"),
               {"names no node group \"h100\" (groups: \"a100\", \"v100\")"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"a100\"]\nnetwork = \"WAN\"\n"),
               {"c.toml: group_link[0].groups", "must name two different node groups"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"v100\"]\nnetwork = \"WAN\"\n"
                           "[[group_link]]\ngroups = [\"v100\", \"a100\"]\nnetwork = \"WAN\"\n"),
               {"c.toml: group_link[1].groups", "links the same two groups as group_link[0]"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"v100\"]\nnetwork = \"LAN\"\n"),
               {"c.toml: group_link[0].network = \"LAN\": names no [[network]]"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"v100\"]\n"),
               {"c.toml: group_link[0].network: missing required key"});
    CheckError(Mixed(wan + "[[group_link]]\ngroups = [\"a100\", \"v100\"]\nnetwork = \"WAN\"\n"
                           "speed = 1\n"),
               {"c.toml: group_link[0].speed: unknown key"});
  }
}

TEST_CASE("--nodes sets node counts per group") {
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  const ClusterSpec more = cluster.WithNodeCounts("v100=3,a100=1");
  CHECK(more.Group(0).count == 1);
  CHECK(more.Group(1).count == 3);
  CHECK(cluster.WithNodeCounts("4").Group(0).count == 4);
  CHECK(cluster.WithNodeCounts("4").Group(1).count == 1);
  const auto error = [&](const std::string& spec) {
    return InputErrorMessage([&] { cluster.WithNodeCounts(spec); });
  };
  CHECK(error("h100=2") == "command line: --nodes = \"h100=2\": names no node group \"h100\" "
                           "(groups: \"a100\", \"v100\") (cluster mixed)");
  CHECK(error("a100=2,a100=3") ==
        "command line: --nodes = \"a100=2,a100=3\": gives group \"a100\" twice (cluster mixed)");
  CHECK(error("a100=0") == "command line: --nodes = \"a100=0\": count \"0\" of group \"a100\" "
                           "must be an integer >= 1 (cluster mixed)");
  CHECK(error("a100=2,v100") ==
        "command line: --nodes = \"a100=2,v100\": entry \"v100\" must be group=count (cluster mixed)");
  CHECK(error("two") == "command line: --nodes = \"two\": must be an integer node count, or "
                        "group=count pairs such as a100=4,v100=8 (cluster mixed)");
  CHECK(error("0").find("--nodes = 0: must be >= 1") != std::string::npos);
}

TEST_CASE("a heterogeneous plan's estimate equals the stage terms of its groups") {
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  const Problem problem = GptOn(cluster);
  const Plan plan = TwoStages(Config(8, 8, 1, 0), Config(8, 4, 2, 1));
  const Estimate estimate = Evaluate(problem, plan);

  // Each stage's layers priced on its group alone, and the send between them over Ethernet
  // (3.125 GB/s x 0.8, 30 us), which the 8 GPUs of the sending node share.
  const Problem a100 = GptOn(A100Only());
  const Problem v100 = GptOn(V100Only());
  const CostModel on_a100(a100), on_v100(v100);
  StageConfig first = plan.stages[0].config, second = plan.stages[1].config;
  first.node_group = second.node_group = 0;
  StageTerms expected[2];
  for (int l = 0; l < 3; ++l) expected[0] += on_a100.LayerTerms(l, first, 2);
  for (int l = 3; l < 6; ++l) expected[1] += on_v100.LayerTerms(l, second, 2);
  const double boundary_bytes = 512 * 1024 * 2.0;  // s h bf16 of one sample
  const double send_0 = 1 * boundary_bytes / 1 * 8 / (3.125e9 * 0.8) + 30e-6;  // b = 1, tp 1
  const double send_1 = 2 * boundary_bytes / 2 * 8 / (3.125e9 * 0.8) + 30e-6;  // b = 2, tp 2
  const double sends[2] = {send_0, send_1};
  const double capacity[2] = {80.0 * (1 << 30), 16.0 * (1 << 30)};
  std::vector<double> t, e, c;
  for (int s = 0; s < 2; ++s) {
    const StageEstimate& se = estimate.stages[s];
    INFO("stage ", s);
    CHECK(se.node_group == s);
    CHECK(se.terms.compute_seconds == doctest::Approx(expected[s].compute_seconds));
    CHECK(se.terms.tp_comm_seconds == doctest::Approx(expected[s].tp_comm_seconds));
    CHECK(se.terms.p2p_seconds == doctest::Approx(sends[s]));
    CHECK(se.terms.state_bytes == doctest::Approx(expected[s].state_bytes));
    CHECK(se.memory_capacity_bytes == capacity[s]);
    // DP sync: bandwidth part per layer, latency once per stage (the group's own NVLink).
    const StageTerms overhead = (s == 0 ? on_a100 : on_v100)
                                    .StageOverhead(s == 0 ? first : second, 2, s == 0, s == 1);
    CHECK(se.terms.dp_sync_seconds ==
          doctest::Approx(expected[s].dp_sync_seconds + overhead.dp_sync_seconds));
    t.push_back(expected[s].MicrobatchSeconds() + sends[s]);
    // The tied embeddings' all-reduce between the two ends crosses nodes on the whole cluster,
    // over each group's own inter-node level (test_cost_model.cc has its hand-computed value).
    const double embedding_sync =
        CostModel(problem)
            .StageOverhead(plan.stages[s].config, 2, s == 0, s == 1)
            .embedding_sync_seconds;
    CHECK(se.terms.embedding_sync_seconds == embedding_sync);
    CHECK(embedding_sync > 0.0);
    e.push_back(expected[s].ExposedTailSeconds() + overhead.ExposedTailSeconds() -
                overhead.embedding_sync_seconds + embedding_sync);
    c.push_back(0.0);
  }
  CHECK(estimate.iteration_seconds == doctest::Approx(PipelineObjective(t, e, c, 2)));
  // MFU over the plan's own peaks: 8 A100 and 8 V100.
  CHECK(estimate.mfu == doctest::Approx(estimate.model_flops / estimate.iteration_seconds /
                                        (8 * 312e12 + 8 * 125e12)));
  // Per-group use: half the A100s, all the V100s.
  REQUIRE(estimate.groups.size() == 2);
  CHECK(estimate.groups[0].name == "a100");
  CHECK(estimate.groups[0].devices_used == 8);
  CHECK(estimate.groups[0].devices_available == 16);
  CHECK(estimate.groups[1].devices_used == 8);
  CHECK(estimate.groups[1].busy_fraction ==
        doctest::Approx(2 * t[1] / estimate.iteration_seconds));
  const std::string report = EstimateReport(estimate, plan);
  CHECK(report.find("GPUs used") != std::string::npos);
  CHECK(report.find("    8/16  ") != std::string::npos);
  const nlohmann::json json = EstimateToJson(estimate, plan);
  CHECK(json["stages"][1]["node_group"] == "v100");
  CHECK(json["node_groups"][0]["devices_available"] == 16);
  // The simulator's trace names each stage's group.
  const SimResult sim = SimulatePipeline(SimStagesFromEstimate(estimate), 2, plan.schedule);
  const nlohmann::json trace = ChromeTrace(sim, "t", StageGroupNotes(estimate));
  CHECK(trace["traceEvents"][2]["args"]["name"] == "stage 1 (v100 V100)");
}

TEST_CASE("the order of the groups along the pipeline changes the estimate, not the file order") {
  // The same two stages, their groups swapped: the V100 stage is now first.
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  const Problem problem = GptOn(cluster);
  Plan plan = TwoStages(Config(8, 8, 1, 0), Config(8, 8, 1, 1));
  Plan swapped = plan;
  swapped.stages[0].config.node_group = 1;
  swapped.stages[1].config.node_group = 0;
  const Estimate a = Evaluate(problem, plan), b = Evaluate(problem, swapped);
  CHECK(a.stages[0].terms.compute_seconds < b.stages[0].terms.compute_seconds);
  CHECK(a.stages[1].terms.compute_seconds > b.stages[1].terms.compute_seconds);
  // The cluster file's group order does not matter: list v100 first, renumber the plan.
  std::string reordered = kGroups;
  const size_t second = reordered.find("[[node_group]]", 2);
  reordered = reordered.substr(second) + reordered.substr(0, second);
  const Problem other = GptOn(ParseClusterToml(Mixed("", reordered), "c.toml"));
  Plan renumbered = plan;
  renumbered.stages[0].config.node_group = 1;
  renumbered.stages[1].config.node_group = 0;
  const Estimate c = Evaluate(other, renumbered);
  for (int s = 0; s < 2; ++s) {
    INFO("stage ", s);
    CHECK(c.stages[s].terms.compute_seconds == a.stages[s].terms.compute_seconds);
    CHECK(c.stages[s].terms.p2p_seconds == a.stages[s].terms.p2p_seconds);
    CHECK(c.stages[s].terms.dp_sync_seconds == a.stages[s].terms.dp_sync_seconds);
    CHECK(c.stages[s].tail_seconds == a.stages[s].tail_seconds);
  }
  CHECK(c.iteration_seconds == a.iteration_seconds);
}

TEST_CASE("a homogeneous cluster split into two identical groups prices plans the same") {
  ClusterSpec one = A100Only();
  one.node_groups[0].count = 2;
  ClusterSpec two = one;
  two.node_groups = {{1, 8, "A100", "left"}, {1, 8, "A100", "right"}};
  const Problem whole = GptOn(one), split = GptOn(two);
  for (int dp : {8, 4}) {
    Plan plan;
    plan.global_batch_size = 16;
    plan.num_microbatches = 2;
    plan.stages = {{0, 2, Config(8, dp, 8 / dp, 0)}, {2, 6, Config(8, dp, 8 / dp, 0)}};
    Plan placed = plan;
    placed.stages[1].config.node_group = 1;
    const Estimate a = Evaluate(whole, plan), b = Evaluate(split, placed);
    INFO("dp ", dp);
    CHECK(a.iteration_seconds == b.iteration_seconds);
    CHECK(a.mfu == b.mfu);
    for (int s = 0; s < 2; ++s) {
      CHECK(a.stages[s].terms.p2p_seconds == b.stages[s].terms.p2p_seconds);
      CHECK(a.stages[s].peak_memory_bytes == b.stages[s].peak_memory_bytes);
    }
  }
}

TEST_CASE("an interleaved plan's last rank sends forward to the first rank's group") {
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  const Problem problem = GptOn(cluster);
  Plan plan;
  plan.global_batch_size = 16;
  plan.num_microbatches = 2;
  plan.virtual_stages = 2;
  const StageConfig a = Config(8, 8, 1, 0), v = Config(8, 8, 1, 1);
  plan.stages = {{0, 2, a}, {2, 3, v}, {3, 4, a}, {4, 6, v}};
  const Estimate estimate = Evaluate(problem, plan);
  // Every send of either rank crosses Ethernet, each of b = 1 sample's activations from 8 GPUs:
  // rank 0 sends both chunks forward and one backward, rank 1 one chunk forward (back to rank
  // 0) and both backward.
  const double send = 512 * 1024 * 2.0 * 8 / (3.125e9 * 0.8) + 30e-6;
  CHECK(estimate.stages[0].terms.p2p_seconds == doctest::Approx(3 * send));
  CHECK(estimate.stages[1].terms.p2p_seconds == doctest::Approx(3 * send));
}

TEST_CASE("plans name each stage's node group and are checked against the group") {
  const ClusterSpec cluster = ParseClusterToml(Mixed(), "c.toml");
  const Problem problem = GptOn(cluster);
  Plan plan = TwoStages(Config(8, 8, 1, 0), Config(8, 8, 1, 1));
  SUBCASE("JSON round trip, version 2") {
    const nlohmann::json json = PlanToJson(plan);
    CHECK(json["schema"] == "stratos.plan/2");
    CHECK(json["stages"][1]["node_group"] == 1);
    const Plan back = PlanFromJson(json, "p.json");
    CHECK(back.stages[1].config.node_group == 1);
    CHECK(back.stages[1].config == plan.stages[1].config);
  }
  SUBCASE("version 1 files are read, in group 0, and have no node_group") {
    nlohmann::json json = PlanToJson(plan);
    json["schema"] = "stratos.plan/1";
    json["stages"][0].erase("node_group");
    json["stages"][1].erase("node_group");
    CHECK(PlanFromJson(json, "p.json").stages[1].config.node_group == 0);
    json["stages"][1]["node_group"] = 1;
    CHECK(InputErrorMessage([&] { PlanFromJson(json, "p.json"); })
              .find("p.json: stages[1].node_group: unknown key") == 0);
  }
  SUBCASE("a group index out of range") {
    plan.stages[1].config.node_group = 2;
    CHECK(InputErrorMessage([&] { ValidatePlan(problem, plan, "p.json"); }) ==
          "p.json: stages[1] = mesh 1x8 dp8 tp1 zero0 recompute=none group=2: node_group 2 must "
          "be in [0, 1] (the cluster has 2 node groups)");
  }
  SUBCASE("more devices than the group has") {
    plan.stages[0].config.node_group = 1;
    CHECK(InputErrorMessage([&] { ValidatePlan(problem, plan, "p.json"); }) ==
          "p.json: stages = 16 devices in node group v100: the group has only 8 devices (v100 "
          "(1 x 8 V100))");
  }
  SUBCASE("a mesh larger than the group's nodes") {
    plan.stages[1].config = Config(8, 8, 1, 1);
    plan.stages[1].config.mesh_nodes = 2;
    plan.stages[1].config.mesh_gpus_per_node = 8;
    plan.stages[1].config.data_parallel = 16;
    CHECK(InputErrorMessage([&] { ValidatePlan(problem, plan, "p.json"); })
              .find("mesh spans 2 nodes but node group v100 has 1") != std::string::npos);
  }
}

}  // namespace stratos
