//! The verdicts: pure functions over the gathered facts.

use hugetext_abi::geometry;
use hugetext_abi::thp::ThpMode;
use serde::Serialize;

use super::{tunable, Khugepaged, Layout, MappingFacts, ProcessFacts, SystemFacts};
use crate::procfs::ProcRef;
use crate::{fsutil, inspect};

/// Why (part of) a mapping is not PMD-mapped: the stable codes of
/// `explain --json` (doc/explain.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    /// Every whole 2 MiB window is PMD-mapped.
    Ok,
    /// The mapping holds no whole 2 MiB window: nothing of it can be.
    NoWholeWindow,
    /// THP `enabled=never` (for an anonymous copy: file text is PMD-mapped regardless).
    ThpNever,
    /// PR_SET_THP_DISABLE on the process.
    ThpDisabledProcess,
    /// MADV_NOHUGEPAGE on the mapping.
    MadvNohugepage,
    /// `p_vaddr − p_offset` not a multiple of 2 MiB (lld, mold).
    LayoutSkewed,
    /// Small `p_align`: the load base breaks the congruence.
    BaseUnaligned,
    /// The filesystem gives no PMD-size page-cache folios.
    FsNoLargeFolios,
    /// The page cache holds the text in small folios.
    CacheSmallFolios,
    /// PMD folios in the page cache, mapped by PTEs.
    MappedBeforeWarm,
    /// PMD folios in the page cache, and the windows that are not
    /// PMD-mapped are not mapped at all yet: the first execution maps them
    /// with a PMD.
    NotFaultedYet,
    /// A copy from `hugetext run` that is not in huge pages.
    CopyNotHuge,
    /// None of the above could be established (the evidence says why).
    Unknown,
}

/// The answer for one mapping.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    pub reason: Reason,
    /// The facts that show it.
    pub evidence: String,
    /// The one command (or action) that fixes it.
    pub fix: Option<String>,
    /// kB of whole windows not PMD-mapped (what the fix can gain).
    pub gain_kb: u64,
}

fn verdict(reason: Reason, evidence: impl Into<String>, fix: Option<String>, gain_kb: u64) -> Verdict {
    Verdict {
        reason,
        evidence: evidence.into(),
        fix,
        gain_kb,
    }
}

/// Whether khugepaged scans mapping `m`: THP `always`, or `MADV_HUGEPAGE`
/// under `madvise`. Pure.
fn khugepaged_scans(sys: &SystemFacts, m: &MappingFacts) -> bool {
    !m.nohugepage
        && match sys.thp_enabled {
            Some(ThpMode::Always) => true,
            Some(ThpMode::Madvise) => m.hugepage,
            _ => false,
        }
}

/// `pid 12 (x), pid 13 (y)`.
fn pids(v: &[ProcRef]) -> String {
    let mut s: Vec<String> = v
        .iter()
        .take(6)
        .map(|p| format!("pid {} ({})", p.pid, p.comm))
        .collect();
    if v.len() > 6 {
        s.push(format!("{} more", v.len() - 6));
    }
    s.join(", ")
}

