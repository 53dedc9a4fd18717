// Checked mode of Communicator: before a collective moves anything, every rank all-gathers the signature
// record of its call (mesh/signature.h) over MPI on the host, whatever transport the collective itself uses.
// The check goes through the same deadline as any collective, so a missing peer still times out; it is not
// counted in the ledger, which describes the program's own communication.
#include <algorithm>
#include <optional>

#include "mesh/backend.h"
#include "mesh/comm_core.h"
#include "mesh/communicator.h"
#include "mesh/signature.h"
#include "runtime/errors.h"

namespace shardrt {

void Communicator::enter_collective() const { ++core_->seq; }

CallSignature Communicator::signature_of(const char* kind, const Tensor& t) const {
  CallSignature sig(kind);
  sig.dtype = static_cast<int64_t>(t.dtype());
  sig.transport = routes_to_nccl(t)         ? SignatureTransport::nccl
                  : t.device().is_cuda() ? SignatureTransport::mpi_staged
                                         : SignatureTransport::mpi;
  return sig;
}

void Communicator::check_signature(const CallSignature& sig) const {
  if (!core_->check || size() == 1) return;
  CommBackend& be = host_backend(sig.kind);
  const int p = size();
  const int64_t k = signature_record_size(p);
  std::vector<int64_t> mine = pack_signature(sig, core_->seq, p);
  Tensor rec = Tensor::empty({k}, DType::i64), all = Tensor::empty({k * p}, DType::i64);
  std::copy(mine.begin(), mine.end(), rec.data<int64_t>());
  ++core_->signature_checks;
  Call call = core_->call(sig.kind, [] { return std::string("(signature check)"); });
  be.all_gather_v(rec, all, std::vector<int64_t>(p, k), call);

  const int64_t* records = all.data<int64_t>();
  std::optional<std::string> mismatch = find_signature_mismatch(records, p);
  if (!mismatch) return;
  // Every rank found the same mismatch and nothing was sent, so the communicator stays usable: the ranks
  // resume from the highest sequence number, so the next matching collective passes.
  for (int r = 0; r < p; ++r) core_->seq = std::max(core_->seq, record_seq(records + r * k));
  throw CommError(detail::concat(where(sig.kind), ": signature check failed: ", *mismatch));
}

}  // namespace shardrt
