// Sharded checkpoints: saved by the ranges of a ddp arena shard (uneven, one rank empty), loaded bit for bit on
// meshes of other sizes with other splits; the state round trip and the atomic replacement; every kind of damage a
// typed error on every rank, with one message; a writer killed with SIGKILL mid-save leaves the previous checkpoint.
#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "mesh/mesh.h"
#include "optim/checkpoint.h"
#include "runtime/errors.h"
#include "tests/optim/checkpoint_testing.h"
#include "tests/support/world.h"

using namespace shardrt;
using namespace shardrt::test;
using json = nlohmann::json;
namespace stdfs = std::filesystem;

namespace {


Mesh world_ddp() { return Mesh(MPI_COMM_WORLD, -1, 1); }

// Runs `body` with a 1-D mesh of the first `ranks` world ranks (the others skip it), then waits for everyone.
void on_first_ranks(int ranks, const std::function<void(const Mesh&)>& body) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank() < ranks ? 0 : MPI_UNDEFINED, world_rank(), &sub);
  if (sub != MPI_COMM_NULL) {
    {
      Mesh mesh = Mesh::one_d(sub, "ddp");
      body(mesh);
    }
    MPI_Comm_free(&sub);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

void save_arena(const Mesh& mesh, const std::string& dir, const std::vector<GlobalTensor>& tensors, const json& state) {
  const auto [lo, hi] = uneven_arena_range(arena_numel(tensors), mesh.rank(), mesh.size());
  CheckpointContents c = arena_contents(tensors, lo, hi);
  c.state = state;
  save_checkpoint(mesh, dir, c);
}

// Rank q of Q: elements [n q^2 / Q^2, n (q+1)^2 / Q^2) of each tensor (uneven, later ranks more), or the mirrored
// split when `mirrored`; rank 0 also asks for each whole tensor, so a request spans several saved pieces.
std::vector<RangeRequest> split_requests(const std::vector<GlobalTensor>& tensors, int q, int Q, bool mirrored) {
  std::vector<RangeRequest> rq;
  const int k = mirrored ? Q - 1 - q : q;
  for (const auto& t : tensors) {
    const int64_t n = shape_numel(t.shape);
    const int64_t lo = n * k * k / (Q * Q), hi = n * (k + 1) * (k + 1) / (Q * Q);
    rq.push_back({t.name, lo, hi - lo, t.values.dtype(), t.shape});
    if (q == 0) rq.push_back({t.name, 0, n});
  }
  return rq;
}

bool answers_match(const std::vector<GlobalTensor>& tensors, const std::vector<RangeRequest>& rq,
                   const LoadedCheckpoint& got) {
  if (got.values.size() != rq.size()) return false;
  for (std::size_t i = 0; i < rq.size(); ++i) {
    const GlobalTensor* t = nullptr;
    for (const auto& g : tensors)
      if (g.name == rq[i].name) t = &g;
    if (t == nullptr || !same_bits(got.values[i], flat_slice(*t, rq[i].begin, rq[i].count))) return false;
  }
  return true;
}

// Every rank of the world threw an E and the messages agree (the same hash everywhere) and mention `needle`.
template <typename E>
void require_same_error_everywhere(const std::function<void()>& call, const std::string& needle) {
  int threw = 0, found = 0;
  uint64_t hash = 0;
  std::string message;
  try {
    call();
  } catch (const E& e) {
    threw = 1;
    message = e.what();
    found = message.find(needle) != std::string::npos;
    // Everything after this rank's own "<Kind> [rank r]: " prefix must be identical on every rank.
    hash = std::hash<std::string>{}(message.substr(message.find(": ") + 2));
  }
  INFO("rank " << world_rank() << ": " << message);
  int all_threw = 0, all_found = 0;
  uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&threw, &all_threw, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&found, &all_found, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&hash, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  CHECK(all_threw == 1);
  CHECK(all_found == 1);
  CHECK(lo == hi);
}

std::vector<std::string> leftovers(const std::string& dir) {
  std::vector<std::string> out;
  const stdfs::path p(dir);
  for (const auto& e : stdfs::directory_iterator(p.parent_path())) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(p.filename().string() + ".tmp-") || name.starts_with(p.filename().string() + ".old-"))
      out.push_back(name);
  }
  return out;
}

