/*
 * The kernel lab's qemu-system TCG plugin: guest instructions counted
 * between two marker instructions the guest executes, kernel and user
 * apart, per vCPU.
 *
 *   qemu-system-x86_64 ... -plugin qcount.so -d plugin -D COUNTS.txt
 *
 * A marker is one no-op instruction carrying an operation and an id:
 *   x86-64   nopl 0x4854XXXX(%rax)  (0f 1f 80 + disp32), disp32 = 0x4854 << 16 | op << 14 | id
 *   aarch64  movk xzr, #(op << 14 | id), lsl #48  (a write to the zero register)
 * op 1 opens an interval on the vCPU that executes it, op 2 closes it (same
 * id); id is 14 bits. An instruction is the kernel's when its virtual
 * address is in the upper half (x86-64 kernel addresses, arm64 TTBR1), the
 * user's otherwise. The counts of an interval are those of the vCPU that
 * opened it, from the instruction after the opening marker up to the closing
 * marker (neither counted); an interval closed on another vCPU (the task
 * migrated) is counted as migrated and left out.
 *
 * Counting is per executed translation block (one callback per block, the
 * block's instructions counted as a whole), so a block left early by an
 * exception (a page fault) counts in full, and is counted again when it
 * runs again: deterministic, but "instructions executed by qemu", not
 * "retired".
 *
 * At exit, one line per id: the number of intervals, the sums, and the
 * minimum and median of the user and kernel counts per interval (a timer
 * interrupt or a preemption lands in some intervals, not in most: the
 * median is the operation's own cost). Then one line per vCPU with its
 * totals.
 *
 * Watched addresses (plugin arguments watch=0xADDR, up to 4; the kernel
 * booted with nokaslr so that its System.map holds): how many times the
 * instruction at each address ran inside each id's intervals (watchN_sum),
 * e.g. a lock function's entry (its acquisitions) and the lock's slow path
 * (its contentions).
 *
 * Interrupt handlers apart (x86-64; plugin arguments irq=0xADDR, up to 8:
 * the interrupt entry points, e.g. asm_common_interrupt and
 * asm_sysvec_apic_timer_interrupt): from an entry to its iretq, the
 * instructions are counted as interrupt work too (kernel_irq_sum), so that
 * the kernel count of an interval less its interrupts' (a timer tick, an I/O
 * completion that lands in it) is the operation's own, whatever the timing.
 *
 * Per function (plugin arguments syms=PATH, the guest kernel's System.map,
 * and split=LO-HI, at most 64 ids): the kernel instructions of the
 * intervals of ids LO..HI outside interrupt handlers, by the kernel function
 * they ran in (the text symbol at or below each block segment's first
 * kernel instruction; a segment that runs on into the next function is
 * counted in the first). One line per id and function at exit, so that
 * two repetitions of an operation can be compared function by function
 * (tests/vm/count/counts.py split).
 *
 * The plugin API is declared in crates/hugetext/src/profile/plugin/qemu-plugin.h
 * (no header for it is packaged), which profile --exact's itrace.c uses too.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../../crates/hugetext/src/profile/plugin/qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MAX_VCPUS 64
#define IDS (1u << 14)
#define KEEP (1u << 16) /* intervals kept per id for the median */
#define OP_START 1
#define OP_STOP 2
#define WATCH 4
#define IRQS 8
#define SPLIT_IDS 64

/* Per vCPU: running totals and the open interval (one per vCPU). */
struct vcpu {
    uint64_t user, kernel;
    int open_id; /* -1: none */
    uint64_t user0, kernel0;
    uint64_t watch[WATCH], watch0[WATCH];
    uint64_t kernel_irq, kernel_irq0;
    int depth; /* interrupt entries not yet returned from */
};
/* Per id. */
struct idstat {
    uint64_t n, migrated, unopened, sum_user, sum_kernel;
    uint64_t watch_sum[WATCH];
    uint64_t sum_kernel_irq;
    uint32_t kept;
    uint64_t *user, *kernel; /* the first KEEP intervals */
};
/* A segment of a block: the instructions after a marker (or the block's start). */
struct seg { uint32_t user, kernel; int32_t sym; /* -1: none */ };
struct marker { int op, id; struct seg after; };
struct tbinfo { struct seg head; };

