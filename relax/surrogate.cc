#include "relax/surrogate.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "costmodel/error.h"

namespace stratos {

namespace {

using torch::indexing::Slice;

// Fused Poisson-binomial recursion over layers with a hand-written backward: one pass over
// (R, L, S) instead of ~8 autograd nodes per layer.
struct StageProbabilityFunction : public torch::autograd::Function<StageProbabilityFunction> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor cut,
                               int64_t max_stages) {
    cut = cut.contiguous();
    const int64_t R = cut.size(0);
    const int64_t L = cut.size(1) + 1;
    const int64_t S = max_stages;
    torch::Tensor p = torch::zeros({R, L, S}, cut.options());
    AT_DISPATCH_FLOATING_TYPES(cut.scalar_type(), "StageProbabilities", [&] {
      const scalar_t* c = cut.data_ptr<scalar_t>();
      scalar_t* out = p.data_ptr<scalar_t>();
      for (int64_t r = 0; r < R; ++r) {
        scalar_t* pr = out + r * L * S;
        pr[0] = 1;
        for (int64_t l = 0; l + 1 < L; ++l) {
          const scalar_t cl = c[r * (L - 1) + l];
          const scalar_t* prev = pr + l * S;
          scalar_t* next = pr + (l + 1) * S;
          for (int64_t s = 0; s < S; ++s) {
            scalar_t v = (s + 1 < S) ? prev[s] * (1 - cl) : prev[s];
            if (s >= 1) v += prev[s - 1] * cl;
            next[s] = v;
          }
        }
      }
    });
    ctx->save_for_backward({cut, p});
    return p;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor cut = saved[0];
    torch::Tensor p = saved[1];
    torch::Tensor grad = grad_outputs[0].contiguous();
    const int64_t R = p.size(0), L = p.size(1), S = p.size(2);
    torch::Tensor grad_cut = torch::zeros_like(cut);
    AT_DISPATCH_FLOATING_TYPES(cut.scalar_type(), "StageProbabilitiesBackward", [&] {
      const scalar_t* c = cut.data_ptr<scalar_t>();
      const scalar_t* pp = p.data_ptr<scalar_t>();
      const scalar_t* g = grad.data_ptr<scalar_t>();
      scalar_t* gc = grad_cut.data_ptr<scalar_t>();
      std::vector<scalar_t> g_next(S), g_here(S);
      for (int64_t r = 0; r < R; ++r) {
        const scalar_t* gr = g + r * L * S;
        const scalar_t* pr = pp + r * L * S;
        for (int64_t s = 0; s < S; ++s) g_next[s] = gr[(L - 1) * S + s];
        for (int64_t l = L - 2; l >= 0; --l) {
          const scalar_t cl = c[r * (L - 1) + l];
          const scalar_t* prev = pr + l * S;
          scalar_t dc = 0;
          for (int64_t s = 0; s < S; ++s) {
            // d next[s] / d c = prev[s-1] [s >= 1] - prev[s] [s < S-1]
            scalar_t d = 0;
            if (s >= 1) d += prev[s - 1];
            if (s + 1 < S) d -= prev[s];
            dc += g_next[s] * d;
            g_here[s] = gr[l * S + s] +
                        ((s + 1 < S) ? g_next[s] * (1 - cl) + g_next[s + 1] * cl : g_next[s]);
          }
          gc[r * (L - 1) + l] = dc;
          std::swap(g_next, g_here);
        }
      }
    });
    return {grad_cut, torch::Tensor()};
  }
};


