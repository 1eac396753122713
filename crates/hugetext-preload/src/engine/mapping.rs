//! One text mapping: its windows in chunks of up to 64, each chunk
//! measured, planned and sent down its routes.

use super::collapse::route_collapse;
use super::copy::route_copy;
use super::file::{route_file, FileStep};
use super::plan::plan;
use super::shmem::{route_shmem, store_hint, Entry};
use super::{full, Cand, Chunk, CopyPlan, Facts, Pass};
use crate::out::line;
use crate::perfmap::ElfFile;
use crate::scan;
use crate::sys;

/// One text mapping.
pub(super) fn mapping(p: &mut Pass, c: &Cand) {
    let w = scan::windows(c.start, c.end);
    let (ws, we, unit) = (w.start(), w.end(), w.unit());
    if w.is_empty() {
        p.t.small_mappings += 1;
        return;
    }
    p.t.mappings += 1;
    let total = w.bytes() as u64;
    p.t.windows += total;
    let before = (p.t.already, p.t.file, p.t.collapse, p.t.copy, p.t.shmem);
    if c.copied {
        if let Ok(b) = p.scan.huge_bytes(ws, we) {
            p.t.already += b;
        }
        return;
    }
    if !crate::hot::select(p.st.path(c), c.start, c.off, total, p.cfg.verbose) {
        return;
    }
    match p.scan.has_private_pages(c.start, c.end) {
        Ok(false) => {}
        Ok(true) => {
            p.note(
                c,
                "text was modified in memory (debugger breakpoint or uprobe): left alone",
            );
            return;
        }
        Err(e) => return p.fail(c, p.verifier_name(), e),
    }
    let congruent = hugetext_abi::geometry::congruent(c.start as u64, c.off, unit as u64);
    let mut fd: isize = 0; // 0 = not opened yet
    let mut elf: Option<ElfFile> = None;
    let mut advised = false;
    let mut entry = Entry::Unknown;
    for (a, n) in w.batches(64) {
        chunk(
            p,
            c,
            a,
            n,
            a == ws,
            congruent,
            &mut fd,
            &mut elf,
            &mut advised,
            &mut entry,
        );
    }
    drop(elf);
    if fd > 0 {
        sys::close(fd as i32);
    }
    if let Entry::Open(e) = entry {
        sys::close(e);
    }
    if entry == Entry::Missing {
        // Shared from the page cache (or already huge) or not: what a
        // store copy would share instead of private copies.
        let shared = (p.t.already - before.0) + (p.t.file - before.1) + (p.t.collapse - before.2);
        store_hint(p, c, total.saturating_sub(shared));
    }
    if p.cfg.verbose {
        let (al, fi, co, cp, sh) = (
            p.t.already - before.0,
            p.t.file - before.1,
            p.t.collapse - before.2,
            p.t.copy - before.3,
            p.t.shmem - before.4,
        );
        let mut o = line();
        o.bytes(p.st.path(c))
            .s(": ")
            .mib(al + fi + co + cp + sh)
            .s(" of ")
            .mib(total)
            .s(" huge (");
        o.s("already ")
            .mib(al)
            .s(", file ")
            .mib(fi)
            .s(", collapse ")
            .mib(co)
            .s(", shmem ")
            .mib(sh)
            .s(", copy ")
            .mib(cp)
            .s(")");
        if !congruent {
            o.s("; not congruent: address - file offset is not a multiple of ")
                .size(scan::unit() as u64);
        }
    }
}

/// Up to 64 windows of one text mapping: measure them (the `already`
/// route), let [`plan`] choose the routes from the facts, and run them
/// in order until every window is huge.
#[allow(clippy::too_many_arguments)]
pub(super) fn chunk(
    p: &mut Pass,
    c: &Cand,
    a: usize,
    n: usize,
    first: bool,
    congruent: bool,
    fd: &mut isize,
    elf: &mut Option<ElfFile>,
    advised: &mut bool,
    entry: &mut Entry,
) {
    let t0 = sys::now_ns();
    let w = route_already(p, c, a, n, first);
    p.t.ns[0] += sys::now_ns().saturating_sub(t0);
    let Some(mut w) = w else {
        return;
    };
    w.all &= crate::hot::mask(a, n);
    let plan = plan(&Facts {
        strategy: p.cfg.strategy,
        order: p.cfg.order,
        congruent,
        all_huge: w.done(),
        collapse_refused: p.t.collapse_unsupported,
        gdb: p.cfg.gdb,
        no_anon_thp: p.no_anon_thp,
        contpte: scan::is_contpte(),
        sees_folios: p.scan.sees_folios(),
    });
    if let Some(why) = plan.cont_note {
        if p.cfg.verbose && !p.t.cont_noted {
            line().s(why);
        }
        p.t.cont_noted = true;
    }
    // The zero-copy routes, in the order asked for (HUGETEXT_ORDER):
    // cached 2 MiB folios first either way.
    let steps: [(bool, Option<FileStep>); 3] = if plan.collapse_first {
        [
            (true, Some(FileStep::Cached)),
            (true, None),
            (true, Some(FileStep::Evict)),
        ]
    } else {
        [(plan.file, Some(FileStep::Both)), (plan.collapse, None), (false, None)]
    };
    for (run, step) in steps {
        if !run {
            continue;
        }
        let t0 = sys::now_ns();
        match step {
            Some(step) => {
                route_file(p, c, &mut w, fd, advised, step);
                p.t.ns[1] += sys::now_ns().saturating_sub(t0);
            }
            None => {
                route_collapse(p, c, &mut w);
                p.t.ns[2] += sys::now_ns().saturating_sub(t0);
            }
        }
        if w.done() {
            return;
        }
    }
    if plan.not_congruent && p.cfg.verbose {
        line()
            .bytes(p.st.path(c))
            .s(": not congruent (address - file offset is not a multiple of ")
            .size(scan::unit() as u64)
            .s("): only `copy` can make it huge");
    }
    if plan.shmem {
        let t0 = sys::now_ns();
        route_shmem(p, c, &mut w, fd, entry);
        p.t.ns[4] += sys::now_ns().saturating_sub(t0);
        if w.done() {
            return;
        }
    }
    match plan.copy {
        CopyPlan::No => {}
        CopyPlan::Skip(why) => p.note(c, why),
        CopyPlan::Yes => {
            let t0 = sys::now_ns();
            route_copy(p, c, &mut w, fd, elf);
            p.t.ns[3] += sys::now_ns().saturating_sub(t0);
        }
    }
}

/// Route 1, already huge: measure the windows `[a, a + n·2M)` and count
/// what is PMD-mapped before any route runs. `None` when they cannot be
/// measured (reported).
pub(super) fn route_already(p: &mut Pass, c: &Cand, a: usize, n: usize, first: bool) -> Option<Chunk> {
    // `huge`: windows proved huge; `hb`: huge bytes of the accounting
    // scope (Verifier::measure), the base of every route's gain.
    let (huge, hb) = match p.scan.measure(a, n, c.start, c.end) {
        Ok(v) => v,
        Err(e) => {
            p.fail(c, p.verifier_name(), e);
            return None;
        }
    };
    // With smaps the scope is the whole mapping: count it once.
    if first || !p.scan.is_smaps() {
        p.t.already += hb;
    }
    Some(Chunk {
        a,
        n,
        all: full(n),
        huge,
        hb,
    })
}
