// The agreement of collective C API calls (capi/agreement.h): one record per rank, all-gathered under the deadline.
#include "capi/agreement.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <string_view>
#include <tuple>

#include "capi/objects.h"
#include "mesh/deadline.h"
#include "runtime/errors.h"

namespace shardrt::capi {

namespace {

// seq, call, phase, status, field count, unused, then the fields' values.
constexpr int kHeader = 6;
constexpr int kRecord = kHeader + Signature::kMaxFields;
constexpr size_t kShownChars = 160;

const char* const kCallNames[] = {"",
                                  "shardrt_context_create",
                                  "shardrt_mesh_create",
                                  "shardrt_sharded_create",
                                  "shardrt_sharded_create_points",
                                  "shardrt_model_create",
                                  "shardrt_model_forward",
                                  "shardrt_model_backward",
                                  "shardrt_model_export",
                                  "shardrt_optimizer_create",
                                  "shardrt_optimizer_step",
                                  "shardrt_train_step",
                                  "shardrt_checkpoint_save",
                                  "shardrt_checkpoint_load"};

// "rank 1" or "ranks 0, 2"
std::string ranks_str(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

// The ranks grouped by the value `key` gives each, in order of first appearance.
template <typename Key>
std::vector<std::vector<int>> group_ranks(int p, const Key& key) {
  std::vector<std::vector<int>> groups;
  std::vector<decltype(key(0))> seen;
  for (int r = 0; r < p; ++r) {
    size_t g = 0;
    while (g < seen.size() && !(seen[g] == key(r))) ++g;
    if (g == seen.size()) seen.push_back(key(r)), groups.emplace_back();
    groups[g].push_back(r);
  }
  return groups;
}

// Every leaf of a JSON document by its dotted path ("optimizer.lr"), as JSON text.
void flatten(const nlohmann::json& j, const std::string& path, std::map<std::string, std::string>& out) {
  if (j.is_object() && !j.empty()) {
    for (auto it = j.begin(); it != j.end(); ++it) flatten(*it, path.empty() ? it.key() : path + "." + it.key(), out);
    return;
  }
  out[path] = j.dump();
}

// "at optimizer.lr: 0.01 on ranks 0, 2; 0.1 on rank 1": the first key whose values differ between the groups.
std::string json_difference(const std::vector<std::string>& docs, const std::vector<std::vector<int>>& groups) {
  std::vector<std::map<std::string, std::string>> flat(groups.size());
  std::map<std::string, int> keys;
  for (size_t g = 0; g < groups.size(); ++g) {
    const nlohmann::json j = nlohmann::json::parse(docs[static_cast<size_t>(groups[g][0])], nullptr, false);
    if (j.is_discarded()) return "";
    flatten(j, "", flat[g]);
    for (const auto& kv : flat[g]) keys[kv.first] = 0;
  }
  for (const auto& kv : keys) {
    auto value = [&](size_t g) {
      const auto it = flat[g].find(kv.first);
      return it == flat[g].end() ? std::string("(absent)") : it->second;
    };
    bool differs = false;
    for (size_t g = 1; g < groups.size(); ++g) differs = differs || value(g) != value(0);
    if (!differs) continue;
    std::string s = "at " + kv.first + ": ";
    for (size_t g = 0; g < groups.size(); ++g) s += (g ? "; " : "") + value(g) + " on " + ranks_str(groups[g]);
    return s;
  }
  return "";
}

}  // namespace

const char* call_name(int64_t id) {
  const int64_t n = static_cast<int64_t>(sizeof(kCallNames) / sizeof(kCallNames[0]));
  return id >= 1 && id < n ? kCallNames[id] : "an unknown call";
}

int64_t digest(const void* bytes, size_t n) {
  return static_cast<int64_t>(std::hash<std::string_view>{}(std::string_view(static_cast<const char*>(bytes), n)));
}

void Signature::number(const char* name, int64_t v, shardrt_status status) {
  SHARDRT_CHECK(fields_.size() < kMaxFields, ValueError, "Signature: more than ", kMaxFields, " fields");
  fields_.push_back({name, v, std::to_string(v), status});
}

void Signature::text(const char* name, const std::string& v, shardrt_status status) {
  SHARDRT_CHECK(fields_.size() < kMaxFields, ValueError, "Signature: more than ", kMaxFields, " fields");
  fields_.push_back({name, digest(v.data(), v.size()), "'" + v + "'", status});
}

void Signature::json(const char* name, const nlohmann::json& doc, shardrt_status status) {
  SHARDRT_CHECK(fields_.size() < kMaxFields, ValueError, "Signature: more than ", kMaxFields, " fields");
  const std::string text = doc.dump();
  fields_.push_back({name, digest(text.data(), text.size()), text, status, true});
}

void Signature::value(const char* name, int64_t v, std::string shown, shardrt_status status) {
  SHARDRT_CHECK(fields_.size() < kMaxFields, ValueError, "Signature: more than ", kMaxFields, " fields");
  fields_.push_back({name, v, std::move(shown), status});
}

Agreement::Agreement(MPI_Comm comm, const std::string& who) {
  CommOptions opts;
  timeout_s_ = default_comm_timeout() + kGraceSeconds;
  opts.timeout_s = timeout_s_;
  opts.failure = FailurePolicy::throw_error;
  opts.ledger = std::make_shared<CommLedger>();  // not the mesh's: its counts are the model's traffic
  opts.cuda_device = CommOptions::no_gpu;
  comm_ = std::make_unique<Communicator>(comm, who, opts);
  roll_ = std::make_unique<RollCall>(comm_->mpi_comm(), comm_->rank(), comm_->size());
}

void Agreement::run(CallId id, const char* fn, bool agree_errors, const std::function<void(Signature&)>& prepare,
                    const std::function<void()>& body) {
  const int64_t seq = ++calls_;
  if (!broken_.empty()) {
    // The peers that still trust this communicator would wait for this rank: tell them it will not come.
    const std::string words = detail::concat(fn, ": this mesh's ranks lost each other at an earlier call (", broken_,
                                             "); it cannot be used again: destroy it and create a new one");
    roll_->tell_everyone({seq, static_cast<int64_t>(id), SHARDRT_ERR_COMM, 0, words});
    throw CapiError{SHARDRT_ERR_COMM, words};
  }
  Signature sig;
  Verdict ready;
  try {
    prepare(sig);
  } catch (...) {
    std::tie(ready.status, ready.message) = describe_current_exception(fn);
  }
  agree(seq, id, 0, ready, false, &sig, fn, timeout_s_);
  Verdict done;
  bool waited = false;
  try {
    body();
  } catch (const CommError&) {  // a collective of the call failed: this rank was left waiting
    waited = true;
    std::tie(done.status, done.message) = describe_current_exception(fn);
  } catch (...) {
    std::tie(done.status, done.message) = describe_current_exception(fn);
  }
  if (!agree_errors) {
    if (waited) left_waiting(seq, id, done, true, done.message);
    if (done.status == SHARDRT_OK) return;
    // Failed by itself: its peers, left waiting in the call's collectives, will want to know who and why.
    roll_->tell_everyone({seq, static_cast<int64_t>(id), done.status, 0, done.message});
    throw CapiError{done.status, done.message};
  }
  if (waited) broken_ = detail::concat("call #", seq, ", ", fn, ", timed out");
  // Left waiting, join the others for a short while only: the ones that failed early are there already.
  agree(seq, id, 1, done, waited, nullptr, fn, waited ? kJoinSeconds : timeout_s_);
}

void Agreement::left_waiting(int64_t seq, CallId id, const Verdict& mine, bool waited, const std::string& what) {
  broken_ = detail::concat("call #", seq, ", ", call_name(static_cast<int64_t>(id)), ", timed out");
  const std::vector<Note> notes = roll_->listen({seq, static_cast<int64_t>(id), mine.status, waited ? 1 : 0, mine.message});
  // A failure of its own stays this rank's status; a wait is SHARDRT_ERR_COMM.
  throw CapiError{waited ? SHARDRT_ERR_COMM : mine.status, what + roll_->blame(notes, seq)};
}

void Agreement::agree(int64_t seq, CallId id, int phase, const Verdict& mine, bool waited, const Signature* sig,
                      const char* fn, double timeout_s) {
  const int p = size();
  if (p == 1) {
    if (mine.status != SHARDRT_OK) throw CapiError{mine.status, mine.message};
    return;
  }
  Tensor rec = Tensor::empty({kRecord}, DType::i64), all = Tensor::empty({int64_t{kRecord} * p}, DType::i64);
  int64_t* r = rec.data<int64_t>();
  std::fill(r, r + kRecord, 0);
  r[0] = seq, r[1] = static_cast<int64_t>(id), r[2] = phase, r[3] = static_cast<int64_t>(mine.status);
  if (sig) {
    r[4] = static_cast<int64_t>(sig->fields().size());
    for (size_t k = 0; k < sig->fields().size(); ++k) r[kHeader + k] = sig->fields()[k].value;
  }
  comm_->set_timeout(timeout_s);
  try {
    comm_->all_gather(rec, all);
  } catch (const CommError& e) {
    // A peer never came (dead, hung, or still waiting elsewhere): this rank's own failure first, if it had one.
    const std::string what = detail::concat(mine.status != SHARDRT_OK ? mine.message + "; then " : std::string(fn) + ": ",
                                            "the ranks' agreement ", phase ? "on the outcome" : "before acting",
                                            " (call #", seq, ") failed: ", e.what());
    left_waiting(seq, id, mine, waited || mine.status == SHARDRT_OK, what);
  }
  const int64_t* a = all.data<int64_t>();
  const std::vector<int64_t> table(a, a + int64_t{kRecord} * p);
  auto at = [&](int q, int k) { return table[static_cast<size_t>(q) * kRecord + static_cast<size_t>(k)]; };

  // The same call on every rank: call number, call and phase.
  const auto calls = group_ranks(p, [&](int q) { return std::vector<int64_t>{at(q, 0), at(q, 1), at(q, 2)}; });
  if (calls.size() > 1) {
    std::string where;
    for (const auto& g : calls)
      where += detail::concat(where.empty() ? "" : "; ", ranks_str(g), " at call #", at(g[0], 0), " (",
                              call_name(at(g[0], 1)), at(g[0], 2) ? ", its outcome" : "", ")");
    throw CapiError{SHARDRT_ERR_STATE,
                    detail::concat(fn, ": the ranks are at different collective calls: ", where,
                                   "; every rank must make the same collective calls in the same order (a rank that "
                                   "failed a call alone and called again, or skipped one, is a call ahead or behind)")};
  }
  for (int q = 0; q < p; ++q)
    if (at(q, 3) != SHARDRT_OK) throw_first_failure(table, mine, fn);
  if (!sig) return;
  for (int q = 1; q < p; ++q)
    SHARDRT_CHECK(at(q, 4) == at(0, 4), ValueError, fn, ": the ranks' arguments differ (rank 0 states ", at(0, 4),
                  " signature fields, rank ", q, " ", at(q, 4), ")");
  for (int k = 0; k < static_cast<int>(sig->fields().size()); ++k)
    for (int q = 1; q < p; ++q)
      if (at(q, kHeader + k) != at(0, kHeader + k)) throw_differing_field(table, *sig, k, fn);
}

void Agreement::throw_first_failure(const std::vector<int64_t>& table, const Verdict& mine, const char* fn) {
  const int p = size();
  std::vector<int> failed;
  for (int q = 0; q < p; ++q)
    if (table[static_cast<size_t>(q) * kRecord + 3] != SHARDRT_OK) failed.push_back(q);
  // The cause rather than its echo: the lowest rank whose failure is not a timed-out collective (ranks left
  // waiting by the one that failed), else the lowest failing rank.
  int first = failed.front();
  for (int q : failed)
    if (table[static_cast<size_t>(q) * kRecord + 3] != SHARDRT_ERR_COMM) {
      first = q;
      break;
    }
  // Every rank reports that rank's own words, so the errors are identical everywhere.
  Tensor len = Tensor::empty({1}, DType::i64);
  len.data<int64_t>()[0] = rank() == first ? static_cast<int64_t>(mine.message.size()) : 0;
  comm_->broadcast(len, first);
  Tensor text = Tensor::empty({len.data<int64_t>()[0]}, DType::u8);
  if (rank() == first && !mine.message.empty()) std::memcpy(text.raw_data(), mine.message.data(), mine.message.size());
  if (text.numel() > 0) comm_->broadcast(text, first);
  std::string words(static_cast<const char*>(text.raw_data()), static_cast<size_t>(text.numel()));
  if (words.empty()) words = std::string(fn) + ": failed";
  // Each failing rank's status, ranks of one status together: "rank 1 SHARDRT_ERR_IO, ranks 0, 2 SHARDRT_ERR_COMM".
  const auto by_status = group_ranks(static_cast<int>(failed.size()), [&](int i) {
    return table[static_cast<size_t>(failed[static_cast<size_t>(i)]) * kRecord + 3];
  });
  std::string list, statuses;
  for (int q : failed) list += (list.empty() ? "" : ", ") + std::to_string(q);
  for (const auto& g : by_status) {
    std::vector<int> ranks;
    for (int i : g) ranks.push_back(failed[static_cast<size_t>(i)]);
    statuses += detail::concat(statuses.empty() ? "" : ", ", ranks_str(ranks), " ",
                               shardrt_status_name(static_cast<int>(table[static_cast<size_t>(ranks[0]) * kRecord + 3])));
  }
  throw CapiError{static_cast<shardrt_status>(table[static_cast<size_t>(first) * kRecord + 3]),
                  detail::concat(words, " [quoted from rank ", first, "; failed on rank(s) ", list, " of ", p, ": ",
                                 statuses, "]")};
}

void Agreement::throw_differing_field(const std::vector<int64_t>& table, const Signature& sig, int field,
                                      const char* fn) {
  const int p = size();
  // Each rank's words for the field, gathered only now that they differ.
  const std::string& shown = sig.fields()[static_cast<size_t>(field)].shown;
  Tensor len = Tensor::empty({1}, DType::i64), lens = Tensor::empty({p}, DType::i64);
  len.data<int64_t>()[0] = static_cast<int64_t>(shown.size());
  comm_->all_gather(len, lens);
  std::vector<int64_t> counts(lens.data<int64_t>(), lens.data<int64_t>() + p);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor mine = Tensor::empty({static_cast<int64_t>(shown.size())}, DType::u8), words = Tensor::empty({total}, DType::u8);
  if (!shown.empty()) std::memcpy(mine.raw_data(), shown.data(), shown.size());
  comm_->all_gather_v(mine, words, counts);
  std::vector<std::string> each;
  int64_t off = 0;
  for (int q = 0; q < p; ++q) {
    each.emplace_back(static_cast<const char*>(words.raw_data()) + off, static_cast<size_t>(counts[q]));
    off += counts[q];
  }
  const auto groups =
      group_ranks(p, [&](int q) { return table[static_cast<size_t>(q) * kRecord + kHeader + static_cast<size_t>(field)]; });
  const Signature::Field& f = sig.fields()[static_cast<size_t>(field)];
  std::string values = f.json ? json_difference(each, groups) : "";
  if (values.empty())
    for (const auto& g : groups) {
      const std::string& v = each[static_cast<size_t>(g[0])];
      values += (values.empty() ? "" : "; ") + (v.size() > kShownChars ? v.substr(0, kShownChars) + "..." : v) +
                " on " + ranks_str(g);
    }
  throw CapiError{f.status, detail::concat(fn, ": the ranks disagree on ", f.name, ": ", values,
                                           "; a collective call takes the same arguments on every rank")};
}

}  // namespace shardrt::capi
