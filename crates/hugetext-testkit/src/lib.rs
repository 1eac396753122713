//! Helpers shared by the integration tests of the `hugetext` library and
//! the `hugetext` binary: the binary under test, the real ELF fixtures (built
//! once per test run by tests/fixtures/mkfixtures.sh), scratch directories
//! and files on the real filesystem (never tmpfs), loop-mounted filesystems,
//! and fixtures started and stopped.
//!
//! A dev-dependency only: it panics on failure, as a test would.

use hugetext_abi::settings;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The cargo target directory that holds the test binaries and the binary
/// under test (`target/release` or `target/debug`): test executables live in
/// its `deps/`.
pub fn target_profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("path of the test executable");
    let deps = exe.parent().expect("test executable in a directory");
    match deps.file_name() {
        Some(n) if n == "deps" => deps.parent().unwrap().to_path_buf(),
        _ => deps.to_path_buf(),
    }
}

/// Path of the `hugetext` binary under test (cargo builds it before the
/// integration tests of hugetext-cli).
pub fn bin() -> PathBuf {
    target_profile_dir().join("hugetext")
}

/// `hugetext run -- PROGRAM ARGS...` under `strace -f -e trace=CALLS`,
/// its trace split at the exec of `program` (as given): what `run` itself
/// did before, and everything from the exec on, each line without
/// strace's pid prefix. Panics when the run fails.
pub fn strace_run(calls: &str, program: &Path, args: &[&str]) -> (String, String) {
    let d = scratch();
    let trace = d.path().join("trace");
    let out = Command::new("strace")
        .arg("-f")
        .arg("-o")
        .arg(&trace)
        .arg("-e")
        .arg(format!("trace={calls}"))
        .arg(bin())
        .args(["run", "--"])
        .arg(program)
        .args(args)
        .output()
        .expect("strace (package strace)");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let t = std::fs::read_to_string(&trace).unwrap();
    let unprefixed: String = t
        .lines()
        .map(|l| match l.split_once(' ') {
            Some((pid, rest)) if !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) => rest.trim_start(),
            _ => l,
        })
        .flat_map(|l| [l, "\n"])
        .collect();
    let at = unprefixed
        .find(&format!("execve(\"{}\"", program.display()))
        .unwrap_or_else(|| panic!("no exec of {}: {unprefixed}", program.display()));
    (unprefixed[..at].to_string(), unprefixed[at..].to_string())
}

/// The workspace root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The checkout's path relative to /tmp, when it lives there.
pub fn checkout_under_tmp() -> Option<PathBuf> {
    root().strip_prefix("/tmp").ok().map(Path::to_path_buf)
}

/// Make `tmp` ready to be bound over /tmp by [`private_tmp_args`]: for a
/// checkout under /tmp, the mount point that keeps it visible there (made
/// before a test looks at `tmp`).
pub fn prepare_private_tmp(tmp: &Path) {
    if let Some(rel) = checkout_under_tmp() {
        std::fs::create_dir_all(tmp.join(rel)).unwrap();
    }
}

/// Arguments for a command run in a new mount namespace (`unshare --mount
/// ...`): `sh -c` binding `tmp` over /tmp, then exec of what the caller
/// appends. A checkout under /tmp stays visible: its root is bound at the
/// same path inside `tmp` first ([`prepare_private_tmp`] made the mount
/// point) and `tmp` is bound recursively.
pub fn private_tmp_args(tmp: &Path) -> Vec<std::ffi::OsString> {
    vec![
        "sh".into(),
        "-c".into(),
        "if [ -n \"$1\" ]; then mount --bind \"/tmp/$1\" \"$0/$1\" || exit 1; fi; \
         mount --rbind \"$0\" /tmp && shift && exec \"$@\""
            .into(),
        tmp.into(),
        checkout_under_tmp().unwrap_or_default().into(),
    ]
}

/// Run `hugetext ARGS...` and capture its output.
pub fn hugetext(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("spawn hugetext")
}

/// Directory of the ELF fixtures, built on first use. Linkers that are not
/// installed are skipped by the script; `fixture()` then panics with a clear
/// message, because the test command installs all of them.
pub fn fixtures() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_profile_dir().join("../fixtures");
        if !prebuilt() {
            let script = root().join("tests/fixtures/mkfixtures.sh");
            let st = Command::new("bash")
                .arg(&script)
                .arg(&dir)
                .status()
                .expect("run mkfixtures.sh");
            assert!(st.success(), "mkfixtures.sh failed");
        }
        dir.canonicalize().unwrap()
    })
}

/// True where the fixtures and C test programs were built beforehand and no
/// compiler is at hand: inside the kernel-matrix guests
/// (scripts/kernel-matrix.sh sets `HUGETEXT_TEST_PREBUILT=1`).
pub fn prebuilt() -> bool {
    std::env::var_os(settings::TEST_PREBUILT).is_some()
}

/// One fixture: `linker` in bfd/lld/mold, `name` in pie/nopie/libbig.so/usebig/small.
pub fn fixture(linker: &str, name: &str) -> PathBuf {
    let p = fixtures().join(linker).join(name);
    assert!(
        p.exists(),
        "fixture {} missing: is the {linker} linker installed? (scripts/install-deps.sh)",
        p.display()
    );
    p
}

/// A fresh scratch directory on the same (real, disk-backed) filesystem as
/// the target directory; removed when dropped.
pub fn scratch() -> tempfile::TempDir {
    let base = target_profile_dir().join("../scratch");
    std::fs::create_dir_all(&base).unwrap();
    tempfile::Builder::new().prefix("t").tempdir_in(base).unwrap()
}

/// Write `dir/name`: `mib` MiB of 0xc3 (x86 `ret`, so it may be mapped and
/// run as text), synced to disk and evicted from the page cache.
pub fn scratch_file(dir: &Path, name: &str, mib: usize) -> PathBuf {
    let p = dir.join(name);
    let mut f = std::fs::File::create(&p).unwrap();
    let block = vec![0xc3u8; 1 << 20];
    for _ in 0..mib {
        f.write_all(&block).unwrap();
    }
    f.sync_all().unwrap();
    drop(f);
    hugetext::pagecache::evict(&std::fs::File::open(&p).unwrap(), 0..0).unwrap();
    p
}

