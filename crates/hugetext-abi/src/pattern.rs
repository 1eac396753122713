//! The pattern language of `HUGETEXT_INCLUDE` and `HUGETEXT_EXCLUDE`: a
//! tiny allocation-free regular-expression matcher (the preload may not
//! pull in a regex engine) and the validator `hugetext run` applies before
//! it starts the program, one implementation of both.
//!
//! Supported (a subset of POSIX ERE / Rust `regex` syntax, same meaning):
//! literals, `.`, bracket classes `[a-z_]` / `[^/]`, escapes `\.` `\d` `\w`
//! `\s`, the quantifiers `*` `+` `?`, anchors `^` (start) and `$` (end), and
//! //! top-level alternation `a|b`. No groups or counted repetition: [`check`]
//! rejects those, and anything else the matcher would read differently
//! from `regex`. Matching is unanchored (a search), like
//! `regex::Regex::is_match`.

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

/// Why a pattern is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PatternError {
    /// Not a regular expression at all (what is wrong).
    Syntax(&'static str),
    /// A regular expression, but it uses this, which the matcher lacks.
    Unsupported(&'static str),
}

/// What the matcher supports, for messages.
pub const SUPPORTED: &str = "literals . [classes] \\d \\w \\s * + ? ^ $ and top-level |";

/// Check that `re` is in the language [`is_match`] implements, with the
/// meaning `regex` gives it: literals, `.`, bracket classes, the escapes
/// `\d \w \s` and escaped punctuation, `* + ?` after an atom, `^` at the
/// start and `$` at the end of an alternative, and top-level `|`.
pub fn check(re: &[u8]) -> Result<(), PatternError> {
    use PatternError::{Syntax, Unsupported};
    let mut i = 0;
    // Is there an atom before `i` that a quantifier may repeat?
    let mut atom = false;
    while i < re.len() {
        let c = re[i];
        match c {
            b'\\' => {
                check_escape(re.get(i + 1).copied())?;
                i += 2;
                atom = true;
                continue;
            }
            b'[' => {
                i += check_class(&re[i + 1..])? + 1;
                atom = true;
                continue;
            }
            b'*' | b'+' | b'?' if !atom => {
                return Err(match i.checked_sub(1).map(|p| re[p]) {
                    Some(b'*' | b'+' | b'?') => Unsupported("a repeated or lazy quantifier"),
                    _ => Syntax("a repetition operator with nothing to repeat"),
                })
            }
            b'*' | b'+' | b'?' => atom = false,
            b'(' | b')' => return Err(Unsupported("a group")),
            b'{' | b'}' => return Err(Unsupported("counted repetition {n,m}")),
            b'^' if i != 0 && re[i - 1] != b'|' => return Err(Unsupported("^ inside the pattern")),
            b'$' if i + 1 != re.len() && re[i + 1] != b'|' => return Err(Unsupported("$ inside the pattern")),
            b'^' | b'$' | b'|' => atom = false,
            b']' => atom = true,
            _ => atom = true,
        }
        i += 1;
    }
    Ok(())
}

fn check_escape(e: Option<u8>) -> Result<(), PatternError> {
    match e {
        None => Err(PatternError::Syntax("incomplete escape sequence")),
        Some(c) if c.is_ascii_punctuation() || matches!(c, b'd' | b'w' | b's') => Ok(()),
        Some(_) => Err(PatternError::Unsupported(
            "an escape other than \\d \\w \\s or escaped punctuation",
        )),
    }
}

/// Check the class whose body starts `body` (after `[`); returns its length
/// including the closing `]`.
fn check_class(body: &[u8]) -> Result<usize, PatternError> {
    use PatternError::{Syntax, Unsupported};
    let mut i = usize::from(body.first() == Some(&b'^'));
    if body.get(i) == Some(&b']') {
        i += 1;
    }
    if body.get(i) == Some(&b'[') && body.get(i + 1) == Some(&b':') {
        return Err(Unsupported("a POSIX class [:name:]"));
    }
    let mut prev: Option<u8> = None;
    while i < body.len() {
        let c = body[i];
        match c {
            b']' => return Ok(i + 1),
            b'\\' => {
                check_escape(body.get(i + 1).copied())?;
                prev = (!matches!(body[i + 1], b'd' | b'w' | b's')).then_some(body[i + 1]);
                i += 2;
                continue;
            }
            b'[' => return Err(Unsupported("a class inside a class")),
            b'&' | b'~' | b'-' if body.get(i + 1) == Some(&c) => return Err(Unsupported("class set operations")),
            b'-' if prev.is_some() && body.get(i + 1).is_some_and(|&n| n != b']') => {
                let hi = match body[i + 1] {
                    b'\\' => {
                        check_escape(body.get(i + 2).copied())?;
                        i += 1;
                        body[i + 1]
                    }
                    n => n,
                };
                if prev.is_some_and(|lo| lo > hi) {
                    return Err(Syntax("invalid range in a class (the start is after the end)"));
                }
                prev = None;
                i += 2;
                continue;
            }
            c if !c.is_ascii() => return Err(Unsupported("a non-ASCII character in a class")),
            _ => {}
        }
        prev = Some(c);
        i += 1;
    }
    Err(Syntax("unclosed character class"))
}

#[cfg(test)]
mod tests {
    use super::{check, is_match, PatternError};

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

    #[test]
    fn validator_accepts_the_subset() {
        for ok in [
            "libbig",
            "^/usr/lib/.*\\.so",
            "libc\\.so|libm\\.so$",
            "[a-z_]+\\d",
            "^$",
            "x?y*z+",
            "",
            "a|",
            "[]x]",
            "[^/]+",
            "[a-]",
            "[\\d.]",
            "\\[x\\]",
            "a]",
        ] {
            assert_eq!(check(ok.as_bytes()), Ok(()), "{ok}");
        }
    }

    #[test]
    fn validator_refuses_the_rest() {
        let unsupported = [
            "(a|b)",
            "a{2}",
            "\\bword",
            "a^b",
            "a$b",
            "[[:alpha:]]",
            "a*?",
            "a++",
            "[a[b]]",
            "[a--b]",
        ];
        for bad in unsupported {
            assert!(
                matches!(check(bad.as_bytes()), Err(PatternError::Unsupported(_))),
                "{bad}"
            );
        }
        for bad in ["a(", "*", "|+", "^?", "[", "[a-", "[^", "\\", "[z-a]", "x[ab"] {
            assert!(check(bad.as_bytes()).is_err(), "{bad}");
        }
        assert!(matches!(check(b"[z-a]"), Err(PatternError::Syntax(_))));
    }
}
