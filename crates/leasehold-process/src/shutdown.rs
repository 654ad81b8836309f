//! What stops a process: SIGTERM or SIGINT by default, or a future of the caller's; and
//! SIGHUP, which asks it to reload its settings.

use std::future::Future;
use std::pin::Pin;

use anyhow::Context;
use tokio::signal::unix::{signal, Signal, SignalKind};

/// The request to stop, watched from start-up to the end: it may come while the store is
/// still being reached. Once it has come, it stays come.
pub(crate) struct Shutdown {
    pending: Option<Pin<Box<dyn Future<Output = String> + Send>>>,
    requested: Option<String>,
}

impl Shutdown {
    /// Stops on SIGTERM or SIGINT. The handlers are installed now, so that a signal from
    /// this moment on asks for a graceful stop rather than killing the process.
    pub(crate) fn on_signals() -> anyhow::Result<Shutdown> {
        let mut terminate = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
        Ok(Shutdown::on(async move {
            tokio::select! {
                _ = terminate.recv() => "SIGTERM".to_owned(),
                _ = interrupt.recv() => "SIGINT".to_owned(),
            }
        }))
    }

    /// Stops when `requested` resolves, with what it resolves to as the reason.
    pub(crate) fn on(requested: impl Future<Output = String> + Send + 'static) -> Shutdown {
        Shutdown {
            pending: Some(Box::pin(requested)),
            requested: None,
        }
    }

    /// Resolves with what asked the process to stop, at once if something already has.
    pub(crate) async fn requested(&mut self) -> String {
        if let Some(pending) = &mut self.pending {
            let cause = pending.await;
            self.pending = None;
            self.requested = Some(cause);
        }
        self.requested.clone().unwrap_or_default()
    }
}

/// SIGHUP, watched once a reload is asked for: without a handler it would kill the process.
pub(crate) fn hangup() -> anyhow::Result<Signal> {
    signal(SignalKind::hangup()).context("cannot watch for SIGHUP")
}
