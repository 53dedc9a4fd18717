#include "mesh/comm_handle.h"

#include <exception>

namespace shardrt {

CommHandle& CommHandle::operator=(CommHandle&& o) noexcept {
  if (this != &o) {
    if (op_) {
      try {
        wait();
      } catch (const std::exception& e) {
        abort_job(e.what());
      }
    }
    op_ = std::move(o.op_);
    on_complete_ = std::move(o.on_complete_);
  }
  return *this;
}

CommHandle::~CommHandle() {
  if (!op_) return;
  try {
    wait();
  } catch (const std::exception& e) {
    abort_job(e.what());
  }
}

// A transfer that failed has already been dealt with by the failure policy (under throw_error its requests
// are cancelled and its buffers kept alive), so the handle lets go of it instead of waiting again later.
void CommHandle::wait() {
  if (!op_) return;
  try {
    op_->wait();
  } catch (...) {
    abandon();
    throw;
  }
  complete();
}

bool CommHandle::ready() {
  if (!op_) return true;
  try {
    if (!op_->test()) return false;
  } catch (...) {
    abandon();
    throw;
  }
  complete();
  return true;
}

void CommHandle::abandon() {
  op_.reset();
  on_complete_ = nullptr;
}

void CommHandle::complete() {
  auto finish = std::move(on_complete_);
  op_.reset();
  on_complete_ = nullptr;
  if (finish) finish();
}

}  // namespace shardrt
