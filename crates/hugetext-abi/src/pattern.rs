//! The pattern language of `HUGETEXT_INCLUDE` and `HUGETEXT_EXCLUDE`: a
//! tiny allocation-free regular-expression matcher (the preload may not
//! pull in a regex engine) and the validator `hugetext run` applies before
//! it starts the program, one implementation of both.
//!
//! Supported (a subset of POSIX ERE / Rust `regex` syntax, same meaning):
//! literals, `.`, bracket classes `[a-z_]` / `[^/]`, escapes `\.` `\d` `\w`
//! `\s`, the quantifiers `*` `+` `?`, anchors `^` (start) and `$` (end), and
//! top-level alternation `a|b`. No groups or counted repetition: [`check`]
//! rejects those, and anything else the matcher would read differently
//! from `regex`. Matching is unanchored (a search), like
//! `regex::Regex::is_match`, and takes time linear in the text (no
//! backtracking): both read the pattern with one tokenizer ([`Tokens`]).

/// The longest alternative (between top-level `|`s), in bytes, that
/// [`check`] accepts: the matcher keeps one bit per position in an
/// alternative, in a fixed buffer.
pub const MAX_ALTERNATIVE: usize = 4096;

/// Words of the bit sets: one bit per item of an alternative and one for
/// "matched" (an alternative of `MAX_ALTERNATIVE` bytes has at most that
/// many items).
const WORDS: usize = MAX_ALTERNATIVE / 64 + 1;

/// Does `re` match anywhere in `text`?
///
/// Linear in `text` for each alternative (time proportional to the length
/// of the text times the length of the pattern, whatever the pattern): the
/// alternatives are simulated as automata, one bit of state per item, not
/// by backtracking. An alternative longer than [`MAX_ALTERNATIVE`] bytes
/// ([`check`] refuses it) matches nothing.
pub fn is_match(re: &[u8], text: &[u8]) -> bool {
    let mut toks = Tokens::new(re);
    loop {
        let start = toks.i;
        let mut anchored = false;
        let mut end = false;
        let mut items = 0usize;
        let mut more = false;
        for t in toks.by_ref() {
            match t {
                Token::Alt => {
                    more = true;
                    break;
                }
                Token::Start => anchored = true,
                Token::End => end = true,
                Token::Item(..) => items += 1,
            }
        }
        let stop = if more { toks.i - 1 } else { toks.i };
        if items < WORDS * 64 && match_alt(&re[start..stop], items, anchored, end, text) {
            return true;
        }
        if !more {
            return false;
        }
    }
}

/// One piece of a pattern, as both the matcher and [`check`] read it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token<'a> {
    /// A top-level `|`.
    Alt,
    /// `^` at the start of an alternative.
    Start,
    /// `$` at the end of an alternative.
    End,
    /// An atom (a byte, `.`, an escape, a class) and the quantifier after
    /// it (`*`, `+`, `?`, or 0 for none).
    Item(&'a [u8], u8),
}

/// The tokens of a pattern, left to right.
struct Tokens<'a> {
    re: &'a [u8],
    i: usize,
    alt_start: bool,
}

impl<'a> Tokens<'a> {
    fn new(re: &'a [u8]) -> Self {
        Tokens {
            re,
            i: 0,
            alt_start: true,
        }
    }
}

impl<'a> Iterator for Tokens<'a> {
    type Item = Token<'a>;

    fn next(&mut self) -> Option<Token<'a>> {
        let re = self.re;
        let c = *re.get(self.i)?;
        let alt_start = core::mem::replace(&mut self.alt_start, false);
        if c == b'|' {
            self.i += 1;
            self.alt_start = true;
            return Some(Token::Alt);
        }
        if c == b'^' && alt_start {
            self.i += 1;
            return Some(Token::Start);
        }
        if c == b'$' && matches!(re.get(self.i + 1), None | Some(b'|')) {
            self.i += 1;
            return Some(Token::End);
        }
        let n = atom_len(&re[self.i..]);
        let atom = &re[self.i..self.i + n];
        self.i += n;
        let q = match re.get(self.i) {
            Some(&q @ (b'*' | b'+' | b'?')) => {
                self.i += 1;
                q
            }
            _ => 0,
        };
        Some(Token::Item(atom, q))
    }
}