/// Copy the fixture `linker`/`name` to `dir` in a child process (a write
/// descriptor of ours could leak into a concurrently forked child and make
/// its exec fail with ETXTBSY), written back so its page cache is clean and
/// evictable.
pub fn copy_fixture(dir: &Path, linker: &str, name: &str) -> PathBuf {
    let dst = dir.join(name);
    let st = Command::new("cp")
        .arg(fixture(linker, name))
        .arg(&dst)
        .status()
        .unwrap();
    assert!(st.success(), "cp {linker}/{name} {}", dst.display());
    std::fs::File::open(&dst).unwrap().sync_all().unwrap();
    dst
}

/// The experiment `doctor` does, done independently: a file of two windows
/// of the running kernel's unit of huge text in `dir` (the PMD: 4 MiB on
/// x86-64, 64 MiB with 16 KiB pages; 4 MiB of 2 MiB contpte blocks with
/// 64 KiB pages), evicted, filled through a `MADV_HUGEPAGE` mapping and
/// scanned. True when both windows are in one folio of at least the unit
/// each. The file is removed.
pub fn fs_gives_pmd_folios(dir: &Path) -> bool {
    use hugetext::{folio, pagecache};
    let len = 2 * unit();
    // A name of its own: tests run in parallel probe the same directory
    // (one's truncating create under another's populate is EFAULT).
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("probe-by-test-{}-{n}", std::process::id());
    let p = scratch_file(dir, &name, (len >> 20) as usize);
    let f = std::fs::File::open(&p).unwrap();
    pagecache::fill_huge(&f, 0..len).unwrap();
    let n = folio::scan_file(&p, None).unwrap().unit_windows.len();
    pagecache::evict(&f, 0..0).unwrap();
    std::fs::remove_file(&p).unwrap();
    n == 2
}

/// A filesystem image loop-mounted in the scratch area (see [`loop_fs`]).
/// Dropping it (also while a test panics) unmounts the filesystem, detaches
/// the loop device and removes the image.
pub struct LoopFs {
    /// The filesystem type (`xfs`, `btrfs`, `ext4`).
    pub fstype: String,
    /// The loop device, e.g. `/dev/loop3`.
    pub device: String,
    mount: PathBuf,
    // Holds the image and the mount point; removed after the unmount.
    _dir: tempfile::TempDir,
}

impl LoopFs {
    /// The mount point (a directory private to this test).
    pub fn path(&self) -> &Path {
        &self.mount
    }
}

impl Drop for LoopFs {
    fn drop(&mut self) {
        // A process the test started may still be exiting: retry, then
        // detach lazily rather than leave a mount behind.
        let mut unmounted = false;
        for _ in 0..50 {
            if run_quiet(Command::new("umount").arg(&self.mount)).is_ok() {
                unmounted = true;
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if !unmounted {
            if let Err(e) = run_quiet(Command::new("umount").arg("--lazy").arg(&self.mount)) {
                eprintln!("warning: cannot unmount {}: {e}", self.mount.display());
            }
        }
        if let Err(e) = run_quiet(Command::new("losetup").arg("--detach").arg(&self.device)) {
            eprintln!("warning: cannot detach {}: {e}", self.device);
        }
    }
}

/// Run a command, capturing its output; `Err` with its stderr if it fails.
fn run_quiet(cmd: &mut Command) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    match cmd.output() {
        Ok(o) if o.status.success() => Ok(o),
        Ok(o) => Err(format!(
            "{what}: {}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("{what}: {e}")),
    }
}

/// True when the kernel knows `fstype` (after `modprobe`, if needed).
fn kernel_has_fs(fstype: &str) -> bool {
    let listed = || {
        std::fs::read_to_string("/proc/filesystems")
            .unwrap_or_default()
            .lines()
            .any(|l| l.split_whitespace().last() == Some(fstype))
    };
    listed() || (run_quiet(Command::new("modprobe").arg(fstype)).is_ok() && listed())
}

/// A fresh filesystem of type `fstype` (`xfs`, `btrfs`, `ext4`, ...): a
/// sparse 512 MiB image under target/scratch, `mkfs.FSTYPE -q`, attached to a
/// free loop device and mounted on a directory unique to the caller, so
/// tests running in parallel never share a mount point or a device.
///
/// `None` (after printing a "skipped: ..." line) when it cannot be had:
/// - the kernel has no such filesystem (not in /proc/filesystems, even after
///   `modprobe`): a property of the kernel, so skipped also in CI;
/// - loop devices, `mkfs.FSTYPE` or the mount are unavailable (not root, a
///   container without /dev/loop-control, a missing package): skipped
///   locally, but a test failure when the `CI` environment variable is set,
///   because CI must run these tests (scripts/install-deps.sh installs the
///   mkfs tools).
pub fn loop_fs(fstype: &str) -> Option<LoopFs> {
    if !kernel_has_fs(fstype) {
        skip_line(&format!(
            "skipped: this kernel has no {fstype} (not in /proc/filesystems, modprobe {fstype} failed)"
        ));
        return None;
    }
    match make_loop_fs(fstype) {
        Ok(fs) => Some(fs),
        Err(why) => {
            let msg = format!("skipped: cannot make a loop-mounted {fstype}: {why}");
            skip_line(&msg);
            assert!(
                std::env::var_os("CI").is_none(),
                "{msg} (CI is set: these tests must run; run as root with scripts/install-deps.sh)"
            );
            None
        }
    }
}

/// A tmpfs mounted for one test on a directory of its own (see
/// [`tmpfs`]); dropping it unmounts it (retrying while a process the test
/// started is still exiting, lazily as a last resort).
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        for _ in 0..50 {
            if run_quiet(Command::new("umount").arg(self.dir.path())).is_ok() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        if let Err(e) = run_quiet(Command::new("umount").arg("--lazy").arg(self.dir.path())) {
            eprintln!("warning: cannot unmount {}: {e}", self.dir.path().display());
        }
    }
}

/// A tmpfs mounted with `options` (e.g. `huge=always,size=64m`) on a
/// scratch directory; `None` (after a "skipped: ..." line) when it cannot
/// be mounted (not root), a test failure then if `CI` is set.
pub fn tmpfs(options: &str) -> Option<Tmpfs> {
    let dir = scratch();
    match run_quiet(
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "hugetext-test"])
            .arg(dir.path()),
    ) {
        Ok(_) => Some(Tmpfs { dir }),
        Err(why) => {
            let msg = format!("skipped: cannot mount a tmpfs ({options}): {why}");
            skip_line(&msg);
            assert!(
                std::env::var_os("CI").is_none(),
                "{msg} (CI is set: this test must run as root)"
            );
            None
        }
    }
}

