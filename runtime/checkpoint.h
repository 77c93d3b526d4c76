#pragma once
// Checkpoint files of the runtime (runtime/trainer.h): one per rank and step,
//   DIR/step_NNNNNN/rank_R.pt        the rank's tensors (torch::save of a tensor list)
//   DIR/step_NNNNNN/rank_R.pt.json   {"format", "bytes", "crc32"} of that file
//   DIR/latest                       the newest step whose files every rank wrote
// each written atomically (a temporary beside it, then renamed). Resuming checks every rank's
// file against its size and CRC-32 (zlib's crc32) before loading it, and falls back to the
// newest step whose files are intact on every rank.
#include <torch/torch.h>

#include <string>
#include <vector>

namespace stratos {

// DIR/step_NNNNNN (six digits, zero-padded).
std::string CheckpointStepDir(const std::string& dir, int step);
// DIR/step_NNNNNN/rank_R.pt.
std::string CheckpointFile(const std::string& dir, int step, int rank);

// Writes the rank's tensors (moved to the CPU, so that they load on any device) and the file's
// size and CRC-32 beside it; creates the step directory. Throws InputError naming the file if
// it cannot be written.
void WriteCheckpoint(const std::string& dir, int step, int rank,
                     const std::vector<torch::Tensor>& tensors);

// The steps that DIR holds a step directory for, newest first (names that do not parse are
// ignored; none if DIR does not exist).
std::vector<int> CheckpointSteps(const std::string& dir);

// Why the rank's file of `step` cannot be resumed from, in one line that starts with the file's
// path ("DIR/step_000010/rank_1.pt: truncated: 1200 of 5321 bytes"), or "" if it is intact:
// missing, unreadable, of another size or CRC-32 than its record, or a record that does not
// parse. A file without a record (written before records existed) is intact if it loads.
std::string CheckpointProblem(const std::string& dir, int step, int rank);

// The rank's tensors of `step`, checked as CheckpointProblem does. Throws InputError with
// CheckpointProblem's line if the file is not intact.
std::vector<torch::Tensor> LoadCheckpoint(const std::string& dir, int step, int rank);

}  // namespace stratos
