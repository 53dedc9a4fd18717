// Checking, before any work is done, that a checkpoint directory can be written: a long run that only finds out at
// its first save (after hours) that the folder is read-only, is a file, or lies under one, has lost those hours.
#pragma once
#include <string>

#include "mesh/mesh.h"

namespace shardrt {

// Collective over mesh.flat(). Rank 0 creates the parent of `dir` (with its parents) when missing, refuses a `dir`
// that exists and is neither empty nor a ShardRT checkpoint (as save_checkpoint would), and makes and removes what a
// save's first steps make: a staging directory beside `dir` (named like a save's, so a kill in between leaves
// only what the next save clears) with one durably written file in it. Any failure is the same IoError on every
// rank, naming `dir` and the system's reason. Nothing at `dir` itself is touched.
void check_checkpoint_writable(const Mesh& mesh, const std::string& dir);

}  // namespace shardrt