/// `hugetext align` of the fixture `linker`/`name` into `dir` (a PIE or
/// DSO with `p_align` of the PMD size: the kernel or ld.so places it so its
/// text is congruent, every process alike). Returns the aligned file.
pub fn aligned_fixture(dir: &Path, linker: &str, name: &str) -> PathBuf {
    let out = dir.join(name);
    let o = hugetext(&[
        "align",
        fixture(linker, name).to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "align: {}", text(&o.stderr));
    out
}

/// kB `ShmemPmdMapped` of the executable mappings of `file` in `pid`
/// (smaps).
pub fn shmem_pmd_kb(pid: i32, file: &Path) -> u64 {
    let f = file.canonicalize().unwrap().to_string_lossy().into_owned();
    hugetext::procfs::read_smaps(Some(pid))
        .unwrap()
        .iter()
        .filter(|(v, _)| v.is_exec() && v.path == f)
        .map(|(_, s)| s.shmem_pmd_kb)
        .sum()
}

/// The running kernel's PMD size in bytes (2 MiB on x86-64, 32 MiB on a
/// 16 KiB-page arm64 kernel): tests compute expectations from it.
pub fn pmd() -> u64 {
    hugetext::kernel::pmd_size() as u64
}

/// [`pmd`] in kB, as JSON reports count.
pub fn pmd_kb() -> u64 {
    pmd() / 1024
}

/// The running kernel's unit of huge text in bytes
/// (`hugetext::kernel::huge_unit`): [`pmd`], except with 64 KiB pages on
/// arm64, where it is the 2 MiB contpte block.
pub fn unit() -> u64 {
    hugetext::kernel::unit_size() as u64
}

/// [`unit`] in kB.
pub fn unit_kb() -> u64 {
    unit() / 1024
}

/// MiB in `n` windows of the running kernel's PMD size (2 MiB on x86-64, 32
/// MiB on a 16 KiB-page arm64 kernel), for [`scratch_file`].
pub fn windows_mib(n: u64) -> usize {
    ((n * pmd()) >> 20) as usize
}

/// MiB in `n` windows of the unit of huge text ([`unit`]), for
/// [`scratch_file`].
pub fn unit_windows_mib(n: u64) -> usize {
    ((n * unit()) >> 20) as usize
}

/// Bytes of `elf`'s executable text in whole windows of the running
/// kernel's unit of huge text (`hugetext check`'s per-segment
/// `whole_windows`, in units of `target.unit`: the PMD, or the 2 MiB
/// contpte block with 64 KiB pages): what the `file` and `copy` routes of
/// `run` make huge in a program whose load base keeps the windows
/// (ET_EXEC, or PIE/DSO placed at a unit-aligned base). 18 MiB for the
/// x86-64 fixtures' 20 MiB of text; more for aarch64's 70 MiB.
pub fn text_window_bytes(elf: &Path) -> u64 {
    let r = hugetext::elf::check_file(elf).unwrap_or_else(|e| panic!("check {}: {e}", elf.display()));
    r.segments
        .iter()
        .filter(|s| s.executable)
        .map(|s| s.whole_windows * r.target.unit)
        .sum()
}

/// Bytes of `[start, end)` of process `pid` in whole windows of the unit
/// each held by one folio of at least the unit: read from `/proc/PID/pagemap`
/// and `/proc/kpageflags` (root), with `hugetext_abi::kpf::block_is_one_folio`,
/// the preload's own test. Where the unit is the 2 MiB contiguous-PTE
/// block (arm64, 64 KiB pages), that is the text arm64 maps with one TLB
/// entry per block; smaps counts PMD mappings only.
pub fn unit_folio_bytes(pid: i32, start: u64, end: u64) -> u64 {
    use std::os::unix::fs::FileExt;
    let (unit, ps) = (unit(), page());
    let np = (unit / ps) as usize;
    let pm = std::fs::File::open(format!("/proc/{pid}/pagemap")).expect("pagemap");
    let kf = std::fs::File::open("/proc/kpageflags").expect("kpageflags (root)");
    let mut bytes = 0;
    let mut w = start.div_ceil(unit) * unit;
    let mut raw = vec![0u8; np * 8];
    while w + unit <= end {
        let read = |f: &std::fs::File, off: u64, raw: &mut [u8]| -> Vec<u64> {
            f.read_exact_at(raw, off).map(|_| ()).unwrap_or_else(|_| raw.fill(0));
            raw.chunks(8)
                .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                .collect()
        };
        let pfns: Vec<u64> = read(&pm, w / ps * 8, &mut raw)
            .into_iter()
            .map(|e| hugetext_abi::pagemap::pfn(e).unwrap_or(0))
            .collect();
        if pfns[0] != 0 {
            let flags = read(&kf, pfns[0] * 8, &mut raw);
            if hugetext_abi::kpf::block_is_one_folio(&pfns, &flags) {
                bytes += unit;
            }
        }
        w += unit;
    }
    bytes
}

/// Is the unit of huge text an arm64 contiguous-PTE block (64 KiB pages)?
pub fn contpte_unit() -> bool {
    hugetext::kernel::huge_unit().1 == hugetext::elf::HugeUnit::Contpte
}

/// Where the loader will not place the shared object `elf` at a PMD-aligned
/// base, rewrite it with `hugetext align`, as a user would. glibc aligns an
/// object's base to its largest `p_align` when that exceeds the page size
/// (aarch64 linkers default to 64 KiB), which overrides the kernel's habit
/// of placing file mappings of a PMD or more PMD-aligned; `align` raises
/// `p_align` to the unit of huge text. True if it rewrote the file (never on
/// x86-64, whose fixtures have a 4 KiB `p_align`).
pub fn align_if_loader_misaligns(elf: &Path) -> bool {
    let r = hugetext::elf::check_file(elf).unwrap_or_else(|e| panic!("check {}: {e}", elf.display()));
    // With 64 KiB pages nothing places an object at a 2 MiB-aligned base
    // by itself (the kernel aligns file mappings to its 512 MiB PMD only):
    // `align` raises p_align to the 2 MiB unit there too.
    if r.max_p_align >= r.target.unit || (r.max_p_align <= page() && !contpte_unit()) {
        return false;
    }
    let o = hugetext(&["align", elf.to_str().unwrap()]);
    assert!(
        o.status.success(),
        "hugetext align {}: {}",
        elf.display(),
        text(&o.stderr)
    );
    true
}

/// A byte count as the preload and the CLI print it: MiB with one decimal.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
}