static struct vcpu vcpus[MAX_VCPUS];
static struct idstat *ids;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int arm64;
static uint64_t watch_addr[WATCH];
static int nwatch;
static int watch_index[WATCH] = {0, 1, 2, 3};
static uint64_t irq_addr[IRQS];
static int nirq;

/* The per-function split: System.map's text symbols, sorted by address. */
static uint64_t *sym_addr;
static char **sym_name;
static int nsyms;
static int split_lo = -1, split_hi = -1;
static uint64_t *split_counts[SPLIT_IDS]; /* per id: nsyms counters */

static inline bool is_kernel(uint64_t vaddr) { return vaddr >> 63; }

/* The index of the text symbol at or below va, or -1. */
static int32_t sym_of(uint64_t va) {
    if (nsyms == 0 || va < sym_addr[0])
        return -1;
    int lo = 0, hi = nsyms - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (sym_addr[mid] <= va)
            lo = mid;
        else
            hi = mid - 1;
    }
    return lo;
}

static int load_syms(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    char line[512], type, name[400];
    unsigned long long a;
    int cap = 0;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "%llx %c %399s", &a, &type, name) != 3 || (type != 't' && type != 'T' && type != 'W'))
            continue;
        if (nsyms == cap) {
            cap = cap ? cap * 2 : 65536;
            sym_addr = realloc(sym_addr, cap * sizeof *sym_addr);
            sym_name = realloc(sym_name, cap * sizeof *sym_name);
            if (!sym_addr || !sym_name)
                abort();
        }
        /* System.map is sorted; a symbol out of order is left out */
        if (nsyms && a < sym_addr[nsyms - 1])
            continue;
        sym_addr[nsyms] = a;
        sym_name[nsyms] = strdup(name);
        nsyms++;
    }
    fclose(f);
    return nsyms ? 0 : -1;
}

/* The marker's (op, id), or op 0. */
static int decode(const struct qemu_plugin_insn *insn, int *id) {
    size_t n = qemu_plugin_insn_size(insn);
    const uint8_t *b = qemu_plugin_insn_data(insn);
    if (!arm64) {
        if (n != 7 || b[0] != 0x0f || b[1] != 0x1f || b[2] != 0x80 || b[6] != 0x48 || b[5] != 0x54)
            return 0;
        uint32_t low = (uint32_t)b[3] | (uint32_t)b[4] << 8;
        *id = low & (IDS - 1);
        return low >> 14;
    }
    if (n != 4)
        return 0;
    uint32_t w = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    /* MOVK Xd, #imm16, LSL #48: sf=1 opc=11 100101 hw=11; Rd = 31 */
    if ((w & 0xffe0001f) != 0xf2e0001f)
        return 0;
    uint32_t imm = (w >> 5) & 0xffff;
    *id = imm & (IDS - 1);
    return imm >> 14;
}

static void add(struct vcpu *v, const struct seg *s) {
    v->user += s->user;
    v->kernel += s->kernel;
    if (v->depth > 0)
        v->kernel_irq += s->kernel;
    else if (s->sym >= 0 && v->open_id >= split_lo && v->open_id <= split_hi && split_lo >= 0)
        split_counts[v->open_id - split_lo][s->sym] += s->kernel;
}

static void on_irq_entry(unsigned int cpu, void *udata) {
    (void)udata;
    if (cpu < MAX_VCPUS && vcpus[cpu].depth < 64)
        vcpus[cpu].depth++;
}

static void on_iret(unsigned int cpu, void *udata) {
    (void)udata;
    if (cpu < MAX_VCPUS && vcpus[cpu].depth > 0)
        vcpus[cpu].depth--;
}

static void on_tb(unsigned int cpu, void *udata) {
    if (cpu < MAX_VCPUS)
        add(&vcpus[cpu], &((struct tbinfo *)udata)->head);
}

static void keep(struct idstat *s, uint64_t u, uint64_t k) {
    if (s->kept == 0 && !s->user) {
        s->user = malloc(KEEP * sizeof(uint64_t));
        s->kernel = malloc(KEEP * sizeof(uint64_t));
    }
    if (s->user && s->kernel && s->kept < KEEP) {
        s->user[s->kept] = u;
        s->kernel[s->kept] = k;
        s->kept++;
    }
}

