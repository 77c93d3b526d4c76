#include "validate/reference_tables.h"

#include <fmt/format.h>

#include <array>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <regex>
#include <tuple>
#include <utility>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"

// fast-cpp-csv-parser (Debian libfccp-dev): single-threaded reading, no pthread dependency.
// Its error types copy file names with strncpy into fixed buffers, which GCC flags when inlined.
#define CSV_IO_NO_THREAD
#pragma GCC diagnostic ignored "-Wstringop-truncation"
#include <libfccp/csv.h>

namespace stratos {

namespace {

// The cells of one row, by the column names asked for, with converters whose errors name the
// file, the line, the column and the cell.
template <size_t N>
struct Row {
  const std::string& path;
  int line;
  const std::array<const char*, N>& names;
  const std::array<std::string, N>& cells;

  size_t Index(const char* name) const {
    for (size_t i = 0; i < N; ++i)
      if (std::string(names[i]) == name) return i;
    STRATOS_CHECK(false, "column {} was not requested", name);
  }
  [[noreturn]] void Fail(const char* name, const std::string& rule) const {
    throw InputError(fmt::format("{}:{}: {} = \"{}\": {}", path, line, name, Text(name), rule));
  }
  const std::string& Text(const char* name) const { return cells[Index(name)]; }
  double Number(const char* name) const {
    const std::string& text = Text(name);
    if (text == "inf") return std::numeric_limits<double>::infinity();
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE ||
        !std::isfinite(value))
      Fail(name, "must be a number (or inf)");
    return value;
  }
  double Finite(const char* name) const {
    const double value = Number(name);
    if (!std::isfinite(value)) Fail(name, "must be finite");
    return value;
  }
  int Integer(const char* name, int minimum = 1) const {
    const std::string& text = Text(name);
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(text.c_str(), &end, 10);
    if (text.empty() || end != text.c_str() + text.size() || errno == ERANGE)
      Fail(name, "must be an integer");
    if (value < minimum || value > std::numeric_limits<int>::max())
      Fail(name, fmt::format("must be >= {}", minimum));
    return static_cast<int>(value);
  }
};

// Reads `path`, whose header must hold every column of `names` (others are ignored), and calls
// on_row(Row<N>) per data row. Parser errors become InputError naming the file.
template <size_t N, typename OnRow>
void ReadTable(const std::string& path, const std::array<const char*, N>& names, OnRow on_row) {
  try {
    io::CSVReader<N, io::trim_chars<' ', '\t'>, io::double_quote_escape<',', '"'>> in(path);
    std::apply([&](auto... name) { in.read_header(io::ignore_extra_column, name...); }, names);
    std::array<std::string, N> cells;
    while (std::apply([&](auto&... cell) { return in.read_row(cell...); }, cells)) {
      on_row(Row<N>{path, static_cast<int>(in.get_file_line()), names, cells});
    }
  } catch (const io::error::base& e) {
    throw InputError(fmt::format("{}: {}", path, e.what()));
  }
}

// "[0,15,30]" -> {0, 15, 30}.
template <size_t N>
std::vector<int> IntegerList(const Row<N>& row, const char* name) {
  const std::string& text = row.Text(name);
  if (text.size() < 2 || text.front() != '[' || text.back() != ']')
    row.Fail(name, "must be a list like [0,15,30]");
  std::vector<int> values;
  size_t position = 1;
  while (position < text.size() - 1) {
    size_t comma = text.find(',', position);
    if (comma == std::string::npos || comma > text.size() - 1) comma = text.size() - 1;
    const std::string item = text.substr(position, comma - position);
    char* end = nullptr;
    const long value = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || end != item.c_str() + item.size())
      row.Fail(name, fmt::format("item \"{}\" must be an integer", item));
    values.push_back(static_cast<int>(value));
    position = comma + 1;
  }
  if (values.size() < 2) row.Fail(name, "needs at least two boundaries");
  return values;
}

}  // namespace

