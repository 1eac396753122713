/*
 * The readahead probe of the instruction counter (qcount.c): readahead(2) of
 * a file from a cold page cache, every call between markers, by 1 or 2
 * threads (each pinned to its own CPU). Built static by
 * scripts/kernel-matrix.sh --count; run by tests/vm/count/probe-readahead.sh.
 *
 *   rahead DIR MIB THREADS halves|files ID REPS
 *
 * halves: one file of MIB MiB, thread t reads the t-th part (one mapping:
 * both threads insert into the same i_pages); files: one file of MIB /
 * THREADS MiB per thread. Each thread calls readahead() for CHUNK (2 MiB,
 * the kernel's own chunk in force_page_cache_ra(); the disk's read_ahead_kb
 * must be at least that, or a call reads less) at a time, each call an
 * interval of id ID + 2 (R - 1) + t in repetition R. Before each of the REPS repetitions the files are
 * written back and dropped from the page cache (drop_caches), the free
 * memory compacted (compact_memory), and the files checked cold (mincore). After its calls each thread waits for its reads to
 * complete in an interval of id + 1000 (the completions run on its CPU: so
 * they count in full, however the guest's timing falls). Then the pages
 * the calls inserted into the page cache are counted (mincore) and the data
 * read through. Prints one line per repetition:
 *   rahead mode=M threads=T mib=N rep=R id=ID calls=C inserted_pages=P seconds=S
 * The kernel instructions per MiB are the counter's (qcount.c) per id:
 * kernel_sum / MiB of that thread's part, kernel_median per 2 MiB call.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#define OP_START 1u
#define OP_STOP 2u
#define CHUNK (2u << 20)
#define MAXT 2
#define WAIT_ID 1000

struct job {
    int t, fd, id;
    off_t off, len;
    unsigned calls;
    int err;
};

static pthread_barrier_t barrier;

static void die(const char *what) {
    fprintf(stderr, "rahead: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* Two marker instructions (open, close id) in an executable page of the
 * thread's own, written once: no code is rewritten between calls. */
static unsigned char *marker_page(unsigned id) {
    unsigned char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        die("mmap");
    for (unsigned op = OP_START; op <= OP_STOP; op++) {
        uint32_t v = (op << 14) | id;
#if defined(__x86_64__)
        uint32_t disp = 0x48540000u | v;
        unsigned char code[] = {0x0f, 0x1f, 0x80, disp & 0xff, (disp >> 8) & 0xff, (disp >> 16) & 0xff, disp >> 24, 0xc3};
#elif defined(__aarch64__)
        uint32_t w = 0xf2e0001fu | (v << 5), ret = 0xd65f03c0u;
        unsigned char code[8];
        memcpy(code, &w, 4);
        memcpy(code + 4, &ret, 4);
#else
#error "rahead: x86-64 and aarch64 only"
#endif
        memcpy(p + (op - 1) * 16, code, sizeof code);
    }
    __builtin___clear_cache((char *)p, (char *)p + 32);
    return p;
}

static void *run(void *arg) {
    struct job *j = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(j->t, &set);
    if (sched_setaffinity(0, sizeof set, &set) != 0)
        j->err = errno;
    unsigned char *page = marker_page((unsigned)j->id);
    void (*start)(void) = (void (*)(void))page, (*stop)(void) = (void (*)(void))(page + 16);
    pthread_barrier_wait(&barrier);
    for (off_t o = j->off; o < j->off + j->len; o += CHUNK) {
        start();
        ssize_t r = readahead(j->fd, o, CHUNK);
        stop();
        if (r != 0 && !j->err)
            j->err = errno;
        j->calls++;
    }
    /* The completions of this thread's reads run on its CPU (the disk's
     * queue of that CPU) while it waits here: an interval of its own (id +
     * WAIT_ID), so that they count whatever the timing; every 2 MiB checked
     * in turn (a non-blocking read of its last byte fails until its folio
     * is read). */
    munmap(page, 4096);
    page = marker_page((unsigned)j->id + WAIT_ID);
    start = (void (*)(void))page;
    stop = (void (*)(void))(page + 16);
    start();
    char byte;
    struct iovec iov = {&byte, 1};
    struct timespec ms = {0, 2000000};
    for (off_t o = j->off + CHUNK - 1; o < j->off + j->len;) {
        if (preadv2(j->fd, &iov, 1, o, RWF_NOWAIT) == 1)
            o += CHUNK;
        else if (errno == EAGAIN)
            nanosleep(&ms, NULL);
        else
            break;
    }
    stop();
    munmap(page, 4096);
    return NULL;
}

static long resident(int fd, off_t len) {
    void *m = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        die("mmap of the file");
    size_t pages = (len + 4095) / 4096;
    unsigned char *v = malloc(pages);
    if (!v || mincore(m, len, v) != 0)
        die("mincore");
    long n = 0;
    for (size_t i = 0; i < pages; i++)
        n += v[i] & 1;
    free(v);
    munmap(m, len);
    return n;
}

