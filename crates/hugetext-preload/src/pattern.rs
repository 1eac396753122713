//! A tiny allocation-free regular-expression matcher for `HUGETEXT_INCLUDE`
//! and `HUGETEXT_EXCLUDE` (the preload may not pull in a regex engine).
//!
//! Supported (a subset of POSIX ERE / Rust `regex` syntax, same meaning):
//! literals, `.`, bracket classes `[a-z_]` / `[^/]`, escapes `\.` `\d` `\w`
//! `\s`, the quantifiers `*` `+` `?`, anchors `^` (start) and `$` (end), and
//! top-level alternation `a|b`. No groups or counted repetition; `hugetext
//! run` rejects those before it starts the program. Matching is unanchored
//! (a search), like `regex::Regex::is_match`.

/// Does `re` match anywhere in `text`?
pub fn is_match(re: &[u8], text: &[u8]) -> bool {
    let mut rest = re;
    loop {
        let cut = alt_end(rest);
        if match_alt(&rest[..cut], text) {
            return true;
        }
        if cut >= rest.len() {
            return false;
        }
        rest = &rest[cut + 1..];
    }
}

/// Index of the first top-level `|` in `re` (or its length).
fn alt_end(re: &[u8]) -> usize {
    let mut i = 0;
    while i < re.len() {
        match re[i] {
            b'|' => return i,
            _ => i += atom_len(&re[i..]),
        }
    }
    re.len()
}

fn match_alt(re: &[u8], text: &[u8]) -> bool {
    if let Some(r) = re.strip_prefix(b"^") {
        return match_here(r, text);
    }
    (0..=text.len()).any(|i| match_here(re, &text[i..]))
}

/// Length in bytes of the atom at the start of `re` (at least 1).
fn atom_len(re: &[u8]) -> usize {
    match re.first() {
        Some(b'\\') => re.len().min(2),
        Some(b'[') => {
            let mut i = 1;
            if re.get(i) == Some(&b'^') {
                i += 1;
            }
            if re.get(i) == Some(&b']') {
                i += 1;
            }
            while i < re.len() {
                match re[i] {
                    b'\\' => i += 2,
                    b']' => return i + 1,
                    _ => i += 1,
                }
            }
            re.len()
        }
        _ => 1,
    }
}

fn match_here(re: &[u8], text: &[u8]) -> bool {
    if re.is_empty() {
        return true;
    }
    if re == b"$" {
        return text.is_empty();
    }
    let n = atom_len(re);
    let atom = &re[..n];
    let rest = &re[n..];
    match rest.first() {
        Some(b'*') => match_repeat(atom, &rest[1..], text, 0),
        Some(b'+') => match_repeat(atom, &rest[1..], text, 1),
        Some(b'?') => {
            (!text.is_empty() && atom_matches(atom, text[0]) && match_here(&rest[1..], &text[1..]))
                || match_here(&rest[1..], text)
        }
        _ => !text.is_empty() && atom_matches(atom, text[0]) && match_here(rest, &text[1..]),
    }
}

/// Greedy repetition of `atom`, at least `min` times, then `rest`.
fn match_repeat(atom: &[u8], rest: &[u8], text: &[u8], min: usize) -> bool {
    let mut n = 0;
    while n < text.len() && atom_matches(atom, text[n]) {
        n += 1;
    }
    loop {
        if n < min {
            return false;
        }
        if match_here(rest, &text[n..]) {
            return true;
        }
        if n == 0 {
            return false;
        }
        n -= 1;
    }
}

fn escape_matches(e: u8, c: u8) -> bool {
    match e {
        b'd' => c.is_ascii_digit(),
        b'w' => c.is_ascii_alphanumeric() || c == b'_',
        b's' => c.is_ascii_whitespace(),
        _ => c == e,
    }
}

fn atom_matches(atom: &[u8], c: u8) -> bool {
    match atom {
        [b'.'] => true,
        [b'\\', e] => escape_matches(*e, c),
        [b'[', body @ ..] => class_matches(body, c),
        [a] => *a == c,
        _ => false,
    }
}

/// `body` is the class after `[`, including the closing `]` if present.
fn class_matches(body: &[u8], c: u8) -> bool {
    let (neg, mut body) = match body.strip_prefix(b"^") {
        Some(b) => (true, b),
        None => (false, body),
    };
    let body_end = if body.last() == Some(&b']') {
        body.len() - 1
    } else {
        body.len()
    };
    body = &body[..body_end];
    let mut hit = false;
    let mut i = 0;
    while i < body.len() {
        let (lo, step) = if body[i] == b'\\' && i + 1 < body.len() {
            if matches!(body[i + 1], b'd' | b'w' | b's') {
                hit |= escape_matches(body[i + 1], c);
                i += 2;
                continue;
            }
            (body[i + 1], 2)
        } else {
            (body[i], 1)
        };
        i += step;
        if body.get(i) == Some(&b'-') && i + 1 < body.len() {
            let hi = if body[i + 1] == b'\\' {
                body.get(i + 2).copied().unwrap_or(b'\\')
            } else {
                body[i + 1]
            };
            i += if body[i + 1] == b'\\' { 3 } else { 2 };
            hit |= lo <= c && c <= hi;
        } else {
            hit |= lo == c;
        }
    }
    hit != neg
}

#[cfg(test)]
mod tests {
    use super::is_match;

    fn m(re: &str, t: &str) -> bool {
        is_match(re.as_bytes(), t.as_bytes())
    }

    #[test]
    fn subset_semantics() {
        assert!(m("libbig", "/x/libbig.so"));
        assert!(!m("^libbig", "/x/libbig.so"));
        assert!(m("/libbig\\.so$", "/x/libbig.so"));
        assert!(!m("\\.so$", "/x/libbig.so.6"));
        assert!(m("libc\\.so|libbig", "/x/libbig.so"));
        assert!(m("libc\\.so|libbig", "/lib/libc.so.6"));
        assert!(!m("libc\\.so|libbig", "/lib/libm.so.6"));
        assert!(m("lib[a-c]+\\.so", "/lib/libabc.so"));
        assert!(!m("lib[^a-z]", "/x/libabc.so"));
        assert!(m("lib[^a-z]", "/lib/lib_x"));
        assert!(m("^/usr/.*/libc", "/usr/lib/x86_64-linux-gnu/libc.so.6"));
        assert!(m("so\\.\\d$", "/lib/libc.so.6"));
        assert!(m("a?b", "b"));
        assert!(m("^$", ""));
        assert!(!m("^a+$", ""));
        assert!(m("[]x]", "]"));
        // Malformed patterns never panic.
        for re in ["[", "\\", "[a-", "*", "+?", "[^", "a|", "|"] {
            let _ = m(re, "/some/path");
        }
    }
}