// Fused core of the surrogate, per (r, s): with the kernel table W = [time | memory] of width
// T + 2M per (config k, feature f) (time: T = 2M or 3M columns [stage seconds | tail seconds
// (| one-time seconds)]; memory: [state + working | activation of one in-flight microbatch]),
//   X[k, :] = sum_f features[f] W[k, f, :]
//   expected[j] = sum_k q[k] X[k, j]                                  (j < T)
//   overflow[m] = sum_k q[k] relu(X[k, T + m] + in_flight[m] X[k, T + M + m] - capacity).
// The backward recomputes X instead of storing (R, S, K, T + 2M) intermediates. Every inner loop
// is an axpy over contiguous rows (vectorizable); the only reductions are one dot product of
// length T per (r, s, k) and F per (r, s):
//   d q[k] = g_expected . X[k, :T] + sum_m g_overflow[m] relu(...)
//   d features[f] = g_expected . (sum_k q[k] W[k, f, :T]) + sum_k (memory part, where overflowing).
// Memory bound for skipping the exact overflow work: with features >= 0 and in-flight counts
// >= 0, every peak of config k on row rs is at most fsum[rs] (top_state[k] + max_m in[rs, m]
// top_activation[k]) (top_*: the largest memory entry of config k, clamped at 0). Where that is
// below the capacity (with a margin for rounding) no option can overflow: relu(...) = 0 exactly.
template <typename scalar_t>
struct MemoryBound {
  std::vector<scalar_t> top_state, top_activation;  // (K)
  std::vector<scalar_t> feature_sum, max_in_flight;  // (R S)
  MemoryBound(const scalar_t* table, int64_t K, int64_t F, int64_t W, int64_t T, int64_t M,
              const scalar_t* features, const scalar_t* in_flight, int64_t rows)
      : top_state(K, 0), top_activation(K, 0), feature_sum(rows, 0), max_in_flight(rows, 0) {
    for (int64_t k = 0; k < K; ++k)
      for (int64_t i = 0; i < F; ++i) {
        const scalar_t* row = table + (k * F + i) * W + T;
        for (int64_t m = 0; m < M; ++m) {
          top_state[k] = std::max(top_state[k], row[m]);
          top_activation[k] = std::max(top_activation[k], row[M + m]);
        }
      }
    for (int64_t rs = 0; rs < rows; ++rs) {
      for (int64_t i = 0; i < F; ++i) feature_sum[rs] += features[rs * F + i];
      for (int64_t m = 0; m < M; ++m)
        max_in_flight[rs] = std::max(max_in_flight[rs], in_flight[rs * M + m]);
    }
  }
  bool MayOverflow(int64_t rs, int64_t k, double capacity) const {
    const double bound = static_cast<double>(feature_sum[rs]) *
                         (static_cast<double>(top_state[k]) +
                          static_cast<double>(max_in_flight[rs]) * top_activation[k]);
    return bound * (1 + 1e-4) >= capacity;
  }
};

