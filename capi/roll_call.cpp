// The notes of capi/roll_call.h: fixed-size records, point to point on the agreement's communicator.
#include "capi/roll_call.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>

#include "capi/agreement.h"
#include "mesh/deadline.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

struct Wire {
  int64_t head[4];
  char words[RollCall::kWordsBytes];
};

// Sends still in flight: each buffer lives until its send completes. One to a dead or stopped peer may never
// complete, so the list lives as long as the process (reachable from here, so not a leak).
struct InFlight {
  MPI_Request request;
  std::unique_ptr<Wire> wire;
};
std::mutex in_flight_mu;
std::vector<InFlight>& in_flight() {
  static auto* list = new std::vector<InFlight>;
  return *list;
}

// Drops the sends that completed.
void reap() {
  auto& list = in_flight();
  list.erase(std::remove_if(list.begin(), list.end(),
                            [](InFlight& f) {
                              int done = 0;
                              return MPI_Test(&f.request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS || done != 0;
                            }),
             list.end());
}

Note from_wire(const Wire& w) {
  Note n{w.head[0], w.head[1], w.head[2], w.head[3], {}};
  n.words.assign(w.words, strnlen(w.words, sizeof w.words));
  return n;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

void RollCall::tell_everyone(const Note& note) const {
  std::lock_guard<std::mutex> lock(in_flight_mu);
  reap();
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    auto w = std::make_unique<Wire>();
    std::memset(w.get(), 0, sizeof(Wire));
    w->head[0] = note.seq, w->head[1] = note.call, w->head[2] = note.status, w->head[3] = note.waited;
    std::memcpy(w->words, note.words.data(), std::min(note.words.size(), sizeof w->words - 1));
    MPI_Request req;
    if (MPI_Isend(w.get(), sizeof(Wire), MPI_BYTE, q, kTag, comm_, &req) != MPI_SUCCESS) continue;  // best effort
    in_flight().push_back({req, std::move(w)});
  }
}

std::vector<Note> RollCall::listen(const Note& mine) const {
  tell_everyone(mine);
  std::vector<Note> heard(static_cast<size_t>(size_));
  int answered = 0;
  const Deadline deadline(kSeconds);
  PollBackoff backoff;
  while (answered < size_ - 1 && !deadline.expired()) {
    int found = 0;
    MPI_Message msg;
    MPI_Status st;
    if (MPI_Improbe(MPI_ANY_SOURCE, kTag, comm_, &found, &msg, &st) != MPI_SUCCESS) break;
    if (!found) {
      backoff.pause();
      continue;
    }
    Wire w;
    if (MPI_Mrecv(&w, sizeof(Wire), MPI_BYTE, &msg, MPI_STATUS_IGNORE) != MPI_SUCCESS) break;
    const Note n = from_wire(w);
    Note& slot = heard[static_cast<size_t>(st.MPI_SOURCE)];
    if (n.seq < mine.seq || slot.seq != 0 || st.MPI_SOURCE == rank_) continue;  // an earlier call's, unread then
    slot = n;
    ++answered;
  }
  return heard;
}

std::string RollCall::blame(const std::vector<Note>& notes, int64_t seq) const {
  std::string s;
  std::vector<int> silent;
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) continue;
    const Note& n = notes[static_cast<size_t>(q)];
    if (n.seq == 0) silent.push_back(q);
    else if (n.seq > seq)
      s += detail::concat("; rank ", q, " is at a later call (#", n.seq, ", ", call_name(n.call), ")");
    else if (!n.waited)
      s += detail::concat("; rank ", q, " failed this call (", shardrt_status_name(static_cast<int>(n.status)),
                          "): ", n.words);
  }
  if (!silent.empty())
    s += detail::concat("; no word from ", rank_list(silent), " within ", kSeconds,
                        " s of this rank's timeout: it died, hangs, or is not in this call");
  return s;
}

}  // namespace shardrt::capi
