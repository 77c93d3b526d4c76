#include "cosearch/init_search.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <sstream>

#include "costmodel/atomic_file.h"
#include "costmodel/error.h"
#include "runtime/communicator.h"
#include "runtime/data.h"
#include "runtime/runtime_plan.h"

namespace stratos {

using torch::Tensor;

std::string InitCandidate::Label() const {
  return fmt::format("{}/seed {}", InitSchemeName(scheme), seed);
}

std::vector<InitCandidate> MakeInitCandidates(int k, const std::vector<InitScheme>& schemes,
                                              uint64_t seed) {
  if (k < 1) ThrowOptionError("init-search.candidates", k, "must be >= 1");
  if (schemes.empty()) ThrowOptionError("init-search.schemes", "\"\"", "must name a scheme");
  std::vector<InitCandidate> candidates(k);
  for (int i = 0; i < k; ++i) {
    candidates[i].scheme = schemes[i % schemes.size()];
    // SplitMix64 of (seed, i): distinct, well-spread seeds per candidate.
    uint64_t z = seed * 0x9E3779B97F4A7C15ull + static_cast<uint64_t>(i + 1) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    candidates[i].seed = (z ^ (z >> 31)) % 1000000007ull;
  }
  return candidates;
}

void InitSearchOptions::Validate() const {
  if (batch_size < 1) ThrowOptionError("init-search.batch_size", batch_size, "must be >= 1");
  if (!(learning_rate > 0))
    ThrowOptionError("init-search.learning_rate", learning_rate, "must be > 0");
  if (validation_windows < 1)
    ThrowOptionError("init-search.validation_windows", validation_windows, "must be >= 1");
  if (candidates.empty()) ThrowOptionError("init-search.candidates", 0, "must be >= 1");
  if (checkpoint_every < 0)
    ThrowOptionError("init-search.checkpoint_every", checkpoint_every, "must be >= 0");
  if (resume && checkpoint_dir.empty())
    ThrowOptionError("init-search.resume", "true", "needs a checkpoint directory");
  halving.Validate();
}

namespace {

// What a checkpoint must agree on to be resumed by this search.
nlohmann::json Fingerprint(const InitSearchOptions& o) {
  nlohmann::json candidates = nlohmann::json::array();
  for (const InitCandidate& c : o.candidates)
    candidates.push_back({{"scheme", InitSchemeName(c.scheme)}, {"seed", c.seed}});
  return {{"model", o.model},
          {"data_path", o.data_path},
          {"batch_size", o.batch_size},
          {"learning_rate", o.learning_rate},
          {"data_seed", o.data_seed},
          {"validation_windows", o.validation_windows},
          {"candidates", candidates},
          {"halving",
           {{"eta", o.halving.eta},
            {"evaluation_steps", o.halving.evaluation_steps},
            {"plateau_window", o.halving.plateau_window},
            {"plateau_drop", o.halving.plateau_drop},
            {"max_first_rung_steps", o.halving.max_first_rung_steps},
            {"step_budget", o.halving.step_budget}}}};
}

// One candidate's model and optimizer, built when it first trains (or is restored) and freed
// once it is stopped.
struct Run {
  std::unique_ptr<GptStage> stage;
  std::unique_ptr<torch::optim::Adam> adam;
  int evaluations = 0;  // advance() calls so far (replayed ones included)
};

class Search {
 public:
  explicit Search(const InitSearchOptions& options)
      : options_(options),
        model_(LoadRuntimeModel(options.model, 0)),
        data_(options.data_path.empty() ? DefaultDataPath() : options.data_path,
              model_.seq_length),
        self_(MakeSelfCommunicator("init-search")),
        validation_(data_.ValidationBatch(options.validation_windows)),
        runs_(options.candidates.size()),
        recorded_(options.candidates.size()) {
    if (data_.VocabSize() > model_.vocab_size)
      ThrowInputError("init-search", "model", options.model,
                      fmt::format("vocabulary {} is smaller than the data's {} characters",
                                  model_.vocab_size, data_.VocabSize()));
    if (!options.checkpoint_dir.empty())
      path_ = options.checkpoint_dir + "/init_search.pt";
  }

  InitSearchResult Go(const HalvingRoundCallback& after_round) {
    InitSearchResult result;
    if (options_.resume && std::filesystem::exists(path_)) result.resumed_from_step = Restore();
    saved_step_ = result.resumed_from_step;
    result.halving = SuccessiveHalving(
        static_cast<int>(runs_.size()), options_.halving,
        [&](int run, int steps) { return Advance(run, steps); },
        [&](int step, const std::vector<int>& live, const HalvingResult& so_far) {
          for (size_t r = 0; r < runs_.size(); ++r)
            if (!std::binary_search(live.begin(), live.end(), static_cast<int>(r))) {
              runs_[r].adam.reset();
              runs_[r].stage.reset();
            }
          const int rounds = step / options_.halving.evaluation_steps;
          if (options_.checkpoint_every > 0 && rounds % options_.checkpoint_every == 0)
            Save(step, live, so_far.curves);
          if (after_round) after_round(step, live, so_far);
        });
    const int survivor = result.halving.survivor;
    const int end = result.halving.stopped_at_step[survivor];
    Save(end, {survivor}, result.halving.curves);
    Build(survivor);
    result.survivor_parameters = runs_[survivor].stage->FlatParameters().detach().clone();
    return result;
  }

