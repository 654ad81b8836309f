//! Store URLs: the scheme names the crate that reads the rest, URL forms and environment
//! variables (the table in docs/stores.md); this module only hands the URL over, or names the
//! feature this build left out. `memory:` is the tool's own, private to this process.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use leasehold::store_url::{redact, split_scheme, UrlError, UrlPart};
use leasehold::{LeaseStore, MemoryStore};
use leasehold_sqlite::{SqliteOptions, SqliteStore, Synchronous};

/// The default `--store`: `leasehold.db` in the current directory.
pub const DEFAULT_STORE: &str = "sqlite:leasehold.db";

/// The URL forms, for the message about a URL whose scheme is unknown.
const SUPPORTED: &str = "sqlite:PATH, sqlite://PATH, sqlite:///ABSOLUTE/PATH, memory:, \
     postgres://USER@HOST:PORT/DATABASE, etcd://HOST:PORT[,…]/PREFIX, etcd+https://HOST:PORT[,…]/PREFIX, \
     zk://HOST:PORT[,…]/PREFIX, azure://ACCOUNT/TABLE, azure+http(s)://HOST:PORT/ACCOUNT/TABLE";

/// Where the lease table lives, as the owning crate read it from the URL.
#[derive(Debug, Clone)]
pub enum StoreUrl {
    /// An SQLite database file, relative to the current directory unless absolute.
    Sqlite(PathBuf),
    /// A fresh in-memory store visible only inside this process.
    Memory,
    /// A PostgreSQL database (boxed: the client's settings are large).
    #[cfg(feature = "postgres")]
    Postgres(Box<leasehold_postgres::PostgresOptions>),
    /// An etcd cluster.
    #[cfg(feature = "etcd")]
    Etcd(leasehold_etcd::EtcdOptions),
    /// A ZooKeeper ensemble.
    #[cfg(feature = "zookeeper")]
    Zookeeper(leasehold_zookeeper::ZookeeperOptions),
    /// An Azure Table Storage table.
    #[cfg(feature = "azure")]
    Azure(leasehold_azure::AzureOptions),
}

/// A store URL this build cannot use; it names the URL, its password hidden.
#[derive(Debug)]
pub enum InvalidStoreUrl {
    /// The URL does not have a form its crate reads; the source says which part is wrong.
    Malformed(String, UrlError),
    /// The scheme's crate, named by its feature, is not in this build.
    NotBuilt(String, &'static str),
}

impl fmt::Display for InvalidStoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InvalidStoreUrl::Malformed(url, _) => write!(f, "invalid store URL {url:?}"),
            InvalidStoreUrl::NotBuilt(url, feature) => write!(
                f,
                "cannot open store {url}: this leasehold was built without support for \
                 {feature}; rebuild with `--features {feature}`"
            ),
        }
    }
}

impl std::error::Error for InvalidStoreUrl {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            InvalidStoreUrl::Malformed(_, error) => Some(error),
            InvalidStoreUrl::NotBuilt(..) => None,
        }
    }
}

impl StoreUrl {
    /// Hands `url` to the crate its scheme names, which reads it without connecting.
    pub fn parse(url: &str) -> Result<StoreUrl, InvalidStoreUrl> {
        let malformed =
            |error: UrlError| InvalidStoreUrl::Malformed(redact(url), error.scrubbed(url));
        let unknown = |detail: String| {
            let message = format!("{detail}; supported: {SUPPORTED}");
            malformed(UrlError::new(UrlPart::Scheme, message))
        };
        let (scheme, rest) = split_scheme(url).map_err(|e| unknown(e.to_string()))?;
        let parsed = match scheme {
            "sqlite" => SqliteStore::path_from_url(url).map(StoreUrl::Sqlite),
            "memory" if rest.is_empty() => Ok(StoreUrl::Memory),
            "memory" => Err(UrlError::new(
                UrlPart::Path,
                "memory: takes nothing after the colon",
            )),
            #[cfg(feature = "postgres")]
            "postgres" | "postgresql" => leasehold_postgres::PostgresOptions::from_url(url)
                .map(|o| StoreUrl::Postgres(o.into())),
            #[cfg(feature = "etcd")]
            "etcd" | "etcd+https" => leasehold_etcd::EtcdOptions::from_url(url).map(StoreUrl::Etcd),
            #[cfg(feature = "zookeeper")]
            "zk" => leasehold_zookeeper::ZookeeperOptions::from_url(url).map(StoreUrl::Zookeeper),
            #[cfg(feature = "azure")]
            "azure" | "azure+http" | "azure+https" => {
                leasehold_azure::AzureOptions::from_url(url).map(StoreUrl::Azure)
            }
            other => {
                return Err(match feature_of(other) {
                    Some(feature) => InvalidStoreUrl::NotBuilt(redact(url), feature),
                    None => unknown(format!("unknown scheme {other:?}")),
                })
            }
        };
        parsed.map_err(malformed)
    }

