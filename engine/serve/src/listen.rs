//! The accept loop: plain TCP or TLS (rustls), HTTP/1.1 through hyper with a deadline on
//! the TLS handshake and on reading request headers, so a slow or silent client holds a
//! connection for seconds, not forever. On shutdown it stops accepting, lets requests in
//! flight finish (up to a limit) and returns.

use super::json_errors::JsonErrors;
use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

/// Limits a client must keep to.
#[derive(Debug, Clone, Copy)]
pub struct Deadlines {
    /// From accept to a finished TLS handshake.
    pub handshake: Duration,
    /// From the first byte of a request to the end of its headers.
    pub headers: Duration,
    /// How long shutdown waits for requests in flight.
    pub drain: Duration,
}

impl Default for Deadlines {
    fn default() -> Deadlines {
        Deadlines {
            handshake: Duration::from_secs(5),
            headers: Duration::from_secs(5),
            drain: Duration::from_secs(10),
        }
    }
}

/// The most a request's head may take, and hyper's read buffer: far above any real
/// client's headers (a bearer token is a few KiB), as nginx's 32 KiB and Go's 1 MiB are.
pub const MAX_HEAD: usize = 64 * 1024;

/// Serves `router` on `listener` until `stop` resolves.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    deadlines: Deadlines,
    stop: impl std::future::Future<Output = ()>,
) {
    let acceptor = tls.map(TlsAcceptor::from);
    let graceful = GracefulShutdown::new();
    let mut builder = hyper::server::conn::http1::Builder::new();
    // A request's head (its line and headers) over MAX_HEAD is answered 431 whatever
    // the reads it came in: hyper's default bound is its read buffer (about 400 KiB),
    // and a head near that size parsed or not by how the reads fell.
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(deadlines.headers)
        .max_buf_size(MAX_HEAD);
    let builder = Arc::new(builder);
    tokio::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(error) => {
                    // Out of file descriptors and the like: back off, keep serving.
                    tracing::warn!(%error, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut stop => break,
        };
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let watcher = graceful.watcher();
        let builder = builder.clone();
        let acceptor = acceptor.clone();
        tokio::spawn(async move {
            let result = match acceptor {
                None => {
                    let conn =
                        builder.serve_connection(TokioIo::new(JsonErrors::new(tcp)), service);
                    watcher.watch(conn).await
                }
                Some(acceptor) => {
                    let stream =
                        match tokio::time::timeout(deadlines.handshake, acceptor.accept(tcp)).await
                        {
                            Ok(Ok(s)) => s,
                            Ok(Err(error)) => {
                                tracing::debug!(%peer, %error, "TLS handshake failed");
                                return;
                            }
                            Err(_) => {
                                tracing::debug!(%peer, "TLS handshake timed out");
                                return;
                            }
                        };
                    let conn =
                        builder.serve_connection(TokioIo::new(JsonErrors::new(stream)), service);
                    watcher.watch(conn).await
                }
            };
            if let Err(error) = result {
                tracing::debug!(%peer, %error, "connection ended with an error");
            }
        });
    }
    drop(listener);
    if tokio::time::timeout(deadlines.drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("requests still in flight after the drain limit; closing them");
    }
}
