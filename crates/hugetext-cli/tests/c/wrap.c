/* Run a command in a restricted process (for the `hugetext run` tests).
 *
 *   wrap nothp      CMD ARGS...  prctl(PR_SET_THP_DISABLE): no huge pages for
 *                                this process and what it execs
 *   wrap nomadvise  CMD ARGS...  seccomp: madvise and mremap fail with EPERM
 *   wrap nomremap   CMD ARGS...  seccomp: mremap fails with EPERM
 *   wrap nogetpid   CMD ARGS...  seccomp: getpid fails with EPERM */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static int deny(int madv, int mremap, int getpid) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, getpid ? __NR_getpid : 0xffff, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, madv ? __NR_madvise : 0xffff, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, mremap ? __NR_mremap : 0xffff, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: wrap nothp|nomadvise|nomremap|nogetpid CMD ARGS...\n"); return 2; }
    int r;
    if (!strcmp(argv[1], "nothp")) r = prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
    else if (!strcmp(argv[1], "nomadvise")) r = deny(1, 1, 0);
    else if (!strcmp(argv[1], "nomremap")) r = deny(0, 1, 0);
    else if (!strcmp(argv[1], "nogetpid")) r = deny(0, 0, 1);
    else { fprintf(stderr, "wrap: unknown mode %s\n", argv[1]); return 2; }
    if (r) { perror("wrap: prctl"); return 2; }
    execvp(argv[2], argv + 2);
    perror("wrap: exec");
    return 127;
}
