#include "runtime/data.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <array>
#include <fstream>
#include <sstream>

#include "costmodel/data_dir.h"
#include "costmodel/error.h"

namespace stratos {

std::string DefaultDataPath() { return SharedDataPath("tinyshakespeare.txt"); }

CharDataset::CharDataset(const std::string& path, int seq_length, double train_fraction)
    : seq_length_(seq_length) {
  if (seq_length < 1) ThrowInputError(path, "seq_length", seq_length, "must be >= 1");
  if (!(train_fraction > 0 && train_fraction < 1))
    ThrowInputError(path, "train_fraction", train_fraction, "must be in (0, 1)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("{}: cannot open data file", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  std::array<bool, 256> present{};
  for (unsigned char c : text) present[c] = true;
  std::array<int64_t, 256> id{};
  for (int c = 0; c < 256; ++c)
    if (present[c]) {
      id[c] = static_cast<int64_t>(vocab_.size());
      vocab_.push_back(static_cast<char>(c));
    }
  torch::Tensor tokens = torch::empty({static_cast<int64_t>(text.size())}, torch::kInt64);
  int64_t* data = tokens.data_ptr<int64_t>();
  for (size_t i = 0; i < text.size(); ++i) data[i] = id[static_cast<unsigned char>(text[i])];
  const int64_t n_train = static_cast<int64_t>(train_fraction * tokens.numel());
  train_ = tokens.narrow(0, 0, n_train);
  validation_ = tokens.narrow(0, n_train, tokens.numel() - n_train);
  if (train_.numel() < 2 * (seq_length + 1) || validation_.numel() < 2 * (seq_length + 1))
    throw InputError(fmt::format("{}: {} bytes are too few for windows of {} tokens", path,
                                 text.size(), seq_length + 1));
}

CharDataset::Batch CharDataset::Windows(const torch::Tensor& tokens,
                                        const torch::Tensor& starts) const {
  // starts: (count,) -> index (count, seq + 1)
  torch::Tensor index = starts.unsqueeze(1) + torch::arange(seq_length_ + 1, torch::kInt64);
  torch::Tensor windows = tokens.index_select(0, index.reshape({-1})).view(index.sizes());
  return {windows.narrow(1, 0, seq_length_).contiguous(),
          windows.narrow(1, 1, seq_length_).contiguous()};
}

CharDataset::Batch CharDataset::TrainBatch(uint64_t seed, int64_t step, int global_batch,
                                           int first, int count) const {
  STRATOS_CHECK(0 <= first && first + count <= global_batch, "samples [{}, {}) of {}", first,
                first + count, global_batch);
  auto generator =
      at::make_generator<at::CPUGeneratorImpl>(seed * 1000003ull + static_cast<uint64_t>(step));
  const int64_t high = train_.numel() - seq_length_ - 1;
  torch::Tensor starts = torch::randint(high, {global_batch}, generator, torch::kInt64);
  return Windows(train_, starts.narrow(0, first, count));
}

CharDataset::Batch CharDataset::ValidationBatch(int count) const {
  const int64_t high = validation_.numel() - seq_length_ - 1;
  torch::Tensor starts = torch::linspace(0, static_cast<double>(high), count).to(torch::kInt64);
  return Windows(validation_, starts);
}

}  // namespace stratos
