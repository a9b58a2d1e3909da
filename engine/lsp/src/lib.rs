//! `gantry lsp`: a language server over stdio (tower-lsp). `analysis` checks a policy and
//! answers editor queries; `server` keeps the open documents, re-checks the policy a
//! document belongs to (its directory's `.gantry` files, open buffers over disk) and
//! publishes diagnostics.

pub mod analysis;
pub mod framing;
pub mod position;
pub mod server;

/// Serves LSP on standard input and output until the client exits.
pub fn run() -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(async {
        let (service, socket) = tower_lsp::LspService::new(server::Backend::new);
        let (exited, on_exit) = tokio::sync::oneshot::channel();
        let service = ExitOnExit {
            inner: service,
            exited: Some(exited),
        };
        // tower-lsp stops serving after `exit` only when the next message arrives or the
        // client closes the pipe; the protocol says the process ends at `exit`.
        // Malformed client messages are answered and skipped before tower-lsp sees them
        // (it would stop serving); all output goes to stdout one whole frame at a time.
        let (to_server, server_in) = tokio::io::duplex(1 << 16);
        let (server_out, from_server) = tokio::io::duplex(1 << 16);
        let (frames, outgoing) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(framing::filter_input(
            tokio::io::stdin(),
            to_server,
            frames.clone(),
        ));
        tokio::spawn(framing::frames_of(from_server, frames));
        tokio::spawn(framing::write_frames(tokio::io::stdout(), outgoing));
        tokio::select! {
            () = tower_lsp::Server::new(server_in, server_out, socket).serve(service) => {}
            _ = on_exit => {}
        }
        // Let the last replies (the answer to `shutdown`) reach stdout.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    });
    // The stdin reader is a blocking thread stuck in read() until the client closes the
    // pipe; after `exit` the server must not wait for it.
    runtime.shutdown_background();
    Ok(())
}

/// Passes every message through and signals once the `exit` notification has been handled.
struct ExitOnExit<S> {
    inner: S,
    exited: Option<tokio::sync::oneshot::Sender<()>>,
}

impl<S> tower::Service<tower_lsp::jsonrpc::Request> for ExitOnExit<S>
where
    S: tower::Service<tower_lsp::jsonrpc::Request>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
    S::Error: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future =
        std::pin::Pin<Box<dyn std::future::Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: tower_lsp::jsonrpc::Request) -> Self::Future {
        let exit = (request.method() == "exit")
            .then(|| self.exited.take())
            .flatten();
        let fut = self.inner.call(request);
        Box::pin(async move {
            let result = fut.await;
            if let Some(tx) = exit {
                let _ = tx.send(());
            }
            result
        })
    }
}
