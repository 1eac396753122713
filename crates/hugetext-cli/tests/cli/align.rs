//! `hugetext align` against real binaries from ld.bfd, lld and mold, run on
//! the real kernel: the aligned programs print exactly what the originals
//! print, and once the page cache holds PMD folios their text is PMD-mapped.

use common::path_str as s;
use hugetext_testkit as common;

use std::ffi::CString;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

const MIB: u64 = 1 << 20;

/// doc/kernel-facts.md §1: evict the file's page cache, then fault it in through a
/// 2 MiB-congruent MADV_HUGEPAGE mapping, so the page cache holds PMD-order
/// folios. Local to this test on purpose: `warm` is another module.
fn fill_pmd_page_cache(path: &Path) {
    let f = fs::File::open(path).unwrap();
    let len = f.metadata().unwrap().len() as usize;
    use std::os::unix::io::AsRawFd;
    let fd = f.as_raw_fd();
    // SAFETY: fd is an open descriptor of ours; the fixed mapping lands
    // inside a reservation this function just made and owns.
    unsafe {
        // Dirty pages (a fresh copy) are not evicted: write them back first.
        assert_eq!(libc::fsync(fd), 0);
        assert_eq!(libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED), 0);
        // Reserve len + 2 MiB, then map the file at a 2 MiB-aligned address
        // inside it: address ≡ file offset (mod 2 MiB) everywhere.
        let resv = libc::mmap(
            std::ptr::null_mut(),
            len + (common::pmd() as usize),
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        assert_ne!(resv, libc::MAP_FAILED);
        let aligned =
            ((resv as usize + (common::pmd() as usize) - 1) & !((common::pmd() as usize) - 1)) as *mut libc::c_void;
        let p = libc::mmap(
            aligned,
            len,
            libc::PROT_READ | libc::PROT_EXEC,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd,
            0,
        );
        assert_eq!(p, aligned, "mmap {}", std::io::Error::last_os_error());
        assert_eq!(libc::madvise(p, len, libc::MADV_HUGEPAGE), 0, "madvise(MADV_HUGEPAGE)");
        const MADV_POPULATE_READ: libc::c_int = 22;
        assert_eq!(
            libc::madvise(p, len, MADV_POPULATE_READ),
            0,
            "MADV_POPULATE_READ: {}",
            std::io::Error::last_os_error()
        );
        libc::munmap(resv, len + (common::pmd() as usize));
    }
}

/// Sum FilePmdMapped of the r-x mappings of `file` in /proc/PID/smaps, and
/// list their (start, offset).
fn smaps_file_pmd(pid: u32, file: &Path) -> (u64, Vec<(u64, u64)>) {
    let smaps = fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap();
    let want = file.canonicalize().unwrap();
    let mut total = 0;
    let mut maps = Vec::new();
    let mut in_text = false;
    for line in smaps.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if fields.len() >= 5 && fields[0].contains('-') && !fields[0].ends_with(':') {
            let path = fields.get(5).map(|s| PathBuf::from(*s));
            in_text = fields[1].contains('x') && path.as_deref() == Some(want.as_path());
            if in_text {
                let start = u64::from_str_radix(fields[0].split('-').next().unwrap(), 16).unwrap();
                let off = u64::from_str_radix(fields[2], 16).unwrap();
                maps.push((start, off));
            }
        } else if in_text && fields.first() == Some(&"FilePmdMapped:") {
            total += fields[1].parse::<u64>().unwrap() * 1024;
        }
    }
    assert!(
        !maps.is_empty(),
        "no executable mapping of {} in pid {pid}",
        want.display()
    );
    (total, maps)
}

fn run_output(exe: &Path) -> String {
    let out = common::spawn_retry(Command::new(exe).stdout(Stdio::piped()))
        .wait_with_output()
        .unwrap();
    assert!(out.status.success(), "{} failed", exe.display());
    String::from_utf8(out.stdout).unwrap()
}