/// The items of one alternative (no `|` inside), anchors skipped.
fn items(alt: &[u8]) -> impl Iterator<Item = (&[u8], u8)> {
    Tokens::new(alt).filter_map(|t| match t {
        Token::Item(a, q) => Some((a, q)),
        _ => None,
    })
}

/// A set of automaton states: bit `j` is "item `j` is next" (`j` = the
/// number of items is "matched").
#[derive(Clone, Copy)]
struct States([u64; WORDS]);

impl States {
    fn get(&self, j: usize) -> bool {
        self.0[j / 64] >> (j % 64) & 1 != 0
    }
    fn set(&mut self, j: usize) {
        self.0[j / 64] |= 1 << (j % 64);
    }
    fn is_empty(&self) -> bool {
        self.0.iter().all(|&w| w == 0)
    }
}

/// One step of the automaton of `alt` (`n` items): the states after
/// reading `c` from `cur` (none read: `c` is None), plus the start when
/// `seed`, closed over items that may be skipped (`*`, `?`). Items only
/// lead forward, so one pass in order closes the set.
fn step(alt: &[u8], n: usize, cur: &States, c: Option<u8>, seed: bool) -> States {
    let mut next = States([0; WORDS]);
    if seed {
        next.set(0);
    }
    for (j, (atom, q)) in items(alt).enumerate().take(n) {
        if let Some(c) = c {
            if cur.get(j) && atom_matches(atom, c) {
                if matches!(q, b'*' | b'+') {
                    next.set(j);
                }
                next.set(j + 1);
            }
        }
        if next.get(j) && matches!(q, b'*' | b'?') {
            next.set(j + 1);
        }
    }
    next
}

