#include "mesh/signature.h"

#include <functional>

#include "mesh/comm_types.h"
#include "runtime/dtype.h"
#include "runtime/errors.h"

namespace shardrt {

namespace {

// Record layout: a fixed header, then two vectors of one entry per rank (-1 where the kind has none).
enum Slot : int64_t { kKind, kSeq, kTransport, kDType, kCount, kParam, kOp, kExtra, kHeader };

std::string list_str(const int64_t* v, int n) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string kind_name(int64_t k) {
  const auto& kinds = signature_kinds();
  return k >= 0 && k < static_cast<int64_t>(kinds.size()) ? kinds[k] : "unknown collective " + std::to_string(k);
}

std::string dtype_str(int64_t d) {
  if (d < 0 || d > static_cast<int64_t>(DType::boolean)) return "none";
  return dtype_name(static_cast<DType>(d));
}

std::string transport_str(int64_t t) {
  switch (static_cast<SignatureTransport>(t)) {
    case SignatureTransport::mpi:
      return "MPI";
    case SignatureTransport::mpi_staged:
      return "MPI through pinned host memory";
    case SignatureTransport::nccl:
      return "NCCL";
  }
  return "transport " + std::to_string(t);
}

std::string op_str(int64_t op) {
  if (op < 0) return "none";
  return std::string(reduce_op_name(static_cast<ReduceOp>(op / 2))) + (op % 2 ? " (f32 accumulate)" : "");
}

// "f32 on ranks 0, 1; f64 on rank 2": ranks grouped by the value they hold, in order of first appearance.
// Returns "" when every rank holds the same value.
std::string split_by_value(const std::vector<std::string>& values) {
  std::vector<std::pair<std::string, std::vector<int>>> groups;
  for (int r = 0; r < static_cast<int>(values.size()); ++r) {
    auto it = groups.begin();
    while (it != groups.end() && it->first != values[r]) ++it;
    if (it == groups.end()) groups.push_back({values[r], {r}});
    else it->second.push_back(r);
  }
  if (groups.size() < 2) return "";
  std::string s;
  for (const auto& [value, ranks] : groups) {
    s += (s.empty() ? "" : "; ") + value + (ranks.size() > 1 ? " on ranks " : " on rank ");
    for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  return s;
}

class Comparison {
 public:
  Comparison(const int64_t* records, int ranks)
      : rec_(records), p_(ranks), stride_(signature_record_size(ranks)) {}

  const int64_t* at(int r) const { return rec_ + r * stride_; }
  const int64_t* vec_a(int r) const { return at(r) + kHeader; }
  const int64_t* vec_b(int r) const { return at(r) + kHeader + p_; }

  // Records "ranks disagree on <what> (...)" when the formatted values differ between ranks.
  void uniform(const std::string& what, const std::function<std::string(int)>& value) {
    std::vector<std::string> v(p_);
    for (int r = 0; r < p_; ++r) v[r] = value(r);
    std::string split = split_by_value(v);
    if (!split.empty()) add(detail::concat("ranks disagree on ", what, " (", split, ")"));
  }
  void scalar(const std::string& what, Slot slot, std::string (*fmt)(int64_t)) {
    uniform(what, [&](int r) { return fmt(at(r)[slot]); });
  }
  void add(std::string s) { diffs_.push_back(std::move(s)); }
  bool any() const { return !diffs_.empty(); }
  std::string joined() const {
    std::string s;
    for (const auto& d : diffs_) s += (s.empty() ? "" : "; ") + d;
    return s;
  }
  int ranks() const { return p_; }

 private:
  const int64_t* rec_;
  int p_;
  int64_t stride_;
  std::vector<std::string> diffs_;
};

std::string number(int64_t v) { return std::to_string(v); }

// all_to_all_v: what rank i sends rank j must be what rank j expects from rank i.
void compare_all_to_all_v(Comparison& c) {
  int shown = 0, total = 0;
  std::string pairs;
  for (int i = 0; i < c.ranks(); ++i)
    for (int j = 0; j < c.ranks(); ++j) {
      int64_t sends = c.vec_a(i)[j], expects = c.vec_b(j)[i];
      if (sends == expects) continue;
      ++total;
      if (shown++ < 4)
        pairs += detail::concat(pairs.empty() ? "" : "; ", "rank ", i, " sends rank ", j, " ", sends,
                                " elements, rank ", j, " expects ", expects);
    }
  if (total > 0)
    c.add(detail::concat("ranks disagree on the counts exchanged (", pairs,
                         total > 4 ? detail::concat("; ", total - 4, " more pairs") : "", ")"));
}

// ring_shift: rank r receives from rank (r - offset) mod P exactly what that rank sends.
void compare_ring_shift(Comparison& c) {
  const int p = c.ranks();
  const int64_t off = c.at(0)[kParam];
  std::string links;
  for (int r = 0; r < p; ++r) {
    int src = static_cast<int>(((r - off) % p + p) % p);
    int64_t expects = c.at(r)[kExtra], sends = c.at(src)[kCount];
    if (src == r || expects == sends) continue;
    links += detail::concat(links.empty() ? "" : "; ", "rank ", r, " expects ", expects, " elements from rank ", src,
                            ", which sends ", sends);
  }
  if (!links.empty()) c.add(detail::concat("ranks disagree on the message sizes (", links, ")"));
}

}  // namespace

const std::vector<std::string>& signature_kinds() {
  static const std::vector<std::string> kinds = {
      "all_reduce", "broadcast",    "barrier",      "all_gather", "all_gather_v",  "reduce_scatter",
      "reduce_scatter_v", "all_to_all", "all_to_all_v", "ring_shift", "halo_exchange", "agree"};
  return kinds;
}

int64_t signature_record_size(int ranks) { return kHeader + 2 * static_cast<int64_t>(ranks); }

std::vector<int64_t> pack_signature(const CallSignature& sig, int64_t seq, int ranks) {
  const auto& kinds = signature_kinds();
  int64_t kind = 0;
  while (kind < static_cast<int64_t>(kinds.size()) && kinds[kind] != sig.kind) ++kind;
  SHARDRT_CHECK(kind < static_cast<int64_t>(kinds.size()), ValueError, "pack_signature: unknown collective '",
                sig.kind, "'");
  SHARDRT_CHECK((sig.a.empty() || static_cast<int>(sig.a.size()) == ranks) &&
                    (sig.b.empty() || static_cast<int>(sig.b.size()) == ranks),
                ValueError, "pack_signature: ", sig.kind, " vectors need one entry per rank (", ranks, ")");
  std::vector<int64_t> rec(static_cast<std::size_t>(signature_record_size(ranks)), -1);
  rec[kKind] = kind;
  rec[kSeq] = seq;
  rec[kTransport] = static_cast<int64_t>(sig.transport);
  rec[kDType] = sig.dtype;
  rec[kCount] = sig.count;
  rec[kParam] = sig.param;
  rec[kOp] = sig.op;
  rec[kExtra] = sig.extra;
  for (std::size_t j = 0; j < sig.a.size(); ++j) rec[kHeader + j] = sig.a[j];
  for (std::size_t j = 0; j < sig.b.size(); ++j) rec[kHeader + ranks + j] = sig.b[j];
  return rec;
}

int64_t record_seq(const int64_t* record) { return record[kSeq]; }

std::optional<std::string> find_signature_mismatch(const int64_t* records, int ranks) {
  Comparison c(records, ranks);
  // A different collective or position makes the other fields incomparable: report only those two.
  c.scalar("the collective", kKind, kind_name);
  c.uniform("the sequence number (a rank skipped or added a collective on this communicator)",
            [&](int r) { return number(c.at(r)[kSeq]); });
  if (c.any()) return c.joined();

  const std::string kind = kind_name(c.at(0)[kKind]);
  const int p = ranks;
  c.scalar("the transport", kTransport, transport_str);
  c.scalar("dtype", kDType, dtype_str);
  if (kind != "ring_shift") c.scalar("the element count", kCount, number);
  const char* param = kind == "broadcast" ? "the root" : kind == "ring_shift" ? "the offset" : "the dim";
  c.scalar(param, kParam, number);
  c.scalar("the reduction", kOp, op_str);
  if (kind != "ring_shift") c.scalar("the elements per slice", kExtra, number);
  if (c.any()) return c.joined();  // the relations below assume the fields above agree

  if (kind == "all_to_all_v") {
    compare_all_to_all_v(c);
  } else if (kind == "ring_shift") {
    compare_ring_shift(c);
  } else {
    const bool halo = kind == "halo_exchange";
    c.uniform(halo ? "the left widths" : "the counts", [&](int r) { return list_str(c.vec_a(r), p); });
    c.uniform(halo ? "the right widths" : "the second counts", [&](int r) { return list_str(c.vec_b(r), p); });
  }
  if (c.any()) return c.joined();
  return std::nullopt;
}

}  // namespace shardrt
