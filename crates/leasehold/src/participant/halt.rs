//! Why a participant's background task ended by itself, for the application to act on.

use crate::group::GroupMismatch;
use crate::types::NodeId;

/// Why a participant stopped on its own, without [`crate::Participant::shutdown`]: it no
/// longer holds anything, renews nothing, and will not start again. A process built on it
/// should exit with this as its error, so that its supervisor (and its operator) hear why.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Halt {
    /// The group record refused this node: at start, or when it had to register again and
    /// no longer fitted.
    #[error(transparent)]
    Refused(#[from] GroupMismatch),
    /// Another process took over this node's name: it wrote its own session over this
    /// process's (an orchestrator started a replacement while this one was paused or cut
    /// off, or the same name was given to two processes). Two processes renewing under one
    /// name would each end the other's session at every heartbeat, so the one that was
    /// replaced stops, and never writes over its successor.
    #[error(
        "node {node}: another process took over this name ({}{}); this one stops so that \
         the newer one keeps it. Give each process its own node name, or make sure the old \
         process is gone before its replacement starts",
        successor.map_or("a record without a session".to_owned(), |id| format!("session {id:016x}")),
        address.as_deref().map(|a| format!(", address {a}")).unwrap_or_default()
    )]
    Replaced {
        /// The name both processes use.
        node: NodeId,
        /// The session identity of the process that took over, as its member record shows it.
        successor: Option<u64>,
        /// The address the successor advertises, if any.
        address: Option<String>,
    },
}
