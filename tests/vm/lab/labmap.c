/*
 * labmap: the kernel lab's helper (tests/vm/lab-probe.sh), built by
 * scripts/kernel-lab.sh and run inside the guest.
 *
 *   labmap map FILE r|rw|rx   map FILE (MAP_PRIVATE) with that protection,
 *                             read one byte of every page, print "ready",
 *                             then wait for end of input and exit
 *   labmap norand PROG ARG... run PROG with address randomisation off, so
 *                             that load addresses can be compared between
 *                             kernels and settings
 *   labmap evict FILE         write FILE back and drop its page cache
 *                             (POSIX_FADV_DONTNEED); print the kB still cached
 *                             (mincore), exit 1 if any
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/stat.h>
#include <unistd.h>

static int usage(void)
{
	fprintf(stderr, "usage: labmap map FILE r|rw|rx | labmap norand PROG [ARG...] | labmap evict FILE\n");
	return 2;
}

static int map(const char *path, const char *mode)
{
	int prot;
	if (!strcmp(mode, "r"))
		prot = PROT_READ;
	else if (!strcmp(mode, "rw"))
		prot = PROT_READ | PROT_WRITE;
	else if (!strcmp(mode, "rx"))
		prot = PROT_READ | PROT_EXEC;
	else
		return usage();
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size == 0) {
		fprintf(stderr, "labmap: cannot open %s\n", path);
		return 1;
	}
	volatile unsigned char *p = mmap(NULL, st.st_size, prot, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		fprintf(stderr, "labmap: mmap %s failed\n", path);
		return 1;
	}
	unsigned long sum = 0;
	long page = sysconf(_SC_PAGESIZE);
	for (off_t o = 0; o < st.st_size; o += page)
		sum += p[o];
	printf("ready %p sum=%lu\n", (void *)p, sum);
	fflush(stdout);
	char buf[64];
	while (read(0, buf, sizeof(buf)) > 0)
		;
	return 0;
}

static int evict(const char *path)
{
	int fd = open(path, O_RDONLY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0) {
		fprintf(stderr, "labmap: cannot open %s\n", path);
		return 1;
	}
	if (fsync(fd) < 0 || posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) {
		fprintf(stderr, "labmap: cannot evict %s\n", path);
		return 1;
	}
	if (st.st_size == 0)
		return 0;
	long page = sysconf(_SC_PAGESIZE);
	size_t pages = (st.st_size + page - 1) / page;
	void *p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	unsigned char *vec = malloc(pages);
	if (p == MAP_FAILED || !vec || mincore(p, st.st_size, vec) < 0) {
		fprintf(stderr, "labmap: mincore %s failed\n", path);
		return 1;
	}
	size_t cached = 0;
	for (size_t i = 0; i < pages; i++)
		cached += vec[i] & 1;
	if (cached)
		printf("labmap: %zu kB of %s still cached\n", cached * page / 1024, path);
	return cached ? 1 : 0;
}

int main(int argc, char **argv)
{
	if (argc == 3 && !strcmp(argv[1], "evict"))
		return evict(argv[2]);
	if (argc >= 4 && !strcmp(argv[1], "map"))
		return map(argv[2], argv[3]);
	if (argc >= 3 && !strcmp(argv[1], "norand")) {
		if (personality(ADDR_NO_RANDOMIZE) < 0) {
			perror("labmap: personality");
			return 1;
		}
		execv(argv[2], argv + 2);
		perror("labmap: exec");
		return 127;
	}
	return usage();
}
