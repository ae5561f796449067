// SPDX-License-Identifier: Apache-2.0
// no_clone3 PROGRAM [ARGS...]: runs PROGRAM under a seccomp filter that answers clone3 with
// ENOSYS, as Docker's default profile does (so that glibc falls back to clone). lastcall's
// spawner must then fall back too: fork, and the child moves itself into its cgroup.
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef __NR_clone3
#define __NR_clone3 435
#endif

int main(int argc, char** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: no_clone3 PROGRAM [ARGS...]\n");
        return 2;
    }
    struct sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    struct sock_fprog prog = {sizeof filter / sizeof filter[0], filter};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
        perror("no_clone3: seccomp");
        return 1;
    }
    // The filter must be what answers: the kernel itself refuses these arguments with EINVAL.
    errno = 0;
    if (syscall(__NR_clone3, NULL, 0) != -1 || errno != ENOSYS) {
        fprintf(stderr, "no_clone3: clone3 is not refused with ENOSYS (errno %d)\n", errno);
        return 1;
    }
    execvp(argv[1], argv + 1);
    perror("no_clone3: exec");
    return 127;
}
