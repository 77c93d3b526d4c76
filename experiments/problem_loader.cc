#include "experiments/problem_loader.h"

#include "costmodel/cluster_io.h"
#include "costmodel/error.h"
#include "costmodel/model_io.h"
#include "costmodel/zoo.h"

namespace stratos {

Problem LoadProblem(const ProblemArgs& args) {
  if (args.global_batch_size < 1)
    ThrowInputError("command line", "--global-batch", args.global_batch_size, "must be >= 1");
  if (args.nodes < 0) ThrowInputError("command line", "--nodes", args.nodes, "must be >= 1");
  if (args.seq_length < 0)
    ThrowInputError("command line", "--seq-length", args.seq_length, "must be >= 1");
  if (args.dp_overlap < 0 || args.dp_overlap > 1)
    ThrowInputError("command line", "--dp-overlap", args.dp_overlap, "must be in [0, 1]");
  Problem problem;
  problem.model = ReadModelFile(ResolveModelPath(args.model), args.seq_length);
  problem.cluster = ReadClusterFile(ResolveClusterPath(args.cluster));
  if (args.nodes > 0) problem.cluster = problem.cluster.WithNodes(args.nodes);
  problem.training.global_batch_size = args.global_batch_size;
  problem.training.schedule = ParseSchedule(args.schedule, "command line: --schedule");
  problem.training.dp_overlap_fraction = args.dp_overlap;
  return problem;
}

}  // namespace stratos