std::string ReferenceDataPath(const std::string& file) {
  return SharedDataPath("reference/" + file);
}

std::vector<MegatronScalingRow> ReadMegatronScaling(const std::string& path) {
  static const std::array<const char*, 13> kNames = {
      "model",           "attention_heads",   "hidden_size",   "num_layers",
      "tensor_parallel", "pipeline_parallel", "data_parallel", "num_gpus",
      "global_batch_size", "tflops_per_gpu",  "mfu_pct",       "seq_len",
      "vocab_size"};
  std::vector<MegatronScalingRow> rows;
  ReadTable(path, kNames, [&](const Row<13>& row) {
    MegatronScalingRow r;
    r.line = row.line;
    r.model = row.Text("model");
    r.attention_heads = row.Integer("attention_heads");
    r.hidden_size = row.Integer("hidden_size");
    r.num_layers = row.Integer("num_layers");
    r.tensor_parallel = row.Integer("tensor_parallel");
    r.pipeline_parallel = row.Integer("pipeline_parallel");
    r.data_parallel = row.Integer("data_parallel");
    r.num_gpus = row.Integer("num_gpus");
    r.global_batch_size = row.Integer("global_batch_size");
    r.tflops_per_gpu = row.Finite("tflops_per_gpu");
    r.mfu_pct = row.Finite("mfu_pct");
    r.seq_length = row.Integer("seq_len");
    r.vocab_size = row.Integer("vocab_size");
    if (r.tensor_parallel * r.pipeline_parallel * r.data_parallel != r.num_gpus)
      row.Fail("num_gpus", fmt::format("must equal tensor x pipeline x data parallel = {}",
                                       r.tensor_parallel * r.pipeline_parallel * r.data_parallel));
    rows.push_back(r);
  });
  return rows;
}

std::vector<VtrainRow> ReadVtrain(const std::string& path) {
  static const std::array<const char*, 11> kNames = {
      "# GPUs",           "global batch",       "micro batch",        "hidden size",
      "attention heads",  "# layers",           "sequence length",    "tensor parallelism",
      "data parallelism", "pipeline parallelism", "iteration time (ms)"};
  std::vector<VtrainRow> rows;
  ReadTable(path, kNames, [&](const Row<11>& row) {
    VtrainRow r;
    r.line = row.line;
    r.num_gpus = row.Integer("# GPUs");
    r.global_batch_size = row.Integer("global batch");
    r.micro_batch = row.Integer("micro batch");
    r.hidden_size = row.Integer("hidden size");
    r.attention_heads = row.Integer("attention heads");
    r.num_layers = row.Integer("# layers");
    r.seq_length = row.Integer("sequence length");
    r.tensor_parallel = row.Integer("tensor parallelism");
    r.data_parallel = row.Integer("data parallelism");
    r.pipeline_parallel = row.Integer("pipeline parallelism");
    r.iteration_ms = row.Finite("iteration time (ms)");
    if (r.tensor_parallel * r.pipeline_parallel * r.data_parallel != r.num_gpus)
      row.Fail("# GPUs", fmt::format("must equal tensor x pipeline x data parallelism = {}",
                                     r.tensor_parallel * r.pipeline_parallel * r.data_parallel));
    if (r.global_batch_size % (r.micro_batch * r.data_parallel) != 0)
      row.Fail("global batch",
               fmt::format("must be a multiple of micro batch x data parallelism = {}",
                           r.micro_batch * r.data_parallel));
    if (r.iteration_ms <= 0) row.Fail("iteration time (ms)", "must be > 0");
    rows.push_back(r);
  });
  return rows;
}

