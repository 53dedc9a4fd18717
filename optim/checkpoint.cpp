#include "optim/checkpoint.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <cstring>
#include <random>
#include <set>
#include <utility>

#include "mesh/agree.h"
#include "optim/checkpoint_check.h"
#include "optim/checkpoint_files.h"
#include "optim/checkpoint_index.h"
#include "runtime/errors.h"
#include "runtime/safetensors.h"

namespace shardrt {

namespace fs = checkpoint_files;
namespace ix = checkpoint_index;
using json = nlohmann::json;

namespace {

// index.json of a huge model is megabytes; anything far larger is not an index.
constexpr uint64_t kMaxIndexBytes = 1ull << 30;

// An error's message without its "<Kind>: " prefix (the agreed error adds its own); "<Kind> [rank N]: " keeps
// the rank where it happened, as "on rank N: ".
std::string without_kind(const Error& e) {
  const std::string what = e.what();
  const std::string plain = e.kind() + ": ", ranked = e.kind() + " [rank ";
  if (what.starts_with(plain)) return what.substr(plain.size());
  if (what.starts_with(ranked)) {
    const std::size_t close = what.find("]: ", ranked.size());
    if (close != std::string::npos)
      return "on rank " + what.substr(ranked.size(), close - ranked.size()) + ": " + what.substr(close + 3);
  }
  return what;
}

// Runs `step` on this rank and agrees on the outcome: when it threw a ShardRT error on any rank, every rank throws E
// with the lowest failing rank's message. Nothing else is caught (a bug is not a verdict).
template <typename E, typename Step>
void agreed_step(const Communicator& comm, Step&& step) {
  bool ok = true;
  std::string msg;
  try {
    step();
  } catch (const Error& e) {
    ok = false;
    msg = without_kind(e);
  } catch (const std::exception& e) {  // std::filesystem, bad_alloc: still a failed step, not a hang
    ok = false;
    msg = e.what();
  }
  agree_or_throw<E>(comm, ok, msg);
}

// ---- save: this rank's pieces and what it tells the others about them ----

struct LocalPiece {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::f32;
  int64_t begin = 0;
  int64_t count = 0;
  uint32_t crc32 = 0;
  Tensor host;  // 1-D contiguous CPU
};

std::vector<LocalPiece> check_ranges(const std::string& dir, const CheckpointContents& mine) {
  std::vector<LocalPiece> out;
  std::set<std::pair<std::string, int64_t>> seen;
  for (const SavedRange& r : mine.ranges) {
    const std::string what = detail::concat("save_checkpoint('", dir, "'): range '", r.name, "' at ", r.begin);
    SHARDRT_CHECK(!r.name.empty() && !r.name.starts_with("__"), ValueError, what,
                  ": a name must be non-empty and not start with \"__\"");
    SHARDRT_CHECK(r.values.defined(), ValueError, what, ": values are undefined");
    SHARDRT_CHECK(r.values.dim() == 1, ValueError, what, ": values are ", r.values.str(),
                  ", expected a 1-D tensor (a flat element range)");
    const int64_t numel = ix::checked_numel(r.global_shape, what);
    const int64_t count = r.values.numel();
    SHARDRT_CHECK(r.begin >= 0 && r.begin <= numel && count <= numel - r.begin, ValueError, what, ": elements [",
                  r.begin, ", ", r.begin + count, ") lie outside the ", numel, " of global shape ",
                  shape_str(r.global_shape));
    SHARDRT_CHECK(seen.emplace(r.name, r.begin).second, ValueError, what, ": this rank lists that range twice");
    LocalPiece p{r.name, r.global_shape, r.values.dtype(), r.begin, count, 0, r.values.contiguous().to(Device::cpu())};
    p.crc32 = fs::crc32(p.host.raw_data(), p.host.nbytes());
    out.push_back(std::move(p));
  }
  return out;
}

json describe(const std::vector<LocalPiece>& pieces, uint64_t file_bytes) {
  json list = json::array();
  for (const LocalPiece& p : pieces)
    list.push_back({{"name", p.name}, {"shape", p.shape}, {"dtype", dtype_name(p.dtype)}, {"begin", p.begin},
                    {"count", p.count}, {"crc32", p.crc32}});
  return {{"pieces", std::move(list)}, {"bytes", file_bytes}};
}

// Every rank's JSON text, by flat rank: two all-gathers (the lengths, then the bytes).
std::vector<json> all_gather_json(const Communicator& comm, const json& mine) {
  const std::string text = mine.dump();
  const int p = comm.size();
  Tensor my_len = Tensor::empty({1}, DType::i64), lens = Tensor::empty({p}, DType::i64);
  my_len.data<int64_t>()[0] = static_cast<int64_t>(text.size());
  comm.all_gather(my_len, lens);
  std::vector<int64_t> counts(lens.data<int64_t>(), lens.data<int64_t>() + p);
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor in = Tensor::empty({static_cast<int64_t>(text.size())}, DType::u8), out = Tensor::empty({total}, DType::u8);
  if (!text.empty()) std::memcpy(in.raw_data(), text.data(), text.size());
  comm.all_gather_v(in, out, counts);
  std::vector<json> all;
  const char* bytes = static_cast<const char*>(out.raw_data());
  int64_t offset = 0;
  for (int64_t c : counts) {
    all.push_back(json::parse(bytes + offset, bytes + offset + c));
    offset += c;
  }
  return all;
}

// The index from every rank's description; the same checks on every rank, on the same data.
ix::Index build_index(const Mesh& mesh, const std::string& dir, const std::vector<json>& ranks, const json& state) {
  ix::Index index;
  index.mesh_axes = mesh.axis_names();
  index.mesh_shape = mesh.shape();
  index.state = state;
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    index.files.push_back({ix::rank_file_name(static_cast<int>(r)), ranks[r]["bytes"].get<uint64_t>()});
    for (const json& p : ranks[r]["pieces"]) {
      const std::string name = p["name"].get<std::string>();
      const DType dtype = dtype_from_name(p["dtype"].get<std::string>());
      const std::vector<int64_t> shape = p["shape"].get<std::vector<int64_t>>();
      auto [it, fresh] = index.tensors.try_emplace(name);
      ix::TensorEntry& t = it->second;
      if (fresh) {
        t.dtype = dtype, t.shape = shape;
        t.numel = ix::checked_numel(shape, name);
      }
      SHARDRT_CHECK(t.dtype == dtype && t.shape == shape, ValueError, "save_checkpoint('", dir, "'): tensor '", name,
                    "' is ", dtype_name(t.dtype), shape_str(t.shape), " on one rank and ", dtype_name(dtype),
                    shape_str(shape), " on rank ", r, ": every rank must save a tensor with one dtype and global shape");
      t.pieces.push_back({static_cast<int>(r), ix::piece_key(name, p["begin"].get<int64_t>()), p["begin"].get<int64_t>(),
                          p["count"].get<int64_t>(), p["crc32"].get<uint32_t>()});
    }
  }
  for (auto& [name, t] : index.tensors) {
    std::stable_sort(t.pieces.begin(), t.pieces.end(), [](const auto& a, const auto& b) { return a.begin < b.begin; });
    for (std::size_t i = 1; i < t.pieces.size(); ++i) {
      const ix::Piece &a = t.pieces[i - 1], &b = t.pieces[i];
      SHARDRT_CHECK(a.count == 0 || b.count == 0 || b.begin >= a.begin + a.count, ValueError, "save_checkpoint('", dir,
                    "'): tensor '", name, "': rank ", a.file, " saves [", a.begin, ", ", a.begin + a.count, ") and rank ",
                    b.file, " saves [", b.begin, ", ", b.begin + b.count,
                    "), which overlap: exactly one rank may own each element");
    }
  }
  return index;
}

std::string make_nonce(const Communicator& comm) {
  Tensor nonce = Tensor::empty({1}, DType::i64);
  if (comm.rank() == 0) {
    std::random_device rd;
    const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    const uint64_t v = (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^ t ^ (static_cast<uint64_t>(::getpid()) << 20);
    nonce.data<int64_t>()[0] = static_cast<int64_t>(v & 0x7FFFFFFFFFFFFFFFull);
  }
  comm.broadcast(nonce, 0);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(nonce.data<int64_t>()[0]));
  return buf;
}

// <dir> may be replaced only when it is a checkpoint (or empty): anything else is the user's data.
void check_replaceable(const std::string& dir) {
  if (!fs::exists(dir)) return;
  SHARDRT_CHECK(fs::is_directory(dir), IoError, "save_checkpoint: '", dir,
                "' exists and is not a directory: remove it or choose another checkpoint path");
  const bool empty = fs::entries_with_prefix(dir, "").size() <= 2;  // "." and ".."
  SHARDRT_CHECK(empty || fs::exists(dir + "/" + kCheckpointIndexName), IoError, "save_checkpoint: '", dir,
                "' exists and is not a ShardRT checkpoint (no ", kCheckpointIndexName,
                "); it would be replaced: remove it or choose another checkpoint path");
}

// ---- load ----

// Files of one checkpoint, opened (mapped and validated) the first time a piece in them is needed.
class OpenFiles {
 public:
  OpenFiles(std::string dir, const ix::Index& index) : dir_(std::move(dir)), index_(index) {}