/// The running kernel's base page size in bytes (4 KiB on x86-64; 4, 16 or
/// 64 KiB on arm64).
pub fn page() -> u64 {
    hugetext::kernel::page_size() as u64
}

/// Print a line that shows in a normal `cargo test` run: libtest captures
/// what `println!`/`eprintln!` print, not direct writes to stderr.
pub fn skip_line(msg: &str) {
    let _ = writeln!(std::io::stderr(), "{msg}");
}

fn make_loop_fs(fstype: &str) -> Result<LoopFs, String> {
    if !Path::new("/dev/loop-control").exists() {
        return Err("no /dev/loop-control (loop driver missing or not visible here)".into());
    }
    let mkfs = format!("mkfs.{fstype}");
    let dir = scratch();
    let image = dir.path().join(format!("{fstype}.img"));
    let mount = dir.path().join("mnt");
    std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
    std::fs::File::create(&image)
        .and_then(|f| f.set_len(512 << 20))
        .map_err(|e| format!("{}: {e}", image.display()))?;
    run_quiet(Command::new(&mkfs).arg("-q").arg(&image)).map_err(|e| match e.contains("No such file") {
        true => format!("{mkfs} not installed (scripts/install-deps.sh)"),
        false => e,
    })?;
    let out = run_quiet(Command::new("losetup").args(["--find", "--show"]).arg(&image))?;
    let device = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if let Err(e) = run_quiet(Command::new("mount").args(["-t", fstype]).arg(&device).arg(&mount)) {
        let _ = run_quiet(Command::new("losetup").arg("--detach").arg(&device));
        return Err(e);
    }
    Ok(LoopFs {
        fstype: fstype.to_string(),
        device,
        mount,
        _dir: dir,
    })
}

/// The name libtest gives the test function `name` of the module whose
/// `module_path!()` is `module` (the test binary's crate name left out), for
/// a test that runs one test of its own binary (`--exact NAME`).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, inner)) => format!("{inner}::{name}"),
        None => name.to_string(),
    }
}

/// `p` as a command-line argument (test paths are UTF-8).
pub fn path_str(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Lossy UTF-8 of captured output.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The JSON on `out`'s stdout; a test failure (with stderr) unless the
/// command succeeded and printed JSON.
pub fn json_of(out: &Output) -> serde_json::Value {
    assert!(out.status.success(), "failed: {}\n{}", out.status, text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON ({e}): {}", text(&out.stdout)))
}

/// `hugetext ARGS`, which must succeed and print JSON: the JSON.
pub fn hugetext_json(args: &[&str]) -> serde_json::Value {
    let out = hugetext(args);
    assert!(out.status.success(), "hugetext {args:?}: {}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("hugetext {args:?}: bad JSON ({e})"))
}

/// The keys of a JSON object, sorted.
pub fn keys(v: &serde_json::Value) -> Vec<&str> {
    let mut k: Vec<&str> = v
        .as_object()
        .unwrap_or_else(|| panic!("not an object: {v}"))
        .keys()
        .map(String::as_str)
        .collect();
    k.sort_unstable();
    k
}

/// A free port on 127.0.0.1, as `ADDR:PORT` (bound, then released for the
/// server under test).
pub fn free_addr() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().to_string()
}

/// The value of the sample `name{labels}` (labels as written) in a
/// Prometheus text page.
pub fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// A `kB` field of `/proc/PID/status` (`VmRSS`, `VmHWM:`: the colon is
/// optional); 0 when the field is absent.
pub fn status_kb(pid: i32, field: &str) -> u64 {
    let field = field.strip_suffix(':').unwrap_or(field);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(|v| v.trim().trim_end_matches("kB").trim().parse().unwrap())
        .unwrap_or(0)
}

/// Poll `f` every `every` until it gives a value, for at most `within`
/// (make it generous: CI machines are loaded); a test failure naming
/// `what` (and what `why` says then) when time is up.
pub fn wait_for<T>(
    what: &str,
    within: std::time::Duration,
    every: std::time::Duration,
    mut f: impl FnMut() -> Option<T>,
    why: impl Fn() -> String,
) -> T {
    let t = std::time::Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(t.elapsed() < within, "{what}: not within {within:?}\n{}", why());
        std::thread::sleep(every);
    }
}

/// Wait (up to 120 s) until `n` windows of `file` are in PMD-size
/// page-cache folios; `why` adds to the failure (a log, say).
pub fn wait_pmd_windows(file: &Path, n: usize, why: impl Fn() -> String) {
    let have = std::cell::Cell::new(0);
    wait_for(
        &format!("{}: {n} windows in PMD folios", file.display()),
        std::time::Duration::from_secs(120),
        std::time::Duration::from_millis(250),
        || {
            have.set(hugetext::folio::scan_file(file, None).unwrap().unit_windows.len());
            (have.get() == n).then_some(())
        },
        || format!("{} of {n}; {}", have.get(), why()),
    )
}

/// A huge tmpfs (`huge=always`) with the bfd PIE fixture aligned on it and
/// running, its text PMD-mapped from shmem: the tmpfs, the file, the
/// process and its `ShmemPmdMapped` kB. `None` (after a "skipped: ..."
/// line) where the unit of huge text is the contpte block or no tmpfs can
/// be mounted.
pub fn huge_tmpfs_text() -> Option<(Tmpfs, PathBuf, Running, u64)> {
    if contpte_unit() {
        skip_line("skipped: the unit of huge text is the contpte block here");
        return None;
    }
    let fs = tmpfs("huge=always,size=64m")?;
    let p = aligned_fixture(fs.path(), "bfd", "pie");
    let r = Running::fixture(&p);
    let shmem_pmd = shmem_pmd_kb(r.pid(), &p);
    assert!(
        shmem_pmd >= 8 * pmd_kb(),
        "a huge tmpfs gave the aligned PIE's text no PMD mappings: ShmemPmdMapped {shmem_pmd} kB"
    );
    Some((fs, p, r, shmem_pmd))
}

/// Spawn `cmd`, retrying while the executable is briefly busy (`ETXTBSY`: a
/// file just written by this test run, whose write descriptor a concurrent
/// fork still holds).
pub fn spawn_retry(cmd: &mut Command) -> std::process::Child {
    for _ in 0..100 {
        match cmd.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r.expect("spawn"),
        }
    }
    panic!("executable stayed busy (ETXTBSY)");
}