fn align(args: &[&str]) -> (i32, String, String) {
    let out = common::hugetext(&[&["align"], args].concat());
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// After align, in the running `r`: every text mapping of `file` is at a
/// 2 MiB-congruent address and at least 16 MiB of it is PMD-mapped (`before`:
/// FilePmdMapped before align, for the message and the log line).
fn assert_aligned_and_huge(r: &common::Running, file: &Path, what: &str, before: u64) {
    let (after, maps) = smaps_file_pmd(r.child.id(), file);
    for (start, off) in &maps {
        assert_eq!(
            (start - off) % common::pmd(),
            0,
            "{what}: aligned text mapped at {start:#x} for offset {off:#x}"
        );
    }
    assert!(
        after >= 16 * MIB,
        "{what}: FilePmdMapped {after} after align (before {before})"
    );
    eprintln!(
        "{what}: text FilePmdMapped {} KiB before align, {} KiB after",
        before / 1024,
        after / 1024
    );
}

/// Before: what the unaligned file gets. A PIE whose p_align is below the
/// PMD size lands at a random base aligned only to p_align, so its text is
/// congruent (address - offset a multiple of the PMD size) only by chance:
/// 1 in 512 for x86-64's 4 KiB, 1 in 32 for aarch64's 64 KiB with 2 MiB
/// PMDs, whether or not the linker skewed the text against the base (the
/// skew is only a fixed offset from that random base). Text that is not
/// congruent must not be PMD-mapped.
fn assert_before(pmd: u64, maps: &[(u64, u64)]) {
    let congruent = maps
        .iter()
        .any(|(start, off)| (start.wrapping_sub(*off)) % common::pmd() == 0);
    if !congruent {
        assert_eq!(pmd, 0, "unaligned text should not be PMD-mapped (maps {maps:x?})");
    }
}

/// The whole proof for one linker: PIE (in place), non-PIE (-o), and a
/// shared library used by a program.
fn prove(linker: &str) {
    let dir = common::scratch();
    let d = dir.path();
    let skewed = linker != "bfd";

    // --- PIE, aligned in place -------------------------------------------
    let pie = common::copy_fixture(d, linker, "pie");
    let expected = run_output(&pie);
    fill_pmd_page_cache(&pie);
    let r = common::Running::fixture(&pie);
    let (before, maps) = smaps_file_pmd(r.child.id(), &pie);
    assert_before(before, &maps);
    r.stop();
    let (code, out, err) = align(&[s(&pie)]);
    assert_eq!(code, 0, "align {linker}/pie: {out}{err}");
    assert_eq!(
        run_output(&pie),
        expected,
        "{linker}/pie prints something else after align"
    );
    fill_pmd_page_cache(&pie);
    let r = common::Running::fixture(&pie);
    assert_eq!(format!("{}\n", r.first_line), expected);
    assert_aligned_and_huge(&r, &pie, &format!("{linker}/pie"), before);
    r.stop();
    // Aligning again has nothing to do.
    assert_eq!(align(&[s(&pie)]).0, 2);

    // --- non-PIE, -o ------------------------------------------------------
    let nopie = common::copy_fixture(d, linker, "nopie");
    let expected = run_output(&nopie);
    let out_path = d.join("nopie.aligned");
    let (code, out, err) = align(&[s(&nopie), "-o", s(&out_path)]);
    if linker == "bfd" {
        // GNU ld ET_EXEC: fixed, congruent addresses: already PMD-mappable.
        assert_eq!(code, 2, "{out}{err}");
        assert!(!out_path.exists());
        fs::copy(&nopie, &out_path).unwrap();
    } else {
        assert_eq!(code, 0, "{out}{err}");
        // lld and mold skew text by one max page (4 KiB on x86-64, 64 KiB
        // on aarch64): align pads it back to the next PMD multiple.
        let plan = hugetext::elf::check_file(&nopie).unwrap().plan;
        let grew = plan.growth;
        assert!(grew > 0 && grew < common::pmd(), "{plan:?}");
        assert!(out.contains(&format!("grew by {grew} bytes")), "{out}");
    }
    assert_eq!(run_output(&out_path), expected);
    fill_pmd_page_cache(&out_path);
    let r = common::Running::fixture(&out_path);
    let (after, _) = smaps_file_pmd(r.child.id(), &out_path);
    assert!(after >= 16 * MIB, "{linker}/nopie: FilePmdMapped {after}");
    r.stop();

    // --- shared library + the program using it (RUNPATH=$ORIGIN) -----------
    let lib = common::copy_fixture(d, linker, "libbig.so");
    let usebig = common::copy_fixture(d, linker, "usebig");
    let expected = run_output(&usebig);
    fill_pmd_page_cache(&lib);
    let r = common::Running::fixture(&usebig);
    let (before, maps) = smaps_file_pmd(r.child.id(), &lib);
    if skewed {
        assert_before(before, &maps);
    }
    r.stop();
    let (code, out, err) = align(&[s(&lib)]);
    assert_eq!(code, 0, "{out}{err}");
    // The program itself has < 4 MiB of text: it cannot be improved (3).
    assert_eq!(align(&[s(&usebig)]).0, 3);
    assert_eq!(
        run_output(&usebig),
        expected,
        "{linker}/usebig prints something else with the aligned library"
    );
    fill_pmd_page_cache(&lib);
    let r = common::Running::fixture(&usebig);
    assert_aligned_and_huge(&r, &lib, &format!("{linker}/libbig.so"), before);
    r.stop();
}

#[test]
fn bfd_fixtures_run_and_get_pmd_mapped() {
    prove("bfd");
}

#[test]
fn lld_fixtures_run_and_get_pmd_mapped() {
    prove("lld");
}

#[test]
fn mold_fixtures_run_and_get_pmd_mapped() {
    prove("mold");
}

fn xattr_get(path: &Path, name: &str) -> Option<Vec<u8>> {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 1024];
    // SAFETY: valid C strings and a buffer of the length given.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return None;
    }
    buf.truncate(r as usize);
    Some(buf)
}

