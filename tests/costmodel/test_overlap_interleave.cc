// The cost-model options that model Megatron-Core: TP and PP communication overlap and the
// interleaved 1F1B schedule. Their defaults must leave every number unchanged.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "costmodel/cost_model.h"
#include "costmodel/error.h"
#include "costmodel/evaluate.h"
#include "costmodel/interleaved_cost_model.h"

using namespace stratos;

namespace {

// A GPT of `layers` blocks on `nodes` nodes of 8 ideal GPUs; two network levels.
Problem OptionsProblem(int layers, int nodes) {
  Problem problem;
  ModelSpec& m = problem.model;
  m.name = "options-gpt";
  m.family = "gpt";
  m.source = "test";
  m.hidden_size = 1024;
  m.num_layers = layers;
  m.num_attention_heads = 16;
  m.vocab_size = 32000;
  m.seq_length = 1024;
  BuildTransformerLayers(m);
  problem.cluster.name = "test";
  problem.cluster.devices.push_back({"gpu", 100e12, 1e15, 1e12, 0.8, 0.0, "test"});
  problem.cluster.node_groups.push_back({nodes, 8, "gpu"});
  problem.cluster.networks = {{"nvlink", 100e9, 5e-6, 1.0, "test"},
                              {"ib", 25e9, 10e-6, 1.0, "test"}};
  problem.training.global_batch_size = 32;
  return problem;
}

// p uniform stages of blocks (embedding and head folded into the first and last), each a full
// node with dp x tp.
Plan UniformPlan(const Problem& problem, int p, int dp, int tp, int m) {
  Plan plan;
  plan.global_batch_size = problem.training.global_batch_size;
  plan.num_microbatches = m;
  const int L = problem.model.num_layers;
  for (int s = 0; s < p; ++s) {
    const int first = s == 0 ? 0 : 1 + s * (L / p);
    const int last = s == p - 1 ? L + 2 : 1 + (s + 1) * (L / p);
    plan.stages.push_back({first, last, StageConfig{1, 8, dp, tp, 1, Recompute::kNone}});
  }
  return plan;
}

}  // namespace

TEST_CASE("default options (no overlap, v = 1) reproduce the plain formulas exactly") {
  const Problem problem = OptionsProblem(8, 4);
  const CostModel cost_model(problem);
  const StageConfig config{1, 8, 2, 4, 1, Recompute::kNone};
  const int m = 4;
  const StageTerms block = cost_model.LayerTerms(1, config, m);
  const double b = cost_model.ReplicaMicrobatchSize(config, m);
  const double message = b * problem.model.layers[1].output_bytes;
  // 2 all-reduces forward + 2 backward, none hidden.
  CHECK(block.tp_comm_seconds == 4 * cost_model.AllReduceSeconds(message, 1, 4, 2));
  // A middle stage sends forward and backward once per microbatch, none hidden.
  const StageTerms middle = cost_model.StageOverhead(config, m, false, false);
  const StageTerms first = cost_model.StageOverhead(config, m, true, false);
  CHECK(middle.p2p_seconds == doctest::Approx(2 * first.p2p_seconds).epsilon(1e-15));
  CHECK(cost_model.StageOverhead(config, m, true, true).p2p_seconds == 0.0);

  const Plan plan = UniformPlan(problem, 4, 2, 4, m);
  const Estimate e = Evaluate(problem, plan);
  std::vector<double> t, tail, c;
  double sum = 0, max = 0, max_tail = 0;
  for (const StageEstimate& s : e.stages) {
    t.push_back(s.microbatch_seconds);
    tail.push_back(s.tail_seconds);
    c.push_back(s.one_time_seconds);
    sum += s.microbatch_seconds;
    max = std::max(max, s.microbatch_seconds);
    max_tail = std::max(max_tail, s.tail_seconds);
  }
  CHECK(e.iteration_seconds == PipelineObjective(t, tail, c, m));
  CHECK(e.iteration_seconds == sum + (m - 1) * max + max_tail);
  CHECK(e.fill_seconds == sum);
}

