/* Code the perf map must name (tests/cli/run.rs, perf_map_names_every_copied_byte).
 * Built with -fno-toplevel-reorder so that the text keeps this order:
 *   straddle   a C function of 3 MiB: starts before the first whole 2 MiB
 *              window of the text and reaches into it;
 *   bigasm     an assembly function (STT_FUNC) without .size, 5 MiB;
 *   asm_label  a plain label (STT_NOTYPE), 3 MiB, up to asm_end.
 * With the argument `wait` it prints the addresses, "ready", and waits for
 * stdin to close; with `spin`, it runs the three a thousand times first (seconds)
 * (for a profiler attached meanwhile). */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) int straddle(int x) {
  __asm__ volatile(".fill 3 << 20, 1, 0x90");
  return x + 1;
}

__asm__(".text\n"
        ".globl bigasm\n"
        ".type bigasm, @function\n"
        "bigasm:\n"
        "  .fill 5 << 20, 1, 0x90\n"
        "  ret\n"
        ".globl asm_label\n"
        "asm_label:\n"
        "  .fill 3 << 20, 1, 0x90\n"
        "  ret\n"
        ".globl asm_end\n"
        "asm_end:\n"
        "  ret\n");

extern void bigasm(void), asm_label(void), asm_end(void);

int main(int argc, char **argv) {
  bigasm();
  asm_label();
  int r = straddle(argc);
  printf("straddle=%p bigasm=%p asm_label=%p asm_end=%p r=%d\n", (void *)straddle, (void *)bigasm,
         (void *)asm_label, (void *)asm_end, r);
  if (argc > 1 && strcmp(argv[1], "spin") == 0) {
    fflush(stdout);
    for (int i = 0; i < 1000; i++) {
      bigasm();
      asm_label();
      r += straddle(i);
    }
    printf("r=%d\n", r);
  }
  if (argc > 1 && strcmp(argv[1], "wait") == 0) {
    printf("ready\n");
    fflush(stdout);
    char b[64];
    while (read(0, b, sizeof b) > 0) {
    }
  }
  return 0;
}