fn xattr_set(path: &Path, name: &str, value: &[u8]) {
    let p = CString::new(path.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: valid C strings and a value of the length given.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), value.as_ptr().cast(), value.len(), 0) };
    assert_eq!(r, 0, "setxattr {name}: {}", std::io::Error::last_os_error());
}

#[test]
fn in_place_keeps_mode_owner_xattrs_and_capabilities() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "lld", "pie");
    let expected = run_output(&f);
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o750)).unwrap();
    xattr_set(&f, "user.hugetext-test", b"keep me");
    let st = Command::new("setcap")
        .args(["cap_net_raw+ep", s(&f)])
        .status()
        .expect("setcap (libcap2-bin, scripts/install-deps.sh)");
    assert!(st.success());
    let cap_before = xattr_get(&f, "security.capability").expect("setcap set no capability");
    let ino_before = fs::metadata(&f).unwrap().ino();

    let (code, out, err) = align(&[s(&f)]);
    assert_eq!(code, 0, "{out}{err}");
    let m = fs::metadata(&f).unwrap();
    assert_ne!(
        m.ino(),
        ino_before,
        "in-place align must replace the file, not write into it"
    );
    assert_eq!(m.mode() & 0o7777, 0o750);
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    assert_eq!(xattr_get(&f, "user.hugetext-test").as_deref(), Some(&b"keep me"[..]));
    assert_eq!(xattr_get(&f, "security.capability"), Some(cap_before));
    let getcap = Command::new("getcap").arg(&f).output().unwrap();
    assert!(
        String::from_utf8_lossy(&getcap.stdout).contains("cap_net_raw"),
        "{getcap:?}"
    );
    assert_eq!(run_output(&f), expected);
    // No temporary files left behind.
    let left: Vec<_> = fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "{left:?}");
}