  const SafetensorsFile& get(int file) {
    auto it = open_.find(file);
    if (it != open_.end()) return it->second;
    const ix::FileEntry& f = index_.files[static_cast<std::size_t>(file)];
    const std::string path = dir_ + "/" + f.name;
    SHARDRT_CHECK(fs::exists(path), IoError, "load_checkpoint: '", dir_, "': file '", f.name,
                  "' is missing (the checkpoint is incomplete: restore it or load an older one)");
    const uint64_t bytes = fs::file_size(path);
    SHARDRT_CHECK(bytes == f.bytes, IoError, "load_checkpoint: '", path, "' is ", bytes, " bytes, the index says ",
                  f.bytes, " (truncated or replaced: restore the checkpoint or load an older one)");
    return open_.emplace(file, load_safetensors(path)).first->second;
  }

  // The piece's tensor, checked against the index once (key, dtype, length, crc32).
  const Tensor& piece(const std::string& name, const ix::TensorEntry& t, const ix::Piece& p) {
    const std::string id = detail::concat(p.file, "/", p.key);
    auto it = verified_.find(id);
    if (it != verified_.end()) return it->second;
    const SafetensorsFile& file = get(p.file);
    const std::string where = detail::concat("load_checkpoint: '", file.path(), "': piece '", p.key, "' of tensor '",
                                             name, "'");
    SHARDRT_CHECK(file.contains(p.key), IoError, where, " is missing from the file (restore the checkpoint)");
    const Tensor& v = file.get(p.key);
    SHARDRT_CHECK(v.dtype() == t.dtype, IoError, where, " is ", dtype_name(v.dtype()), ", the index says ",
                  dtype_name(t.dtype));
    SHARDRT_CHECK(v.dim() == 1 && v.numel() == p.count, IoError, where, " is ", v.str(), ", the index says ", p.count,
                  " elements");
    const uint32_t crc = fs::crc32(v.raw_data(), v.nbytes());
    SHARDRT_CHECK(crc == p.crc32, IoError, where, " has crc32 ", crc, ", the index says ", p.crc32,
                  " (the file is corrupted: restore the checkpoint or load an older one)");
    return verified_.emplace(id, v).first->second;
  }

