// Cluster files: unit conversion, the zoo, ClusterSpec accessors, and one test per input rule
// checking that the error names the file, the key, the value and the rule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "costmodel/cluster.h"
#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/zoo.h"
#include "test_util.h"
#include "tests/scratch_dir.h"

namespace stratos {
using testing::InputErrorMessage;
namespace {

const char* kDevice = R"(
[[device]]
name = "A100"
peak_TFLOPS = 312
memory_GiB = 80
hbm_GBps = 2039
matmul_efficiency = 0.5
reserved_memory_GiB = 2
)";
const char* kGroup = R"(
[[node_group]]
count = 2
gpus_per_node = 8
device = "A100"
)";
const char* kNetworks = R"(
[[network]]
name = "NVLink3"
bandwidth_GBps = 232
latency_us = 5
[[network]]
name = "IB"
bandwidth_GBps = 192
latency_us = 10
efficiency = 0.5
)";

std::string Cluster(const std::string& device = kDevice, const std::string& group = kGroup,
                    const std::string& networks = kNetworks) {
  return "[cluster]\nname = \"test\"\n" + device + group + networks;
}

void CheckClusterError(const std::string& toml, std::initializer_list<const char*> parts) {
  const std::string message = InputErrorMessage([&] { ParseClusterToml(toml, "c.toml"); });
  INFO("message: ", message);
  for (const char* part : parts) CHECK(message.find(part) != std::string::npos);
}

TEST_CASE("cluster TOML units are converted once to SI") {
  const ClusterSpec cluster = ParseClusterToml(Cluster(), "c.toml");
  CHECK(cluster.name == "test");
  CHECK(cluster.source == "c.toml");
  const DeviceSpec& device = cluster.Device();
  CHECK(device.peak_flops == 312e12);
  CHECK(device.memory_bytes == 80.0 * 1024 * 1024 * 1024);
  CHECK(device.hbm_bytes_per_second == 2039e9);
  CHECK(device.matmul_efficiency == 0.5);
  CHECK(device.reserved_memory_bytes == 2.0 * 1024 * 1024 * 1024);
  CHECK(cluster.IntraNode().bandwidth_bytes_per_second == 232e9);
  CHECK(cluster.IntraNode().latency_seconds == doctest::Approx(5e-6).epsilon(1e-12));
  CHECK(cluster.InterNode().EffectiveBandwidth() == 96e9);
}

TEST_CASE("memory_GB is 1e9 bytes and measured_matmul_TFLOPS gives measured / peak") {
  const std::string device = R"(
[[device]]
name = "A100"
peak_TFLOPS = 312
memory_GB = 80
hbm_GBps = 2039
measured_matmul_TFLOPS = 271.2
)";
  const ClusterSpec cluster = ParseClusterToml(Cluster(device), "c.toml");
  CHECK(cluster.Device().memory_bytes == 80e9);
  CHECK(cluster.Device().matmul_efficiency == doctest::Approx(271.2 / 312).epsilon(1e-12));
}

TEST_CASE("node and device counts sum over node groups; WithNodes changes the first group") {
  const ClusterSpec cluster = ParseClusterToml(Cluster(), "c.toml");
  CHECK(cluster.NumNodes() == 2);
  CHECK(cluster.NumDevices() == 16);
  CHECK(cluster.GpusPerNode() == 8);
  CHECK(cluster.IsHomogeneous());
  const ClusterSpec bigger = cluster.WithNodes(4);
  CHECK(bigger.NumDevices() == 32);
  CHECK(cluster.NumDevices() == 16);
  CHECK(InputErrorMessage([&] { cluster.WithNodes(0); }).find("command line: --nodes = 0: must be >= 1") == 0);
}

TEST_CASE("a single network level serves as inter-node level too") {
  const std::string one = "[[network]]\nbandwidth_GBps = 100\nlatency_us = 1\n";
  const ClusterSpec cluster = ParseClusterToml(Cluster(kDevice, kGroup, one), "c.toml");
  CHECK(&cluster.InterNode() == &cluster.IntraNode());
}

