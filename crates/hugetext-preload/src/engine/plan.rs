//! Which routes a chunk of windows takes: pure functions of the facts
//! gathered first.

use super::{CopyPlan, Facts, Plan};
use crate::config::{Order, Strategy};

/// Choose the routes for a chunk: a pure function of the facts.
pub(super) fn plan(f: &Facts) -> Plan {
    use Strategy::*;
    if f.all_huge {
        return Plan {
            file: false,
            collapse: false,
            collapse_first: false,
            not_congruent: false,
            cont_note: None,
            shmem: false,
            copy: CopyPlan::No,
        };
    }
    let s = f.strategy;
    let file_asked = f.congruent && matches!(s, Auto | File);
    let collapse_asked = f.congruent && !f.collapse_refused && matches!(s, Auto | Collapse);
    // Contpte unit: MADV_COLLAPSE builds PMD-size folios only (512 MiB
    // there); evict + refill does fill 2 MiB folios (the MADV_HUGEPAGE
    // readahead order is capped at 2 MiB, mm/filemap.c), but only PFNs
    // show that it did.
    let file = file_asked && (!f.contpte || f.sees_folios);
    let collapse = collapse_asked && !f.contpte;
    let cont_note = match (file_asked && !file, collapse_asked && !collapse) {
        (true, true) => Some(CONT_NO_FILE_NO_COLLAPSE),
        (true, false) => Some(CONT_NO_FILE),
        (false, true) => Some(CONT_NO_COLLAPSE),
        (false, false) => None,
    };
    Plan {
        file,
        collapse,
        collapse_first: file && collapse && f.order == Order::Collapse,
        not_congruent: !f.congruent && matches!(s, File | Collapse | Shmem),
        cont_note,
        // The store holds 2 MiB shmem folios: PMD-size only, so never the
        // contpte block.
        shmem: f.congruent && !f.contpte && matches!(s, Auto | Shmem),
        copy: match s {
            File | Collapse | Shmem => CopyPlan::No,
            Auto | Copy if f.gdb => {
                CopyPlan::Skip("gdb-friendly mode (HUGETEXT_GDB=1): not copying text to anonymous memory")
            }
            Auto | Copy if f.no_anon_thp && f.contpte => CopyPlan::Skip(CONT_ANON_NEVER),
            Auto | Copy if f.no_anon_thp => {
                CopyPlan::Skip("copy route skipped: transparent_hugepage is `never`, anonymous memory cannot be huge")
            }
            Auto | Copy => CopyPlan::Yes,
        },
    }
}

