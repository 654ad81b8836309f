//! What the store crates share to read their URLs and environment variables.
//!
//! Each store crate owns its URL forms and the environment variables it reads
//! (`leasehold_postgres::PostgresOptions::from_url`, `leasehold_etcd::EtcdOptions::from_url`,
//! …). This module holds the pieces several of them read the same way, such as a list of
//! `HOST:PORT` followed by a key prefix, and the errors that name the part of a URL, or the
//! environment variable, that is wrong.
//!
//! ```
//! use leasehold::store_url::{hosts_and_prefix, UrlPart};
//!
//! let (hosts, prefix) = hosts_and_prefix("//h1:2379,[::1]:2379/apps", "/leasehold").unwrap();
//! assert_eq!(hosts[1].to_string(), "[::1]:2379");
//! assert_eq!(prefix, "/apps");
//!
//! let error = hosts_and_prefix("//h1:notaport", "/leasehold").unwrap_err();
//! assert_eq!(error.part(), UrlPart::Port);
//! assert_eq!(error.to_string(), "port \"notaport\" of \"h1:notaport\" is not a number from 1 to 65535");
//! ```

use std::fmt;
use std::path::PathBuf;

use crate::error::StoreError;

/// The part of a store URL that a [`UrlError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UrlPart {
    /// What comes before the first `:`, such as `etcd` or `postgres`.
    Scheme,
    /// The user name before the `@`.
    User,
    /// A host name or address.
    Host,
    /// A port number.
    Port,
    /// A file path.
    Path,
    /// The key or znode prefix records are kept under.
    Prefix,
    /// The database name.
    Database,
    /// A storage account name.
    Account,
    /// A table name.
    Table,
    /// The settings after `?`.
    Query,
}

impl fmt::Display for UrlPart {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            UrlPart::Scheme => "scheme",
            UrlPart::User => "user",
            UrlPart::Host => "host",
            UrlPart::Port => "port",
            UrlPart::Path => "path",
            UrlPart::Prefix => "prefix",
            UrlPart::Database => "database",
            UrlPart::Account => "account",
            UrlPart::Table => "table",
            UrlPart::Query => "query",
        })
    }
}

/// A store URL that does not have the form its store reads. The message names the part that
/// is wrong and never holds a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct UrlError {
    part: UrlPart,
    message: String,
}

impl UrlError {
    /// An error about `part`; `message` says what is wrong with it, naming it.
    pub fn new(part: UrlPart, message: impl Into<String>) -> UrlError {
        UrlError {
            part,
            message: message.into(),
        }
    }

    /// The part of the URL that is wrong.
    pub fn part(&self) -> UrlPart {
        self.part
    }
}

/// An environment variable that a store reads holds something it cannot use, or is missing
/// while the store needs it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EnvError {
    variable: String,
    message: String,
}

impl EnvError {
    /// An error about `variable`; `message` says what is wrong with it, naming it.
    pub fn new(variable: impl Into<String>, message: impl Into<String>) -> EnvError {
        EnvError {
            variable: variable.into(),
            message: message.into(),
        }
    }

    /// The environment variable that is wrong.
    pub fn variable(&self) -> &str {
        &self.variable
    }
}

impl From<UrlError> for StoreError {
    fn from(error: UrlError) -> StoreError {
        StoreError::Invalid(error.to_string())
    }
}

impl From<EnvError> for StoreError {
    fn from(error: EnvError) -> StoreError {
        StoreError::Invalid(error.to_string())
    }
}

/// The scheme of `url` and what follows its `:`.
///
/// ```
/// use leasehold::store_url::split_scheme;
/// assert_eq!(split_scheme("zk://h:2181").unwrap(), ("zk", "//h:2181"));
/// assert!(split_scheme("leases.db").is_err());
/// ```
pub fn split_scheme(url: &str) -> Result<(&str, &str), UrlError> {
    match url.split_once(':') {
        Some((scheme, rest))
            if scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            Ok((scheme, rest))
        }
        _ => Err(UrlError::new(
            UrlPart::Scheme,
            "the URL has no scheme (such as sqlite: or etcd://)",
        )),
    }
}

/// Whether a host in a list must name its port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRule {
    /// Every host is written `HOST:PORT`.
    Required,
    /// A host may leave its port out, for the store's default.
    Optional,
}