/// Does the alternative `alt` (`n` items; `^` and `$` as given) match in
/// `text`?
fn match_alt(alt: &[u8], n: usize, anchored: bool, end: bool, text: &[u8]) -> bool {
    let mut cur = step(alt, n, &States([0; WORDS]), None, true);
    for &c in text {
        if cur.get(n) && !end {
            return true;
        }
        cur = step(alt, n, &cur, Some(c), !anchored);
        if cur.is_empty() {
            return false; // anchored, and no way on
        }
    }
    cur.get(n)
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
    // Was the token before a quantified atom (for the message)?
    let mut quantified = false;
    let mut alt_start = 0;
    let mut toks = Tokens::new(re);
    while let Some(t) = toks.next() {
        let (atom, q) = match t {
            Token::Alt => {
                if toks.i - 1 - alt_start > MAX_ALTERNATIVE {
                    return Err(Unsupported("an alternative longer than 4096 bytes"));
                }
                alt_start = toks.i;
                quantified = false;
                continue;
            }
            Token::Start | Token::End => {
                quantified = false;
                continue;
            }
            Token::Item(atom, q) => (atom, q),
        };
        match atom {
            [b'*' | b'+' | b'?'] if quantified => return Err(Unsupported("a repeated or lazy quantifier")),
            [b'*' | b'+' | b'?'] => return Err(Syntax("a repetition operator with nothing to repeat")),
            [b'(' | b')'] => return Err(Unsupported("a group")),
            [b'{' | b'}'] => return Err(Unsupported("counted repetition {n,m}")),
            [b'^'] => return Err(Unsupported("^ inside the pattern")),
            [b'$'] => return Err(Unsupported("$ inside the pattern")),
            [b'\\', rest @ ..] => check_escape(rest.first().copied())?,
            [b'[', body @ ..] if check_class(body)? != body.len() => {
                return Err(Syntax("unclosed character class"));
            }
            _ => {}
        }
        quantified = q != 0;
    }
    if re.len() - alt_start > MAX_ALTERNATIVE {
        return Err(Unsupported("an alternative longer than 4096 bytes"));
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
    extern crate std;
    use std::vec::Vec;

    use super::{atom_len, atom_matches, check, is_match, PatternError, MAX_ALTERNATIVE};

    fn m(re: &str, t: &str) -> bool {
        is_match(re.as_bytes(), t.as_bytes())
    }

    /// The backtracking matcher this module had before (exponential on
    /// patterns such as `.*.*.*Z`): the reference the automaton must agree
    /// with, on inputs small enough for it.
    mod reference {
        use super::{atom_len, atom_matches};

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

    /// The automaton gives the backtracking matcher's answer on every
    /// pattern of a table (valid and malformed ones) against every text of
    /// another.
    #[test]
    fn same_answers_as_the_backtracking_matcher() {
        let patterns = [
            "",
            "a",
            "^a",
            "a$",
            "^a$",
            "^$",
            "$",
            "^",
            "|",
            "a|",
            "|a",
            "a|b",
            "^a|b$",
            "a*",
            "a+",
            "a?",
            "^a*$",
            "^a+$",
            "^a?$",
            "a*b",
            "a+b",
            "a?b",
            "ab*c",
            "ab+c",
            "ab?c",
            "a*a*a*",
            "a*a+a?b",
            ".*",
            ".+",
            ".?",
            "^.*$",
            ".*Z",
            "^.*Z$",
            ".*.*.*Z",
            "^.+.+$",
            "a.c",
            "[abc]+",
            "[^abc]+$",
            "[a-c]*d",
            "[]a]+",
            "[^]a]",
            "[a-]",
            "[-a]+",
            "\\d+",
            "\\w+$",
            "\\s",
            "\\.so",
            "so\\.\\d$",
            "lib[^/]*\\.so",
            "^/usr/.*/lib",
            "x*|^/o",
            "a**",
            "*a",
            "+",
            "?",
            "a^b",
            "a$b",
            "$*",
            "^*",
            "^^a",
            "a$$",
            "[",
            "[a",
            "[a-",
            "\\",
            "a\\",
            "\\[x\\]",
            "(a)",
            "a{2}",
            "[\\d.]+",
            "b*$",
            "^b*$|^a",
            ".*/lib[a-z]+\\.so\\.\\d+$",
            "a?a?a?aaa",
            "^(|)$",
        ];
        let texts = [
            "",
            "a",
            "b",
            "aa",
            "ab",
            "abc",
            "ac",
            "abbc",
            "aaa",
            "aaab",
            "Z",
            "xZ",
            "xZy",
            "]",
            "-",
            "1",
            "a b",
            "x.so",
            "/usr/lib/libc.so.6",
            "/x/libbig.so",
            "/opt/a-b/[x]",
            "lib_x9",
            "^",
            "$",
            "*",
            "a^b",
            "a$b",
            "\\",
            "(a)",
            "a{2}",
            "/usr/lib/x86_64-linux-gnu/libstdc++.so.6",
        ];
        for re in patterns {
            for t in texts {
                assert_eq!(
                    m(re, t),
                    reference::is_match(re.as_bytes(), t.as_bytes()),
                    "{re:?} on {t:?}"
                );
            }
        }
    }

    /// Patterns that make a backtracking matcher take exponential time
    /// get their answer from the automaton at once (a hostile test of
    /// `run` bounds the time; here the answers).
    #[test]
    fn backtracking_patterns_get_the_right_answer() {
        let long = [b'/'; 4000].iter().chain(b"lib.so").copied().collect::<Vec<u8>>();
        let mut z = long.clone();
        z.push(b'Z');
        for (re, text, want) in [
            (".*.*.*.*.*.*.*.*Z", &long, false),
            (".*.*.*.*.*.*.*.*Z", &z, true),
            ("^/*/*/*/*/*/*/*/*/*/*/*/*$", &long, false),
            ("^/*/*/*/*/*/*/*/*/*/*/*/*lib\\.so$", &long, true),
            ("(/+)+x", &long, false),
            ("/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?/?x", &long, false),
        ] {
            assert_eq!(is_match(re.as_bytes(), text), want, "{re}");
        }
        // The longest alternative `check` accepts still matches.
        let big: Vec<u8> = b".*".repeat(MAX_ALTERNATIVE / 2);
        assert_eq!(check(&big), Ok(()));
        assert!(is_match(&big, &long));
        let mut too_big = big.clone();
        too_big.push(b'x');
        assert!(matches!(check(&too_big), Err(PatternError::Unsupported(_))));
        let mut two = too_big.clone();
        two.extend_from_slice(b"|lib");
        assert!(matches!(check(&two), Err(PatternError::Unsupported(_))));
        // A longer alternative matches nothing; the others still do.
        assert!(is_match(&two, &long));
        assert!(!is_match(&too_big, &long));
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
            // `^` after an escaped `|` is inside the pattern (an anchor to
            // `regex`, a literal to the matcher).
            "a\\|^b",
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