TEST_CASE("every zoo cluster loads with catalog devices and two network levels per group") {
  const std::vector<std::string> names = ZooClusters();
  CHECK(names.size() >= 5);
  int heterogeneous = 0;
  for (const std::string& name : names) {
    INFO("cluster: ", name);
    const ClusterSpec cluster = ReadClusterFile(ResolveClusterPath(name));
    if (cluster.IsHomogeneous()) {
      CHECK(cluster.NumNodes() == 1);
      CHECK(cluster.networks.size() == 2);
    }
    heterogeneous += !cluster.IsHomogeneous();
    for (int g = 0; g < cluster.NumGroups(); ++g) {
      CHECK(cluster.GroupDevice(g).peak_flops > 0);
      CHECK(&cluster.GroupIntraNode(g) != &cluster.GroupInterNode(g));
    }
  }
  CHECK(heterogeneous >= 3);
  const ClusterSpec a100 = ReadClusterFile(ResolveClusterPath("dgx-a100-80gb"));
  CHECK(a100.Device().matmul_efficiency == doctest::Approx(271.2 / 312).epsilon(1e-12));
  CHECK(a100.InterNode().bandwidth_bytes_per_second == 192e9);
}

// ---- one test per input rule ----

TEST_CASE("malformed cluster TOML is an InputError with file, line and column") {
  CheckClusterError("[cluster\nname = 1\n", {"c.toml:1:", "TOML parse error"});
}

TEST_CASE("an unknown cluster key is an InputError listing the known keys") {
  CheckClusterError(Cluster(std::string(kDevice) + "peak_TFLOP = 1\n"),
                    {"c.toml: device[0].peak_TFLOP: unknown key (known keys:", "peak_TFLOPS"});
  CheckClusterError(Cluster() + "[training]\n", {"c.toml: training: unknown key"});
}

TEST_CASE("a missing required cluster key or table is an InputError") {
  CheckClusterError(Cluster(kDevice, "[[node_group]]\ncount = 1\ndevice = \"A100\"\n"),
                    {"c.toml: node_group[0].gpus_per_node: missing required key"});
  CheckClusterError(Cluster(kDevice, kGroup, ""), {"c.toml: network: missing required key"});
  CheckClusterError(Cluster("[[device]]\nname = \"A100\"\npeak_TFLOPS = 1\nhbm_GBps = 1\n"),
                    {"c.toml: device[0].memory_GB | device[0].memory_GiB: missing required key"});
}

TEST_CASE("giving both memory_GB and memory_GiB is an InputError") {
  CheckClusterError(Cluster(std::string(kDevice) + "memory_GB = 80\n"),
                    {"c.toml: device[0].memory_GiB = 80: give only one of memory_GB, memory_GiB"});
}

TEST_CASE("a wrongly typed cluster key is an InputError") {
  CheckClusterError(Cluster(kDevice,
                            "[[node_group]]\ncount = \"two\"\ngpus_per_node = 8\n"
                            "device = \"A100\"\n"),
                    {"c.toml: node_group[0].count = \"two\": must be an integer"});
}

TEST_CASE("counts < 1 and bandwidth <= 0 are InputErrors") {
  CheckClusterError(Cluster(kDevice,
                            "[[node_group]]\ncount = 1\ngpus_per_node = 0\n"
                            "device = \"A100\"\n"),
                    {"c.toml: node_group[0].gpus_per_node = 0: must be >= 1"});
  CheckClusterError(Cluster(kDevice,
                            "[[node_group]]\ncount = 1000000\ngpus_per_node = 8\n"
                            "device = \"A100\"\n"),
                    {"c.toml: node_group = 8000000 devices (count x gpus_per_node): must be at "
                     "most 1048576"});
  CheckClusterError(Cluster(kDevice, kGroup, "[[network]]\nbandwidth_GBps = 0\nlatency_us = 1\n"),
                    {"c.toml: network[0].bandwidth_GBps = 0: must be > 0"});
  CheckClusterError(Cluster(kDevice, kGroup, "[[network]]\nbandwidth_GBps = 1\nlatency_us = -1\n"),
                    {"c.toml: network[0].latency_us = -1: must be >= 0"});
}

TEST_CASE("inf and nan in a cluster file are InputErrors naming the key") {
  CheckClusterError(Cluster(kDevice, kGroup, "[[network]]\nbandwidth_GBps = inf\nlatency_us = 1\n"),
                    {"c.toml: network[0].bandwidth_GBps = inf: must be a finite number"});
  CheckClusterError(Cluster(kDevice, kGroup, "[[network]]\nbandwidth_GBps = 1\nlatency_us = nan\n"),
                    {"c.toml: network[0].latency_us = nan: must be a finite number"});
}

TEST_CASE("an unknown device in a node group is an InputError listing the catalog") {
  CheckClusterError(Cluster(kDevice,
                            "[[node_group]]\ncount = 1\ngpus_per_node = 8\n"
                            "device = \"H100\"\n"),
                    {"c.toml: node_group[0].device = \"H100\": not in the device catalog "
                     "(known: \"A100\")"});
}

