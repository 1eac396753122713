/*
 * The guest side of the instruction counter (qcount.c): executes its marker
 * instructions. Built static by scripts/kernel-matrix.sh --count.
 *
 *   marker start NAME|ID   open an interval (on the vCPU this runs on)
 *   marker stop NAME|ID    close it
 *   marker selftest        the counter's self-check (below)
 *
 * A NAME is hashed to an id from 1024 up (FNV-1a), printed as
 * "marker NAME id N"; a number is the id itself (0-16383; the self-check
 * uses 16000-16003, `hugetext bench mprotect --markers` 1-255). Between
 * two runs of this program only its own exit and exec are counted, so
 * `marker start X; CMD; marker stop X` counts CMD plus a constant.
 *
 * selftest, pinned to CPU 0:
 *   16000, 16001  a user-space loop of exactly 2N+1 (x86-64) or 2N+2
 *                 (aarch64) instructions, N = 1000000, twice
 *   16002, 16003  500 mprotect() calls of a 64 KiB region of 4 KiB pages,
 *                 read-only and back, once each as two probes: the same
 *                 kernel count per call (median) is expected of both
 * It prints "selftest loop N user EXPECTED" for the host to check.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define OP_START 1u
#define OP_STOP 2u
#define LOOP_N 1000000

#if defined(__x86_64__)
/* nopl 0x4854XXXX(%rax): disp32 = 0x4854 << 16 | op << 14 | id */
#define MARK(op, id) __asm__ volatile("nopl %c0(%%rax)" ::"i"(0x48540000u | ((op) << 14) | (id)) : "memory")
#define LOOP_EXPECTED (2ull * LOOP_N + 1)
static void loop(void) {
    MARK(OP_START, 16000);
    __asm__ volatile("mov %0, %%rcx\n1: dec %%rcx\njnz 1b" ::"i"(LOOP_N) : "rcx", "cc");
    MARK(OP_STOP, 16000);
    MARK(OP_START, 16001);
    __asm__ volatile("mov %0, %%rcx\n1: dec %%rcx\njnz 1b" ::"i"(LOOP_N) : "rcx", "cc");
    MARK(OP_STOP, 16001);
}
#elif defined(__aarch64__)
/* movk xzr, #(op << 14 | id), lsl #48 */
#define MARK(op, id) __asm__ volatile("movk xzr, %0, lsl #48" ::"i"(((op) << 14) | (id)) : "memory")
#define LOOP_EXPECTED (2ull * LOOP_N + 2)
static void loop(void) {
    MARK(OP_START, 16000);
    __asm__ volatile("movz x9, #0x4240\nmovk x9, #0xf, lsl #16\n1: subs x9, x9, #1\nb.ne 1b" ::: "x9", "cc");
    MARK(OP_STOP, 16000);
    MARK(OP_START, 16001);
    __asm__ volatile("movz x9, #0x4240\nmovk x9, #0xf, lsl #16\n1: subs x9, x9, #1\nb.ne 1b" ::: "x9", "cc");
    MARK(OP_STOP, 16001);
}
#else
#error "marker: x86-64 and aarch64 only"
#endif

/* The marker instruction for a run-time (op, id): one asm per op, the id
 * in a table of all ids would be 2 x 16384 instructions; instead the
 * instruction is written into an executable page. */
static void mark(unsigned op, unsigned id) {
    static unsigned char *page;
    if (!page) {
        page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED) {
            perror("marker: mmap");
            exit(1);
        }
    }
    uint32_t v = (op << 14) | id;
#if defined(__x86_64__)
    uint32_t disp = 0x48540000u | v;
    unsigned char code[] = {0x0f, 0x1f, 0x80, disp & 0xff, (disp >> 8) & 0xff, (disp >> 16) & 0xff, disp >> 24, 0xc3};
#else
    uint32_t w = 0xf2e0001fu | (v << 5), ret = 0xd65f03c0u;
    unsigned char code[8];
    memcpy(code, &w, 4);
    memcpy(code + 4, &ret, 4);
#endif
    memcpy(page, code, sizeof code);
    __builtin___clear_cache((char *)page, (char *)page + sizeof code);
    ((void (*)(void))page)();
}

static unsigned id_of(const char *s) {
    char *end;
    errno = 0;
    unsigned long n = strtoul(s, &end, 10);
    if (*s && !*end && !errno) {
        if (n >= 16384) {
            fprintf(stderr, "marker: id %s out of range (0-16383)\n", s);
            exit(2);
        }
        return (unsigned)n;
    }
    uint32_t h = 2166136261u;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 16777619u;
    return 1024 + h % (16000 - 1024);
}

static void pin0(void) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        perror("marker: sched_setaffinity");
}

static int selftest(void) {
    pin0();
    loop();
    printf("selftest loop %d user %llu\n", LOOP_N, (unsigned long long)LOOP_EXPECTED);
    size_t len = 64 << 10;
    char *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED || madvise(p, len, MADV_NOHUGEPAGE) != 0) {
        perror("marker: selftest mapping");
        return 1;
    }
    memset(p, 1, len);
    for (unsigned id = 16002; id <= 16003; id++) {
        for (int i = 0; i < 500; i++) {
            MARK(OP_START, 0); /* warms the path; id 0 is the helper's own */
            MARK(OP_STOP, 0);
            mark(OP_START, id);
            int r = mprotect(p, len, (i & 1) ? PROT_READ | PROT_WRITE : PROT_READ);
            mark(OP_STOP, id);
            if (r != 0) {
                perror("marker: mprotect");
                return 1;
            }
        }
    }
    printf("selftest mprotect 500 64k\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], "selftest") == 0)
        return selftest();
    if (argc != 3 || (strcmp(argv[1], "start") != 0 && strcmp(argv[1], "stop") != 0)) {
        fprintf(stderr, "usage: marker start|stop NAME|ID, or marker selftest\n");
        return 2;
    }
    unsigned id = id_of(argv[2]);
    if (strcmp(argv[1], "start") == 0)
        printf("marker %s id %u\n", argv[2], id);
    fflush(stdout);
    mark(strcmp(argv[1], "start") == 0 ? OP_START : OP_STOP, id);
    return 0;
}
