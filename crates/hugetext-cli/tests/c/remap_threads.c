/* Exercise hugetext_remap_text() (the C API, -lhugetext) while the code
 * being remapped runs: the big text of libbig.so (a test fixture).
 *
 *   remap_threads MODE [CALLS]
 *   MODE threads  4 threads call every function and every 4 KiB RET stub of
 *                 libbig.so in a loop while main calls hugetext_remap_text()
 *   MODE signals  as threads, and a thread sends SIGUSR1 to main as fast as it
 *                 can; the handler runs code in libbig.so
 *   MODE fork     remap, then fork: the child runs the text and exits
 *   MODE exec     remap, then exec the program given as argument 2
 *
 * Each thread checks every result against the value computed before the
 * remap; any difference exits with status 3. Prints "remapped=BYTES" per
 * call and "clean" at the end. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "hugetext.h"

extern char lib_stubs_begin[], lib_stubs_end[];
/* Functions lib_f0..lib_fN-1 sit at the start of each 256 KiB block. */
#define BLOCK (256 * 1024)

static long expected[1024];
static int nfunc;
static atomic_int stop;
static atomic_long handled;

static long call_at(char *p) { return ((long (*)(void))p)(); }

/* REMAP_THREADS_MAPS set: the executable mappings after call `c`, to
 * stderr (which of libbig.so's windows are file-backed, which copied). */
static void dump_maps(int c) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    if (!f) return;
    while (fgets(line, sizeof line, f))
        if (strstr(line, " r-xp ") || strstr(line, " r-xs ")) fprintf(stderr, "maps after call %d: %s", c + 1, line);
    fclose(f);
}

static int check_all(void) {
    for (int k = 0; k < nfunc; k++)
        if (call_at(lib_stubs_begin + (long)k * BLOCK) != expected[k]) return 0;
    for (char *q = lib_stubs_begin; q < lib_stubs_end; q += 4096)
        if (*(unsigned char *)q == 0xc3) call_at(q);
    return 1;
}

static void *runner(void *arg) {
    (void)arg;
    while (!atomic_load(&stop))
        if (!check_all()) { fprintf(stderr, "MISMATCH in thread\n"); exit(3); }
    return NULL;
}

static pthread_t main_thread;
static void *signaller(void *arg) {
    (void)arg;
    while (!atomic_load(&stop)) { pthread_kill(main_thread, SIGUSR1); usleep(50); }
    return NULL;
}

static void on_usr1(int sig) {
    (void)sig;
    /* Run code in the text being remapped, from a signal handler. */
    int k = (int)(atomic_fetch_add(&handled, 1) % nfunc);
    if (call_at(lib_stubs_begin + (long)k * BLOCK) != expected[k]) _exit(3);
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "threads";
    int calls = argc > 2 && strcmp(mode, "exec") != 0 ? atoi(argv[2]) : 3;
    nfunc = (int)((lib_stubs_end - lib_stubs_begin) / BLOCK);
    if (nfunc > 1024) nfunc = 1024;
    for (int k = 0; k < nfunc; k++) expected[k] = call_at(lib_stubs_begin + (long)k * BLOCK);

    if (!strcmp(mode, "fork") || !strcmp(mode, "exec")) {
        long r = hugetext_remap_text();
        printf("remapped=%ld\n", r);
        fflush(stdout);
        if (!strcmp(mode, "exec")) {
            execv(argv[2], argv + 2);
            perror("execv");
            return 4;
        }
        pid_t pid = fork();
        if (pid == 0) _exit(check_all() ? 0 : 3);
        int st;
        waitpid(pid, &st, 0);
        if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) { fprintf(stderr, "child failed: %d\n", st); return 3; }
        if (!check_all()) return 3;
        puts("clean");
        return 0;
    }

    main_thread = pthread_self();
    pthread_t t[5];
    int n = 0;
    if (!strcmp(mode, "signals")) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_usr1;
        sa.sa_flags = SA_RESTART;
        sigaction(SIGUSR1, &sa, NULL);
        pthread_create(&t[n++], NULL, signaller, NULL);
    }
    for (int i = 0; i < 4; i++) pthread_create(&t[n++], NULL, runner, NULL);
    usleep(2000);
    for (int c = 0; c < calls; c++) {
        long r = hugetext_remap_text();
        printf("remapped=%ld\n", r);
        if (r < 0 && r != -EBUSY) { fprintf(stderr, "hugetext_remap_text: %s\n", strerror((int)-r)); }
        if (getenv("REMAP_THREADS_MAPS")) dump_maps(c);
    }
    usleep(2000);
    atomic_store(&stop, 1);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    if (!check_all()) return 3;
    puts("clean");
    return 0;
}
