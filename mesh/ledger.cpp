#include "mesh/ledger.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace shardrt {

CommLedger::Scope::~Scope() {
  if (ledger_ == nullptr) return;
  std::lock_guard<std::mutex> lock(ledger_->mu_);
  if (ledger_->open_.empty()) return;
  ledger_->open_.pop_back();
  ledger_->path_.clear();
  for (const auto& s : ledger_->open_) ledger_->path_ += (ledger_->path_.empty() ? "" : ".") + s;
}

CommLedger::Scope CommLedger::scope(const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.push_back(label);
  path_ += (path_.empty() ? "" : ".") + label;
  return Scope(this);
}

std::string CommLedger::current_scope() const {
  std::lock_guard<std::mutex> lock(mu_);
  return path_;
}

void CommLedger::record(const std::string& kind, const std::string& axis, int64_t bytes_sent) {
  std::lock_guard<std::mutex> lock(mu_);
  Counts& c = counts_[Key{path_, kind, axis}];
  c.calls += 1;
  c.bytes_sent += bytes_sent;
}

CommLedger::Counts CommLedger::lookup(const std::string& scope, const std::string& kind,
                                      const std::string& axis) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = counts_.find(Key{scope, kind, axis});
  return it == counts_.end() ? Counts{} : it->second;
}

int64_t CommLedger::calls(const std::string& scope, const std::string& kind, const std::string& axis) const {
  return lookup(scope, kind, axis).calls;
}
int64_t CommLedger::bytes(const std::string& scope, const std::string& kind, const std::string& axis) const {
  return lookup(scope, kind, axis).bytes_sent;
}

int64_t CommLedger::total_calls() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [k, c] : counts_) n += c.calls;
  return n;
}
int64_t CommLedger::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  int64_t n = 0;
  for (const auto& [k, c] : counts_) n += c.bytes_sent;
  return n;
}

std::vector<LedgerEntry> CommLedger::entries() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<LedgerEntry> out;
  for (const auto& [k, c] : counts_)
    out.push_back({std::get<0>(k), std::get<1>(k), std::get<2>(k), c.calls, c.bytes_sent});
  return out;  // std::map already orders by (scope, kind, axis)
}

std::string CommLedger::table() const {
  auto rows = entries();
  std::size_t ws = 5, wk = 4, wa = 4;
  for (const auto& e : rows) {
    ws = std::max(ws, std::max<std::size_t>(e.scope.size(), 1));
    wk = std::max(wk, e.kind.size());
    wa = std::max(wa, e.axis.size());
  }
  std::string out;
  char line[512];
  auto row = [&](const std::string& s, const std::string& k, const std::string& a, const std::string& c,
                 const std::string& b) {
    std::snprintf(line, sizeof line, "%-*s  %-*s  %-*s  %8s  %14s\n", static_cast<int>(ws), s.c_str(),
                  static_cast<int>(wk), k.c_str(), static_cast<int>(wa), a.c_str(), c.c_str(), b.c_str());
    out += line;
  };
  row("scope", "kind", "axis", "calls", "bytes_sent");
  for (const auto& e : rows)
    row(e.scope.empty() ? "-" : e.scope, e.kind, e.axis, std::to_string(e.calls), std::to_string(e.bytes_sent));
  return out;
}

std::string CommLedger::to_json(int indent) const {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& e : entries())
    arr.push_back(
        {{"scope", e.scope}, {"kind", e.kind}, {"axis", e.axis}, {"calls", e.calls}, {"bytes_sent", e.bytes_sent}});
  return arr.dump(indent);
}

void CommLedger::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  counts_.clear();
}

std::shared_ptr<CommLedger> default_ledger() {
  static auto ledger = std::make_shared<CommLedger>();
  return ledger;
}

}  // namespace shardrt