void flip_byte(const std::string& path, int64_t from_end) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-from_end, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ 0x5A);
  f.seekp(-from_end, std::ios::end);
  f.write(&c, 1);
}

}  // namespace

TEST_CASE("checkpoint: saved by an uneven ddp arena shard, loaded on 2, 1 and all ranks by other splits, bit for bit",
          "[checkpoint]") {
  SharedTempDir tmp("shardrt-ckpt");
  const std::string dir = tmp.path + "/ckpt";
  const auto tensors = optimizer_like_tensors(1.0);
  const int W = world_size();
  const json state = {{"step", 5}, {"schedule", {{"lr", 1e-3}, {"last_epoch", 4}}}, {"mode", "ddp"}};
  {
    Mesh mesh = world_ddp();
    // The layout really is sharded: on more than one rank no rank holds everything, and the last one holds nothing.
    const auto [lo, hi] = uneven_arena_range(arena_numel(tensors), mesh.rank(), W);
    if (W > 1) CHECK(hi - lo < arena_numel(tensors));
    if (W > 2 && mesh.rank() == W - 1) CHECK(hi == lo);
    save_arena(mesh, dir, tensors, state);
  }
  const CheckpointInfo info = read_checkpoint_info(dir);
  CHECK(info.tensors.size() == tensors.size());
  CHECK(info.mesh_shape == std::vector<int>{W, 1});
  CHECK(info.state == state);
  for (const auto& t : tensors) {
    CHECK(info.tensors.at(t.name).dtype == t.values.dtype());
    CHECK(info.tensors.at(t.name).global_shape == t.shape);
  }

  for (int Q : {std::max(1, W / 2), 1, W}) {
    for (bool mirrored : {false, true}) {
      on_first_ranks(Q, [&](const Mesh& mesh) {
        const auto rq = split_requests(tensors, mesh.rank(), Q, mirrored);
        const LoadedCheckpoint got = load_checkpoint(mesh, dir, rq);
        INFO("loaded on " << Q << " ranks, mirrored " << mirrored);
        CHECK(answers_match(tensors, rq, got));
        CHECK(got.state == state);
      });
    }
  }

  // Back on every rank with a third layout: re-save what a 1-rank mesh loaded whole, then each rank asks for one
  // tensor in full (ranks cycle over the tensors).
  on_first_ranks(1, [&](const Mesh& mesh) {
    std::vector<RangeRequest> all;
    for (const auto& t : tensors) all.push_back({t.name, 0, shape_numel(t.shape)});
    const LoadedCheckpoint whole = load_checkpoint(mesh, dir, all);
    CheckpointContents c;
    for (std::size_t i = 0; i < tensors.size(); ++i) c.ranges.push_back({tensors[i].name, tensors[i].shape, 0, whole.values[i]});
    c.state = whole.state;
    save_checkpoint(mesh, tmp.path + "/resaved", c);
  });
  {
    Mesh mesh = world_ddp();
    std::vector<RangeRequest> rq;
    for (std::size_t i = static_cast<std::size_t>(mesh.rank()); i < tensors.size(); i += static_cast<std::size_t>(W))
      rq.push_back({tensors[i].name, 0, shape_numel(tensors[i].shape)});
    CHECK(answers_match(tensors, rq, load_checkpoint(mesh, tmp.path + "/resaved", rq)));
    CHECK(read_checkpoint_info(tmp.path + "/resaved").mesh_shape == std::vector<int>{1});
  }
}

