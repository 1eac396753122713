//! The `-v` summary of a pass.

use super::{Pass, Scope, Totals};
use crate::config::{Config, Strategy};
use crate::out::{line, Out};
use crate::perfmap;
use crate::scan;
use crate::sys;
/// "; time per route: copy 78.0 MiB in 22.51 ms (0.289 ms/MiB; source: 60.0
/// MiB copied from 2 MiB page-cache folios, 18.0 MiB read with pread)" for
/// each route that ran: the bytes it made huge, its time and the time per
/// MiB (a route that made nothing huge in under 10 µs is left out); for
/// `copy`, where its bytes came from.
pub(super) fn route_times<const N: usize>(o: &mut Out<N>, t: &Totals) {
    let names = ["already", "file", "collapse", "copy", "shmem"];
    let bytes = [t.already, t.file, t.collapse, t.copy, t.shmem];
    let mut first = true;
    for i in 0..5 {
        if t.ns[i] == 0 || (bytes[i] == 0 && t.ns[i] < 10_000) {
            continue; // did not run, or only measured in no time
        }
        o.s(if first { "; time per route: " } else { ", " })
            .s(names[i])
            .s(" ")
            .mib(bytes[i])
            .s(" in ")
            .ms(t.ns[i]);
        first = false;
        if bytes[i] > 0 {
            // Thousandths of a ms per MiB.
            let per = (t.ns[i] as u128 * (1 << 20) / bytes[i] as u128 / 1000) as u64;
            o.s(" (").u(per / 1000).s(".");
            for d in [100, 10, 1] {
                o.u(per % 1000 / d % 10);
            }
            o.s(" ms/MiB");
            if i == 3 {
                let mapped = bytes[i].saturating_sub(t.copy_pmd + t.copy_read);
                let mut sep = "; source: ";
                for (b, what) in [
                    (t.copy_pmd, [" copied from ", " page-cache folios"]),
                    (t.copy_read, [" read with pread", ""]),
                    (mapped, [" copied from the text mapped in ", " pages"]),
                ] {
                    if b >= 1 << 16 {
                        o.s(sep).mib(b).s(what[0]);
                        if !what[1].is_empty() {
                            let unit = if what[1].contains("cache") {
                                scan::unit()
                            } else {
                                scan::page()
                            };
                            o.size(unit as u64).s(what[1]);
                        }
                        sep = ", ";
                    }
                }
            }
            o.s(")");
        }
    }
}

/// Say what in the configuration is not understood (`-v`).
pub(super) fn config_notes(cfg: &Config) {
    if !cfg.verbose {
        return;
    }
    if let Some(s) = cfg.bad_strategy {
        line()
            .s("unknown HUGETEXT_STRATEGY=")
            .bytes(s)
            .s(" (expected auto, file, collapse, shmem or copy); using auto");
    }
    if let Some(o) = cfg.bad_order {
        line()
            .s("unknown HUGETEXT_ORDER=")
            .bytes(o)
            .s(" (expected file or collapse); using file");
    }
    if cfg.order == crate::config::Order::Collapse && cfg.strategy == Strategy::Auto {
        line().s("zero-copy routes: MADV_COLLAPSE in place first, then evict + refill (HUGETEXT_ORDER=collapse: cheaper on this filesystem, as measured by `hugetext run`)");
    }
    if let Some(w) = cfg.compat.unknown {
        line()
            .s("unknown word in HUGETEXT_COMPAT: ")
            .bytes(w)
            .s(" (expected ")
            .s(hugetext_abi::compat::WORDS)
            .s("); ignored");
    }
}

/// Say which older-kernel behaviours `HUGETEXT_COMPAT` asks for (`-v`).
pub(super) fn compat_notes(cfg: &Config) {
    if !cfg.verbose {
        return;
    }
    if cfg.compat.no_populate {
        line()
            .s(hugetext_abi::settings::COMPAT)
            .s("=no-populate: faulting text in by touching every page, not MADV_POPULATE_READ");
    }
    if cfg.compat.no_pt_reclaim {
        line().s(hugetext_abi::settings::COMPAT).s("=no-pt-reclaim: dropping windows with two MADV_DONTNEED calls, which leave the emptied page table as kernels before 6.14 do");
    }
}