/// The first reason that applies to the part of `m` that is not
/// PMD-mapped, in the kernel's order. Pure.
pub fn decide(sys: &SystemFacts, p: &ProcessFacts, m: &MappingFacts) -> Verdict {
    // Windows of the unit of huge text: the PMD, or the contpte block.
    let unit_kb = sys.unit / 1024;
    let unit_w = crate::units::human(sys.unit);
    let mapped = sys.unit_kind.mapped();
    let windows = m.windows(sys.unit);
    let gain = (windows * unit_kb).saturating_sub(m.unit_mapped_kb);
    if windows == 0 {
        return verdict(
            Reason::NoWholeWindow,
            format!(
                "{} kB mapped at {:#x}: no whole {unit_w} window fits, so none of it can be {mapped}",
                (m.end - m.start) / 1024,
                m.start
            ),
            None,
            0,
        );
    }
    if gain == 0 {
        return verdict(
            Reason::Ok,
            format!("all {windows} whole {unit_w} windows are {mapped}"),
            None,
            0,
        );
    }
    // THP `enabled=never` stops anonymous huge pages (run's copies), not
    // the PMD mapping of file folios: do_set_pmd() checks only the process
    // and the VMA (verified on 6.18: a warmed file is PMD-mapped under never).
    if m.copied && sys.thp_enabled == Some(ThpMode::Never) {
        return verdict(
            Reason::ThpNever,
            "/sys/kernel/mm/transparent_hugepage/enabled is [never]: no anonymous huge pages for the copy",
            Some("echo madvise > /sys/kernel/mm/transparent_hugepage/enabled".into()),
            gain,
        );
    }
    let unit_thp = p
        .unit
        .as_ref()
        .and_then(|u| u.memory_thp.as_deref().map(|t| (u.name.as_str(), t)));
    let unit_fix =
        |name: &str| format!("set MemoryTHP=inherit for {name} (systemctl edit {name}), then systemctl restart {name}");
    if p.thp_disabled == Some(true) {
        let status = format!("THP_enabled: 0 in /proc/{}/status", p.pid);
        return match unit_thp {
            Some((name, "disable")) => verdict(
                Reason::ThpDisabledProcess,
                format!("{status}: systemd unit {name} has MemoryTHP=disable (systemd calls prctl(PR_SET_THP_DISABLE) when it starts it)"),
                Some(unit_fix(name)),
                gain,
            ),
            _ => verdict(
                Reason::ThpDisabledProcess,
                format!("{status}: the process (or a parent it inherited it from) called prctl(PR_SET_THP_DISABLE)"),
                Some("restart it without PR_SET_THP_DISABLE (check its launcher, e.g. a systemd unit's MemoryTHP= or a wrapper calling prctl)".into()),
                gain,
            ),
        };
    }
    // MemoryTHP=madvise (PR_THP_DISABLE_EXCEPT_ADVISED, Linux 6.18) is no
    // reason for text: the kernel PMD-maps 2 MiB file folios regardless
    // (do_set_pmd() treats them as a forced collapse; measured on 6.18), and
    // `run` makes no copies in such a process.
    if m.nohugepage {
        return verdict(
            Reason::MadvNohugepage,
            format!(
                "nh in VmFlags of the mapping at {:#x} in /proc/{}/smaps",
                m.start, p.pid
            ),
            Some("the program calls madvise(MADV_NOHUGEPAGE) on its text: remove that call, then restart it".into()),
            gain,
        );
    }
    if m.copied {
        return verdict(
            Reason::CopyNotHuge,
            format!(
                "anonymous copy made by `hugetext run`: {} kB of {} kB in whole windows are in huge pages",
                m.unit_mapped_kb,
                windows * unit_kb
            ),
            Some("restart it with `hugetext run -v` and read why the copy was not made huge".into()),
            gain,
        );
    }
    // What align (then warm) would PMD-map: the windows of the aligned
    // layout, as `check` plans them and `align` produces them, not the
    // windows of the address range as it is loaded now.
    let (align_gain, align_note) = match m.after_align_kb {
        Some(kb) => (
            kb.saturating_sub(m.unit_mapped_kb),
            match kb / unit_kb.max(1) {
                0 => format!("; aligned, its segment would hold no whole {unit_w} window"),
                n if n != windows => format!(
                    "; aligned, its segment holds {n} whole {unit_w} window{} ({windows} as loaded now)",
                    if n == 1 { "" } else { "s" }
                ),
                _ => String::new(),
            },
        ),
        None => (gain, String::new()),
    };
    match &m.layout {
        Some(Layout::Skewed { skew }) => {
            return verdict(
                Reason::LayoutSkewed,
                format!(
                    "the segment's p_vaddr - p_offset is {skew:#x} modulo {unit_w} (lld/mold layout): no address makes it congruent{align_note}"
                ),
                (align_gain > 0).then(|| align_command(p, m)),
                align_gain,
            )
        }
        Some(Layout::BaseBreaks { base, p_align }) => {
            let (note, fix) = loader_advice(sys, p, m);
            return verdict(
                Reason::BaseUnaligned,
                format!(
                    "loaded at base {base:#x}, not {unit_w}-aligned (p_align {p_align:#x}): address - offset = {:#x} is not a multiple of {unit_w}{note}{align_note}",
                    m.start.wrapping_sub(m.offset)
                ),
                (align_gain > 0).then_some(fix),
                align_gain,
            );
        }
        Some(Layout::NotCongruent { why }) => {
            return verdict(
                Reason::LayoutSkewed,
                format!(
                    "mapped at {:#x} from file offset {:#x}: not congruent modulo {unit_w} ({why})",
                    m.start, m.offset
                ),
                Some("start it with `hugetext run --strategy copy`".into()),
                gain,
            )
        }
        Some(Layout::Congruent) | None => {}
    }
    if let Some(fs) = &m.fs {
        // (Where MADV_COLLAPSE builds PMD folios, `warm` does: the cache
        // verdict below gives that fix.)
        if fs.pmd_folios == Some(false) && fs.collapse_in_place != Some(true) {
            let what = if fsutil::is_memory_fs(&fs.name) || fs.name.starts_with("overlayfs over tmpfs") {
                format!("{} (shmem huge pages off) keeps regular files in small folios", fs.name)
            } else {
                format!("{} gives no PMD-size page-cache folios here", fs.name)
            };
            // A PIE or DSO every process maps congruently: one copy in the
            // text store (a huge tmpfs) serves them all, PMD-mapped and
            // shared, on any filesystem; a copy per process is the fallback.
            let fix = if m.shareable && m.store_copy.is_none() {
                format!(
                    "hugetext warm --shmem {} (one copy in the text store, a tmpfs with 2 MiB pages, shared by every process that runs it)",
                    m.path
                )
            } else {
                format!(
                    "move {} to a filesystem with large folios (xfs; ext4 on Linux 6.16 or later), or start it with `hugetext run --strategy copy`",
                    m.path
                )
            };
            return verdict(
                Reason::FsNoLargeFolios,
                format!("{what} (tested with a scratch file on the same filesystem)"),
                Some(fix),
                gain,
            );
        }
    }
    match &m.cache {
        Some(Ok(c)) if c.unit_windows < c.windows => {
            let sizes: Vec<String> = c.folios_kb.iter().map(|(sz, kb)| format!("{kb} kB in {sz} kB folios")).collect();
            let mut fix = format!("hugetext warm {}", m.reachable());
            let mut note = String::new();
            let in_place = m.fs.as_ref().and_then(|f| f.collapse_in_place);
            if in_place == Some(true) && khugepaged_scans(sys, m) {
                note = format!(
                    "; khugepaged collapses them in place by itself{}, or now: {fix}",
                    Khugepaged::pace(sys.khugepaged)
                );
            }
            if m.hugepage && m.fs.as_ref().and_then(|f| f.pmd_folios) == Some(true) {
                note.push_str(
                    "; the mapping is MADV_HUGEPAGE, so what its faults read from disk comes in PMD-size folios \
                     (PMD-order readahead), but folios already cached stay small until evicted or collapsed",
                );
            }
            if !c.blockers.is_empty() {
                match in_place {
                    // MADV_COLLAPSE collapses file text in place, and the
                    // kernel drops the PTE tables of processes mapping it, so
                    // they fault it back with PMDs.
                    Some(true) => fix.push_str(&format!(
                        " (MADV_COLLAPSE collapses the small folios in place while {} run)",
                        pids(&c.blockers)
                    )),
                    ro => {
                        fix.push_str(&format!(
                            " after {} exit (they map it, so its small folios cannot be evicted), then restart it",
                            pids(&c.blockers)
                        ));
                        if ro == Some(false) {
                            note = "; this kernel cannot collapse file text in place (MADV_COLLAPSE refused a scratch file on the same filesystem)".into();
                        }
                    }
                }
            }
            verdict(
                Reason::CacheSmallFolios,
                format!(
                    "{} of {} whole windows are {unit_w} folios in the page cache; cached: {}{note}",
                    c.unit_windows,
                    c.windows,
                    if sizes.is_empty() { "nothing".into() } else { sizes.join(", ") }
                ),
                Some(fix),
                gain,
            )
        }
        Some(Ok(c)) if m.unmapped_windows > 0 && m.unmapped_windows * unit_kb >= gain => verdict(
            Reason::NotFaultedYet,
            format!(
                "all {} whole windows are {unit_w} folios in the page cache; {} of them {} not mapped yet (never executed since the process started, or dropped): \
                 the kernel maps {} with a PMD when first executed, because the page cache holds {} in {unit_w} folios",
                c.windows,
                m.unmapped_windows,
                if m.unmapped_windows == 1 { "is" } else { "are" },
                if m.unmapped_windows == 1 { "it" } else { "each" },
                if m.unmapped_windows == 1 { "it" } else { "them" },
            ),
            None,
            gain,
        ),
        Some(Ok(c)) => verdict(
            Reason::MappedBeforeWarm,
            format!(
                "all {} whole windows are {unit_w} folios in the page cache, but this process maps them with base-page page-table entries (it mapped them before they were {unit_w} folios, or while huge pages were off for it){}",
                c.windows,
                match m.unmapped_windows {
                    0 => String::new(),
                    n => format!("; {n} more not mapped yet (a PMD when first executed)"),
                }
            ),
            Some(
                if m.fs.as_ref().and_then(|f| f.collapse_in_place) == Some(true) && khugepaged_scans(sys, m) {
                    format!(
                        "restart the program (or start it with `hugetext run`); khugepaged also maps them with PMDs in place{}",
                        Khugepaged::pace(sys.khugepaged)
                    )
                } else {
                    "restart the program (or start it with `hugetext run`)".into()
                },
            ),
            gain,
        ),
        Some(Err(why)) => verdict(
            Reason::Unknown,
            format!("the page cache could not be read: {why}"),
            None,
            gain,
        ),
        None => verdict(Reason::Unknown, "no page-cache facts", None, gain),
    }
}

