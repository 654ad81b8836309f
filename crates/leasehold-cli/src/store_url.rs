//! Store URLs: the one place that maps a URL scheme to a store implementation.
//!
//! Supported forms:
//!
//! | URL | store |
//! | --- | --- |
//! | `sqlite:PATH` | the SQLite file at `PATH`, relative to the current directory unless absolute |
//! | `sqlite://PATH` | the same; `sqlite://data/leases.db` is relative, `sqlite:///var/lib/leases.db` absolute |
//! | `memory:` | an empty in-memory store private to this process: for `demo` and tests only, since no other process can see it |
//!
//! The rule for SQLite: drop `sqlite:`, then one leading `//` if present; what is left is the
//! file path, taken literally (no percent-decoding, no query string). The default store is
//! `sqlite:leasehold.db`, the file `leasehold.db` in the current directory.
//!
//! To add a store: add a variant to [`StoreUrl`], a scheme arm in [`StoreUrl::parse`], a line
//! in [`SUPPORTED`], and an arm in [`open`] that builds it.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

use anyhow::Context;
use leasehold::{LeaseStore, MemoryStore};

/// The default `--store`: `leasehold.db` in the current directory.
pub const DEFAULT_STORE: &str = "sqlite:leasehold.db";

/// The URL forms this build understands, for error messages and help.
const SUPPORTED: &str = "sqlite:PATH, sqlite://PATH, sqlite:///ABSOLUTE/PATH, memory:";

/// Where the lease table lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreUrl {
    /// An SQLite database file.
    Sqlite {
        /// The file, as given (relative paths are resolved against the current directory).
        path: PathBuf,
    },
    /// A fresh in-memory store visible only inside this process.
    Memory,
}

/// A store URL that could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidStoreUrl {
    url: String,
    reason: String,
}

impl fmt::Display for InvalidStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid store URL {:?}: {}; supported: {SUPPORTED}",
            self.url, self.reason
        )
    }
}

impl std::error::Error for InvalidStoreUrl {}

impl StoreUrl {
    /// Parses a store URL; see the module documentation for the forms.
    pub fn parse(url: &str) -> Result<StoreUrl, InvalidStoreUrl> {
        let fail = |reason: String| InvalidStoreUrl {
            url: url.to_owned(),
            reason,
        };
        let Some((scheme, rest)) = url.split_once(':') else {
            return Err(fail("it has no scheme".into()));
        };
        match scheme {
            "sqlite" => {
                let path = rest.strip_prefix("//").unwrap_or(rest);
                if path.is_empty() {
                    return Err(fail("the SQLite file path is empty".into()));
                }
                Ok(StoreUrl::Sqlite {
                    path: PathBuf::from(path),
                })
            }
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(fail("memory: takes nothing after the colon".into())),
            other => Err(fail(format!("unknown scheme {other:?}"))),
        }
    }

    /// Whether other processes can see this store (false for `memory:`).
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }
}

impl FromStr for StoreUrl {
    type Err = InvalidStoreUrl;

    fn from_str(url: &str) -> Result<Self, Self::Err> {
        StoreUrl::parse(url)
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite { path } => write!(f, "sqlite:{}", path.display()),
            StoreUrl::Memory => f.write_str("memory:"),
        }
    }
}

/// Opens the store `url` names. The error names the URL and carries the store's cause.
pub async fn open(url: &StoreUrl) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let store: Arc<dyn LeaseStore> = match url {
        StoreUrl::Sqlite { path } => open_sqlite(path)
            .await
            .with_context(|| format!("cannot open store {url}"))?,
        StoreUrl::Memory => Arc::new(MemoryStore::new()),
    };
    Ok(store)
}

async fn open_sqlite(path: &std::path::Path) -> anyhow::Result<Arc<dyn LeaseStore>> {
    Ok(Arc::new(leasehold_sqlite::SqliteStore::open(path).await?))
}

/// Opens a throwaway SQLite file (the demo's, in a temporary directory). Commits are not
/// flushed to disk one by one: nothing needs to survive a machine crash, and per-commit
/// flushes on a busy disk would slow the demo's fast timings into spurious expiries.
pub async fn open_scratch_sqlite(path: &std::path::Path) -> anyhow::Result<Arc<dyn LeaseStore>> {
    use leasehold_sqlite::{SqliteOptions, SqliteStore, Synchronous};
    let options = SqliteOptions::default().synchronous(Synchronous::Normal);
    let store = SqliteStore::open_with(path, options)
        .await
        .with_context(|| format!("cannot open store sqlite:{}", path.display()))?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sqlite(path: &str) -> StoreUrl {
        StoreUrl::Sqlite { path: path.into() }
    }

    #[test]
    fn sqlite_forms_name_the_path() {
        assert_eq!(StoreUrl::parse("sqlite:leases.db"), Ok(sqlite("leases.db")));
        assert_eq!(StoreUrl::parse("sqlite:/a/b.db"), Ok(sqlite("/a/b.db")));
        assert_eq!(StoreUrl::parse("sqlite://b.db"), Ok(sqlite("b.db")));
        assert_eq!(StoreUrl::parse("sqlite://./b.db"), Ok(sqlite("./b.db")));
        assert_eq!(StoreUrl::parse("sqlite:///a/b.db"), Ok(sqlite("/a/b.db")));
        assert_eq!(StoreUrl::parse(DEFAULT_STORE), Ok(sqlite("leasehold.db")));
    }

    #[test]
    fn memory_takes_no_path() {
        assert_eq!(StoreUrl::parse("memory:"), Ok(StoreUrl::Memory));
        assert!(StoreUrl::parse("memory:x").is_err());
        assert!(!StoreUrl::Memory.is_shared());
    }

    #[test]
    fn bad_urls_name_the_problem_and_the_supported_forms() {
        let cases = [
            ("postgress://h/db", "unknown scheme \"postgress\""),
            ("leases.db", "no scheme"),
            ("sqlite:", "path is empty"),
            ("sqlite://", "path is empty"),
        ];
        for (url, needle) in cases {
            let message = StoreUrl::parse(url).unwrap_err().to_string();
            assert!(message.contains(needle), "{message}");
            assert!(message.contains("memory:"), "{message}");
        }
    }

    #[test]
    fn display_round_trips() {
        for url in ["sqlite:/a/b.db", "sqlite:b.db", "memory:"] {
            assert_eq!(StoreUrl::parse(url).unwrap().to_string(), url);
        }
    }
}
