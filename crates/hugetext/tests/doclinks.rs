//! Every relative link in the repository's Markdown files names a file or
//! folder that exists (links to the web and to anchors in the same page
//! are not checked; code blocks and inline code are not links).

use std::fs;
use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Markdown files of the repository, outside build output and VCS data.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if path.is_dir() {
            if !(name.starts_with('.') || name == "target") {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The targets of the inline links `[text](target)` in `md`, with their line
/// numbers, outside fenced code blocks and inline code.
fn link_targets(md: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut fenced = false;
    for (n, line) in md.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop inline code spans.
        let text: String = line.split('`').step_by(2).collect::<Vec<_>>().join(" ");
        let mut rest = text.as_str();
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = rest[..end].split_whitespace().next().unwrap_or("");
            links.push((n + 1, target.to_string()));
            rest = &rest[end..];
        }
    }
    links
}

/// Is `target` a link this test checks (relative, to a file)?
fn is_relative(target: &str) -> bool {
    !(target.is_empty() || target.starts_with('#') || target.contains("://") || target.starts_with("mailto:"))
}

#[test]
fn relative_markdown_links_name_files_that_exist() {
    let root = repo();
    let mut files = Vec::new();
    markdown_files(&root, &mut files);
    assert!(
        files.len() > 10,
        "found only {} Markdown files under {}",
        files.len(),
        root.display()
    );
    let mut broken = Vec::new();
    for file in &files {
        let md = fs::read_to_string(file).unwrap();
        for (line, target) in link_targets(&md) {
            if !is_relative(&target) {
                continue;
            }
            let path = target.split('#').next().unwrap();
            if !file.parent().unwrap().join(path).exists() {
                let rel = file.strip_prefix(&root).unwrap_or(file);
                broken.push(format!("{}:{line}: {target}", rel.display()));
            }
        }
    }
    assert!(broken.is_empty(), "links to missing files:\n{}", broken.join("\n"));
}

#[test]
fn the_link_reader_skips_code_and_web_links() {
    let md = "see [a](doc/a.md#x) and `[b](nope.md)`, [c](https://x.invalid/y)\n```\n[d](gone.md)\n```\n[e](#top)";
    let targets: Vec<String> = link_targets(md).into_iter().map(|(_, t)| t).collect();
    assert_eq!(targets, ["doc/a.md#x", "https://x.invalid/y", "#top"]);
    let relative: Vec<&String> = targets.iter().filter(|t| is_relative(t)).collect();
    assert_eq!(relative, ["doc/a.md#x"]);
}
