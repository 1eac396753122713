//! Sizes for people: the one byte formatter of reports and messages.

/// `12.3 MiB`-style size: GiB, MiB or KiB with one decimal, else bytes.
pub fn human(bytes: u64) -> String {
    let b = bytes as f64;
    if b >= (1u64 << 30) as f64 {
        format!("{:.1} GiB", b / (1u64 << 30) as f64)
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.1} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.1} KiB", b / 1024.0)
    } else {
        format!("{bytes} B")
    }
}

/// Bytes as MiB with one decimal, whatever the size (`0.5 MiB`, `2048.0
/// MiB`): for columns that compare sizes.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 << 19), "1.5 MiB");
        assert_eq!(human(5 << 30), "5.0 GiB");
        assert_eq!(human(2048), "2.0 KiB");
        assert_eq!(mib(1 << 19), "0.5 MiB");
        assert_eq!(mib(2 << 30), "2048.0 MiB");
    }
}
