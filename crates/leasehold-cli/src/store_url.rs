//! Store URLs: the one place that maps a URL scheme to a store implementation.
//!
//! Supported forms:
//!
//! | URL | store |
//! | --- | --- |
//! | `sqlite:PATH` | the SQLite file at `PATH`, relative to the current directory unless absolute |
//! | `sqlite://PATH` | the same; `sqlite://data/leases.db` is relative, `sqlite:///var/lib/leases.db` absolute |
//! | `memory:` | an empty in-memory store private to this process: for `demo` and tests only, since no other process can see it |
//! | `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE` (or `postgresql://`) | PostgreSQL; the password may also come from `PGPASSWORD` and is never printed |
//! | `etcd://HOST:PORT[,HOST:PORT…][/PREFIX]` | an etcd cluster, records under `PREFIX` (default `/leasehold`); needs the `etcd` feature |
//! | `etcd+https://HOST:PORT[,…][/PREFIX]` | the same over TLS, verified against the CA in `LEASEHOLD_ETCD_CA` (or the Mozilla roots); a client certificate from `LEASEHOLD_ETCD_CERT` and `LEASEHOLD_ETCD_KEY` if the server demands one |
//! | `zk://HOST:PORT[,HOST:PORT…][/PREFIX]` | a ZooKeeper ensemble, records under `PREFIX` (default `/leasehold`) |
//! | `azure://ACCOUNT/TABLE` | Azure Table Storage at `https://ACCOUNT.table.core.windows.net`; the account key from `LEASEHOLD_AZURE_KEY` |
//! | `azure+http://HOST:PORT/ACCOUNT/TABLE` (or `azure+https://`) | an Azure Table endpoint with path-style URLs, such as the Azurite emulator; over HTTPS verified against the CA in `LEASEHOLD_AZURE_CA` if set |
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
const SUPPORTED: &str = "sqlite:PATH, sqlite://PATH, sqlite:///ABSOLUTE/PATH, memory:, \
     postgres://USER@HOST:PORT/DATABASE, etcd://HOST:PORT[,…]/PREFIX, etcd+https://HOST:PORT[,…]/PREFIX, \
     zk://HOST:PORT[,…]/PREFIX, azure://ACCOUNT/TABLE, azure+http(s)://HOST:PORT/ACCOUNT/TABLE";

/// Where records go in etcd and ZooKeeper when the URL names no prefix.
const DEFAULT_PREFIX: &str = "/leasehold";

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
    /// A PostgreSQL database.
    Postgres {
        /// The connection URL as given (it may hold a password: never print it).
        url: String,
    },
    /// An etcd cluster.
    Etcd {
        /// `host:port` of each member.
        endpoints: Vec<String>,
        /// The key prefix.
        prefix: String,
    },
    /// A ZooKeeper ensemble.
    Zookeeper {
        /// `host:port,host:port`.
        hosts: String,
        /// The znode path prefix.
        prefix: String,
    },
    /// An Azure Table Storage table.
    Azure {
        /// The storage account.
        account: String,
        /// The Table service endpoint.
        endpoint: String,
        /// The table.
        table: String,
    },
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
            "postgres" | "postgresql" => match rest.strip_prefix("//") {
                Some(after) if !after.is_empty() => Ok(StoreUrl::Postgres {
                    url: url.to_owned(),
                }),
                _ => Err(fail("expected postgres://USER@HOST:PORT/DATABASE".into())),
            },
            "etcd" | "etcd+https" | "zk" => {
                let (hosts, prefix) =
                    hosts_and_prefix(rest).map_err(|reason| fail(reason.into()))?;
                // TLS endpoints carry their scheme: the etcd store turns TLS on for them.
                let transport = if scheme == "etcd+https" {
                    "https://"
                } else {
                    ""
                };
                Ok(if scheme == "zk" {
                    StoreUrl::Zookeeper { hosts, prefix }
                } else {
                    StoreUrl::Etcd {
                        endpoints: hosts
                            .split(',')
                            .map(|h| format!("{transport}{h}"))
                            .collect(),
                        prefix,
                    }
                })
            }
            "azure" | "azure+http" | "azure+https" => {
                azure_parts(scheme, rest).map_err(|reason| fail(reason.into()))
            }
            other => Err(fail(format!("unknown scheme {other:?}"))),
        }
    }

    /// The store's kind, which is also the name of the cargo feature that includes it.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreUrl::Sqlite { .. } => "sqlite",
            StoreUrl::Memory => "memory",
            StoreUrl::Postgres { .. } => "postgres",
            StoreUrl::Etcd { .. } => "etcd",
            StoreUrl::Zookeeper { .. } => "zookeeper",
            StoreUrl::Azure { .. } => "azure",
        }
    }

    /// Whether other processes can see this store (false for `memory:`).
    pub fn is_shared(&self) -> bool {
        !matches!(self, StoreUrl::Memory)
    }
}

