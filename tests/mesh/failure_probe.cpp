// Failure probe, run by failure_probe.sh under mpiexec: one rank (the "victim") fails while the others wait for
// it, and nobody may hang. The survivors must end the job within the deadline (SHARDRT_COMM_TIMEOUT) plus a few
// seconds, each printing a CommError that names the call it was waiting in.
//   throw         the last rank throws a ValueError before an all_reduce on the "domain" axis that the others
//                 enter. It reports the error and leaves as a program should, through shardrt::finalize_mpi(),
//                 whose deadline-polled barrier times out as well; the survivors time out in the all_reduce.
//   hang          the last rank is stuck in local work far beyond the deadline; the others time out in the
//                 all_reduce.
//   kill:<kind>   rank 1 (of 3) enters <kind> and SIGKILLs itself 100 ms later, inside it; ranks 0 and 2 enter
//                 <kind> once it is dead and time out there (in the first call, or in a second one of the same
//                 kind where what the victim had sent already completed the first). Kinds: every collective of Communicator
//                 (all_reduce, broadcast from rank 1, barrier, all_gather(_v), reduce_scatter(_v),
//                 all_to_all(_v), agree), ring_shift(_async), halo_exchange(_async), recv (point to point, both
//                 survivors receive from rank 1) and finalize (shardrt::finalize_mpi). The buffers are large
//                 (segments of 256 KiB), so a send to the dead rank cannot complete eagerly: every survivor waits
//                 on the victim, including rank 0 of the ring shift, which receives from rank 2.
//   stop:<kind>   the same kinds, with rank 1 hung instead of dead: 100 ms into <kind> it stops itself (SIGSTOP:
//                 alive, its MPI connections open, but it never runs again); ranks 0 and 2 enter once it is
//                 stopped and time out there. The launcher ends the stopped rank when the survivors abort.
//   kill:backward, kill:bucket, hang:backward, hang:bucket
//                 rank 1 (of 3) is SIGKILLed or hangs inside one training step of a small sharded model: in a
//                 sharded linear's backward, or in the optimizer's deferred grad bucket's all_reduce
//                 (failure_probe_step.cpp); the survivors time out in that all_reduce.
//   watch:split   rank 1 joins the Mesh constructor's deadline barriers but then hangs instead of calling
//                 MPI_Comm_split: the others are blocked inside MPI_Comm_split, which has no non-blocking form,
//                 and the watchdog must end them (mesh/watchdog.h).
//   watch:finalize  the same inside MPI_Finalize: rank 1 passes finalize_mpi's barrier, then hangs.
// The victim of kill modes dies by SIGKILL, which OpenMPI's launcher answers by killing every rank at once
// unless told otherwise; failure_probe.sh tells it (see there), so the survivors' own deadline is what ends the job.
#include <mpi.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "mesh/agree.h"
#include "mesh/device_binding.h"
#include "mesh/finalize.h"
#include "mesh/mesh.h"
#include "runtime/errors.h"
#include "runtime/factories.h"
#include "tests/mesh/failure_probe_step.h"

using namespace shardrt;

namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

// Matches, by hand, the MPI_Ibarrier that guarded_mpi_call / finalize_mpi start on `comm` (a non-blocking
// collective only matches a non-blocking one).
void join_guard_barrier(MPI_Comm comm) {
  MPI_Request req;
  MPI_Ibarrier(comm, &req);
  MPI_Wait(&req, MPI_STATUS_IGNORE);
}

// Rank 1 of 3 SIGKILLs itself `ms` after this call, whatever it is doing then.
void die_in(int ms) {
  std::thread([ms] {
    sleep_ms(ms);
    kill(getpid(), SIGKILL);
  }).detach();
}

