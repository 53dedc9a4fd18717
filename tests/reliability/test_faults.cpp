// Faults of the filesystem under a run (issue 13, "Faults"; docs/reliability.md §4): a checkpoint save into a full
// disk (a file-size limit, and a real filesystem with no room left), an unwritable checkpoint folder, and a weights file replaced by rename or truncated in place while a model or
// a loaded file holds it. Each must be a clear IoError on every rank, or no effect at all, and lose nothing.
// (The kills and hangs inside collectives, backward, the grad buckets and a training run's save are the failure
// probe's and faults_train_save.sh's: they need whole jobs to die.)
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "mesh/mesh.h"
#include "models/layers.h"
#include "optim/checkpoint.h"
#include "optim/checkpoint_check.h"
#include "runtime/errors.h"
#include "runtime/weights.h"
#include "tests/optim/checkpoint_testing.h"
#include "tests/support/world.h"

using namespace shardrt;
using namespace shardrt::test;
namespace stdfs = std::filesystem;

namespace {


// Every rank threw an E whose message holds each of `needles`.
template <typename E>
void require_error_everywhere(const std::function<void()>& call, const std::vector<std::string>& needles) {
  int threw = 0, found = 1;
  std::string message;
  try {
    call();
  } catch (const E& e) {
    threw = 1;
    message = e.what();
    for (const std::string& n : needles) found &= message.find(n) != std::string::npos;
  }
  INFO("rank " << world_rank() << ": " << message);
  int all_threw = 0, all_found = 0;
  MPI_Allreduce(&threw, &all_threw, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&found, &all_found, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  CHECK(all_threw == 1);
  CHECK(all_found == 1);
}

// Names in `dir`'s parent left by saves of `dir` (staging or moved-away directories), and files in `dir` that are
// not a checkpoint's own (a rank file or the index): a temporary "*.tmp.<pid>" would look like a half-written file.
std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  const stdfs::path p(dir);
  for (const auto& e : stdfs::directory_iterator(p.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(p.filename().string() + ".tmp-") || name.starts_with(p.filename().string() + ".old-"))
      out.push_back(name);
  }
  if (stdfs::exists(dir))
    for (const auto& e : stdfs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name != "index.json" && !(name.starts_with("rank-") && name.ends_with(".safetensors"))) out.push_back(name);
    }
  return out;
}

// This rank's share of `tensors` (uneven, as an optimizer's arena shard), saved to `dir` with state {"v": version}.
void save_version(const Mesh& mesh, const std::string& dir, const std::vector<GlobalTensor>& tensors, int version) {
  const auto [lo, hi] = uneven_arena_range(arena_numel(tensors), mesh.rank(), mesh.size());
  CheckpointContents c = arena_contents(tensors, lo, hi);
  c.state = {{"v", version}};
  save_checkpoint(mesh, dir, c);
}

// Loads every tensor whole and checks it bit for bit against `tensors`, and the state's version.
bool loads_as(const Mesh& mesh, const std::string& dir, const std::vector<GlobalTensor>& tensors, int version) {
  std::vector<RangeRequest> rq;
  for (const auto& t : tensors) rq.push_back({t.name, 0, shape_numel(t.shape), t.values.dtype(), t.shape});
  const LoadedCheckpoint got = load_checkpoint(mesh, dir, rq);
  bool same = got.state.value("v", -1) == version;
  for (std::size_t i = 0; i < rq.size(); ++i) same &= same_bits(got.values[i], flat_slice(tensors[i], 0, rq[i].count));
  return same;
}

// Lowers this process's file-size limit (RLIMIT_FSIZE) for its lifetime, with SIGXFSZ ignored, so a write past the
// limit fails with EFBIG as it would on a full disk (without a disk to fill: a test cannot fill a shared one).
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved_) == 0);
    previous_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    rlimit lowered = saved_;
    lowered.rlim_cur = bytes;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &lowered) == 0);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    ::signal(SIGXFSZ, previous_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  sighandler_t previous_handler_;
};

