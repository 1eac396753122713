//! Sizes for people: the one byte formatter of reports and messages; and
//! the JSON keys of quantities in the unit of huge text, with the names
//! they had before the unit (the PMD, or a contiguous-PTE block) was
//! named as the unit.

/// `12.3 MiB`-style size: GiB, MiB or KiB with one decimal, else bytes; a
/// whole number of its unit without the decimal (`2 MiB`, `64 KiB`, the
/// page and huge-unit sizes of messages).
pub fn human(bytes: u64) -> String {
    let (unit, name) = match bytes {
        b if b >= 1 << 30 => (1u64 << 30, "GiB"),
        b if b >= 1 << 20 => (1 << 20, "MiB"),
        b if b >= 1 << 10 => (1 << 10, "KiB"),
        _ => return format!("{bytes} B"),
    };
    if bytes % unit == 0 {
        format!("{} {name}", bytes / unit)
    } else {
        format!("{:.1} {name}", bytes as f64 / unit as f64)
    }
}

/// Bytes as MiB with one decimal, whatever the size (`0.5 MiB`, `2048.0
/// MiB`): for columns that compare sizes.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// JSON keys renamed from `pmd_*` to `unit_*` (new, old): they count
/// windows, folios or mappings of the unit of huge text, which is the
/// contiguous-PTE block, not the PMD, on arm64 with 64 KiB pages. Output
/// carries both names for one release (the old ones are deprecated).
pub const RENAMED_KEYS: &[(&str, &str)] = &[
    ("unit_windows", "pmd_windows"),
    ("unit_windows_huge", "pmd_windows_huge"),
    ("unit_windows_found", "pmd_windows_found"),
    ("unit_windows_restored", "pmd_windows_restored"),
    ("unit_mappable_bytes", "pmd_mappable_bytes"),
    ("unit_mappable_bytes_after_align", "pmd_mappable_bytes_after_align"),
    ("unit_folio_pct", "pmd_folio_pct"),
    ("unit_mapped_pct", "pmd_mapped_pct"),
    ("text_unit_pct", "text_pmd_pct"),
    ("unit_mapped_kb", "pmd_kb"),
    ("unit_folio_kb", "pmd_kb"),
    ("unit_size", "pmd_size"),
    ("unit_folio_windows", "pmd_folio_windows"),
];

/// Add the old name of every [`RENAMED_KEYS`] key found in `v`'s objects,
/// at any depth, with the same value (a key already present is left as
/// it is).
pub fn with_old_keys(mut v: serde_json::Value) -> serde_json::Value {
    add_old_keys(&mut v);
    v
}

fn add_old_keys(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(o) => {
            o.values_mut().for_each(add_old_keys);
            for (new, old) in RENAMED_KEYS {
                if let Some(x) = o.get(*new).cloned() {
                    o.entry(*old).or_insert(x);
                }
            }
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(add_old_keys),
        _ => {}
    }
}

/// Read JSON written with either name of a renamed key: in `v`'s top-level
/// object, each of `keys` (new names from [`RENAMED_KEYS`]) takes its old
/// name's value when the new name is absent, and the old name is dropped.
pub fn accept_old_keys(v: &mut serde_json::Value, keys: &[&str]) {
    let serde_json::Value::Object(o) = v else { return };
    for (new, old) in RENAMED_KEYS.iter().filter(|(n, _)| keys.contains(n)) {
        if let Some(x) = o.remove(*old) {
            o.entry(*new).or_insert(x);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 19), "1.5 MiB");
        assert_eq!(human(5 << 30), "5 GiB");
        assert_eq!(human(2048), "2 KiB");
        assert_eq!(human(2 << 20), "2 MiB");
        assert_eq!(human(64 << 10), "64 KiB");
        assert_eq!(human((2 << 20) + 1), "2.0 MiB");
        assert_eq!(mib(1 << 19), "0.5 MiB");
        assert_eq!(mib(2 << 30), "2048.0 MiB");
    }

    #[test]
    fn renamed_keys_both_ways() {
        use serde_json::json;
        let out = with_old_keys(json!({"files": [{"unit_windows": 3, "pmd_size": 7, "unit_size": 9}]}));
        assert_eq!(
            out,
            json!({"files": [{"unit_windows": 3, "pmd_windows": 3, "pmd_size": 7, "unit_size": 9}]})
        );
        let mut old = json!({"pmd_size": 4096, "pmd_windows": 1});
        accept_old_keys(&mut old, &["unit_size"]);
        assert_eq!(old, json!({"unit_size": 4096, "pmd_windows": 1}));
        let mut both = json!({"pmd_size": 1, "unit_size": 2});
        accept_old_keys(&mut both, &["unit_size"]);
        assert_eq!(both, json!({"unit_size": 2}));
    }
}
