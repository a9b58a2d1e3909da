//! A guard between the client and tower-lsp, which stops serving at the first message it
//! cannot parse. Frames are read here first: a well-formed JSON-RPC message goes on; a
//! malformed one (no `Content-Length`, a body that is not JSON or not JSON-RPC, over
//! [`MAX_MESSAGE`]) is answered with a JSON-RPC error (`id: null`, as the spec says for
//! an unreadable request), logged on standard error, and skipped — the server goes on.
//! Replies from tower-lsp and these errors reach standard output whole, one frame at a
//! time.

use serde_json::Value;
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt,
};

/// The largest message read (larger ones are skipped unread).
pub const MAX_MESSAGE: u64 = 64 << 20;
/// The longest header line read.
const MAX_HEADER_LINE: u64 = 8 << 10;

/// One frame from the client.
#[derive(Debug, PartialEq)]
pub enum Frame {
    Message(Vec<u8>),
    /// Unusable; why, and the JSON-RPC error code to answer with.
    Malformed(String, i64),
    End,
}

const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;

/// Reads the next frame.
pub async fn read_frame<R: AsyncBufRead + Unpin>(r: &mut R) -> std::io::Result<Frame> {
    let mut length: Option<u64> = None;
    let mut headers = 0usize;
    loop {
        let mut line = Vec::new();
        let n = (&mut *r)
            .take(MAX_HEADER_LINE)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Ok(if headers == 0 {
                Frame::End
            } else {
                Frame::Malformed(
                    "the input ended inside a message header".into(),
                    PARSE_ERROR,
                )
            });
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            if headers == 0 {
                continue; // stray blank lines between messages
            }
            break;
        }
        headers += 1;
        if let Some((name, value)) = text.split_once(':') {
            if name.trim().eq_ignore_ascii_case("content-length") {
                length = value.trim().parse().ok();
            }
        }
    }
    let Some(length) = length else {
        return Ok(Frame::Malformed(
            "a message without a valid Content-Length header".into(),
            PARSE_ERROR,
        ));
    };
    if length > MAX_MESSAGE {
        tokio::io::copy(&mut (&mut *r).take(length), &mut tokio::io::sink()).await?;
        return Ok(Frame::Malformed(
            format!("a message of {length} bytes, over the {MAX_MESSAGE}-byte limit"),
            INVALID_REQUEST,
        ));
    }
    let mut body = Vec::new();
    (&mut *r).take(length).read_to_end(&mut body).await?;
    if u64::try_from(body.len()).unwrap_or(u64::MAX) < length {
        return Ok(Frame::Malformed(
            "the input ended inside a message body".into(),
            PARSE_ERROR,
        ));
    }
    Ok(match serde_json::from_slice::<Value>(&body) {
        Err(e) => Frame::Malformed(format!("a message body that is not JSON: {e}"), PARSE_ERROR),
        Ok(v) if is_json_rpc(&v) => Frame::Message(body),
        Ok(_) => Frame::Malformed(
            "a JSON body that is not a JSON-RPC 2.0 message".into(),
            INVALID_REQUEST,
        ),
    })
}

fn is_json_rpc(v: &Value) -> bool {
    let Some(o) = v.as_object() else {
        return false;
    };
    o.get("jsonrpc").and_then(Value::as_str) == Some("2.0")
        && (o.get("method").is_some_and(Value::is_string)
            || (o.contains_key("id") && (o.contains_key("result") || o.contains_key("error"))))
}

/// `body` with its `Content-Length` header.
pub fn framed(body: &[u8]) -> Vec<u8> {
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body);
    out
}

fn error_reply(why: &str, code: i64) -> Vec<u8> {
    let reply = serde_json::json!({
        "jsonrpc": "2.0",
        "id": null,
        "error": {"code": code, "message": format!("gantry lsp: ignored {why}")},
    });
    framed(reply.to_string().as_bytes())
}

/// Copies well-formed messages from `client` to `server`, answering malformed ones on
/// `replies`; returns when the client's input ends (the server then sees its end too).
pub async fn filter_input<R, W>(
    client: R,
    mut server: W,
    replies: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut client = tokio::io::BufReader::new(client);
    loop {
        match read_frame(&mut client).await {
            Ok(Frame::Message(body)) => {
                if server.write_all(&framed(&body)).await.is_err() {
                    return;
                }
            }
            Ok(Frame::Malformed(why, code)) => {
                eprintln!("gantry lsp: ignored {why}");
                let _ = replies.send(error_reply(&why, code));
            }
            Ok(Frame::End) | Err(_) => return,
        }
    }
}

/// Splits the server's output into whole frames and sends each on `out`.
pub async fn frames_of<R: AsyncRead + Unpin>(
    server: R,
    out: tokio::sync::mpsc::UnboundedSender<Vec<u8>>,
) {
    let mut server = tokio::io::BufReader::new(server);
    while let Ok(Frame::Message(body)) = read_frame(&mut server).await {
        if out.send(framed(&body)).is_err() {
            return;
        }
    }
}

/// Writes each frame to `stdout` whole.
pub async fn write_frames<W: AsyncWrite + Unpin>(
    mut stdout: W,
    mut frames: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
) {
    while let Some(f) = frames.recv().await {
        if stdout.write_all(&f).await.is_err() || stdout.flush().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn frames(input: &[u8]) -> Vec<Frame> {
        let mut r = tokio::io::BufReader::new(input);
        let mut out = Vec::new();
        loop {
            match read_frame(&mut r).await {
                Ok(Frame::End) | Err(_) => return out,
                Ok(f) => out.push(f),
            }
        }
    }

    #[tokio::test]
    async fn good_messages_pass_and_bad_ones_are_named() {
        let good = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        let mut input = framed(good);
        input.extend_from_slice(b"Content-Length: 10\r\n\r\n{not json}");
        input.extend_from_slice(b"Garbage-Header\r\n\r\n");
        input.extend_from_slice(&framed(br#"{"hello":"world"}"#));
        input.extend_from_slice(&framed(good));
        let got = frames(&input).await;
        assert_eq!(got.len(), 5);
        assert_eq!(got.first(), Some(&Frame::Message(good.to_vec())));
        assert!(
            matches!(got.get(1), Some(Frame::Malformed(w, PARSE_ERROR)) if w.contains("not JSON"))
        );
        assert!(
            matches!(got.get(2), Some(Frame::Malformed(w, PARSE_ERROR)) if w.contains("Content-Length"))
        );
        assert!(
            matches!(got.get(3), Some(Frame::Malformed(w, INVALID_REQUEST)) if w.contains("JSON-RPC"))
        );
        assert_eq!(got.get(4), Some(&Frame::Message(good.to_vec())));
    }

    #[tokio::test]
    async fn an_oversized_or_cut_message_is_malformed() {
        let big = format!("Content-Length: {}\r\n\r\n", MAX_MESSAGE + 1).into_bytes();
        assert!(
            matches!(frames(&big).await.first(), Some(Frame::Malformed(w, _)) if w.contains("limit"))
        );
        let cut = b"Content-Length: 100\r\n\r\n{\"jsonrpc\"";
        assert!(
            matches!(frames(cut).await.first(), Some(Frame::Malformed(w, _)) if w.contains("ended"))
        );
    }
}
