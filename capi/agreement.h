// How a collective C API call runs on every rank of its communicator (a mesh's, or a context's): the ranks agree
// that they are at the same call, with the same arguments, before acting, and (with SHARDRT_AGREE_ERRORS) on its
// outcome after. Every agreement is a collective of mesh/ (mesh/communicator.h), polled under a deadline, so a rank
// that never comes turns into SHARDRT_ERR_COMM on the others instead of a hang.
//
//   1. prepare: this rank's local checks (handles, null pointers, values) and the signature of its arguments;
//   2. the start agreement, always: one all-gather of a fixed record per rank (its call number on this
//      communicator, the call, the phase, its verdict of step 1, its signature). Ranks at different calls, a rank
//      whose step 1 failed, or arguments that differ are the same CapiError on every rank, and nothing was done;
//   3. body: the call's work (its own collectives among them);
//   4. with agree_errors, the outcome agreement: a second all-gather of the verdicts; any failure is the status
//      and message of the lowest failing rank on every rank (preferring a rank whose failure is not
//      SHARDRT_ERR_COMM: the cause, not the peers it left waiting), with the list of failing ranks.
// The call number counts every call made through one Agreement, so a rank that failed a call and retries at once
// never pairs its retry with the others' first attempt: their records name different calls.
//
// Naming the rank that failed (capi/roll_call.h). A rank left waiting (a collective of step 3 timed out, or an
// agreement did) listens for its peers' notes for RollCall::kSeconds and names them in its error: a rank that
// failed by itself (it sent its words before returning), or one that sent nothing (dead, hung). Left waiting in
// step 3, a rank joins the outcome agreement for kJoinSeconds only: its peers are there already or failing like
// it, and a dead peer must not cost it a second deadline. After a rank was left waiting once, its later calls on
// this communicator fail at once (the mesh cannot be trusted), telling their peers so.
//
// Time. The agreements wait SHARDRT_COMM_TIMEOUT + kGraceSeconds: a rank that failed in step 3 before its peers'
// first collective waits for them while they time out there (after the deadline), and meets them in step 4. So a
// rank that dies or hangs anywhere in a call costs its peers at most the deadline + kGraceSeconds +
// RollCall::kSeconds (3.5 s past the deadline). Messages (the failing rank's words, the differing argument's
// values) travel only on failure. One rank: no communication.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "capi/roll_call.h"
#include "capi/shardrt.h"
#include "mesh/communicator.h"

namespace shardrt::capi {

enum class CallId : int64_t {
  context_create = 1, mesh_create, sharded_create, sharded_create_points, model_create, model_forward,
  model_backward, model_export, optimizer_create, optimizer_step, train_step, checkpoint_save, checkpoint_load
};
const char* call_name(int64_t id);  // "shardrt_model_forward"; "an unknown call" for a value of no CallId

// The arguments of one call as this rank passed them: named fields compared across the ranks. A number is compared
// and shown as it is; a text (a config, a path, a shape) by a 64-bit digest, and shown (cut to 160 characters) only
// when the ranks differ. `status` is what a difference in the field returns.
class Signature {
 public:
  struct Field {
    const char* name;
    int64_t value;
    std::string shown;
    shardrt_status status;
    bool json = false;  // shown is a JSON document: a difference is reported at its first differing key
  };
  static constexpr int kMaxFields = 12;
  void number(const char* name, int64_t v, shardrt_status status = SHARDRT_ERR_VALUE);
  void text(const char* name, const std::string& v, shardrt_status status = SHARDRT_ERR_VALUE);
  // A JSON document (a config): compared by digest, a difference named by its first differing key.
  void json(const char* name, const nlohmann::json& doc, shardrt_status status = SHARDRT_ERR_VALUE);
  // A value computed by the caller (a digest of loaded weights), shown as `shown`.
  void value(const char* name, int64_t v, std::string shown, shardrt_status status = SHARDRT_ERR_VALUE);
  const std::vector<Field>& fields() const { return fields_; }

 private:
  std::vector<Field> fields_;
};

// 64 bits of `bytes` (std::hash: the same on every rank of one build).
int64_t digest(const void* bytes, size_t n);

class Agreement {
 public:
  static constexpr double kGraceSeconds = 2;
  static constexpr double kJoinSeconds = 1.5;
  // Collective over `comm` (a duplicate is made, under the deadline). `who` names it in messages.
  Agreement(MPI_Comm comm, const std::string& who);
  int size() const { return comm_->size(); }
  int rank() const { return comm_->rank(); }

  // Steps 1-4 above. Throws CapiError (or the body's exception, without agree_errors).
  void run(CallId id, const char* fn, bool agree_errors, const std::function<void(Signature&)>& prepare,
           const std::function<void()>& body);

 private:
  struct Verdict {
    shardrt_status status = SHARDRT_OK;
    std::string message;
  };
  // One all-gather of this rank's record, waiting at most `timeout_s`; the same error on every rank when the
  // records disagree or a rank failed. `waited`: this rank's verdict is a timeout of its own (a roll call note).
  void agree(int64_t seq, CallId id, int phase, const Verdict& mine, bool waited, const Signature* sig,
             const char* fn, double timeout_s);
  // This rank was left waiting in call `seq` (its verdict `mine`): marks the communicator broken, names the
  // peers from their notes, and throws.
  [[noreturn]] void left_waiting(int64_t seq, CallId id, const Verdict& mine, bool waited, const std::string& what);
  [[noreturn]] void throw_first_failure(const std::vector<int64_t>& table, const Verdict& mine, const char* fn);
  [[noreturn]] void throw_differing_field(const std::vector<int64_t>& table, const Signature& sig, int field,
                                          const char* fn);
  std::unique_ptr<Communicator> comm_;
  std::unique_ptr<RollCall> roll_;
  double timeout_s_ = 0;  // the agreements' wait: the deadline + kGraceSeconds
  int64_t calls_ = 0;
  std::string broken_;  // how this rank was left waiting, once it was: later calls fail at once
};

}  // namespace shardrt::capi
