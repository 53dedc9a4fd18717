/* Fault injection for the C API fault probes: see capi_fault_inject.c. */
#ifndef SHARDRT_TESTS_CAPI_FAULT_INJECT_H
#define SHARDRT_TESTS_CAPI_FAULT_INJECT_H
#include <stddef.h>

enum { FAULT_ERROR = 0, FAULT_KILL = 1, FAULT_STOP = 2 };

/* Page-aligned, zeroed memory of its own pages (never freed: the probe's process ends by MPI_Abort). */
void* fault_alloc(size_t bytes);
/* Protects [p, p + bytes) (p from fault_alloc): the first touch kills (FAULT_KILL) or stops (FAULT_STOP) the
 * process. 0 on success. */
int fault_arm_memory(void* p, size_t bytes, int action);
/* Lowers RLIMIT_FSIZE to `bytes`: a write past it fails with EFBIG (FAULT_ERROR), or kills or stops the process. */
int fault_arm_file_size(long bytes, int action);
/* Restores the file-size limit fault_arm_file_size lowered. */
int fault_disarm_file_size(void);
/* In `ms` milliseconds the process is killed or stopped, whatever it is doing then. */
int fault_arm_timer(int ms, int action);
/* Waits (at most 60 s) until process `pid` of this node is gone (FAULT_KILL) or stopped (FAULT_STOP). */
int fault_wait_for(long pid, int action);
/* Seconds of CLOCK_MONOTONIC. */
double fault_now(void);

#endif
