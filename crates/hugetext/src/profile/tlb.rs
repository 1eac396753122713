//! Modelled instruction TLBs: two levels, set-associative, true LRU, with
//! the geometries vendors publish, and a cost per miss.
//!
//! The model sees the sequence of code pages executed (consecutive
//! instructions in one page are one access: they hit). With every page
//! 4 KiB it gives the misses of text as most programs run today; with the
//! whole PMD windows hugetext maps as 2 MiB pages it gives the misses after.
//! What it leaves out is stated in doc/profile.md: data accesses sharing
//! the second level (Intel's STLB, Arm's L2 TLB), the page-walk caches and
//! the data caches a walk goes through, prefetching, SMT sharing, the
//! hardware's pseudo-LRU replacement, and a hypervisor's second-level walk.

use serde::{Deserialize, Serialize};

/// One TLB level: `entries` in sets of `ways` (ways = entries: fully
/// associative).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Level {
    pub entries: u32,
    pub ways: u32,
}

/// A core's instruction-side TLBs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Geometry {
    /// Short name (`--itlb NAME`).
    pub name: &'static str,
    /// The core.
    pub core: &'static str,
    /// L1 iTLB for 4 KiB pages (for every page size when `l1_2m` is None).
    pub l1: Level,
    /// L1 iTLB for 2 MiB pages, if separate.
    pub l1_2m: Option<Level>,
    /// Second level (4 KiB and 2 MiB entries).
    pub l2: Level,
    /// Cycles of an L1 miss that hits the second level.
    pub l2_hit_cycles: u32,
    /// Where the numbers come from.
    pub source: &'static str,
}

/// The cores modelled. Sources (public vendor documents):
///
/// - Skylake: Intel 64 and IA-32 Architectures Optimization Reference
///   Manual (248966-045), Table 2-15 "TLB Parameters of the Skylake
///   Microarchitecture": ITLB 4 KiB 128 entries 8-way; ITLB 2 MiB 8 entries
///   per thread (modelled fully associative); STLB 1536 entries 12-way for
///   4 KiB and 2 MiB pages. STLB hit: 9 cycles (the "STLB hit" penalty the
///   same manual's TLB tuning sections use; an estimate).
/// - Zen 4: AMD Software Optimization Guide for AMD Family 19h Processors
///   (57647), "Translation-Lookaside Buffer": L1 ITLB 64 entries, fully
///   associative, all page sizes; L2 ITLB 512 entries, 8-way, 4 KiB and
///   2 MiB pages. L2 ITLB hit: 7 cycles (an estimate; the guide gives none).
/// - Neoverse V2: Arm Neoverse V2 Core Technical Reference Manual (102375),
///   "L1 instruction TLB" and "L2 TLB": L1 iTLB 48 entries, fully
///   associative, all page sizes; L2 TLB 2048 entries, 8-way, shared with
///   data. L2 TLB hit: 3 cycles (the Cortex-A76 TRM's "usually takes three
///   cycles", the same L2 TLB design family).
pub const GEOMETRIES: [Geometry; 3] = [
    Geometry {
        name: "skylake",
        core: "Intel Skylake",
        l1: Level { entries: 128, ways: 8 },
        l1_2m: Some(Level { entries: 8, ways: 8 }),
        l2: Level {
            entries: 1536,
            ways: 12,
        },
        l2_hit_cycles: 9,
        source: "Intel Optimization Reference Manual 248966-045, Table 2-15",
    },
    Geometry {
        name: "zen4",
        core: "AMD Zen 4",
        l1: Level { entries: 64, ways: 64 },
        l1_2m: None,
        l2: Level { entries: 512, ways: 8 },
        l2_hit_cycles: 7,
        source: "AMD Software Optimization Guide for Family 19h Processors 57647",
    },
    Geometry {
        name: "neoverse-v2",
        core: "Arm Neoverse V2",
        l1: Level { entries: 48, ways: 48 },
        l1_2m: None,
        l2: Level { entries: 2048, ways: 8 },
        l2_hit_cycles: 3,
        source: "Arm Neoverse V2 Core Technical Reference Manual 102375",
    },
];

/// Cycles of a page walk that finds the entry (the default; `--walk-cycles`).
/// A walk whose upper levels hit the paging-structure caches and whose last
/// level hits the data cache costs tens of cycles; one that goes to DRAM,
/// hundreds.
pub const WALK_CYCLES: u32 = 30;

/// The geometry named `name`.
pub fn geometry(name: &str) -> Option<Geometry> {
    GEOMETRIES.iter().find(|g| g.name == name).copied()
}

/// A set-associative TLB with true LRU replacement.
#[derive(Debug, Clone)]
struct Tlb {
    ways: usize,
    /// Per set, tags most recent first.
    sets: Vec<Vec<u64>>,
}

impl Tlb {
    fn new(l: Level) -> Tlb {
        let ways = l.ways.max(1) as usize;
        let nsets = (l.entries as usize / ways).max(1);
        Tlb {
            ways,
            sets: vec![Vec::with_capacity(ways); nsets],
        }
    }

    /// Look `page` up (tag = page number with its size bit); insert it on a
    /// miss. True on a hit.
    fn access(&mut self, number: u64, tag: u64) -> bool {
        let n = self.sets.len() as u64;
        let set = &mut self.sets[(number % n) as usize];
        if let Some(i) = set.iter().position(|&t| t == tag) {
            set[..=i].rotate_right(1);
            return true;
        }
        if set.len() == self.ways {
            set.pop();
        }
        set.insert(0, tag);
        false
    }
}

/// What one access did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    L1Hit,
    L2Hit,
    Walk,
}

/// A core's modelled iTLBs.
#[derive(Debug, Clone)]
pub struct Itlb {
    l1: Tlb,
    l1_2m: Option<Tlb>,
    l2: Tlb,
}

