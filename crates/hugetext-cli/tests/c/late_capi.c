/* Objects loaded after start, without `hugetext run`:
 *
 *   late_capi capi LIB   hugetext_remap_text(), dlopen LIB, call every
 *                        function, hugetext_remap_text() again; prints
 *                        "remapped=BYTES" after each call and
 *                        "lib_huge_kib=K" (AnonHugePages + FilePmdMapped of
 *                        the library's address range, /proc/self/smaps; with
 *                        64 KiB pages on arm64 its 2 MiB contpte blocks,
 *                        unit_huge.h)
 *   late_capi open FILE  dlopen FILE: prints "opened" or "dlopen failed"
 *                        (a non-ELF file, ...), exits 0 either way */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "hugetext.h"
#include "unit_huge.h"

static long huge_kib(unsigned long lo, unsigned long hi) {
    long u = unit_huge_kib(lo, hi);
    if (u >= 0)
        return u; /* 64 KiB pages: contpte blocks, which smaps does not show */
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int in = 0;
    long kb = 0, v;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long s, e;
        if (sscanf(line, "%lx-%lx ", &s, &e) == 2 && strchr(line, '-') < strchr(line, ' '))
            in = s < hi && e > lo;
        else if (in && (sscanf(line, "AnonHugePages: %ld", &v) == 1 || sscanf(line, "FilePmdMapped: %ld", &v) == 1))
            kb += v;
    }
    if (f) fclose(f);
    return kb;
}

int main(int argc, char **argv) {
    if (argc < 3) return 2;
    if (!strcmp(argv[1], "open")) {
        void *h = dlopen(argv[2], RTLD_NOW);
        puts(h ? "opened" : "dlopen failed");
        return 0;
    }
    printf("remapped=%ld\n", hugetext_remap_text());
    void *h = dlopen(argv[2], RTLD_NOW);
    if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
    char *b = dlsym(h, "lib_stubs_begin"), *e = dlsym(h, "lib_stubs_end");
    long sum = 0;
    for (char *p = b; p + 256 * 1024 <= e + 4096; p += 256 * 1024) sum += ((long (*)(void))p)();
    printf("remapped=%ld\n", hugetext_remap_text());
    long again = 0;
    for (char *p = b; p + 256 * 1024 <= e + 4096; p += 256 * 1024) again += ((long (*)(void))p)();
    if (again != sum) { fprintf(stderr, "MISMATCH\n"); return 3; }
    printf("lib_huge_kib=%ld\n", huge_kib((unsigned long)b, (unsigned long)e));
    return 0;
}