/// The `-v` summary line of a pass: "pid N: X of Y text in whole 2 MiB
/// windows is huge-backed (already, file, collapse, shmem, copy) in T; ...".
pub(super) fn summary(pass: &Pass, scope: &Scope, t0: u64) {
    let t = &pass.t;
    let mut o = line();
    let (outer, own) = perfmap::map_pid();
    o.s("pid ").pid(own);
    if outer != own {
        o.s(" (pid ").pid(outer).s(" outside its pid namespace)");
    }
    if scope.only.is_some() {
        o.s(", loaded after start (dlopen)");
    }
    o.s(": ").mib(t.huge()).s(" of ").mib(t.windows);
    o.s(" text in whole ")
        .size(scan::unit() as u64)
        .s(if scan::is_contpte() { " contpte-block" } else { "" })
        .s(" windows is huge-backed (already ")
        .mib(t.already);
    o.s(", file ")
        .mib(t.file)
        .s(", collapse ")
        .mib(t.collapse)
        .s(", shmem ")
        .mib(t.shmem)
        .s(", copy ")
        .mib(t.copy);
    o.s(") in ")
        .ms(sys::now_ns().saturating_sub(t0))
        .s("; ")
        .u(t.small_mappings as u64)
        .s(" text mappings have no whole ")
        .size(scan::unit() as u64)
        .s(" window");
    crate::hot::summary(&mut o);
    if pass.scan.is_smaps() {
        o.s("; verified with /proc/self/smaps totals");
    } else if pass.scan.is_cont() && pass.scan.sees_folios() {
        o.s("; verified with pagemap PFNs and /proc/kpageflags");
    } else if pass.scan.is_cont() {
        o.s("; copies verified by mincore as they were allocated");
    }
    if pass.touch {
        o.s("; pages touched, no MADV_POPULATE_READ");
    }
    if t.replaced > 0 {
        o.s("; ")
            .mib(t.replaced)
            .s(" in windows replaced with mmap(MAP_FIXED) (MADV_DONTNEED keeps page tables)");
    }
    route_times(&mut o, t);
}

/// The machine-readable record of the pass (`HUGETEXT_REPORT=json`, see
/// `hugetext_abi::report`): the numbers of [`summary`], exact.
pub(super) fn record(pass: &Pass, scope: &Scope, t0: u64) {
    use hugetext_abi::report::{Record, PREFIX, VERSION};
    let t = &pass.t;
    let (outer, _) = perfmap::map_pid();
    let hot = crate::hot::totals();
    let [ns_already, ns_file, ns_collapse, ns_copy, ns_shmem] = t.ns;
    let r = Record {
        pid: outer.map_or(0, u64::from),
        late: scope.only.is_some() as u64,
        pmd: scan::pmd() as u64,
        windows: t.windows,
        huge: t.huge(),
        already: t.already,
        file: t.file,
        collapse: t.collapse,
        copy: t.copy,
        replaced: t.replaced,
        copy_pmd: t.copy_pmd,
        copy_read: t.copy_read,
        ns_already,
        ns_file,
        ns_collapse,
        ns_copy,
        ns: sys::now_ns().saturating_sub(t0),
        smaps: pass.scan.is_smaps() as u64,
        touch: pass.touch as u64,
        unit: scan::unit() as u64,
        contpte: scan::is_contpte() as u64,
        hot_list: hot.is_some() as u64,
        hot: hot.map_or(0, |h| h.0),
        cold: hot.map_or(0, |h| h.1),
        shmem: t.shmem,
        ns_shmem,
        ns_maps: t.ns_maps,
        ns_setup: t.ns_setup,
        ns_copy_fill: t.ns_copy_fill,
        ns_perf_map: t.ns_perf_map,
        ns_copy_fill_cpu: t.ns_copy_fill_cpu,
        ns_copy_zero: t.ns_copy_zero,
        ns_copy_zero_cpu: t.ns_copy_zero_cpu,
    };
    let mut o = Out::<1024>::new(2);
    o.s(PREFIX).s("{\"v\":").u(VERSION);
    for (k, v) in r.pairs() {
        o.s(",\"").s(k).s("\":").u(v);
    }
    o.s("}\n");
}