/* With CONFIG_LOCK_STAT: cleared before a repetition, and its xa_lock
 * classes (the page cache's i_pages among them) printed after it. */
static void lock_stat(long rep, int clear) {
    FILE *f = fopen("/proc/lock_stat", clear ? "w" : "r");
    if (!f)
        return;
    if (clear) {
        fputs("0\n", f);
        fclose(f);
        return;
    }
    char line[512];
    while (fgets(line, sizeof line, f))
        if (strstr(line, "xa_lock") && strchr(line, ':') && !strstr(line, "[<"))
            printf("lockstat rep=%ld %s", rep, line);
    fclose(f);
}

static void drop_caches(void) {
    sync();
    int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);
    if (fd < 0 || write(fd, "3\n", 2) != 2)
        die("drop_caches");
    close(fd);
    /* The free memory compacted too: which free blocks the page allocator
     * splits for the new folios, and so how physically contiguous they come
     * out (how many segments, and bio splits, the reads take), is otherwise
     * whatever the previous repetition left (counts.py split showed that to
     * be most of the difference between repetitions). Without compaction
     * (CONFIG_COMPACTION=n), as before. */
    fd = open("/proc/sys/vm/compact_memory", O_WRONLY);
    if (fd >= 0) {
        if (write(fd, "1\n", 2) != 2)
            die("compact_memory");
        close(fd);
    }
}

int main(int argc, char **argv) {
    if (argc != 7 || (strcmp(argv[4], "halves") != 0 && strcmp(argv[4], "files") != 0)) {
        fprintf(stderr, "usage: rahead DIR MIB THREADS halves|files ID REPS\n");
        return 2;
    }
    const char *dir = argv[1], *mode = argv[4];
    long mib = atol(argv[2]), threads = atol(argv[3]), id = atol(argv[5]), reps = atol(argv[6]);
    if (mib < 2 || threads < 1 || threads > MAXT || (mib / threads) % 2 || id < 256 || id + reps * MAXT + WAIT_ID > 16000 ||
        reps < 1) {
        fprintf(stderr, "rahead: bad arguments\n");
        return 2;
    }
    int halves = strcmp(mode, "halves") == 0;
    int nfiles = halves ? 1 : (int)threads;
    off_t flen = (off_t)(halves ? mib : mib / threads) << 20;
    int fds[MAXT];
    char *buf = malloc(1 << 20);
    if (!buf)
        die("malloc");
    for (size_t i = 0; i < (1 << 20); i++)
        buf[i] = (char)(i * 7 + 1);
    for (int f = 0; f < nfiles; f++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/rahead-%d", dir, f);
        fds[f] = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
        if (fds[f] < 0)
            die(path);
        for (off_t o = 0; o < flen; o += 1 << 20)
            if (write(fds[f], buf, 1 << 20) != 1 << 20)
                die("write");
        if (fsync(fds[f]) != 0)
            die("fsync");
    }
    for (long rep = 1; rep <= reps; rep++) {
        drop_caches();
        for (int f = 0; f < nfiles; f++) {
            long r = resident(fds[f], flen);
            if (r != 0) {
                fprintf(stderr, "rahead: %ld pages still cached after drop_caches\n", r);
                return 1;
            }
        }
        struct job jobs[MAXT];
        pthread_t th[MAXT];
        pthread_barrier_init(&barrier, NULL, (unsigned)threads);
        struct timespec t0, t1;
        lock_stat(rep, 1);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int t = 0; t < threads; t++) {
            off_t part = (off_t)(mib / threads) << 20;
            jobs[t] = (struct job){.t = t, .fd = fds[halves ? 0 : t], .id = (int)(id + (rep - 1) * MAXT + t),
                                   .off = halves ? t * part : 0, .len = part};
            if (pthread_create(&th[t], NULL, run, &jobs[t]) != 0)
                die("pthread_create");
        }
        for (int t = 0; t < threads; t++)
            pthread_join(th[t], NULL);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        pthread_barrier_destroy(&barrier);
        lock_stat(rep, 0);
        long inserted = 0;
        for (int f = 0; f < nfiles; f++)
            inserted += resident(fds[f], flen);
        for (int t = 0; t < threads; t++) {
            if (jobs[t].err) {
                errno = jobs[t].err;
                die("readahead or sched_setaffinity");
            }
            printf("rahead mode=%s threads=%ld mib=%ld rep=%ld id=%d calls=%u inserted_pages=%ld seconds=%.3f\n", mode,
                   threads, mib, rep, jobs[t].id, jobs[t].calls, inserted,
                   (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9);
        }
        /* Every read completes (the folios unlocked, uptodate) before the next
         * repetition drops them. */
        for (int f = 0; f < nfiles; f++)
            for (off_t o = 0; o < flen; o += 1 << 20)
                if (pread(fds[f], buf, 1 << 20, o) != 1 << 20)
                    die("pread");
        fflush(stdout);
    }
    for (int f = 0; f < nfiles; f++)
        close(fds[f]);
    return 0;
}
