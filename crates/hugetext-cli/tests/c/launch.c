/* A launcher (no text of its own to remap) that starts a program the way
 * one of the C library's functions does, then waits for it:
 *
 *   launch MODE PROG ARGS...
 *     MODE: execve (a copy of the environment, as a language runtime
 *     passes it), execv, execvp, execvpe, execl, execlp, execle, fexecve,
 *     posix_spawn, posix_spawnp, system, popen, vfork (vfork + execve),
 *     cleared (execve with an environment of one variable of its own)
 *
 * Exits 3 when its own environment names hugetext (a launcher sees a
 * clean environment too), else with the program's status. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

static int status(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

static char *joined(char **argv) {
    static char cmd[8192];
    size_t n = 0;
    for (; *argv; argv++) n += snprintf(cmd + n, sizeof cmd - n, "%s'%s'", n ? " " : "", *argv);
    return cmd;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: launch MODE PROG ARGS...\n"); return 2; }
    for (char **e = environ; *e; e++)
        if (strstr(*e, "HUGETEXT_") || strstr(*e, "libhugetext")) { fprintf(stderr, "launch: %s\n", *e); return 3; }
    const char *mode = argv[1], *prog = argv[2];
    char **args = argv + 2;
    fflush(stdout);
    if (!strcmp(mode, "system")) return status(system(joined(args)));
    if (!strcmp(mode, "popen")) {
        FILE *f = popen(joined(args), "r");
        if (!f) { perror("popen"); return 1; }
        char buf[4096];
        size_t n;
        while ((n = fread(buf, 1, sizeof buf, f)) > 0) fwrite(buf, 1, n, stdout);
        return status(pclose(f));
    }
    if (!strcmp(mode, "posix_spawn") || !strcmp(mode, "posix_spawnp")) {
        pid_t pid;
        int r = mode[11] ? posix_spawnp(&pid, prog, NULL, NULL, args, environ)
                         : posix_spawn(&pid, prog, NULL, NULL, args, environ);
        if (r) { fprintf(stderr, "launch: %s: %s\n", mode, strerror(r)); return 1; }
        int st;
        waitpid(pid, &st, 0);
        return status(st);
    }
    pid_t pid = strcmp(mode, "vfork") ? fork() : vfork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        if (!strcmp(mode, "execve")) {
            size_t n = 0;
            while (environ[n]) n++;
            char **copy = calloc(n + 1, sizeof *copy);
            for (size_t i = 0; i < n; i++) copy[i] = strdup(environ[i]);
            execve(prog, args, copy);
        } else if (!strcmp(mode, "vfork")) execve(prog, args, environ);
        else if (!strcmp(mode, "execv")) execv(prog, args);
        else if (!strcmp(mode, "execvp")) execvp(prog, args);
        else if (!strcmp(mode, "execvpe")) execvpe(prog, args, environ);
        else if (!strcmp(mode, "execl")) execl(prog, prog, (char *)NULL);
        else if (!strcmp(mode, "execlp")) execlp(prog, prog, (char *)NULL);
        else if (!strcmp(mode, "execle")) execle(prog, prog, (char *)NULL, environ);
        else if (!strcmp(mode, "fexecve")) {
            int fd = open(prog, O_RDONLY | O_CLOEXEC);
            fexecve(fd, args, environ);
        } else if (!strcmp(mode, "cleared")) {
            char *env[] = { "MINE=1", NULL };
            execve(prog, args, env);
        } else { fprintf(stderr, "launch: unknown mode %s\n", mode); _exit(2); }
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0) { perror("waitpid"); return 1; }
    return status(st);
}