// The state letter of process `pid` (a rank on this node) from /proc: 'T' stopped, 'Z' a zombie; 'X' once gone.
char process_state(pid_t pid) {
  std::FILE* f = std::fopen(("/proc/" + std::to_string(pid) + "/stat").c_str(), "r");
  if (f == nullptr) return 'X';
  char state = '?';
  // "pid (comm) state ...": the state follows the last ')' (comm may contain spaces or parentheses)
  char line[512];
  const std::size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  line[n] = '\0';
  if (const char* close = std::strrchr(line, ')'); close != nullptr && close[1] == ' ') state = close[2];
  return state;
}

// Rank 1 of 3 stops itself (SIGSTOP) `ms` after this call, whatever it is doing then: a hung rank.
void stop_in(int ms) {
  std::thread([ms] {
    sleep_ms(ms);
    kill(getpid(), SIGSTOP);
  }).detach();
}

// The kill and stop modes' order of events, fixed by the victim's state rather than by sleeps, so that it holds
// however loaded the machine is: the victim enters the call and dies (or stops) inside it 100 ms later, still
// waiting for the others; they enter only once it is dead (or stopped), so the call can never complete with it
// running.
void victim_fails_inside(const std::string& fault, bool victim, pid_t victim_pid) {
  if (victim) {
    if (fault == "kill") die_in(100);
    else stop_in(100);
    return;
  }
  for (;;) {
    const char state = process_state(victim_pid);
    if (fault == "kill" ? state == 'Z' || state == 'X' : state == 'T') return;
    sleep_ms(10);
  }
}

