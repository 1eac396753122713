/* Shapes of address space whose cost must stay bounded (explain's hostile
 * tests).
 *
 *   manymaps FILE pages=N   maps the first page of FILE read+exec N times,
 *                           each at its own address and touched: N text
 *                           mappings of one file (the same file offset, so
 *                           the kernel cannot merge them)
 *   manymaps FILE whole     maps all of FILE read+exec (a sparse file of any
 *                           size: nothing is read) and touches its first and
 *                           last page
 *
 * Prints "mapped N" and "ready", then waits until stdin closes. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    _exit(2);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: manymaps FILE pages=N|whole\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) die("open");
    size_t page = sysconf(_SC_PAGESIZE);
    volatile char sink = 0;
    long n = 0;
    if (!strncmp(argv[2], "pages=", 6)) {
        n = atol(argv[2] + 6);
        char *res = mmap(NULL, (size_t)n * page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (res == MAP_FAILED) die("mmap reserve");
        for (long i = 0; i < n; i++) {
            char *at = res + (size_t)i * page;
            if (mmap(at, page, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd, 0) != at) die("mmap page");
            sink += *at;
        }
    } else if (!strcmp(argv[2], "whole")) {
        struct stat st;
        if (fstat(fd, &st)) die("fstat");
        char *at = mmap(NULL, st.st_size, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
        if (at == MAP_FAILED) die("mmap whole");
        sink += at[0];
        sink += at[st.st_size - 1];
        n = 1;
    } else {
        fprintf(stderr, "manymaps: unknown mode %s\n", argv[2]);
        return 2;
    }
    (void)sink;
    printf("mapped %ld\nready\n", n);
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
    }
    return 0;
}