/// Root without `CAP_FOWNER` (a container's or a hardened unit's root)
/// rewrites another user's program in place, keeping owner, mode and a
/// user attribute: everything that needs the file to be ours is done before
/// the `chown`, the link into place too (protected hardlinks refuse to
/// link another user's file). A set-user-ID program of another user, which
/// only its owner or `CAP_FOWNER` may make, is refused in one line and left
/// untouched, with nothing left behind. (Before: both refused with "Operation
/// not permitted".)
#[test]
fn root_without_cap_fowner_replaces_another_users_program() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "lld", "pie");
    std::os::unix::fs::chown(&f, Some(1234), Some(5678)).unwrap();
    fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
    xattr_set(&f, "user.hugetext-test", b"keep me");
    let align_without_fowner = |f: &Path| {
        Command::new("setpriv")
            .args(["--bounding-set=-fowner", "--inh-caps=-fowner", "--"])
            .arg(common::bin())
            .args(["align", s(f)])
            .output()
            .unwrap()
    };
    let o = align_without_fowner(&f);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m = fs::metadata(&f).unwrap();
    assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 5678, 0o755));
    assert_eq!(xattr_get(&f, "user.hugetext-test").as_deref(), Some(&b"keep me"[..]));
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);

    let g = common::copy_fixture(dir.path(), "lld", "nopie");
    std::os::unix::fs::chown(&g, Some(1234), Some(5678)).unwrap();
    fs::set_permissions(&g, fs::Permissions::from_mode(0o4755)).unwrap();
    let before = fs::read(&g).unwrap();
    let o = align_without_fowner(&g);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("the original is untouched") && err.lines().count() == 1,
        "{err}"
    );
    assert_eq!(fs::read(&g).unwrap(), before);
    assert_eq!(fs::metadata(&g).unwrap().mode() & 0o7777, 0o4755);
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[test]
fn output_option_leaves_input_untouched_and_dry_run_writes_nothing() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "mold", "libbig.so");
    let orig = fs::read(&f).unwrap();
    let mtime = fs::metadata(&f).unwrap().mtime_nsec();

    let out = dir.path().join("out.so");
    let (code, stdout, err) = align(&[s(&f), "--dry-run", "-o", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert!(stdout.contains("would align"), "{stdout}");
    assert!(!out.exists());

    let (code, stdout, err) = align(&[s(&f), "-o", s(&out)]);
    assert_eq!(code, 0, "{stdout}{err}");
    assert_eq!(fs::read(&f).unwrap(), orig);
    assert_eq!(fs::metadata(&f).unwrap().mtime_nsec(), mtime);
    assert_eq!(fs::metadata(&out).unwrap().len(), orig.len() as u64 + 4096);
    // The output is executable like the input.
    assert_eq!(
        fs::metadata(&out).unwrap().mode() & 0o777,
        fs::metadata(&f).unwrap().mode() & 0o777
    );
}

#[test]
fn aligning_a_running_program_in_place_does_not_disturb_it() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "lld", "pie");
    let expected = run_output(&f);
    let r = common::Running::fixture(&f);
    let (code, out, err) = align(&[s(&f)]);
    assert_eq!(code, 0, "{out}{err}");
    // The running process still maps the old (now unlinked) file, unchanged.
    let exe = fs::read_link(format!("/proc/{}/exe", r.child.id())).unwrap();
    assert!(exe.to_string_lossy().ends_with("(deleted)"), "{exe:?}");
    assert_eq!(format!("{}\n", r.first_line), expected);
    r.stop();
    assert_eq!(run_output(&f), expected);
}

