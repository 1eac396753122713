/* Puts a file of its own at every inherited descriptor number above 2, as a
 * launcher does that closes what it inherits and installs its own (chromium
 * puts an IPC socket at 3 and 4 in the child it forks), then runs a while
 * and exits 0.
 *
 *   fdsteal FILE
 *
 * FILE is opened to append. Under `profile --exact` the qemu plugin's
 * descriptor is among those replaced: nothing may be written to FILE. */
#include <dirent.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2)
        return 2;
    int fd = open(argv[1], O_WRONLY | O_APPEND);
    DIR *d = opendir("/proc/self/fd");
    if (fd < 0 || !d)
        return 1;
    int fds[1024], n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < 1024) {
        int x = atoi(e->d_name);
        if (e->d_name[0] != '.' && x > 2 && x != fd && x != dirfd(d))
            fds[n++] = x;
    }
    closedir(d);
    for (int i = 0; i < n; i++)
        if (dup2(fd, fds[i]) < 0)
            return 1;
    /* Calls between this page and libc's: many records, many full blocks. */
    size_t (*volatile len)(const char *) = strlen;
    size_t sum = 0;
    for (int i = 0; i < 200000; i++)
        sum += len(argv[1]);
    return sum == 0;
}
