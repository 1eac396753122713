//! The layering written in ARCHITECTURE.md, checked against the source.
//!
//! ARCHITECTURE.md has one floor table per crate (a table whose second
//! header cell is "modules of `crates/<crate>/src`"). Every `crate::` path
//! in that crate's source (comments and string literals left out; a
//! `use crate::{a, b::c}` group counts each name) must name a module on a
//! lower floor than the file's own module, or that module itself. A folder
//! is one module. Names re-exported at the crate root (`pub use m::{A, B}`
//! in lib.rs) count as their module; the root's own items (the preload's
//! process-wide flags) may be read only by the modules [`ROOT_READERS`]
//! lists. In the CLI, command files must not reach each other.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Modules allowed to read items defined in their crate's root (lib.rs),
/// which stands above every module: (crate directory, module, why).
const ROOT_READERS: &[(&str, &str, &str)] = &[
    (
        "crates/hugetext-preload/src",
        "audit",
        "the auditor's copy finds the preload copy's pass lock and flags",
    ),
    (
        "crates/hugetext-preload/src",
        "via",
        "a launcher being followed sets WRAPPER, which became_program takes",
    ),
    (
        "crates/hugetext-preload/src",
        "exec",
        "the settings are added back at exec only while WRAPPER says this process is a followed launcher",
    ),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The floor tables of ARCHITECTURE.md: crate source directory → module → floor.
fn floor_tables(doc: &str) -> BTreeMap<String, BTreeMap<String, u32>> {
    let mut tables = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        let cells: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        if !line.trim_start().starts_with('|') {
            current = None;
            continue;
        }
        if let Some(dir) = cells
            .get(1)
            .and_then(|c| c.strip_prefix("modules of `"))
            .and_then(|c| c.strip_suffix('`'))
        {
            current = Some(dir.to_string());
            tables.entry(dir.to_string()).or_insert_with(BTreeMap::new);
            continue;
        }
        let (Some(dir), [floor, modules, ..]) = (&current, cells.as_slice()) else {
            continue;
        };
        let Ok(floor) = floor.parse::<u32>() else {
            continue; // the |---| row
        };
        let table = tables.get_mut(dir).unwrap();
        for m in modules.split(',') {
            let m = m.trim().trim_matches('`');
            assert!(
                table.insert(m.to_string(), floor).is_none(),
                "ARCHITECTURE.md places {m} twice in {dir}"
            );
        }
    }
    tables
}