/// `//host:port[,host:port…][/prefix]` → (`host:port,…`, `/prefix`).
fn hosts_and_prefix(rest: &str) -> Result<(String, String), &'static str> {
    let rest = rest
        .strip_prefix("//")
        .ok_or("expected //HOST:PORT[,HOST:PORT…][/PREFIX]")?;
    let (hosts, prefix) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, DEFAULT_PREFIX),
    };
    let valid_host = |host: &str| {
        host.rsplit_once(':')
            .is_some_and(|(name, port)| !name.is_empty() && port.parse::<u16>().is_ok())
    };
    if hosts.is_empty() || !hosts.split(',').all(valid_host) {
        return Err("every host needs the form HOST:PORT");
    }
    let prefix = prefix.trim_end_matches('/');
    let prefix = if prefix.is_empty() {
        DEFAULT_PREFIX
    } else {
        prefix
    };
    Ok((hosts.to_owned(), prefix.to_owned()))
}

/// The account, endpoint and table of an `azure…:` URL.
fn azure_parts(scheme: &str, rest: &str) -> Result<StoreUrl, &'static str> {
    let rest = rest
        .strip_prefix("//")
        .ok_or("expected azure://ACCOUNT/TABLE")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let (account, endpoint, table) = match (scheme, parts.as_slice()) {
        ("azure", [account, table]) => (
            account.to_string(),
            format!("https://{account}.table.core.windows.net"),
            table.to_string(),
        ),
        ("azure+http" | "azure+https", [host, account, table]) => {
            let transport = scheme.trim_start_matches("azure+");
            (
                account.to_string(),
                format!("{transport}://{host}/{account}"),
                table.to_string(),
            )
        }
        ("azure", _) => return Err("expected azure://ACCOUNT/TABLE"),
        _ => return Err("expected azure+http://HOST:PORT/ACCOUNT/TABLE"),
    };
    if account.is_empty() || table.is_empty() {
        return Err("the account and the table must not be empty");
    }
    Ok(StoreUrl::Azure {
        account,
        endpoint,
        table,
    })
}

/// `url` with any password replaced, for messages.
fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) => {
            let user = credentials.split(':').next().unwrap_or_default();
            let hidden = if credentials.contains(':') {
                ":***"
            } else {
                ""
            };
            format!("{scheme}://{user}{hidden}@{host}{path}")
        }
        None => url.to_owned(),
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
            StoreUrl::Postgres { url } => f.write_str(&redact(url)),
            StoreUrl::Etcd { endpoints, prefix } => {
                let tls = endpoints.iter().any(|e| e.starts_with("https://"));
                let hosts: Vec<&str> = endpoints
                    .iter()
                    .map(|e| e.trim_start_matches("https://"))
                    .collect();
                let scheme = if tls { "etcd+https" } else { "etcd" };
                write!(f, "{scheme}://{}{prefix}", hosts.join(","))
            }
            StoreUrl::Zookeeper { hosts, prefix } => write!(f, "zk://{hosts}{prefix}"),
            StoreUrl::Azure {
                account,
                endpoint,
                table,
            } => match endpoint.strip_suffix(&format!("/{account}")) {
                Some(base) => {
                    let (transport, host) = base.split_once("://").unwrap_or(("https", base));
                    write!(f, "azure+{transport}://{host}/{account}/{table}")
                }
                None => write!(f, "azure://{account}/{table}"),
            },
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
        other => open_remote(other)
            .await
            .with_context(|| format!("cannot open store {url}"))?,
    };
    Ok(store)
}