/// For a segment the loader placed at a base that breaks congruence: what
/// glibc's `glibc.elf.thp` tunable can do (a note for the evidence) and the
/// fix. The tunable applies to what `ld.so` maps (libraries), not to the
/// executable, which the kernel maps; glibc aligns only when THP `enabled`
/// is `always`. Pure.
pub fn loader_advice(sys: &SystemFacts, p: &ProcessFacts, m: &MappingFacts) -> (String, String) {
    let align = align_command(p, m);
    let by_loader = p.exe.as_deref() != Some(m.path.as_str());
    let Some(loader) = p.loader.as_ref().filter(|l| by_loader && l.elf_thp == Some(true)) else {
        return (String::new(), align);
    };
    let set = p.glibc_tunables.as_deref().and_then(|t| tunable(t, "glibc.elf.thp")) == Some("1");
    let unit_w = crate::units::human(sys.unit);
    let mode = sys.thp_enabled.map_or("unknown", ThpMode::as_str);
    if set {
        let note = format!(
            "; GLIBC_TUNABLES has glibc.elf.thp=1, but {} did not align it (glibc aligns only when THP enabled is `always`; here `{mode}`)",
            loader.path
        );
        (note, align)
    } else if sys.thp_enabled == Some(ThpMode::Always) {
        let note = format!("; {} knows glibc.elf.thp", loader.path);
        (
            note,
            format!(
                "restart it with GLIBC_TUNABLES=glibc.elf.thp=1 (the loader then maps it {unit_w}-aligned), or {align}"
            ),
        )
    } else {
        let note = format!(
            "; {} knows glibc.elf.thp, but it aligns only when THP enabled is `always` (here `{mode}`)",
            loader.path
        );
        (note, align)
    }
}

