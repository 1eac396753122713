/* A program with text to remap (it runs code of the fixtures' libbig.so)
 * that runs a command as its child, like a server starting a helper:
 *
 *   spawn CMD ARGS...   fork, exec CMD, wait; exit with its status */
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

extern long lib_f0(void);

int main(int argc, char **argv) {
    if (argc < 2) { fprintf(stderr, "usage: spawn CMD ARGS...\n"); return 2; }
    if (lib_f0() == 0) return 3;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) { execvp(argv[1], argv + 1); perror(argv[1]); _exit(127); }
    int st;
    if (waitpid(pid, &st, 0) < 0) { perror("waitpid"); return 1; }
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
