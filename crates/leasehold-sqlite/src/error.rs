//! Turning SQLite's errors into [`StoreError`]s.

use leasehold::StoreError;
use rusqlite::ErrorCode;

/// Maps a SQLite error to the store error a caller can act on.
///
/// Every failure of SQLite itself is [`StoreError::Unavailable`] with the SQLite error as the
/// source: lock contention (busy, locked) and I/O failures pass with time, and for the rest
/// (a damaged file, a full disk, permissions) backing off and alerting is all a participant
/// can do.
pub(crate) fn sqlite_error(context: &str, error: rusqlite::Error) -> StoreError {
    let cause = match error.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
            "the database stayed locked by another connection for the whole busy timeout"
        }
        Some(
            ErrorCode::SystemIoFailure
            | ErrorCode::CannotOpen
            | ErrorCode::DiskFull
            | ErrorCode::PermissionDenied
            | ErrorCode::ReadOnly,
        ) => "the database file could not be read or written",
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            "the file is damaged or is not a SQLite database"
        }
        _ => "SQLite failed",
    };
    StoreError::Unavailable {
        message: format!("{context}: {cause}"),
        source: Some(Box::new(error)),
    }
}

/// Adds what was being done to a SQLite result.
pub(crate) trait Context<T> {
    /// Maps the error with [`sqlite_error`], naming `context` as what failed.
    fn context(self, context: &str) -> Result<T, StoreError>;
}

impl<T> Context<T> for Result<T, rusqlite::Error> {
    fn context(self, context: &str) -> Result<T, StoreError> {
        self.map_err(|error| sqlite_error(context, error))
    }
}

/// Whether `error` is SQLite's lock contention, which waiting longer can cure.
pub(crate) fn is_busy(error: &StoreError) -> bool {
    let StoreError::Unavailable {
        source: Some(source),
        ..
    } = error
    else {
        return false;
    };
    source
        .downcast_ref::<rusqlite::Error>()
        .and_then(rusqlite::Error::sqlite_error_code)
        .is_some_and(|code| matches!(code, ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    #[test]
    fn busy_and_io_errors_are_transient_with_the_cause_as_source() {
        for code in [rusqlite::ffi::SQLITE_BUSY, rusqlite::ffi::SQLITE_IOERR] {
            let error = sqlite_error("writing lease 0 of group g", failure(code));
            assert!(error.is_transient(), "{error}");
            assert!(std::error::Error::source(&error).is_some());
            assert!(error
                .to_string()
                .starts_with("store unavailable: writing lease 0 of group g"));
        }
        assert!(is_busy(&sqlite_error(
            "x",
            failure(rusqlite::ffi::SQLITE_BUSY)
        )));
        assert!(!is_busy(&sqlite_error(
            "x",
            failure(rusqlite::ffi::SQLITE_IOERR)
        )));
    }
}
