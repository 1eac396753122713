//! Library-level checks of the folio classifier on this very process: the
//! fast path (PAGEMAP_SCAN) and thpmaps' path (smaps) must agree, and known
//! layouts must land in the right classes.

use std::fs::File;
use std::os::fd::AsFd;

use hugetext::folio::{Class, Counts, Kind};
use hugetext::inspect::{self, Method, Options, Target};
use hugetext::kernel::{self, Mapping};
use hugetext::pagecache;

const MIB: usize = 1 << 20;

/// Counts of the mapping of this process that starts at `addr`, by method.
fn counts_at(addr: usize, method: Method, cont: &[u32]) -> Counts {
    let opts = Options {
        target: Target::Pids(vec![std::process::id() as i32]),
        all: true,
        cont_orders: cont.to_vec(),
        mappings: true,
        method: Some(method),
    };
    let r = inspect::inspect(&opts, &()).unwrap();
    r.processes[0]
        .mappings
        .iter()
        .find(|m| m.vma.start == addr as u64)
        .map(|m| m.counts.clone())
        .unwrap_or_default()
}

fn methods() -> Vec<Method> {
    let mut v = vec![Method::PagemapSmaps];
    if kernel::pagemap_scan_supported() {
        v.push(Method::PagemapScan);
    }
    v
}

#[test]
fn pmd_partial_and_unaligned_layouts() {
    let dir = hugetext_testkit::scratch();
    let (pmd, ps) = (kernel::pmd_size(), kernel::page_size());
    let p = hugetext_testkit::scratch_file(dir.path(), "layouts", 2 * pmd / MIB);
    let f = File::open(&p).unwrap();
    pagecache::fill_huge(&f, 0..2 * pmd as u64).unwrap();
    let pmd_pages = (pmd / ps) as u64;
    let rx = libc::PROT_READ | libc::PROT_EXEC;
    // Whole file, congruent: PMD-mapped.
    let whole = Mapping::file_congruent(f.as_fd(), 0, 2 * pmd, rx, pmd).unwrap();
    whole.populate_read(0, 2 * pmd).unwrap();
    // One page short of the first folio: that folio is partial.
    let part = Mapping::file_congruent(f.as_fd(), ps as u64, pmd - ps, rx, pmd).unwrap();
    part.populate_read(0, pmd - ps).unwrap();
    for m in methods() {
        let c = counts_at(whole.addr(), m, &[4]);
        assert_eq!(c.get(Kind::File, Class::PmdAligned), 2 * pmd_pages, "{m:?}: {c:?}");
        assert_eq!(c.total(Kind::File), 2 * pmd_pages);
        assert_eq!(c.cont(Kind::File, 4), (0, 2 * pmd_pages), "{m:?}");
        let c = counts_at(part.addr(), m, &[4]);
        assert_eq!(c.get(Kind::File, Class::Partial), pmd_pages - 1, "{m:?}: {c:?}");
        assert_eq!(c.total(Kind::File), pmd_pages - 1);
        // 64K blocks inside the partial folio still count (thpmaps' rule):
        // all but the first, which starts one page before the mapping.
        assert_eq!(c.cont(Kind::File, 4).0, pmd_pages - 16, "{m:?}");
    }
}

#[test]
fn anon_thp_and_base_pages() {
    let (pmd, ps) = (kernel::pmd_size(), kernel::page_size());
    let pmd_pages = (pmd / ps) as u64;
    let a = Mapping::anon_aligned(2 * pmd, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
    a.madvise(0, 2 * pmd, kernel::MADV_HUGEPAGE).unwrap();
    for i in (0..2 * pmd).step_by(ps) {
        // SAFETY: i is inside the writable mapping a.
        unsafe { a.as_ptr().add(i).write_volatile(1) };
    }
    let b = Mapping::anon_aligned(2 * pmd, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
    b.madvise(0, 2 * pmd, kernel::MADV_NOHUGEPAGE).unwrap();
    for i in (0..MIB).step_by(ps) {
        // SAFETY: i is inside the writable mapping b.
        unsafe { b.as_ptr().add(i).write_volatile(1) };
    }
    for m in methods() {
        let c = counts_at(a.addr(), m, &[]);
        assert_eq!(c.get(Kind::Anon, Class::PmdAligned), 2 * pmd_pages, "{m:?}: {c:?}");
        let c = counts_at(b.addr(), m, &[]);
        assert_eq!(c.get(Kind::Anon, Class::PmdAligned), 0);
        assert_eq!(c.total(Kind::Anon), (MIB / ps) as u64, "{m:?}: {c:?}");
    }
}

#[test]
fn methods_agree_on_this_whole_process() {
    // Everything this process maps, by both pagemap methods (smaps-only
    // cannot see folio sizes). Other test threads may map and unmap while
    // this runs, so compare only mappings that are stable: the executable's.
    let exe = std::fs::read_link("/proc/self/exe").unwrap();
    let get = |m: Method| {
        let opts = Options {
            target: Target::Pids(vec![std::process::id() as i32]),
            all: false,
            cont_orders: vec![],
            mappings: true,
            method: Some(m),
        };
        let r = inspect::inspect(&opts, &()).unwrap();
        r.processes[0]
            .mappings
            .iter()
            .filter(|m| std::path::Path::new(&m.vma.path) == exe)
            .map(|m| (m.vma.start, m.counts.clone()))
            .collect::<Vec<_>>()
    };
    if kernel::pagemap_scan_supported() {
        // Threads of other tests still fault in pages of the executable's
        // text: compare once a read before and after the other method agree.
        for _ in 0..20 {
            let a = get(Method::PagemapScan);
            assert!(!a.is_empty());
            let b = get(Method::PagemapSmaps);
            if get(Method::PagemapScan) == a {
                assert_eq!(a, b);
                return;
            }
        }
        panic!("the executable's text kept changing");
    }
}
