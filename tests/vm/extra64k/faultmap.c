/* faultmap FILE MODE: map FILE at a 2 MiB-aligned address (congruent with
 * its offsets modulo 2 MiB), fault every page in order, and print the
 * mapping's smaps fields; MODE is "plain" (PROT_READ), "exec"
 * (PROT_READ|PROT_EXEC, as the loader maps text) or "hugepage" (PROT_READ
 * with MADV_HUGEPAGE). Used by tests/vm/probe-64k.sh to see which folios a
 * 64 KiB-page kernel reads for each kind of mapping. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: faultmap FILE plain|exec|hugepage\n");
		return 2;
	}
	int fd = open(argv[1], O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		perror(argv[1]);
		return 1;
	}
	const size_t align = 2 << 20, size = st.st_size;
	char *area = mmap(NULL, size + align, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return perror("mmap"), 1;
	char *at = (char *)(((uintptr_t)area + align - 1) & ~(uintptr_t)(align - 1));
	int prot = PROT_READ | (strcmp(argv[2], "exec") == 0 ? PROT_EXEC : 0);
	char *p = mmap(at, size, prot, MAP_PRIVATE | MAP_FIXED, fd, 0);
	if (p == MAP_FAILED)
		return perror("mmap file"), 1;
	if (strcmp(argv[2], "hugepage") == 0 && madvise(p, size, MADV_HUGEPAGE) < 0)
		return perror("madvise"), 1;
	long page = sysconf(_SC_PAGESIZE);
	volatile unsigned sum = 0;
	for (size_t o = 0; o < size; o += page)
		sum += (unsigned char)p[o];
	char line[256], want[64];
	snprintf(want, sizeof(want), "%lx-", (unsigned long)p);
	FILE *s = fopen("/proc/self/smaps", "r");
	int in = 0;
	while (s && fgets(line, sizeof(line), s)) {
		if (strncmp(line, want, strlen(want)) == 0)
			in = 1;
		else if (in && !strchr(line, ':'))
			break;
		if (in && (strncmp(line, "Rss:", 4) == 0 || strncmp(line, "FilePmdMapped:", 14) == 0))
			printf("%s %s", argv[2], line);
	}
	printf("%s mapped at %p, %zu bytes, page %ld\n", argv[2], (void *)p, size, page);
	return 0;
}
