//! The agent's HTTP listener: hyper (HTTP/1.1) on a current-thread tokio
//! runtime, one thread for every connection, pages built on a small pool of
//! blocking threads.
//!
//! Bounded whatever clients do:
//! - at most [`Limits::max_conns`] connections (derived from the open-file
//!   limit); past it, a new connection evicts the oldest one that is not
//!   waiting for a page and is older than [`FRESH`] (an idle or half-sent
//!   request costs its sender the slot, not the scrapers), and when there
//!   is none the newcomer gets `503` (its request is read and dropped
//!   first, so that closing it never sends a reset ahead of the answer);
//! - a connection that does not send a whole request header within
//!   [`Limits::header_timeout`] (new, slow, or idle between keep-alive
//!   requests) is closed;
//! - a connection lives at most [`Limits::max_life`] (a client that never
//!   reads its response);
//! - request headers are read into at most 64 KiB.

use std::io::Cursor;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::sync::Notify;

use super::collect::{wants_openmetrics, CLASSIC, OPENMETRICS};
use super::Shared;
use crate::{Error, Result};

/// The listener's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections open at once.
    pub max_conns: usize,
    /// Time to receive a whole request header, also between keep-alive
    /// requests.
    pub header_timeout: Duration,
    /// Lifetime of one connection.
    pub max_life: Duration,
    /// Threads that build pages (requests beyond wait for one).
    pub page_threads: usize,
    /// Refused connections being answered `503` at once (beyond, a
    /// refused connection is closed without an answer).
    pub max_refusing: usize,
}

/// The listen backlog: a burst of connections waits in it for `accept`
/// rather than being dropped.
pub const BACKLOG: u32 = 1024;

/// How long a refused connection is kept to answer it: its request is read
/// and dropped, so that closing it sends the `503`, not a reset.
pub const REFUSE_LINGER: Duration = Duration::from_secs(2);

/// Connections at most, whatever the open-file limit.
pub const MAX_CONNS: usize = 128;
/// File descriptors kept for everything but connections: /proc and policy
/// files, inotify, netlink, the runtime, stdio.
pub const RESERVED_FDS: u64 = 64;

impl Limits {
    /// The bounds for a process whose soft open-file limit is `nofile`.
    pub fn for_nofile(nofile: u64) -> Limits {
        let room = nofile.saturating_sub(RESERVED_FDS);
        let max_conns = (room.min(MAX_CONNS as u64) as usize).max(4);
        Limits {
            max_conns,
            max_refusing: max_conns,
            header_timeout: Duration::from_secs(10),
            max_life: Duration::from_secs(300),
            page_threads: 8,
        }
    }

    /// The bounds for this process.
    pub fn of_this_process() -> Limits {
        let nofile = rustix::process::getrlimit(rustix::process::Resource::Nofile)
            .current
            .unwrap_or(u64::MAX);
        Limits::for_nofile(nofile)
    }
}

/// A response body: a shared page (no copy per request), or a short text.
enum Body {
    Page(Arc<super::PageResult>, bool),
    Text(String),
}

impl AsRef<[u8]> for Body {
    fn as_ref(&self) -> &[u8] {
        match self {
            Body::Page(p, om) => match &**p {
                Ok(page) if *om => page.openmetrics.as_bytes(),
                Ok(page) => page.classic.as_bytes(),
                // Never sent: a failed scrape is answered with a text body.
                Err(_) => &[],
            },
            Body::Text(t) => t.as_bytes(),
        }
    }
}

type Resp = Response<Full<Cursor<Body>>>;

