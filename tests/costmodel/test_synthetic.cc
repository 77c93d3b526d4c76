#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>

#include "costmodel/error.h"
#include "costmodel/synthetic.h"

using namespace stratos;

TEST_CASE("the seed cases file has 13 rows whose optimal splits cover their layers") {
  const std::vector<SeedCaseRow> rows = ReadSeedPartitionCases();
  REQUIRE(rows.size() == 13);
  for (const SeedCaseRow& row : rows) {
    int layers = 0;
    for (int size : row.optimal_split) layers += size;
    CHECK(layers == row.num_layers);
    CHECK(static_cast<int>(row.optimal_split.size()) == row.num_stages);
  }
}

TEST_CASE("a malformed seed cases row names the file and the line") {
  const std::string path = "seed_cases_malformed_test.csv";
  {
    std::ofstream out(path);
    out << "num_layers,num_stages,num_microbatches,layer_cost,cut_cost,optimal_cost,"
           "one_optimal_split\n12,4,3,1,2,12,3 3 3 3\n12,four,3,1,2,12,3 3 3 3\n";
  }
  std::string message;
  try {
    ReadSeedPartitionCases(path);
  } catch (const InputError& e) {
    message = e.what();
  }
  std::remove(path.c_str());
  CHECK(message.find(path + ":3:") != std::string::npos);
  CHECK(message.find("malformed row") != std::string::npos);
  CHECK_THROWS_AS(ReadSeedPartitionCases("no/such/file.csv"), InputError);
}