 private:
  std::string dir_;
  const ix::Index& index_;
  std::map<int, SafetensorsFile> open_;
  std::map<std::string, Tensor> verified_;
};

std::string missing_checkpoint_message(const std::string& dir) {
  std::string msg = detail::concat("load_checkpoint: '", dir, "' holds no checkpoint (no ", kCheckpointIndexName, ")");
  const std::string base = fs::base_name(dir);
  const auto old = fs::entries_with_prefix(fs::parent_of(dir), base + ".old-");
  if (!old.empty())
    msg += detail::concat("; '", fs::parent_of(dir), "/", old.front(),
                          "' is a complete checkpoint left by an interrupted save: rename it to '", dir, "' to use it");
  else
    msg += ": check the path, or save a checkpoint there first";
  return msg;
}

ix::Index read_index(const std::string& dir) {
  const std::string path = dir + "/" + kCheckpointIndexName;
  SHARDRT_CHECK(fs::exists(path), IoError, missing_checkpoint_message(dir));
  return ix::parse(dir, fs::read_text(path, kMaxIndexBytes));
}

Tensor answer(const std::string& dir, const ix::Index& index, OpenFiles& files, const RangeRequest& rq) {
  const std::string what = detail::concat("load_checkpoint('", dir, "'): tensor '", rq.name, "'");
  auto it = index.tensors.find(rq.name);
  if (it == index.tensors.end()) {
    std::string some;
    int shown = 0;
    for (const auto& [name, t] : index.tensors) {
      if (shown++ == 8) {
        some += ", ...";
        break;
      }
      some += (some.empty() ? "" : ", ") + name;
    }
    throw IoError(detail::concat(what, " is not in the checkpoint (it holds ", index.tensors.size(), " tensors: ", some,
                                 "); check the name, or that this checkpoint was saved by the same model"));
  }
  const ix::TensorEntry& t = it->second;
  SHARDRT_CHECK(!rq.dtype || *rq.dtype == t.dtype, IoError, what, " was saved as ", dtype_name(t.dtype),
                ", the request expects ", dtype_name(*rq.dtype), ": convert after loading or load a matching checkpoint");
  SHARDRT_CHECK(!rq.global_shape || *rq.global_shape == t.shape, IoError, what, " was saved with global shape ",
                shape_str(t.shape), ", the request expects ", shape_str(rq.global_shape.value_or(Shape{})),
                ": the model's configuration differs from the checkpoint's");
  SHARDRT_CHECK(rq.begin >= 0 && rq.count >= 0 && rq.begin <= t.numel && rq.count <= t.numel - rq.begin, IoError,
                what, ": requested elements [", rq.begin, ", ", rq.begin + rq.count, ") lie outside its ", t.numel,
                " elements (global shape ", shape_str(t.shape), ")");

  Tensor out = Tensor::empty({rq.count}, t.dtype);
  const std::size_t elem = dtype_size(t.dtype);
  const int64_t end = rq.begin + rq.count;
  int64_t covered = rq.begin;  // every element before this one has been copied
  for (const ix::Piece& p : t.pieces) {
    const int64_t lo = std::max(p.begin, covered), hi = std::min(p.begin + p.count, end);
    if (hi <= lo) continue;
    SHARDRT_CHECK(lo == covered, IoError, what, ": elements [", covered, ", ", lo,
                  ") are in no saved piece (the saving ranks did not cover them): save them, or request only saved ranges");
    const Tensor& v = files.piece(rq.name, t, p);
    std::memcpy(static_cast<char*>(out.raw_data()) + static_cast<std::size_t>(lo - rq.begin) * elem,
                static_cast<const char*>(v.raw_data()) + static_cast<std::size_t>(lo - p.begin) * elem,
                static_cast<std::size_t>(hi - lo) * elem);
    covered = hi;
  }
  SHARDRT_CHECK(covered == end, IoError, what, ": elements [", covered, ", ", end,
                ") are in no saved piece (the saving ranks did not cover them): save them, or request only saved ranges");
  return out;
}

}  // namespace

