//! JSON bodies for the answers hyper writes itself. A request hyper cannot parse (a bad
//! request line, headers over its limit) is answered by hyper with an empty 400 or 431
//! and the connection closed, before any handler runs; invariant 12 promises JSON for
//! every error. This stream wrapper recognises that canned answer — the last thing
//! written on the connection, a 4xx/5xx head with `connection: close` and
//! `content-length: 0` — and writes it with a JSON body instead. Handlers' answers
//! always carry a body, so they are never touched.

use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection's stream with hyper's canned error answers given JSON bodies.
#[derive(Debug)]
pub struct JsonErrors<S> {
    inner: S,
    /// Bytes accepted from hyper and not yet written to `inner`.
    pending: Vec<u8>,
}

impl<S> JsonErrors<S> {
    pub fn new(inner: S) -> JsonErrors<S> {
        JsonErrors {
            inner,
            pending: Vec::new(),
        }
    }
}

/// `buf` with a canned empty error answer at its end rewritten to carry a JSON body;
/// `None` when there is none.
pub fn rewrite(buf: &[u8]) -> Option<Vec<u8>> {
    if !buf.ends_with(b"\r\n\r\n") {
        return None;
    }
    let start = find_last(buf, b"HTTP/1.1 ")?;
    let (before, head) = buf.split_at(start);
    let text = std::str::from_utf8(head).ok()?;
    let lower = text.to_ascii_lowercase();
    let status_line = text.lines().next()?;
    let code: u16 = status_line.split_whitespace().nth(1)?.parse().ok()?;
    if code < 400
        || !lower.contains("\r\nconnection: close\r\n")
        || !lower.contains("\r\ncontent-length: 0\r\n")
    {
        return None;
    }
    let reason = status_line.splitn(3, ' ').nth(2).unwrap_or("error");
    let message = match code {
        431 => "the request's headers are too large".to_string(),
        400 => "the request is not valid HTTP/1.1".to_string(),
        _ => format!("{reason}: the request could not be read"),
    };
    let body = serde_json::json!({ "error": message }).to_string();
    let mut out = before.to_vec();
    for line in text.trim_end_matches("\r\n").split("\r\n") {
        if line.to_ascii_lowercase().starts_with("content-length:") {
            out.extend_from_slice(b"content-type: application/json\r\n");
            out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        } else {
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(b"\r\n");
        }
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body.as_bytes());
    Some(out)
}

fn find_last(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

impl<S: AsyncWrite + Unpin> JsonErrors<S> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.pending.is_empty() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.pending))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.pending.drain(..n);
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for JsonErrors<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for JsonErrors<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        ready!(self.drain(cx))?;
        match rewrite(buf) {
            Some(replaced) => {
                self.pending = replaced;
                // Taken whole; written by this call or the next flush.
                let _ = self.drain(cx)?;
                Poll::Ready(Ok(buf.len()))
            }
            None => Pin::new(&mut self.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    // One buffer per write, so a canned answer is seen whole (hyper then flattens).
    fn is_write_vectored(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::rewrite;

    #[test]
    fn hyper_s_empty_errors_get_json_and_handlers_answers_stay() {
        let canned = b"HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\ndate: Tue, 24 Nov 2026 07:13:51 GMT\r\n\r\n";
        let out = String::from_utf8(rewrite(canned).unwrap_or_default()).unwrap_or_default();
        assert!(out.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: 47\r\ndate:"), "{out}");
        assert!(
            out.ends_with("\r\n\r\n{\"error\":\"the request's headers are too large\"}"),
            "{out}"
        );
        // After a good answer in the same buffer, only the canned one changes.
        let mut two = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}".to_vec();
        two.extend_from_slice(
            b"HTTP/1.1 400 Bad Request\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
        );
        let out = String::from_utf8(rewrite(&two).unwrap_or_default()).unwrap_or_default();
        assert!(
            out.starts_with("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}HTTP/1.1 400"),
            "{out}"
        );
        assert!(out.ends_with("not valid HTTP/1.1\"}"), "{out}");
        // A handler's answers: with a body, or not an error, or kept alive.
        for kept in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 12\r\n\r\n{\"error\":1}\n"[..],
            b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
        ] {
            assert_eq!(rewrite(kept), None);
        }
    }
}
