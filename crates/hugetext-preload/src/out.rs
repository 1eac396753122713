//! Allocation-free text output: verbose messages on stderr and the perf map.

use crate::sys;

/// A small buffered writer over a file descriptor. Never allocates; flushes
/// when full, at [`Out::flush`] and on drop.
pub struct Out<const N: usize> {
    fd: i32,
    eol: bool,
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Out<N> {
    pub const fn new(fd: i32) -> Self {
        Out {
            fd,
            eol: false,
            len: 0,
            buf: [0; N],
        }
    }

    pub fn flush(&mut self) {
        if self.fd < 0 {
            // A buffer only (fd -1: the `HUGETEXT_VIA` string, names): no
            // system call that can only fail.
            self.len = 0;
            return;
        }
        let mut done = 0;
        while done < self.len {
            let r = sys::write(self.fd, &self.buf[done..self.len]);
            if r == -(libc::EINTR as isize) {
                continue;
            }
            if r <= 0 {
                break;
            }
            done += r as usize;
        }
        self.len = 0;
    }

    /// Room left before the buffer must be flushed.
    pub fn room(&self) -> usize {
        N - self.len
    }

    pub fn bytes(&mut self, s: &[u8]) -> &mut Self {
        for chunk in s.chunks(N) {
            if chunk.len() > self.room() {
                self.flush();
            }
            self.buf[self.len..self.len + chunk.len()].copy_from_slice(chunk);
            self.len += chunk.len();
        }
        self
    }

    pub fn s(&mut self, s: &str) -> &mut Self {
        self.bytes(s.as_bytes())
    }

    pub fn u(&mut self, mut v: u64) -> &mut Self {
        let mut tmp = [0u8; 20];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b'0' + (v % 10) as u8;
            v /= 10;
            if v == 0 {
                break;
            }
        }
        self.bytes(&tmp[i..])
    }

    /// A pid, or "?" where it is unknown (`getpid` failed).
    pub fn pid(&mut self, pid: Option<u32>) -> &mut Self {
        match pid {
            Some(p) => self.u(u64::from(p)),
            None => self.s("?"),
        }
    }

    /// Lower-case hex without prefix.
    pub fn x(&mut self, mut v: u64) -> &mut Self {
        let mut tmp = [0u8; 16];
        let mut i = tmp.len();
        loop {
            i -= 1;
            tmp[i] = b"0123456789abcdef"[(v & 15) as usize];
            v >>= 4;
            if v == 0 {
                break;
            }
        }
        self.bytes(&tmp[i..])
    }

    /// A byte count in MiB with one decimal ("18.0 MiB").
    pub fn mib(&mut self, bytes: u64) -> &mut Self {
        let tenths = (bytes * 10 + (1 << 19)) >> 20;
        self.u(tenths / 10).s(".").u(tenths % 10).s(" MiB")
    }

    /// A power-of-two size in whole binary units ("4 KiB", "2 MiB", "32 MiB"):
    /// page and PMD sizes, which the running kernel decides.
    pub fn size(&mut self, bytes: u64) -> &mut Self {
        match bytes {
            b if b >= 1 << 30 && b % (1 << 30) == 0 => self.u(b >> 30).s(" GiB"),
            b if b >= 1 << 20 && b % (1 << 20) == 0 => self.u(b >> 20).s(" MiB"),
            b if b >= 1 << 10 && b % (1 << 10) == 0 => self.u(b >> 10).s(" KiB"),
            b => self.u(b).s(" bytes"),
        }
    }

    /// A duration in milliseconds with two decimals.
    pub fn ms(&mut self, ns: u64) -> &mut Self {
        let hundredths = (ns + 5_000) / 10_000;
        let frac = hundredths % 100;
        self.u(hundredths / 100).s(".");
        if frac < 10 {
            self.s("0");
        }
        self.u(frac).s(" ms")
    }

    /// ": <errno text> (errno N)".
    pub fn err(&mut self, e: isize) -> &mut Self {
        self.s(": ").s(sys::errno_name(e)).s(" (errno ").u((-e) as u64).s(")")
    }
}

impl<const N: usize> Drop for Out<N> {
    fn drop(&mut self) {
        if self.eol {
            self.s("\n");
        }
        self.flush();
    }
}

/// One verbose line on stderr, starting with "hugetext: ". Build it with the
/// returned writer; it is written out when dropped.
pub fn line() -> Out<512> {
    let mut o = Out::new(2);
    o.eol = true;
    o.s("hugetext: ");
    o
}

impl<const N: usize> Out<N> {
    /// What has been written so far (for building strings, with fd -1).
    pub fn contents(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// Discard the buffered bytes (so drop writes nothing).
    pub fn clear(&mut self) {
        self.len = 0;
    }
}
