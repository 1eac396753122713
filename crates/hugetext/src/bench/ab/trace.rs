//! Running the command: the traced warm-up run that finds the files it
//! maps executable, and the timed runs.

use std::fs::File;
use std::io::{Read, Seek};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::report::Failure;
use super::{Discovery, Options};
use crate::procfs::{self, Vma};
use crate::{Error, Result};

/// Executable mappings of regular files (not deleted ones) in process
/// `pid`; none once it is gone.
pub(super) fn exec_maps(pid: i32) -> Vec<Vma> {
    procfs::read_maps(Some(pid))
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.is_exec() && v.path.starts_with('/') && !v.path.ends_with(" (deleted)"))
        .collect()
}

/// Outcome of one run of the command.
pub(super) struct Ran {
    pub wall: Duration,
    pub user_s: f64,
    pub sys_s: f64,
    status: i32,
    stderr_tail: String,
}

impl Ran {
    pub fn failure(&self, run: String) -> Option<Failure> {
        if libc::WIFEXITED(self.status) && libc::WEXITSTATUS(self.status) == 0 {
            return None;
        }
        Some(Failure {
            run,
            exit_status: libc::WIFEXITED(self.status).then(|| libc::WEXITSTATUS(self.status)),
            signal: libc::WIFSIGNALED(self.status).then(|| libc::WTERMSIG(self.status)),
            stderr_tail: self.stderr_tail.clone(),
        })
    }
}

fn tv_secs(tv: libc::timeval) -> f64 {
    tv.tv_sec as f64 + tv.tv_usec as f64 * 1e-6
}

fn command_for(exe: &Path, opts: &Options, err_file: &File) -> Result<Command> {
    let mut cmd = Command::new(exe);
    cmd.arg0(&opts.command[0]).args(&opts.command[1..]).stdin(Stdio::null());
    cmd.stdout(if opts.show_output {
        Stdio::inherit()
    } else {
        Stdio::null()
    });
    cmd.stderr(err_file.try_clone().map_err(|e| Error::io("stderr capture", e))?);
    Ok(cmd)
}

fn stderr_tail(mut err_file: File) -> String {
    let mut tail = String::new();
    let len = err_file.seek(std::io::SeekFrom::End(0)).unwrap_or(0);
    let _ = err_file.seek(std::io::SeekFrom::Start(len.saturating_sub(2048)));
    let _ = err_file.read_to_string(&mut tail);
    let tail: Vec<&str> = tail.lines().rev().take(5).collect();
    tail.into_iter().rev().collect::<Vec<_>>().join("\n")
}

