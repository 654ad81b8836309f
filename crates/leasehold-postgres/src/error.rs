//! Turning PostgreSQL client errors into [`StoreError`]s.

use std::time::Duration;

use leasehold::StoreError;
use tokio_postgres::error::SqlState;

/// Maps a client error; `action` says what this layer was doing, `statement_timeout` is the
/// limit a cancelled statement ran into.
pub(crate) fn map_error(
    action: &str,
    statement_timeout: Duration,
    error: tokio_postgres::Error,
) -> StoreError {
    let Some(code) = error.code() else {
        return StoreError::unavailable(action, error);
    };
    if *code == SqlState::QUERY_CANCELED {
        return StoreError::Timeout(statement_timeout);
    }
    // Class 53: insufficient resources (too many connections, out of memory or disk).
    if code.code().starts_with("53") {
        return StoreError::Throttled {
            message: format!("{action}: {}", db_message(&error)),
        };
    }
    // Class 22: a value the server refused (out of range, bad encoding).
    if code.code().starts_with("22") {
        return StoreError::Invalid(format!("{action}: {}", db_message(&error)));
    }
    StoreError::unavailable(action, error)
}

fn db_message(error: &tokio_postgres::Error) -> String {
    error
        .as_db_error()
        .map_or_else(|| error.to_string(), |db| db.message().to_owned())
}