std::vector<AmpTrialRow> ReadAmpTrials(const std::string& path) {
  static const std::array<const char*, 8> kNames = {
      "trial", "micro_batch", "tp_mp", "dp", "pp", "layer_partition", "amp_predicted_cost",
      "measured_iter_time_s"};
  std::vector<AmpTrialRow> rows;
  ReadTable(path, kNames, [&](const Row<8>& row) {
    AmpTrialRow r;
    r.line = row.line;
    r.trial = row.Integer("trial", 0);
    r.micro_batch = row.Integer("micro_batch");
    r.tensor_parallel = row.Integer("tp_mp");
    r.data_parallel = row.Integer("dp");
    r.pipeline_parallel = row.Integer("pp");
    r.layer_partition = IntegerList(row, "layer_partition");
    r.amp_predicted_cost = row.Finite("amp_predicted_cost");
    r.measured_seconds = row.Number("measured_iter_time_s");
    if (static_cast<int>(r.layer_partition.size()) != r.pipeline_parallel + 1)
      row.Fail("layer_partition", fmt::format("must have pp + 1 = {} boundaries",
                                              r.pipeline_parallel + 1));
    for (size_t i = 1; i < r.layer_partition.size(); ++i)
      if (r.layer_partition[i] <= r.layer_partition[i - 1])
        row.Fail("layer_partition", "boundaries must increase");
    rows.push_back(r);
  });
  return rows;
}

std::vector<ActivationFormulaRow> ReadActivationFormulas(const std::string& path) {
  static const std::array<const char*, 3> kNames = {
      "configuration", "bytes_per_transformer_layer",
      "derived_by_us_coefficient_of_sbh_for_gpt3_175B_a96_s2048_h12288_t8"};
  std::vector<ActivationFormulaRow> rows;
  ReadTable(path, kNames, [&](const Row<3>& row) {
    ActivationFormulaRow r;
    r.line = row.line;
    r.configuration = row.Text("configuration");
    r.formula = row.Text("bytes_per_transformer_layer");
    r.coefficient_gpt3_175b =
        row.Finite("derived_by_us_coefficient_of_sbh_for_gpt3_175B_a96_s2048_h12288_t8");
    rows.push_back(r);
  });
  return rows;
}

std::vector<LayerTimeRow> ReadLayerTimes(const std::string& path) {
  static const std::array<const char*, 5> kNames = {"experiment", "forward_ms", "backward_ms",
                                                    "combined_ms", "overhead_pct_vs_baseline"};
  std::vector<LayerTimeRow> rows;
  ReadTable(path, kNames, [&](const Row<5>& row) {
    LayerTimeRow r;
    r.line = row.line;
    r.experiment = row.Text("experiment");
    r.forward_ms = row.Finite("forward_ms");
    r.backward_ms = row.Finite("backward_ms");
    r.combined_ms = row.Finite("combined_ms");
    r.has_overhead = !row.Text("overhead_pct_vs_baseline").empty();
    if (r.has_overhead) r.overhead_pct = row.Finite("overhead_pct_vs_baseline");
    rows.push_back(r);
  });
  return rows;
}

std::vector<ZeroMemoryRow> ReadZeroMemory(const std::string& path) {
  static const std::array<const char*, 6> kNames = {"stage", "psi_params", "Nd", "K",
                                                    "bytes_per_gpu_GB_1e9", "value_status"};
  std::vector<ZeroMemoryRow> rows;
  ReadTable(path, kNames, [&](const Row<6>& row) {
    ZeroMemoryRow r;
    r.line = row.line;
    r.stage = row.Text("stage");
    if (r.stage.rfind("baseline", 0) == 0) {
      r.zero_stage = 0;
    } else if (r.stage.rfind("ZeRO-", 0) == 0 && r.stage.size() > 5 && r.stage[5] >= '1' &&
               r.stage[5] <= '3') {
      r.zero_stage = r.stage[5] - '0';
    } else {
      row.Fail("stage", "must start with \"baseline\" or \"ZeRO-1\", \"ZeRO-2\", \"ZeRO-3\"");
    }
    r.psi = row.Finite("psi_params");
    r.nd = row.Integer("Nd");
    r.k = row.Finite("K");
    r.gb_text = row.Text("bytes_per_gpu_GB_1e9");
    r.gb = row.Finite("bytes_per_gpu_GB_1e9");
    r.value_status = row.Text("value_status");
    rows.push_back(r);
  });
  return rows;
}

