//! Connections to the control socket and the metrics endpoint: each served on a thread of
//! its own (a bounded number), reading and writing under a deadline, so a client that is
//! slow, or sends a byte a second, holds neither the server nor the gateway.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Connections served at once per server; more are closed at once.
pub const MAX_CONNECTIONS: usize = 16;

/// A stream whose blocking calls take a timeout.
pub trait TimedStream: Read + Write {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()>;
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()>;
}

impl TimedStream for TcpStream {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, d)
    }
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, d)
    }
}

impl TimedStream for UnixStream {
    fn set_read_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, d)
    }
    fn set_write_timeout(&self, d: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, d)
    }
}

/// A stream that fails with `TimedOut` once its deadline has passed, however the peer
/// paces its bytes (a read timeout alone restarts with every byte).
pub struct Deadline<S> {
    stream: S,
    until: Instant,
}

impl<S: TimedStream> Deadline<S> {
    pub fn new(stream: S, within: Duration) -> Self {
        Deadline {
            stream,
            until: Instant::now() + within,
        }
    }

    /// A new deadline from now (for the reply, after the request was handled).
    pub fn renew(&mut self, within: Duration) {
        self.until = Instant::now() + within;
    }

    fn left(&self) -> io::Result<Duration> {
        self.until
            .checked_duration_since(Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| io::Error::new(io::ErrorKind::TimedOut, "connection deadline"))
    }
}

impl<S: TimedStream> Read for Deadline<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.stream.set_read_timeout(Some(left))?;
        self.stream.read(buf)
    }
}

impl<S: TimedStream> Write for Deadline<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.left()?;
        self.stream.set_write_timeout(Some(left))?;
        self.stream.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

/// Runs `serve` for one connection on a thread of its own, if fewer than
/// [`MAX_CONNECTIONS`] are being served (`active` counts them); otherwise returns false
/// and the caller drops the connection.
pub fn spawn_bounded(
    active: &Arc<AtomicUsize>,
    name: &str,
    serve: impl FnOnce() + Send + 'static,
) -> bool {
    if active.fetch_add(1, Ordering::AcqRel) >= MAX_CONNECTIONS {
        active.fetch_sub(1, Ordering::AcqRel);
        return false;
    }
    let done = active.clone();
    let spawned = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            serve();
            done.fetch_sub(1, Ordering::AcqRel);
        })
        .is_ok();
    if !spawned {
        active.fetch_sub(1, Ordering::AcqRel);
    }
    spawned
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;
    use std::net::TcpListener;

    #[test]
    fn a_trickling_client_meets_the_deadline() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            // A byte every 50 ms, never a newline: each byte would restart a plain read
            // timeout of 200 ms.
            for _ in 0..40 {
                if c.write_all(b"x").is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        let (s, _) = l.accept().unwrap();
        let start = Instant::now();
        let mut line = String::new();
        let e = io::BufReader::new(Deadline::new(s, Duration::from_millis(300)))
            .read_line(&mut line)
            .expect_err("deadline");
        let took = start.elapsed();
        assert!(
            matches!(
                e.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{e}"
        );
        assert!(took < Duration::from_millis(1500), "{took:?}");
        writer.join().unwrap();
    }

    #[test]
    fn at_most_max_connections_are_served_at_once() {
        let active = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(std::sync::Mutex::new(rx));
        for _ in 0..MAX_CONNECTIONS {
            let rx = rx.clone();
            assert!(spawn_bounded(&active, "t", move || {
                let _ = rx.lock().unwrap().recv();
            }));
        }
        assert!(!spawn_bounded(&active, "t", || {}), "one too many");
        for _ in 0..MAX_CONNECTIONS {
            tx.send(()).unwrap();
        }
        let end = Instant::now() + Duration::from_secs(5);
        while active.load(Ordering::Acquire) > 0 && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(active.load(Ordering::Acquire), 0);
        assert!(spawn_bounded(&active, "t", || {}));
    }
}
