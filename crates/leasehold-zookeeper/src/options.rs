//! Where a [`ZookeeperStore`](crate::ZookeeperStore) connects, and its time limits.

use std::fmt;
use std::time::Duration;

use leasehold::store_url::{hosts_and_prefix, parse_hosts, split_scheme, PortRule};
use leasehold::store_url::{UrlError, UrlPart};
use leasehold::StoreError;

use crate::paths::check_prefix;

/// The ensemble, the znode prefix and the time limits of a
/// [`ZookeeperStore`](crate::ZookeeperStore).
///
/// Made from a URL, `zk://HOST:PORT[,HOST:PORT…][/PREFIX]`, or from a list of hosts; the
/// store reads no environment variables.
///
/// ```
/// use std::time::Duration;
/// use leasehold_zookeeper::ZookeeperOptions;
///
/// let options = ZookeeperOptions::from_url("zk://zk1:2181,zk2:2181/apps/orders")?
///     .call_timeout(Duration::from_secs(2));
/// assert_eq!(options.connect_string(), "zk1:2181,zk2:2181");
/// assert_eq!(options.znode_prefix(), "/apps/orders");
/// assert_eq!(options.to_string(), "zk://zk1:2181,zk2:2181/apps/orders");
///
/// let same = ZookeeperOptions::new(["zk1:2181", "zk2:2181"]).prefix("/apps/orders");
/// assert_eq!(same.to_string(), options.to_string());
/// # Ok::<(), leasehold::store_url::UrlError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZookeeperOptions {
    connect_string: String,
    prefix: String,
    session_timeout: Duration,
    call_timeout: Duration,
    listing_timeout: Duration,
}

impl ZookeeperOptions {
    /// Where records go when the URL names no prefix.
    pub const DEFAULT_PREFIX: &'static str = "/leasehold";

    /// Options for the ensemble at `hosts` (each `HOST:PORT`), records under
    /// [`ZookeeperOptions::DEFAULT_PREFIX`], with the default time limits. The hosts are
    /// checked when the store connects.
    pub fn new<I, S>(hosts: I) -> ZookeeperOptions
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let hosts: Vec<String> = hosts.into_iter().map(|h| h.as_ref().to_owned()).collect();
        ZookeeperOptions {
            connect_string: hosts.join(","),
            prefix: Self::DEFAULT_PREFIX.to_owned(),
            session_timeout: Duration::from_secs(10),
            call_timeout: Duration::from_secs(5),
            listing_timeout: Duration::from_secs(120),
        }
    }

    /// Reads `zk://HOST:PORT[,HOST:PORT…][/PREFIX]` without connecting. The prefix defaults
    /// to [`ZookeeperOptions::DEFAULT_PREFIX`]; a trailing `/` is dropped.
    ///
    /// ```
    /// use leasehold::store_url::UrlPart;
    /// use leasehold_zookeeper::ZookeeperOptions;
    ///
    /// let error = ZookeeperOptions::from_url("zk://h:notaport").unwrap_err();
    /// assert_eq!(error.part(), UrlPart::Port);
    /// ```
    pub fn from_url(url: &str) -> Result<ZookeeperOptions, UrlError> {
        let (scheme, rest) = split_scheme(url)?;
        if scheme != "zk" {
            return Err(UrlError::new(
                UrlPart::Scheme,
                format!("scheme {scheme:?} is not zk"),
            ));
        }
        let (hosts, prefix) = hosts_and_prefix(rest, Self::DEFAULT_PREFIX)?;
        check_prefix(&prefix).map_err(|reason| {
            UrlError::new(UrlPart::Prefix, format!("prefix {prefix:?} {reason}"))
        })?;
        Ok(ZookeeperOptions::new(hosts.iter().map(ToString::to_string)).prefix(prefix))
    }

    /// The znode under which every group is kept: `/a/b`, or `""` for the root. Parents are
    /// created as needed. Default [`ZookeeperOptions::DEFAULT_PREFIX`].
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The session timeout asked of the server (it may clamp it to its own bounds). It decides
    /// only how long the server keeps watches for a disconnected client: no lease depends on
    /// a session. Default 10 s.
    #[must_use]
    pub fn session_timeout(mut self, session_timeout: Duration) -> Self {
        self.session_timeout = session_timeout;
        self
    }

    /// The most one store call may take, including establishing a new session when the last
    /// one expired. Default 5 s.
    #[must_use]
    pub fn call_timeout(mut self, call_timeout: Duration) -> Self {
        self.call_timeout = call_timeout;
        self
    }

    /// The most one listing of a group's lease table may take, instead of `call_timeout`.
    /// Default 120 s.
    ///
    /// A listing reads every partition's znode, so it is the one call whose work grows with
    /// the table, and the caller sets its own limit on it: a participant allows
    /// `store_timeout` for every 4,096 partitions
    /// ([`ParticipantConfig::listing_timeout`]), 20 s at 16,384. A listing cut off sooner
    /// is work wasted, and a node whose listings keep failing never sees the table.
    ///
    /// [`ParticipantConfig::listing_timeout`]: leasehold::ParticipantConfig::listing_timeout
    #[must_use]
    pub fn listing_timeout(mut self, listing_timeout: Duration) -> Self {
        self.listing_timeout = listing_timeout;
        self
    }

    /// The hosts, as ZooKeeper's connect string `host:port,host:port`.
    pub fn connect_string(&self) -> &str {
        &self.connect_string
    }

    /// The znode prefix in force.
    pub fn znode_prefix(&self) -> &str {
        &self.prefix
    }

    /// The session timeout in force.
    pub fn session_timeout_limit(&self) -> Duration {
        self.session_timeout
    }

    /// The call timeout in force.
    pub fn call_timeout_limit(&self) -> Duration {
        self.call_timeout
    }

    /// The listing timeout in force.
    pub fn listing_timeout_limit(&self) -> Duration {
        self.listing_timeout
    }

    /// Checks the hosts, the prefix and the timeouts, naming the offending value.
    pub fn validate(&self) -> Result<(), StoreError> {
        parse_hosts(&self.connect_string, PortRule::Required)?;
        if let Err(reason) = check_prefix(&self.prefix) {
            return Err(StoreError::Invalid(format!(
                "ZooKeeper prefix {:?} {reason}",
                self.prefix
            )));
        }
        if self.call_timeout.is_zero()
            || self.session_timeout.is_zero()
            || self.listing_timeout.is_zero()
        {
            return Err(StoreError::Invalid(
                "ZooKeeper call, listing and session timeouts must be greater than zero".to_owned(),
            ));
        }
        Ok(())
    }
}