/// One host of a store URL, with its port if it names one: `name:2379`, `10.0.0.1:2181`,
/// `[::1]:5432`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPort {
    host: String,
    port: Option<u16>,
}

impl HostPort {
    /// The host name or address, an IPv6 address in brackets.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The port, if the URL names one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    fn parse(entry: &str, rule: PortRule) -> Result<HostPort, UrlError> {
        // A scheme or credentials inside the list: name the whole entry, not a bogus port.
        if entry.contains(['/', '@', '?', '#']) {
            return Err(bad_host(entry));
        }
        let (host, port) = match entry.strip_prefix('[') {
            Some(bracketed) => {
                let (address, rest) = bracketed.split_once(']').ok_or_else(|| bad_host(entry))?;
                let address_ok = !address.is_empty()
                    && address
                        .chars()
                        .all(|c| c.is_ascii_hexdigit() || ":.%".contains(c));
                let port = match rest {
                    "" => None,
                    _ => Some(rest.strip_prefix(':').ok_or_else(|| bad_host(entry))?),
                };
                if !address_ok {
                    return Err(bad_host(entry));
                }
                (&entry[..address.len() + 2], port)
            }
            None => {
                let (host, port) = match entry.split_once(':') {
                    Some((host, port)) => (host, Some(port)),
                    None => (entry, None),
                };
                let name = |c: char| c.is_ascii_alphanumeric() || "-._~%".contains(c);
                if host.is_empty() || !host.chars().all(name) {
                    return Err(bad_host(entry));
                }
                (host, port)
            }
        };
        let port = match (port, rule) {
            (Some(port), _) => Some(
                port.parse::<u16>()
                    .ok()
                    .filter(|&port| port != 0)
                    .ok_or_else(|| {
                        UrlError::new(
                            UrlPart::Port,
                            format!("port {port:?} of {entry:?} is not a number from 1 to 65535"),
                        )
                    })?,
            ),
            (None, PortRule::Optional) => None,
            (None, PortRule::Required) => {
                return Err(UrlError::new(
                    UrlPart::Port,
                    format!("port is missing from {entry:?}: write HOST:PORT"),
                ))
            }
        };
        Ok(HostPort {
            host: host.to_owned(),
            port,
        })
    }
}

fn bad_host(entry: &str) -> UrlError {
    UrlError::new(
        UrlPart::Host,
        format!("host {entry:?} is not a host name or address (an IPv6 address goes in brackets)"),
    )
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}:{port}", self.host),
            None => f.write_str(&self.host),
        }
    }
}

/// The hosts of a comma-separated list such as `h1:2379,h2:2379`; at least one.
pub fn parse_hosts(list: &str, rule: PortRule) -> Result<Vec<HostPort>, UrlError> {
    if list.is_empty() {
        return Err(UrlError::new(UrlPart::Host, "host is missing"));
    }
    list.split(',')
        .map(|entry| HostPort::parse(entry, rule))
        .collect()
}

/// Reads `//HOST:PORT[,HOST:PORT…][/PREFIX]`, what follows the scheme of an `etcd://` or a
/// `zk://` URL: the hosts, and the prefix without a trailing `/` (`default_prefix` when the
/// URL names none).
pub fn hosts_and_prefix(
    rest: &str,
    default_prefix: &str,
) -> Result<(Vec<HostPort>, String), UrlError> {
    let Some(rest) = rest.strip_prefix("//") else {
        return Err(UrlError::new(
            UrlPart::Host,
            "hosts are missing: expected //HOST:PORT[,HOST:PORT…][/PREFIX] after the scheme",
        ));
    };
    if rest.contains("://") {
        return Err(UrlError::new(
            UrlPart::Host,
            format!("hosts {rest:?} start with a scheme of their own: the URL's scheme says how to connect"),
        ));
    }
    let (hosts, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let hosts = parse_hosts(hosts, PortRule::Required)?;
    let prefix = match prefix.trim_end_matches('/') {
        "" => default_prefix,
        prefix => prefix,
    };
    Ok((hosts, prefix.to_owned()))
}

/// `url` with the password of `scheme://user:password@host…` replaced by `***`, for
/// messages about a URL that may not even parse.
///
/// ```
/// use leasehold::store_url::redact;
/// assert_eq!(redact("postgres://app:s3cret@db/leases"), "postgres://app:***@db/leases");
/// assert_eq!(redact("zk://h:2181"), "zk://h:2181");
/// ```
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, path) = rest.split_at(rest.find(['/', '?']).unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((credentials, host)) if credentials.contains(':') => {
            let user = credentials.split(':').next().unwrap_or_default();
            format!("{scheme}://{user}:***@{host}{path}")
        }
        _ => url.to_owned(),
    }
}

