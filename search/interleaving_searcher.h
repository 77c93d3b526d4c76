#pragma once
// Every searcher's plans in the interleaved 1F1B schedule (Narayanan et al. SC'21 §2.2.2): a
// searcher that searches plain pipelines (one chunk per rank) is wrapped so that, when
// options.space.virtual_stages offers v > 1, its best plan is also priced with each such v
// (InterleavePlan: each rank keeps its layers, split into v chunks) and the fastest plan that
// fits memory is returned. The grid (every uniform plan) and the exhaustive search (every plan)
// enumerate the counts themselves, and the DP and the ILP search them where they price them
// exactly (dp_searcher.h, ilp_searcher.h, which wrap themselves elsewhere): none of the four is
// wrapped. Relax, local and MCMC are, and search v themselves where it is priced exactly: a plan
// the wrapped searcher returns interleaved is returned as it is, its summary untouched. A lower
// bound the wrapped searcher proves for a plain plan covers plain pipelines only, so with v > 1
// in the space that result carries none and is not called optimal.
#include <memory>

#include "search/searcher.h"

namespace stratos {

class InterleavingSearcher : public Searcher {
 public:
  explicit InterleavingSearcher(std::unique_ptr<Searcher> inner) : inner_(std::move(inner)) {}
  std::string Name() const override { return inner_->Name(); }
  // The inner searcher's result; with space.virtual_stages > 1 its plan replaced by the fastest
  // interleaved form that fits (each tried form counts as an evaluation) and its proof dropped.
  SearchResult Search(const Problem& problem, const SearchOptions& options) override;

 private:
  std::unique_ptr<Searcher> inner_;
};

// The fastest plan that fits memory among `plan` and InterleavePlan(plan, v) for each v > 1 of
// `virtual_stages`, with its estimate; counts the forms priced in *evaluations. `plan` itself
// when no interleaved form is faster (or none can be formed: a problem whose training already
// interleaves, a stage with fewer than v layers).
std::pair<Plan, Estimate> FastestInterleaving(const CostModel& cost_model, const Plan& plan,
                                              const Estimate& estimate,
                                              const std::vector<int>& virtual_stages,
                                              long* evaluations);

}  // namespace stratos
