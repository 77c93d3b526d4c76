#pragma once
// `stratos validate alpa-point`: Alpa's measured GPT-2.6B iteration on 8 V100 (p3.16xlarge;
// Zheng et al. OSDI'22 artifact, benchmark/alpa/README.md expected output) against our
// prediction of the same plan.
#include <string>

#include "costmodel/plan.h"
#include "costmodel/problem.h"
#include "validate/reference_tables.h"
#include "validate/report.h"

namespace stratos {

struct AlpaPointCase {
  Problem problem;
  Plan plan;
};

// GPT with the row's shapes on ceil(GPUs / 8) nodes of zoo cluster `cluster` (8 V100 each); the
// row's DP x op-TP mesh per stage, PP stages with the embedding on the first and the head on the
// last, transformer layers split evenly; full recomputation if remat; fp16, no sequence
// parallelism, no ZeRO. Throws InputError naming the row for degrees that do not fit.
AlpaPointCase BuildAlpaPointCase(const AlpaPointRow& row,
                                 const std::string& cluster = "p3.16xlarge");

// Alpa's TFLOP count (alpa/util.py compute_gpt_tflops): (f B s h^2 L (1 + s/(6h)) + 6 B s h V)
// with f = 72, plus 24 with activation checkpointing when `with_recompute`.
double AlpaGptFlops(const AlpaPointRow& row, bool with_recompute);

ValidationReport ValidateAlpaPoint(const std::string& reference_path);

}  // namespace stratos
