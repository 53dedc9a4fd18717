#include "mesh/agree.h"

#include <cstring>

#include "mesh/backend.h"
#include "mesh/comm_core.h"

namespace shardrt {

std::optional<std::string> Communicator::agree(bool ok_here, const std::string& msg) const {
  const char* kind = "agree";
  enter_collective();
  CallSignature sig(kind);
  sig.dtype = static_cast<int64_t>(DType::u8);
  sig.count = 1;
  check_signature(sig);
  CommBackend& be = host_backend(kind);
  const int p = size();
  record(kind, p - 1);
  Tensor mine = Tensor::empty({1}, DType::u8), verdicts = Tensor::empty({p}, DType::u8);
  mine.data<uint8_t>()[0] = ok_here ? 1 : 0;
  Call call = core_->call(kind, [] { return std::string("verdicts"); });
  be.all_gather_v(mine, verdicts, std::vector<int64_t>(p, 1), call);

  std::string failing;
  int first = -1;
  for (int j = 0; j < p; ++j) {
    if (verdicts.data<uint8_t>()[j] != 0) continue;
    if (first < 0) first = j;
    failing += (failing.empty() ? "" : ", ") + std::to_string(j);
  }
  if (first < 0) return std::nullopt;

  // Every rank reports the first failing rank's own words, so the errors are identical everywhere.
  Call message_call = core_->call(kind, [first] { return detail::concat("failure message of rank ", first); });
  Tensor len = Tensor::empty({1}, DType::i64);
  len.data<int64_t>()[0] = rank() == first ? static_cast<int64_t>(msg.size()) : 0;
  be.broadcast(len, first, message_call);
  Tensor text = Tensor::empty({len.data<int64_t>()[0]}, DType::u8);
  if (rank() == first && !msg.empty()) std::memcpy(text.raw_data(), msg.data(), msg.size());
  be.broadcast(text, first, message_call);
  std::string agreed;
  if (text.numel() > 0)
    agreed.assign(static_cast<const char*>(text.raw_data()), static_cast<std::size_t>(text.numel()));
  return detail::concat(agreed, " [check failed on rank(s) ", failing, " of axis '", axis(), "']");
}

}  // namespace shardrt