#[test]
fn signed_files_are_refused_unless_forced() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "lld", "pie");
    let sig = dir.path().join("sig.bin");
    fs::write(&sig, [0x5a; 64]).unwrap();
    let signed = dir.path().join("signed");
    let st = Command::new("objcopy")
        .arg(format!("--add-section=.signature={}", s(&sig)))
        .arg(&f)
        .arg(&signed)
        .status()
        .unwrap();
    assert!(st.success());
    let before = fs::read(&signed).unwrap();
    let (code, out, err) = align(&[s(&signed)]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(out.contains("signed") && out.contains("--force"), "{out}");
    assert_eq!(fs::read(&signed).unwrap(), before);
    let (code, out, err) = align(&[s(&signed), "--force"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("invalidated"), "{err}");
    assert_eq!(run_output(&signed), run_output(&f));

    // An IMA xattr also counts as a signature of the old content.
    let g = common::copy_fixture(dir.path(), "mold", "pie");
    xattr_set(&g, "security.ima", &[0x04, 0x01, 0x02]);
    let (code, out, _) = align(&[s(&g)]);
    assert_eq!(code, 3, "{out}");
    assert!(out.contains("security.ima"), "{out}");
    let (code, _, _) = align(&[s(&g), "--force"]);
    assert_eq!(code, 0);
    assert_eq!(
        xattr_get(&g, "security.ima"),
        None,
        "a stale IMA xattr must not be copied"
    );
}

#[test]
fn appended_data_is_warned_about_and_kept() {
    let dir = common::scratch();
    let f = common::copy_fixture(dir.path(), "lld", "pie");
    let expected = run_output(&f);
    fs::OpenOptions::new()
        .append(true)
        .open(&f)
        .unwrap()
        .write_all(b"APPENDED-PAYLOAD")
        .unwrap();
    let (code, out, err) = align(&[s(&f)]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("appended"), "{err}");
    assert!(fs::read(&f).unwrap().ends_with(b"APPENDED-PAYLOAD"));
    assert_eq!(run_output(&f), expected);
}

/// One line on stderr, the given exit code, and `path` unchanged.
fn assert_clean_failure(args: &[&str], path: &Path, code: i32) -> String {
    let before = fs::read(path).unwrap();
    let (c, out, err) = align(args);
    assert_eq!(c, code, "stdout: {out} stderr: {err}");
    if code == 1 {
        assert_eq!(err.lines().count(), 1, "expected one line: {err}");
        assert!(err.starts_with("hugetext: error: "), "{err}");
    } else {
        assert!(out.starts_with("cannot align"), "{out}");
    }
    assert!(!err.contains("panicked") && !err.contains("internal error"), "{err}");
    assert_eq!(fs::read(path).unwrap(), before, "{} was modified", path.display());
    format!("{out}{err}")
}

/// (file offset, p_type, p_flags) of each program header of a 64-bit ELF.
fn phdr_offsets(path: &Path) -> Vec<(usize, u32, u32)> {
    let d = fs::read(path).unwrap();
    let phoff = u64::from_le_bytes(d[32..40].try_into().unwrap()) as usize;
    let phnum = u16::from_le_bytes(d[56..58].try_into().unwrap()) as usize;
    (0..phnum)
        .map(|i| {
            let o = phoff + i * 56;
            (
                o,
                u32::from_le_bytes(d[o..o + 4].try_into().unwrap()),
                u32::from_le_bytes(d[o + 4..o + 8].try_into().unwrap()),
            )
        })
        .collect()
}

fn first_load(path: &Path) -> usize {
    phdr_offsets(path).into_iter().find(|&(_, t, _)| t == 1).unwrap().0
}

fn patch(path: &Path, at: usize, bytes: &[u8]) {
    let mut d = fs::read(path).unwrap();
    d[at..at + bytes.len()].copy_from_slice(bytes);
    fs::write(path, d).unwrap();
}

#[test]
fn bad_inputs_fail_cleanly_and_leave_the_file_intact() {
    let dir = common::scratch();
    let d = dir.path();

    let text = d.join("notes.txt");
    fs::write(&text, "this is not an ELF file\n").unwrap();
    let m = assert_clean_failure(&[s(&text)], &text, 1);
    assert!(m.contains("not an ELF file"), "{m}");

    let empty = d.join("empty");
    fs::write(&empty, "").unwrap();
    assert_clean_failure(&[s(&empty)], &empty, 1);

    let missing = d.join("missing");
    let (c, _, err) = align(&[s(&missing)]);
    assert_eq!(c, 1);
    assert_eq!(err.lines().count(), 1, "{err}");

    // Truncated: header only, and half the file.
    let full = fs::read(common::fixture("lld", "pie")).unwrap();
    let trunc = d.join("trunc-header");
    fs::write(&trunc, &full[..200]).unwrap();
    let m = assert_clean_failure(&[s(&trunc)], &trunc, 1);
    assert!(m.contains("truncated") || m.contains("not a valid ELF"), "{m}");
    let half = d.join("trunc-half");
    fs::write(&half, &full[..full.len() / 2]).unwrap();
    let m = assert_clean_failure(&[s(&half)], &half, 1);
    assert!(m.contains("beyond the end of the file"), "{m}");

    // Wrong class: a real 32-bit executable.
    let asm = d.join("s.S");
    fs::write(&asm, ".globl _start\n_start: mov $1, %eax\n int $0x80\n").unwrap();
    let obj = d.join("s.o");
    let x32 = d.join("x32");
    assert!(Command::new("as")
        .args(["--32", "-o", s(&obj), s(&asm)])
        .status()
        .unwrap()
        .success());
    assert!(Command::new("ld")
        .args(["-m", "elf_i386", "-o", s(&x32), s(&obj)])
        .status()
        .unwrap()
        .success());
    let m = assert_clean_failure(&[s(&x32)], &x32, 3);
    assert!(m.contains("32-bit"), "{m}");

    // A machine align does not handle: e_machine = RISC-V (AArch64 files
    // are aligned: tests/arm64.rs).
    let rv = common::copy_fixture(d, "lld", "pie");
    let rv2 = d.join("riscv");
    fs::rename(&rv, &rv2).unwrap();
    patch(&rv2, 18, &243u16.to_le_bytes());
    let m = assert_clean_failure(&[s(&rv2)], &rv2, 3);
    assert!(
        m.contains("RISC-V ELF: hugetext aligns x86-64 and AArch64 files only"),
        "{m}"
    );

    // Absurd header: a PT_LOAD claiming 2^62 bytes.
    let absurd = common::copy_fixture(d, "mold", "pie");
    let load = first_load(&absurd);
    patch(&absurd, load + 32, &(1u64 << 62).to_le_bytes());
    let m = assert_clean_failure(&[s(&absurd)], &absurd, 1);
    assert!(m.contains("beyond the end of the file"), "{m}");

    // Overlapping: the first PT_LOAD's file range grown over the text's start.
    let overlap = d.join("overlap");
    fs::copy(common::fixture("lld", "pie"), &overlap).unwrap();
    let load = first_load(&overlap);
    patch(&overlap, load + 32, &0x2000u64.to_le_bytes());
    patch(&overlap, load + 40, &0x2000u64.to_le_bytes());
    let m = assert_clean_failure(&[s(&overlap)], &overlap, 3);
    assert!(m.contains("overlaps"), "{m}");

    // Writable text (RWX PT_LOAD): cannot be improved.
    let rwx = d.join("rwx");
    fs::copy(common::fixture("bfd", "pie"), &rwx).unwrap();
    let text = phdr_offsets(&rwx)
        .into_iter()
        .find(|&(_, t, flags)| t == 1 && flags & 1 == 1)
        .unwrap()
        .0;
    patch(&rwx, text + 4, &7u32.to_le_bytes());
    let m = assert_clean_failure(&[s(&rwx)], &rwx, 3);
    assert!(m.contains("writable"), "{m}");
}

#[test]
fn no_write_permission_fails_cleanly() {
    let dir = common::scratch();
    let sub = dir.path().join("ro");
    fs::create_dir(&sub).unwrap();
    let f = sub.join("pie");
    fs::copy(common::fixture("lld", "pie"), &f).unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&sub, fs::Permissions::from_mode(0o755)).unwrap();
    // nobody's file (one it may replace) in root's directory.
    std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
    let before = fs::read(&f).unwrap();
    // Run as nobody: can read the file but not write the directory.
    let out = common::as_nobody()
        .arg(common::bin())
        .args(["align", s(&f)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("Permission denied"), "{err}");
    assert_eq!(fs::read(&f).unwrap(), before);
}

/// A small tmpfs, so the disk really fills up halfway through the write.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> Option<SmallFs> {
        let dir = common::scratch();
        let st = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "hugetext-test"])
            .arg(dir.path())
            .status()
            .ok()?;
        st.success().then_some(SmallFs { dir })
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn disk_full_halfway_leaves_the_original_intact() {
    let Some(small) = SmallFs::mount("30m") else {
        // Mounting needs root (which the test command has); say why we stop.
        panic!("cannot mount a tmpfs for the disk-full test (needs root)");
    };
    let f = small.dir.path().join("pie");
    fs::copy(common::fixture("lld", "pie"), &f).unwrap();
    let m = assert_clean_failure(&[s(&f)], &f, 1);
    assert!(m.contains("No space left on device"), "{m}");
    let left: Vec<_> = fs::read_dir(small.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left.len(), 1, "temporary file left behind: {left:?}");
    assert_eq!(run_output(&f), run_output(&common::fixture("lld", "pie")));
}

