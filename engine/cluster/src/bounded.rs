//! What an API server (or something posing as one) can make gantry hold: every response
//! body is read with a bound on its longest line, and error texts are cut short before
//! they are logged or kept.
//!
//! kube's client reads a watch stream line by line with no limit on a line, and a list or
//! a single object as one line: a line that never ends would be buffered until memory
//! runs out. Past [`MAX_LINE`] bytes without a newline the body fails; a watch then ends
//! with an error and kube-runtime's watcher starts it again, backing off, from its last
//! resourceVersion, so nothing is lost and nothing grows.

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use kube::client::ClientBuilder;
use kube::{Client, Config};
use std::pin::Pin;
use std::task::{Context, Poll};
use tower::BoxError;

/// The longest line (watch event, list page, object) gantry reads from the API server:
/// client-go's watch frames stop at 16 MiB by default; a list page of 500 large pods is a
/// few MiB.
pub const MAX_LINE: usize = 64 << 20;

/// The most of an error text kept in a log line, a note or a status.
pub const MAX_ERROR: usize = 512;

/// A client for `config` whose responses are read with [`MAX_LINE`] and whose writes are
/// counted (`crate::api_writes`).
pub fn client(config: Config) -> Result<Client, String> {
    let server = config.cluster_url.to_string();
    let builder = ClientBuilder::try_from(config)
        .map_err(|e| format!("cannot make a client for {server}: {}", brief(&e)))?;
    Ok(builder
        .with_layer(&tower::util::MapRequestLayer::new(
            |r: http::Request<kube::client::Body>| {
                crate::api_writes::count(r.method(), r.uri().path());
                r
            },
        ))
        .with_layer(&tower::util::MapResponseLayer::new(
            |r: http::Response<Box<kube::client::DynBody>>| r.map(|b| LineBound::new(b, MAX_LINE)),
        ))
        .build())
}

/// An error's text, cut to [`MAX_ERROR`] bytes (at a character boundary) with the length
/// it had: an API server's error body can be megabytes.
pub fn brief(e: &dyn std::fmt::Display) -> String {
    cut(&e.to_string())
}

/// `text` cut to [`MAX_ERROR`] bytes at a character boundary, saying how long it was.
pub fn cut(text: &str) -> String {
    if text.len() <= MAX_ERROR {
        return text.to_string();
    }
    let mut end = MAX_ERROR;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}… ({} bytes in all)",
        text.get(..end).unwrap_or(""),
        text.len()
    )
}

/// The line was longer than the bound.
#[derive(Debug)]
pub struct LineTooLong(pub usize);

impl std::fmt::Display for LineTooLong {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the API server sent a line of over {} bytes without a newline; the response is dropped",
            self.0
        )
    }
}

impl std::error::Error for LineTooLong {}

/// A body that fails once more than `max` bytes come without a newline.
#[derive(Debug)]
pub struct LineBound<B> {
    inner: B,
    since_newline: usize,
    max: usize,
    failed: bool,
}

impl<B> LineBound<B> {
    pub fn new(inner: B, max: usize) -> LineBound<B> {
        LineBound {
            inner,
            since_newline: 0,
            max,
            failed: false,
        }
    }
}

impl<B> Body for LineBound<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        if self.failed {
            return Poll::Ready(None);
        }
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let since = match data.iter().rposition(|b| *b == b'\n') {
                        Some(i) => data.len() - i - 1,
                        None => self.since_newline.saturating_add(data.len()),
                    };
                    self.since_newline = since;
                    if since > self.max {
                        self.failed = true;
                        return Poll::Ready(Some(Err(Box::new(LineTooLong(self.max)))));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.failed || self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    type Chunks = futures::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, std::io::Error>>>;

    fn body(chunks: Vec<&'static [u8]>) -> LineBound<StreamBody<Chunks>> {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = chunks
            .into_iter()
            .map(|c| Ok(Frame::data(Bytes::from_static(c))))
            .collect();
        LineBound::new(StreamBody::new(futures::stream::iter(frames)), 8)
    }

    #[tokio::test]
    async fn lines_under_the_bound_pass_whole() {
        let read = body(vec![b"12345", b"678\n1234", b"5678\n", b"abc"])
            .collect()
            .await
            .map(|c| c.to_bytes());
        assert_eq!(read.ok().as_deref(), Some(&b"12345678\n12345678\nabc"[..]));
    }

    #[tokio::test]
    async fn a_line_past_the_bound_fails_the_body() {
        let read = body(vec![b"1234\n12345", b"6789", b"never read"])
            .collect()
            .await;
        let e = read.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("over 8 bytes without a newline"), "{e}");
    }

    #[test]
    fn errors_are_cut_at_a_character_boundary() {
        let long = "é".repeat(1000);
        let cut = cut(&long);
        assert!(cut.len() < MAX_ERROR + 40, "{}", cut.len());
        assert!(cut.ends_with("(2000 bytes in all)"), "{cut}");
        assert_eq!(super::cut("short"), "short");
    }
}