 private:
  void Build(int run) {
    Run& r = runs_[run];
    if (r.stage) return;
    const InitCandidate& c = options_.candidates[run];
    r.stage = std::make_unique<GptStage>(model_, 0, model_.NumLayers(), Recompute::kNone,
                                         self_.get(), c.seed, torch::Device(torch::kCPU),
                                         /*bf16=*/false, /*fp32_residual=*/false, c.scheme);
    r.adam = std::make_unique<torch::optim::Adam>(
        r.stage->Parameters(), torch::optim::AdamOptions(options_.learning_rate)
                                   .betas({0.9, 0.95})
                                   .eps(1e-8)
                                   .weight_decay(0));
  }

  double Advance(int run, int steps) {
    Run& r = runs_[run];
    const size_t k = static_cast<size_t>(r.evaluations++);
    if (k < recorded_[run].size()) return recorded_[run][k];  // replay up to the checkpoint
    Build(run);
    const int64_t first = static_cast<int64_t>(k) * options_.halving.evaluation_steps;
    for (int i = 0; i < steps; ++i) {
      const CharDataset::Batch batch = data_.TrainBatch(options_.data_seed, first + i,
                                                        options_.batch_size, 0,
                                                        options_.batch_size);
      r.adam->zero_grad();
      r.stage->Forward(batch.inputs, batch.targets).backward();
      r.adam->step();
    }
    torch::NoGradGuard no_grad;
    return r.stage->Forward(validation_.inputs, validation_.targets).item<double>();
  }

  // Writes the checkpoint of `step` unless there is no checkpoint directory or it has one of
  // this step or later (the one resumed from, or the last round's).
  void Save(int step, const std::vector<int>& live,
            const std::vector<std::vector<double>>& curves) {
    if (path_.empty() || step <= saved_step_) return;
    saved_step_ = step;
    std::filesystem::create_directories(options_.checkpoint_dir);
    torch::serialize::OutputArchive archive;
    const nlohmann::json state = {{"schema", "stratos.init_search_checkpoint/1"},
                                  {"search", Fingerprint(options_)},
                                  {"step", step},
                                  {"live", live},
                                  {"curves", curves}};
    archive.write("state", c10::IValue(state.dump()));
    for (int run : live) {
      const Run& r = runs_[run];
      archive.write(fmt::format("run.{}.parameters", run), r.stage->FlatParameters().detach());
      torch::serialize::OutputArchive adam;
      r.adam->save(adam);
      archive.write(fmt::format("run.{}.adam", run), adam);
    }
    std::ostringstream bytes;
    archive.save_to(bytes);
    WriteFileAtomically(path_, bytes.str());
  }

  // Reads the checkpoint: the recorded curves, and the live runs' models and optimizers.
  // Returns its step.
  int Restore() {
    torch::serialize::InputArchive archive;
    nlohmann::json state;
    try {
      archive.load_from(path_);
      c10::IValue text;
      archive.read("state", text);
      state = nlohmann::json::parse(text.toStringRef());
    } catch (const std::exception& e) {
      const std::string what = e.what();
      throw InputError(fmt::format("{}: not a readable init-search checkpoint ({})", path_,
                                   what.substr(0, what.find('\n'))));
    }
    const nlohmann::json expected = Fingerprint(options_);
    for (const auto& [key, value] : expected.items())
      if (state["search"].value(key, nlohmann::json()) != value)
        ThrowInputError(path_, "search." + key, state["search"].value(key, nlohmann::json()).dump(),
                        fmt::format("the checkpoint belongs to another search (this one has {})",
                                    value.dump()));
    recorded_ = state["curves"].get<std::vector<std::vector<double>>>();
    for (int run : state["live"].get<std::vector<int>>()) {
      Build(run);
      Tensor parameters;
      archive.read(fmt::format("run.{}.parameters", run), parameters);
      torch::NoGradGuard no_grad;
      runs_[run].stage->FlatParameters().copy_(parameters);
      torch::serialize::InputArchive adam;
      archive.read(fmt::format("run.{}.adam", run), adam);
      runs_[run].adam->load(adam);
    }
    return state["step"].get<int>();
  }

  const InitSearchOptions& options_;
  ModelSpec model_;
  CharDataset data_;
  std::unique_ptr<Communicator> self_;
  CharDataset::Batch validation_;
  std::vector<Run> runs_;
  std::vector<std::vector<double>> recorded_;  // per run: the checkpoint's losses (replayed)
  std::string path_;
  int saved_step_ = 0;
};

}  // namespace

InitSearchResult RunInitSearch(const InitSearchOptions& options,
                               const HalvingRoundCallback& after_round) {
  options.Validate();
  Search search(options);
  return search.Go(after_round);
}

}  // namespace stratos
