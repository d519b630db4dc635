#pragma once
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <sys/prctl.h>

/* prctl(2) is variadic (Swift cannot call it). "PR_SET_DUMPABLE ... 0: the process is not dumpable": no core file,
   and other processes of the same user may not ptrace it or read its /proc/PID/mem. Returns the flag read back. */
static inline int mw_set_not_dumpable(void) {
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    return prctl(PR_GET_DUMPABLE, 0, 0, 0, 0);
}
