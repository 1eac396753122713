/* A program whose text is all in a library it loads after start (as
 * firefox-esr's is in libxul): a small main, dlopen, then a child.
 *
 *   dlspawn LIB CMD ARGS...   dlopen LIB, call its lib_f0, fork, exec CMD,
 *                             wait; exit with its status */
#include <dlfcn.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: dlspawn LIB CMD ARGS...\n"); return 2; }
    void *h = dlopen(argv[1], RTLD_NOW);
    if (!h) { fprintf(stderr, "dlspawn: %s\n", dlerror()); return 1; }
    long (*f)(void) = (long (*)(void))dlsym(h, "lib_f0");
    if (!f || f() == 0) return 3;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) { execvp(argv[2], argv + 2); perror(argv[2]); _exit(127); }
    int st;
    if (waitpid(pid, &st, 0) < 0) { perror("waitpid"); return 1; }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
