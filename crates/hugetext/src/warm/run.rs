//! The driver of `hugetext warm`: every planned file in order, progress
//! through the one [`Progress`] interface, and the report of the whole run.

use std::path::PathBuf;

use super::{warm_target, FileReport, Target, WarmContext, WarmOptions};
use crate::pagecache::CollapseSupport;
use crate::progress::Progress;
use crate::Result;

/// What became of one file.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(untagged)]
pub enum FileOutcome {
    /// Warmed (or found impossible to warm: see its route).
    Warmed(Box<FileReport>),
    /// Could not be planned or warmed.
    Failed { path: PathBuf, error: String },
}

/// Whether `MADV_COLLAPSE` was needed, and whether it works.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CollapseState {
    /// No window needed it (or it was not to be tried).
    NotNeeded,
    Available,
    /// Tried and refused; why.
    Unavailable(String),
}

/// The report of `hugetext warm` over all its files.
#[derive(Debug, Clone, serde::Serialize)]
pub struct WarmReport {
    /// One per file, in the order given.
    pub files: Vec<FileOutcome>,
    pub collapse: CollapseState,
}

impl WarmReport {
    /// Of all files: any failure is an error, any file warmed is done.
    pub fn outcome(&self) -> crate::Outcome {
        crate::Outcome::of_all(self.files.iter().map(|f| match f {
            FileOutcome::Warmed(r) => r.outcome(),
            FileOutcome::Failed { .. } => crate::Outcome::Error,
        }))
    }
}

/// Warm every planned file in order. A file that cannot be planned or
/// warmed is reported (and given to `progress` as a note: "PATH: why") and
/// the others go on. `progress` counts the bytes of the plans.
pub fn warm_all(plans: Vec<(PathBuf, Result<Target>)>, opts: &WarmOptions, progress: &dyn Progress) -> WarmReport {
    let total = plans
        .iter()
        .filter_map(|(_, t)| t.as_ref().ok())
        .map(|t| t.bytes())
        .sum();
    progress.start(total);
    let mut ctx = WarmContext::default();
    let mut files = Vec::new();
    for (path, plan) in plans {
        let shown = path.display().to_string();
        progress.advance(0, &shown);
        let r = plan.and_then(|t| {
            let r = warm_target(&t, opts, &mut ctx);
            progress.advance(t.bytes(), &shown);
            r
        });
        files.push(match r {
            Ok(rep) => FileOutcome::Warmed(Box::new(rep)),
            Err(e) => {
                let error = e.to_string();
                progress.note(&if error.starts_with(&shown) {
                    error.clone()
                } else {
                    format!("{shown}: {error}")
                });
                FileOutcome::Failed { path, error }
            }
        });
    }
    let collapse = match ctx.collapse {
        None => CollapseState::NotNeeded,
        Some(CollapseSupport::Available) => CollapseState::Available,
        Some(CollapseSupport::Unavailable(why)) => CollapseState::Unavailable(why),
    };
    WarmReport { files, collapse }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn collapse_state_and_failures_as_json() {
        let r = WarmReport {
            files: vec![FileOutcome::Failed {
                path: PathBuf::from("/nonexistent"),
                error: "no such file".into(),
            }],
            collapse: CollapseState::NotNeeded,
        };
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"files": [{"path": "/nonexistent", "error": "no such file"}], "collapse": "not-needed"})
        );
        let v = serde_json::to_value(CollapseState::Unavailable("EINVAL".into())).unwrap();
        assert_eq!(v, serde_json::json!({"unavailable": "EINVAL"}));
        assert_eq!(serde_json::to_value(CollapseState::Available).unwrap(), "available");
    }

    #[test]
    fn a_file_that_cannot_be_planned_is_noted_and_the_others_go_on() {
        struct Notes(std::sync::Mutex<Vec<String>>);
        impl Progress for Notes {
            fn start(&self, _: u64) {}
            fn step(&self, _: &str) {}
            fn note(&self, msg: &str) {
                self.0.lock().unwrap().push(msg.to_string());
            }
        }
        let missing = PathBuf::from("/nonexistent/hugetext-warm");
        let plans = vec![(missing.clone(), super::super::plan(&missing))];
        let notes = Notes(Default::default());
        let r = warm_all(plans, &WarmOptions::default(), &notes);
        assert!(matches!(&r.files[..], [FileOutcome::Failed { path, .. }] if *path == missing));
        let n = notes.0.lock().unwrap();
        assert_eq!(n.len(), 1);
        assert!(n[0].starts_with("/nonexistent/hugetext-warm"), "{n:?}");
        assert_eq!(r.collapse, CollapseState::NotNeeded);
        assert_eq!(r.outcome(), crate::Outcome::Error);
    }
}
