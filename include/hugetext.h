/* hugetext.h - remap a running program's text onto PMD-size huge pages
 * (2 MiB on x86-64 and on arm64 with 4 KiB pages, 32 MiB with 16 KiB pages:
 * the running kernel's hpage_pmd_size).
 *
 * Link with -lhugetext (libhugetext.so, built as target/release/libhugetext.so;
 * the same library `hugetext run` injects with LD_PRELOAD). See doc/run.md. */
#ifndef HUGETEXT_H
#define HUGETEXT_H

#ifdef __cplusplus
extern "C" {
#endif

/* Remap this process's executable text -- the program's and every loaded
 * shared library's read-only executable mappings, per whole PMD-size window --
 * onto huge pages: zero copy through the page cache where the mapping is
 * congruent to its file modulo the PMD size and nobody else pins the pages, else
 * MADV_COLLAPSE where the kernel supports it for file text, else a copy into
 * anonymous huge pages moved over the text with one mremap (code running
 * there never sees a hole).
 *
 * Every call handles the text mapped at that moment, so it also remaps
 * objects loaded with dlopen() since the last call. (Under `hugetext run`
 * objects loaded after start are remapped by the library itself, through
 * the rtld audit interface, before they first run.)
 *
 * Safe to call from a multi-threaded program, any number of times; a call
 * made while another thread is inside it returns -EBUSY. Any failure leaves
 * the original text in place. Settings come from the HUGETEXT_* environment
 * variables (HUGETEXT_STRATEGY, HUGETEXT_VERBOSE=1, ...; see `hugetext run
 * --help`).
 *
 * Returns the number of bytes of text backed by PMD-mapped huge pages after
 * the call (0 if the process has no whole PMD-size window of text), or a
 * negative errno when no text is huge-backed and something failed (e.g.
 * -EPERM under a seccomp filter or with THP disabled for the process,
 * -ENOTTY on kernels before 6.7, which lack PAGEMAP_SCAN). */
long hugetext_remap_text(void);

#ifdef __cplusplus
}
#endif

#endif /* HUGETEXT_H */
