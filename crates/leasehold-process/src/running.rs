//! A participant running as a process: what the program works with while it runs, the wait
//! for a stop (reloading on SIGHUP meanwhile), and the hand-off at the end.

use std::fmt;
use std::sync::Arc;

use leasehold::{Halt, LeaseStore, Participant, Router};
use tokio::signal::unix::Signal;

use crate::shutdown::Shutdown;

/// What SIGHUP runs.
pub(crate) type Reload = Box<dyn Fn(&Participant) + Send + Sync>;

/// Why a process stopped.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StopReason {
    /// A stop was asked for: by the signal named (`SIGTERM`, `SIGINT`), or by the future
    /// given to [`Process::shutdown_on`](crate::Process::shutdown_on) (`shutdown`).
    Requested(String),
    /// The lease loop stopped by itself: why, if it said ([`Participant::stopped`]). Nothing
    /// renews the leases any more; the process should exit with an error, so that its
    /// supervisor restarts it and its operator hears why.
    Halted(Option<Halt>),
}

impl fmt::Display for StopReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StopReason::Requested(cause) => write!(f, "stopped on request ({cause})"),
            StopReason::Halted(Some(halt)) => write!(f, "the lease loop stopped: {halt}"),
            StopReason::Halted(None) => f.write_str("the lease loop stopped unexpectedly"),
        }
    }
}

impl StopReason {
    /// `Ok` for a stop that was asked for, the halt as an error otherwise: what `main`
    /// should return.
    pub fn into_result(self) -> anyhow::Result<()> {
        match self {
            StopReason::Requested(_) => Ok(()),
            halted => Err(anyhow::anyhow!("{halted}")),
        }
    }
}

/// A started process: its participant, the store it runs on, the router if one follows the
/// table. Run the program's work beside it, then [`Running::wait`] and [`Running::stop`].
pub struct Running {
    pub(crate) participant: Participant,
    pub(crate) store: Arc<dyn LeaseStore>,
    pub(crate) partitions: u32,
    pub(crate) router: Option<Router>,
    pub(crate) shutdown: Shutdown,
    hangup: Option<Signal>,
    pub(crate) reload: Option<Reload>,
    /// Whether [`Running::stop`] restarts in place ([`Participant::restart`]).
    pub(crate) restart_in_place: bool,
}

impl Running {
    pub(crate) fn new(
        participant: Participant,
        store: Arc<dyn LeaseStore>,
        partitions: u32,
        shutdown: Shutdown,
        hangup: Option<Signal>,
    ) -> Running {
        Running {
            participant,
            store,
            partitions,
            router: None,
            shutdown,
            hangup,
            reload: None,
            restart_in_place: false,
        }
    }

    /// The participant (cheap to clone).
    pub fn participant(&self) -> &Participant {
        &self.participant
    }

    /// The store, each call limited as start-up's were: for reading the table beside the
    /// participant (operator actions, routing).
    pub fn store(&self) -> &Arc<dyn LeaseStore> {
        &self.store
    }

    /// The group's partition count.
    pub fn partitions(&self) -> u32 {
        self.partitions
    }

    /// The router following the lease table, if [`Process::follow_router`](crate::Process::follow_router)
    /// asked for one.
    pub fn router(&self) -> Option<&Router> {
        self.router.as_ref()
    }

    /// Runs until a stop is asked for or the lease loop stops by itself, running the reload
    /// on each SIGHUP meanwhile. Returns why; [`Running::stop`] then hands off.
    ///
    /// Cancel-safe: it may be one branch of a `select!` in the program's own loop, polled
    /// again on the next turn, and a stop asked for meanwhile is not lost.
    pub async fn wait(&mut self) -> StopReason {
        let node = self.participant.node().clone();
        let reason = loop {
            tokio::select! {
                cause = self.shutdown.requested() => break StopReason::Requested(cause),
                _ = next_hangup(&mut self.hangup) => {
                    if let Some(reload) = &self.reload {
                        reload(&self.participant);
                    }
                }
                halt = self.participant.stopped() => break StopReason::Halted(halt),
            }
        };
        match &reason {
            StopReason::Requested(cause) if self.restart_in_place => tracing::info!(
                %node, signal = %cause, held = self.participant.owned().len(),
                "stopping to restart in place: leases stay reserved for this node's name"
            ),
            StopReason::Requested(cause) => tracing::info!(
                %node, signal = %cause, held = self.participant.owned().len(),
                "releasing leases and stopping"
            ),
            StopReason::Halted(_) => tracing::error!(%node, %reason, "stopping"),
        }
        reason
    }

    /// Hands every partition off once the work in flight under it has ended (within
    /// `drain_timeout`: past it the lease is left to expire instead), removes the node's
    /// member record, and stops the participant. With
    /// [`Process::restart_in_place`](crate::Process::restart_in_place), each partition is
    /// released reserved for the node's name instead ([`Participant::restart`]).
    pub async fn stop(self) {
        let node = self.participant.node().clone();
        if self.restart_in_place {
            self.participant.restart().await;
            tracing::info!(%node, "stopped; partitions reserved for the next process under this name");
        } else {
            self.participant.shutdown().await;
            tracing::info!(%node, "stopped");
        }
    }
}

async fn next_hangup(hangup: &mut Option<Signal>) {
    match hangup {
        Some(signal) => {
            signal.recv().await;
        }
        None => std::future::pending().await,
    }
}
