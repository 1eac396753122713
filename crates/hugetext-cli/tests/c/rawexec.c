/* A launcher made like a Go program: it carries the build-id note Go's
 * linker writes (owner "Go", type 4) and starts its command with the
 * execve system call, not the C library's function (as Go's os/exec and
 * syscall.Exec do):
 *
 *   rawexec CMD ARGS... */
#define _GNU_SOURCE
#include <stdio.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

__asm__(".section .note.go.buildid,\"a\",@note\n"
        ".balign 4\n"
        ".long 4\n"          /* name size: "Go" padded, as Go writes it */
        ".long 8\n"          /* descriptor size */
        ".long 4\n"          /* type: build id */
        ".ascii \"Go\\0\\0\"\n"
        ".ascii \"fixture0\"\n"
        ".previous\n");

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: rawexec CMD ARGS...\n"); return 2; }
    fflush(stdout);
    syscall(SYS_execve, argv[1], argv + 1, environ);
    perror("rawexec: execve");
    return 127;
}