TEST_CASE("tp_comm_overlap_fraction hides that share of the TP collectives and nothing else") {
  Problem problem = OptionsProblem(4, 1);
  const StageConfig config{1, 8, 1, 8, 0, Recompute::kFull};
  const StageTerms plain = CostModel(problem).LayerTerms(1, config, 32);
  REQUIRE(plain.tp_comm_seconds > 0);
  problem.training.tp_comm_overlap_fraction = 0.75;
  const StageTerms hidden = CostModel(problem).LayerTerms(1, config, 32);
  CHECK(hidden.tp_comm_seconds == doctest::Approx(0.25 * plain.tp_comm_seconds).epsilon(1e-14));
  CHECK(hidden.compute_seconds == plain.compute_seconds);
  CHECK(hidden.dp_sync_seconds == plain.dp_sync_seconds);
  // The forward share shrinks by the forward part of the hidden communication.
  const double forward_tp = plain.tp_comm_seconds / 3;  // full recompute: 3 passes
  CHECK(hidden.forward_seconds ==
        doctest::Approx(plain.forward_seconds - 0.75 * forward_tp).epsilon(1e-12));
  problem.training.tp_comm_overlap_fraction = 1.0;
  CHECK(CostModel(problem).LayerTerms(1, config, 32).tp_comm_seconds == 0.0);
}

TEST_CASE("pp_comm_overlap_fraction hides that share of the pipeline sends") {
  Problem problem = OptionsProblem(4, 2);
  const StageConfig config{1, 8, 8, 1, 0, Recompute::kNone};
  const double plain = CostModel(problem).StageOverhead(config, 4, false, false).p2p_seconds;
  REQUIRE(plain > 0);
  problem.training.pp_comm_overlap_fraction = 0.4;
  CHECK(CostModel(problem).StageOverhead(config, 4, false, false).p2p_seconds ==
        doctest::Approx(0.6 * plain).epsilon(1e-14));
}

TEST_CASE("without scatter/gather every TP rank sends the whole boundary activation") {
  Problem problem = OptionsProblem(4, 2);
  const StageConfig config{1, 8, 2, 4, 0, Recompute::kNone};  // TP 4, whole nodes
  const double latency = problem.cluster.InterNode().latency_seconds;
  const double split = CostModel(problem).StageOverhead(config, 4, false, false).p2p_seconds;
  problem.training.pp_scatter_gather = false;
  const double whole = CostModel(problem).StageOverhead(config, 4, false, false).p2p_seconds;
  // A middle stage sends forward and backward: 2 x (bytes x time per byte + latency).
  CHECK(whole - 2 * latency == doctest::Approx(4 * (split - 2 * latency)).epsilon(1e-12));
}

TEST_CASE("scatter/gather without sequence parallelism all-gathers each receive over TP") {
  Problem problem = OptionsProblem(4, 2);
  problem.training.sequence_parallel = false;
  const StageConfig config{1, 8, 2, 4, 0, Recompute::kNone};  // 32 / (m 4 x dp 2) = 4 samples
  double boundary_bytes = 0;
  for (const LayerSpec& layer : problem.model.layers)
    boundary_bytes = std::max(boundary_bytes, layer.output_bytes);
  const CostModel model(problem);
  // The TP group: 4 GPUs of one node, 2 such groups in the mesh's node.
  const double gather = model.AllGatherSeconds(4 * boundary_bytes, 1, 4, 2);
  REQUIRE(gather > 0);
  const StageTerms middle = model.StageOverhead(config, 4, false, false);
  CHECK(middle.tp_comm_seconds == doctest::Approx(2 * gather).epsilon(1e-14));
  // The first stage receives gradients only, in the backward pass.
  const StageTerms first = model.StageOverhead(config, 4, true, false);
  CHECK(first.tp_comm_seconds == doctest::Approx(gather).epsilon(1e-14));
  CHECK(first.forward_seconds == doctest::Approx(middle.forward_seconds - gather).epsilon(1e-12));
  CHECK(model.StageOverhead(config, 4, true, true).tp_comm_seconds == 0.0);
  // None with sequence parallelism, without scatter/gather, or without TP.
  problem.training.sequence_parallel = true;
  CHECK(CostModel(problem).StageOverhead(config, 4, false, false).tp_comm_seconds == 0.0);
  problem.training.sequence_parallel = false;
  problem.training.pp_scatter_gather = false;
  CHECK(CostModel(problem).StageOverhead(config, 4, false, false).tp_comm_seconds == 0.0);
  problem.training.pp_scatter_gather = true;
  const StageConfig no_tp{1, 8, 8, 1, 0, Recompute::kNone};
  CHECK(CostModel(problem).StageOverhead(no_tp, 4, false, false).tp_comm_seconds == 0.0);
}

