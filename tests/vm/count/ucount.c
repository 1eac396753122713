/*
 * A qemu user-mode TCG plugin: the instructions a process executes up to
 * its first execve (or its exit), printed to stderr as
 * "ucount: N instructions before exec" / "... before exit".
 *
 * It measures what `hugetext run` itself costs before it execs the
 * program, exactly and whatever the machine's load:
 *
 *   gcc -O2 -shared -fPIC -o ucount.so tests/vm/count/ucount.c
 *   qemu-x86_64 -plugin ./ucount.so target/release/hugetext run --strategy file -- PROGRAM ARGS
 *
 * (the program itself then runs natively: qemu-user does not follow an
 * exec). Counting is per executed translation block, as in qcount.c:
 * deterministic "instructions executed by qemu".
 */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>

#include "../../../crates/hugetext/src/profile/plugin/qemu-plugin.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

/* qemu's plugin API (since 4.2); the header beside the profiler declares
 * only what the profiler uses. */
typedef void (*qemu_plugin_vcpu_syscall_cb_t)(qemu_plugin_id_t id, unsigned int vcpu_index, int64_t num, uint64_t a1,
                                              uint64_t a2, uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6,
                                              uint64_t a7, uint64_t a8);
void qemu_plugin_register_vcpu_syscall_cb(qemu_plugin_id_t id, qemu_plugin_vcpu_syscall_cb_t cb);

static uint64_t total;
static int said;

static void exec_tb(unsigned int vcpu, void *udata) {
    (void)vcpu;
    __atomic_fetch_add(&total, (uint64_t)(uintptr_t)udata, __ATOMIC_RELAXED);
}

static void translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb) {
    (void)id;
    qemu_plugin_register_vcpu_tb_exec_cb(tb, exec_tb, QEMU_PLUGIN_CB_NO_REGS,
                                         (void *)(uintptr_t)qemu_plugin_tb_n_insns(tb));
}

static void say(const char *when) {
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "ucount: %" PRIu64 " instructions before %s\n", __atomic_load_n(&total, __ATOMIC_RELAXED),
                when);
}

/* execve and execveat: x86-64 59 and 322, aarch64 221 and 281. */
static void syscall_entry(qemu_plugin_id_t id, unsigned int vcpu, int64_t num, uint64_t a1, uint64_t a2,
                          uint64_t a3, uint64_t a4, uint64_t a5, uint64_t a6, uint64_t a7, uint64_t a8) {
    (void)id, (void)vcpu, (void)a1, (void)a2, (void)a3, (void)a4, (void)a5, (void)a6, (void)a7, (void)a8;
#if defined(__x86_64__)
    if (num == 59 || num == 322)
#else
    if (num == 221 || num == 281)
#endif
        say("exec");
}

static void at_exit(qemu_plugin_id_t id, void *p) {
    (void)id, (void)p;
    say("exit");
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc, char **argv) {
    (void)argc, (void)argv;
    if (info->system_emulation)
        return -1;
    qemu_plugin_register_vcpu_tb_trans_cb(id, translate);
    qemu_plugin_register_vcpu_syscall_cb(id, syscall_entry);
    qemu_plugin_register_atexit_cb(id, at_exit, NULL);
    return 0;
}
