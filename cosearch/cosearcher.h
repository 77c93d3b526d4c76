#pragma once
// CoSearcher: the bilevel co-search of DESIGN.md §7 (issue 5) — the plan's per-stage gradient
// compression is searched while a model trains, so that the choice is judged by both what it
// does to the loss and what it does to the predicted iteration time.
//
// Two problems share the strategy logits alpha (stages x compression options):
//   * the proxy: the runtime's GPT (runtime/gpt.h) trained in this process on real text
//     (tinyshakespeare); its layers are mapped onto the target plan's stages by relative depth
//     (ProxyStageOfLayer), so stage s's compression choice applies to the proxy's layers there;
//   * the target: a large model on a large cluster (by default GPT-3 2.7B on 16 p3.16xlarge
//     nodes) with a fixed base plan; the cost model predicts its iteration time
//     (CompressionTimeSurrogate).
//
// One step (Liu et al., "DARTS", ICLR 2019, Algorithm 1, with the mixed operation on the
// gradient instead of on the forward pass):
//   1. g = grad L_train(theta) on the step's batch; V_k = C_k(g) for every option k, where C_k is
//      compressor k's round trip with its own error-feedback state (runtime/compression.h) and
//      C_none = identity; p_s = softmax(alpha_s / temperature) over the options stage s allows.
//   2. Outer (after the warm-up steps): u_k = the change one step of the inner optimizer (Adam,
//      from its current state) makes with gradient V_k; the look-ahead
//      theta' = theta + sum_k p_k u_k mixes them (a one-step unrolled update), and
//        J(alpha) = L_val(theta') + lambda T(p) / T_base,
//      dJ/dp_{s,k} = <grad L_val(theta'), u_k> over stage s's parameters
//                    + lambda / T_base dT/dp_{s,k},
//      chained through the softmax; Adam on alpha. theta' is linear in p and L_train does not
//      depend on alpha, so this unrolled gradient is exact without DARTS's Hessian-vector
//      product ("second order"); first order evaluates grad L_val at theta instead of theta'.
//      Using Adam's own step (not a plain gradient step) matters: error-feedback compressors
//      send accumulated residuals whose raw size says nothing about the step Adam takes.
//      lambda (automatic by default) is the running mean of the look-ahead's validation-loss
//      decrease -<grad L_val, sum_k p_k u_k>: then dJ = 0 is the condition that the loss
//      decrease per predicted second, the rate that decides the time to a target loss, is
//      stationary.
//   3. Inner: Adam step on theta with the mixed gradient sum_k p_k V_k (p after the outer step).
// The temperature anneals geometrically; Discretize() takes the argmax per stage.
//
// The global batch size is co-searched the same way (issue 17): each BatchOption b pairs a proxy
// batch size with the surrogate of the target plan at the corresponding global batch; a second
// softmax q = softmax(beta / temperature) over the options mixes the gradients g_b of the
// proxy's batches (nested: batch b's samples are the first ones of the largest batch's draw, per
// replica), so the look-ahead is theta' = theta + sum_b q_b sum_k p_k u_{b,k} (u_{b,k} = Adam's
// step with C_k(g_b)), still linear in each of p and q, T(p, q) = sum_b q_b T_b(p), and
//   dJ/dq_b = sum_{s,k} p_{s,k} <grad L_val(theta'), u_{b,k}>_s + lambda / T_now T_b(p).
// T_now is T at the current mixture, held constant: with lambda the running loss decrease per
// step, dJ = 0 is then exactly the stationarity of the loss decrease per predicted second.
// The choices that do not touch the math of training (the layout of the base plan) are fixed.
// With dp_replicas = R > 1 the inner loop trains R data-parallel replicas: replica r computes
// the gradient of its 1/R of the step's batch (the samples the runtime's DP rank r would get),
// each replica has its own compressor state per option (its own error feedback), and each
// option's V_k is the mean over the replicas that the compressor's real exchange produces,
// over a Gloo group of R ranks in this process (one thread per rank; PowerSGD's two
// all-reduces, top-k's all-gather, ...). The replicas' parameters stay equal (they all apply
// the same mean), so one copy of theta serves them all. With R = 1 a group of one stands in
// (the compressor round trip).
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "cosearch/time_surrogate.h"
#include "costmodel/model.h"

