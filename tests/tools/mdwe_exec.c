/*
 * mdwe_exec PROGRAM [ARGS...]: run a program under the kernel's memory-deny-write-execute policy
 * (prctl PR_SET_MDWE, Linux 6.3+), the same policy systemd's MemoryDenyWriteExecute=yes applies.
 * Used to check that an OpenCL driver tolerates MemoryDenyWriteExecute before the unit sets it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <unistd.h>

#ifndef PR_SET_MDWE
#define PR_SET_MDWE 65
#endif
#ifndef PR_MDWE_REFUSE_EXEC_GAIN
#define PR_MDWE_REFUSE_EXEC_GAIN 1
#endif

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mdwe_exec PROGRAM [ARGS...]\n");
        return 2;
    }
    if (prctl(PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN, 0, 0, 0) != 0) {
        fprintf(stderr, "mdwe_exec: PR_SET_MDWE: %s (needs Linux 6.3 or later)\n", strerror(errno));
        return 125;
    }
    /* The policy must be in force: a writable and executable mapping is refused. */
    void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (p != MAP_FAILED) {
        fprintf(stderr, "mdwe_exec: a W+X mapping was allowed: the policy is not enforced\n");
        return 125;
    }
    execv(argv[1], argv + 1);
    fprintf(stderr, "mdwe_exec: %s: %s\n", argv[1], strerror(errno));
    return 127;
}