// Whether this process maps any part of `path` (its /proc/self/maps line names the file).
bool is_mapped(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  const std::string canonical = stdfs::canonical(path).string();
  for (std::string line; std::getline(maps, line);)
    if (line.ends_with(canonical) || line.find(canonical + " ") != std::string::npos) return true;
  return false;
}

std::map<std::string, Tensor> linear_weights(double version) {
  // 256 x 64 f32 = 64 KiB of weight: many pages, so a mapping that survived a truncation would fault on them.
  return {{"weight", known_values({256, 64}, DType::f32, version, 0.25)},
          {"bias", known_values({256}, DType::f32, version, 0.75)}};
}

}  // namespace

TEST_CASE("faults: a checkpoint save onto a full disk fails on every rank, naming the file; the previous one stays",
          "[faults]") {
  SharedTempDir tmp("shardrt-faults");
  const std::string dir = tmp.path + "/ckpt";
  const Mesh mesh(MPI_COMM_WORLD, -1, 1);
  // About 1 MiB of f32 in all: rank 0's file is more than 64 KiB on any number of ranks of this suite.
  const std::vector<GlobalTensor> v1 = writer_tensors(1, 1), v2 = writer_tensors(1, 2);
  save_version(mesh, dir, v1, 1);
  REQUIRE(loads_as(mesh, dir, v1, 1));
  require_error_everywhere<IoError>(
      [&] {
        // Rank 0 only: the others' writes succeed and the save must still fail everywhere.
        std::optional<FileSizeLimit> full;
        if (mesh.rank() == 0) full.emplace(64 << 10);
        save_version(mesh, dir, v2, 2);
      },
      {"rank-00000.safetensors", std::system_category().message(EFBIG), "disk full", "the previous file is untouched"});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(loads_as(mesh, dir, v1, 1));
  if (world_rank() == 0) CHECK(leftovers(dir).empty());
  // Once there is room again, the next save goes through and replaces it.
  save_version(mesh, dir, v2, 2);
  CHECK(loads_as(mesh, dir, v2, 2));
  if (world_rank() == 0) CHECK(leftovers(dir).empty());
}