TEST_CASE("interleaving with v virtual stages sends v times per microbatch and direction") {
  Problem problem = OptionsProblem(8, 4);
  const StageConfig config{1, 8, 8, 1, 0, Recompute::kNone};
  const CostModel plain_model(problem);
  const double one = plain_model.StageOverhead(config, 4, true, false).p2p_seconds;  // 1 send
  problem.training.virtual_pipeline_stages = 3;
  const CostModel model(problem);
  CHECK(model.StageOverhead(config, 4, false, false).p2p_seconds == doctest::Approx(6 * one));
  CHECK(model.StageOverhead(config, 4, true, false).p2p_seconds == doctest::Approx(5 * one));
  CHECK(model.StageOverhead(config, 4, false, true).p2p_seconds == doctest::Approx(5 * one));
  CHECK(model.StageOverhead(config, 4, true, true).p2p_seconds == 0.0);
  CHECK(model.StageOverhead(config, 4, false, true).forward_seconds == doctest::Approx(2 * one));
}

TEST_CASE("interleaving shrinks the pipeline bubble by the number of virtual stages") {
  // Uniform stages (embedding and head of no cost in time here: sends hidden, so every stage's
  // t is its layers' compute): bubble time (p - 1) t / v (Narayanan et al. SC'21 §2.2.2).
  Problem problem = OptionsProblem(8, 4);
  problem.training.pp_comm_overlap_fraction = 1.0;
  const int p = 4, m = 8;
  const Plan plan = UniformPlan(problem, p, 4, 2, m);
  const Estimate plain = Evaluate(problem, plan);
  problem.training.virtual_pipeline_stages = 2;
  const Estimate interleaved = Evaluate(problem, plan);
  double sum = 0, max = 0;
  for (const StageEstimate& s : plain.stages) {
    sum += s.microbatch_seconds;
    max = std::max(max, s.microbatch_seconds);
  }
  // Closed forms.
  CHECK(plain.fill_seconds + plain.steady_seconds == doctest::Approx(sum + (m - 1) * max));
  CHECK(interleaved.fill_seconds + interleaved.steady_seconds ==
        doctest::Approx(sum / 2 + (m - 0.5) * max));
  CHECK(interleaved.iteration_seconds ==
        doctest::Approx(plain.iteration_seconds - (sum - max) / 2));
  // With equal stages: bubble time (p - 1) t / v.
  std::vector<double> t(p, 1.0), zero(p, 0.0);
  CHECK(PipelineObjective(t, zero, zero, m, 1) - m == doctest::Approx(p - 1));
  CHECK(PipelineObjective(t, zero, zero, m, 4) - m == doctest::Approx((p - 1) / 4.0));
  CHECK(interleaved.bubble_fraction < plain.bubble_fraction);
}

