//! The store server's own counts of what the fleet asked of it, where the store keeps
//! any: PostgreSQL's `pg_stat_user_tables` for the store's tables (rows inserted, updated,
//! deleted, read), and etcd's `/metrics` (puts, deletes, transactions, ranges).

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

use leasehold_process::StoreUrl;
use serde::Serialize;

/// The server's counts over a stretch of the run, per second.
#[derive(Debug, Clone, Serialize)]
pub struct ServerRates {
    /// How long the stretch lasted.
    pub seconds: f64,
    /// Each count, per second: `inserted`, `updated`, `deleted`, `read` (rows, PostgreSQL);
    /// `puts`, `deletes`, `txns`, `ranges` (operations, etcd).
    pub per_second: BTreeMap<&'static str, f64>,
}

/// Where the server's counts are read from.
pub enum ServerCounts {
    /// The store's tables in `pg_stat_user_tables`.
    #[cfg(feature = "postgres")]
    Postgres(leasehold_postgres::PostgresStore),
    /// The `/metrics` of each etcd member, `HOST:PORT`, over plain HTTP.
    Etcd(Vec<String>),
}

/// One reading of the counts.
#[derive(Debug, Clone, Default)]
pub struct Reading(BTreeMap<&'static str, u64>);

/// etcd's counters, by the name they are reported under. Every member applies every write,
/// so writes are read from one member; each member serves its own ranges, so those are
/// summed.
const ETCD_COUNTERS: [(&str, &str, bool); 4] = [
    ("etcd_mvcc_put_total", "puts", false),
    ("etcd_mvcc_delete_total", "deletes", false),
    ("etcd_mvcc_txn_total", "txns", false),
    ("etcd_mvcc_range_total", "ranges", true),
];

impl ServerCounts {
    /// A reader for the server of `url` (the `--store` given as `text`), if it keeps counts
    /// and answers.
    pub async fn open(url: &StoreUrl, text: &str) -> Option<ServerCounts> {
        if let Some(rest) = text.strip_prefix("etcd://") {
            let authority = rest.split('/').next().unwrap_or(rest);
            let endpoints: Vec<String> = authority.split(',').map(str::to_owned).collect();
            let counts = ServerCounts::Etcd(endpoints);
            return counts.read().await.map(|_| counts);
        }
        match url {
            #[cfg(feature = "postgres")]
            StoreUrl::Postgres(options) => {
                let options = options.as_ref().clone().with_env().ok()?;
                let store = leasehold_postgres::PostgresStore::connect(options)
                    .await
                    .ok()?;
                Some(ServerCounts::Postgres(store))
            }
            _ => None,
        }
    }

    /// The counts now; `None` if the server did not answer.
    pub async fn read(&self) -> Option<Reading> {
        match self {
            #[cfg(feature = "postgres")]
            ServerCounts::Postgres(store) => {
                let c = store.table_statistics().await.ok()?;
                Some(Reading(BTreeMap::from([
                    ("inserted", c.inserted),
                    ("updated", c.updated),
                    ("deleted", c.deleted),
                    ("read", c.read),
                ])))
            }
            ServerCounts::Etcd(endpoints) => {
                let endpoints = endpoints.clone();
                tokio::task::spawn_blocking(move || etcd_counts(&endpoints))
                    .await
                    .ok()?
            }
        }
    }
}

impl Reading {
    /// The counts per second from `earlier` to this reading, `seconds` apart.
    pub fn rate_since(&self, earlier: &Reading, seconds: f64) -> ServerRates {
        let per_second = self
            .0
            .iter()
            .map(|(name, count)| {
                let grown = count.saturating_sub(earlier.0.get(name).copied().unwrap_or(0));
                let rate = if seconds > 0.0 {
                    grown as f64 / seconds
                } else {
                    0.0
                };
                (*name, rate)
            })
            .collect();
        ServerRates {
            seconds,
            per_second,
        }
    }
}

/// etcd's counters over `endpoints`; `None` unless every member answered.
fn etcd_counts(endpoints: &[String]) -> Option<Reading> {
    let mut counts = BTreeMap::new();
    for endpoint in endpoints {
        let text = metrics(endpoint)?;
        for (metric, name, summed) in ETCD_COUNTERS {
            let value = text
                .lines()
                .find_map(|line| line.strip_prefix(metric)?.trim().parse::<f64>().ok())?
                as u64;
            let count = counts.entry(name).or_insert(0);
            *count = if summed {
                *count + value
            } else {
                (*count).max(value)
            };
        }
    }
    Some(Reading(counts))
}

/// `GET /metrics` from `endpoint` (`HOST:PORT`), within two seconds.
fn metrics(endpoint: &str) -> Option<String> {
    let address = endpoint.to_socket_addrs().ok()?.next()?;
    let limit = Duration::from_secs(2);
    let mut stream = TcpStream::connect_timeout(&address, limit).ok()?;
    stream.set_read_timeout(Some(limit)).ok()?;
    stream.set_write_timeout(Some(limit)).ok()?;
    let request = format!("GET /metrics HTTP/1.0\r\nHost: {endpoint}\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_per_second_between_readings() {
        let first = Reading(BTreeMap::from([("puts", 10), ("ranges", 5)]));
        let second = Reading(BTreeMap::from([("puts", 30), ("ranges", 5)]));
        let rates = second.rate_since(&first, 4.0);
        assert_eq!(rates.per_second["puts"], 5.0);
        assert_eq!(rates.per_second["ranges"], 0.0);
    }
}