/// A fixture (or `hugetext run … -- FIXTURE`) started with the `wait`
/// argument: it has printed its result line and "ready", and blocks until its
/// stdin closes. Dropping it closes stdin and reaps it.
pub struct Running {
    pub child: std::process::Child,
    /// The program's first output line (`sum=… pages=…`).
    pub first_line: String,
}

impl Running {
    /// Start `cmd`, which must already carry the `wait` argument.
    pub fn start(mut cmd: Command) -> Running {
        use std::io::{BufRead, BufReader};
        use std::process::Stdio;
        let mut child = spawn_retry(cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()));
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (mut first, mut ready) = (String::new(), String::new());
        out.read_line(&mut first).unwrap();
        out.read_line(&mut ready).unwrap();
        if ready.trim() != "ready" {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!("program not ready: {first:?} {ready:?} stderr: {}", text(&o.stderr));
        }
        Running {
            child,
            first_line: first.trim().to_string(),
        }
    }

    /// Start the fixture `exe` with `wait`.
    pub fn fixture(exe: &Path) -> Running {
        let mut cmd = Command::new(exe);
        cmd.arg("wait");
        Running::start(cmd)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// (FilePmdMapped, AnonHugePages, Anonymous) bytes of the executable
    /// mappings of `file` in this process. Where the unit of huge text is
    /// the contpte block (arm64, 64 KiB pages), the first two are the bytes
    /// of file text and of copied text in whole blocks of one folio of at
    /// least the unit ([`unit_folio_bytes`]) instead: what is huge there.
    pub fn huge_of(&self, file: &Path) -> (u64, u64, u64) {
        huge_of_pid(self.pid(), file)
    }

    /// Close stdin and wait: the program must exit 0. Returns its stderr.
    pub fn stop(mut self) -> String {
        use std::io::Read;
        drop(self.child.stdin.take());
        let mut err = String::new();
        if let Some(mut e) = self.child.stderr.take() {
            e.read_to_string(&mut err).unwrap();
        }
        let st = self.child.wait().unwrap();
        assert!(st.success(), "program failed: {st:?} {err}");
        err
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// [`Running::huge_of`] for any process `pid`: (FilePmdMapped,
/// AnonHugePages, Anonymous) bytes of the executable mappings of `file`.
pub fn huge_of_pid(pid: i32, file: &Path) -> (u64, u64, u64) {
    let f = file.canonicalize().unwrap().to_string_lossy().into_owned();
    let ms: Vec<_> = hugetext::run::remap::text_mappings(pid)
        .unwrap()
        .into_iter()
        .filter(|m| m.path == f)
        .collect();
    if contpte_unit() {
        let of = |copied: bool| -> u64 {
            ms.iter()
                .filter(|m| m.copied == copied)
                .map(|m| unit_folio_bytes(pid, m.start, m.end))
                .sum()
        };
        return (of(false), of(true), ms.iter().map(|m| m.anonymous).sum());
    }
    (
        ms.iter().map(|m| m.file_pmd).sum(),
        ms.iter().map(|m| m.anon_huge).sum(),
        ms.iter().map(|m| m.anonymous).sum(),
    )
}

/// Fill a file's page cache the way programs load: evict it, then a cold
/// PROT_EXEC fault of every page with no madvise (4 KiB folios on x86).
pub fn read_small(p: &Path) {
    use hugetext::kernel::{self, Mapping};
    use std::os::fd::AsFd;
    let f = std::fs::File::open(p).unwrap();
    hugetext::pagecache::evict(&f, 0..0).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    let m = Mapping::file_congruent(f.as_fd(), 0, len, libc::PROT_READ | libc::PROT_EXEC, kernel::pmd_size()).unwrap();
    for off in (0..len).step_by(kernel::page_size()) {
        // SAFETY: inside the mapping.
        unsafe { std::ptr::read_volatile(m.as_ptr().add(off)) };
    }
}

/// Remove the perf map a process whose text was copied left (pids are
/// reused, and the preload appends to an existing map of the same owner).
pub fn remove_perf_map(pid: u32) {
    let _ = std::fs::remove_file(format!("/tmp/perf-{pid}.map"));
}

/// Run `cmd` (stdin from /dev/null, output captured) and remove the perf map
/// it may leave.
pub fn output_without_perf_map(cmd: &mut Command) -> Output {
    use std::process::Stdio;
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let pid = child.id();
    let o = child.wait_with_output().expect("wait");
    remove_perf_map(pid);
    o
}

/// `setpriv` as user and group `nobody` with no capabilities; append the
/// program and its arguments.
pub fn as_nobody() -> Command {
    let mut cmd = Command::new("setpriv");
    cmd.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--",
    ]);
    cmd
}

/// `target/<profile>/libhugetext.so`, which `hugetext run` injects.
pub fn preload() -> PathBuf {
    let p = target_profile_dir().join("libhugetext.so");
    assert!(
        p.exists(),
        "{} missing: build the workspace first (cargo build --release)",
        p.display()
    );
    p
}

/// Set `HUGETEXT_COMPAT` (the preload's old-kernel fallbacks) on `cmd`, or
/// make sure it is unset.
pub fn with_compat(cmd: &mut Command, compat: Option<&str>) {
    match compat {
        Some(c) => cmd.env(settings::COMPAT, c),
        None => cmd.env_remove(settings::COMPAT),
    };
}

/// `hugetext run ARGS -- PROG wait`, with `HUGETEXT_COMPAT=compat` (None:
/// unset) and no strategy or verbosity inherited from the environment.
pub fn run_waiting_with(compat: Option<&str>, args: &[&str], prog: &Path) -> Running {
    Running::start(run_waiting_command(compat, args, prog))
}

