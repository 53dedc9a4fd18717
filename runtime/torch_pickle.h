// A restricted unpickler for the data.pkl of a torch checkpoint: it understands what torch.save writes for a state
// dict (and for a training checkpoint dict around one), and nothing else.
//
// A pickle is a program: its GLOBAL opcode names any importable callable and REDUCE calls it, which is how a
// malicious checkpoint runs code on load. This reader executes nothing. It interprets the opcodes itself and knows
// a fixed list of names, each of which it rebuilds as data:
//   collections.OrderedDict                 -> a dict
//   torch._utils._rebuild_tensor_v2         -> a PickledTensor (storage, offset, size, stride)
//   torch._utils._rebuild_parameter(_with_state) -> the same tensor, marked as a parameter
//   torch.{Float,Double,Half,BFloat16,Long,Int,Short,Char,Byte,Bool}Storage, torch.UntypedStorage
//                                           -> the element type of a storage named by a persistent id
// Any other global, and any opcode outside the list below, is an IoError naming it; so is anything structurally
// off (a stack underflow, a memo slot never written, a container changed after it was nested in another, nesting
// deeper than kMaxPickleDepth). BUILD is accepted only to set a state dict's `_metadata` (which is ignored) and a
// parameter's state.
//
// Opcodes: PROTO, FRAME, STOP, MARK, POP, POP_MARK, EMPTY_DICT, EMPTY_LIST, EMPTY_TUPLE, TUPLE, TUPLE1-3, DICT,
// LIST, BININT, BININT1, BININT2, LONG1, BINFLOAT, NONE, NEWTRUE, NEWFALSE, BINUNICODE, SHORT_BINUNICODE,
// BINUNICODE8, BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET, GLOBAL, STACK_GLOBAL, REDUCE, BUILD, SETITEM,
// SETITEMS, APPEND, APPENDS, BINPERSID: protocol 2 as torch.save writes it, plus what protocols 3-5 use for the
// same values (a checkpoint saved with a higher pickle_protocol).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace shardrt {

// Containers nest at most this deep; a training checkpoint nests a handful of levels.
constexpr int kMaxPickleDepth = 64;

// The persistent id of one storage, ('storage', <storage type>, key, location, numel): its bytes are the archive
// entry <archive>/data/<key>.
struct PickledStorage {
  std::string storage_type;  // "FloatStorage", ..., "UntypedStorage"
  std::string key;
  std::string location;  // where torch would place it ("cpu", "cuda:0"); the bytes do not depend on it
  int64_t numel = 0;     // elements of storage_type (bytes for UntypedStorage)
};

// A strided view of a storage, as _rebuild_tensor_v2 receives it. Nothing here is validated against the storage
// yet: the checkpoint reader does that, with the bytes in hand.
struct PickledTensor {
  std::shared_ptr<const PickledStorage> storage;
  int64_t storage_offset = 0;  // elements
  std::vector<int64_t> size;
  std::vector<int64_t> stride;
  bool requires_grad = false;
  bool is_parameter = false;
};

struct PickleValue;
using PickleValuePtr = std::shared_ptr<PickleValue>;

struct PickleValue {
  // `callable` (an allowed global) and `storage` occur only inside tuples: they are the arguments a state dict's
  // tensors are rebuilt from, and a dict or list holding one is refused.
  enum class Kind { none, boolean, integer, floating, string, tuple, list, dict, tensor, callable, storage };
  Kind kind = Kind::none;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0.0;
  std::string text;                    // string; for a callable, "module name"
  std::vector<PickleValuePtr> items;   // tuple, list
  std::vector<std::pair<PickleValuePtr, PickleValuePtr>> entries;  // dict, in insertion order
  std::shared_ptr<const PickledStorage> storage;
  PickledTensor tensor;
  // Bookkeeping of the unpickler: nesting depth below this value, and whether it sits inside another container
  // (after which it may not change, so depths stay exact and no container can come to contain itself).
  int depth = 0;
  bool nested = false;

  // "dict", "tensor", ...: for messages.
  const char* kind_name() const;
};

// Interprets `bytes` (a whole data.pkl) and returns the value it builds. `label` names the file in messages:
// "torch checkpoint '<label>': ...".
PickleValuePtr unpickle_torch(const std::string& label, const unsigned char* bytes, std::size_t n);

}  // namespace shardrt