std::vector<AlpaPointRow> ReadAlpaPoints(const std::string& path) {
  static const std::array<const char*, 18> kNames = {
      "model",      "seq_len", "hidden",           "layers",          "heads",
      "vocab",      "global_batch", "num_micro_batches", "dp",          "op_tp",
      "pp",         "num_gpus", "remat",           "mean_iter_time_s", "tflops_per_gpu_model",
      "tflops_per_gpu_with_recompute", "peak_mem_gb", "value_status"};
  std::vector<AlpaPointRow> rows;
  ReadTable(path, kNames, [&](const Row<18>& row) {
    AlpaPointRow r;
    r.line = row.line;
    r.model = row.Text("model");
    r.seq_length = row.Integer("seq_len");
    r.hidden_size = row.Integer("hidden");
    r.num_layers = row.Integer("layers");
    r.num_heads = row.Integer("heads");
    r.vocab_size = row.Integer("vocab");
    r.global_batch_size = row.Integer("global_batch");
    r.num_microbatches = row.Integer("num_micro_batches");
    r.data_parallel = row.Integer("dp");
    r.tensor_parallel = row.Integer("op_tp");
    r.pipeline_parallel = row.Integer("pp");
    r.num_gpus = row.Integer("num_gpus");
    const std::string& remat = row.Text("remat");
    if (remat != "yes" && remat != "no") row.Fail("remat", "must be yes or no");
    r.remat = remat == "yes";
    r.iteration_seconds = row.Finite("mean_iter_time_s");
    r.has_model_tflops = !row.Text("tflops_per_gpu_model").empty();
    if (r.has_model_tflops) r.tflops_per_gpu_model = row.Finite("tflops_per_gpu_model");
    r.tflops_per_gpu_with_recompute = row.Finite("tflops_per_gpu_with_recompute");
    r.peak_memory_gb = row.Finite("peak_mem_gb");
    rows.push_back(r);
  });
  return rows;
}

std::vector<NcclSweepRow> ReadNcclSweeps(const std::string& path) {
  static const std::array<const char*, 4> kNames = {"config", "size_bytes", "time_us",
                                                    "busbw_GBps"};
  static const std::regex kConfig(R"(^(\d{1,6}) nodes? x (\d{1,6}) ([^ (]+))");
  std::vector<NcclSweepRow> rows;
  ReadTable(path, kNames, [&](const Row<4>& row) {
    NcclSweepRow r;
    r.line = row.line;
    r.config = row.Text("config");
    std::smatch match;
    if (!std::regex_search(r.config, match, kConfig))
      row.Fail("config", "must start with \"N node(s) x G <GPU>\"");
    r.nodes = std::stoi(match[1]);
    r.gpus_per_node = std::stoi(match[2]);
    r.gpu = match[3];
    if (r.nodes < 1 || r.gpus_per_node < 1 || r.nodes * r.gpus_per_node < 2)
      row.Fail("config", "needs at least 2 GPUs in all");
    r.size_bytes = row.Finite("size_bytes");
    if (!(r.size_bytes > 0)) row.Fail("size_bytes", "must be > 0");
    if (!row.Text("time_us").empty()) {
      r.seconds = row.Finite("time_us") * 1e-6;
      if (!(r.seconds > 0)) row.Fail("time_us", "must be > 0");
    } else {
      const double busbw = row.Finite("busbw_GBps") * 1e9;
      if (!(busbw > 0)) row.Fail("busbw_GBps", "must be > 0 where time_us is empty");
      const double n = r.nodes * r.gpus_per_node;
      r.seconds = r.size_bytes * 2.0 * (n - 1.0) / n / busbw;
      r.seconds_from_busbw = true;
    }
    rows.push_back(r);
  });
  return rows;
}

}  // namespace stratos