TEST_CASE("interleaving holds the activations of Megatron-Core's warm-up: rank r of p keeps "
          "min(2 (p - r - 1) + (v - 1) p + 1, m v) microbatch-chunks") {
  // p = 4, v = 2, m = 8: ranks 0..3 keep 11, 9, 7, 5 chunk forwards (5.5, 4.5, 3.5, 2.5
  // microbatches' worth); plain 1F1B keeps 4, 3, 2, 1 microbatches.
  for (int r = 0; r < 4; ++r) {
    CHECK(ChunkForwardsInFlight(Schedule::kOneFOneB, 4, r, 8, 2) == 11 - 2 * r);
    CHECK(ChunkForwardsInFlight(Schedule::kOneFOneB, 4, r, 8, 1) == 4 - r);
  }
  // Rank 0 holds Korthikanti et al. 2022 §4.2.3's (1 + (p-1)/(p v)) p microbatches' worth.
  CHECK(ChunkForwardsInFlight(Schedule::kOneFOneB, 8, 0, 64, 4) / 4.0 ==
        doctest::Approx((1 + 7.0 / (8 * 4)) * 8));
  // Never more than all m v chunk forwards; GPipe holds all m, and has no virtual stages.
  CHECK(ChunkForwardsInFlight(Schedule::kOneFOneB, 4, 0, 2, 2) == 4);
  CHECK(ChunkForwardsInFlight(Schedule::kGpipe, 4, 0, 8, 1) == 8);
  CHECK_THROWS_AS(ChunkForwardsInFlight(Schedule::kGpipe, 4, 0, 8, 2), InternalError);
  Problem problem = OptionsProblem(8, 4);
  const Plan plan = UniformPlan(problem, 4, 4, 2, 8);
  const Estimate plain = Evaluate(problem, plan);
  problem.training.virtual_pipeline_stages = 2;
  const Estimate interleaved = Evaluate(problem, plan);
  for (int r = 0; r < 4; ++r) {
    const StageEstimate& s = plain.stages[r];
    CHECK(interleaved.stages[r].microbatches_in_flight == 11 - 2 * r);
    CHECK(interleaved.stages[r].peak_memory_bytes ==
          doctest::Approx(s.peak_memory_bytes +
                          ((11 - 2 * r) / 2.0 - (4 - r)) * s.terms.activation_bytes));
  }
}

TEST_CASE("out-of-range training options are input errors naming the field") {
  Problem problem = OptionsProblem(4, 1);
  const Plan plan = UniformPlan(problem, 1, 8, 1, 4);
  problem.training.tp_comm_overlap_fraction = 1.5;
  CHECK_THROWS_WITH_AS(Evaluate(problem, plan),
                       doctest::Contains("training.tp_comm_overlap_fraction = 1.5"), InputError);
  problem.training.tp_comm_overlap_fraction = 0;
  problem.training.virtual_pipeline_stages = 0;
  CHECK_THROWS_WITH_AS(Evaluate(problem, plan),
                       doctest::Contains("training.virtual_pipeline_stages = 0: must be >= 1"),
                       InputError);
}

TEST_CASE("a plan with virtual stages is priced as the same ranks under the interleaved option") {
  // 16 blocks, p = 4 ranks, v = 2: rank r holds chunks r and r + 4 of 2 blocks each, so it holds
  // the same layers (embedding with rank 0, head with rank 3) as UniformPlan's stage r.
  Problem problem = OptionsProblem(16, 4);
  Plan interleaved;
  interleaved.global_batch_size = problem.training.global_batch_size;
  interleaved.num_microbatches = 8;
  interleaved.virtual_stages = 2;
  const StageConfig config{1, 8, 2, 4, 1, Recompute::kNone};
  for (int i = 0; i < 8; ++i) {
    const int first = i == 0 ? 0 : 1 + 2 * i;
    const int last = i == 7 ? 18 : 1 + 2 * (i + 1);
    interleaved.stages.push_back({first, last, config});
  }
  CHECK(interleaved.NumPipelineRanks() == 4);
  CHECK(interleaved.NumDevices() == 32);
  CHECK(interleaved.RankLayers(0) == "0-2,9-10");
  const Estimate chunks = Evaluate(problem, interleaved);
  CHECK(chunks.stages.size() == 4);

  Problem option = problem;
  option.training.virtual_pipeline_stages = 2;
  Plan ranks = UniformPlan(option, 4, 2, 4, 8);
  const Estimate contiguous = Evaluate(option, ranks);
  CHECK(chunks.iteration_seconds == doctest::Approx(contiguous.iteration_seconds).epsilon(1e-12));
  for (int s = 0; s < 4; ++s)
    CHECK(chunks.stages[s].peak_memory_bytes ==
          doctest::Approx(contiguous.stages[s].peak_memory_bytes).epsilon(1e-12));
  // Plain 1F1B on the same ranks has the larger bubble.
  CHECK(Evaluate(problem, UniformPlan(problem, 4, 2, 4, 8)).iteration_seconds >
        chunks.iteration_seconds);

  // Both places at once is refused, and so is a chunk with another configuration than its rank.
  CHECK_THROWS_AS(Evaluate(option, interleaved), InputError);
  Plan mixed = interleaved;
  mixed.stages[5].config.recompute = Recompute::kFull;
  CHECK_THROWS_WITH_AS(Evaluate(problem, mixed),
                       doctest::Contains("virtual stage 5 runs on pipeline rank 1"), InputError);
}