/// `src` without comments, string and character literals (their text could
/// hold "crate::" that is no path).
fn code_only(src: &str) -> String {
    let b = src.as_bytes();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < b.len() {
        let prev_ident = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if b[i..].starts_with(b"//") {
            i = src[i..].find('\n').map_or(b.len(), |n| i + n);
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if !prev_ident && (b[i..].starts_with(b"r\"") || b[i..].starts_with(b"r#") || b[i..].starts_with(b"br"))
        {
            // A raw string: r"…", r#"…"#, br"…".
            let start = i + if b[i] == b'b' { 2 } else { 1 };
            let hashes = b[start..].iter().take_while(|&&c| c == b'#').count();
            if b.get(start + hashes) != Some(&b'"') {
                out.push(b[i] as char);
                i += 1;
                continue;
            }
            let end = format!("\"{}", "#".repeat(hashes));
            let body = start + hashes + 1;
            i = src[body..].find(&end).map_or(b.len(), |n| body + n + end.len());
            out.push_str("\"\"");
        } else if b[i] == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if b[i] == b'\'' && b.get(i + 1) == Some(&b'\\') {
            // An escaped character literal: '\'', '\n', '\u{…}'.
            i = src[i + 3..].find('\'').map_or(b.len(), |n| i + 3 + n + 1);
        } else if b[i] == b'\'' && b.get(i + 2) == Some(&b'\'') {
            i += 3;
        } else {
            let c = src[i..].chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

fn ident_at(s: &str) -> &str {
    let n = s
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len());
    &s[..n]
}

/// The first path segment of every `crate::` path in `code`.
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue; // e.g. `hugetext_crate::`
        }
        let after = rest.trim_start();
        if let Some(group) = after.strip_prefix('{') {
            // The top-level names of a `{a, b::{c}, d}` group.
            let (mut depth, mut start) = (1, true);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => start = true,
                    c if depth == 1 && start && (c.is_ascii_alphabetic() || c == '_') => {
                        names.insert(ident_at(&group[i..]).to_string());
                        start = false;
                    }
                    _ => {}
                }
            }
        } else if !ident_at(after).is_empty() {
            names.insert(ident_at(after).to_string());
        }
    }
    names
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(rust_files(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// The module a file belongs to: its first component under `src`.
fn module_of(src: &Path, file: &Path) -> String {
    let rel = file.strip_prefix(src).unwrap();
    let first = rel.components().next().unwrap().as_os_str().to_str().unwrap();
    first.strip_suffix(".rs").unwrap_or(first).to_string()
}

/// Names the crate root re-exports (`pub use m::{A, B};`, `pub use m::A;`), with their module.
fn root_reexports(lib: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    for line in code_only(lib).lines() {
        let Some(path) = line.trim().strip_prefix("pub use ").and_then(|l| l.strip_suffix(';')) else {
            continue;
        };
        let Some((module, names)) = path.split_once("::") else {
            continue;
        };
        for n in names.trim_matches(|c| c == '{' || c == '}').split(',') {
            let n = n.trim();
            let n = n.split(" as ").last().unwrap().trim();
            if !n.is_empty() {
                map.insert(n.to_string(), module.to_string());
            }
        }
    }
    map
}

/// Every import of `dir` that breaks its floor table, as sentences.
fn violations(dir: &str, floors: &BTreeMap<String, u32>) -> Vec<String> {
    let src = repo().join(dir);
    let lib = fs::read_to_string(src.join("lib.rs")).unwrap();
    let reexports = root_reexports(&lib);
    let mut bad = Vec::new();
    for file in rust_files(&src) {
        let rel = file.strip_prefix(repo().join("crates")).unwrap().display().to_string();
        let module = module_of(&src, &file);
        if module == "lib" {
            continue; // the crate root stands above every module
        }
        let Some(&floor) = floors.get(&module) else {
            bad.push(format!(
                "{rel}: module {module} is on no floor of {dir} in ARCHITECTURE.md"
            ));
            continue;
        };
        for name in crate_refs(&code_only(&fs::read_to_string(&file).unwrap())) {
            let target = reexports.get(&name).cloned().unwrap_or(name.clone());
            if target == module {
                continue;
            }
            match floors.get(&target) {
                Some(&f) if f < floor => {}
                Some(&f) => bad.push(format!(
                    "{rel}: crate::{name} points from {module} (floor {floor}) to {target} (floor {f}); \
                     a module imports only lower floors (ARCHITECTURE.md)"
                )),
                None if ROOT_READERS.iter().any(|&(d, m, _)| d == dir && m == module) => {}
                None => bad.push(format!(
                    "{rel}: crate::{name} is neither a module on a floor of {dir} nor a root item {module} may read \
                     (ARCHITECTURE.md)"
                )),
            }
        }
    }
    bad
}

#[test]
fn imports_follow_the_floors_of_architecture_md() {
    let doc = fs::read_to_string(repo().join("ARCHITECTURE.md")).unwrap();
    let tables = floor_tables(&doc);
    for dir in [
        "crates/hugetext/src",
        "crates/hugetext-preload/src",
        "crates/hugetext-abi/src",
    ] {
        assert!(tables.contains_key(dir), "ARCHITECTURE.md has no floor table for {dir}");
    }
    let mut bad = Vec::new();
    for (dir, floors) in &tables {
        // Every module in the table exists, so the table cannot rot.
        for m in floors.keys() {
            let src = repo().join(dir);
            assert!(
                src.join(format!("{m}.rs")).is_file() || src.join(m).join("mod.rs").is_file(),
                "ARCHITECTURE.md names {m} in {dir}, which has no such module"
            );
        }
        bad.extend(violations(dir, floors));
    }
    assert!(bad.is_empty(), "imports that break the layering:\n{}", bad.join("\n"));
}

#[test]
fn cli_commands_do_not_import_each_other() {
    let cmd = repo().join("crates/hugetext-cli/src/cmd");
    let commands: BTreeSet<String> = rust_files(&cmd)
        .iter()
        .map(|f| module_of(&cmd, f))
        .filter(|m| m != "mod")
        .collect();
    let mut bad = Vec::new();
    for file in rust_files(&cmd) {
        let me = module_of(&cmd, &file);
        let code = code_only(&fs::read_to_string(&file).unwrap());
        for other in &commands {
            if *other == me {
                continue;
            }
            for pattern in [
                format!("super::{other}::"),
                format!("crate::cmd::{other}::"),
                format!("super::{{{other}"),
            ] {
                if code.contains(&pattern) {
                    bad.push(format!("cmd/{me}.rs uses {pattern}: shared helpers go in cmd/mod.rs"));
                }
            }
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The preload's engine is one folder of files that import what they use by
/// name (no `use super::*` outside unit-test modules), and each type's
/// methods are in one file (ARCHITECTURE.md, "Inside `engine/`").
#[test]
fn engine_files_import_by_name_and_keep_each_types_methods_in_one_file() {
    let engine = repo().join("crates/hugetext-preload/src/engine");
    let mut bad = Vec::new();
    let mut impls: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in rust_files(&engine) {
        let name = file.file_name().unwrap().to_str().unwrap().to_string();
        let text = fs::read_to_string(&file).unwrap();
        let code = code_only(text.split("#[cfg(test)]").next().unwrap());
        if code.contains("use super::*") {
            bad.push(format!("engine/{name} imports `super::*`: name what it uses"));
        }
        for line in code.lines() {
            // `impl Type {` and `impl Type<'_> {`, not `impl Trait for Type`.
            let Some(rest) = line.strip_prefix("impl ") else {
                continue;
            };
            if rest.contains(" for ") {
                continue;
            }
            // `impl<'a> Type<'a>`: skip the generics of the impl.
            let rest = match rest.strip_prefix('<') {
                Some(r) => r.split_once('>').map_or(r, |(_, r)| r).trim_start(),
                None => rest,
            };
            let ty = ident_at(rest);
            impls.entry(ty.to_string()).or_default().insert(name.clone());
        }
    }
    for (ty, files) in &impls {
        if files.len() > 1 {
            bad.push(format!("engine: the methods of {ty} are spread over {files:?}"));
        }
    }
    assert!(
        impls.contains_key("Pass"),
        "no `impl Pass` found in the engine: the test reads the wrong files"
    );
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// The modules inside a folder (e.g. the preload's `engine/`) import each
/// other through `super::NAME`: those imports must form no circle, or the
/// folder is one knot instead of rooms (a route importing a helper of the
/// driver that calls it was one).
#[test]
fn files_inside_the_preload_engine_import_each_other_without_circles() {
    let engine = repo().join("crates/hugetext-preload/src/engine");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let files: Vec<_> = rust_files(&engine);
    let names: BTreeSet<String> = files
        .iter()
        .map(|f| f.file_stem().unwrap().to_str().unwrap().to_string())
        .filter(|n| n != "mod")
        .collect();
    for file in &files {
        let me = file.file_stem().unwrap().to_str().unwrap().to_string();
        if me == "mod" {
            continue;
        }
        let text = fs::read_to_string(file).unwrap();
        let code = code_only(text.split("#[cfg(test)]").next().unwrap());
        for (i, _) in code.match_indices("super::") {
            let n = ident_at(&code[i + "super::".len()..]);
            if names.contains(n) && n != me {
                graph.entry(me.clone()).or_default().insert(n.to_string());
            }
        }
    }
    assert!(
        graph.values().map(BTreeSet::len).sum::<usize>() >= 3,
        "fewer sibling imports than the engine has: the test reads the wrong files: {graph:?}"
    );
    // Depth-first search; a node met again while on the path closes a circle.
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|p| p == n) {
            let mut c = path[at..].to_vec();
            c.push(n.to_string());
            return Some(c);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for m in g.get(n).into_iter().flatten() {
            if let Some(c) = visit(m, g, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    for n in graph.keys() {
        if let Some(c) = visit(n, &graph, &mut Vec::new(), &mut done) {
            panic!("engine files import each other in a circle: {}", c.join(" -> "));
        }
    }
}

#[test]
fn the_reader_of_crate_paths_sees_groups_and_skips_comments_and_strings() {
    let code = code_only(
        "use crate::{fsutil, elf::{self, Target}, Error};\n\
         // crate::warm in a comment\n\
         /* crate::bench /* nested */ */\n\
         let s = \"crate::agent\"; let r = r#\"crate::doctor\"#; let c = '\"';\n\
         let q = '\\''; let x = crate::kernel::page_size();\n\
         let y = crate::procfs::read_maps(None); let z = hugetext_crate::warm;",
    );
    let names: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(names, ["Error", "elf", "fsutil", "kernel", "procfs"]);
}

/// Every `HUGETEXT_*` name is spelled once, in `hugetext_abi::settings`:
/// the crates' sources name the constants (comments, tests, benches and
/// examples may spell them).
#[test]
fn settings_are_named_only_in_the_settings_module() {
    let crates = repo().join("crates");
    let own = crates.join("hugetext-abi/src/settings.rs");
    let mut bad = Vec::new();
    for krate in fs::read_dir(&crates).unwrap() {
        let src = krate.unwrap().path().join("src");
        if !src.is_dir() {
            continue;
        }
        for file in rust_files(&src) {
            if file == own {
                continue;
            }
            let text = fs::read_to_string(&file).unwrap();
            // A unit-test module at the end of the file may spell them.
            let code = text.split("#[cfg(test)]\nmod tests").next().unwrap();
            for (n, line) in code.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                if line.contains("\"HUGETEXT_") {
                    let rel = file.strip_prefix(repo()).unwrap_or(&file).display().to_string();
                    bad.push(format!("{rel}:{}: {}", n + 1, line.trim()));
                }
            }
        }
    }
    assert!(
        bad.is_empty(),
        "HUGETEXT_* literals outside hugetext_abi::settings (use its constants):\n{}",
        bad.join("\n")
    );
}

/// Every product setting is explained to users in doc/run.md.
#[test]
fn every_setting_is_in_the_run_documentation() {
    let doc = fs::read_to_string(repo().join("doc/run.md")).unwrap();
    let missing: Vec<&str> = hugetext_abi::settings::Setting::ALL
        .iter()
        .map(|s| s.name())
        .filter(|name| {
            !doc.match_indices(name)
                .any(|(i, _)| !doc[i + name.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_'))
        })
        .collect();
    assert!(missing.is_empty(), "doc/run.md does not mention {missing:?}");
}

/// Every `HUGETEXT_*` variable the crates use (tests, benches and examples
/// included) is a product setting or a test/bench knob listed in
/// `hugetext_abi::settings`.
#[test]
fn every_variable_is_a_setting_or_a_listed_knob() {
    use hugetext_abi::settings::{Setting, KNOBS, PREFIX};
    let known: BTreeSet<&str> = Setting::ALL
        .iter()
        .map(|s| s.name())
        .chain(KNOBS.iter().map(|k| k.name))
        .collect();
    let mut unknown = BTreeSet::new();
    for krate in fs::read_dir(repo().join("crates")).unwrap() {
        let dir = krate.unwrap().path();
        if !dir.is_dir() {
            continue;
        }
        for file in rust_files(&dir) {
            let text = fs::read_to_string(&file).unwrap();
            for (i, _) in text.match_indices(PREFIX) {
                let name: String = text[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
                    .collect();
                // `HUGETEXT_TEST_*` and the like name a family, not a variable.
                if name.ends_with('_') || text[i + name.len()..].starts_with('*') {
                    continue;
                }
                if !known.contains(name.as_str()) {
                    unknown.insert(format!("{name} ({})", file.display()));
                }
            }
        }
    }
    assert!(
        unknown.is_empty(),
        "variables neither a setting nor a knob of hugetext_abi::settings: {unknown:?}"
    );
}
