#pragma once
// `stratos validate korthikanti`: activation memory per layer and the time of one 22B layer
// under each TP / sequence-parallel / recompute setting, against Korthikanti et al., "Reducing
// Activation Recomputation in Large Transformer Models" (MLSys'23), Table 2 and Table 4.
#include <string>

#include "costmodel/problem.h"
#include "validate/report.h"

namespace stratos {

// A setting of the paper: tensor parallel degree, sequence parallelism, recomputation.
struct KorthikantiSetting {
  int tensor_parallel = 1;
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;
};

// The setting of a row of korthikanti_activation_memory_formulas.csv by its configuration name
// ("no parallelism" -> t = 1; the tensor-parallel rows -> t = `tp`). Throws InputError naming
// `where` for an unknown name.
KorthikantiSetting ActivationFormulaSetting(const std::string& configuration, int tp,
                                            const std::string& where);

// Table 2's bytes per layer divided by s b h, for that configuration:
// 34 + 5as/h; 10 + 24/t + 5as/(ht); 34/t + 5as/(ht); 10 + 24/t; 34/t; 2.
double ActivationFormulaCoefficient(const std::string& configuration, double a, double s,
                                    double h, double t, const std::string& where);

// Our activation bytes of one transformer layer of a GPT (h, a, s) for one microbatch of b
// samples under `setting`, divided by s b h.
double OurActivationCoefficient(int hidden, int heads, int seq, int microbatch,
                                const KorthikantiSetting& setting);

// The setting of a row of korthikanti_table4_layer_times_22B.csv by its experiment name
// (t = 8). Throws InputError naming `where` for an unknown name.
KorthikantiSetting LayerTimeSetting(const std::string& experiment, const std::string& where);

ValidationReport ValidateKorthikanti(const std::string& formulas_path,
                                     const std::string& layer_times_path);

}  // namespace stratos