/// [`run_waiting_with`] with `HUGETEXT_REPORT=json`: read each pass's
/// numbers from the stderr of [`Running::stop`] with [`records`].
pub fn run_waiting_recorded(compat: Option<&str>, args: &[&str], prog: &Path) -> Running {
    let mut cmd = run_waiting_command(compat, args, prog);
    cmd.env(hugetext_abi::settings::REPORT, "json");
    Running::start(cmd)
}

fn run_waiting_command(compat: Option<&str>, args: &[&str], prog: &Path) -> Command {
    preload();
    let mut cmd = Command::new(bin());
    cmd.arg("run")
        .args(args)
        .arg("--")
        .arg(prog)
        .arg("wait")
        .env_remove(settings::STRATEGY)
        .env_remove(settings::VERBOSE);
    with_compat(&mut cmd, compat);
    cmd
}

/// The records `HUGETEXT_REPORT=json` adds to stderr, parsed (panics on a
/// record that is not JSON).
pub fn records(err: &str) -> Vec<serde_json::Value> {
    err.lines()
        .filter_map(|l| l.strip_prefix(hugetext_abi::report::PREFIX))
        .map(|j| serde_json::from_str(j).unwrap_or_else(|e| panic!("{e}: {j}")))
        .collect()
}

/// The last record of a pass at start (not over objects loaded later with
/// dlopen) in `err`; panics, showing `err`, when there is none.
pub fn start_record(err: &str) -> serde_json::Value {
    records(err)
        .into_iter()
        .rev()
        .find(|r| r["late"] == 0)
        .unwrap_or_else(|| panic!("no record of a pass at start: {err}"))
}

/// `hugetext run ARGS -- PROG wait`.
pub fn run_waiting(args: &[&str], prog: &Path) -> Running {
    run_waiting_with(None, args, prog)
}

/// The C test programs, built once per test binary by
/// tests/fixtures/mkctests.sh (already built where `HUGETEXT_TEST_PREBUILT` is
/// set, as in the kernel matrix; see [`prebuilt`]).
pub fn cprogs() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = target_profile_dir().join("../ctests");
        if !prebuilt() {
            let st = std::process::Command::new("bash")
                .arg(root().join("tests/fixtures/mkctests.sh"))
                .arg(&dir)
                .arg(target_profile_dir())
                .arg(fixtures())
                .status()
                .expect("run mkctests.sh");
            assert!(st.success(), "mkctests.sh failed");
        }
        dir.canonicalize().unwrap()
    })
}

/// A fresh scratch directory (mode 0755, so the account can traverse it)
/// holding `attacker/`, a directory the unprivileged [`attacker`] account
/// owns: where a hostile test's user keeps what it "made".
pub fn attacker_home() -> (tempfile::TempDir, PathBuf) {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let home = dir.path().canonicalize().unwrap().join("attacker");
    std::fs::create_dir(&home).unwrap();
    let (uid, gid) = attacker();
    std::os::unix::fs::chown(&home, Some(uid), Some(gid)).unwrap();
    (dir, home)
}

/// A dedicated unprivileged local account for the hostile-input tests
/// (`tests/hostile/`): created on first use with `useradd` (CI runs as
/// root on a fresh machine), reused afterwards. Returns its uid and gid.
pub fn attacker() -> (u32, u32) {
    static IDS: OnceLock<(u32, u32)> = OnceLock::new();
    *IDS.get_or_init(|| {
        const NAME: &str = "ht-attacker";
        let id = |flag: &str| -> Option<u32> {
            let o = Command::new("id").args([flag, NAME]).output().ok()?;
            if !o.status.success() {
                return None;
            }
            String::from_utf8_lossy(&o.stdout).trim().parse().ok()
        };
        if id("-u").is_none() {
            let st = Command::new("useradd")
                .args([
                    "--system",
                    "--no-create-home",
                    "--shell",
                    "/usr/sbin/nologin",
                    "--user-group",
                    NAME,
                ])
                .status()
                .expect("run useradd (package passwd)");
            // Another test binary may have created it meanwhile.
            assert!(st.success() || id("-u").is_some(), "useradd {NAME} failed");
        }
        (
            id("-u").expect("uid of ht-attacker"),
            id("-g").expect("gid of ht-attacker"),
        )
    })
}

/// `setpriv` as the [`attacker`] account (its own group, no supplementary
/// groups, no capabilities); append the program and its arguments.
pub fn as_attacker() -> Command {
    let (uid, gid) = attacker();
    let mut cmd = Command::new("setpriv");
    cmd.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={gid}"))
        .args(["--clear-groups", "--inh-caps=-all", "--"]);
    cmd
}

