// The failure probe's training-step scenarios (failure_probe_step.cpp).
#pragma once
#include <functional>
#include <string>

namespace shardrt::probe {

// Runs one training step of a small sharded model on 3 ranks (a 1 x 3 mesh of MPI_COMM_WORLD) in which the victim
// fails (`fault`: "kill" or "hang") at `where`: "backward" (inside a sharded linear's backward) or "bucket" (inside
// a deferred grad bucket's all_reduce). `wait_dead` blocks until the victim has died (kill: the survivors call it
// at the failure point). Returns false for an unknown `where`; whatever the survivors hit is thrown.
bool run_step_fault(const std::string& fault, const std::string& where, bool victim,
                    const std::function<void()>& wait_dead);

}  // namespace shardrt::probe