TEST_CASE("an efficiency outside (0, 1] is an InputError") {
  CheckClusterError(Cluster("[[device]]\nname = \"A100\"\npeak_TFLOPS = 312\nmemory_GB = 80\n"
                            "hbm_GBps = 2039\nmatmul_efficiency = 1.2\n"),
                    {"c.toml: device[0].matmul_efficiency = 1.2: must be in (0, 1]"});
  CheckClusterError(Cluster(kDevice, kGroup,
                            "[[network]]\nbandwidth_GBps = 1\nlatency_us = 1\n"
                            "efficiency = 0\n"),
                    {"c.toml: network[0].efficiency = 0: must be in (0, 1]"});
}

TEST_CASE("a duplicate device name is an InputError") {
  CheckClusterError(Cluster(std::string(kDevice) + kDevice),
                    {"c.toml: device[1].name = \"A100\": duplicate device name"});
}

TEST_CASE("a third network level that nothing names is an InputError") {
  CheckClusterError(Cluster(kDevice, kGroup,
                            std::string(kNetworks) + "[[network]]\nbandwidth_GBps = 1\n"
                                                     "latency_us = 1\n"),
                    {"c.toml: network[2].name = (absent): is not used: a level after the first "
                     "two must be named"});
}

TEST_CASE("a missing cluster file is an InputError naming the path") {
  CHECK(InputErrorMessage([] { ReadClusterFile("/nonexistent/c.toml"); }) ==
        "/nonexistent/c.toml: cannot open cluster file");
}

TEST_CASE("the user's own zoo: a cluster saved there is found by name and listed") {
  const std::string dir = testing::ScratchDir("user_zoo");
  const char* before = std::getenv("STRATOS_USER_ZOO");
  const std::string saved = before != nullptr ? before : "";
  setenv("STRATOS_USER_ZOO", dir.c_str(), 1);
  CHECK(UserZooDir() == dir);
  const std::string path = UserClusterPath("my-box_2");
  CHECK(path == dir + "/clusters/my-box_2.toml");
  CHECK_THROWS_WITH_AS(ResolveClusterPath("my-box_2"), doctest::Contains("not a zoo cluster"),
                       InputError);
  std::filesystem::create_directories(dir + "/clusters");
  std::filesystem::copy_file(ResolveClusterPath("p3.16xlarge"), path);
  CHECK(ResolveClusterPath("my-box_2") == path);
  const std::vector<std::string> names = ZooClusters();
  CHECK(std::find(names.begin(), names.end(), "my-box_2") != names.end());
  CHECK(std::find(names.begin(), names.end(), "dgx-a100-80gb") != names.end());
  // A zoo name wins over a user cluster of the same name.
  std::filesystem::copy_file(path, dir + "/clusters/dgx-a100-80gb.toml");
  CHECK(ResolveClusterPath("dgx-a100-80gb") != dir + "/clusters/dgx-a100-80gb.toml");
  for (const char* bad : {"", "../x", "a/b", ".hidden"})
    CHECK_THROWS_WITH_AS(UserClusterPath(bad), doctest::Contains("must be a file stem"),
                         InputError);
  setenv("STRATOS_USER_ZOO", saved.c_str(), 1);
}