static void on_marker(unsigned int cpu, void *udata) {
    struct marker *m = udata;
    if (cpu >= MAX_VCPUS)
        return;
    struct vcpu *v = &vcpus[cpu];
    pthread_mutex_lock(&lock);
    if (m->op == OP_START) {
        /* An interval opened here while another was open on this vCPU (a
         * task migrated away from it, or nested markers): the newer wins. */
        if (v->open_id >= 0)
            ids[v->open_id].migrated++;
        v->open_id = m->id;
        v->user0 = v->user;
        v->kernel0 = v->kernel;
        memcpy(v->watch0, v->watch, sizeof v->watch);
        v->kernel_irq0 = v->kernel_irq;
    } else if (m->op == OP_STOP) {
        struct idstat *s = &ids[m->id];
        if (v->open_id == m->id) {
            uint64_t u = v->user - v->user0, k = v->kernel - v->kernel0;
            s->n++;
            s->sum_user += u;
            s->sum_kernel += k;
            keep(s, u, k);
            for (int w = 0; w < nwatch; w++)
                s->watch_sum[w] += v->watch[w] - v->watch0[w];
            s->sum_kernel_irq += v->kernel_irq - v->kernel_irq0;
            v->open_id = -1;
        } else {
            /* Opened on another vCPU (migrated) or never. */
            int opened_elsewhere = 0;
            for (int c = 0; c < MAX_VCPUS; c++) {
                if (vcpus[c].open_id == m->id) {
                    vcpus[c].open_id = -1;
                    opened_elsewhere = 1;
                }
            }
            if (opened_elsewhere)
                s->migrated++;
            else
                s->unopened++;
        }
    }
    pthread_mutex_unlock(&lock);
    add(v, &m->after);
}

static void on_watch(unsigned int cpu, void *udata) {
    if (cpu < MAX_VCPUS)
        vcpus[cpu].watch[*(int *)udata]++;
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    size_t n = qemu_plugin_tb_n_insns(tb);
    struct tbinfo *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    struct seg *cur = &t->head;
    cur->sym = -1;
    for (size_t i = 0; i < n; i++) {
        struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
        int mid, op = decode(insn, &mid);
        if (op == OP_START || op == OP_STOP) {
            struct marker *m = calloc(1, sizeof *m);
            if (!m)
                abort();
            m->op = op;
            m->id = mid;
            qemu_plugin_register_vcpu_insn_exec_cb(insn, on_marker, QEMU_PLUGIN_CB_NO_REGS, m);
            cur = &m->after;
            cur->sym = -1;
            continue;
        }
        uint64_t va = qemu_plugin_insn_vaddr(insn);
        if (nsyms && cur->sym < 0 && cur->kernel == 0 && is_kernel(va))
            cur->sym = sym_of(va);
        for (int q = 0; q < nirq; q++)
            if (va == irq_addr[q])
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_irq_entry, QEMU_PLUGIN_CB_NO_REGS, NULL);
        if (nirq && !arm64 && qemu_plugin_insn_size(insn) == 2) {
            const uint8_t *b = qemu_plugin_insn_data(insn);
            if (b[0] == 0x48 && b[1] == 0xcf) /* iretq */
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_iret, QEMU_PLUGIN_CB_NO_REGS, NULL);
        }
        for (int w = 0; w < nwatch; w++)
            if (va == watch_addr[w])
                qemu_plugin_register_vcpu_insn_exec_cb(insn, on_watch, QEMU_PLUGIN_CB_NO_REGS, &watch_index[w]);
        if (is_kernel(va))
            cur->kernel++;
        else
            cur->user++;
    }
    qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS, t);
}

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Sorts v[0..n) and gives its median (the lower one of an even count). */
static uint64_t median(uint64_t *v, uint32_t n) {
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    return v[(n - 1) / 2];
}