void save_checkpoint(const Mesh& mesh, const std::string& dir_arg, const CheckpointContents& mine) {
  const Communicator& comm = mesh.flat();
  const std::string dir = fs::normalized(dir_arg);
  const bool root = comm.rank() == 0;

  std::vector<LocalPiece> pieces;
  agreed_step<ValueError>(comm, [&] {
    SHARDRT_CHECK(!dir.empty(), ValueError, "save_checkpoint: the checkpoint path is empty");
    pieces = check_ranges(dir, mine);
  });
  agreed_step<IoError>(comm, [&] {
    if (root) check_replaceable(dir);
  });

  const std::string nonce = make_nonce(comm);
  const std::string staging = dir + ".tmp-" + nonce;
  // From here on a failure anywhere removes the staging directory: nothing half written stays behind.
  auto abandon = [&] {
    if (root) fs::remove_tree(staging);
  };
  try {
    agreed_step<IoError>(comm, [&] {
      if (root) fs::make_directory(staging);
    });

    uint64_t file_bytes = 0;
    agreed_step<IoError>(comm, [&] {
      std::map<std::string, Tensor> tensors;
      for (const LocalPiece& p : pieces) tensors.emplace(ix::piece_key(p.name, p.begin), p.host);
      const std::string path = staging + "/" + ix::rank_file_name(comm.rank());
      save_safetensors(path, tensors, {{"shardrt_checkpoint_rank", std::to_string(comm.rank())}});
      file_bytes = fs::file_size(path);
    });

    const std::vector<json> described = all_gather_json(comm, describe(pieces, file_bytes));
    ix::Index index;
    agreed_step<ValueError>(comm, [&] { index = build_index(mesh, dir, described, mine.state); });

    agreed_step<IoError>(comm, [&] {
      if (!root) return;
      fs::write_file_durably(staging + "/" + kCheckpointIndexName, ix::to_json(index).dump(1));
      fs::sync_directory(staging);
      const std::string previous = fs::exchange_into_place(staging, dir, dir + ".old-" + nonce);
      if (!previous.empty()) fs::remove_tree(previous);
      // Leftovers of interrupted saves of this <dir> (one job saves it at a time, so none is in progress).
      const std::string parent = fs::parent_of(dir), base = fs::base_name(dir);
      for (const std::string& prefix : {base + ".tmp-", base + ".old-"})
        for (const std::string& name : fs::entries_with_prefix(parent, prefix)) fs::remove_tree(parent + "/" + name);
    });
  } catch (...) {
    abandon();
    throw;
  }
}

