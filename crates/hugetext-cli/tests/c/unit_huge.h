/* kB of [lo, hi) in whole 2 MiB blocks held by one folio of at least
 * 2 MiB, where that block is the unit of huge text: arm64 with 64 KiB
 * pages, whose 512 MiB PMD no page-cache folio reaches, and which maps such
 * a block with contiguous PTEs (one TLB entry). smaps counts PMD mappings
 * only, so the blocks are read from /proc/self/pagemap (frame numbers:
 * root) and /proc/kpageflags: 32 consecutive frames, the first 32-aligned,
 * every page compound, no head after the first (the preload's own test,
 * hugetext_abi::kpf::block_is_one_folio). Returns -1 where the unit is the
 * PMD (smaps then says it). */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

static long unit_huge_kib(unsigned long lo, unsigned long hi) {
    long page = sysconf(_SC_PAGESIZE);
#ifdef __aarch64__
    if (page != 65536)
        return -1;
#else
    return -1;
#endif
    enum { NP = 32 };
    const unsigned long unit = (unsigned long)NP * page;
    const uint64_t pfn_mask = (1ULL << 55) - 1, head = 1ULL << 15, tail = 1ULL << 16;
    int pm = open("/proc/self/pagemap", O_RDONLY), kf = open("/proc/kpageflags", O_RDONLY);
    long kib = 0;
    for (unsigned long w = (lo + unit - 1) & ~(unit - 1); pm >= 0 && kf >= 0 && w + unit <= hi; w += unit) {
        uint64_t e[NP], f[NP];
        if (pread(pm, e, sizeof e, (off_t)(w / page * 8)) != (ssize_t)sizeof e)
            continue;
        uint64_t pfn0 = e[0] & pfn_mask;
        int ok = pfn0 != 0 && pfn0 % NP == 0;
        for (int i = 0; ok && i < NP; i++)
            ok = (e[i] >> 63) && (e[i] & pfn_mask) == pfn0 + i;
        if (!ok || pread(kf, f, sizeof f, (off_t)(pfn0 * 8)) != (ssize_t)sizeof f)
            continue;
        ok = (f[0] & (head | tail)) != 0;
        for (int i = 1; ok && i < NP; i++)
            ok = (f[i] & tail) && !(f[i] & head);
        if (ok)
            kib += unit >> 10;
    }
    if (pm >= 0)
        close(pm);
    if (kf >= 0)
        close(kf);
    return kib;
}