static void on_exit_cb(qemu_plugin_id_t id, void *udata) {
    (void)id;
    (void)udata;
    char line[512];
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < IDS; i++) {
        struct idstat *s = &ids[i];
        if (!s->n && !s->migrated && !s->unopened)
            continue;
        uint64_t mu = median(s->user, s->kept), mk = median(s->kernel, s->kept);
        uint64_t minu = s->kept ? s->user[0] : 0, mink = s->kept ? s->kernel[0] : 0;
        snprintf(line, sizeof line,
                 "qcount id=%u intervals=%" PRIu64 " migrated=%" PRIu64 " unopened=%" PRIu64
                 " user_sum=%" PRIu64 " kernel_sum=%" PRIu64 " user_min=%" PRIu64 " user_median=%" PRIu64
                 " kernel_min=%" PRIu64 " kernel_median=%" PRIu64 "\n",
                 i, s->n, s->migrated, s->unopened, s->sum_user, s->sum_kernel, minu, mu, mink, mk);
        if (nirq) {
            size_t l = strlen(line);
            snprintf(line + l - 1, sizeof line - l + 1, " kernel_irq_sum=%" PRIu64 "\n", s->sum_kernel_irq);
        }
        for (int w = 0; w < nwatch; w++) {
            size_t l = strlen(line);
            snprintf(line + l - 1, sizeof line - l + 1, " watch%d_sum=%" PRIu64 "\n", w, s->watch_sum[w]);
        }
        qemu_plugin_outs(line);
    }
    for (int w = 0; w < nwatch; w++) {
        snprintf(line, sizeof line, "qcount watch=%d addr=%" PRIu64 "\n", w, watch_addr[w]);
        qemu_plugin_outs(line);
    }
    for (int i = 0; split_lo >= 0 && i <= split_hi - split_lo; i++)
        for (int f = 0; f < nsyms; f++)
            if (split_counts[i][f]) {
                snprintf(line, sizeof line, "qcount split id=%d fn=%s kernel=%" PRIu64 "\n", split_lo + i, sym_name[f],
                         split_counts[i][f]);
                qemu_plugin_outs(line);
            }
    for (int c = 0; c < MAX_VCPUS; c++) {
        if (!vcpus[c].user && !vcpus[c].kernel)
            continue;
        snprintf(line, sizeof line, "qcount vcpu=%d user=%" PRIu64 " kernel=%" PRIu64 "\n", c, vcpus[c].user,
                 vcpus[c].kernel);
        qemu_plugin_outs(line);
    }
    qemu_plugin_outs("qcount end\n");
    pthread_mutex_unlock(&lock);
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    for (int i = 0; i < argc; i++) {
        char *end;
        if (strncmp(argv[i], "watch=", 6) == 0 && nwatch < WATCH)
            watch_addr[nwatch++] = strtoull(argv[i] + 6, &end, 0);
        else if (strncmp(argv[i], "irq=", 4) == 0 && nirq < IRQS)
            irq_addr[nirq++] = strtoull(argv[i] + 4, &end, 0);
        else if (strncmp(argv[i], "syms=", 5) == 0) {
            if (load_syms(argv[i] + 5) != 0)
                return -1;
            end = "";
        } else if (strncmp(argv[i], "split=", 6) == 0) {
            split_lo = (int)strtol(argv[i] + 6, &end, 10);
            if (*end != '-')
                return -1;
            split_hi = (int)strtol(end + 1, &end, 10);
            if (split_lo < 0 || split_hi < split_lo || split_hi - split_lo >= SPLIT_IDS || split_hi >= (int)IDS)
                return -1;
        } else
            return -1;
        if (*end)
            return -1;
    }
    if (!info->system_emulation)
        return -1;
    if (strcmp(info->target_name, "aarch64") == 0)
        arm64 = 1;
    else if (strcmp(info->target_name, "x86_64") != 0)
        return -1;
    ids = calloc(IDS, sizeof *ids);
    if (!ids)
        return -1;
    if (split_lo >= 0 && !nsyms)
        return -1; /* split= needs syms= */
    for (int i = 0; split_lo >= 0 && i <= split_hi - split_lo; i++)
        if (!(split_counts[i] = calloc(nsyms, sizeof(uint64_t))))
            return -1;
    for (int c = 0; c < MAX_VCPUS; c++)
        vcpus[c].open_id = -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
    qemu_plugin_register_atexit_cb(id, on_exit_cb, NULL);
    return 0;
}
