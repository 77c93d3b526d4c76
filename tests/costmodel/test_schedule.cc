// Pipeline schedules: per-stage pass orders (GPipe, 1F1B) and the interleaved 1F1B order per
// pipeline rank, checked against the torch.distributed.pipelining example in ../shared/formats.
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"
#include "costmodel/schedule.h"

namespace stratos {
namespace {

std::string ActionsString(const std::vector<StageAction>& actions) {
  std::string text;
  for (const StageAction& a : actions)
    text += (text.empty() ? "" : ",") + std::to_string(a.stage) +
            (a.op.kind == PipelineOp::kForward ? "F" : "B") + std::to_string(a.op.microbatch);
  return text;
}

TEST_CASE("1F1B warms up p - s - 1 forwards and GPipe runs all forwards first") {
  CHECK(ScheduleString(StageSchedule(Schedule::kOneFOneB, 4, 0, 4)) == "F0 F1 F2 F3 B0 B1 B2 B3");
  CHECK(ScheduleString(StageSchedule(Schedule::kOneFOneB, 4, 1, 4)) == "F0 F1 F2 B0 F3 B1 B2 B3");
  CHECK(ScheduleString(StageSchedule(Schedule::kOneFOneB, 4, 3, 4)) == "F0 B0 F1 B1 F2 B2 F3 B3");
  CHECK(ScheduleString(StageSchedule(Schedule::kOneFOneB, 4, 0, 2)) == "F0 F1 B0 B1");
  CHECK(ScheduleString(StageSchedule(Schedule::kGpipe, 2, 1, 3)) == "F0 F1 F2 B0 B1 B2");
  CHECK_THROWS_AS(StageSchedule(Schedule::kGpipe, 2, 2, 3), InputError);
  CHECK_THROWS_AS(StageSchedule(Schedule::kGpipe, 2, 0, 0), InputError);
}

TEST_CASE("interleaved 1F1B reproduces torch's Interleaved1F1B order (pp 4, v 2, m 8)") {
  const std::string path =
      SharedDataPath("../formats/torch_pp_schedule_interleaved1f1b_pp4_v2_m8.csv");
  std::ifstream in(path);
  REQUIRE_MESSAGE(in.good(), path);
  std::string row;
  for (int rank = 0; rank < 4; ++rank) {
    REQUIRE(std::getline(in, row));
    CHECK(ActionsString(RankSchedule(Schedule::kOneFOneB, 4, 2, rank, 8)) == row);
  }
}

TEST_CASE("every rank runs each of its chunks' passes once, forwards before backwards") {
  for (int v : {1, 2, 3})
    for (int rank = 0; rank < 4; ++rank) {
      const std::vector<StageAction> actions = RankSchedule(Schedule::kOneFOneB, 4, v, rank, 8);
      CHECK(actions.size() == static_cast<size_t>(2 * 8 * v));
      for (const StageAction& a : actions) {
        CHECK(a.stage % 4 == rank);
        if (a.op.kind == PipelineOp::kBackward) {
          int forward_at = -1, backward_at = -1;
          for (size_t i = 0; i < actions.size(); ++i) {
            if (actions[i] == StageAction{a.stage, {PipelineOp::kForward, a.op.microbatch}})
              forward_at = static_cast<int>(i);
            if (actions[i] == a) backward_at = static_cast<int>(i);
          }
          CHECK(forward_at >= 0);
          CHECK(forward_at < backward_at);
        }
      }
    }
  CHECK_THROWS_AS(RankSchedule(Schedule::kGpipe, 4, 2, 0, 8), InputError);
  CHECK_THROWS_AS(RankSchedule(Schedule::kOneFOneB, 4, 2, 0, 6), InputError);
}

}  // namespace
}  // namespace stratos