TEST_CASE("checkpoint: a second save replaces the first atomically and leaves nothing behind", "[checkpoint]") {
  SharedTempDir tmp("shardrt-ckpt");
  const std::string dir = tmp.path + "/ckpt";
  Mesh mesh = world_ddp();
  const auto first = optimizer_like_tensors(1.0), second = optimizer_like_tensors(2.0);
  save_arena(mesh, dir, first, {{"step", 1}});
  save_arena(mesh, dir, second, {{"step", 2}, {"rng", {{"seed", 7}, {"offset", 12345678901234ll}}}});
  std::vector<RangeRequest> rq;
  for (const auto& t : second) rq.push_back({t.name, 0, shape_numel(t.shape)});
  const LoadedCheckpoint got = load_checkpoint(mesh, dir, rq);
  CHECK(answers_match(second, rq, got));
  CHECK_FALSE(answers_match(first, rq, got));  // the versions really differ
  CHECK(got.state["rng"]["offset"].get<int64_t>() == 12345678901234ll);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(leftovers(dir).empty());
  // One file per saving rank and the index, nothing else.
  int entries = 0;
  for (const auto& e : stdfs::directory_iterator(dir)) entries += e.is_regular_file() ? 1 : 100;
  CHECK(entries == world_size() + 1);
}

TEST_CASE("checkpoint: damaged files, missing pieces and mismatched requests are the same IoError on every rank",
          "[checkpoint]") {
  SharedTempDir tmp("shardrt-ckpt");
  const std::string dir = tmp.path + "/ckpt";
  const auto tensors = optimizer_like_tensors(3.0);
  Mesh mesh = world_ddp();
  save_arena(mesh, dir, tensors, {{"step", 3}});
  std::vector<RangeRequest> whole;
  for (const auto& t : tensors) whole.push_back({t.name, 0, shape_numel(t.shape)});
  auto load_whole = [&] { load_checkpoint(mesh, dir, whole); };

  SECTION("a request outside the tensor, an unknown tensor, a dtype or a global-shape mismatch") {
    // Only the last rank asks wrongly; every rank still throws its message.
    auto ask = [&](RangeRequest bad) {
      return [&, bad] {
        std::vector<RangeRequest> rq = whole;
        if (mesh.rank() == mesh.size() - 1) rq.push_back(bad);
        load_checkpoint(mesh, dir, rq);
      };
    };
    require_same_error_everywhere<IoError>(ask({"param.blocks.0.bias", 10, 4}), "lie outside its 13 elements");
    require_same_error_everywhere<IoError>(ask({"param.nope", 0, 1}), "is not in the checkpoint");
    require_same_error_everywhere<IoError>(ask({"param.blocks.0.bias", 0, 13, DType::f32}), "was saved as f64");
    require_same_error_everywhere<IoError>(ask({"param.embed", 0, 1, std::nullopt, Shape{3, 8}}),
                                           "global shape [3, 4, 2]");
  }
  SECTION("a flipped data byte is caught by the piece's crc32") {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) flip_byte(dir + "/rank-00000.safetensors", 3);
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "the file is corrupted");
  }
  SECTION("a truncated file") {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) stdfs::resize_file(dir + "/rank-00000.safetensors", stdfs::file_size(dir + "/rank-00000.safetensors") - 5);
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "truncated");
  }
  SECTION("a missing file") {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) stdfs::remove(dir + "/rank-00000.safetensors");
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "rank-00000.safetensors' is missing");
  }
  SECTION("a damaged index, or one of another version") {
    MPI_Barrier(MPI_COMM_WORLD);
    json index = json::parse(std::ifstream(dir + "/index.json"));
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has read it before rank 0 rewrites it
    if (world_rank() == 0) {
      index["version"] = 99;
      std::ofstream(dir + "/index.json") << index.dump();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "format version 99");
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) std::ofstream(dir + "/index.json") << "{\"format\": \"shardrt-checkpoint\", \"vers";
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "not valid JSON");
  }
  SECTION("a dtype in the index that differs from the file's") {
    MPI_Barrier(MPI_COMM_WORLD);
    json index = json::parse(std::ifstream(dir + "/index.json"));
    MPI_Barrier(MPI_COMM_WORLD);  // every rank has read it before rank 0 rewrites it
    if (world_rank() == 0) {
      index["tensors"]["param.half"]["dtype"] = "bf16";
      std::ofstream(dir + "/index.json") << index.dump();
    }
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>(load_whole, "is f16, the index says bf16");
  }
  SECTION("a piece the saving ranks left out: the error names the missing range") {
    const auto [lo, hi] = uneven_arena_range(arena_numel(tensors), mesh.rank(), mesh.size());
    CheckpointContents c = arena_contents(tensors, lo, hi);
    // Rank 0 leaves elements [2, 7) of param.blocks.0.weight (arena elements [0, 35), which it owns whole on any
    // world size here: its share is at least 41 of the 185 elements) out of what it saves.
    if (mesh.rank() == 0) {
      REQUIRE(hi >= 35);
      const GlobalTensor& w = tensors.front();
      std::erase_if(c.ranges, [&](const SavedRange& r) { return r.name == w.name; });
      c.ranges.push_back({w.name, w.shape, 0, flat_slice(w, 0, 2)});
      c.ranges.push_back({w.name, w.shape, 7, flat_slice(w, 7, 28)});
    }
    save_checkpoint(mesh, tmp.path + "/holes", c);
    require_same_error_everywhere<IoError>(
        [&] { load_checkpoint(mesh, tmp.path + "/holes", {{"param.blocks.0.weight", 2, 5}}); },
        "elements [2, 7) are in no saved piece");
  }
  SECTION("no checkpoint at the path") {
    require_same_error_everywhere<IoError>([&] { load_checkpoint(mesh, tmp.path + "/nothing", whole); },
                                           "holds no checkpoint");
  }
}