TEST_CASE("a [[device]] from_cluster takes another cluster file's device whole, calibrated "
          "curves and framework memory included") {
  const DeviceSpec a100 = ReadClusterFile(ResolveClusterPath("dgx-a100-80gb")).Device();
  REQUIRE(a100.matmul_curve);
  REQUIRE(a100.layer_curve);
  const std::string group = "[[node_group]]\ncount = 1\ngpus_per_node = 8\ndevice = \"" +
                            a100.name + "\"\n";
  const ClusterSpec cluster =
      ParseClusterToml(Cluster("[[device]]\nfrom_cluster = \"dgx-a100-80gb\"\n", group), "c.toml");
  const DeviceSpec& d = cluster.Device();
  CHECK(d.name == a100.name);
  CHECK(d.peak_flops == a100.peak_flops);
  CHECK(d.memory_bytes == a100.memory_bytes);
  CHECK(d.hbm_bytes_per_second == a100.hbm_bytes_per_second);
  CHECK(d.matmul_efficiency == a100.matmul_efficiency);
  CHECK(d.reserved_memory_bytes == a100.reserved_memory_bytes);
  CHECK(d.memory_fragmentation == a100.memory_fragmentation);
  REQUIRE(d.matmul_curve);
  CHECK(d.matmul_curve->half_efficiency_dim == a100.matmul_curve->half_efficiency_dim);
  CHECK(d.matmul_curve->max_efficiency == a100.matmul_curve->max_efficiency);
  REQUIRE(d.layer_curve);
  CHECK(d.layer_curve->forward_floor_seconds == a100.layer_curve->forward_floor_seconds);
  CHECK(d.layer_curve->power == a100.layer_curve->power);
  CHECK(d.source.find("the device of cluster dgx-a100-80gb (") == 0);
  CHECK(d.source.find(a100.source) != std::string::npos);
  // device = picks one by name; the zoo's mixed clusters take their calibrated devices so.
  const ClusterSpec named = ParseClusterToml(
      Cluster("[[device]]\nfrom_cluster = \"dgx-a100-80gb\"\ndevice = \"" + a100.name + "\"\n",
              group),
      "c.toml");
  CHECK(named.Device().matmul_efficiency == a100.matmul_efficiency);
  const ClusterSpec mixed = ReadClusterFile(ResolveClusterPath("dgx-h100-a100"));
  CHECK(mixed.devices.at(1).layer_curve.has_value());
  CHECK(mixed.devices.at(0).matmul_efficiency ==
        ReadClusterFile(ResolveClusterPath("dgx-h100")).Device().matmul_efficiency);

  // Other keys beside it, an unknown cluster, a device it does not have, several devices with
  // none named, a cycle.
  CheckClusterError(Cluster("[[device]]\nfrom_cluster = \"dgx-a100-80gb\"\nhbm_GBps = 1\n", group),
                    {"c.toml", "hbm_GBps", "from_cluster"});
  CheckClusterError(Cluster("[[device]]\nfrom_cluster = \"dgx-b200\"\n", group),
                    {"c.toml: device[0].from_cluster = \"dgx-b200\": not a file and not a zoo "
                     "cluster (zoo: ",
                     "dgx-a100-80gb"});
  CheckClusterError(
      Cluster("[[device]]\nfrom_cluster = \"dgx-a100-80gb\"\ndevice = \"V100\"\n", group),
      {"c.toml: device[0].device = \"V100\": names no device of ", "A100-SXM4-80GB"});
  CheckClusterError(Cluster("[[device]]\nfrom_cluster = \"dgx-h100-a100-datasheet\"\n", group),
                    {"device[0].from_cluster", "has 2 devices: name one with device =",
                     "\"H100-SXM5-80GB\", \"A100-SXM4-80GB\""});
  // A relative path is taken beside the file that names it, whatever the working directory.
  const std::string dir = testing::ScratchDir("from_cluster");
  const std::string v100_group =
      "[[node_group]]\ncount = 1\ngpus_per_node = 8\ndevice = \"V100-SXM2-16GB\"\n";
  std::filesystem::copy_file(ResolveClusterPath("p3.16xlarge"), dir + "/base.toml");
  {
    std::ofstream out(dir + "/mixed.toml");
    out << Cluster("[[device]]\nfrom_cluster = \"base.toml\"\n", v100_group);
  }
  CHECK(ReadClusterFile(dir + "/mixed.toml").Device().source.find("the device of cluster "
                                                                  "p3.16xlarge (" + dir) == 0);
  const std::string loop = dir + "/loop.toml";
  {
    std::ofstream out(loop);
    out << Cluster("[[device]]\nfrom_cluster = \"" + loop + "\"\n", group);
  }
  const std::string message = InputErrorMessage([&] { ReadClusterFile(loop); });
  CHECK(message.find("which is being read (a cycle)") != std::string::npos);
  // A failed read leaves no file behind as "being read": once the referenced file is mended, the
  // file that names it reads.
  std::filesystem::copy_file(ResolveClusterPath("p3.16xlarge"), dir + "/mended.toml");
  {
    std::ofstream out(dir + "/mended.toml", std::ios::app);
    out << "[unknown_table]\n";
  }
  {
    std::ofstream out(dir + "/uses_mended.toml");
    out << Cluster("[[device]]\nfrom_cluster = \"mended.toml\"\n", v100_group);
  }
  CHECK(InputErrorMessage([&] { ReadClusterFile(dir + "/uses_mended.toml"); })
            .find("unknown_table") != std::string::npos);
  std::filesystem::remove(dir + "/mended.toml");
  std::filesystem::copy_file(ResolveClusterPath("p3.16xlarge"), dir + "/mended.toml");
  CHECK(ReadClusterFile(dir + "/uses_mended.toml").Device().name == "V100-SXM2-16GB");
}

TEST_CASE("an unknown zoo cluster name is an InputError listing the zoo") {
  const std::string message = InputErrorMessage([] { ResolveClusterPath("dgx-b200"); });
  CHECK(message.find("--cluster = dgx-b200: not a file and not a zoo cluster (zoo: ") == 0);
  CHECK(message.find("dgx-a100-80gb") != std::string::npos);
}

}  // namespace
}  // namespace stratos