fn reply(code: StatusCode, content_type: &str, body: Body) -> Resp {
    let mut r = Response::new(Full::new(Cursor::new(body)));
    *r.status_mut() = code;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn text(code: StatusCode, t: &str) -> Resp {
    reply(code, "text/plain; charset=utf-8", Body::Text(t.to_string()))
}

/// Answer one request.
async fn handle(req: Request<Incoming>, sh: Arc<Shared>) -> Resp {
    match (req.method(), req.uri().path()) {
        // HEAD: the same answer, which hyper sends without its body.
        (&Method::GET | &Method::HEAD, "/metrics") => {
            let om = req
                .headers()
                .get(hyper::header::ACCEPT)
                .and_then(|v| v.to_str().ok())
                .is_some_and(wants_openmetrics);
            let s = sh.clone();
            let p = match tokio::task::spawn_blocking(move || super::page(&s)).await {
                Ok(p) => p,
                Err(_) => Arc::new(Err(crate::Error::Other("internal error".into()))),
            };
            match &*p {
                Ok(_) => reply(
                    StatusCode::OK,
                    if om { OPENMETRICS } else { CLASSIC },
                    Body::Page(p, om),
                ),
                Err(e) => {
                    sh.metrics.error("failed", 1);
                    super::log(&format!("scrape failed: {e}"));
                    text(StatusCode::INTERNAL_SERVER_ERROR, &format!("scrape failed: {e}\n"))
                }
            }
        }
        (&Method::GET | &Method::HEAD, "/healthz") => text(StatusCode::OK, "ok\n"),
        (&Method::GET | &Method::HEAD, "/") => reply(
            StatusCode::OK,
            "text/html; charset=utf-8",
            Body::Text(
                "<html><body><a href=\"/metrics\">/metrics</a> <a href=\"/healthz\">/healthz</a></body></html>\n"
                    .into(),
            ),
        ),
        _ => text(StatusCode::NOT_FOUND, "not found: try /metrics or /healthz\n"),
    }
}

/// One open connection, as the accept loop sees it.
struct Slot {
    id: u64,
    opened: std::time::Instant,
    /// A request of this connection is waiting for its page.
    busy: Arc<AtomicBool>,
    evict: Arc<Notify>,
}

/// A connection younger than this is never evicted as idle.
pub const FRESH: Duration = Duration::from_secs(1);

/// The open connections, oldest first.
#[derive(Default)]
struct Slots {
    open: Mutex<Vec<Slot>>,
    next: AtomicU64,
}

/// What to do with a new connection when `open` are open, `idle` of them
/// not waiting for a page: serve it, serve it after evicting the oldest idle
/// one, or refuse it.
#[derive(Debug, PartialEq, Eq)]
pub enum Admit {
    Serve,
    EvictOldestIdle,
    Refuse,
}

/// The admission rule (a pure function of the counts).
pub fn admit(open: usize, idle: usize, max: usize) -> Admit {
    if open < max {
        Admit::Serve
    } else if idle > 0 {
        Admit::EvictOldestIdle
    } else {
        Admit::Refuse
    }
}

impl Slots {
    /// A slot for a new connection, or `None`: refuse it.
    fn take(&self, max: usize) -> Option<(u64, Arc<AtomicBool>, Arc<Notify>)> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        // Idle: not waiting for a page, and open long enough to have sent
        // a request (a connection of a burst that is still sending its
        // request is not idle: evicting it would answer it nothing).
        let evictable = |s: &Slot| !s.busy.load(Ordering::SeqCst) && s.opened.elapsed() >= FRESH;
        let idle = open.iter().filter(|s| evictable(s)).count();
        match admit(open.len(), idle, max) {
            Admit::Refuse => return None,
            Admit::EvictOldestIdle => {
                if let Some(i) = open.iter().position(evictable) {
                    open.remove(i).evict.notify_one();
                }
            }
            Admit::Serve => {}
        }
        let slot = Slot {
            opened: std::time::Instant::now(),
            id: self.next.fetch_add(1, Ordering::SeqCst),
            busy: Arc::new(AtomicBool::new(false)),
            evict: Arc::new(Notify::new()),
        };
        let r = (slot.id, slot.busy.clone(), slot.evict.clone());
        open.push(slot);
        Some(r)
    }

    fn release(&self, id: u64) {
        self.open
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|s| s.id != id);
    }
}

/// Marks a connection busy while one of its requests waits for a page.
struct Busy(Arc<AtomicBool>);