/// The URL the options stand for (the root prefix shows as none).
impl fmt::Display for ZookeeperOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "zk://{}{}", self.connect_string, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use leasehold::testing::assert_urls_refused;

    use super::*;

    #[test]
    fn urls_give_hosts_and_prefix() {
        for (url, hosts, prefix) in [
            ("zk://zk1:2181", "zk1:2181", "/leasehold"),
            ("zk://zk1:2181/", "zk1:2181", "/leasehold"),
            ("zk://a:1,b:2/apps/orders/", "a:1,b:2", "/apps/orders"),
            ("zk://[::1]:2181/x", "[::1]:2181", "/x"),
        ] {
            let options = ZookeeperOptions::from_url(url).unwrap();
            assert_eq!(options.connect_string(), hosts, "{url}");
            assert_eq!(options.znode_prefix(), prefix, "{url}");
            options.validate().unwrap();
        }
        let shown = ZookeeperOptions::from_url("zk://a:1,b:2/p").unwrap();
        assert_eq!(shown.to_string(), "zk://a:1,b:2/p");
    }

    #[test]
    fn bad_urls_name_the_part() {
        let cases = [
            ("etcd://h:1", UrlPart::Scheme, "\"etcd\" is not zk"),
            ("zk:h:1", UrlPart::Host, "//HOST:PORT"),
            ("zk://", UrlPart::Host, "host is missing"),
            ("zk://h", UrlPart::Port, "port is missing from \"h\""),
            ("zk://h:notaport/x", UrlPart::Port, "\"notaport\""),
            ("zk://h:1//a", UrlPart::Prefix, "empty segments"),
            ("zk://h:1/zookeeper", UrlPart::Prefix, "reserves"),
        ];
        assert_urls_refused(ZookeeperOptions::from_url, &cases);
    }

    #[test]
    fn settings_are_validated() {
        let good = ZookeeperOptions::new(["h:1"]);
        assert!(good.validate().is_ok());
        // A listing may outlast any single call: a participant allows it 80 s at 65,536.
        assert!(good.listing_timeout_limit() > good.call_timeout_limit());
        for bad in [
            ZookeeperOptions::new(["h"]),
            ZookeeperOptions::new(Vec::<String>::new()),
            good.clone().prefix("no-slash"),
            good.clone().call_timeout(Duration::ZERO),
            good.clone().listing_timeout(Duration::ZERO),
        ] {
            assert!(bad.validate().is_err(), "{bad:?}");
        }
    }
}
