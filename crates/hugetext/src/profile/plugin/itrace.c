/*
 * hugetext's qemu-user TCG plugin: the executed instructions of a program, as
 * runs of instructions per 4 KiB page, streamed to a file descriptor.
 *
 *   qemu-x86_64 -plugin itrace.so,fd=N PROGRAM ARGS...
 *
 * Each record is one little-endian u64: (virtual page number << 24) | n, for
 * n (< 2^24) instructions executed in that page one after another. Two
 * records in a row name different pages unless n overflowed. Records are
 * written 512 at a time (4096 bytes, atomic on a pipe), so the processes of a
 * program that forks write whole blocks to the same pipe. When the process
 * qemu started exits, it writes one END record (all ones): a reader that
 * does not see it knows the stream was cut.
 *
 * The descriptor is the guest's too (qemu-user shares one descriptor table):
 * at start the plugin moves it to a high number, close-on-exec (a program the
 * guest execs runs natively and must not hold the pipe), and before every
 * write it checks that the number still names the same pipe. A program that
 * closes every descriptor and puts its own at that number (chromium's
 * launcher puts an IPC socket at 3 and 4 in the child it forks) is never
 * written to: that process's records are dropped from then on.
 *
 * The plugin API is declared in qemu-plugin.h (no header for it is
 * packaged), which `profile --exact` writes next to this file before it
 * compiles it. The translation-block callback records, per block,
 * the runs of its instructions per page; the block's execution callback
 * replays them: one callback per executed block, not per instruction.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define PAGE_SHIFT 12
#define COUNT_BITS 24
#define COUNT_MAX ((1u << COUNT_BITS) - 1)
#define BLOCK 512 /* records per write: 4096 bytes */
#define MAX_THREADS 4096
#define END UINT64_MAX /* the last record of the process qemu started */
#define FD_CEILING 65536 /* the highest descriptor number sought */

/* The runs of one translation block: (page, instructions) in order. */
struct run { uint64_t page; uint32_t n; };
struct tbinfo { uint32_t nruns; struct run runs[]; };

/* Per guest thread (qemu-user runs each on its own host thread). */
struct stream {
    uint64_t page, n; /* the run being counted */
    uint32_t used;
    uint64_t buf[BLOCK];
};

static int out_fd = -1;
static dev_t out_dev; /* the pipe out_fd named at start */
static ino_t out_ino;
static pid_t origin; /* the process qemu started (a fork has another pid) */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct stream *streams[MAX_THREADS];
static unsigned nstreams;
static __thread struct stream *mine;

/* Does out_fd still name the pipe it named at start? If not, it never will
 * again in this process: forget it. */
static int still_ours(void) {
    int fd = __atomic_load_n(&out_fd, __ATOMIC_RELAXED);
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == out_dev && st.st_ino == out_ino)
        return 1;
    __atomic_store_n(&out_fd, -1, __ATOMIC_RELAXED);
    return 0;
}

static void flush_block(struct stream *s) {
    if (!still_ours()) {
        s->used = 0;
        return;
    }
    size_t len = (size_t)s->used * sizeof(uint64_t), off = 0;
    while (off < len) {
        ssize_t w = write(out_fd, (char *)s->buf + off, len - off);
        if (w <= 0)
            break; /* the reader is gone: drop the rest */
        off += (size_t)w;
    }
    s->used = 0;
}

static void put(struct stream *s, uint64_t page, uint64_t n) {
    while (n > 0) {
        uint64_t k = n > COUNT_MAX ? COUNT_MAX : n;
        s->buf[s->used++] = (page << COUNT_BITS) | k;
        if (s->used == BLOCK)
            flush_block(s);
        n -= k;
    }
}

static struct stream *stream_of_thread(void) {
    if (mine)
        return mine;
    mine = calloc(1, sizeof *mine);
    if (!mine)
        abort();
    pthread_mutex_lock(&lock);
    if (nstreams < MAX_THREADS)
        streams[nstreams++] = mine;
    pthread_mutex_unlock(&lock);
    return mine;
}

static void on_exec(unsigned int vcpu, void *udata) {
    (void)vcpu;
    struct tbinfo *t = udata;
    struct stream *s = stream_of_thread();
    for (uint32_t i = 0; i < t->nruns; i++) {
        if (t->runs[i].page == s->page) {
            s->n += t->runs[i].n;
        } else {
            put(s, s->page, s->n);
            s->page = t->runs[i].page;
            s->n = t->runs[i].n;
        }
    }
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    if (n == 0)
        return;
    /* A block spans at most a few pages; n runs is the worst case. */
    struct tbinfo *t = calloc(1, sizeof *t + n * sizeof(struct run));
    if (!t)
        abort();
    for (size_t i = 0; i < n; i++) {
        uint64_t page = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i)) >> PAGE_SHIFT;
        if (t->nruns > 0 && t->runs[t->nruns - 1].page == page) {
            t->runs[t->nruns - 1].n++;
        } else {
            t->runs[t->nruns].page = page;
            t->runs[t->nruns].n = 1;
            t->nruns++;
        }
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_exec, QEMU_PLUGIN_CB_NO_REGS, t);
}

static void flush_all(void) {
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < nstreams; i++) {
        struct stream *s = streams[i];
        put(s, s->page, s->n);
        s->n = 0;
        flush_block(s);
    }
    pthread_mutex_unlock(&lock);
}

static void on_exit_cb(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    flush_all();
    uint64_t end = END;
    if (getpid() == origin && still_ours() && write(out_fd, &end, sizeof end) < 0)
        return; /* the reader is gone */
}

/* A forked child starts with the parent's unwritten records: the parent
 * writes those, so the child forgets them (only the forking thread lives on). */
static void after_fork_child(void) {
    nstreams = 0;
    pthread_mutex_init(&lock, NULL);
    if (mine) {
        mine->used = 0;
        mine->n = 0;
        streams[nstreams++] = mine;
    }
}

/* fd moved to a high free number, close-on-exec (itself if none is free);
 * its identity is recorded. */
static int move_high(int fd) {
    struct rlimit r;
    rlim_t top = FD_CEILING;
    if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < top)
        top = r.rlim_cur;
    int hi = top > 64 ? fcntl(fd, F_DUPFD_CLOEXEC, (int)(top - 32)) : -1;
    if (hi < 0) {
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        hi = fd;
    } else {
        close(fd);
    }
    struct stat st;
    if (fstat(hi, &st) != 0)
        return -1;
    out_dev = st.st_dev;
    out_ino = st.st_ino;
    return hi;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    (void)info;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strncmp(a, "arg=", 4) == 0)
            a += 4;
        if (strncmp(a, "fd=", 3) == 0)
            out_fd = atoi(a + 3);
    }
    if (out_fd < 0 || (out_fd = move_high(out_fd)) < 0)
        return -1;
    origin = getpid();
    pthread_atfork(NULL, NULL, after_fork_child);
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