impl Busy {
    fn new(flag: &Arc<AtomicBool>) -> Busy {
        flag.store(true, Ordering::SeqCst);
        Busy(flag.clone())
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

const REFUSED: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 34\r\nConnection: close\r\nRetry-After: 1\r\n\r\nbusy: too many connections, retry\n";

/// Serve one connection until it ends, times out or is evicted.
async fn connection(
    stream: tokio::net::TcpStream,
    sh: Arc<Shared>,
    lim: Limits,
    busy: Arc<AtomicBool>,
    evict: Arc<Notify>,
) {
    let svc = hyper::service::service_fn(move |req| {
        let (sh, busy) = (sh.clone(), busy.clone());
        async move {
            let _b = Busy::new(&busy);
            Ok::<_, std::convert::Infallible>(handle(req, sh).await)
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(lim.header_timeout)
        .max_buf_size(64 << 10)
        .serve_connection(TokioIo::new(stream), svc);
    tokio::select! {
        _ = conn => {}
        _ = evict.notified() => {}
        _ = tokio::time::sleep(lim.max_life) => {}
    }
}

/// Answer a refused connection `503`, end the sending side, then read and
/// drop what the client sent (its request) until it closes: closing a
/// socket with unread data would send a reset, which can reach the client
/// before the answer.
async fn refuse(stream: tokio::net::TcpStream) {
    use std::os::fd::AsRawFd;
    // A fresh socket's send buffer holds the answer, once the runtime
    // knows the socket is writable.
    let mut sent = 0;
    while sent < REFUSED.len() {
        if stream.writable().await.is_err() {
            return;
        }
        match stream.try_write(&REFUSED[sent..]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
    // SAFETY: shutdown(2) of the sending side of our own socket.
    unsafe { libc::shutdown(stream.as_raw_fd(), libc::SHUT_WR) };
    let mut buf = [0u8; 4096];
    let mut left = 64usize << 10;
    while left > 0 {
        if stream.readable().await.is_err() {
            return;
        }
        match stream.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => left = left.saturating_sub(n),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(_) => return,
        }
    }
}

/// Accept and serve until `stop` is notified.
async fn accept_loop(listener: tokio::net::TcpListener, sh: Arc<Shared>, lim: Limits, stop: Arc<Notify>) {
    let slots = Arc::new(Slots::default());
    let refusing = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    loop {
        let stream = tokio::select! {
            _ = stop.notified() => return,
            r = listener.accept() => match r {
                Ok((s, _)) => s,
                Err(_) => {
                    // Out of file descriptors or a connection reset before
                    // accept: wait a little rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let Some((id, busy, evict)) = slots.take(lim.max_conns) else {
            if refusing.load(Ordering::SeqCst) < lim.max_refusing {
                refusing.fetch_add(1, Ordering::SeqCst);
                let refusing = refusing.clone();
                tokio::spawn(async move {
                    let _ = tokio::time::timeout(REFUSE_LINGER, refuse(stream)).await;
                    refusing.fetch_sub(1, Ordering::SeqCst);
                });
            } else {
                // Too many being refused: a try, and close.
                let _ = stream.try_write(REFUSED);
            }
            continue;
        };
        let (sh, slots) = (sh.clone(), slots.clone());
        tokio::spawn(async move {
            connection(stream, sh, lim, busy, evict).await;
            slots.release(id);
        });
    }
}

/// The listener's thread: binds first (errors are one line), then serves
/// until `stop` is notified.
pub(super) fn start(
    addr: std::net::SocketAddr,
    sh: Arc<Shared>,
    lim: Limits,
    stop: Arc<Notify>,
) -> Result<(std::net::SocketAddr, std::thread::JoinHandle<()>)> {
    let bad = |e: std::io::Error| Error::Invalid(format!("cannot listen on {addr}: {e}"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .max_blocking_threads(lim.page_threads)
        .thread_name("hugetext-agent-http")
        .build()
        .map_err(|e| Error::Invalid(format!("cannot start the HTTP listener: {e}")))?;
    let listener = {
        let _g = rt.enter();
        let sock = match addr {
            std::net::SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
            std::net::SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
        }
        .map_err(bad)?;
        sock.set_reuseaddr(true).map_err(bad)?;
        sock.bind(addr).map_err(bad)?;
        sock.listen(BACKLOG).map_err(bad)?
    };
    let local = listener.local_addr().map_err(bad)?;
    let t = std::thread::Builder::new()
        .name("hugetext-agent-http".into())
        .spawn(move || rt.block_on(accept_loop(listener, sh, lim, stop)))
        .map_err(|e| Error::Invalid(format!("cannot start the HTTP listener: {e}")))?;
    Ok((local, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_serves_evicts_idle_then_refuses() {
        assert_eq!(admit(0, 0, 4), Admit::Serve);
        assert_eq!(admit(3, 0, 4), Admit::Serve);
        assert_eq!(admit(4, 1, 4), Admit::EvictOldestIdle);
        assert_eq!(admit(4, 0, 4), Admit::Refuse);
    }

    #[test]
    fn refusal_is_one_whole_response() {
        let (head, body) = std::str::from_utf8(REFUSED).unwrap().split_once("\r\n\r\n").unwrap();
        assert!(head.contains(&format!("Content-Length: {}\r\n", body.len())), "{head}");
    }

    #[test]
    fn connection_cap_follows_the_open_file_limit() {
        assert_eq!(Limits::for_nofile(1024).max_conns, MAX_CONNS);
        assert_eq!(Limits::for_nofile(100).max_conns, 36);
        assert_eq!(Limits::for_nofile(10).max_conns, 4);
        assert_eq!(Limits::for_nofile(u64::MAX).max_conns, MAX_CONNS);
    }
}