/// Where aligned copies of a package's files go (the recipe of
/// [`align_command`]).
pub const ALIGNED_COPIES: &str = "/usr/local/lib/hugetext";

/// The command that aligns the file of `m`: in place, or, for a file a
/// package owns, `check`'s warning and a copy to align and start instead.
/// Pure.
pub fn align_command(p: &ProcessFacts, m: &MappingFacts) -> String {
    let Some(pkg) = &m.package else {
        return format!("hugetext align {}", m.reachable());
    };
    let name = m.path.rsplit('/').next().unwrap_or(&m.path);
    let copy = format!("{ALIGNED_COPIES}/{name}");
    let then = if p.exe.as_deref() == Some(m.path.as_str()) {
        format!("start {copy} instead of {}", m.path)
    } else {
        format!("start the program with LD_LIBRARY_PATH={ALIGNED_COPIES}")
    };
    format!(
        "align a copy, not the file of package {pkg} ({}): mkdir -p {ALIGNED_COPIES} && hugetext align -o {copy} {}, then {then}",
        crate::elf::align::SYSTEM_FILE_WARNING,
        m.reachable()
    )
}

/// Notes about the machine that bear on every process (a VM). Pure.
pub fn system_notes(sys: &SystemFacts) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(b) = sys.cont_pte.filter(|&b| b < sys.pmd_size) {
        v.push(format!(
            "arm64: text in page-cache folios of {} or more, naturally aligned, is mapped with contiguous-PTE entries \
             (one TLB entry per {}) without any hugetext step: each summary gives this kernel's own share; \
             executable faults read 64 KiB folios where the kernel has exec folios (Linux 7.x), and a filesystem's \
             readahead can give larger ones",
            crate::units::human(b),
            crate::units::human(b)
        ));
    }
    if sys.hypervisor {
        let mut s = "running in a virtual machine (hypervisor CPU flag): the guest can map 2 MiB pages, but how much \
                     they save depends on whether the host backs guest memory with huge pages"
            .to_string();
        if let Some(m) = &sys.itlb_multihit {
            s.push_str(&format!(
                "; itlb_multihit: {m} (on affected Intel hosts, KVM's mitigation maps executable guest memory with \
                 4 KiB pages in the host, so PMD-mapped text saves only the guest's page walks)"
            ));
        }
        v.push(s);
    }
    v
}

fn human_kb(kb: u64) -> String {
    crate::units::human(kb * 1024)
}

/// One line for a process, from its mappings and their verdicts. Pure.
pub fn summary(p: &ProcessFacts, verdicts: &[Verdict], cont_pte: Option<u64>, pmd: u64) -> String {
    let text_kb: u64 = p.mappings.iter().map(|m| (m.end - m.start) / 1024).sum();
    let mapped_kb: u64 = p.mappings.iter().map(|m| m.unit_mapped_kb).sum();
    let pct = (mapped_kb * 100).checked_div(text_kb).unwrap_or(0);
    let mut s = format!(
        "pid {} ({}): {pct}% of {} text PMD-mapped",
        p.pid,
        p.comm,
        human_kb(text_kb)
    );
    // The fix that gains most.
    let mut by_fix: Vec<(&str, u64)> = Vec::new();
    for v in verdicts {
        if let (Some(f), true) = (&v.fix, v.gain_kb > 0) {
            match by_fix.iter_mut().find(|(g, _)| *g == f.as_str()) {
                Some(e) => e.1 += v.gain_kb,
                None => by_fix.push((f.as_str(), v.gain_kb)),
            }
        }
    }
    by_fix.sort_by_key(|e| std::cmp::Reverse(e.1));
    if let Some((fix, kb)) = by_fix.first() {
        s.push_str(&format!("; {} more with: {fix}", human_kb(*kb)));
    }
    if let Some(kb) = contpte_share_kb(p, cont_pte, pmd) {
        s.push_str(&format!(
            "; {} of its page cache is in folios mapped with contiguous PTEs ({}% of the text, the kernel's own share)",
            human_kb(kb),
            (kb * 100).checked_div(text_kb).unwrap_or(0)
        ));
    }
    s
}

/// kB of the text's page cache in folios from the contpte block size to
/// below the PMD size (arm64 maps them with contiguous-PTE entries), over
/// the mappings whose cache was read; `None` without contpte blocks or
/// when there is none. Pure.
fn contpte_share_kb(p: &ProcessFacts, cont_pte: Option<u64>, pmd: u64) -> Option<u64> {
    let block = cont_pte.filter(|&b| b < pmd)?;
    let kb: u64 = p
        .mappings
        .iter()
        .filter_map(|m| m.cache.as_ref()?.as_ref().ok())
        .map(|c| inspect::contpte_kb(&c.folios_kb, block / 1024, pmd / 1024))
        .sum();
    (kb > 0).then_some(kb)
}