/// The warm-up run: trace the command's process tree with ptrace and read
/// every process's executable mappings when it exits. Falls back to
/// polling when ptrace is refused.
pub(super) fn discover_run(exe: &Path, opts: &Options, seen: &mut Vec<Vma>) -> Result<(Ran, Discovery)> {
    let err_file = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut cmd = command_for(exe, opts, &err_file)?;
    // SAFETY: ptrace(PTRACE_TRACEME) is async-signal-safe and touches no
    // memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::ptrace(
                libc::PTRACE_TRACEME,
                0,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let t = Instant::now();
    let child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            return Ok((run_once(exe, opts, Some(seen))?, Discovery::Polling));
        }
        Err(e) => return Err(Error::Other(format!("cannot start {}: {e}", exe.display()))),
    };
    let root = child.id() as i32;
    let ptrace = |req: libc::c_uint, pid: i32, data: usize| {
        // SAFETY: ptrace requests on our own stopped tracees; data is an
        // integer argument (options or signal number).
        unsafe {
            libc::ptrace(
                req,
                pid,
                std::ptr::null_mut::<libc::c_void>(),
                data as *mut libc::c_void,
            )
        }
    };
    let mut root_status = None;
    // SAFETY: rusage is plain data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    let mut root_ru = ru;
    let options = libc::PTRACE_O_TRACEFORK
        | libc::PTRACE_O_TRACEVFORK
        | libc::PTRACE_O_TRACECLONE
        | libc::PTRACE_O_TRACEEXEC
        | libc::PTRACE_O_TRACEEXIT
        | libc::PTRACE_O_EXITKILL;
    let mut configured = false;
    loop {
        let mut st = 0;
        // SAFETY: waiting for our tracees with valid out-pointers.
        let w = unsafe { libc::wait4(-1, &mut st, libc::__WALL, &mut ru) };
        if w < 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::ECHILD) => break,
                _ => {
                    return Err(Error::Sys {
                        call: "wait4",
                        source: e,
                    })
                }
            }
        }
        if libc::WIFEXITED(st) || libc::WIFSIGNALED(st) {
            if w == root {
                root_status = Some(st);
                root_ru = ru;
            }
            continue;
        }
        if !libc::WIFSTOPPED(st) {
            continue;
        }
        if w == root && !configured {
            // The stop after the first exec: follow everything from here.
            ptrace(libc::PTRACE_SETOPTIONS, w, options as usize);
            configured = true;
            ptrace(libc::PTRACE_CONT, w, 0);
            continue;
        }
        let sig = libc::WSTOPSIG(st);
        let event = st >> 16;
        let deliver = if event == libc::PTRACE_EVENT_EXIT {
            seen.extend(exec_maps(w));
            0
        } else if event != 0 || sig == libc::SIGTRAP || sig == libc::SIGSTOP {
            // ptrace events, exec traps and new tracees' initial stops.
            0
        } else {
            sig
        };
        ptrace(libc::PTRACE_CONT, w, deliver as usize);
    }
    let wall = t.elapsed();
    drop(child);
    let status = root_status.ok_or_else(|| Error::Other("lost track of the traced command".into()))?;
    let ran = Ran {
        wall,
        user_s: tv_secs(root_ru.ru_utime),
        sys_s: tv_secs(root_ru.ru_stime),
        status,
        stderr_tail: stderr_tail(err_file),
    };
    Ok((ran, Discovery::Ptrace))
}

/// Run the command once. With `watch`, poll its process tree and collect
/// executable mappings until it exits.
pub(super) fn run_once(exe: &Path, opts: &Options, mut watch: Option<&mut Vec<Vma>>) -> Result<Ran> {
    let err_file = tempfile::tempfile().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let mut cmd = command_for(exe, opts, &err_file)?;
    let self_exe = std::fs::read_link("/proc/self/exe").ok();
    let t = Instant::now();
    let child = cmd
        .spawn()
        .map_err(|e| Error::Other(format!("cannot start {}: {e}", exe.display())))?;
    let pid = child.id() as i32;
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    loop {
        let flags = if watch.is_some() { libc::WNOHANG } else { 0 };
        // SAFETY: waiting for our own child with valid out-pointers.
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            break;
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(Error::Sys {
                call: "wait4",
                source: e,
            });
        }
        if let Some(seen) = watch.as_deref_mut() {
            for p in procfs::descendants(pid) {
                // A child between fork and exec is still a copy of us.
                if self_exe.is_some() && std::fs::read_link(format!("/proc/{p}/exe")).ok() == self_exe {
                    continue;
                }
                seen.extend(exec_maps(p));
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let wall = t.elapsed();
    drop(child);
    Ok(Ran {
        wall,
        user_s: tv_secs(ru.ru_utime),
        sys_s: tv_secs(ru.ru_stime),
        status,
        stderr_tail: stderr_tail(err_file),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_exec_maps_and_tree() {
        let me = std::process::id() as i32;
        let maps = exec_maps(me);
        assert!(maps.iter().any(|m| m.path.contains("libc")), "{maps:?}");
        assert!(maps.iter().all(|m| m.is_exec() && m.path.starts_with('/')), "{maps:?}");
        assert_eq!(procfs::descendants(me)[0], me);
        let mut child = Command::new("sleep").arg("5").spawn().unwrap();
        assert!(procfs::descendants(me).contains(&(child.id() as i32)));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
