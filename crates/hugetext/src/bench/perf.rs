//! iTLB miss counting with `perf_event_open(2)` (hardware cache event
//! ITLB/READ/MISS), for this process and the children it starts afterwards.
//!
//! Most VMs expose no PMU: opening the event then fails (`ENOENT`,
//! `EOPNOTSUPP`, ...) and [`ItlbCounter::open`] returns the reason, which the
//! benchmarks report instead of a number.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use crate::{Error, Result};

const PERF_TYPE_HW_CACHE: u32 = 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const PERF_COUNT_HW_CACHE_ITLB: u64 = 4;
const PERF_COUNT_HW_CACHE_OP_READ: u64 = 0;
const PERF_COUNT_HW_CACHE_RESULT_MISS: u64 = 1;

// ioctls (include/uapi/linux/perf_event.h).
const PERF_EVENT_IOC_ENABLE: libc::c_ulong = 0x2400;
const PERF_EVENT_IOC_DISABLE: libc::c_ulong = 0x2401;
const PERF_EVENT_IOC_RESET: libc::c_ulong = 0x2403;

// perf_event_attr flag bits.
const ATTR_DISABLED: u64 = 1 << 0;
const ATTR_INHERIT: u64 = 1 << 1;
const ATTR_EXCLUDE_KERNEL: u64 = 1 << 5;
const ATTR_EXCLUDE_HV: u64 = 1 << 6;

/// `struct perf_event_attr` up to `PERF_ATTR_SIZE_VER5` (112 bytes); the
/// kernel accepts any published size.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
}

/// A user-space iTLB-miss counter on this process, inherited by children
/// started after it was opened (their counts are added when they exit).
#[derive(Debug)]
pub struct ItlbCounter {
    fd: OwnedFd,
}

impl ItlbCounter {
    /// Open the counter (disabled). Err is a one-line reason it is not
    /// available, e.g. "not supported by this CPU/VM".
    pub fn open() -> Result<Self> {
        let attr = PerfEventAttr {
            type_: PERF_TYPE_HW_CACHE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config: PERF_COUNT_HW_CACHE_ITLB
                | (PERF_COUNT_HW_CACHE_OP_READ << 8)
                | (PERF_COUNT_HW_CACHE_RESULT_MISS << 16),
            flags: ATTR_DISABLED | ATTR_INHERIT | ATTR_EXCLUDE_KERNEL | ATTR_EXCLUDE_HV,
            ..Default::default()
        };
        // SAFETY: attr is a valid perf_event_attr of the size it states;
        // pid 0 / cpu -1 = this process on any CPU.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                &attr as *const PerfEventAttr,
                0,
                -1,
                -1,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) | Some(libc::EINVAL) => {
                    Error::Unsupported(format!(
                        "not supported: this CPU/VM exposes no iTLB-miss counter to perf_event_open ({e})"
                    ))
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    Error::Permission(format!("not permitted: perf_event_open refused ({e}); lower /proc/sys/kernel/perf_event_paranoid or run as root"))
                }
                _ => Error::Other(format!("perf_event_open failed: {e}")),
            };
            return Err(why);
        }
        // SAFETY: a fresh fd we own.
        Ok(ItlbCounter {
            // SAFETY: a fresh fd we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd as i32) },
        })
    }

    fn ioctl(&self, req: libc::c_ulong) {
        // SAFETY: perf ioctls without argument on our own perf fd.
        unsafe { libc::ioctl(self.fd.as_raw_fd(), req, 0) };
    }

    /// Zero and start counting.
    pub fn start(&self) {
        self.ioctl(PERF_EVENT_IOC_RESET);
        self.ioctl(PERF_EVENT_IOC_ENABLE);
    }

    /// Stop counting and return the count (including exited children).
    pub fn stop(&self) -> Option<u64> {
        self.ioctl(PERF_EVENT_IOC_DISABLE);
        let mut v = 0u64;
        // SAFETY: reading one u64 (read_format 0) into v.
        let n = unsafe { libc::read(self.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        (n == 8).then_some(v)
    }
}
