//! The one exit-status convention of every command that changes state
//! (`align`, `warm`, and hugetext's own part of `run`): a script or a
//! systemd unit tells "done", "nothing to do", "impossible here" and
//! "error" apart the same way for all of them.

/// What a state-changing command achieved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It did what was asked (exit status 0).
    Done,
    /// Nothing needed doing: already as asked, or nothing it applies to
    /// (exit status 2).
    NothingToDo,
    /// It cannot be done on this machine or for this file: the kernel, the
    /// filesystem or the file's layout rules it out; the reason is printed
    /// (exit status 3).
    Impossible,
    /// It failed (exit status 1); what could be left unchanged was.
    Error,
}

impl Outcome {
    /// The exit status: 0 done, 1 error, 2 nothing to do, 3 impossible here.
    pub fn exit_code(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::Error => 1,
            Outcome::NothingToDo => 2,
            Outcome::Impossible => 3,
        }
    }

    /// The outcome of a command over several items: an error wins, then
    /// anything done, then impossible, then nothing to do.
    pub fn and(self, other: Outcome) -> Outcome {
        let rank = |o: Outcome| match o {
            Outcome::Error => 3,
            Outcome::Done => 2,
            Outcome::Impossible => 1,
            Outcome::NothingToDo => 0,
        };
        if rank(other) > rank(self) {
            other
        } else {
            self
        }
    }

    /// The outcome of all `items` (nothing to do for none).
    pub fn of_all(items: impl IntoIterator<Item = Outcome>) -> Outcome {
        items.into_iter().fold(Outcome::NothingToDo, Outcome::and)
    }
}

#[cfg(test)]
mod tests {
    use super::Outcome::{self, *};

    #[test]
    fn exit_codes_and_combination() {
        assert_eq!(
            [Done, Error, NothingToDo, Impossible].map(Outcome::exit_code),
            [0, 1, 2, 3]
        );
        assert_eq!(Outcome::of_all([]), NothingToDo);
        assert_eq!(Outcome::of_all([NothingToDo, Impossible]), Impossible);
        assert_eq!(Outcome::of_all([Impossible, Done, NothingToDo]), Done);
        assert_eq!(Outcome::of_all([Done, Error, Impossible]), Error);
    }
}
