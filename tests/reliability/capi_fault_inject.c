/* Fault injection for the C API fault probes (capi_fault_probe.c and capi_fault_probe.f90, run by capi_faults.sh).
 * A rank is made to fail at a fixed point inside a C API call, whatever the load of the machine, by a trap that
 * the library itself springs:
 *   - memory: the rank's input (or target) lives in pages of its own, protected just before the call; the library's
 *     first read of them inside the call raises SIGSEGV, whose handler kills the process (SIGKILL) or stops it
 *     (SIGSTOP: alive, its connections open, never running again);
 *   - file size: RLIMIT_FSIZE is lowered just before a checkpoint save, so the rank's write of its checkpoint file
 *     passes the limit: with SIGXFSZ ignored the write fails with EFBIG (an error the library reports, as a full disk
 *     would), with a handler the rank is killed or stopped in the middle of writing the file.
 *   - a timer: the rank dies (or stops) a fixed time after it entered a call in which it waits for the others,
 *     who enter only once /proc shows it gone (or stopped): the call's first step, the ranks' start agreement.
 * Actions: 0 an error (file size only), 1 SIGKILL, 2 SIGSTOP. Plain C with a bind(C) face for Fortran. */
#define _GNU_SOURCE
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char* trap_begin;
static struct rlimit saved_fsize;
static int fsize_saved;
static char* trap_end;
static volatile sig_atomic_t trap_action;

/* The trap's end: the same for both signals. Only async-signal-safe calls. */
static void spring(void) {
  if (trap_action == 2) {
    for (;;) raise(SIGSTOP); /* a SIGCONT would only run this again */
  }
  kill(getpid(), SIGKILL);
}

static void on_segv(int sig, siginfo_t* info, void* ctx) {
  (void)ctx;
  const char* addr = (const char*)info->si_addr;
  if (addr >= trap_begin && addr < trap_end) spring();
  /* A real crash: back to the default action, which the return re-raises. */
  signal(sig, SIG_DFL);
}

static void on_signal(int sig) {
  (void)sig;
  spring();
}

void* fault_alloc(size_t bytes) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t n = (bytes + page - 1) / page * page;
  void* p = mmap(NULL, n ? n : page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? NULL : p;
}

int fault_arm_memory(void* p, size_t bytes, int action) {
  const size_t page = (size_t)sysconf(_SC_PAGESIZE);
  const size_t n = (bytes + page - 1) / page * page;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  trap_begin = (char*)p;
  trap_end = (char*)p + n;
  trap_action = action;
  if (sigaction(SIGSEGV, &sa, NULL) != 0) return -1;
  return mprotect(p, n, PROT_NONE);
}

int fault_arm_file_size(long bytes, int action) {
  trap_action = action;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = action == 0 ? SIG_IGN : on_signal;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGXFSZ, &sa, NULL) != 0) return -1;
  struct rlimit lim;
  if (getrlimit(RLIMIT_FSIZE, &lim) != 0) return -1;
  if (!fsize_saved) saved_fsize = lim, fsize_saved = 1;
  lim.rlim_cur = (rlim_t)bytes;
  return setrlimit(RLIMIT_FSIZE, &lim);
}

int fault_disarm_file_size(void) {
  if (!fsize_saved) return 0;
  fsize_saved = 0;
  return setrlimit(RLIMIT_FSIZE, &saved_fsize);
}

int fault_arm_timer(int ms, int action) {
  struct sigaction sa;
  struct itimerval when;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  trap_action = action;
  if (sigaction(SIGALRM, &sa, NULL) != 0) return -1;
  memset(&when, 0, sizeof when);
  when.it_value.tv_sec = ms / 1000;
  when.it_value.tv_usec = (ms % 1000) * 1000;
  return setitimer(ITIMER_REAL, &when, NULL);
}

/* The state letter of process `pid` from /proc/<pid>/stat ('T' stopped, 'Z' a zombie), 'X' once it is gone. */
static char process_state(long pid) {
  char path[64], line[512];
  size_t n;
  const char* close;
  FILE* f;
  snprintf(path, sizeof path, "/proc/%ld/stat", pid);
  f = fopen(path, "r");
  if (!f) return 'X';
  n = fread(line, 1, sizeof line - 1, f);
  fclose(f);
  line[n] = 0;
  close = strrchr(line, ')');  /* "pid (comm) state ...": comm may hold spaces or parentheses */
  return close && close[1] == ' ' ? close[2] : '?';
}

int fault_wait_for(long pid, int action) {
  const struct timespec ten_ms = {0, 10000000};
  int i;
  for (i = 0; i < 6000; ++i) {
    const char st = process_state(pid);
    if (action == 2 ? st == 'T' : st == 'Z' || st == 'X') return 0;
    nanosleep(&ten_ms, NULL);
  }
  return -1;
}

double fault_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}
