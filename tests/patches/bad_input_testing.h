// The bad-input tables of the patch tests. Each row calls a sharded op with arguments it must refuse and checks,
// on every rank: the exception's exact type, a fragment of its message naming the user-facing op, that the message
// (past the "Kind [rank r]: " prefix) is the same on every rank, and, where the local op refuses the same arguments,
// that it is the local op's message for the global tensor. The layouts the tables run on: the 1-D mesh with the
// extents patterns of patch_testing.h (uneven; a zero-size shard from 3 ranks on), and the 2x2 mesh.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "tests/patches/patch_testing.h"

namespace shardrt::test {

// The message past the "Kind: " or "Kind [rank r]: " prefix that every Error carries.
inline std::string without_rank(const std::string& what) {
  const size_t colon = what.find(": ");
  return colon == std::string::npos ? what : what.substr(colon + 2);
}

// What `call` throws, without the rank prefix; "(no exception)" when it returns.
inline std::string message_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::exception& e) {
    return without_rank(e.what());
  }
  return "(no exception)";
}

// The same string on every rank (compared by length and hash over the world).
inline bool same_string_on_every_rank(const std::string& s) {
  const unsigned long long mine[2] = {s.size(), std::hash<std::string>{}(s)};
  unsigned long long lo[2] = {0, 0}, hi[2] = {0, 0};
  MPI_Allreduce(mine, lo, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(mine, hi, 2, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
  return lo[0] == hi[0] && lo[1] == hi[1];
}

struct BadInput {
  std::string name;
  std::function<void()> call;         // the sharded op with the bad arguments
  std::function<void()> local;        // the local op with the same arguments on the global tensor; empty: the
                                      // local op accepts them (only the patch refuses: MissingShardPatch)
  std::string says;                   // a fragment of the message: the op's name and what is wrong
  std::function<void()> check_type;   // CHECK_THROWS_AS(call(), the expected type)
};

// A row expecting exception type E.
template <typename E>
BadInput rejects(std::string name, std::string says, std::function<void()> call, std::function<void()> local = {}) {
  BadInput b{std::move(name), call, std::move(local), std::move(says), {}};
  b.check_type = [call] { CHECK_THROWS_AS(call(), E); };
  return b;
}

// Runs every row on every rank (the rows' collectives, if any, and the message comparison are collective).
inline void check_rejected(const std::vector<BadInput>& rows) {
  for (const BadInput& b : rows) {
    INFO("bad input: " << b.name);
    b.check_type();
    CHECK_THROWS_WITH(b.call(), Catch::Contains(b.says));
    const std::string got = message_of(b.call);
    INFO("message: " << got);
    CHECK(same_string_on_every_rank(got));
    if (b.local) CHECK(got == message_of(b.local));
  }
}

}  // namespace shardrt::test