/// The layout of a text mapping at `start` from file `offset`, given the
/// file's executable `check` segments as (p_offset, p_filesz, p_vaddr,
/// p_align), for a kernel with `pmd`-byte PMDs and `page`-byte pages (the
/// kernel maps a segment from its offset rounded down to a page: with 16
/// KiB pages lld's text at offset 0x3000 is mapped from offset 0). Pure.
pub fn layout_of(start: u64, offset: u64, segments: &[(u64, u64, u64, u64)], pmd: u64, page: u64) -> Layout {
    if geometry::congruent(start, offset, pmd) {
        return Layout::Congruent;
    }
    let seg = segments.iter().find(|(o, sz, _, _)| {
        let first = geometry::align_down(*o, page);
        offset >= first && offset < o + sz
    });
    match seg {
        Some(&(o, _, v, a)) => {
            let skew = geometry::skew(v, o, pmd);
            if skew != 0 {
                Layout::Skewed { skew }
            } else {
                Layout::BaseBreaks {
                    base: start.wrapping_sub(offset).wrapping_sub(v.wrapping_sub(o)),
                    p_align: a,
                }
            }
        }
        None => Layout::NotCongruent {
            why: "no PT_LOAD segment covers it".into(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::explain::{report, CacheFacts, FsFacts, LoaderFacts, UnitFacts};

    const M: u64 = 2 << 20;

    fn map(start: u64, len: u64) -> MappingFacts {
        MappingFacts {
            start,
            end: start + len,
            offset: 0,
            path: "/usr/bin/x".into(),
            layout: Some(Layout::Congruent),
            fs: Some(FsFacts {
                name: "ext4".into(),
                pmd_folios: Some(true),
                collapse_in_place: None,
            }),
            cache: Some(Ok(CacheFacts {
                windows: len / M,
                unit_windows: len / M,
                ..Default::default()
            })),
            ..Default::default()
        }
    }

    fn proc1(m: MappingFacts) -> ProcessFacts {
        ProcessFacts {
            pid: 42,
            comm: "x".into(),
            thp_disabled: Some(false),
            mappings: vec![m],
            ..Default::default()
        }
    }

    fn madvise() -> SystemFacts {
        SystemFacts {
            pmd_size: M,
            unit: M,
            unit_kind: crate::elf::HugeUnit::Pmd,
            thp_enabled: Some(ThpMode::Madvise),
            ..Default::default()
        }
    }

    fn why(sys: &SystemFacts, p: &ProcessFacts) -> Verdict {
        decide(sys, p, &p.mappings[0])
    }

    #[test]
    fn pmd_mapped_is_ok_and_small_mappings_have_no_window() {
        let mut m = map(0x40_0000, 4 * M);
        m.unit_mapped_kb = 8192;
        assert_eq!(why(&madvise(), &proc1(m)).reason, Reason::Ok);
        let m = map(0x40_1000, M);
        let v = why(&madvise(), &proc1(m));
        assert_eq!((v.reason, v.fix), (Reason::NoWholeWindow, None));
    }

    #[test]
    fn with_64k_pages_windows_are_contpte_blocks() {
        // 64 KiB pages: the 512 MiB PMD is out of reach; the 2 MiB contpte
        // block is the unit the windows and the mapped kB are counted in.
        let sys = SystemFacts {
            pmd_size: 256 * M,
            unit: M,
            unit_kind: crate::elf::HugeUnit::Contpte,
            thp_enabled: Some(ThpMode::Always),
            ..Default::default()
        };
        let mut m = map(0x4000_0000, 4 * M);
        m.unit_mapped_kb = 4 * M / 1024;
        let v = why(&sys, &proc1(m.clone()));
        assert_eq!(v.reason, Reason::Ok);
        assert!(
            v.evidence.contains("4 whole 2 MiB windows are contpte-mapped"),
            "{}",
            v.evidence
        );
        m.unit_mapped_kb = 0;
        assert_ne!(why(&sys, &proc1(m)).reason, Reason::NoWholeWindow);
    }

    #[test]
    fn reasons_come_in_the_kernels_order() {
        // Everything wrong at once: the process wins, then the VMA, then the layout;
        // THP never does not stop file text from being PMD-mapped, only copies.
        let mut m = map(0x40_0000, 4 * M);
        m.nohugepage = true;
        m.layout = Some(Layout::Skewed { skew: 0x1000 });
        let mut p = proc1(m);
        p.thp_disabled = Some(true);
        let never = SystemFacts {
            pmd_size: M,
            unit: M,
            unit_kind: crate::elf::HugeUnit::Pmd,
            thp_enabled: Some(ThpMode::Never),
            ..Default::default()
        };
        assert_eq!(why(&never, &p).reason, Reason::ThpDisabledProcess);
        let mut copy = p.clone();
        copy.mappings[0].copied = true;
        assert_eq!(why(&never, &copy).reason, Reason::ThpNever);
        let v = why(&madvise(), &p);
        assert_eq!(v.reason, Reason::ThpDisabledProcess);
        assert!(v.evidence.contains("THP_enabled: 0"), "{}", v.evidence);
        p.thp_disabled = Some(false);
        let v = why(&madvise(), &p);
        assert_eq!(v.reason, Reason::MadvNohugepage);
        assert_eq!(v.gain_kb, 8192);
        p.mappings[0].nohugepage = false;
        let v = why(&madvise(), &p);
        assert_eq!(
            (v.reason, v.fix.as_deref()),
            (Reason::LayoutSkewed, Some("hugetext align /usr/bin/x"))
        );
    }

    #[test]
    fn base_breaking_congruence_shows_the_base() {
        let l = layout_of(0x5555_5561_1000, 0x1000, &[(0x1000, 8 * M, 0x1000, 0x1000)], M, 0x1000);
        assert_eq!(
            l,
            Layout::BaseBreaks {
                base: 0x5555_5561_0000,
                p_align: 0x1000
            }
        );
        let mut m = map(0x5555_5561_1000, 8 * M);
        m.offset = 0x1000;
        m.layout = Some(l);
        let v = why(&madvise(), &proc1(m));
        assert_eq!(v.reason, Reason::BaseUnaligned);
        assert!(v.evidence.contains("0x555555610000"), "{}", v.evidence);
        assert_eq!(v.fix.as_deref(), Some("hugetext align /usr/bin/x"));
        assert_eq!(
            layout_of(0x20_2000, 0x1000, &[(0x1000, 8 * M, 0x2000, 0x1000)], M, 0x1000),
            Layout::Skewed { skew: 0x1000 }
        );
        assert_eq!(layout_of(0x40_0000, 0, &[], M, 0x1000), Layout::Congruent);
        // aarch64 lld on a 16 KiB-page kernel (32 MiB PMDs): the text at
        // offset 0x3000, address 0x13000 is mapped from offset 0 at base +
        // 0x10000; 64 KiB off the PMD grid whatever the base.
        let l = layout_of(
            0x5555_5601_0000,
            0,
            &[(0x3000, 70 * M, 0x13000, 0x10000)],
            32 * M,
            0x4000,
        );
        assert_eq!(l, Layout::Skewed { skew: 0x10000 });
    }

    #[test]
    fn filesystem_then_page_cache_then_mapping() {
        let mut m = map(0x40_0000, 4 * M);
        m.fs = Some(FsFacts {
            name: "btrfs".into(),
            pmd_folios: Some(false),
            collapse_in_place: None,
        });
        let v = why(&madvise(), &proc1(m.clone()));
        assert_eq!(v.reason, Reason::FsNoLargeFolios);
        assert!(v.evidence.contains("btrfs") && v.fix.unwrap().contains("hugetext run --strategy copy"));
        m.fs = Some(FsFacts {
            name: "tmpfs".into(),
            pmd_folios: Some(false),
            collapse_in_place: None,
        });
        assert!(why(&madvise(), &proc1(m.clone())).evidence.contains("tmpfs"));

        m.fs.as_mut().unwrap().pmd_folios = Some(true);
        m.cache = Some(Ok(CacheFacts {
            windows: 2,
            unit_windows: 0,
            folios_kb: [(4, 8192)].into_iter().collect(),
            blockers: vec![ProcRef {
                pid: 42,
                comm: "x".into(),
            }],
        }));
        let v = why(&madvise(), &proc1(m.clone()));
        assert_eq!(v.reason, Reason::CacheSmallFolios);
        assert!(v.evidence.contains("8192 kB in 4 kB folios"), "{}", v.evidence);
        let fix = v.fix.unwrap();
        assert!(fix.starts_with("hugetext warm /usr/bin/x after pid 42 (x)"), "{fix}");

        m.cache = Some(Ok(CacheFacts {
            windows: 2,
            unit_windows: 2,
            ..Default::default()
        }));
        let v = why(&madvise(), &proc1(m.clone()));
        assert_eq!(v.reason, Reason::MappedBeforeWarm);
        assert!(v.fix.unwrap().starts_with("restart"));

        let e = crate::Error::io(
            "/usr/bin/x",
            std::io::Error::from_raw_os_error(rustix::io::Errno::NOENT.raw_os_error()),
        );
        m.cache = Some(Err((&e).into()));
        let v = why(&madvise(), &proc1(m));
        assert_eq!((v.reason, v.fix), (Reason::Unknown, None));
        assert_eq!(v.evidence, format!("the page cache could not be read: {e}"));
    }

    #[test]
    fn copies_and_summary() {
        let mut m = map(0x40_0000, 4 * M);
        m.copied = true;
        m.layout = None;
        m.unit_mapped_kb = 8192;
        assert_eq!(why(&madvise(), &proc1(m.clone())).reason, Reason::Ok);
        m.unit_mapped_kb = 0;
        assert_eq!(why(&madvise(), &proc1(m)).reason, Reason::CopyNotHuge);

        let mut a = map(0x40_0000, 4 * M);
        a.unit_mapped_kb = 4096;
        a.cache = Some(Ok(CacheFacts {
            windows: 4,
            unit_windows: 2,
            ..Default::default()
        }));
        let p = proc1(a);
        let r = report(&madvise(), std::slice::from_ref(&p));
        assert_eq!(
            r.processes[0].summary,
            "pid 42 (x): 50% of 8 MiB text PMD-mapped; 4 MiB more with: hugetext warm /usr/bin/x"
        );
        let j = serde_json::to_value(&r).unwrap();
        assert_eq!(j["processes"][0]["mappings"][0]["reason"], "cache-small-folios");
        assert_eq!(j["processes"][0]["mappings"][0]["backing"], "file");
    }

    #[test]
    fn arm64_contpte_share_and_madv_hugepage_readahead_are_said() {
        let mut a = map(0x40_0000, 4 * M);
        a.cache = Some(Ok(CacheFacts {
            windows: 4,
            unit_windows: 0,
            folios_kb: [(4, 1024), (64, 2048), (1024, 1024)].into_iter().collect(),
            ..Default::default()
        }));
        let p = proc1(a.clone());
        // x86-64: no contpte blocks, nothing said.
        assert!(!report(&madvise(), std::slice::from_ref(&p)).processes[0]
            .summary
            .contains("contiguous"));
        let arm = SystemFacts {
            cont_pte: Some(64 * 1024),
            ..madvise()
        };
        let s = &report(&arm, std::slice::from_ref(&p)).processes[0].summary;
        assert!(
            s.ends_with("; 3 MiB of its page cache is in folios mapped with contiguous PTEs (37% of the text, the kernel's own share)"),
            "{s}"
        );
        assert!(system_notes(&arm)[0].starts_with("arm64: text in page-cache folios of 64 KiB or more"));
        // A contpte block as large as the PMD (16 and 64 KiB pages, 2 MiB
        // blocks under 32 and 512 MiB PMDs are not): no share below the PMD.
        let big = SystemFacts {
            cont_pte: Some(M),
            ..madvise()
        };
        assert!(system_notes(&big).is_empty());
        // MADV_HUGEPAGE on a filesystem with PMD folios: new reads come huge.
        a.hugepage = true;
        a.fs = Some(FsFacts {
            name: "xfs".into(),
            pmd_folios: Some(true),
            collapse_in_place: Some(false),
        });
        let v = why(&madvise(), &proc1(a.clone()));
        assert_eq!(v.reason, Reason::CacheSmallFolios);
        assert!(
            v.evidence
                .contains("MADV_HUGEPAGE, so what its faults read from disk comes in PMD-size folios"),
            "{}",
            v.evidence
        );
        a.hugepage = false;
        assert!(!why(&madvise(), &proc1(a)).evidence.contains("MADV_HUGEPAGE"));
    }

    #[test]
    fn systemd_memory_thp_is_named_with_its_fix() {
        let unit = |t: &str| UnitFacts {
            name: "db.service".into(),
            memory_thp: Some(t.into()),
        };
        // MemoryTHP=disable: THP_enabled: 0, and the unit is the evidence.
        let mut p = proc1(map(0x40_0000, 4 * M));
        p.thp_disabled = Some(true);
        p.unit = Some(unit("disable"));
        let v = why(&madvise(), &p);
        assert_eq!(v.reason, Reason::ThpDisabledProcess);
        assert!(v.evidence.contains("THP_enabled: 0") && v.evidence.contains("db.service has MemoryTHP=disable"));
        assert_eq!(
            v.fix.as_deref(),
            Some("set MemoryTHP=inherit for db.service (systemctl edit db.service), then systemctl restart db.service")
        );
        // MemoryTHP=madvise: no reason for file text (the kernel PMD-maps its folios).
        p.thp_disabled = Some(false);
        p.unit = Some(unit("madvise"));
        assert_eq!(why(&madvise(), &p).reason, Reason::MappedBeforeWarm);
        // Other settings, or no systemd: the process-level facts decide.
        p.unit = Some(unit("inherit"));
        assert_eq!(why(&madvise(), &p).reason, Reason::MappedBeforeWarm);
        p.thp_disabled = Some(true);
        let v = why(&madvise(), &p);
        assert!(v.fix.unwrap().starts_with("restart it without PR_SET_THP_DISABLE"));
    }

    #[test]
    fn glibc_elf_thp_tunable_in_base_unaligned_advice() {
        assert_eq!(
            tunable("glibc.malloc.hugetlb=1:glibc.elf.thp=1", "glibc.elf.thp"),
            Some("1")
        );
        assert_eq!(tunable("glibc.elf.thpx=1", "glibc.elf.thp"), None);
        let lib = "/usr/lib/libbig.so";
        let mut m = map(0x7f00_0001_1000, 8 * M);
        m.path = lib.into();
        m.offset = 0x1000;
        m.layout = Some(Layout::BaseBreaks {
            base: 0x7f00_0001_0000,
            p_align: 0x1000,
        });
        let mut p = proc1(m);
        p.exe = Some("/usr/bin/x".into());
        let always = SystemFacts {
            pmd_size: M,
            unit: M,
            unit_kind: crate::elf::HugeUnit::Pmd,
            thp_enabled: Some(ThpMode::Always),
            ..Default::default()
        };
        // A loader without the tunable (or unknown): align.
        let fix = |sys: &SystemFacts, p: &ProcessFacts| why(sys, p).fix.unwrap();
        assert_eq!(fix(&always, &p), format!("hugetext align {lib}"));
        p.loader = Some(LoaderFacts {
            path: "/lib64/ld-linux-x86-64.so.2".into(),
            elf_thp: Some(true),
        });
        // It knows it, THP always, not set: the tunable is the first fix.
        let v = why(&always, &p);
        assert_eq!(v.reason, Reason::BaseUnaligned);
        assert_eq!(
            v.fix.as_deref(),
            Some("restart it with GLIBC_TUNABLES=glibc.elf.thp=1 (the loader then maps it 2 MiB-aligned), or hugetext align /usr/lib/libbig.so")
        );
        // THP madvise: glibc would not align; say so, fix with align.
        let v = why(&madvise(), &p);
        assert!(
            v.evidence
                .contains("aligns only when THP enabled is `always` (here `madvise`)"),
            "{}",
            v.evidence
        );
        assert_eq!(v.fix.unwrap(), format!("hugetext align {lib}"));
        // Set, yet not aligned.
        p.glibc_tunables = Some("glibc.elf.thp=1".into());
        let v = why(&madvise(), &p);
        assert!(
            v.evidence.contains("GLIBC_TUNABLES has glibc.elf.thp=1, but"),
            "{}",
            v.evidence
        );
        // The executable is mapped by the kernel: the tunable does not apply.
        p.glibc_tunables = None;
        p.exe = Some(lib.into());
        assert_eq!(fix(&always, &p), format!("hugetext align {lib}"));
    }

    #[test]
    fn collapse_in_place_and_khugepaged_change_the_advice() {
        let mut m = map(0x40_0000, 4 * M);
        m.cache = Some(Ok(CacheFacts {
            windows: 2,
            unit_windows: 0,
            folios_kb: [(4, 8192)].into_iter().collect(),
            blockers: vec![ProcRef {
                pid: 42,
                comm: "x".into(),
            }],
        }));
        let with = |p: &ProcessFacts, v: Option<bool>| {
            let mut p = p.clone();
            p.mappings[0].fs.as_mut().unwrap().collapse_in_place = v;
            p
        };
        let p = proc1(m);
        let k = Some(Khugepaged {
            scan_sleep_millisecs: 10000,
            pages_to_scan: 4096,
        });
        let always = SystemFacts {
            thp_enabled: Some(ThpMode::Always),
            khugepaged: k,
            ..madvise()
        };
        // Collapses in place: warm collapses while the process runs.
        let v = why(&madvise(), &with(&p, Some(true)));
        assert_eq!(v.reason, Reason::CacheSmallFolios);
        assert_eq!(
            v.fix.as_deref(),
            Some("hugetext warm /usr/bin/x (MADV_COLLAPSE collapses the small folios in place while pid 42 (x) run)")
        );
        assert!(!v.evidence.contains("khugepaged"), "{}", v.evidence);
        // Under THP always khugepaged does it by itself, at its pace.
        let v = why(&always, &with(&p, Some(true)));
        assert!(
            v.evidence.contains(
                "khugepaged collapses them in place by itself (every scan_sleep_millisecs=10000 ms it scans pages_to_scan=4096 pages), or now: hugetext warm /usr/bin/x"
            ),
            "{}",
            v.evidence
        );
        // MADV_HUGEPAGE under madvise too; MADV_NOHUGEPAGE never.
        let mut hg = with(&p, Some(true));
        hg.mappings[0].hugepage = true;
        assert!(why(
            &SystemFacts {
                khugepaged: k,
                ..madvise()
            },
            &hg
        )
        .evidence
        .contains("khugepaged"));
        // Without: wait for the process to exit, and the evidence says why.
        let v = why(&always, &with(&p, Some(false)));
        assert!(v.fix.unwrap().contains("after pid 42 (x) exit"));
        assert!(
            v.evidence.contains("cannot collapse file text in place"),
            "{}",
            v.evidence
        );
        assert!(!v.evidence.contains("khugepaged"), "{}", v.evidence);
        let v = why(&always, &with(&p, None));
        assert!(!v.evidence.contains("in place"), "{}", v.evidence);
        // PMD folios mapped by PTEs: khugepaged can fix that in place only where collapse works.
        let mut p = p;
        p.mappings[0].cache = Some(Ok(CacheFacts {
            windows: 2,
            unit_windows: 2,
            ..Default::default()
        }));
        assert!(why(&always, &with(&p, Some(true))).fix.unwrap().contains("khugepaged"));
        assert!(!why(&always, &with(&p, Some(false))).fix.unwrap().contains("khugepaged"));
        assert!(!why(&madvise(), &with(&p, Some(true)))
            .fix
            .unwrap()
            .contains("khugepaged"));
    }

    #[test]
    fn thp_mode_serializes_as_the_kernels_word() {
        let json = |thp_enabled| {
            serde_json::to_value(SystemFacts {
                thp_enabled,
                ..madvise()
            })
            .unwrap()
        };
        assert_eq!(json(Some(ThpMode::Always))["thp_enabled"], "always");
        assert_eq!(json(Some(ThpMode::Madvise))["thp_enabled"], "madvise");
        assert_eq!(json(Some(ThpMode::Never))["thp_enabled"], "never");
        assert!(json(None)["thp_enabled"].is_null());
    }

    #[test]
    fn vm_note_explains_itlb_multihit() {
        assert!(system_notes(&madvise()).is_empty());
        let sys = SystemFacts {
            pmd_size: M,
            unit: M,
            unit_kind: crate::elf::HugeUnit::Pmd,
            hypervisor: true,
            itlb_multihit: Some("Not affected".into()),
            ..madvise()
        };
        let n = system_notes(&sys);
        assert!(n[0].contains("virtual machine") && n[0].contains("itlb_multihit: Not affected"));
    }
}
