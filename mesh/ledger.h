// The comm ledger: counts every collective a communicator issues, per (scope label, collective kind, mesh
// axis), so tests can assert the exact communication of an op and a hidden all-gather shows up as a line.
//
// Scopes. `auto s = ledger.scope("linear"); ... auto t = ledger.scope("backward");` labels what is issued
// inside with the dotted path of every open scope, outermost first: "linear.backward". The full path is kept
// (rather than the innermost label) so that the same inner op under two parents stays distinguishable; a
// label may itself contain dots. Outside any scope the label is "" (shown as "-" in the table).
//
// Calls: one per API call (an async call counts when issued). Bytes sent: the bytes of this rank's own data
// that must reach other ranks, counted once per receiving rank; data a rank keeps for itself and data it
// forwards on behalf of others (an algorithm detail) do not count. P is the communicator size, B the bytes
// of the buffer in the dtype that goes on the wire (f32 when Accumulate::f32 widens a bf16/f16 buffer):
//   all_reduce (sum, max, min, mean)     B * (P-1)            every other rank's result needs all of B
//   broadcast                            root: B * (P-1); others 0
//   barrier                              0
//   all_gather, all_gather_v             this rank's contribution * (P-1)
//   reduce_scatter, reduce_scatter_v     input bytes - this rank's own segment
//   all_to_all, all_to_all_v             sum over j != rank of the bytes sent to j
//   send                                 B;   recv 0
//   ring_shift                           B when the destination is another rank, else 0
//   halo_exchange                        the slabs sent to existing neighbours: right[r-1] slices to r-1 and
//                                        left[r+1] slices to r+1 (times the bytes of one slice)
//   agree                                P-1 (a one-byte verdict to every other rank; the failure message that
//                                        follows a negative verdict is not counted)
// The axis is the communicator's name: a mesh axis ("ddp", "domain"), "mesh" for the flattened mesh, or
// whatever name a stand-alone communicator was given.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

namespace shardrt {

struct LedgerEntry {
  std::string scope;
  std::string kind;
  std::string axis;
  int64_t calls = 0;
  int64_t bytes_sent = 0;
};

class CommLedger {
 public:
  // Open while alive; closing happens in the destructor. Scopes must close in reverse order of opening
  // (RAII guarantees it within one thread).
  class Scope {
   public:
    Scope(Scope&& o) noexcept : ledger_(o.ledger_) { o.ledger_ = nullptr; }
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    ~Scope();

   private:
    friend class CommLedger;
    explicit Scope(CommLedger* l) : ledger_(l) {}
    CommLedger* ledger_;
  };

  [[nodiscard]] Scope scope(const std::string& label);
  // The label collectives issued now are counted under.
  std::string current_scope() const;

  void record(const std::string& kind, const std::string& axis, int64_t bytes_sent);

  // Zero when nothing matches.
  int64_t calls(const std::string& scope, const std::string& kind, const std::string& axis) const;
  int64_t bytes(const std::string& scope, const std::string& kind, const std::string& axis) const;
  int64_t total_calls() const;
  int64_t total_bytes() const;
  // Sorted by (scope, kind, axis).
  std::vector<LedgerEntry> entries() const;

  // A fixed-width text table, one line per entry, and the same entries as a JSON array of objects with the
  // keys scope, kind, axis, calls, bytes_sent.
  std::string table() const;
  std::string to_json(int indent = 2) const;

  // Forgets every count; open scopes stay open.
  void reset();

 private:
  using Key = std::tuple<std::string, std::string, std::string>;
  struct Counts {
    int64_t calls = 0;
    int64_t bytes_sent = 0;
  };
  Counts lookup(const std::string& scope, const std::string& kind, const std::string& axis) const;

  mutable std::mutex mu_;
  std::vector<std::string> open_;  // labels of the open scopes, outermost first
  std::string path_;               // open_ joined with dots, kept current so record() need not rebuild it
  std::map<Key, Counts> counts_;
};

// The ledger communicators use when none is given: one per process.
std::shared_ptr<CommLedger> default_ledger();

}  // namespace shardrt
