/* A program with text to remap (it runs code of the fixtures' libbig.so)
 * that prints the room a process title has over its arguments and the
 * environment strings contiguous with them, the way chromium's, postgres's
 * and nginx's setproctitle measure it:
 *
 *   title ARGS...   prints "room N" */
#include <stdio.h>
#include <string.h>

extern char **environ;
extern long lib_f0(void);

int main(int argc, char **argv) {
    if (lib_f0() == 0) return 3;
    char *end = argv[0] + strlen(argv[0]);
    for (int i = 1; i < argc; i++)
        if (end + 1 == argv[i]) end = argv[i] + strlen(argv[i]);
    for (int i = 0; environ[i]; i++)
        if (end + 1 == environ[i]) end = environ[i] + strlen(environ[i]);
    printf("room %ld\n", (long)(end - argv[0]));
    return 0;
}