TEST_CASE("checkpoint: a save that fails on one rank fails on every rank and keeps the previous checkpoint",
          "[checkpoint]") {
  SharedTempDir tmp("shardrt-ckpt");
  const std::string dir = tmp.path + "/ckpt";
  const auto tensors = optimizer_like_tensors(4.0);
  Mesh mesh = world_ddp();
  save_arena(mesh, dir, tensors, {{"step", 4}});
  const auto [lo, hi] = uneven_arena_range(arena_numel(tensors), mesh.rank(), mesh.size());

  SECTION("a rank whose file cannot be written") {
    CheckpointContents c = arena_contents(optimizer_like_tensors(5.0), lo, hi);
    // A name safetensors refuses to write (not UTF-8): this rank's write fails after the others' succeeded.
    if (mesh.rank() == mesh.size() - 1) c.ranges.push_back({"param.\xff\xfe", {1}, 0, Tensor::empty({1}, DType::f32)});
    require_same_error_everywhere<IoError>([&] { save_checkpoint(mesh, dir, c); }, "not valid UTF-8");
  }
  SECTION("two ranks writing the same element") {
    if (mesh.size() > 1) {
      CheckpointContents c = arena_contents(optimizer_like_tensors(5.0), lo, hi);
      // Every rank claims the same whole tensor.
      c.ranges.push_back({"param.extra", {9}, 0, known_values({9}, DType::f16, 5.0, 0.0).reshape({9})});
      require_same_error_everywhere<ValueError>([&] { save_checkpoint(mesh, dir, c); }, "which overlap");
    }
  }
  SECTION("a range outside its tensor, on one rank") {
    CheckpointContents c = arena_contents(optimizer_like_tensors(5.0), lo, hi);
    if (mesh.rank() == 0) c.ranges.push_back({"param.extra", {4}, 2, Tensor::empty({3}, DType::f32)});
    require_same_error_everywhere<ValueError>([&] { save_checkpoint(mesh, dir, c); }, "lie outside the 4");
  }
  SECTION("a path that holds something else is never replaced") {
    MPI_Barrier(MPI_COMM_WORLD);
    if (world_rank() == 0) {
      stdfs::create_directories(tmp.path + "/user");
      std::ofstream(tmp.path + "/user/notes.txt") << "mine";
    }
    MPI_Barrier(MPI_COMM_WORLD);
    require_same_error_everywhere<IoError>([&] { save_arena(mesh, tmp.path + "/user", tensors, {}); },
                                           "is not a ShardRT checkpoint");
    CHECK(stdfs::exists(tmp.path + "/user/notes.txt"));
  }
  // Whatever failed, the previous checkpoint is intact and nothing half written is left.
  std::vector<RangeRequest> rq;
  for (const auto& t : tensors) rq.push_back({t.name, 0, shape_numel(t.shape)});
  const LoadedCheckpoint got = load_checkpoint(mesh, dir, rq);
  CHECK(answers_match(tensors, rq, got));
  CHECK(got.state["step"] == 4);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(leftovers(dir).empty());
}

