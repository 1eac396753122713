//! One text mapping: its windows in chunks of up to 64, each chunk
//! measured, planned and sent down its routes.

use super::shmem::Entry;
use super::*;

impl Pass<'_> {
    /// One text mapping.
    pub(super) fn mapping(&mut self, c: &Cand) {
        let w = scan::windows(c.start, c.end);
        let (ws, we, unit) = (w.start(), w.end(), w.unit());
        if w.is_empty() {
            self.t.small_mappings += 1;
            return;
        }
        self.t.mappings += 1;
        let total = w.bytes() as u64;
        self.t.windows += total;
        let before = (self.t.already, self.t.file, self.t.collapse, self.t.copy, self.t.shmem);
        if c.copied {
            if let Ok(b) = self.scan.huge_bytes(ws, we) {
                self.t.already += b;
            }
            return;
        }
        if !crate::hot::select(self.st.path(c), c.start, c.off, total, self.cfg.verbose) {
            return;
        }
        match self.scan.has_private_pages(c.start, c.end) {
            Ok(false) => {}
            Ok(true) => {
                self.note(
                    c,
                    "text was modified in memory (debugger breakpoint or uprobe): left alone",
                );
                return;
            }
            Err(e) => return self.fail(c, self.verifier_name(), e),
        }
        let congruent = hugetext_abi::geometry::congruent(c.start as u64, c.off, unit as u64);
        let mut fd: isize = 0; // 0 = not opened yet
        let mut elf: Option<ElfFile> = None;
        let mut advised = false;
        let mut entry = Entry::Unknown;
        for (a, n) in w.batches(64) {
            self.chunk(c, a, n, a == ws, congruent, &mut fd, &mut elf, &mut advised, &mut entry);
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
            let shared = (self.t.already - before.0) + (self.t.file - before.1) + (self.t.collapse - before.2);
            self.store_hint(c, total.saturating_sub(shared));
        }
        if self.cfg.verbose {
            let (al, fi, co, cp, sh) = (
                self.t.already - before.0,
                self.t.file - before.1,
                self.t.collapse - before.2,
                self.t.copy - before.3,
                self.t.shmem - before.4,
            );
            let mut o = line();
            o.bytes(self.st.path(c))
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

    pub(super) fn ensure_fd(&mut self, c: &Cand, fd: &mut isize) -> isize {
        if *fd == 0 {
            *fd = open_mapped(self.st, c);
        }
        *fd
    }

    /// Up to 64 windows of one text mapping: measure them (the `already`
    /// route), let [`plan`] choose the routes from the facts, and run them
    /// in order until every window is huge.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn chunk(
        &mut self,
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
        let w = self.route_already(c, a, n, first);
        self.t.ns[0] += sys::now_ns().saturating_sub(t0);
        let Some(mut w) = w else {
            return;
        };
        w.all &= crate::hot::mask(a, n);
        let plan = plan(&Facts {
            strategy: self.cfg.strategy,
            order: self.cfg.order,
            congruent,
            all_huge: w.done(),
            collapse_refused: self.t.collapse_unsupported,
            gdb: self.cfg.gdb,
            no_anon_thp: self.no_anon_thp,
            contpte: scan::is_contpte(),
            sees_folios: self.scan.sees_folios(),
        });
        if let Some(why) = plan.cont_note {
            if self.cfg.verbose && !self.t.cont_noted {
                line().s(why);
            }
            self.t.cont_noted = true;
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
                    self.route_file(c, &mut w, fd, advised, step);
                    self.t.ns[1] += sys::now_ns().saturating_sub(t0);
                }
                None => {
                    self.route_collapse(c, &mut w);
                    self.t.ns[2] += sys::now_ns().saturating_sub(t0);
                }
            }
            if w.done() {
                return;
            }
        }
        if plan.not_congruent && self.cfg.verbose {
            line()
                .bytes(self.st.path(c))
                .s(": not congruent (address - file offset is not a multiple of ")
                .size(scan::unit() as u64)
                .s("): only `copy` can make it huge");
        }
        if plan.shmem {
            let t0 = sys::now_ns();
            self.route_shmem(c, &mut w, fd, entry);
            self.t.ns[4] += sys::now_ns().saturating_sub(t0);
            if w.done() {
                return;
            }
        }
        match plan.copy {
            CopyPlan::No => {}
            CopyPlan::Skip(why) => self.note(c, why),
            CopyPlan::Yes => {
                let t0 = sys::now_ns();
                self.route_copy(c, &mut w, fd, elf);
                self.t.ns[3] += sys::now_ns().saturating_sub(t0);
            }
        }
    }

    /// Route 1, already huge: measure the windows `[a, a + n·2M)` and count
    /// what is PMD-mapped before any route runs. `None` when they cannot be
    /// measured (reported).
    pub(super) fn route_already(&mut self, c: &Cand, a: usize, n: usize, first: bool) -> Option<Chunk> {
        // `huge`: windows proved huge; `hb`: huge bytes of the accounting
        // scope (Verifier::measure), the base of every route's gain.
        let (huge, hb) = match self.scan.measure(a, n, c.start, c.end) {
            Ok(v) => v,
            Err(e) => {
                self.fail(c, self.verifier_name(), e);
                return None;
            }
        };
        // With smaps the scope is the whole mapping: count it once.
        if first || !self.scan.is_smaps() {
            self.t.already += hb;
        }
        Some(Chunk {
            a,
            n,
            all: full(n),
            huge,
            hb,
        })
    }
}
