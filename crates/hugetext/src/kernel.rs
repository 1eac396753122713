//! Kernel interfaces: version, page and PMD size, THP modes, and thin wrappers
//! over the memory-management system calls hugetext uses.
//!
//! Capabilities are detected at run time; nothing is assumed from the build
//! machine.

use std::ffi::c_void;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::path::Path;
use std::ptr::NonNull;

use crate::{Error, Result};

/// `MADV_HUGEPAGE`.
pub const MADV_HUGEPAGE: i32 = libc::MADV_HUGEPAGE;
/// `MADV_NOHUGEPAGE`.
pub const MADV_NOHUGEPAGE: i32 = libc::MADV_NOHUGEPAGE;
/// `MADV_DONTNEED`.
pub const MADV_DONTNEED: i32 = libc::MADV_DONTNEED;
/// `MADV_POPULATE_READ` (Linux 5.14).
pub const MADV_POPULATE_READ: i32 = 22;
/// `MADV_COLLAPSE` (Linux 6.1).
pub const MADV_COLLAPSE: i32 = 25;

/// Base page size of the running kernel.
pub fn page_size() -> usize {
    rustix::param::page_size()
}

/// PMD size (the size of a PMD-mapped THP), from
/// `/sys/kernel/mm/transparent_hugepage/hpage_pmd_size`; 2 MiB (x86_64)
/// when the kernel does not say.
pub fn pmd_size() -> usize {
    std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(2 << 20)
}

/// Kernel release as (major, minor, patch), from `uname`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub struct KernelVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl KernelVersion {
    /// The running kernel's version.
    pub fn current() -> Self {
        let uts = rustix::system::uname();
        Self::parse(&uts.release().to_string_lossy())
    }

    /// Parse a release string such as `6.18.44-fc-v669`.
    pub fn parse(release: &str) -> Self {
        let mut it = release
            .split(|c: char| !c.is_ascii_digit())
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u32>().unwrap_or(0));
        KernelVersion {
            major: it.next().unwrap_or(0),
            minor: it.next().unwrap_or(0),
            patch: it.next().unwrap_or(0),
        }
    }

    /// True when this version is at least `major.minor`.
    pub fn at_least(&self, major: u32, minor: u32) -> bool {
        (self.major, self.minor) >= (major, minor)
    }
}

impl std::fmt::Display for KernelVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// Read a sysfs "choice" file such as `always [madvise] never` and return the
/// bracketed (selected) word.
pub fn sysfs_choice(path: impl AsRef<Path>) -> Option<String> {
    let s = std::fs::read_to_string(path).ok()?;
    let start = s.find('[')?;
    let end = s[start..].find(']')? + start;
    Some(s[start + 1..end].to_string())
}

/// The global THP mode for anonymous memory (`always`, `madvise`, `never`),
/// or `None` when the kernel has no THP.
pub fn thp_enabled() -> Option<String> {
    sysfs_choice("/sys/kernel/mm/transparent_hugepage/enabled")
}

/// A memory mapping owned by this process, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<c_void>,
    len: usize,
}

// SAFETY: a Mapping is a plain range of address space; access goes through
// raw pointers whose use the caller controls.
unsafe impl Send for Mapping {}

