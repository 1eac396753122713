/* hugetext.h - remap a running program's text onto huge pages.
 * Link with -lhugetext. */
#ifndef HUGETEXT_H
#define HUGETEXT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Remap this process's executable text (the program's and every loaded
 * shared library's read-only executable mappings) onto 2 MiB pages.
 * Safe to call from a multi-threaded program. Returns the number of bytes
 * of text backed by huge pages after the call, or a negative errno. */
long hugetext_remap_text(void);

#ifdef __cplusplus
}
#endif

#endif /* HUGETEXT_H */