#ifdef SHARDRT_CHECKPOINT_WRITER
namespace {

// The environment without the launcher's variables, so the helper's MPI_Init starts a singleton of its own instead
// of trying to join this job.
std::vector<std::string> singleton_environment() {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    if (v.starts_with("OMPI_") || v.starts_with("PMIX_") || v.starts_with("OPAL_") || v.starts_with("PRTE_") ||
        v.starts_with("PMI_") || v.starts_with("HYDRA_"))
      continue;
    env.push_back(v);
  }
  return env;
}

}  // namespace

TEST_CASE("checkpoint: a writer killed with SIGKILL in the middle of a save leaves the previous checkpoint intact",
          "[checkpoint][kill]") {
  // The writer is one process of its own; the case runs once, in the 1-rank job of the suite.
  if (world_size() != 1) return;
  SharedTempDir tmp("shardrt-ckpt");
  const std::string dir = tmp.path + "/ckpt";
  const int64_t megabytes = 48;
  Mesh self = Mesh::one_d(MPI_COMM_WORLD, "ddp");
  int caught_mid_save = 0;
  for (int attempt = 0; attempt < 6 && caught_mid_save == 0; ++attempt) {
    int pipe_fd[2];
    REQUIRE(::pipe(pipe_fd) == 0);
    std::vector<std::string> args = {SHARDRT_CHECKPOINT_WRITER, dir, std::to_string(megabytes), "loop"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_strings = singleton_environment();
    std::vector<char*> envp;
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    const pid_t child = ::fork();
    REQUIRE(child >= 0);
    if (child == 0) {
      ::dup2(pipe_fd[1], STDOUT_FILENO);
      ::close(pipe_fd[0]);
      ::close(pipe_fd[1]);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    ::close(pipe_fd[1]);
    // The writer saves versions 1, 2, 3, ..., printing "saving <v>" as a save starts and "saved <v>" after its
    // commit. Once version 2 is committed it is the previous checkpoint; the kill lands while version 3 is written.
    FILE* out = ::fdopen(pipe_fd[0], "r");
    int last_saved = 0, saving = 0;
    char line[128];
    while (saving < 3 && std::fgets(line, sizeof line, out) != nullptr) {
      std::sscanf(line, "saved %d", &last_saved);
      std::sscanf(line, "saving %d", &saving);
    }
    REQUIRE(last_saved == 2);
    REQUIRE(saving == 3);
    // Kill as soon as the save has staged its directory (a few milliseconds later on each retry): its 48 MB file
    // is then being written, long before the commit.
    for (int waited = 0; leftovers(dir).empty() && waited < 10000; ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(2 * attempt));
    ::kill(child, SIGKILL);
    int status = 0;
    ::waitpid(child, &status, 0);
    while (std::fgets(line, sizeof line, out) != nullptr) std::sscanf(line, "saved %d", &last_saved);
    std::fclose(out);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == SIGKILL);
    // A staging directory left behind means the kill came in the middle of a save.
    caught_mid_save = leftovers(dir).empty() ? 0 : 1;

    // <dir> holds a complete checkpoint: the last version reported (or the next one, when the kill came after its
    // commit and before the report), and every byte is that version's.
    const CheckpointInfo info = read_checkpoint_info(dir);
    const int version = info.state["version"].get<int>();
    INFO("attempt " << attempt << ": last reported " << last_saved << ", loaded " << version);
    CHECK((version == last_saved || version == last_saved + 1));
    const auto expected = writer_tensors(megabytes, version);
    std::vector<RangeRequest> rq;
    for (const auto& t : expected) rq.push_back({t.name, 0, shape_numel(t.shape)});
    CHECK(answers_match(expected, rq, load_checkpoint(self, dir, rq)));
  }
  CHECK(caught_mid_save == 1);
  // The next save clears what the killed one left.
  save_arena(self, dir, optimizer_like_tensors(9.0), {{"version", 9}});
  CHECK(leftovers(dir).empty());
}
#endif
