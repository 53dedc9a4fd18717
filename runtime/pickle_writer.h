// A restricted pickle writer: protocol 2, and only what torch.save writes for a state dict (the mirror of the
// restricted reader in runtime/torch_pickle.h, which reads back everything this writes).
//
// PickleWriter emits single opcodes (integers in their shortest form, strings as BINUNICODE, globals memoised so
// each is named once); pickle_state_dict uses it to write the data.pkl of a torch zip archive:
//   collections.OrderedDict() filled, in the caller's key order, with
//   key -> torch._utils._rebuild_tensor_v2(<persistent id ('storage', torch.<T>Storage, '<storage key>', 'cpu',
//                                           numel)>, 0, size, contiguous stride, False, collections.OrderedDict())
// which is what torch.load (weights_only too: every name used is on its allow-list) and PhysicsNeMo read.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"

namespace shardrt {

class PickleWriter {
 public:
  PickleWriter();  // PROTO 2

  void global(const std::string& module, const std::string& name);  // GLOBAL, then BINGET when repeated
  void mark();
  void empty_tuple();
  void tuple_from_mark();  // TUPLE
  void tuple_of(int n);    // TUPLE1 / TUPLE2 / TUPLE3 of the top n (1 <= n <= 3)
  void text(const std::string& s);
  void integer(int64_t v);
  void boolean(bool v);
  void none();
  void empty_dict();
  void set_items();        // SETITEMS (pairs since the mark)
  void reduce();           // REDUCE: callable(*args)
  void persistent_id();    // BINPERSID of the top value
  // STOP; returns the whole pickle. The writer is spent afterwards.
  std::vector<unsigned char> finish();

 private:
  void op(unsigned char code);
  void raw(const void* data, std::size_t n);
  void put_memo(uint32_t slot);
  void get_memo(uint32_t slot);

  std::vector<unsigned char> out_;
  std::map<std::string, uint32_t> global_memo_;
  uint32_t next_memo_ = 0;
  bool finished_ = false;
};

// One entry of a state dict as pickled: its key, dtype and shape (the tensor is contiguous, offset 0) and the key of
// the storage holding its bytes (<archive>/data/<storage_key>).
struct PickledStateEntry {
  std::string key;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;
  std::string storage_key;
};

// torch's storage class name for a dtype: "FloatStorage", "BFloat16Storage", ... (DTypeError for none).
const char* torch_storage_name(DType dtype);

// The data.pkl of a torch.save'd OrderedDict holding `entries` in the given order.
std::vector<unsigned char> pickle_state_dict(const std::vector<PickledStateEntry>& entries);

}  // namespace shardrt