/// A code page: a 4 KiB page number, or a 2 MiB page number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Page {
    Small(u64),
    Huge(u64),
}

impl Itlb {
    pub fn new(g: &Geometry) -> Itlb {
        Itlb {
            l1: Tlb::new(g.l1),
            l1_2m: g.l1_2m.map(Tlb::new),
            l2: Tlb::new(g.l2),
        }
    }

    /// Fetch from `page`.
    pub fn access(&mut self, page: Page) -> Outcome {
        let (number, tag) = match page {
            Page::Small(n) => (n, n << 1),
            Page::Huge(n) => (n, (n << 1) | 1),
        };
        let l1 = match (page, self.l1_2m.as_mut()) {
            (Page::Huge(_), Some(t)) => t,
            _ => &mut self.l1,
        };
        if l1.access(number, tag) {
            Outcome::L1Hit
        } else if self.l2.access(number, tag) {
            Outcome::L2Hit
        } else {
            Outcome::Walk
        }
    }
}

/// Misses of one run of the model.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Misses {
    /// L1 iTLB misses (second-level lookups).
    pub l1: u64,
    /// Second-level misses (page walks).
    pub walks: u64,
}

impl Misses {
    pub fn count(&mut self, o: Outcome) {
        match o {
            Outcome::L1Hit => {}
            Outcome::L2Hit => self.l1 += 1,
            Outcome::Walk => {
                self.l1 += 1;
                self.walks += 1;
            }
        }
    }

    /// Estimated cycles: second-level hits at the geometry's latency, walks
    /// at `walk_cycles`.
    pub fn cycles(&self, g: &Geometry, walk_cycles: u32) -> u64 {
        (self.l1 - self.walks) * g.l2_hit_cycles as u64 + self.walks * walk_cycles as u64
    }
}

/// The model's estimate for one file (or for all code).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileEstimate {
    /// The file (empty for all code).
    pub path: String,
    pub instructions: u64,
    /// Every text page 4 KiB.
    pub small: Misses,
    /// Whole PMD windows on 2 MiB pages.
    pub huge: Misses,
    /// Estimated cycles spent on iTLB misses, 4 KiB and huge.
    pub small_cycles: u64,
    pub huge_cycles: u64,
    /// Some of its code ran in whole windows, which the huge model maps
    /// as 2 MiB pages. A file without (no whole window of its own) that
    /// misses less in the huge model gains only because other files' text
    /// went huge and left it more TLB entries.
    #[serde(default)]
    pub own_huge: bool,
}

impl FileEstimate {
    /// L1 iTLB misses per 1,000 instructions: (4 KiB, huge).
    pub fn mpki(&self) -> (f64, f64) {
        let k = self.instructions.max(1) as f64 / 1000.0;
        (self.small.l1 as f64 / k, self.huge.l1 as f64 / k)
    }

    /// Page walks per 1,000 instructions: (4 KiB, huge).
    pub fn walks_pki(&self) -> (f64, f64) {
        let k = self.instructions.max(1) as f64 / 1000.0;
        (self.small.walks as f64 / k, self.huge.walks as f64 / k)
    }
}

/// The model's estimate for a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The geometry's name, core and source.
    pub model: String,
    pub core: String,
    pub source: String,
    pub walk_cycles: u32,
    pub l2_hit_cycles: u32,
    /// All code executed.
    pub all: FileEstimate,
    /// Per file, most 4 KiB misses first.
    pub files: Vec<FileEstimate>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_keeps_the_most_recent_ways() {
        let mut t = Tlb::new(Level { entries: 2, ways: 2 });
        assert!(!t.access(1, 1));
        assert!(!t.access(2, 2));
        assert!(t.access(1, 1));
        assert!(!t.access(3, 3)); // evicts 2
        assert!(t.access(1, 1));
        assert!(!t.access(2, 2));
    }

    #[test]
    fn sets_are_indexed_by_page_number() {
        let mut t = Tlb::new(Level { entries: 4, ways: 1 });
        for p in 0..4 {
            assert!(!t.access(p, p));
        }
        for p in 0..4 {
            assert!(t.access(p, p), "page {p} in its own set");
        }
        assert!(!t.access(4, 4)); // set 0
        assert!(!t.access(0, 0));
    }

    #[test]
    fn a_cycle_larger_than_both_levels_always_walks() {
        let g = geometry("skylake").unwrap();
        let mut m = Itlb::new(&g);
        let mut miss = Misses::default();
        // 4096 pages in a cycle: LRU keeps none of them from one lap to the next.
        for _ in 0..3 {
            for p in 0..4096 {
                miss.count(m.access(Page::Small(p)));
            }
        }
        assert_eq!(
            miss,
            Misses {
                l1: 3 * 4096,
                walks: 3 * 4096
            }
        );
        // The same text as 8 huge pages fits Skylake's 8-entry 2 MiB L1.
        let mut m = Itlb::new(&g);
        let mut miss = Misses::default();
        for _ in 0..3 {
            for p in 0..4096u64 {
                miss.count(m.access(Page::Huge(p / 512)));
            }
        }
        assert_eq!(miss, Misses { l1: 8, walks: 8 });
        assert_eq!(miss.cycles(&g, 30), 8 * 30);
    }

    #[test]
    fn small_and_huge_pages_do_not_alias() {
        let g = geometry("zen4").unwrap();
        let mut m = Itlb::new(&g);
        assert_eq!(m.access(Page::Small(1)), Outcome::Walk);
        assert_eq!(m.access(Page::Huge(1)), Outcome::Walk);
        assert_eq!(m.access(Page::Small(1)), Outcome::L1Hit);
    }
}