fn inputs_in(dirs: &[&str]) -> Vec<PathBuf> {
    let mut v = Vec::new();
    for d in dirs {
        if let Ok(rd) = fs::read_dir(common::root().join(d)) {
            v.extend(rd.flatten().map(|e| e.path()).filter(|p| p.is_file()));
        }
    }
    v.sort();
    v
}

/// The fuzzers' seeds and every crasher they found, replayed through the
/// real binary: no crash, no verification failure, one-line errors.
#[test]
fn fuzz_regressions_and_seeds() {
    let dir = common::scratch();
    let parse = inputs_in(&["fuzz/seeds/parse", "fuzz/regressions/parse"]);
    let rewrite = inputs_in(&["fuzz/seeds/rewrite", "fuzz/regressions/rewrite"]);
    assert!(!parse.is_empty() && !rewrite.is_empty(), "fuzz inputs missing");
    for (i, p) in parse.iter().enumerate() {
        let f = dir.path().join(format!("p{i}"));
        fs::copy(p, &f).unwrap();
        let out = common::hugetext(&["check", "--json", s(&f)]);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(matches!(out.status.code(), Some(0 | 1)), "{}: {err}", p.display());
        assert!(!err.contains("internal error"), "{}: {err}", p.display());
    }
    let mut rewritten = 0;
    for (i, p) in rewrite.iter().enumerate() {
        let data = fs::read(p).unwrap();
        if data.len() < 4 {
            continue;
        }
        let hint = u32::from_le_bytes(data[..4].try_into().unwrap()) as u64;
        let f = dir.path().join(format!("r{i}"));
        fs::write(&f, &data[4..]).unwrap();
        let size = hint.min(8 << 20).max(data.len() as u64 - 4);
        fs::OpenOptions::new()
            .write(true)
            .open(&f)
            .unwrap()
            .set_len(size)
            .unwrap();
        let out_path = dir.path().join(format!("r{i}.out"));
        let (code, out, err) = align(&[s(&f), "--force", "-o", s(&out_path)]);
        assert!(matches!(code, 0..=3), "{}: exit {code}: {out}{err}", p.display());
        assert!(
            !err.contains("internal error") && !err.contains("verification"),
            "{}: {err}",
            p.display()
        );
        if code == 1 {
            assert_eq!(err.lines().count(), 1, "{}: {err}", p.display());
        }
        if code == 0 {
            rewritten += 1;
            let out = common::hugetext(&["check", "--json", s(&out_path)]);
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(v[0]["verdict"], "pmd-mappable", "{}", p.display());
        } else {
            assert!(!out_path.exists());
        }
    }
    assert!(rewritten > 0, "no seed exercised the rewriter");
}