// Enters `kind` on `c` (a 3-rank communicator). Returns false for an unknown kind.
bool enter(const std::string& kind, const Communicator& c) {
  const int p = c.size();
  const int64_t seg = 65536;  // f32 elements per rank segment: 256 KiB, beyond every eager limit
  Tensor x = ones({p * seg});
  Tensor mine = ones({seg});
  const std::vector<int64_t> counts(p, seg);
  if (kind == "all_reduce") c.all_reduce(x);
  else if (kind == "broadcast") c.broadcast(x, 1);
  else if (kind == "barrier") c.barrier();
  else if (kind == "all_gather") c.all_gather(mine, x);
  else if (kind == "all_gather_v") c.all_gather_v(mine, x, counts);
  else if (kind == "reduce_scatter") c.reduce_scatter(x, mine);
  else if (kind == "reduce_scatter_v") c.reduce_scatter_v(x, mine, counts);
  else if (kind == "all_to_all") c.all_to_all(x, Tensor::empty({p * seg}));
  else if (kind == "all_to_all_v") c.all_to_all_v(x, counts, Tensor::empty({p * seg}), counts);
  else if (kind == "agree") (void)c.agree(true, "");
  else if (kind == "ring_shift") c.ring_shift(mine, Tensor::empty({seg}));
  else if (kind == "ring_shift_async") c.ring_shift_async(mine, Tensor::empty({seg})).wait();
  else if (kind == "halo_exchange" || kind == "halo_exchange_async") {
    // Two halo slices of 64 KiB on each inner side: ranks 0 and 2 both exchange with rank 1 only.
    HaloWidths w{{0, 2, 2}, {2, 2, 0}};
    const int64_t r = c.rank();
    Tensor padded = ones({w.left[r] + 8 + w.right[r], 16384});
    if (kind == "halo_exchange") c.halo_exchange(padded, 0, w);
    else c.halo_exchange_async(padded, 0, w).wait();
  } else if (kind == "recv") {
    c.recv(mine, c.rank() == 1 ? 0 : 1, 7);  // rank 1 waits on rank 0 (which never sends) until it dies
  } else {
    return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  set_error_rank(rank);
  // The driver measures the job's end from the moment the last rank is up, not from the launch: starting three
  // processes on an oversubscribed, busy machine can take seconds that are the launcher's, not the library's.
  const auto up_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  std::printf("failure probe: rank %d up at %lld ms\n", rank, static_cast<long long>(up_ms));
  std::fflush(stdout);
  const std::string mode = argc > 1 ? argv[1] : "throw";
  const bool victim = mode.rfind("kill:", 0) == 0 || mode.rfind("stop:", 0) == 0 || mode.rfind("watch:", 0) == 0 ||
                              mode.rfind("hang:", 0) == 0
                          ? rank == 1
                          : rank == size - 1;
  int status = 0;
  try {
    if (mode == "watch:split") {
      if (victim) {
        node_local(MPI_COMM_WORLD);            // the constructor's MPI_Comm_split_type, with its barrier
        join_guard_barrier(MPI_COMM_WORLD);    // the barrier before MPI_Comm_split on axis 'ddp'
        sleep_ms(100000);                      // ... and never the split itself
      }
      Mesh mesh(MPI_COMM_WORLD, 1, size);
      std::printf("failure probe: the Mesh constructor returned on rank %d, which should be impossible\n", rank);
    } else if (mode == "watch:finalize") {
      if (victim) {
        join_guard_barrier(MPI_COMM_WORLD);  // finalize_mpi's barrier, and never MPI_Finalize
        sleep_ms(100000);
      }
      finalize_mpi();
      std::printf("failure probe: finalize_mpi returned on rank %d, which should be impossible\n", rank);
      return 0;
    } else if (mode.rfind("kill:", 0) == 0 || mode.rfind("stop:", 0) == 0) {
      const std::string fault = mode.substr(0, 4), kind = mode.substr(5);
      SHARDRT_CHECK(size == 3, ValueError, "failure probe: ", fault, " modes run on 3 ranks, not ", size);
      // Every rank runs on this node in the probe (mpiexec -n 3 on one host), so the victim's pid says when it died
      // or stopped.
      pid_t pids[3];
      const pid_t me = getpid();
      MPI_Allgather(&me, sizeof me, MPI_BYTE, pids, sizeof me, MPI_BYTE, MPI_COMM_WORLD);
      if (fault == "kill" && probe::run_step_fault("kill", kind, victim, [&] { victim_fails_inside("kill", false, pids[1]); })) {
        std::printf("failure probe: the step returned on rank %d, which should be impossible\n", rank);
        return 0;
      }
      if (kind == "finalize") {
        victim_fails_inside(fault, victim, pids[1]);
        finalize_mpi();
        std::printf("failure probe: finalize_mpi returned on rank %d, which should be impossible\n", rank);
        return 0;
      }
      {
        Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");  // built by every rank: they leave it together
        victim_fails_inside(fault, victim, pids[1]);
        // Twice: what the victim sent before it died may complete the first call on some survivors (a barrier's
        // first round); nothing completes the second.
        for (int i = 0; i < 2; ++i)
          SHARDRT_CHECK(enter(kind, mesh.axis("domain")), ValueError, "failure probe: unknown kind '", kind, "'");
      }
      std::printf("failure probe: %s returned on rank %d, which should be impossible\n", kind.c_str(), rank);
    } else if (mode.rfind("hang:", 0) == 0) {
      SHARDRT_CHECK(size == 3, ValueError, "failure probe: hang modes run on 3 ranks, not ", size);
      SHARDRT_CHECK(probe::run_step_fault("hang", mode.substr(5), victim, [] {}), ValueError,
                    "failure probe: unknown mode '", mode, "'");
      std::printf("failure probe: the step returned on rank %d, which should be impossible\n", rank);
    } else {
      SHARDRT_CHECK(mode == "throw" || mode == "hang", ValueError, "failure probe: unknown mode '", mode, "'");
      Mesh mesh = Mesh::one_d(MPI_COMM_WORLD, "domain");
      Tensor x = ones({16});
      if (victim) {
        if (mode == "hang") sleep_ms(100000);
        throw ValueError("failure probe: rank " + std::to_string(rank) + " fails before the all_reduce");
      }
      mesh.axis("domain").all_reduce(x);
      std::printf("failure probe: all_reduce returned on rank %d, which should be impossible\n", rank);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::fflush(stderr);
    status = 1;  // and leave through finalize_mpi, as a program should: its barrier fails if peers are stuck
  }
  finalize_mpi();
  return status;
}
