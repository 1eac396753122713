/* Map a file as text for the `hugetext explain` tests.
 *
 *   maptext FILE [prctl] [advised] [nohuge] [first=N]
 *
 * Maps FILE read+exec, private, at an address aligned to the kernel's PMD
 * size (hpage_pmd_size: 2 MiB on x86-64, 32 MiB on a 16 KiB-page arm64
 * kernel; congruent with file offset 0), touches every page, prints "mapped 0xADDR" and "ready",
 * then waits for lines on stdin: "hugepage" switches the mapping to
 * MADV_HUGEPAGE. It exits when stdin closes.
 *   prctl    prctl(PR_SET_THP_DISABLE, 1) first
 *   advised  prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED)
 *            first (Linux 6.18; what systemd's MemoryTHP=madvise sets)
 *   nohuge   madvise(MADV_NOHUGEPAGE) on the mapping before touching it
 *   first=N  touch only the first N PMD windows: the rest stays unmapped,
 *            as text a program has not executed yet */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef PR_THP_DISABLE_EXCEPT_ADVISED
#define PR_THP_DISABLE_EXCEPT_ADVISED (1 << 1)
#endif

static void die(const char *what) {
    perror(what);
    _exit(2);
}

/* The kernel's PMD size; 2 MiB where THP's sysfs does not say. */
static size_t pmd_size(void) {
    unsigned long v = 0;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", "r");
    if (f) {
        if (fscanf(f, "%lu", &v) != 1) v = 0;
        fclose(f);
    }
    return v ? v : 2 << 20;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: maptext FILE [prctl] [advised] [nohuge] [first=N]\n");
        return 2;
    }
    int nohuge = 0;
    long first = -1;
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "prctl")) {
            if (prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0)) die("prctl");
        } else if (!strcmp(argv[i], "advised")) {
            if (prctl(PR_SET_THP_DISABLE, 1, PR_THP_DISABLE_EXCEPT_ADVISED, 0, 0)) die("prctl advised");
        } else if (!strcmp(argv[i], "nohuge")) {
            nohuge = 1;
        } else if (!strncmp(argv[i], "first=", 6)) {
            first = atol(argv[i] + 6);
        } else {
            fprintf(stderr, "maptext: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) die("open");
    struct stat st;
    if (fstat(fd, &st)) die("fstat");
    size_t size = st.st_size, M = pmd_size(), page = sysconf(_SC_PAGESIZE);
    char *res = mmap(NULL, size + M, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (res == MAP_FAILED) die("mmap reserve");
    char *addr = (char *)(((uintptr_t)res + M - 1) & ~(uintptr_t)(M - 1));
    if (mmap(addr, size, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0) != addr) die("mmap");
    if (nohuge && madvise(addr, size, MADV_NOHUGEPAGE)) die("madvise");
    volatile char sink = 0;
    size_t touched = first < 0 ? size : (size_t)first * M;
    for (size_t off = 0; off < size && off < touched; off += page) sink += addr[off];
    (void)sink;
    printf("mapped %p\nready\n", (void *)addr);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (!strcmp(line, "hugepage\n") && madvise(addr, size, MADV_HUGEPAGE)) die("madvise hugepage");
    }
    return 0;
}