TEST_CASE("ExactVirtualStages: the offered counts above 1, sorted and once each, only where a "
          "rank of v chunks prices as its plain stage") {
  Problem problem = OptionsProblem(16, 4);
  REQUIRE(InterleavesExactly(problem));
  CHECK(ExactVirtualStages(problem, {1}) == std::vector<int>{1});
  CHECK(ExactVirtualStages(problem, {4, 2, 1, 2}) == std::vector<int>{1, 2, 4});
  CHECK(ExactVirtualStages(problem, {3}) == std::vector<int>{1, 3});
  problem.training.schedule = Schedule::kGpipe;  // no interleaved GPipe
  CHECK(ExactVirtualStages(problem, {1, 2}) == std::vector<int>{1});
  problem.training.schedule = Schedule::kOneFOneB;
  problem.model.layers[3].cost_class = 7;  // one block priced apart
  CHECK(ExactVirtualStages(problem, {1, 2}) == std::vector<int>{1});
}

TEST_CASE("InterleavedCostModel prices the problem with v virtual stages, its problem its own") {
  const Problem problem = OptionsProblem(16, 4);
  InterleavedCostModel model(problem, 3);
  CHECK(model.problem().training.virtual_pipeline_stages == 3);
  CHECK(&model.cost_model().problem() == &model.problem());
  CHECK(problem.training.virtual_pipeline_stages == 1);  // the original untouched
  // Moved, it keeps pricing its own problem (the CostModel refers to the problem's address).
  const InterleavedCostModel moved = std::move(model);
  CHECK(&moved.cost_model().problem() == &moved.problem());
  Problem option = problem;
  option.training.virtual_pipeline_stages = 3;
  const StageConfig config = UniformPlan(problem, 4, 2, 4, 8).stages[0].config;
  const double p2p = moved.cost_model().StageOverhead(config, 8, true, false).p2p_seconds;
  CHECK(p2p == CostModel(option).StageOverhead(config, 8, true, false).p2p_seconds);
  CHECK(p2p > CostModel(problem).StageOverhead(config, 8, true, false).p2p_seconds);
  CHECK_THROWS_WITH_AS(InterleavedCostModel(problem, 0),
                       doctest::Contains("virtual_pipeline_stages"), InputError);
}

