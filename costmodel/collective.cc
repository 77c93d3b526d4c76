#include "costmodel/collective.h"

#include <algorithm>
#include <cmath>

#include "costmodel/error.h"

namespace stratos {

CollectiveTerms RingCollectiveTerms(Collective kind, InterNodeAlgorithm algorithm, double bytes,
                                    const GroupLayout& layout, int ring_links_per_gpu,
                                    bool with_latency) {
  STRATOS_CHECK(layout.nodes >= 1 && layout.gpus_per_node >= 1 && layout.concurrent_groups >= 1,
                "group layout {}x{} (x{} concurrent)", layout.nodes, layout.gpus_per_node,
                layout.concurrent_groups);
  const double factor = kind == Collective::kAllReduce ? 2.0 : 1.0;
  const int gpn = layout.gpus_per_node;
  const int nodes = layout.nodes;
  const int concurrent = layout.concurrent_groups;
  CollectiveTerms terms;
  if (layout.Size() == 1) return terms;
  if (with_latency) terms.launches = 1;
  const bool flat_ring = nodes > 1 && algorithm == InterNodeAlgorithm::kRing;
  if (gpn > 1) {
    // Links each GPU drives at once (1 when the level's bandwidth is per GPU).
    const double links = ring_links_per_gpu > 0 ? std::min(gpn - 1, ring_links_per_gpu) : 1;
    const int n = nodes * gpn;
    // The expressions keep the evaluation order of the pre-calibration model, so that an
    // uncalibrated cluster gives bit-identical times.
    const double steps = flat_ring ? factor * nodes * (gpn - 1) : factor * (gpn - 1);
    if (flat_ring) {
      terms.intra_link_bytes = factor * (n - 1) / n * bytes / links;
    } else {
      terms.intra_link_bytes = factor * (gpn - 1) / gpn * bytes / links;
    }
    if (with_latency) terms.intra_steps = steps;
    terms.intra_pipeline = std::sqrt(steps * terms.intra_link_bytes);
  }
  if (nodes > 1) {
    if (flat_ring) {
      const int n = nodes * gpn;
      terms.inter_node_bytes = concurrent * factor * (n - 1) / n * bytes;
    } else {
      terms.inter_node_bytes = concurrent * factor * (nodes - 1) / nodes * bytes;
    }
    // The ring's k - 1 steps per pass; the hierarchical all-reduce, NCCL's tree, 2 log2i(k)
    // (tuning.cc: 2 * log2i(nNodes) inter-node latencies, log2i rounding down).
    const double steps = kind == Collective::kAllReduce && !flat_ring
                             ? 2.0 * std::floor(std::log2(static_cast<double>(nodes)))
                             : factor * (nodes - 1);
    if (with_latency) terms.inter_steps = steps;
    terms.inter_pipeline = std::sqrt(steps * terms.inter_node_bytes);
  }
  return terms;
}

double CollectiveSeconds(const ClusterSpec& cluster, Collective kind, double bytes,
                         const GroupLayout& layout, bool with_latency) {
  if (bytes <= 0 && !with_latency) return 0.0;
  const CollectiveCalibration& calibration = cluster.collectives[static_cast<int>(kind)];
  const NetworkLevel& intra = cluster.IntraNode();
  const CollectiveTerms terms = RingCollectiveTerms(kind, calibration.inter_node_algorithm, bytes,
                                                    layout, intra.ring_links_per_gpu, with_latency);
  double seconds = 0.0;
  if (layout.gpus_per_node > 1) {
    seconds += terms.intra_link_bytes / intra.CollectiveBandwidth(kind);
    if (with_latency) seconds += terms.intra_steps * intra.CollectiveLatency(kind);
    seconds += intra.CollectivePipeline(kind) * terms.intra_pipeline;  // 0 without a fit
  }
  if (layout.nodes > 1) {
    const NetworkLevel& inter = cluster.InterNode();
    seconds += terms.inter_node_bytes / inter.CollectiveBandwidth(kind);
    if (with_latency) seconds += terms.inter_steps * inter.CollectiveLatency(kind);
    seconds += inter.CollectivePipeline(kind) * terms.inter_pipeline;
  }
  if (terms.launches > 0) seconds += terms.launches * calibration.launch_seconds;
  return seconds;
}

}  // namespace stratos