    /// Whether other processes can see this store (false for `memory:`).
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }
}

/// The cargo feature that brings in the store of `scheme`, for schemes of optional stores.
fn feature_of(scheme: &str) -> Option<&'static str> {
    match scheme {
        "postgres" | "postgresql" => Some("postgres"),
        "etcd" | "etcd+https" => Some("etcd"),
        "zk" => Some("zookeeper"),
        "azure" | "azure+http" | "azure+https" => Some("azure"),
        _ => None,
    }
}

/// The URL as the owning crate shows it: never a password or a key.
impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::Sqlite(path) => write!(f, "sqlite:{}", path.display()),
            StoreUrl::Memory => f.write_str("memory:"),
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(options) => options.fmt(f),
            #[cfg(feature = "etcd")]
            StoreUrl::Etcd(options) => options.fmt(f),
            #[cfg(feature = "zookeeper")]
            StoreUrl::Zookeeper(options) => options.fmt(f),
            #[cfg(feature = "azure")]
            StoreUrl::Azure(options) => options.fmt(f),
        }
    }
}

/// Opens the store `url` names, with what its crate reads from the environment. `call_limit`
/// is the time limit its callers put on each call: SQLite, whose writes block, is told to
/// give up within it, so that no write lands after its caller concluded it had not. The
/// error names the URL and carries the store's cause.
pub async fn open(url: &StoreUrl, call_limit: Duration) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let opening = async {
        let store: Arc<dyn LeaseStore> = match url {
            StoreUrl::Sqlite(path) => {
                let options = SqliteOptions::default().call_timeout(call_limit);
                Arc::new(SqliteStore::open_with(path, options).await?)
            }
            StoreUrl::Memory => Arc::new(MemoryStore::new()),
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(options) => Arc::new(
                leasehold_postgres::PostgresStore::connect(options.clone().with_env()?).await?,
            ),
            #[cfg(feature = "etcd")]
            StoreUrl::Etcd(options) => {
                Arc::new(leasehold_etcd::EtcdStore::connect(options.clone().with_env()?).await?)
            }
            #[cfg(feature = "zookeeper")]
            StoreUrl::Zookeeper(options) => {
                Arc::new(leasehold_zookeeper::ZookeeperStore::connect(options.clone()).await?)
            }
            #[cfg(feature = "azure")]
            StoreUrl::Azure(options) => Arc::new(
                leasehold_azure::AzureTableStore::connect(options.clone().with_env()?).await?,
            ),
        };
        anyhow::Ok(store)
    };
    opening
        .await
        .with_context(|| format!("cannot open store {url}"))
}

/// Reads `url` and opens the store it names: [`StoreUrl::parse`], then [`open`].
pub async fn open_url(url: &str, call_limit: Duration) -> anyhow::Result<Arc<dyn LeaseStore>> {
    open(&StoreUrl::parse(url)?, call_limit).await
}

/// Opens a throwaway SQLite file (the demo's, in a temporary directory). Commits are not
/// flushed to disk one by one: nothing needs to survive a machine crash, and per-commit
/// flushes on a busy disk would slow the demo's fast timings into spurious expiries.
pub async fn open_scratch_sqlite(
    path: &Path,
    call_limit: Duration,
) -> anyhow::Result<Arc<dyn LeaseStore>> {
    let options = SqliteOptions::default()
        .synchronous(Synchronous::Normal)
        .call_timeout(call_limit);
    let store = SqliteStore::open_with(path, options)
        .await
        .with_context(|| format!("cannot open store sqlite:{}", path.display()))?;
    Ok(Arc::new(store))
}

#[cfg(test)]
mod tests;