/// Every regular file, directory and link below `dir` with its size, mode,
/// owner and mtime: snapshot it before a hostile case and compare after, to
/// assert that nothing outside the case's scratch directory changed.
pub fn tree_state(dir: &Path) -> Vec<(PathBuf, u64, u32, u32, i64, i64)> {
    use std::os::unix::fs::MetadataExt;
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            let Ok(m) = std::fs::symlink_metadata(&p) else { continue };
            out.push((p.clone(), m.len(), m.mode(), m.uid(), m.mtime(), m.mtime_nsec()));
            if m.is_dir() {
                stack.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The hot-windows fixture (tests/fixtures/hotcold.c): 100 MiB of text in
/// whole 2 MiB windows whose hot path is 8 MiB (four windows). Built once per
/// test binary with gcc into `target/<profile>/hotcold/`.
pub fn hotcold() -> &'static Path {
    static P: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    P.get_or_init(|| {
        let dir = target_profile_dir().join("hotcold");
        std::fs::create_dir_all(&dir).unwrap();
        let exe = dir.join(format!("hotcold-{}", std::process::id()));
        let st = Command::new("gcc")
            .args(["-O2", "-Wl,-z,max-page-size=0x200000", "-o"])
            .arg(&exe)
            .arg(root().join("tests/fixtures/hotcold.c"))
            .status()
            .expect("gcc (scripts/install-deps.sh)");
        assert!(st.success(), "building the hotcold fixture failed");
        let fixed = dir.join("hotcold");
        std::fs::rename(&exe, &fixed).unwrap();
        fixed
    })
}

/// A profile of [`hotcold`] written by hand into `dir`: its hot path (main's
/// window and the three windows of stubs, file offsets 4–12 MiB) holds every
/// sample. Returns its path.
pub fn hotcold_profile(dir: &Path) -> PathBuf {
    let exe = hotcold().to_str().unwrap().to_string();
    let id = hugetext::profile::attrib::build_id(&exe);
    let windows: Vec<_> = [(0x400000u64, 40u64), (0x600000, 20), (0x800000, 20), (0xa00000, 20)]
        .iter()
        .map(|&(offset, count)| serde_json::json!({ "offset": offset, "count": count }))
        .collect();
    let prof = serde_json::json!({
        "format": "hugetext-profile", "version": 1, "source": "sampling", "unit": "samples",
        "page_size": 4096, "pmd_size": pmd(), "total": 100, "unattributed": 0,
        "files": [{ "path": exe, "build_id": id, "text": [[0x200000, 0x6600000]], "count": 100,
                    "pages": [], "windows": windows }]
    });
    let p = dir.join("hotcold-profile.json");
    std::fs::write(&p, prof.to_string()).unwrap();
    p
}

/// What [`measured`] saw of one command.
pub struct Measured {
    /// Its status and captured output (killed by SIGKILL when it timed out).
    pub output: Output,
    /// Wall time until it ended (or was killed).
    pub elapsed: std::time::Duration,
    /// Its peak resident memory, kB (`ru_maxrss` of this child alone).
    pub max_rss_kb: u64,
    /// Still running at the deadline: killed.
    pub timed_out: bool,
}

/// Run `cmd` (stdin from /dev/null, output captured) and measure it: its
/// wall time and its own peak RSS. Killed if still running after `timeout`,
/// so that a test of a bound stops by itself on code that has none.
///
/// The peak comes from GNU `time` (`%M`), which forks the command from its
/// own small process: a child of this test process would count this
/// process's peak too, since `exec` keeps the peak of the memory it
/// replaces in `ru_maxrss`, and that memory is a copy of this (fat, many
/// tests at once) process's.
pub fn measured(cmd: &mut Command, timeout: std::time::Duration) -> Measured {
    measured_fed(cmd, timeout, None)
}

/// The peak GNU `time` wrote: the last line (it puts "Command exited with
/// non-zero status" or "terminated by signal" before it). Killed together
/// with time at a timeout: nothing written, 0.
fn peak_kb(report: &Path, timed_out: bool) -> u64 {
    let text = std::fs::read_to_string(report).unwrap_or_default();
    match text.lines().last().and_then(|l| l.trim().parse().ok()) {
        Some(kb) => kb,
        None if timed_out => 0,
        None => panic!("no peak memory in GNU time's report: {text:?}"),
    }
}

/// What writes a command's standard input (on a thread of its own).
pub type Feed = Box<dyn FnOnce(std::process::ChildStdin) + Send>;

/// [`measured`], with `feed` writing the command's standard input (none:
/// /dev/null): input of any size without a file.
pub fn measured_fed(cmd: &mut Command, timeout: std::time::Duration, feed: Option<Feed>) -> Measured {
    use std::io::Read;
    use std::os::unix::process::CommandExt;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let t0 = std::time::Instant::now();
    let peak = tempfile::NamedTempFile::new().expect("a temporary file for time's report");
    let mut timed = Command::new("/usr/bin/time");
    timed
        .arg("-f")
        .arg("%M")
        .arg("-o")
        .arg(peak.path())
        .arg(cmd.get_program())
        .args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => timed.env(k, v),
            None => timed.env_remove(k),
        };
    }
    if let Some(d) = cmd.get_current_dir() {
        timed.current_dir(d);
    }
    // Its own process group: a timeout kills time and the command together.
    timed.process_group(0);
    let cmd = &mut timed;
    cmd.stdin(if feed.is_some() { Stdio::piped() } else { Stdio::null() });
    // Reaped below by wait4 (Child::wait would do too; wait4 polls).
    #[allow(clippy::zombie_processes)]
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    if let (Some(feed), Some(stdin)) = (feed, child.stdin.take()) {
        // A writer killed with its reader gets EPIPE, not a hang.
        std::thread::spawn(move || feed(stdin));
    }
    let pid = child.id() as libc::pid_t;
    let mut timed_out = false;
    let (status, _) = loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage is valid; wait4 fills it for our own child.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if timed_out { 0 } else { libc::WNOHANG };
        // SAFETY: status and ru are valid for writing.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            break (status, ru);
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if t0.elapsed() > timeout {
            // SAFETY: the process group our child leads (not yet reaped).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            timed_out = true;
        } else {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    };
    Measured {
        elapsed: t0.elapsed(),
        output: Output {
            status: std::process::ExitStatus::from_raw(status),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        },
        max_rss_kb: peak_kb(peak.path(), timed_out),
        timed_out,
    }
}

/// A text store (`hugetext warm --shmem --store DIR`) of one test: a fresh
/// directory in a scratch directory, where `warm --shmem` mounts its
/// tmpfs; unmounted and removed when dropped.
pub struct TextStore {
    pub dir: PathBuf,
    _scratch: tempfile::TempDir,
}