impl Mapping {
    /// Map `len` bytes of `fd` from file offset `offset` (page aligned) at an
    /// address congruent to `offset` modulo `align` (a power of two, e.g. the
    /// PMD size), so that whole `align`-sized file ranges line up with
    /// `align`-sized virtual ranges. `prot` is `libc::PROT_*`.
    pub fn file_congruent(fd: BorrowedFd<'_>, offset: u64, len: usize, prot: i32, align: usize) -> Result<Self> {
        assert!(align.is_power_of_two());
        let shift = (offset as usize) & (align - 1);
        // Reserve enough address space to find a congruent start, then
        // place the file mapping over it with MAP_FIXED.
        let reserve_len = len + align;
        // SAFETY: anonymous PROT_NONE reservation; no memory is touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                reserve_len,
                libc::PROT_NONE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap (reserve)"));
        }
        let base_addr = base as usize;
        let aligned = (base_addr + align - 1) & !(align - 1);
        let mut start = aligned + shift;
        if start + len > base_addr + reserve_len {
            start -= align;
        }
        debug_assert!(start >= base_addr);
        // SAFETY: [start, start+len) lies inside our own reservation.
        let p = unsafe {
            libc::mmap(
                start as *mut c_void,
                len,
                prot,
                libc::MAP_SHARED | libc::MAP_FIXED,
                fd.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        let err = (p == libc::MAP_FAILED).then(|| Error::last_os("mmap (file)"));
        // Give back the unused parts of the reservation.
        // SAFETY: these ranges are ours and hold nothing.
        unsafe {
            if start > base_addr {
                libc::munmap(base, start - base_addr);
            }
            let end = start + len;
            let res_end = base_addr + reserve_len;
            if res_end > end {
                libc::munmap(end as *mut c_void, res_end - end);
            }
            if let Some(e) = err {
                libc::munmap(start as *mut c_void, len);
                return Err(e);
            }
        }
        Ok(Mapping { ptr: NonNull::new(p).expect("mmap returned null"), len })
    }

    /// Map anonymous private memory of `len` bytes aligned to `align`.
    pub fn anon_aligned(len: usize, prot: i32, align: usize) -> Result<Self> {
        assert!(align.is_power_of_two());
        let reserve_len = len + align;
        // SAFETY: fresh anonymous mapping.
        let base = unsafe {
            libc::mmap(std::ptr::null_mut(), reserve_len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
        };
        if base == libc::MAP_FAILED {
            return Err(Error::last_os("mmap (anonymous)"));
        }
        let b = base as usize;
        let start = (b + align - 1) & !(align - 1);
        // SAFETY: trimming our own fresh mapping.
        unsafe {
            if start > b {
                libc::munmap(base, start - b);
            }
            let end = start + len;
            if b + reserve_len > end {
                libc::munmap(end as *mut c_void, b + reserve_len - end);
            }
        }
        Ok(Mapping { ptr: NonNull::new(start as *mut c_void).unwrap(), len })
    }

    /// Start address.
    pub fn addr(&self) -> usize {
        self.ptr.as_ptr() as usize
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length mapping (never produced by the constructors).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Raw pointer to the start.
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr() as *mut u8
    }

    /// `madvise` over a sub-range `[off, off+len)` of this mapping.
    pub fn madvise(&self, off: usize, len: usize, advice: i32) -> Result<()> {
        assert!(off + len <= self.len);
        madvise(self.addr() + off, len, advice)
    }

    /// Which pages of the mapping are resident (`mincore`), one bool per page.
    pub fn resident(&self) -> Result<Vec<bool>> {
        let ps = page_size();
        let pages = self.len.div_ceil(ps);
        let mut vec = vec![0u8; pages];
        // SAFETY: vec has one byte per page of our mapping.
        let r = unsafe { libc::mincore(self.ptr.as_ptr(), self.len, vec.as_mut_ptr()) };
        if r != 0 {
            return Err(Error::last_os("mincore"));
        }
        Ok(vec.into_iter().map(|b| b & 1 != 0).collect())
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: we own this range.
        unsafe {
            libc::munmap(self.ptr.as_ptr(), self.len);
        }
    }
}

/// `madvise(addr, len, advice)` on raw addresses of this process.
pub fn madvise(addr: usize, len: usize, advice: i32) -> Result<()> {
    // SAFETY: madvise does not dereference; the kernel validates the range.
    let r = unsafe { libc::madvise(addr as *mut c_void, len, advice) };
    if r != 0 {
        return Err(Error::Sys { call: madvise_name(advice), source: std::io::Error::last_os_error() });
    }
    Ok(())
}

fn madvise_name(advice: i32) -> &'static str {
    match advice {
        MADV_HUGEPAGE => "madvise(MADV_HUGEPAGE)",
        MADV_NOHUGEPAGE => "madvise(MADV_NOHUGEPAGE)",
        MADV_DONTNEED => "madvise(MADV_DONTNEED)",
        MADV_POPULATE_READ => "madvise(MADV_POPULATE_READ)",
        MADV_COLLAPSE => "madvise(MADV_COLLAPSE)",
        _ => "madvise",
    }
}

/// `posix_fadvise(fd, offset, len, POSIX_FADV_DONTNEED)`: drop the clean,
/// unmapped page cache of a range (`len` 0 = to the end). Folios that some
/// process maps stay.
pub fn fadvise_dontneed(fd: BorrowedFd<'_>, offset: u64, len: u64) -> Result<()> {
    // SAFETY: plain syscall on a valid fd.
    let r = unsafe {
        libc::posix_fadvise(fd.as_raw_fd(), offset as libc::off_t, len as libc::off_t, libc::POSIX_FADV_DONTNEED)
    };
    if r != 0 {
        return Err(Error::Sys { call: "posix_fadvise(DONTNEED)", source: std::io::Error::from_raw_os_error(r) });
    }
    Ok(())
}

/// True when this process has CAP_SYS_ADMIN in its effective set (needed to
/// see PFNs in `/proc/PID/pagemap`).
pub fn has_cap_sys_admin() -> bool {
    let Ok(status) = std::fs::read_to_string("/proc/self/status") else { return false };
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .map(|caps| caps & (1 << 21) != 0)
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_parses_distro_strings() {
        let v = KernelVersion::parse("6.18.44-fc-v669");
        assert_eq!((v.major, v.minor, v.patch), (6, 18, 44));
        assert!(v.at_least(6, 1) && !v.at_least(6, 19));
        assert_eq!(KernelVersion::parse("5.10.0-28-amd64").to_string(), "5.10.0");
    }

    #[test]
    fn congruent_file_mapping_is_congruent() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![0u8; 3 << 20]).unwrap();
        let f = std::fs::File::open(&p).unwrap();
        use std::os::fd::AsFd;
        let pmd = pmd_size();
        let m = Mapping::file_congruent(f.as_fd(), 4096, 2 << 20, libc::PROT_READ, pmd).unwrap();
        assert_eq!((m.addr() - 4096) % pmd, 0);
        let a = Mapping::anon_aligned(4 << 20, libc::PROT_READ | libc::PROT_WRITE, pmd).unwrap();
        assert_eq!(a.addr() % pmd, 0);
    }
}