void check_checkpoint_writable(const Mesh& mesh, const std::string& dir_arg) {
  const Communicator& comm = mesh.flat();
  const std::string dir = fs::normalized(dir_arg);
  const std::string nonce = make_nonce(comm);
  agreed_step<IoError>(comm, [&] {
    if (comm.rank() != 0) return;
    SHARDRT_CHECK(!dir.empty(), IoError, "check_checkpoint_writable: the checkpoint path is empty");
    const std::string staging = dir + ".tmp-" + nonce;
    try {
      std::error_code ec;
      std::filesystem::create_directories(fs::parent_of(dir), ec);
      if (ec) throw IoError(detail::concat("cannot create its parent '", fs::parent_of(dir), "': ", ec.message()));
      check_replaceable(dir);
      fs::make_directory(staging);
      fs::write_file_durably(staging + "/probe", "shardrt checkpoint write check\n");
      fs::remove_tree(staging);
    } catch (const Error& e) {
      fs::remove_tree(staging);
      // The reason alone: the agreed error names the kind and the rank once.
      std::string reason = without_kind(e);
      if (reason.starts_with("on rank ")) reason = reason.substr(reason.find(": ") + 2);
      throw IoError(detail::concat("the checkpoint directory '", dir, "' cannot be written: ", reason,
                                   "; choose a writable checkpoint directory (checked before any training step)"));
    }
  });
}

LoadedCheckpoint load_checkpoint(const Mesh& mesh, const std::string& dir_arg, const std::vector<RangeRequest>& requests) {
  const Communicator& comm = mesh.flat();
  const std::string dir = fs::normalized(dir_arg);
  LoadedCheckpoint out;
  agreed_step<IoError>(comm, [&] {
    const ix::Index index = read_index(dir);
    OpenFiles files(dir, index);
    out.values.reserve(requests.size());
    for (const RangeRequest& rq : requests) out.values.push_back(answer(dir, index, files, rq));
    out.state = index.state;
  });
  return out;
}

CheckpointInfo read_checkpoint_info(const std::string& dir_arg) {
  const std::string dir = fs::normalized(dir_arg);
  const ix::Index index = read_index(dir);
  CheckpointInfo info;
  for (const auto& [name, t] : index.tensors) info.tensors.emplace(name, CheckpointTensorInfo{t.dtype, t.shape});
  info.state = index.state;
  info.mesh_shape = index.mesh_shape;
  return info;
}

}  // namespace shardrt
