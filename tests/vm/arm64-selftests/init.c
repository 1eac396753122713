// SPDX-License-Identifier: GPL-2.0-only
/*
 * /init of the arm64 selftest guest (tests/vm/arm64-selftests.sh): mounts
 * proc and sysfs, prints the page size and THP settings, runs each program
 * named in /selftests/list from /selftests (kselftest TAP on the console,
 * each line prefixed "@@TAP NAME|"), prints "@@RC NAME STATUS" after each,
 * "@@DONE" at the end, and powers the machine off.  Static, no libc beyond
 * what a static link brings: the guest has no shell.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/wait.h>
#include <unistd.h>

static void show(const char *label, const char *path)
{
	char buf[256] = "";
	FILE *f = fopen(path, "r");

	if (f) {
		if (!fgets(buf, sizeof(buf), f))
			buf[0] = 0;
		fclose(f);
	}
	buf[strcspn(buf, "\n")] = 0;
	printf("@@INFO %s %s\n", label, f ? buf : "(absent)");
}

static void run(const char *name)
{
	char path[512], line[1024];
	int pfd[2], status = -1;
	pid_t pid;
	FILE *out;

	snprintf(path, sizeof(path), "/selftests/%s", name);
	if (pipe(pfd))
		return;
	pid = fork();
	if (pid == 0) {
		dup2(pfd[1], 1);
		dup2(pfd[1], 2);
		close(pfd[0]);
		close(pfd[1]);
		if (chdir("/selftests"))
			_exit(126);
		execl(path, path, "/selftests", (char *)NULL);
		_exit(127);
	}
	close(pfd[1]);
	out = fdopen(pfd[0], "r");
	while (out && fgets(line, sizeof(line), out)) {
		line[strcspn(line, "\n")] = 0;
		printf("@@TAP %s|%s\n", name, line);
	}
	if (out)
		fclose(out);
	if (pid > 0)
		waitpid(pid, &status, 0);
	printf("@@RC %s %d\n", name, WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	fflush(stdout);
}

int main(void)
{
	char name[256];
	FILE *list;

	mount("proc", "/proc", "proc", 0, NULL);
	mount("sysfs", "/sys", "sysfs", 0, NULL);
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("@@INFO page_size %ld\n", sysconf(_SC_PAGESIZE));
	show("release", "/proc/sys/kernel/osrelease");
	show("thp", "/sys/kernel/mm/transparent_hugepage/enabled");
	show("hpage_pmd_size", "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size");
	list = fopen("/selftests/list", "r");
	while (list && fgets(name, sizeof(name), list)) {
		name[strcspn(name, "\n")] = 0;
		if (name[0])
			run(name);
	}
	printf("@@DONE\n");
	fflush(stdout);
	sync();
	reboot(RB_POWER_OFF);
	return 0;
}