// A tmpfs of `bytes` mounted on `dir` by rank 0, for the test's lifetime: a filesystem that really runs out of room
// (ENOSPC from write, the errno of a full disk), which no shared disk of a test machine can be made to do. Mounting
// needs root with CAP_SYS_ADMIN; where it is refused, mounted() is false on every rank.
class SmallFilesystem {
 public:
  SmallFilesystem(const std::string& dir, int64_t bytes) : dir_(dir) {
    int ok = 0;
    if (world_rank() == 0) {
      stdfs::create_directories(dir);
      ok = ::mount("tmpfs", dir.c_str(), "tmpfs", 0, ("size=" + std::to_string(bytes)).c_str()) == 0;
      if (!ok) refusal_ = std::system_category().message(errno);
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    mounted_ = ok == 1;
  }
  // Gives it room again (a remount keeps the files).
  void resize(int64_t bytes) {
    int ok = 1;
    if (world_rank() == 0)
      ok = ::mount("tmpfs", dir_.c_str(), "tmpfs", MS_REMOUNT, ("size=" + std::to_string(bytes)).c_str()) == 0;
    MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    REQUIRE(ok == 1);
  }
  ~SmallFilesystem() {
    if (mounted_ && world_rank() == 0) ::umount2(dir_.c_str(), MNT_DETACH);  // detached: open files do not block it
  }
  SmallFilesystem(const SmallFilesystem&) = delete;
  SmallFilesystem& operator=(const SmallFilesystem&) = delete;
  bool mounted() const { return mounted_; }
  const std::string& refusal() const { return refusal_; }

 private:
  std::string dir_, refusal_;
  bool mounted_ = false;
};

TEST_CASE("faults: a checkpoint save onto a filesystem with no room left (ENOSPC) fails on every rank; the previous "
          "one stays and the next save, with room again, goes through",
          "[faults]") {
  SharedTempDir tmp("shardrt-faults");
  // 1.5 MiB: the first checkpoint (about 1 MiB) fits, a second beside it (the save writes its staging copy before it
  // replaces the first) does not.
  SmallFilesystem small(tmp.path + "/small", 3 << 19);
  if (!small.mounted()) {
    WARN("skipped: mounting a 1.5 MiB tmpfs was refused (needs root with CAP_SYS_ADMIN): " << small.refusal());
    return;
  }
  const std::string dir = tmp.path + "/small/ckpt";
  const Mesh mesh(MPI_COMM_WORLD, -1, 1);
  const std::vector<GlobalTensor> v1 = writer_tensors(1, 1), v2 = writer_tensors(1, 2);
  save_version(mesh, dir, v1, 1);
  REQUIRE(loads_as(mesh, dir, v1, 1));
  // Which rank's file meets the full filesystem depends on the order the ranks write in; every rank must fail the
  // same way, naming a rank file and the errno, with the advice.
  require_error_everywhere<IoError>([&] { save_version(mesh, dir, v2, 2); },
                                    {".safetensors", std::system_category().message(ENOSPC), "disk full",
                                     "the previous file is untouched"});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(loads_as(mesh, dir, v1, 1));
  if (world_rank() == 0) CHECK(leftovers(dir).empty());
  small.resize(4 << 20);
  save_version(mesh, dir, v2, 2);
  CHECK(loads_as(mesh, dir, v2, 2));
  if (world_rank() == 0) CHECK(leftovers(dir).empty());
  MPI_Barrier(MPI_COMM_WORLD);  // every rank done with the files before rank 0 unmounts
}

TEST_CASE("faults: the index written onto a full disk fails the save on every rank; the previous one stays",
          "[faults]") {
  if (world_size() < 2) {
    WARN("skipped: needs two ranks (rank 0 must own nothing, so that the index is its only large write)");
    return;
  }
  SharedTempDir tmp("shardrt-faults");
  const std::string dir = tmp.path + "/ckpt";
  const Mesh mesh(MPI_COMM_WORLD, -1, 1);
  const std::vector<GlobalTensor> v1 = optimizer_like_tensors(1.0), v2 = optimizer_like_tensors(2.0);
  save_version(mesh, dir, v1, 1);
  // Ranks 1.. own everything; rank 0 writes an empty rank file (under 100 bytes), then the index (eleven tensors:
  // kilobytes), which its 512-byte limit stops.
  const int owners = mesh.size() - 1;
  CheckpointContents c;
  if (mesh.rank() > 0) {
    const int64_t total = arena_numel(v2);
    const int64_t lo = total * (mesh.rank() - 1) / owners, hi = total * mesh.rank() / owners;
    c = arena_contents(v2, lo, hi);
  }
  c.state = {{"v", 2}};
  require_error_everywhere<IoError>(
      [&] {
        std::optional<FileSizeLimit> full;
        if (mesh.rank() == 0) full.emplace(512);
        save_checkpoint(mesh, dir, c);
      },
      {"index.json", std::system_category().message(EFBIG), "disk full"});
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(loads_as(mesh, dir, v1, 1));
  if (world_rank() == 0) CHECK(leftovers(dir).empty());
}

TEST_CASE("faults: an unwritable checkpoint folder is an IoError on every rank, at the check before training and at a "
          "save", "[faults]") {
  SharedTempDir tmp("shardrt-faults");
  const Mesh mesh(MPI_COMM_WORLD, -1, 1);
  const std::vector<GlobalTensor> v1 = optimizer_like_tensors(1.0);
  if (world_rank() == 0) std::ofstream(tmp.path + "/a-file") << "not a directory";
  MPI_Barrier(MPI_COMM_WORLD);

  SECTION("a folder under a regular file (ENOTDIR, which stops root too)") {
    const std::string dir = tmp.path + "/a-file/ckpt";
    const std::string reason = std::system_category().message(ENOTDIR);
    require_error_everywhere<IoError>([&] { check_checkpoint_writable(mesh, dir); },
                                      {"the checkpoint directory '" + dir + "' cannot be written", reason});
    require_error_everywhere<IoError>([&] { save_version(mesh, dir, v1, 1); }, {dir, reason});
  }
  SECTION("a folder that is a regular file") {
    const std::string dir = tmp.path + "/a-file";
    require_error_everywhere<IoError>([&] { check_checkpoint_writable(mesh, dir); },
                                      {"cannot be written", "exists and is not a directory"});
  }
  SECTION("a folder on a filesystem that refuses new entries (sysfs)") {
    // /sys refuses mkdir even to root (EPERM); where it does not (no sysfs), there is nothing to check.
    const bool refuses = ::mkdir("/sys/shardrt-faults-probe", 0755) != 0;
    if (!refuses) ::rmdir("/sys/shardrt-faults-probe");
    if (refuses) {
      require_error_everywhere<IoError>([&] { check_checkpoint_writable(mesh, "/sys/shardrt-ckpt"); },
                                        {"'/sys/shardrt-ckpt' cannot be written", "cannot create the directory"});
    } else {
      WARN("skipped: /sys accepts new directories here");
    }
  }
  SECTION("a writable folder passes and leaves nothing behind") {
    const std::string dir = tmp.path + "/new/deeper/ckpt";
    check_checkpoint_writable(mesh, dir);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(stdfs::is_directory(tmp.path + "/new/deeper"));  // the parent is made
    CHECK_FALSE(stdfs::exists(dir));                        // the folder itself is the first save's to make
    CHECK(leftovers(dir).empty());
    save_version(mesh, dir, v1, 1);
    check_checkpoint_writable(mesh, dir);  // an existing checkpoint is fine (a resumed run saves over it)
    CHECK(loads_as(mesh, dir, v1, 1));
    if (world_rank() == 0) CHECK(leftovers(dir).empty());
  }
}

TEST_CASE("faults: weights replaced by rename or truncated in place while loaded", "[faults]") {
  SharedTempDir tmp("shardrt-faults");
  // Each rank its own file: ranks load independently, and each truncates only what it loaded.
  const std::string path = tmp.path + "/linear-" + std::to_string(world_rank()) + ".safetensors";
  const auto old_values = linear_weights(1.0), new_values = linear_weights(2.0);
  save_weights(path, old_values);

  SECTION("a model's parameters are copies: the mapping is gone once loaded, so neither a rename nor a truncation "
          "can reach them") {
    models::Linear model(64, 256, true, DType::f32);
    model.load_state_dict(load_weights(path).tensors, true, path);
    CHECK_FALSE(is_mapped(path));  // load_state_dict copied; the LoadedWeights and its mapping died with the statement
    save_weights(tmp.path + "/other-" + std::to_string(world_rank()), new_values);
    REQUIRE(::rename((tmp.path + "/other-" + std::to_string(world_rank())).c_str(), path.c_str()) == 0);
    CHECK(same_bits(model.weight, old_values.at("weight")));
    REQUIRE(::truncate(path.c_str(), 0) == 0);  // in place: a mapping of it would now SIGBUS on its pages
    CHECK(same_bits(model.weight, old_values.at("weight")));
    CHECK(same_bits(model.bias, old_values.at("bias")));
    // And the truncated file is a clear error for the next reader, not a crash.
    require_error_everywhere<IoError>([&] { (void)load_weights(path); }, {path});
  }
  SECTION("loaded tensors held across a rename keep the old file's numbers (the old inode stays mapped)") {
    const LoadedWeights held = load_weights(path);
    CHECK(is_mapped(path));  // zero-copy: the tensors view the file's pages
    save_weights(path, new_values);  // a new file renamed over the old name, as save_safetensors always does
    CHECK(same_bits(held.tensors.at("weight"), old_values.at("weight")));
    CHECK(same_bits(held.tensors.at("bias"), old_values.at("bias")));
    const LoadedWeights fresh = load_weights(path);
    CHECK(same_bits(fresh.tensors.at("weight"), new_values.at("weight")));
    CHECK_FALSE(same_bits(fresh.tensors.at("weight"), old_values.at("weight")));
  }
}