/// Warnings describe what this run does: rewriting a system file in place
/// changes it for the package manager, `-o` leaves it untouched.
#[test]
fn package_manager_warning_only_when_the_system_file_is_rewritten() {
    let sys = std::path::Path::new("/opt").join(format!("hugetext-test-{}", std::process::id()));
    fs::create_dir_all(&sys).unwrap();
    let dir = common::scratch();
    let f = common::copy_fixture(&sys, "bfd", "pie");
    let out = dir.path().join("pie.aligned");
    let (code, o, err) = align(&[s(&f), "-o", s(&out)]);
    let warned_o = err.contains("package manager");
    let (code_in_place, _, err_in_place) = align(&[s(&f)]);
    let _ = fs::remove_dir_all(&sys);
    assert_eq!(code, 0, "{o}{err}");
    assert!(!warned_o, "-o leaves the system file untouched: {err}");
    assert_eq!(code_in_place, 0, "{err_in_place}");
    assert!(err_in_place.contains("package manager"), "{err_in_place}");
}

/// The kind of what a name holds, and, for a link, where it points.
fn what_is(p: &Path) -> (fs::FileType, u64, Option<PathBuf>) {
    let m = fs::symlink_metadata(p).unwrap();
    (m.file_type(), m.ino(), fs::read_link(p).ok())
}