struct StageCostFunction : public torch::autograd::Function<StageCostFunction> {
  static torch::autograd::tensor_list forward(torch::autograd::AutogradContext* ctx,
                                              torch::Tensor features, torch::Tensor q,
                                              torch::Tensor in_flight, torch::Tensor table,
                                              int64_t time_columns, double capacity,
                                              double min_probability) {
    features = features.contiguous();
    q = q.contiguous();
    in_flight = in_flight.contiguous();
    const int64_t R = q.size(0), S = q.size(1), K = q.size(2);
    const int64_t F = features.size(2), M = in_flight.size(2), T = time_columns;
    const int64_t W = table.size(2);  // T + 2M
    torch::Tensor expected = torch::zeros({R, S, T}, features.options());
    torch::Tensor overflow = torch::zeros({R, S, M}, features.options());
    AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "StageCost", [&] {
      const scalar_t* fe = features.data_ptr<scalar_t>();
      const scalar_t* qq = q.data_ptr<scalar_t>();
      const scalar_t* infl = in_flight.data_ptr<scalar_t>();
      const scalar_t* tab = table.data_ptr<scalar_t>();
      scalar_t* ex = expected.data_ptr<scalar_t>();
      scalar_t* ov = overflow.data_ptr<scalar_t>();
      std::vector<scalar_t> xbuf(W);
      scalar_t* x = xbuf.data();
      const MemoryBound<scalar_t> bound(tab, K, F, W, T, M, fe, infl, R * S);
      // Configs outer, rows inner: one config's (F, W) block stays in L1 over all R * S rows.
      for (int64_t k = 0; k < K; ++k) {
        const scalar_t* block = tab + k * F * W;
        for (int64_t rs = 0; rs < R * S; ++rs) {
          const scalar_t qk = qq[rs * K + k];
          if (qk == 0.0 || qk < min_probability) continue;
          const scalar_t* f = fe + rs * F;
          const scalar_t* in = infl + rs * M;
          scalar_t* exr = ex + rs * T;
          scalar_t* ovr = ov + rs * M;
          const bool memory = bound.MayOverflow(rs, k, capacity);
          const int64_t columns = memory ? W : T;
          std::fill(x, x + columns, scalar_t(0));
          for (int64_t i = 0; i < F; ++i) {
            const scalar_t fi = f[i];
            if (fi == 0.0) continue;
            const scalar_t* row = block + i * W;
            for (int64_t j = 0; j < columns; ++j) x[j] += fi * row[j];
          }
          for (int64_t j = 0; j < T; ++j) exr[j] += qk * x[j];
          if (!memory) continue;
          const scalar_t* y = x + T;
          for (int64_t m = 0; m < M; ++m) {
            const scalar_t excess = y[m] + in[m] * y[M + m] - capacity;
            if (excess > 0) ovr[m] += qk * excess;
          }
        }
      }
    });
    ctx->save_for_backward({features, q, in_flight, table});
    ctx->saved_data["capacity"] = capacity;
    ctx->saved_data["time_columns"] = time_columns;
    ctx->saved_data["min_probability"] = min_probability;
    return {expected, overflow};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grad_outputs) {
    auto saved = ctx->get_saved_variables();
    torch::Tensor features = saved[0], q = saved[1], in_flight = saved[2], table = saved[3];
    const double capacity = ctx->saved_data["capacity"].toDouble();
    const int64_t T = ctx->saved_data["time_columns"].toInt();
    const double min_probability = ctx->saved_data["min_probability"].toDouble();
    const int64_t R = q.size(0), S = q.size(1), K = q.size(2);
    const int64_t F = features.size(2), M = in_flight.size(2), W = table.size(2);
    torch::Tensor g_expected = grad_outputs[0].defined()
                                   ? grad_outputs[0].contiguous()
                                   : torch::zeros({R, S, T}, q.options());
    torch::Tensor g_over = grad_outputs[1].defined() ? grad_outputs[1].contiguous()
                                                     : torch::zeros({R, S, M}, q.options());
    torch::Tensor d_features = torch::zeros_like(features);
    torch::Tensor d_q = torch::zeros_like(q);
    torch::Tensor d_in_flight = torch::zeros_like(in_flight);
    AT_DISPATCH_FLOATING_TYPES(features.scalar_type(), "StageCostBackward", [&] {
      const scalar_t* fe = features.data_ptr<scalar_t>();
      const scalar_t* qq = q.data_ptr<scalar_t>();
      const scalar_t* infl = in_flight.data_ptr<scalar_t>();
      const scalar_t* tab = table.data_ptr<scalar_t>();
      const scalar_t* ge = g_expected.data_ptr<scalar_t>();
      const scalar_t* go = g_over.data_ptr<scalar_t>();
      scalar_t* df = d_features.data_ptr<scalar_t>();
      scalar_t* dq = d_q.data_ptr<scalar_t>();
      scalar_t* di = d_in_flight.data_ptr<scalar_t>();
      // Time columns transposed per config, features padded to FP: tt[k][j][f] = W[k, f, j], so
      // that h[f] = sum_j g_expected[j] W[k, f, j] is T short axpys into FP accumulators.
      constexpr int64_t kLanes = 8;
      const int64_t FP = (F + kLanes - 1) / kLanes * kLanes;
      std::vector<scalar_t> tt(static_cast<size_t>(K) * T * FP, scalar_t(0));
      for (int64_t k = 0; k < K; ++k)
        for (int64_t i = 0; i < F; ++i)
          for (int64_t j = 0; j < T; ++j) tt[(k * T + j) * FP + i] = tab[(k * F + i) * W + j];
      std::vector<scalar_t> ybuf(2 * M), gybuf(2 * M), hbuf(FP);
      const MemoryBound<scalar_t> bound(tab, K, F, W, T, M, fe, infl, R * S);
      scalar_t* y = ybuf.data();
      scalar_t* gy = gybuf.data();
      scalar_t* h = hbuf.data();
      // Configs outer, rows inner (as in the forward). With h[f] = g_expected . W[k, f, :T]:
      //   d q[k] = sum_f features[f] h[f] (+ memory), d features[f] += q[k] h[f] (+ memory).
      for (int64_t k = 0; k < K; ++k) {
        const scalar_t* block = tab + k * F * W;
        const scalar_t* tk = tt.data() + k * T * FP;
        for (int64_t rs = 0; rs < R * S; ++rs) {
          const scalar_t qk = qq[rs * K + k];
          // Skipped in the forward: no contribution, and d q taken as 0 (its logit's gradient
          // is q times it).
          if (qk < min_probability) continue;
          const scalar_t* f = fe + rs * F;
          const scalar_t* in = infl + rs * M;
          const scalar_t* ger = ge + rs * T;
          const scalar_t* gor = go + rs * M;
          scalar_t* dfr = df + rs * F;
          if (FP == kLanes) {  // F <= 8 (up to 4 cost classes): accumulators in registers
            scalar_t acc[kLanes] = {};
            for (int64_t j = 0; j < T; ++j) {
              const scalar_t gj = ger[j];
              const scalar_t* row = tk + j * kLanes;
              for (int64_t i = 0; i < kLanes; ++i) acc[i] += gj * row[i];
            }
            for (int64_t i = 0; i < kLanes; ++i) h[i] = acc[i];
          } else {
            std::fill(h, h + FP, scalar_t(0));
            for (int64_t j = 0; j < T; ++j) {
              const scalar_t gj = ger[j];
              const scalar_t* row = tk + j * FP;
              for (int64_t i = 0; i < FP; ++i) h[i] += gj * row[i];
            }
          }
          scalar_t dqk = 0;
          for (int64_t i = 0; i < F; ++i) {
            dqk += f[i] * h[i];  // d expected / d q
            dfr[i] += qk * h[i];  // d expected / d features
          }
          // Memory: y = [state + working | activation] of this config for the row's features;
          // gy[m] = d overflow / d (state part), gy[M + m] = d / d (activation part).
          if (!bound.MayOverflow(rs, k, capacity)) {
            dq[rs * K + k] = dqk;
            continue;
          }
          std::fill(y, y + 2 * M, scalar_t(0));
          for (int64_t i = 0; i < F; ++i) {
            const scalar_t fi = f[i];
            if (fi == 0.0) continue;
            const scalar_t* mrow = block + i * W + T;
            for (int64_t j = 0; j < 2 * M; ++j) y[j] += fi * mrow[j];
          }
          bool any = false;
          for (int64_t m = 0; m < M; ++m) {
            const scalar_t excess = y[m] + in[m] * y[M + m] - capacity;
            if (excess > 0) {
              any = true;
              dqk += gor[m] * excess;
              gy[m] = qk * gor[m];
              gy[M + m] = qk * gor[m] * in[m];
              di[rs * M + m] += qk * gor[m] * y[M + m];
            } else {
              gy[m] = gy[M + m] = 0;
            }
          }
          if (any) {
            for (int64_t i = 0; i < F; ++i) {
              const scalar_t* mrow = block + i * W + T;
              scalar_t dot = 0;
              for (int64_t j = 0; j < 2 * M; ++j) dot += gy[j] * mrow[j];
              dfr[i] += dot;
            }
          }
          dq[rs * K + k] = dqk;
        }
      }
    });
    return {d_features,      d_q,
            d_in_flight,     torch::Tensor(),
            torch::Tensor(), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

SurrogateTensors MakeSurrogateTensors(const RelaxTables& tables,
                                      const std::vector<int>& config_indices,
                                      torch::Device device, torch::Dtype dtype) {
  STRATOS_CHECK(!config_indices.empty(), "the surrogate needs at least one config");
  const int L = tables.num_layers, C = tables.num_classes, M = tables.num_microbatch_options;
  const int S = tables.max_stages;
  const int K = static_cast<int>(config_indices.size());
  for (int k : config_indices)
    STRATOS_CHECK(k >= 0 && k < tables.num_configs, "config index {} of {}", k,
                  tables.num_configs);
  const int F = C + 4;
  SurrogateTensors t;
  t.config_indices = config_indices;
  t.num_features = F;
  t.memory_capacity_bytes = tables.memory_capacity_bytes;
  t.num_devices = tables.num_devices;
  t.min_stages = tables.min_stages;
  t.max_stages = S;
  t.num_layers = L;
  t.schedule = tables.schedule;

  std::vector<double> onehot(static_cast<size_t>(L) * C, 0.0);
  for (int l = 0; l < L; ++l) onehot[static_cast<size_t>(l) * C + tables.layer_class[l]] = 1.0;
  std::vector<double> first(S, 0.0);
  first[0] = 1.0;
  // Feature f's scalars under (config i, option m).
  auto scalars = [&](int f, int i, int m) -> const TermScalars& {
    const int k = config_indices[i];
    if (f < C) return tables.Layer(f, k, m);
    static constexpr bool kFirst[4] = {false, false, true, true};
    static constexpr bool kLast[4] = {true, false, true, false};
    return tables.Overhead(k, m, kFirst[f - C], kLast[f - C]);
  };
  // The one-time column block only where some entry is nonzero (explicit models' cut cost).
  t.has_one_time = false;
  for (int i = 0; i < K && !t.has_one_time; ++i)
    for (int f = 0; f < F && !t.has_one_time; ++f)
      for (int m = 0; m < M; ++m)
        if (scalars(f, i, m).one_time_seconds != 0) t.has_one_time = true;
  // The bucketed DP reduction's S, W and b blocks only where some entry is nonzero.
  t.has_bucketed_dp = false;
  for (int i = 0; i < K && !t.has_bucketed_dp; ++i)
    for (int f = 0; f < F && !t.has_bucketed_dp; ++f)
      for (int m = 0; m < M; ++m)
        if (scalars(f, i, m).HasBucketedDp()) t.has_bucketed_dp = true;
  const int bucket_block = t.has_one_time ? 3 : 2;
  const int blocks = bucket_block + (t.has_bucketed_dp ? 3 : 0);
  std::vector<double> time(static_cast<size_t>(K) * F * blocks * M);
  std::vector<double> memory(static_cast<size_t>(K) * F * 2 * M);
  for (int i = 0; i < K; ++i)
    for (int f = 0; f < F; ++f)
      for (int m = 0; m < M; ++m) {
        const TermScalars& x = scalars(f, i, m);
        const size_t time_row = (static_cast<size_t>(i) * F + f) * blocks * M;
        time[time_row + m] = x.microbatch_seconds;
        time[time_row + M + m] = x.additive_tail_seconds;
        if (t.has_one_time) time[time_row + 2 * M + m] = x.one_time_seconds;
        if (t.has_bucketed_dp) {
          time[time_row + bucket_block * M + m] = x.bucketed_sync_seconds;
          time[time_row + (bucket_block + 1) * M + m] = x.backward_window_seconds;
          time[time_row + (bucket_block + 2) * M + m] = x.last_bucket_seconds;
        }
        const size_t memory_row = (static_cast<size_t>(i) * F + f) * 2 * M;
        memory[memory_row + m] = x.state_bytes + x.working_bytes;
        memory[memory_row + M + m] = x.activation_bytes;
      }
  std::vector<double> mesh(K), mcount(M);
  for (int i = 0; i < K; ++i) mesh[i] = tables.configs[config_indices[i]].NumDevices();
  for (int m = 0; m < M; ++m) mcount[m] = tables.num_microbatches[m];

  auto make = [&](std::vector<double>& data, std::vector<int64_t> shape) {
    return torch::from_blob(data.data(), shape, torch::kFloat64).to(device, dtype, false, true);
  };
  t.class_onehot = make(onehot, {L, C});
  t.first_stage = make(first, {S});
  t.time_table = make(time, {K, F, blocks * M});
  t.memory_table = make(memory, {K, F, 2 * M});
  t.kernel_table = torch::cat({t.time_table, t.memory_table}, 2).contiguous();
  t.mesh_devices = make(mesh, {K});
  t.microbatch_counts = make(mcount, {M});
  return t;
}

torch::Tensor StageLayerProbabilitiesReference(const torch::Tensor& cut, int max_stages) {
  const int64_t R = cut.size(0), L = cut.size(1) + 1, S = max_stages;
  torch::Tensor p = torch::zeros({R, S}, cut.options());
  p.index_put_({Slice(), 0}, 1.0);
  std::vector<torch::Tensor> rows{p};
  torch::Tensor zeros_left = torch::zeros({R, S - 1}, cut.options());
  for (int64_t l = 0; l + 1 < L; ++l) {
    torch::Tensor c = cut.index({Slice(), Slice(l, l + 1)});  // (R, 1)
    torch::Tensor moved = p * c;
    torch::Tensor next = p - moved +
                         torch::constant_pad_nd(moved.index({Slice(), Slice(0, S - 1)}), {1, 0}) +
                         torch::cat({zeros_left, moved.index({Slice(), Slice(S - 1, S)})}, 1);
    rows.push_back(next);
    p = next;
  }
  return torch::stack(rows, 1);
}

torch::Tensor StageLayerProbabilities(const torch::Tensor& cut, int max_stages) {
  STRATOS_CHECK(cut.dim() == 2 && max_stages >= 1, "cut must be (R, L-1), got {} dims",
                cut.dim());
  if (cut.device().is_cpu()) return StageProbabilityFunction::apply(cut, max_stages);
  return StageLayerProbabilitiesReference(cut, max_stages);
}

SurrogateResult EvaluateSurrogate(const SurrogateTensors& t, const SurrogateProbabilities& pr,
                                  const SurrogateSettings& settings, bool use_reference_ops) {
  const int64_t R = pr.config.size(0);
  const int64_t S = t.max_stages, L = t.num_layers;
  const int64_t K = t.mesh_devices.size(0), M = t.microbatch_counts.size(0);
  STRATOS_CHECK(pr.cut.size(0) == R && pr.cut.size(1) == L - 1, "cut shape ({}, {})",
                pr.cut.size(0), pr.cut.size(1));
  STRATOS_CHECK(pr.config.size(1) == S && pr.config.size(2) == K, "config shape (_, {}, {})",
                pr.config.size(1), pr.config.size(2));
  STRATOS_CHECK(pr.microbatch.size(0) == R && pr.microbatch.size(1) == M, "microbatch shape");

  SurrogateResult out;
  torch::Tensor p = StageLayerProbabilities(pr.cut, static_cast<int>(S));  // (R, L, S)
  out.stage_probabilities = p;
  torch::Tensor counts = p.transpose(1, 2).matmul(t.class_onehot);       // (R, S, C)
  torch::Tensor last = p.select(1, L - 1);                               // (R, S) Pr(s is last)
  torch::Tensor nonempty = last.flip({1}).cumsum(1).flip({1});           // (R, S) e_s
  torch::Tensor not_last = nonempty - last;                              // (R, S)
  torch::Tensor later = 1.0 - t.first_stage;                             // (S)
  torch::Tensor features =
      torch::cat({counts, (last * later).unsqueeze(-1), (not_last * later).unsqueeze(-1),
                  (last * t.first_stage).unsqueeze(-1), (not_last * t.first_stage).unsqueeze(-1)},
                 2);  // (R, S, F)
  const int64_t F = t.num_features;
  const torch::Tensor& q = pr.config;      // (R, S, K)
  const torch::Tensor& w = pr.microbatch;  // (R, M)

  // 1F1B: a stage holds min(m, stages from it on) microbatches; GPipe all m.
  torch::Tensor in_flight;  // (R, S, M)
  if (t.schedule == Schedule::kGpipe) {
    in_flight = t.microbatch_counts.reshape({1, 1, M}).expand({R, S, M}).contiguous();
  } else {
    torch::Tensor stages_from = nonempty.flip({1}).cumsum(1).flip({1});  // (R, S)
    in_flight = torch::minimum(t.microbatch_counts.reshape({1, 1, M}), stages_from.unsqueeze(-1));
  }
  const int64_t T = t.time_table.size(2);  // 2M to 6M time columns (SurrogateTensors)
  // (R, S, T) expected [stage seconds | additive tail seconds (| one-time) (| S | W | b)] under q
  torch::Tensor expected;
  torch::Tensor overflow;  // (R, S, M) sum_k q relu(peak - capacity), bytes
  if (!use_reference_ops && features.device().is_cpu()) {
    auto outputs = StageCostFunction::apply(features, q, in_flight, t.kernel_table, T,
                                            t.memory_capacity_bytes,
                                            settings.min_config_probability);
    expected = outputs[0];
    overflow = outputs[1];
  } else {
    expected = (features.unsqueeze(3) * q.unsqueeze(2))
                   .reshape({R * S, F * K})
                   .matmul(t.time_table.permute({1, 0, 2}).reshape({F * K, T}))
                   .reshape({R, S, T});
    torch::Tensor memory = features.reshape({R * S, F})
                               .matmul(t.memory_table.permute({1, 0, 2}).reshape({F, K * 2 * M}))
                               .reshape({R, S, K, 2, M});
    torch::Tensor peak = torch::addcmul(memory.select(3, 0), memory.select(3, 1),
                                        in_flight.unsqueeze(2));  // (R, S, K, M)
    overflow = (torch::relu(peak - t.memory_capacity_bytes) * q.unsqueeze(-1)).sum(2);
  }
  torch::Tensor stage_seconds = expected.narrow(2, 0, M);  // (R, S, M) t_s
  torch::Tensor tail_seconds = expected.narrow(2, M, M);   // (R, S, M) e_s (0 when empty)
  const int64_t bucket_block = t.has_one_time ? 3 : 2;
  if (t.has_bucketed_dp) {
    // BucketedDpExposedSeconds of the expected S, W and b (of the expectations, not the
    // expectation of the exposed time: exact at one-hot q).
    torch::Tensor sync = expected.narrow(2, bucket_block * M, M);
    torch::Tensor window = expected.narrow(2, (bucket_block + 1) * M, M);
    torch::Tensor bucket = expected.narrow(2, (bucket_block + 2) * M, M);
    tail_seconds = tail_seconds + torch::maximum(sync - window, torch::minimum(bucket, sync));
  }
  out.stage_seconds = stage_seconds;
  out.stage_tail_seconds = tail_seconds;

  // Smooth maximum over stages (dim 1); tau = 0: the exact max. Empty stages enter with 0,
  // which never exceeds a nonempty stage's t or e (both >= 0).
  auto smooth_max = [&](const torch::Tensor& x) {
    if (settings.smoothmax_tau_seconds > 0) {
      const double tau = settings.smoothmax_tau_seconds;
      return tau * torch::logsumexp(x / tau, 1);
    }
    return std::get<0>(x.max(1));
  };
  torch::Tensor per_m = stage_seconds.sum(1) +
                        (t.microbatch_counts - 1.0) * smooth_max(stage_seconds) +
                        smooth_max(tail_seconds);  // (R, M)
  if (t.has_one_time) per_m = per_m + expected.narrow(2, 2 * M, M).sum(1);  // + sum_s c_s
  out.iteration_seconds = (w * per_m).sum(1);

  // Memory: per config, so that one overflowing option is penalized on its own.
  out.memory_excess = (overflow.sum(1) * w).sum(1) / t.memory_capacity_bytes;  // (R)

  torch::Tensor devices = (nonempty * q.matmul(t.mesh_devices)).sum(1);  // (R)
  out.device_excess = torch::relu(devices - t.num_devices) / t.num_devices;
  if (t.min_stages >= 2) {
    out.stage_count_excess = last.index({Slice(), Slice(0, t.min_stages - 1)}).sum(1);
  } else {
    out.stage_count_excess = torch::zeros({R}, last.options());
  }
  out.penalty_seconds = settings.penalty_scale_seconds *
                        (settings.memory_penalty_weight * out.memory_excess +
                         settings.device_penalty_weight * out.device_excess +
                         settings.stage_count_penalty_weight * out.stage_count_excess);
  out.objective = out.iteration_seconds + out.penalty_seconds;
  return out;
}

SurrogateProbabilities SurrogateProbabilitiesFromLogits(const SurrogateLogits& logits,
                                                        double temperature, bool gumbel_noise,
                                                        bool straight_through,
                                                        torch::Generator* generator) {
  STRATOS_CHECK(temperature > 0, "temperature {} must be > 0", temperature);
  torch::Tensor cut = logits.cut;
  torch::Tensor config = logits.config;
  torch::Tensor microbatch = logits.microbatch;
  if (gumbel_noise) {
    auto uniform = [&](const torch::Tensor& like) {
      torch::Tensor u = generator ? torch::rand(like.sizes(), *generator, like.options())
                                  : torch::rand(like.sizes(), like.options());
      return u.clamp(1e-12, 1.0 - 1e-12);
    };
    torch::Tensor u = uniform(cut);
    cut = cut + (torch::log(u) - torch::log1p(-u));  // logistic noise: the 2-class Gumbel
    config = config - torch::log(-torch::log(uniform(config)));
    microbatch = microbatch - torch::log(-torch::log(uniform(microbatch)));
  }
  SurrogateProbabilities p;
  p.cut = torch::sigmoid(cut / temperature);
  p.config = torch::softmax(config / temperature, -1);
  p.microbatch = torch::softmax(microbatch / temperature, -1);
  if (straight_through) {
    auto hard_onehot = [](const torch::Tensor& soft) {
      torch::Tensor index = soft.argmax(-1, /*keepdim=*/true);
      return torch::zeros_like(soft).scatter_(-1, index, 1.0);
    };
    torch::Tensor hard_cut = (p.cut > 0.5).to(p.cut.scalar_type());
    p.cut = hard_cut + p.cut - p.cut.detach();
    p.config = hard_onehot(p.config.detach()) + p.config - p.config.detach();
    p.microbatch = hard_onehot(p.microbatch.detach()) + p.microbatch - p.microbatch.detach();
  }
  return p;
}

SurrogateProbabilities OneHotProbabilities(const RelaxTables& tables,
                                           const SurrogateTensors& tensors, const Plan& plan) {
  const int S = tensors.max_stages, L = tensors.num_layers;
  const int K = static_cast<int>(tensors.config_indices.size());
  if (plan.NumStages() < 1 || plan.NumStages() > S)
    ThrowInputError("plan", "stages", plan.NumStages(),
                    fmt::format("the relaxation allows 1 to {} stages", S));
  const int m = tables.FindMicrobatchOption(plan.num_microbatches);
  if (m < 0)
    ThrowInputError("plan", "num_microbatches", plan.num_microbatches,
                    "is not an option of the search space");
  std::vector<double> cut(static_cast<size_t>(L - 1), 0.0);
  std::vector<double> config(static_cast<size_t>(S) * K, 0.0);
  for (int s = 0; s < S; ++s) {
    int index = 0;
    if (s < plan.NumStages()) {
      const StagePlan& stage = plan.stages[s];
      if (s > 0) cut.at(stage.first_layer - 1) = 1.0;
      const int k = tables.FindConfig(stage.config);
      auto it = std::find(tensors.config_indices.begin(), tensors.config_indices.end(), k);
      if (k < 0 || it == tensors.config_indices.end())
        ThrowInputError("plan", fmt::format("stages[{}].config", s), stage.config.Label(),
                        "is not a config of the relaxation");
      index = static_cast<int>(it - tensors.config_indices.begin());
    }
    config[static_cast<size_t>(s) * K + index] = 1.0;
  }
  std::vector<double> microbatch(tables.num_microbatch_options, 0.0);
  microbatch[m] = 1.0;
  const torch::TensorOptions options = tensors.mesh_devices.options();
  auto make = [&](std::vector<double>& data, std::vector<int64_t> shape) {
    return torch::from_blob(data.data(), shape, torch::kFloat64)
        .to(options.device(), options.dtype().toScalarType(), false, true);
  };
  SurrogateProbabilities p;
  p.cut = make(cut, {1, L - 1});
  p.config = make(config, {1, S, K});
  p.microbatch = make(microbatch, {1, static_cast<int64_t>(microbatch.size())});
  return p;
}

GradientCheckResult CheckSurrogateGradient(const SurrogateTensors& tensors,
                                           const SurrogateLogits& logits,
                                           const SurrogateSettings& settings,
                                           double relative_step, double absolute_floor,
                                           int max_probes) {
  SurrogateLogits x{logits.cut.detach().to(torch::kFloat64).clone().requires_grad_(true),
                    logits.config.detach().to(torch::kFloat64).clone().requires_grad_(true),
                    logits.microbatch.detach().to(torch::kFloat64).clone().requires_grad_(true)};
  auto objective = [&](const SurrogateLogits& at) {
    return EvaluateSurrogate(tensors, SurrogateProbabilitiesFromLogits(at, 1.0, false, false),
                             settings)
        .objective.sum();
  };
  objective(x).backward();
  const std::vector<std::pair<const char*, torch::Tensor SurrogateLogits::*>> groups{
      {"cut", &SurrogateLogits::cut},
      {"config", &SurrogateLogits::config},
      {"microbatch", &SurrogateLogits::microbatch}};
  int64_t total = 0;
  for (auto& g : groups) total += (x.*g.second).numel();
  const int64_t stride = (max_probes > 0 && total > max_probes) ? total / max_probes : 1;

  GradientCheckResult result;
  torch::NoGradGuard guard;
  int64_t flat = 0;
  for (const auto& group : groups) {
    const char* name = group.first;
    torch::Tensor SurrogateLogits::*member = group.second;
    torch::Tensor grad = (x.*member).grad().reshape({-1});
    torch::Tensor values = (x.*member).detach().reshape({-1});
    for (int64_t i = 0; i < values.numel(); ++i, ++flat) {
      if (flat % stride != 0) continue;
      const double x0 = values[i].item<double>();
      const double h = relative_step * std::max(1.0, std::abs(x0));
      auto at = [&](double v) {
        SurrogateLogits y{x.cut.detach().clone(), x.config.detach().clone(),
                          x.microbatch.detach().clone()};
        (y.*member).view({-1})[i] = v;
        return objective(y).item<double>();
      };
      const double fd = (at(x0 + h) - at(x0 - h)) / (2 * h);
      const double ad = grad[i].item<double>();
      const double error =
          std::abs(ad - fd) / std::max({std::abs(ad), std::abs(fd), absolute_floor});
      ++result.entries_checked;
      if (error > result.max_relative_error || result.worst_entry.empty()) {
        result.max_relative_error = std::max(result.max_relative_error, error);
        result.worst_entry = fmt::format("{}[{}]: autograd {:.6e}, finite difference {:.6e}",
                                         name, i, ad, fd);
      }
    }
  }
  return result;
}

}  // namespace stratos
