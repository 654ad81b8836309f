//! Turning etcd client errors into [`StoreError`]s.

use std::time::Duration;

use etcd_client::Error;
use leasehold::StoreError;
use tonic::Code;

/// Maps a client error, naming what this layer was doing in `action`.
pub(crate) fn map_error(action: &str, limit: Duration, error: Error) -> StoreError {
    if let Error::GRpcStatus(status) = &error {
        match status.code() {
            Code::DeadlineExceeded => return StoreError::Timeout(limit),
            Code::ResourceExhausted => {
                return StoreError::Throttled {
                    message: format!("{action}: {}", status.message()),
                }
            }
            Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => {
                return StoreError::Invalid(format!("{action}: {}", status.message()))
            }
            _ => {}
        }
    }
    StoreError::unavailable(action, error)
}

/// Whether the request failed for want of a connection, so another endpoint may answer.
pub(crate) fn is_unreachable(error: &Error) -> bool {
    match error {
        Error::GRpcStatus(status) => status.code() == Code::Unavailable,
        Error::TransportError(_) | Error::IoError(_) => true,
        _ => false,
    }
}

/// Whether the request certainly never reached a server: its connection was refused. Only
/// then may a write be sent again without risking applying it twice.
pub(crate) fn never_sent(error: &Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = cause {
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                return true;
            }
        }
        cause = current.source();
    }
    false
}
