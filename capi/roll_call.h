// Who failed a collective C API call, found out after it failed (capi/agreement.h uses it).
//
// A collective that times out says only that some rank did not come. To name that rank, the ranks that failed a
// call tell each other so, point to point on the agreement's communicator:
//   - a rank whose call failed for a reason of its own (its input, its disk) sends every peer a note with its
//     status and words before it returns (fire and forget: small messages, sent eagerly, never waited for);
//   - a rank left waiting (a collective of the call timed out, or the agreement did) sends its own note, then
//     collects its peers' notes for at most kSeconds, and stops early once every peer has answered.
// A peer that sent a note for this call failed it too (its words are quoted when its failure was its own); a peer
// that sent none within the window died, hangs, or is elsewhere (at another call, or done with this one). Notes
// carry the call number, so one of an earlier call that nobody read is skipped, never mistaken for this call's.
// Nothing here runs while calls succeed.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

#include "capi/shardrt.h"

namespace shardrt::capi {

struct Note {
  int64_t seq = 0;                  // the call number on the agreement's communicator
  int64_t call = 0;                 // its CallId
  int64_t status = SHARDRT_OK;      // the sender's status for it
  int64_t waited = 0;               // 1: the sender was left waiting (a timeout), 0: it failed by itself
  std::string words;                // the sender's message, cut to kWordsBytes
};

class RollCall {
 public:
  static constexpr double kSeconds = 1.5;  // how long a rank left waiting listens for its peers' notes
  static constexpr int kTag = 32000;       // above Communicator::max_user_tag and ShardRT's own p2p tags
  static constexpr size_t kWordsBytes = 440;

  RollCall(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  // Sends `note` to every other rank; returns at once.
  void tell_everyone(const Note& note) const;
  // tell_everyone(mine), then the notes of call mine.seq from the peers, for at most kSeconds. Entry q is rank q's
  // note (a later call's counts too: that peer is ahead), seq 0 where it sent none (and for this rank).
  std::vector<Note> listen(const Note& mine) const;
  // "; rank 1 failed this call: <its words>; no word from rank 2 within 1.5 s of this rank's timeout (...)":
  // what `notes` (from listen) tell about the peers, for the end of a message; "" when every peer answered with
  // a wait of its own.
  std::string blame(const std::vector<Note>& notes, int64_t seq) const;

 private:
  MPI_Comm comm_;
  int rank_, size_;
};

}  // namespace shardrt::capi
