// The C API under a rank that fails alone (docs/embedding.md "Ranks that fail or disagree"): rank 1 fails a
// shardrt_model_forward, either in its own checks (a null output handle) or inside the call (an input whose copy it
// forbids, found after the start agreement and before the model's first collective), with and without
// SHARDRT_AGREE_ERRORS, and with and without calling again at once. Every rank must get an error status for that
// call within SHARDRT_COMM_TIMEOUT + 5 s, and nothing may report OK for it: no retry pairs with the others' call.
// Run with a short SHARDRT_COMM_TIMEOUT (tests/meson.build: 2 s) on 1 to 3 ranks.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tests/capi/capi_fixture.h"

using namespace shardrt;
using namespace shardrt::capi_test;

namespace {

double deadline_s() {
  const char* t = std::getenv("SHARDRT_COMM_TIMEOUT");
  return t && *t ? std::atof(t) : 300.0;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

enum class Failure { null_output, forbidden_copy };

struct Outcome {
  shardrt_status first = SHARDRT_OK, retry = SHARDRT_OK;
  double first_s = 0, retry_s = 0;
  std::string message;
};

// One forward on a fresh context, mesh and FLARE, in which rank 1 (of 2 or more) fails alone as `how` says, then
// (`retry`) calls forward again at once with valid arguments, while the other ranks call it once.
Outcome rank_one_fails(int flags, Failure how, bool retry) {
  const bool failing = world_size() > 1 && world_rank() == 1;
  Session s(flags);
  Piece fx(s, 1, 9, 3, fx_value), emb(s, 1, 9, 2, emb_value), out(s, 1, 9, 2);
  // Rank 1's fx as f32 memory that forbids copies: the f64 model cannot read it (SHARDRT_ERR_COPY_FORBIDDEN), which
  // only the forward's body finds.
  std::vector<float> fx32(fx.data.begin(), fx.data.end());
  const int64_t shape[3] = {1, fx.n, 3}, global[3] = {1, 9, 3}, offs[3] = {0, fx.offset, 0};
  shardrt_tensor t32{0};
  shardrt_sharded s32{0};
  CAPI_OK(shardrt_tensor_wrap(&t32, s.ctx, fx32.data(), SHARDRT_F32, 3, shape, nullptr, SHARDRT_LAYOUT_ROW_MAJOR,
                              SHARDRT_DEVICE_CPU, SHARDRT_COPY_FORBID));
  CAPI_OK(shardrt_sharded_create(&s32, s.mesh, t32, 3, global, offs));
  shardrt_model m{0};
  CAPI_OK(shardrt_model_create(&m, s.mesh, "flare", flare_config(), nullptr, SHARDRT_F64, 4));
  const bool bad_input = failing && how == Failure::forbidden_copy;
  CAPI_OK(shardrt_model_set_input(m, "fx", bad_input ? s32 : fx.sharded));
  CAPI_OK(shardrt_model_set_input(m, "embedding", emb.sharded));
  MPI_Barrier(MPI_COMM_WORLD);

  Outcome r;
  auto t0 = std::chrono::steady_clock::now();
  const bool null_output = failing && how == Failure::null_output;
  r.first = shardrt_model_forward(m, null_output ? shardrt_sharded{0} : out.sharded, 0);
  r.first_s = seconds_since(t0);
  r.message = shardrt_last_error();
  if (failing && retry) {
    CAPI_OK(shardrt_model_set_input(m, "fx", fx.sharded));  // the cause fixed, the call made again
    t0 = std::chrono::steady_clock::now();
    r.retry = shardrt_model_forward(m, out.sharded, 0);
    r.retry_s = seconds_since(t0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  shardrt_model_destroy(m);
  shardrt_sharded_destroy(s32);
  shardrt_tensor_destroy(t32);
  return r;
}

void check_every_rank_failed(const Outcome& r, bool retried, const std::string& what) {
  const double bound = deadline_s() + 5;
  if (world_rank() <= 1)  // the failing rank and one of the others: what each got, and when
    std::printf("capi faults: %s: rank %d: %s after %.2f s%s%s\n", what.c_str(), world_rank(),
                shardrt_status_name(r.first), r.first_s, retried && world_rank() == 1 ? "; retry " : "",
                retried && world_rank() == 1
                    ? (std::string(shardrt_status_name(r.retry)) + " after " + std::to_string(r.retry_s) + " s").c_str()
                    : "");
  INFO(what << " on rank " << world_rank() << ": " << shardrt_status_name(r.first) << " after " << r.first_s
            << " s: " << r.message);
  if (world_size() == 1) {  // nobody else to wait for: the failure (none here) is plain
    CHECK(r.first == SHARDRT_OK);
    return;
  }
  CHECK(r.first != SHARDRT_OK);  // nothing reports OK for the call that failed on rank 1
  CHECK(r.first_s <= bound);
  if (retried && world_rank() == 1) {
    INFO("the retry: " << shardrt_status_name(r.retry) << " after " << r.retry_s << " s");
    CHECK(r.retry != SHARDRT_OK);  // it never pairs with the others' call: they made only one
    CHECK(r.retry_s <= bound);
  }
}

}  // namespace

TEST_CASE("capi faults: a rank whose own checks fail (a null output handle) fails the call on every rank at once, "
          "with and without SHARDRT_AGREE_ERRORS, with and without an immediate retry", "[capi][faults]") {
  for (int flags : {SHARDRT_AGREE_ERRORS, 0})
    for (bool retry : {false, true}) {
      const std::string what = std::string(flags ? "agreed" : "not agreed") + (retry ? ", retried" : "");
      const Outcome r = rank_one_fails(flags, Failure::null_output, retry);
      check_every_rank_failed(r, retry, what);
      if (world_size() > 1) {
        // The start agreement found it before anything ran: the same status everywhere, the null handle named.
        CHECK(r.first == SHARDRT_ERR_INVALID_HANDLE);
        CHECK(r.message.find("output") != std::string::npos);
        CHECK(r.first_s <= 2.0);  // no deadline was waited for
      }
    }
}

TEST_CASE("capi faults: a rank that fails inside the call (before the model's first collective) fails it on every "
          "rank within the deadline + 5 s, with and without SHARDRT_AGREE_ERRORS, with and without an immediate "
          "retry", "[capi][faults]") {
  for (int flags : {SHARDRT_AGREE_ERRORS, 0})
    for (bool retry : {false, true}) {
      const std::string what = std::string(flags ? "agreed" : "not agreed") + (retry ? ", retried" : "");
      const Outcome r = rank_one_fails(flags, Failure::forbidden_copy, retry);
      check_every_rank_failed(r, retry, what);
      if (world_size() > 1 && flags) {
        // Agreed: rank 1's own words on every rank, with the list of the ranks that failed.
        CHECK(r.first == SHARDRT_ERR_COPY_FORBIDDEN);
        CHECK(r.message.find("[quoted from rank 1; failed on rank(s) ") != std::string::npos);
      }
      if (world_size() > 1 && !flags && world_rank() != 1) {
        // Left waiting, the others heard from rank 1 after their timeout (capi/roll_call.h): they name it.
        CHECK(r.message.find("rank 1 failed this call (SHARDRT_ERR_COPY_FORBIDDEN)") != std::string::npos);
      }
      if (world_size() > 1 && !flags)
        CHECK((world_rank() == 1 ? r.first == SHARDRT_ERR_COPY_FORBIDDEN : r.first == SHARDRT_ERR_COMM));
    }
}