/// Opens a store on another server; each kind only if this build includes its crate.
async fn open_remote(url: &StoreUrl) -> anyhow::Result<Arc<dyn LeaseStore>> {
    match url {
        #[cfg(feature = "postgres")]
        StoreUrl::Postgres { url } => Ok(Arc::new(
            leasehold_postgres::PostgresStore::from_url(url).await?,
        )),
        #[cfg(feature = "etcd")]
        etcd @ StoreUrl::Etcd { .. } => Ok(Arc::new(
            leasehold_etcd::EtcdStore::from_url(&etcd.to_string()).await?,
        )),
        #[cfg(feature = "zookeeper")]
        StoreUrl::Zookeeper { hosts, prefix } => Ok(Arc::new(
            leasehold_zookeeper::ZookeeperStore::connect(
                leasehold_zookeeper::ZookeeperOptions::new(hosts.split(','))
                    .prefix(prefix.as_str()),
            )
            .await?,
        )),
        #[cfg(feature = "azure")]
        azure @ StoreUrl::Azure { .. } => Ok(Arc::new(
            leasehold_azure::AzureTableStore::from_url(&azure.to_string()).await?,
        )),
        other => anyhow::bail!(
            "this leasehold was built without support for {}; rebuild with `--features {}`",
            other.kind(),
            other.kind()
        ),
    }
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
            ("etcd://nohost", "HOST:PORT"),
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
    fn remote_stores_parse_into_their_parts() {
        assert_eq!(
            StoreUrl::parse("etcd://10.0.0.1:2379,10.0.0.2:2379/apps/orders"),
            Ok(StoreUrl::Etcd {
                endpoints: vec!["10.0.0.1:2379".into(), "10.0.0.2:2379".into()],
                prefix: "/apps/orders".into()
            })
        );
        assert_eq!(
            StoreUrl::parse("zk://zk1:2181"),
            Ok(StoreUrl::Zookeeper {
                hosts: "zk1:2181".into(),
                prefix: "/leasehold".into()
            })
        );
        assert_eq!(
            StoreUrl::parse("azure://acme/leases"),
            Ok(StoreUrl::Azure {
                account: "acme".into(),
                endpoint: "https://acme.table.core.windows.net".into(),
                table: "leases".into()
            })
        );
        assert_eq!(
            StoreUrl::parse("azure+http://127.0.0.1:10002/devstoreaccount1/leases"),
            Ok(StoreUrl::Azure {
                account: "devstoreaccount1".into(),
                endpoint: "http://127.0.0.1:10002/devstoreaccount1".into(),
                table: "leases".into()
            })
        );
        for bad in [
            "etcd://",
            "etcd://host",
            "zk://h:notaport/x",
            "azure://acme",
            "postgres:",
        ] {
            assert!(StoreUrl::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_are_never_displayed() {
        let url = StoreUrl::parse("postgres://app:s3cret@db:5432/leases").unwrap();
        assert_eq!(url.to_string(), "postgres://app:***@db:5432/leases");
        assert!(!format!("{url}").contains("s3cret"));
        let no_password = StoreUrl::parse("postgres://app@db/leases").unwrap();
        assert_eq!(no_password.to_string(), "postgres://app@db/leases");
    }

    #[test]
    fn display_round_trips() {
        for url in [
            "sqlite:/a/b.db",
            "sqlite:b.db",
            "memory:",
            "etcd://h1:1,h2:2/p",
            "zk://h:1/leasehold",
            "etcd+https://h1:1,h2:2/p",
            "azure://acme/leases",
            "azure+http://127.0.0.1:10002/devstoreaccount1/leases",
        ] {
            assert_eq!(StoreUrl::parse(url).unwrap().to_string(), url);
        }
    }
}