/// The contpte unit's notes (arm64, 64 KiB pages).
const CONT_NO_COLLAPSE: &str = "collapse route skipped: MADV_COLLAPSE builds only PMD-size folios (512 MiB with 64 KiB pages), never the 2 MiB contiguous-PTE block";
const CONT_NO_FILE: &str = "file route skipped: evict + MADV_HUGEPAGE refill reads 2 MiB folios here, but without PFN access (CAP_SYS_ADMIN) nothing shows a process the folio size behind its file text, so it could not be verified";
const CONT_NO_FILE_NO_COLLAPSE: &str = "file and collapse routes skipped: MADV_COLLAPSE builds only PMD-size folios (512 MiB with 64 KiB pages), never the 2 MiB contiguous-PTE block; evict + MADV_HUGEPAGE refill reads 2 MiB folios, but without PFN access (CAP_SYS_ADMIN) nothing shows a process the folio size behind its file text, so it could not be verified";
const CONT_ANON_NEVER: &str = "copy route skipped: 2 MiB anonymous folios are off (/sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled is `never`, or `inherit` with transparent_hugepage `never`); as root: echo madvise > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled";

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(strategy: Strategy) -> Facts {
        Facts {
            strategy,
            order: Order::File,
            congruent: true,
            all_huge: false,
            collapse_refused: false,
            gdb: false,
            no_anon_thp: false,
            contpte: false,
            sees_folios: true,
        }
    }

    const NOTHING: Plan = Plan {
        file: false,
        collapse: false,
        collapse_first: false,
        not_congruent: false,
        cont_note: None,
        shmem: false,
        copy: CopyPlan::No,
    };

    #[test]
    fn shmem_comes_after_the_zero_copy_routes_and_before_copy() {
        let p = plan(&facts(Strategy::Auto));
        assert!(p.file && p.collapse && p.shmem && p.copy == CopyPlan::Yes);
        let only = plan(&facts(Strategy::Shmem));
        assert_eq!(only, Plan { shmem: true, ..NOTHING });
        // Not congruent: the store copy cannot be PMD-mapped there either.
        let f = Facts {
            congruent: false,
            ..facts(Strategy::Shmem)
        };
        assert_eq!(
            plan(&f),
            Plan {
                not_congruent: true,
                ..NOTHING
            }
        );
        let f = Facts {
            contpte: true,
            ..facts(Strategy::Auto)
        };
        assert!(!plan(&f).shmem);
    }

    #[test]
    fn auto_tries_file_collapse_shmem_then_copy_on_congruent_text() {
        let p = plan(&facts(Strategy::Auto));
        assert_eq!(
            p,
            Plan {
                file: true,
                collapse: true,
                collapse_first: false,
                not_congruent: false,
                cont_note: None,
                shmem: true,
                copy: CopyPlan::Yes
            }
        );
    }

    #[test]
    fn collapse_goes_first_only_where_both_zero_copy_routes_run() {
        let f = Facts {
            order: Order::Collapse,
            ..facts(Strategy::Auto)
        };
        let p = plan(&f);
        assert!(p.file && p.collapse && p.collapse_first);
        assert_eq!(p.copy, CopyPlan::Yes);
        // One zero-copy route only: nothing to order.
        for s in [Strategy::File, Strategy::Collapse, Strategy::Copy] {
            assert!(!plan(&Facts { strategy: s, ..f }).collapse_first, "{s:?}");
        }
        // A refused collapse, text not congruent, or all huge: no collapse.
        for g in [
            Facts {
                collapse_refused: true,
                ..f
            },
            Facts { congruent: false, ..f },
            Facts { all_huge: true, ..f },
        ] {
            assert!(!plan(&g).collapse_first);
        }
    }

    #[test]
    fn only_copy_helps_text_that_is_not_congruent() {
        let f = Facts {
            congruent: false,
            ..facts(Strategy::Auto)
        };
        assert_eq!(
            plan(&f),
            Plan {
                copy: CopyPlan::Yes,
                ..NOTHING
            }
        );
        for s in [Strategy::File, Strategy::Collapse] {
            let f = Facts { strategy: s, ..f };
            assert_eq!(
                plan(&f),
                Plan {
                    not_congruent: true,
                    ..NOTHING
                },
                "{s:?}"
            );
        }
        let f = Facts {
            strategy: Strategy::Copy,
            ..f
        };
        assert_eq!(plan(&f).copy, CopyPlan::Yes);
    }

    #[test]
    fn a_refused_collapse_is_not_tried_again() {
        // Kernels without CONFIG_READ_ONLY_THP_FOR_FS, or before 6.1.
        let f = Facts {
            collapse_refused: true,
            ..facts(Strategy::Auto)
        };
        assert_eq!(
            plan(&f),
            Plan {
                file: true,
                shmem: true,
                copy: CopyPlan::Yes,
                ..NOTHING
            }
        );
        let f = Facts {
            strategy: Strategy::Collapse,
            ..f
        };
        assert_eq!(plan(&f), NOTHING);
        let f = Facts {
            collapse_refused: false,
            ..f
        };
        assert_eq!(
            plan(&f),
            Plan {
                collapse: true,
                ..NOTHING
            }
        );
    }

    #[test]
    fn already_pmd_mapped_needs_no_route() {
        for s in Strategy::ALL {
            for congruent in [true, false] {
                let f = Facts {
                    all_huge: true,
                    congruent,
                    ..facts(s)
                };
                assert_eq!(plan(&f), NOTHING, "{s:?} congruent={congruent}");
            }
        }
    }

    #[test]
    fn copy_is_skipped_with_a_reason() {
        let gdb = Facts {
            gdb: true,
            ..facts(Strategy::Copy)
        };
        assert!(matches!(plan(&gdb).copy, CopyPlan::Skip(m) if m.contains("HUGETEXT_GDB")));
        assert!(!plan(&gdb).file && !plan(&gdb).collapse);
        let never = Facts {
            no_anon_thp: true,
            ..facts(Strategy::Auto)
        };
        let p = plan(&never);
        assert!(p.file && p.collapse);
        assert!(matches!(p.copy, CopyPlan::Skip(m) if m.contains("`never`")));
        // The file and collapse strategies never copy, so say nothing.
        let f = Facts {
            gdb: true,
            no_anon_thp: true,
            ..facts(Strategy::File)
        };
        assert_eq!(plan(&f).copy, CopyPlan::No);
    }

    #[test]
    fn contpte_unit_routes() {
        let root = Facts {
            contpte: true,
            ..facts(Strategy::Auto)
        };
        // Evict + refill reaches 2 MiB folios; collapse never does.
        let p = plan(&root);
        assert!(p.file && !p.collapse && !p.collapse_first);
        assert_eq!(p.cont_note, Some(CONT_NO_COLLAPSE));
        assert_eq!(p.copy, CopyPlan::Yes);
        // Without PFN access the file route cannot be verified.
        let user = Facts {
            sees_folios: false,
            ..root
        };
        let p = plan(&user);
        assert!(!p.file && !p.collapse);
        assert_eq!(p.cont_note, Some(CONT_NO_FILE_NO_COLLAPSE));
        assert_eq!(p.copy, CopyPlan::Yes);
        let p = plan(&Facts {
            strategy: Strategy::File,
            ..user
        });
        assert_eq!((p.file, p.cont_note, p.copy), (false, Some(CONT_NO_FILE), CopyPlan::No));
        // Not congruent: nothing to say about the zero-copy routes.
        assert_eq!(
            plan(&Facts {
                congruent: false,
                ..user
            })
            .cont_note,
            None
        );
        // The 2 MiB mTHP size off: say how to turn it on.
        let never = Facts {
            no_anon_thp: true,
            ..root
        };
        assert!(
            matches!(plan(&never).copy, CopyPlan::Skip(m) if m.contains("echo madvise > /sys/kernel/mm/transparent_hugepage/hugepages-2048kB/enabled"))
        );
        // The PMD unit is unchanged.
        assert_eq!(plan(&facts(Strategy::Auto)).cont_note, None);
    }
}
