//! The ELF header parser and the check/plan logic on arbitrary bytes:
//! must never panic, overflow or read out of bounds.
#![no_main]

use hugetext::elf::{check, layout::Model};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(model) = Model::parse(data) {
        let report = check::analyse(std::path::Path::new("fuzz"), &model);
        let _ = model.described_end();
        // The plan never moves anything backwards and never shrinks the file.
        let plan = &report.plan;
        for p in &model.phdrs {
            assert!(plan.map_offset(p.p_offset, p.p_filesz, Some(p.p_vaddr)) >= p.p_offset);
        }
        assert_eq!(plan.growth, plan.insertions.iter().map(|i| i.len).sum::<u64>());
    }
});
