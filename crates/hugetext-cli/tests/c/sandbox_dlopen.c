/* A sandboxed program that loads a plugin: what systemd's
 * SystemCallFilter= and most sandboxes do. After start it installs a
 * seccomp allow-list whose default action is SECCOMP_RET_KILL_PROCESS (any
 * other system call kills the whole process with SIGSYS), then dlopens LIB
 * and calls its lib_f0.
 *
 *   sandbox_dlopen LIB [open|after]
 *
 * With "open", no filter (the same program unsandboxed). With "after", the
 * library is loaded first, then the filter installed, then the library is
 * closed and loaded again (plugins loaded, then the sandbox entered).
 * stdout: "lib_f0=N" per load. Exit 2 when the filter cannot be installed or the
 * library not loaded. (For hugetext's hostile tests: under `hugetext run`
 * the auditor's pass over objects loaded after start must not make a system
 * call the filter forbids.) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__x86_64__)
#define ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define ARCH AUDIT_ARCH_AARCH64
#else
#error "unsupported architecture"
#endif

#define ALLOW(nr) BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (nr), 0, 1), BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW)

/* What dlopen, stdio and exit need (statx and lseek for other C
 * libraries' loaders): nothing more. No madvise, mremap or prctl. */
static int sandbox(void) {
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        ALLOW(__NR_openat),
        ALLOW(__NR_read),
        ALLOW(__NR_pread64),
        ALLOW(__NR_close),
        ALLOW(__NR_fstat),
        ALLOW(__NR_newfstatat),
        ALLOW(__NR_statx),
        ALLOW(__NR_lseek),
        ALLOW(__NR_mmap),
        ALLOW(__NR_mprotect),
        ALLOW(__NR_munmap),
        ALLOW(__NR_brk),
        ALLOW(__NR_write),
        ALLOW(__NR_futex),
        ALLOW(__NR_getrandom),
        ALLOW(__NR_exit_group),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
    };
    struct sock_fprog prog = { .len = sizeof f / sizeof f[0], .filter = f };
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)) return -1;
    return syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog);
}

static void *load(const char *lib) {
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "sandbox_dlopen: %s\n", dlerror()); exit(2); }
    long (*f0)(void) = (long (*)(void))dlsym(h, "lib_f0");
    if (!f0) { fprintf(stderr, "sandbox_dlopen: %s\n", dlerror()); exit(2); }
    printf("lib_f0=%ld\n", f0());
    fflush(stdout);
    return h;
}

int main(int argc, char **argv) {
    const char *mode = argc == 3 ? argv[2] : "";
    if (argc < 2 || argc > 3 || (argc == 3 && strcmp(mode, "open") && strcmp(mode, "after"))) {
        fprintf(stderr, "usage: sandbox_dlopen LIB [open|after]\n");
        return 2;
    }
    if (!strcmp(mode, "after")) {
        void *h = load(argv[1]);
        if (sandbox()) { perror("sandbox_dlopen: seccomp"); return 2; }
        if (dlclose(h)) { fprintf(stderr, "sandbox_dlopen: %s\n", dlerror()); return 2; }
        load(argv[1]);
        return 0;
    }
    if (argc == 2 && sandbox()) { perror("sandbox_dlopen: seccomp"); return 2; }
    load(argv[1]);
    return 0;
}
