//! Hostile cases: profile.

use hugetext_testkit as tk;

/// A link planted where `profile -o`/`--svg` will write (a world-writable
/// directory, a name the victim uses) must not redirect root's write into
/// the file it points to: hugetext refuses to write through or over a link,
/// in one line; the target keeps its bytes and the link stays.
#[test]
fn output_through_a_planted_link_does_not_write_its_target() {
    let victim_dir = tk::scratch();
    let victim = victim_dir.path().join("passwd");
    std::fs::write(&victim, "root:x:0:0\n").unwrap();
    let before = tk::tree_state(victim_dir.path());

    let drop_dir = tk::scratch();
    let profile = drop_dir.path().join("in.json");
    let p = serde_json::json!({
        "format": "hugetext-profile", "version": 1, "source": "sampling", "unit": "samples",
        "page_size": 4096, "pmd_size": 2097152, "total": 1, "unattributed": 0,
        "files": [{"path": "/x", "build_id": null, "text": [[0, 4194304]], "count": 1,
                   "pages": [[0, 1]], "windows": [{"offset": 0, "count": 1}]}]
    });
    std::fs::write(&profile, p.to_string()).unwrap();
    let out = drop_dir.path().join("out.json");
    let svg = drop_dir.path().join("out.svg");
    std::os::unix::fs::symlink(&victim, &out).unwrap();
    std::os::unix::fs::symlink(&victim, &svg).unwrap();

    for (flag, link) in [("-o", &out), ("--svg", &svg)] {
        let o = tk::hugetext(&[
            "profile",
            "--input",
            profile.to_str().unwrap(),
            flag,
            link.to_str().unwrap(),
        ]);
        let err = tk::text(&o.stderr);
        assert_eq!(o.status.code(), Some(1), "{flag}: {err}");
        assert!(
            err.contains("refusing to write") && err.trim_end().lines().count() == 1,
            "{flag}: {err}"
        );
        assert!(std::fs::symlink_metadata(link).unwrap().file_type().is_symlink());
    }
    assert_eq!(tk::tree_state(victim_dir.path()), before);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root:x:0:0\n");
    // A plain name is written.
    let plain = drop_dir.path().join("plain.json");
    let o = tk::hugetext(&[
        "profile",
        "--input",
        profile.to_str().unwrap(),
        "-o",
        plain.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", tk::text(&o.stderr));
    assert!(std::fs::read_to_string(&plain).unwrap().contains("hugetext-profile"));
}

/// A profiled program that puts a file of its own at every descriptor
/// number it inherited (what chromium's launcher does in the child it forks)
/// must not get the qemu plugin's records written into that file: the
/// plugin checks that its descriptor is still its pipe before each write.
/// The program runs to its end, the file keeps its bytes, and hugetext says
/// in one line that the profile stops where the pipe was taken.
#[test]
fn exact_plugin_never_writes_to_a_descriptor_the_program_replaced() {
    let victim_dir = tk::scratch();
    let victim = victim_dir.path().join("ipc.log");
    std::fs::write(&victim, "the program's own data\n").unwrap();
    let before = tk::tree_state(victim_dir.path());
    let prog = tk::cprogs().join("fdsteal");

    let o = tk::hugetext(&[
        "profile",
        "--exact",
        "--",
        prog.to_str().unwrap(),
        victim.to_str().unwrap(),
    ]);
    let err = tk::text(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let now = std::fs::read(&victim).unwrap();
    assert!(
        now == b"the program's own data\n",
        "the plugin wrote {} bytes into the program's file",
        now.len() as i64 - 23
    );
    assert_eq!(tk::tree_state(victim_dir.path()), before);
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("stops early")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(notes[0].contains("replaced the descriptor"), "{err}");
}

/// `hugetext profile --perf-script FILE -o OUT` (FILE `-`: `feed` writes
/// stdin), measured with generous bounds.
fn perf_script(input: &str, out: &std::path::Path, feed: Option<tk::Feed>) -> tk::Measured {
    let mut cmd = std::process::Command::new(tk::bin());
    cmd.args(["profile", "--perf-script", input, "-o"]).arg(out);
    let m = tk::measured_fed(&mut cmd, std::time::Duration::from_secs(60), feed);
    assert!(!m.timed_out, "profile --perf-script still running after 60 s (killed)");
    eprintln!("{:.2} s, {} MB", m.elapsed.as_secs_f64(), m.max_rss_kb >> 10);
    m
}

fn profile_json(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// A real `perf script` output names every file a process mapped, in the
/// kernel's bytes: one library whose name is not UTF-8 must not make the
/// whole output unreadable (it was refused: "stream did not contain valid
/// UTF-8"). Its samples are attributed to that file, named losslessly
/// (`\xNN`), and the file itself is read (its build-id).
#[test]
fn perf_script_with_a_path_that_is_not_utf8_is_read_losslessly() {
    use std::io::Write;
    use std::os::unix::ffi::OsStrExt;
    let dir = tk::scratch();
    let root = dir.path().canonicalize().unwrap();
    let lib = root.join(std::ffi::OsStr::from_bytes(b"caf\xe9-\xff.so"));
    std::fs::copy(tk::fixture("bfd", "pie"), &lib).unwrap();
    let text = hugetext::elf::text_segments(&lib)
        .unwrap()
        .into_iter()
        .find(|s| s.is_executable())
        .unwrap();
    let base = 0x7f00_0000_0000u64;
    let (start, pgoff) = (base + text.vaddr / 4096 * 4096, text.offset / 4096 * 4096);
    let mut input = Vec::new();
    input.extend_from_slice(b"# a header line\n");
    input.extend_from_slice(
        format!(
            "77 PERF_RECORD_MMAP2 77/77: [{start:#x}({:#x}) @ {pgoff:#x} fe:00 1234 0]: r-xp ",
            text.file_size
        )
        .as_bytes(),
    );
    input.extend_from_slice(lib.as_os_str().as_bytes());
    input.push(b'\n');
    for i in 0..10u64 {
        let ip = base + text.vaddr + 16 * i;
        input.extend_from_slice(format!("    77 {ip:x} (").as_bytes());
        input.extend_from_slice(lib.as_os_str().as_bytes());
        input.extend_from_slice(b")\n");
    }
    let script = root.join("perf.txt");
    std::fs::File::create(&script).unwrap().write_all(&input).unwrap();
    let out = root.join("out.json");
    let m = perf_script(script.to_str().unwrap(), &out, None);
    let err = tk::text(&m.output.stderr);
    assert!(m.output.status.success(), "{err}");
    let p = profile_json(&out);
    let shown = hugetext::procfs::path_name(&lib);
    assert!(shown.ends_with("caf\\xe9-\\xff.so"), "{shown}");
    let files = p["files"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{p}");
    assert_eq!(files[0]["path"], shown.as_str());
    assert_eq!(files[0]["count"], 10);
    assert_eq!(
        files[0]["build_id"].as_str(),
        hugetext::profile::attrib::build_id(tk::fixture("bfd", "pie").to_str().unwrap()).as_deref()
    );
}

/// Interleaved mapping records and samples (what `perf script` prints for a
/// process that maps many files, or a JIT that maps and unmaps): each record
/// rebuilt the process's whole map and each sample after one re-sorted it,
/// quadratic in records (30,000: 23 to 46 s). 100,000 must take seconds.
#[test]
fn perf_script_with_a_hundred_thousand_mapping_records_is_linear() {
    use std::io::Write;
    const N: u64 = 100_000;
    let dir = tk::scratch();
    let script = dir.path().join("perf.txt");
    let mut w = std::io::BufWriter::new(std::fs::File::create(&script).unwrap());
    let base = 0x7f00_0000_0000u64;
    for i in 0..N {
        let start = base + i * 0x2000;
        writeln!(
            w,
            "42 PERF_RECORD_MMAP2 42/42: [{start:#x}(0x1000) @ 0 fe:00 {i} 0]: r-xp /nonexistent/jit-{}.so",
            i % 7
        )
        .unwrap();
        writeln!(w, "    42 {:x} (/nonexistent/jit-{}.so)", start + 0x10, i % 7).unwrap();
    }
    drop(w);
    let out = dir.path().join("out.json");
    let m = perf_script(script.to_str().unwrap(), &out, None);
    assert!(m.output.status.success(), "{}", tk::text(&m.output.stderr));
    let p = profile_json(&out);
    assert_eq!(
        (p["total"].as_u64(), p["unattributed"].as_u64()),
        (Some(N), Some(0)),
        "{p}"
    );
}

/// One line of 300 MB (a corrupt or hostile perf script output, streamed):
/// it was read whole into memory (312 MB). Lines longer than the bound are
/// skipped without being held, counted, and said in one note; the samples
/// around it still count.
#[test]
fn perf_script_with_a_300_mb_line_is_bounded() {
    use std::io::Write;
    let dir = tk::scratch();
    let out = dir.path().join("out.json");
    let feed: tk::Feed = Box::new(|mut stdin| {
        let mut head = String::new();
        head.push_str("9 PERF_RECORD_MMAP2 9/9: [0x7f0000000000(0x200000) @ 0 fe:00 1 0]: r-xp /nonexistent/x.so\n");
        head.push_str("    9 7f0000000010 (/nonexistent/x.so)\n");
        let _ = stdin.write_all(head.as_bytes());
        let block = vec![b'a'; 1 << 20];
        let _ = stdin.write_all(b"9 ");
        for _ in 0..300 {
            if stdin.write_all(&block).is_err() {
                return;
            }
        }
        let _ = stdin.write_all(b"\n    9 7f0000000020 (/nonexistent/x.so)\n");
    });
    let m = perf_script("-", &out, Some(feed));
    let err = tk::text(&m.output.stderr);
    assert!(m.output.status.success(), "{err}");
    assert!(
        m.max_rss_kb < 100 << 10,
        "profile used {} MB for one long line",
        m.max_rss_kb >> 10
    );
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("longer than")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(notes[0].starts_with("note: 1 line longer than 64 KiB skipped"), "{err}");
    assert_eq!(profile_json(&out)["total"], 2);
}

/// A perf script output (anyone's text) naming a FIFO where a library
/// should be: reading its build-id opened it for reading and blocked
/// forever. What is not a regular file is not read.
#[test]
fn perf_script_naming_a_fifo_does_not_block() {
    let dir = tk::scratch();
    let fifo = dir.path().join("lib.so");
    let st = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(st.success());
    let f = fifo.to_str().unwrap();
    let script = dir.path().join("perf.txt");
    std::fs::write(
        &script,
        format!(
            "5 PERF_RECORD_MMAP2 5/5: [0x7f0000000000(0x1000) @ 0 fe:00 1 0]: r-xp {f}\n    5 7f0000000010 ({f})\n"
        ),
    )
    .unwrap();
    let out = dir.path().join("out.json");
    let m = perf_script(script.to_str().unwrap(), &out, None);
    assert!(m.output.status.success(), "{}", tk::text(&m.output.stderr));
    let p = profile_json(&out);
    assert_eq!(p["files"][0]["path"], f);
    assert!(p["files"][0]["build_id"].is_null(), "{p}");
}