/// `-o` naming a symlink, a character device, a FIFO or a directory: one
/// line saying why, exit 1, the name and what a link points at unchanged.
/// Before, the device (as /dev/null would be) and the link were replaced by
/// the aligned file, exit 0.
#[test]
fn output_that_is_not_a_regular_file_is_refused() {
    let dir = common::scratch();
    let d = dir.path();
    let prog = common::copy_fixture(d, "lld", "pie");
    let victim = d.join("victim");
    fs::write(&victim, b"victim bytes").unwrap();
    let link = d.join("link");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let link_to_prog = d.join("link-to-prog");
    std::os::unix::fs::symlink(&prog, &link_to_prog).unwrap();
    let dev = d.join("null");
    let cdev = CString::new(dev.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path; the device numbers of /dev/null.
    assert_eq!(
        // SAFETY: a valid path; the device numbers of /dev/null.
        unsafe { libc::mknod(cdev.as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) },
        0
    );
    let fifo = d.join("fifo");
    let cfifo = CString::new(fifo.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path.
    assert_eq!(unsafe { libc::mkfifo(cfifo.as_ptr(), 0o644) }, 0);
    let sub = d.join("sub");
    fs::create_dir(&sub).unwrap();
    for (out, what) in [
        (&link, "symbolic link"),
        (&link_to_prog, "symbolic link"),
        (&dev, "character device"),
        (&fifo, "FIFO"),
        (&sub, "directory"),
    ] {
        let before = what_is(out);
        let m = assert_clean_failure(&[s(&prog), "-o", s(out)], &prog, 1);
        assert!(m.contains("refusing to write") && m.contains(what), "{m}");
        assert_eq!(what_is(out), before, "{} changed", out.display());
    }
    assert_eq!(fs::read(&victim).unwrap(), b"victim bytes");
    // Nothing else appeared (no temporary file left behind).
    let mut names: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["fifo", "link", "link-to-prog", "null", "pie", "sub", "victim"]);

    // A regular file of ours is replaced, a new name created.
    let own = d.join("own");
    fs::write(&own, b"old").unwrap();
    assert_eq!(align(&[s(&prog), "-o", s(&own)]).0, 0);
    assert_eq!(align(&[s(&prog), "-o", s(&d.join("fresh"))]).0, 0);
    assert_eq!(fs::read(&own).unwrap(), fs::read(d.join("fresh")).unwrap());
}

/// `--json` on an error prints a JSON error object (it printed nothing) and
/// exits 1.
#[test]
fn json_errors_are_json_objects() {
    let dir = common::scratch();
    let prog = common::copy_fixture(dir.path(), "lld", "pie");
    let link = dir.path().join("link");
    std::os::unix::fs::symlink("/etc/hostname", &link).unwrap();
    let notelf = dir.path().join("notelf");
    fs::write(&notelf, b"not an ELF file at all").unwrap();
    for (args, said) in [
        (vec![s(&prog), "-o", s(&link), "--json"], "symbolic link"),
        (vec![s(&notelf), "--json"], "not an ELF file"),
        (vec![s(&dir.path().join("missing")), "--json"], "No such file"),
    ] {
        let (code, out, err) = align(&args);
        assert_eq!(code, 1, "{out} {err}");
        let v: serde_json::Value =
            serde_json::from_str(&out).unwrap_or_else(|e| panic!("not JSON ({e}): {out:?} {err}"));
        assert_eq!(v["status"], "error", "{v}");
        assert!(v["error"].as_str().unwrap().contains(said), "{v}");
        assert_eq!(v["input"], args[0], "{v}");
    }
}

/// A PT_LOAD whose addresses wrap past the top of the address space, or
/// whose memory size is below its file size, is named for what it is
/// (both were "absurd sizes", though the sizes were sane).
#[test]
fn corrupt_load_extents_are_named_for_what_they_are() {
    let dir = common::scratch();
    let d = dir.path();
    let wrap = common::copy_fixture(d, "lld", "pie");
    let text = phdr_offsets(&wrap)
        .into_iter()
        .find(|&(_, t, flags)| t == 1 && flags & 1 == 1)
        .unwrap()
        .0;
    patch(&wrap, text + 16, &0xffff_ffff_fff0_0000u64.to_le_bytes());
    let m = assert_clean_failure(&[s(&wrap)], &wrap, 1);
    assert!(
        m.contains("ends past the top of the address space") && !m.contains("absurd"),
        "{m}"
    );
    let short = d.join("short");
    fs::copy(common::fixture("lld", "pie"), &short).unwrap();
    patch(&short, text + 40, &0x1000u64.to_le_bytes());
    let m = assert_clean_failure(&[s(&short)], &short, 1);
    assert!(
        m.contains("memory size (0x1000) smaller than its file size") && !m.contains("absurd"),
        "{m}"
    );
}