TEST_CASE("InterleavePlan splits each rank's layers into v chunks in Megatron's loop placement") {
  // 16 blocks + embedding + head = 18 layers over 4 ranks of 5|4|4|5 layers, v = 2.
  Problem problem = OptionsProblem(16, 4);
  Plan plain = UniformPlan(problem, 4, 2, 4, 8);
  plain.stages[0].last_layer = 5;  // ranks of 5, 4, 4, 5 layers
  plain.stages[1].first_layer = 5;
  plain.stages[1].last_layer = 9;
  plain.stages[2].first_layer = 9;
  plain.stages[2].last_layer = 13;
  plain.stages[3].first_layer = 13;
  plain.stages[1].config.recompute = Recompute::kFull;  // each rank keeps its configuration
  const std::optional<Plan> interleaved = InterleavePlan(plain, 2);
  REQUIRE(interleaved);
  CHECK(interleaved->virtual_stages == 2);
  CHECK(interleaved->NumStages() == 8);
  CHECK(interleaved->NumPipelineRanks() == 4);
  // Chunk k * 4 + s holds rank s's k-th part: 3|2|2|3 layers first, then 2|2|2|2.
  CHECK(interleaved->RankLayers(0) == "0-2,10-11");
  CHECK(interleaved->RankLayers(1) == "3-4,12-13");
  CHECK(interleaved->RankLayers(3) == "7-9,16-17");
  CHECK(interleaved->stages[5].config == plain.stages[1].config);
  // Every rank prices its layers as before, only the schedule changes: the same figures as the
  // plain plan under the interleaved training option.
  Problem option = problem;
  option.training.virtual_pipeline_stages = 2;
  const Estimate chunks = Evaluate(problem, *interleaved);
  const Estimate ranks = Evaluate(option, plain);
  CHECK(chunks.iteration_seconds == doctest::Approx(ranks.iteration_seconds).epsilon(1e-12));
  for (int s = 0; s < 4; ++s)
    CHECK(chunks.stages[s].peak_memory_bytes ==
          doctest::Approx(ranks.stages[s].peak_memory_bytes).epsilon(1e-12));
  CHECK(chunks.iteration_seconds < Evaluate(problem, plain).iteration_seconds);
  // Not possible: v < 2, fewer than v layers on a rank, one stage, GPipe, already interleaved.
  CHECK_FALSE(InterleavePlan(plain, 1));
  CHECK_FALSE(InterleavePlan(plain, 5));
  CHECK_FALSE(InterleavePlan(UniformPlan(problem, 1, 2, 4, 8), 2));
  Plan gpipe = plain;
  gpipe.schedule = Schedule::kGpipe;
  CHECK_FALSE(InterleavePlan(gpipe, 2));
  CHECK_FALSE(InterleavePlan(*interleaved, 2));
}

