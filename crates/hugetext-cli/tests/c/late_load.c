/* Load a big library after start, from several threads at once, use it,
 * unload it, and again: what `hugetext run` must follow through the rtld
 * audit interface.
 *
 *   late_load LIB ROUNDS THREADS
 *
 * Each round: THREADS threads dlopen LIB at the same moment (a barrier),
 * call every function and every 4 KiB RET stub of it (libbig.so, a test
 * fixture), then main measures, while every thread still holds the library,
 * how much of its text is backed by huge pages (/proc/self/smaps; with
 * 64 KiB pages on arm64, 2 MiB contpte blocks: unit_huge.h), all
 * threads dlclose it (how many lines of /tmp/perf-PID.map name its text
 * while it is loaded: perf_lines), and main checks that nothing of it is left: no
 * executable mapping in its old address range (an anonymous copy moved over
 * its text would be one) and no line of /tmp/perf-PID.map naming an address there.
 *
 * stdout (identical with and without hugetext): per round, the sum of the
 * functions' results. stderr, per round: "round=R huge_kib=K text_kib=T
 * perf_lines=P left_kib=L stale_lines=S". Any result differing between calls exits 3. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "unit_huge.h"

#define BLOCK (256 * 1024)

static const char *lib;
static int nthreads;
static pthread_barrier_t opened, measured;
static atomic_long sums[64];
static atomic_ulong text_lo, text_hi;

static long call_at(char *p) { return ((long (*)(void))p)(); }

static void *runner(void *arg) {
    long id = (long)arg;
    pthread_barrier_wait(&opened);
    void *h = dlopen(lib, RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); exit(2); }
    char *b = dlsym(h, "lib_stubs_begin"), *e = dlsym(h, "lib_stubs_end");
    if (!b || !e) { fprintf(stderr, "dlsym: %s\n", dlerror()); exit(2); }
    atomic_store(&text_lo, (unsigned long)b);
    atomic_store(&text_hi, (unsigned long)e);
    long sum = 0;
    for (int pass = 0; pass < 3; pass++) {
        long s = 0;
        for (char *p = b; p + BLOCK <= e + 4096; p += BLOCK) s += call_at(p);
        for (char *q = b; q < e; q += 4096)
            if (*(unsigned char *)q == 0xc3) call_at(q);
        if (pass > 0 && s != sum) { fprintf(stderr, "MISMATCH\n"); exit(3); }
        sum = s;
    }
    atomic_store(&sums[id], sum);
    pthread_barrier_wait(&opened); /* every thread holds the library */
    pthread_barrier_wait(&measured);
    if (dlclose(h)) { fprintf(stderr, "dlclose: %s\n", dlerror()); exit(2); }
    return NULL;
}

/* kB of AnonHugePages + FilePmdMapped, and of Size, of smaps entries that
 * overlap [lo, hi). */
static void measure(unsigned long lo, unsigned long hi, long *huge, long *size) {
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    *huge = *size = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        long v;
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' ')) {
            in = s < hi && e > lo;
            if (in) *size += (long)(e - s) / 1024;
        } else if (in && (sscanf(line, "AnonHugePages: %ld", &v) == 1 || sscanf(line, "FilePmdMapped: %ld", &v) == 1)) {
            *huge += v;
        }
    }
    if (f) fclose(f);
    /* 64 KiB pages on arm64: huge means whole 2 MiB contpte blocks. */
    long u = unit_huge_kib(lo, hi);
    if (u >= 0)
        *huge = u;
}

/* kB still mapped in [lo, hi). */
static long left_in(unsigned long lo, unsigned long hi) {
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    long kb = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        char perms[5] = "";
        if (sscanf(line, "%lx-%lx %4s", &s, &e, perms) == 3 && s < hi && e > lo) {
            /* Executable mappings only: a copy left behind is one; malloc
             * may reserve an arena's heap in the freed range (64 KiB-page
             * arm64: a "---p" tail of a 64 MiB-aligned heap), which is not. */
            if (perms[2] == 'x') kb += (long)((e < hi ? e : hi) - (s > lo ? s : lo)) / 1024;
            /* What it is, for a failing test to show. */
            fprintf(stderr, "left in [%lx, %lx): %s", lo, hi, line);
        }
    }
    if (f) fclose(f);
    return kb;
}

/* Lines of /tmp/perf-PID.map naming an address in [lo, hi). */
static int stale_lines(unsigned long lo, unsigned long hi) {
    char path[64], line[512];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *f = fopen(path, "r");
    int n = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long a;
        if (sscanf(line, "%lx", &a) == 1 && a >= lo && a < hi) n++;
    }
    if (f) fclose(f);
    return n;
}

int main(int argc, char **argv) {
    if (argc < 4) { fprintf(stderr, "usage: late_load LIB ROUNDS THREADS\n"); return 2; }
    lib = argv[1];
    int rounds = atoi(argv[2]);
    nthreads = atoi(argv[3]);
    if (nthreads < 1 || nthreads > 64) return 2;
    setvbuf(stdout, NULL, _IOLBF, 0);
    for (int r = 0; r < rounds; r++) {
        pthread_t t[64];
        pthread_barrier_init(&opened, NULL, nthreads + 1);
        pthread_barrier_init(&measured, NULL, nthreads + 1);
        for (long i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, runner, (void *)i);
        pthread_barrier_wait(&opened);
        pthread_barrier_wait(&opened);
        unsigned long lo = atomic_load(&text_lo), hi = atomic_load(&text_hi);
        long huge, size;
        measure(lo, hi, &huge, &size);
        int named = stale_lines(lo, hi);
        pthread_barrier_wait(&measured);
        for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
        for (int i = 1; i < nthreads; i++)
            if (atomic_load(&sums[i]) != atomic_load(&sums[0])) { fprintf(stderr, "MISMATCH between threads\n"); return 3; }
        printf("round %d sum=%ld\n", r, atomic_load(&sums[0]));
        fprintf(stderr, "round=%d huge_kib=%ld text_kib=%ld perf_lines=%d left_kib=%ld stale_lines=%d\n", r,
                huge, (long)(hi - lo) / 1024, named, left_in(lo, hi), stale_lines(lo, hi));
        pthread_barrier_destroy(&opened);
        pthread_barrier_destroy(&measured);
    }
    return 0;
}
