//! The rewriter end to end on arbitrary ELF headers: `align_file` must
//! either refuse with an error/reason or produce a file that passes its own
//! verification (a verification failure is a rewriter bug, and panics here).
//!
//! Input: 4 bytes little-endian "file size" hint, then the file's first
//! bytes. The file is extended with zeros (sparse) to the hint, capped at
//! 8 MiB, so headers can describe segments with whole 2 MiB windows.
#![no_main]

use std::io::Write;

use hugetext::elf::{align_file, AlignOptions, AlignStatus};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 4 {
        return;
    }
    let hint = u32::from_le_bytes(data[..4].try_into().unwrap()) as u64;
    let body = &data[4..];
    let dir = tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .unwrap();
    let input = dir.path().join("in");
    let output = dir.path().join("out");
    {
        let mut f = std::fs::File::create(&input).unwrap();
        f.write_all(body).unwrap();
        let size = hint.min(8 << 20).max(body.len() as u64);
        f.set_len(size).unwrap();
    }
    let opts = AlignOptions {
        output: Some(output.clone()),
        dry_run: false,
        force: true,
    };
    match align_file(&input, &opts) {
        Ok(o) => {
            if o.status == AlignStatus::Rewritten {
                let after = o.after.expect("rewritten file was re-checked");
                assert_eq!(after.unit_mappable_bytes, o.before.unit_mappable_bytes_after_align);
            } else {
                assert!(!output.exists(), "nothing must be written for {:?}", o.status);
            }
        }
        Err(e) => {
            let msg = e.to_string();
            assert!(!msg.contains("failed verification"), "{msg}");
            assert!(!msg.contains('\n'), "multi-line error: {msg}");
            assert!(!output.exists(), "a failed align left {output:?}");
        }
    }
});
