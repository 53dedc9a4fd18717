// The signature of one collective call, as the checked mode (SHARDRT_COMM_CHECK, see mesh/check_mode.h) has the
// ranks agree on it before anything moves: which collective, the call's sequence number on the communicator,
// the transport, dtype, element counts, root and reduction. Every rank packs its signature into the same
// fixed-size record (its size depends only on the communicator size, so records line up even when the calls
// differ), the records are all-gathered, and every rank runs the same comparison over the same records: the
// verdict and the message are identical everywhere.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace shardrt {

// How a call's buffers travel; ranks on different transports would wait in different libraries.
enum class SignatureTransport : int64_t { mpi = 0, mpi_staged = 1, nccl = 2 };

struct CallSignature {
  explicit CallSignature(const char* k) : kind(k) {}

  const char* kind;    // "all_reduce", ...; one of signature_kinds()
  int64_t dtype = -1;     // the buffer's DType as an integer; -1 where no buffer travels (barrier)
  // Elements this rank contributes; the same on every rank (all_reduce, broadcast, all_gather's input,
  // reduce_scatter's output, all_to_all). ring_shift: the elements this rank sends, which may differ by rank.
  // -1 where per-rank vectors describe the counts instead.
  int64_t count = -1;
  int64_t param = -1;  // broadcast: root; ring_shift: offset mod P; halo_exchange: dim
  int64_t op = -1;     // reductions: ReduceOp * 2 + 1 when bf16/f16 accumulate in f32
  // ring_shift: the elements this rank receives (must equal what its source sends); halo_exchange: the elements
  // of one slice along dim (neighbours' slabs must have the same shape).
  int64_t extra = -1;
  SignatureTransport transport = SignatureTransport::mpi;
  // Per-rank vectors, as this rank passes them: counts (all_gather_v, reduce_scatter_v), send_counts and
  // recv_counts (all_to_all_v), left and right widths (halo_exchange). Empty where the kind has none.
  std::vector<int64_t> a, b;
};

// The kinds the checked mode knows, in a fixed order: a kind's index is its code in the record.
const std::vector<std::string>& signature_kinds();

// int64 entries of one record on a communicator of `ranks` ranks.
int64_t signature_record_size(int ranks);
// This rank's record of `sig` as its `seq`-th collective on the communicator.
std::vector<int64_t> pack_signature(const CallSignature& sig, int64_t seq, int ranks);
// The sequence number in a record.
int64_t record_seq(const int64_t* record);

// Compares the records of every rank (`ranks` records back to back, in communicator rank order). Returns
// nothing when they are consistent; otherwise what differs, e.g. "ranks disagree on dtype (f32 on ranks 0, 1;
// f64 on rank 2)", every difference found, separated by "; ".
std::optional<std::string> find_signature_mismatch(const int64_t* records, int ranks);

}  // namespace shardrt
