#pragma once
// Time of one collective (all-reduce, all-gather, reduce-scatter) over a group of GPUs: the
// alpha-beta ring model of DESIGN.md §5, written as a linear function of the cluster's constants
//
//   t = launches * launch + intra_steps * alpha_intra + intra_link_bytes / bandwidth_intra
//                         + inter_steps * alpha_inter + inter_node_bytes / bandwidth_inter
//                         + c_intra * intra_pipeline + c_inter * inter_pipeline
//
// so that the cost model (CollectiveSeconds) and the calibration's least-squares fit
// (calibrate/collective_fit.h) use the very same terms. Sources: bytes moved per rank
// factor * (n-1)/n of the buffer, factor 2 for all-reduce and 1 for all-gather / reduce-scatter
// (nccl-tests doc/PERFORMANCE.md, "bus bandwidth"); the latency part follows NCCL's own model
// (src/graph/tuning.cc): a base latency per call (our launch), and for a ring factor * (n-1)
// steps of which factor * (k-1) cross nodes (nInterSteps), the rest intra-node; for the tree
// all-reduce 2 (n/k - 1) intra-node steps and 2 log2i(k) inter-node ones (log2i rounds down),
// which our hierarchical all-reduce charges (its bandwidth terms are the tree's NIC traffic; its
// all-gather and reduce-scatter, which NCCL runs as rings only, k - 1). Until 2026-11-27 the
// hierarchical all-reduce charged 2 (k-1), the same for 2 nodes but linear in k: small
// messages over many nodes were priced too slow.
// The pipelining terms: a transfer of S bytes over p steps, pipelined in chunks, takes at best
// (sqrt(p alpha) + sqrt(S beta))^2 = p alpha + S beta + 2 sqrt(alpha beta) sqrt(p S) (Van de
// Geijn's pipelined broadcast); NCCL pipelines every ring step in chunks and its bus bandwidth
// ramps up over two decades of message sizes, which the alpha-beta line cannot follow (README
// "validate nccl": held-out 7-38% too fast from 4 to 256 MiB). The cross term's regressor is
// sqrt(steps x bytes) per level, its coefficient c fitted freely (>= 0; 0 without a fit), and it
// is charged whether or not the latency part is asked for: it grows with the bytes.
#include "costmodel/cluster.h"

namespace stratos {

// Where a group's ranks sit: `nodes` nodes with `gpus_per_node` ranks of the group on each,
// `concurrent_groups` such groups sharing each node's NICs (e.g. the tp data-parallel groups of
// a stage with tensor parallelism tp innermost).
struct GroupLayout {
  int nodes = 1;
  int gpus_per_node = 1;
  int concurrent_groups = 1;

  int Size() const { return nodes * gpus_per_node; }
};

// The coefficients of the linear model above for one call; all >= 0.
struct CollectiveTerms {
  double launches = 0;          // 1 per call (0 when the latency part is not asked for)
  double intra_steps = 0;       // ring steps inside a node
  double intra_link_bytes = 0;  // bytes each GPU moves over one of its intra-node links
  double inter_steps = 0;       // ring steps between nodes
  double inter_node_bytes = 0;  // bytes each node's NICs move (all concurrent groups)
  double intra_pipeline = 0;    // sqrt(intra-node steps x intra_link_bytes), latency or not
  double inter_pipeline = 0;    // sqrt(inter-node steps x inter_node_bytes), latency or not
};

// Terms of `kind` over `bytes` (all-reduce: the buffer each rank holds; all-gather: the gathered
// output; reduce-scatter: the input, i.e. the whole buffer in each case) for a group laid out as
// `layout`, using `algorithm` when the group spans nodes. ring_links_per_gpu as in NetworkLevel
// (0: bandwidth per GPU). Hierarchical (the default): intra-node ring over the node's share,
// then inter-node ring over the nodes, each node sending concurrent * factor * (k-1)/k of the
// buffer. Ring: one flat ring through all n = k * gpus_per_node ranks, factor * (n-1)/n of the
// buffer over every GPU's links and every NIC per group, factor * k * (gpus_per_node - 1)
// intra-node steps. With with_latency = false only the bandwidth terms are filled (the model
// charges a gradient sync's latency once per stage, its bytes per layer). Requires layout sizes
// >= 1 (throws InternalError otherwise).
CollectiveTerms RingCollectiveTerms(Collective kind, InterNodeAlgorithm algorithm, double bytes,
                                    const GroupLayout& layout, int ring_links_per_gpu,
                                    bool with_latency);

// Seconds of one collective on `cluster`: RingCollectiveTerms with the cluster's constants
// (network levels' CollectiveBandwidth/CollectiveLatency, the collective's launch cost and
// inter-node algorithm). Without calibrated keys this is exactly the model stratos had before
// calibration existed. 0 for a group of one GPU or for no bytes without latency.
double CollectiveSeconds(const ClusterSpec& cluster, Collective kind, double bytes,
                         const GroupLayout& layout, bool with_latency = true);

}  // namespace stratos
