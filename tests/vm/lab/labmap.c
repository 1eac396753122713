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
	fprintf(stderr, "usage: labmap map FILE r|rw|rx | labmap norand PROG [ARG...]\n");
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

int main(int argc, char **argv)
{
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