/// The file named by the environment variable `variable` (a CA, a certificate, a key), if it
/// is set and not empty.
pub fn env_path(variable: &str) -> Option<PathBuf> {
    std::env::var_os(variable)
        .filter(|value| !value.is_empty())
        .map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part_of(result: Result<impl fmt::Debug, UrlError>) -> (UrlPart, String) {
        let error = result.expect_err("refused");
        (error.part(), error.to_string())
    }

    #[test]
    fn hosts_keep_their_ports_and_brackets() {
        let hosts = parse_hosts("a:1,10.0.0.2:2,[::1]:3", PortRule::Required).unwrap();
        let shown: Vec<String> = hosts.iter().map(ToString::to_string).collect();
        assert_eq!(shown, ["a:1", "10.0.0.2:2", "[::1]:3"]);
        assert_eq!(hosts[2].host(), "[::1]");
        assert_eq!(hosts[2].port(), Some(3));
        let optional = parse_hosts("db,[::1]", PortRule::Optional).unwrap();
        assert_eq!(optional[0].port(), None);
        assert_eq!(optional[1].to_string(), "[::1]");
    }

    #[test]
    fn bad_hosts_name_the_part() {
        let cases = [
            ("", UrlPart::Host, "host is missing"),
            ("h", UrlPart::Port, "port is missing from \"h\""),
            ("h:0", UrlPart::Port, "\"0\" of \"h:0\""),
            ("h:99999", UrlPart::Port, "not a number from 1 to 65535"),
            ("h:1,", UrlPart::Host, "host \"\""),
            (":1", UrlPart::Host, "host \":1\""),
            ("::1:2", UrlPart::Host, "brackets"),
            ("[::1:2", UrlPart::Host, "brackets"),
            ("https://h:1", UrlPart::Host, "host \"https://h:1\""),
            ("u@h:1", UrlPart::Host, "not a host name"),
        ];
        for (list, part, needle) in cases {
            let (got, message) = part_of(parse_hosts(list, PortRule::Required));
            assert_eq!(got, part, "{list}: {message}");
            assert!(message.contains(needle), "{list}: {message}");
        }
    }

    #[test]
    fn prefixes_default_and_lose_a_trailing_slash() {
        for (rest, prefix) in [
            ("//h:1", "/default"),
            ("//h:1/", "/default"),
            ("//h:1/a/b/", "/a/b"),
            ("//h:1,h:2/a", "/a"),
        ] {
            assert_eq!(hosts_and_prefix(rest, "/default").unwrap().1, prefix);
        }
        let (part, message) = part_of(hosts_and_prefix("h:1/a", "/d"));
        assert_eq!(part, UrlPart::Host);
        assert!(message.contains("//HOST:PORT"), "{message}");
        assert_eq!(part_of(hosts_and_prefix("///a", "/d")).0, UrlPart::Host);
        let (part, message) = part_of(hosts_and_prefix("//https://h:1", "/d"));
        assert_eq!(part, UrlPart::Host);
        assert!(
            message.contains("\"https://h:1\" start with a scheme"),
            "{message}"
        );
    }

    #[test]
    fn schemes_are_split_off() {
        assert_eq!(split_scheme("sqlite:a.db").unwrap(), ("sqlite", "a.db"));
        assert_eq!(split_scheme("etcd+https://h:1").unwrap().0, "etcd+https");
        for bad in ["leases.db", ":x", "1a:b", "a b:c"] {
            assert_eq!(part_of(split_scheme(bad)).0, UrlPart::Scheme, "{bad}");
        }
    }

    #[test]
    fn passwords_are_redacted() {
        for (url, shown) in [
            ("postgres://u:pw@h/db", "postgres://u:***@h/db"),
            ("postgres://u:p@w@h/db?x=1", "postgres://u:***@h/db?x=1"),
            ("postgres://u@h/db", "postgres://u@h/db"),
            ("sqlite:a@b:c", "sqlite:a@b:c"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }
}