impl TextStore {
    /// A new, empty (not yet mounted) store directory, traversable by all.
    pub fn new() -> TextStore {
        use std::os::unix::fs::PermissionsExt;
        let s = scratch();
        std::fs::set_permissions(s.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dir = s.path().canonicalize().unwrap().join("store");
        TextStore { dir, _scratch: s }
    }

    /// `hugetext warm --shmem --store DIR ARGS`.
    pub fn warm(&self, args: &[&str]) -> Output {
        Command::new(bin())
            .args(["warm", "--shmem", "--store"])
            .arg(&self.dir)
            .args(["--shmem-size", "256M"])
            .args(args)
            .output()
            .unwrap()
    }

    /// `hugetext warm --shmem --store DIR FILE` that must succeed.
    pub fn add(&self, file: &Path) -> String {
        let o = self.warm(&[file.to_str().unwrap()]);
        assert!(
            o.status.success(),
            "warm --shmem {}: {}{}",
            file.display(),
            text(&o.stdout),
            text(&o.stderr)
        );
        text(&o.stdout)
    }
}

impl Default for TextStore {
    fn default() -> Self {
        TextStore::new()
    }
}

impl Drop for TextStore {
    fn drop(&mut self) {
        // Lazily: a process of a failed test may still map a copy.
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// (ShmemPmdMapped, Private_Clean + Private_Dirty, Shared_Clean +
/// Shared_Dirty) bytes of the executable mappings of `pid` whose file lies
/// in `dir` (a text store).
pub fn store_text(pid: i32, dir: &Path) -> (u64, u64, u64) {
    let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let prefix = format!("{}/", dir.display());
    let (mut pmd, mut private, mut shared) = (0, 0, 0);
    let mut mine = false;
    for l in smaps.lines() {
        let f: Vec<&str> = l.split_whitespace().collect();
        if f.first().is_some_and(|a| a.contains('-') && !a.ends_with(':')) {
            mine = f.len() >= 6 && f[1] == "r-xp" && f[5].starts_with(&prefix);
            continue;
        }
        if !mine || f.len() < 2 {
            continue;
        }
        let kb: u64 = f[1].parse().unwrap_or(0);
        match f[0] {
            "ShmemPmdMapped:" => pmd += kb << 10,
            "Private_Clean:" | "Private_Dirty:" => private += kb << 10,
            "Shared_Clean:" | "Shared_Dirty:" => shared += kb << 10,
            _ => {}
        }
    }
    (pmd, private, shared)
}

/// A cgroup in the unified (v2) hierarchy, made for a test and removed when
/// dropped (processes still inside go back to the hierarchy's root first).
/// Made where systemd or a container runtime would make it, it is what
/// their workloads' processes are in: `/system.slice/NAME.service` is a
/// unit's cgroup as `/proc/PID/cgroup` shows it.
pub struct Cgroup {
    /// The directory under the hierarchy's mount.
    pub dir: PathBuf,
    /// Its path as `/proc/PID/cgroup` shows it (`/a/b`).
    pub name: String,
    /// The directories made for it, deepest first (removed on drop).
    made: Vec<PathBuf>,
}

impl Cgroup {
    /// Make cgroup `name` (an absolute cgroup path); None without a v2
    /// hierarchy or when it cannot be made.
    pub fn new(name: &str) -> Option<Cgroup> {
        let base = ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(Path::new)
            .find(|b| b.join("cgroup.procs").exists())?;
        let dir = base.join(name.trim_start_matches('/'));
        let mut made = Vec::new();
        let mut d = dir.clone();
        while !d.exists() {
            made.push(d.clone());
            d = d.parent()?.to_path_buf();
        }
        std::fs::create_dir_all(&dir).ok()?;
        Some(Cgroup {
            dir,
            name: name.to_string(),
            made,
        })
    }

    /// Move process `pid` into it.
    pub fn enter(&self, pid: i32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string()).unwrap();
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        let root = self
            .made
            .last()
            .map_or(self.dir.parent().unwrap(), |d| d.parent().unwrap())
            .join("cgroup.procs");
        for pid in std::fs::read_to_string(self.dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            let _ = std::fs::write(&root, pid);
        }
        for d in &self.made {
            for _ in 0..100 {
                if std::fs::remove_dir(d).is_ok() || !d.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
    }
}

/// Is the environment entry `e` one `hugetext run` put there for the
/// preload: a setting, a loader list naming libhugetext.so, or the
/// `GLIBC_TUNABLES` value it sets?
pub fn is_ours(e: &str) -> bool {
    e.starts_with(settings::PREFIX)
        || (e.starts_with("LD_") && e.contains("libhugetext"))
        || e.contains("optional_static_tls")
}

/// The entries of `pid`'s `/proc/PID/environ` that [`is_ours`] (empty
/// when the process is gone).
pub fn ours_in_environ(pid: i32) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&c| c == 0)
        .map(|e| String::from_utf8_lossy(e).into_owned())
        .filter(|e| is_ours(e))
        .collect()
}

/// A postgres cluster of Debian's postgresql, made for one test: a
/// `postgres`-owned home in a 0755 scratch directory, `initdb` run as
/// postgres, and `pg_ctl stop -m immediate` when dropped (a server that
/// never started makes that a no-op).
pub struct PgCluster {
    /// The directory of `pg_ctl`, `initdb` and `postgres`.
    pub bin: PathBuf,
    /// The postgres-owned directory holding `data`, the socket and the log.
    pub home: PathBuf,
    /// The cluster's data directory.
    pub data: PathBuf,
    _dir: tempfile::TempDir,
}

impl PgCluster {
    /// A fresh cluster, or `None` (with the skip line said) when
    /// postgresql is not installed.
    pub fn init() -> Option<PgCluster> {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .filter_map(|e| Some(e.ok()?.path().join("bin")))
            .find(|b| ["pg_ctl", "initdb", "postgres"].iter().all(|f| b.join(f).exists()));
        let Some(bin) = bin else {
            skip_line("postgresql not installed: skipped");
            return None;
        };
        let dir = scratch();
        std::fs::set_permissions(dir.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let home = dir.path().join("pg");
        assert!(Command::new("install")
            .args(["-d", "-o", "postgres", "-g", "postgres"])
            .arg(&home)
            .status()
            .unwrap()
            .success());
        let data = home.join("data");
        let c = PgCluster {
            bin,
            home,
            data,
            _dir: dir,
        };
        let o = c
            .as_postgres(&c.bin.join("initdb"))
            .arg("-D")
            .arg(&c.data)
            .output()
            .unwrap();
        assert!(o.status.success(), "initdb: {}", text(&o.stderr));
        Some(c)
    }

    /// `runuser -u postgres -- prog`: append its arguments.
    pub fn as_postgres(&self, prog: &Path) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(prog);
        c
    }

    /// `pg_ctl`'s path.
    pub fn pg_ctl(&self) -> PathBuf {
        self.bin.join("pg_ctl")
    }

    /// The `-o` options of a server on port 5432 with its socket in
    /// [`PgCluster::home`] and no TCP listener.
    pub fn server_options(&self) -> String {
        format!("-p 5432 -k {} -c listen_addresses=", self.home.display())
    }

    /// The postmaster's pid, from `postmaster.pid`.
    pub fn postmaster(&self) -> i32 {
        std::fs::read_to_string(self.data.join("postmaster.pid"))
            .unwrap()
            .lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .expect("the postmaster's pid")
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = self
            .as_postgres(&self.pg_ctl())
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "immediate", "-w", "-t", "300", "stop"])
            .output();
    }
}
