// Consistent validation across ranks. A check that fails on some ranks only (a shard too thin for a halo, an
// extent that does not match) would leave the others blocked in the next collective; agreeing on the verdict
// first makes every rank throw the same typed error together.
#pragma once
#include <string>

#include "mesh/communicator.h"
#include "runtime/errors.h"

namespace shardrt {

// Every rank of `comm` calls this with its own verdict. When any rank's is false, every rank throws E with the
// message of the lowest failing rank and the list of failing ranks. Costs one small all-gather (ledger kind
// "agree"), plus two broadcasts of the message on failure.
template <typename E = ValueError>
void agree_or_throw(const Communicator& comm, bool ok_here, const std::string& msg) {
  if (auto agreed = comm.agree(ok_here, msg)) throw E(*agreed);
}

}  // namespace shardrt
