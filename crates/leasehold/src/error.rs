//! The one error type every store returns.

use std::time::Duration;

use crate::types::RecordKey;

/// A boxed error from a backend's own client, kept as the [`std::error::Error::source`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What went wrong with a store call, named for what the caller can do about it.
///
/// Backends keep their own error types and convert into this one; the backend's error is the
/// `source()`, not repeated in the message.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// A conditional write found a different version than expected: someone else wrote first.
    #[error("version conflict on {key}")]
    Conflict {
        /// The record.
        key: RecordKey,
    },
    /// A create-only write found the record already there.
    #[error("{key} already exists")]
    AlreadyExists {
        /// The record.
        key: RecordKey,
    },
    /// The record does not exist.
    #[error("{key} not found")]
    NotFound {
        /// The record.
        key: RecordKey,
    },
    /// The store could not be reached or failed; the call may succeed if tried again later.
    #[error("store unavailable: {message}")]
    Unavailable {
        /// What failed, at this layer.
        message: String,
        /// The backend's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The store asked us to slow down; back off before trying again.
    #[error("store throttled the request: {message}")]
    Throttled {
        /// What the store said.
        message: String,
    },
    /// The call did not finish within its time limit. Its effect is unknown: a conditional
    /// write may or may not have been applied.
    #[error("store call timed out after {0:?}")]
    Timeout(Duration),
    /// A record could not be decoded. Listings report it and carry on with the others.
    #[error("corrupt {key}: {reason}")]
    Corrupt {
        /// The record.
        key: RecordKey,
        /// What is wrong with it.
        reason: String,
    },
    /// The store does not offer this capability (for example change notifications).
    #[error("not supported by this store: {0}")]
    NotSupported(&'static str),
    /// The request was refused as invalid (for example a bad group or too large a batch).
    #[error("invalid request: {0}")]
    Invalid(String),
}

impl StoreError {
    /// The record the error is about, for errors about one record.
    pub fn key(&self) -> Option<&RecordKey> {
        match self {
            StoreError::Conflict { key }
            | StoreError::AlreadyExists { key }
            | StoreError::NotFound { key }
            | StoreError::Corrupt { key, .. } => Some(key),
            _ => None,
        }
    }

    /// Whether trying again later may succeed (unavailable, throttled, timed out).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Unavailable { .. } | StoreError::Throttled { .. } | StoreError::Timeout(_)
        )
    }

    /// A copy of a transient error for reporting it again (to each write of a failed batch):
    /// timeouts and throttling keep their kind, anything else becomes `Unavailable` with this
    /// error's message.
    pub fn summarize(&self) -> StoreError {
        match self {
            StoreError::Timeout(limit) => StoreError::Timeout(*limit),
            StoreError::Throttled { message } => StoreError::Throttled {
                message: message.clone(),
            },
            other => StoreError::Unavailable {
                message: other.to_string(),
                source: None,
            },
        }
    }

    /// An [`StoreError::Unavailable`] wrapping a backend error.
    pub fn unavailable(message: impl Into<String>, source: impl Into<BoxError>) -> StoreError {
        StoreError::Unavailable {
            message: message.into(),
            source: Some(source.into()),
        }
    }
}