namespace stratos {

struct CoSearchOptions {
  // Proxy training: runtime model name ("gpt-tiny" or a model file), tinyshakespeare by default.
  std::string model = "gpt-tiny";
  int seq_length = 0;          // 0: the model's
  std::string data_path;       // "": DefaultDataPath()
  int batch_size = 8;          // sequences per step (over all replicas), one batch option
  int dp_replicas = 1;         // data-parallel replicas, in [1, 8], dividing batch_size
  double learning_rate = 1e-3; // Adam on theta (beta 0.9, 0.95 as the runtime)
  uint64_t seed = 1234;
  // Outer loop.
  int search_steps = 400;
  int warmup_steps = 50;       // theta only, with the initial (uniform) mixture
  double alpha_learning_rate = 0.05;  // Adam on alpha
  double initial_temperature = 1.0;
  double final_temperature = 0.1;
  double lambda = -1;          // < 0: automatic (see above); else fixed, loss units per T_base
  bool second_order = true;    // false: grad L_val at theta (first order)
  int validation_windows = 64; // fixed validation windows the outer loss cycles through
  int validation_batch = 8;    // windows per outer step
  double smoothmax_tau = 0.01; // of T's smooth maxima, relative to T_base
  // Checkpoints: every this many steps (0: never) into checkpoint_dir, atomically.
  std::string checkpoint_dir;
  int checkpoint_every = 100;
  bool resume = false;         // continue from checkpoint_dir's checkpoint

  // Throws InputError naming the field and the rule.
  void Validate() const;
};

// Target stage of each proxy layer (proxy layer l at relative depth (l + 0.5) / L_proxy goes to
// the stage holding the target layer at the same relative depth).
// One global batch size the co-search may choose: the proxy's sequences per step (over all
// replicas) and the time surrogate of the target plan at the corresponding global batch. The
// surrogates of a search's options share the stages and the compression options.
struct BatchOption {
  int proxy_batch_size = 0;
  const CompressionTimeSurrogate* surrogate = nullptr;
};

std::vector<int> ProxyStageOfLayer(int proxy_layers, const Plan& target_plan,
                                   int target_layers);

class CoSearcher {
 public:
  // Builds the proxy model and data, one compressor per replica, batch and compression option
  // (over the proxy's parameter shapes), alpha = 0 and beta = 0. The surrogates must outlive
  // this object. Throws InputError for bad options, data or model, for no batch options, a
  // proxy batch size not divisible by dp_replicas, or surrogates that differ in stages, options
  // or the options each stage allows.
  CoSearcher(const CoSearchOptions& options, std::vector<BatchOption> batches);
  // One batch option: options.batch_size with `surrogate`.
  CoSearcher(const CoSearchOptions& options, const CompressionTimeSurrogate& surrogate);
  ~CoSearcher();

  // One co-search step (inner and, after the warm-up, outer).
  void Step();
  int StepCount() const { return step_; }
  double Temperature() const;
  double Lambda() const { return lambda_; }
  // The mean training loss over the last step's samples (those of the largest batch option).
  double LastTrainLoss() const { return last_train_loss_; }
  double LastValidationLoss() const { return last_validation_loss_; }

  torch::Tensor Alpha() const { return alpha_; }  // (stages, options), float64
  // softmax(alpha_s / temperature) over the allowed options of each stage, 0 elsewhere.
  std::vector<std::vector<double>> Probabilities() const;
  std::vector<int> Discretize() const;
  int NumBatchOptions() const;
  torch::Tensor BatchLogits() const { return beta_; }  // (batch options,), float64
  std::vector<double> BatchProbabilities() const;       // softmax(beta / temperature)
  int DiscretizeBatch() const;                          // argmax of BatchProbabilities()
  torch::Tensor FlatParameters() const;  // theta, (num_parameters,) float32

  // Checkpoint: alpha, beta, theta, the Adam states, every compressor's state, lambda, the step.
  // Save writes checkpoint_dir/cosearch.pt + .json via a temporary name; Load throws
  // InputError if the file is missing or does not match this search (options, shapes).
  void SaveCheckpoint() const;
  void LoadCheckpoint();

  // For tests: the outer objective J at (alpha, beta) with everything else frozen at the state
  // of the last Step()'s outer update (the updates u, theta, the validation windows, lambda,
  // T_now), and its gradients. FrozenOuterGradient / FrozenBatchGradient are dJ/dalpha and
  // dJ/dbeta at FrozenAlpha() / FrozenBatchLogits(), the logits before that update.
  double FrozenOuterObjective(const torch::Tensor& alpha, const torch::Tensor& beta) const;
  torch::Tensor FrozenOuterGradient() const;
  torch::Tensor FrozenBatchGradient() const;
  torch::Tensor FrozenAlpha() const;
  torch::Tensor FrozenBatchLogits() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  torch::Tensor alpha_;
  torch::Tensor beta_;
  int step_ = 0;
  double lambda_ = 0;
  double last_train_loss_ = 0;
  double last_validation_loss_ = 0;
};

// Validation-loss curve of one fixed plan: the proxy trained from scratch for `steps` with stage
// s's gradients passed through compressor choice[s] (the same seeds, batches and optimizer as
// the co-search), the mean loss over `eval_windows` validation windows every `eval_every` steps
// (and at step 0).
struct CurvePoint {
  int step = 0;
  double validation_loss = 0;
};
std::vector<CurvePoint> TrainFixedPlan(const CoSearchOptions& options,
                                       const CompressionTimeSurrogate& surrogate,
                                       const std::vector<int>& choice, int steps, int eval_every,
                                       int eval_windows);

}  // namespace stratos