TEST_CASE("DP gradient buckets: hand-computed exposed reduction, communication- and "
          "compute-bound, and a bucket holding every gradient exposes all of it") {
  CHECK(BucketedDpExposedSeconds(10.0, 4.0, 1.0) == 6.0);   // S - W
  CHECK(BucketedDpExposedSeconds(3.0, 10.0, 1.0) == 1.0);   // the last bucket
  CHECK(BucketedDpExposedSeconds(0.5, 10.0, 1.0) == 0.5);   // less than one bucket: all of S
  CHECK(BucketedDpExposedSeconds(0.0, 10.0, 1.0) == 0.0);

  // One stage of the whole model, DP 8 x TP 1 in one node, ZeRO-0: the reduction is an
  // all-reduce of every gradient.
  const StageConfig config{1, 8, 8, 1, 0, Recompute::kNone};
  const int m = 4;
  Plan plan;
  plan.global_batch_size = 32;
  plan.num_microbatches = m;
  auto tail_of = [&](const Problem& problem) {
    plan.stages = {{0, problem.model.NumLayers(), config}};
    return Evaluate(problem, plan).stages[0];
  };
  // W: the stage's backward passes of one microbatch (LayerComputeSeconds).
  auto window_of = [&](const Problem& problem) {
    const CostModel cost_model(problem);
    double window = 0;
    for (int l = 0; l < problem.model.NumLayers(); ++l) {
      const LayerCompute c = LayerComputeSeconds(
          problem.model, l, problem.cluster.Device(), problem.training,
          cost_model.ReplicaMicrobatchSize(config, m), 1, Recompute::kNone);
      window += c.backward_seconds + c.recompute_seconds;
    }
    return window;
  };

  for (const double bandwidth : {1e8, 1e14}) {
    Problem plain = OptionsProblem(8, 1);
    plain.cluster.networks[0].bandwidth_bytes_per_second = bandwidth;
    Problem bucketed = plain;
    bucketed.training.dp_bucket_bytes = 4e6;
    const StageEstimate without = tail_of(plain);
    const StageEstimate with = tail_of(bucketed);
    const double sync = without.terms.dp_sync_seconds;
    const double window = window_of(plain);
    CAPTURE(bandwidth);
    CHECK(with.terms.dp_sync_seconds == doctest::Approx(sync).epsilon(1e-12));
    CHECK(with.terms.dp_backward_window_seconds == doctest::Approx(window).epsilon(1e-12));
    CHECK(without.tail_seconds ==
          doctest::Approx(sync + without.terms.optimizer_seconds).epsilon(1e-12));
    if (bandwidth < 1e9) {
      // Communication-bound (S > W + b): the backward pass hides W of the reduction.
      REQUIRE(sync > window + with.terms.dp_last_bucket_seconds);
      CHECK(with.tail_seconds ==
            doctest::Approx(without.tail_seconds - window).epsilon(1e-12));
    } else {
      // Compute-bound: the last bucket's all-reduce alone, 4 MB over the 8 GPUs.
      const double last = CostModel(plain).AllReduceSeconds(4e6, 1, 8, 1);
      REQUIRE(sync - window < last);
      REQUIRE(last < sync);
      CHECK(with.tail_seconds ==
            doctest::Approx(without.terms.optimizer_seconds + last).epsilon(1e-12));
    }
    // A bucket larger than every gradient: reduced after the backward pass, as without buckets.
    bucketed.training.dp_bucket_bytes = 1e15;
    CHECK(tail_of(bucketed).tail_seconds == doctest::Approx(without.tail_seconds).epsilon(1e-12));
  }
}

TEST_CASE("DP gradient buckets: ZeRO-1's parameter all-gather stays after the optimizer step, "
          "(1 - dp_overlap_fraction) of it exposed; compressed gradients are not bucketed") {
  Problem problem = OptionsProblem(8, 1);
  problem.training.dp_bucket_bytes = 4e6;
  problem.training.dp_overlap_fraction = 0.25;
  const CostModel cost_model(problem);
  const StageConfig zero1{1, 8, 8, 1, 1, Recompute::kNone};
  const StageTerms layer = cost_model.LayerTerms(1, zero1, 4);
  const double params = problem.model.layers[1].stored_param_count;
  const double gather = cost_model.AllGatherSeconds(params * 2, 1, 8, 1) -
                        cost_model.AllGatherSeconds(0, 1, 8, 1);  // bandwidth part
  CHECK(layer.dp_bucketed_sync_seconds > 0);
  CHECK(layer.dp_sync_exposed_seconds == doctest::Approx(0.75 * gather).epsilon(1e-9));
  CHECK(layer.dp_sync_seconds ==
        doctest::Approx(layer.dp_bucketed_sync_seconds + gather).epsilon(1e-9));

  StageConfig compressed = zero1;
  compressed.grad_compression.kind = GradCompression::kBf16;
  const StageTerms plain = cost_model.LayerTerms(1, compressed, 4);
  CHECK(plain.dp_bucketed_sync_seconds == 0);
  CHECK(plain.dp_backward_window_seconds == 0);
  CHECK(cost_model.StageOverhead(compressed, 4, true, true).dp_last_bucket_seconds == 0);
  CHECK(cost_model.StageOverhead(zero1, 4, true, true).dp_last_bucket_seconds > 0);
}

TEST_CASE("ValidateTrainingSpec names dp_bucket_bytes below 0") {
  TrainingSpec training;
  training.dp_bucket_bytes = -1;
  CHECK_THROWS_WITH_AS(ValidateTrainingSpec(training, "test.toml"),
                       doctest::Contains("training.dp_bucket_bytes"), InputError);
}
