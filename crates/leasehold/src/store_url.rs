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

/// `url` with its secrets replaced by `***`, for messages about a URL that may not even
/// parse: the userinfo's password (everything up to the authority's last `@`, whatever
/// characters the password holds, the user name too when it holds a separator), and the
/// value of every query parameter whose name holds `password`, `secret`, `token` or ends in
/// `key`.
///
/// ```
/// use leasehold::store_url::redact;
/// assert_eq!(redact("postgres://app:s3cret@db/leases"), "postgres://app:***@db/leases");
/// assert_eq!(redact("postgres://app:s3/cr?t@db/leases"), "postgres://app:***@db/leases");
/// assert_eq!(redact("postgres://db/leases?password=s3cret&x=1"), "postgres://db/leases?password=***&x=1");
/// assert_eq!(redact("zk://h:2181"), "zk://h:2181");
/// ```
pub fn redact(url: &str) -> String {
    let (shown, _) = redacted(url);
    shown
}

/// The secrets [`redact`] hides in `url`, as given and percent-decoded, and the pieces of
/// each between URL separators (a parser that splits the URL at a `/` in a password quotes
/// a piece of it): what no message about the URL may contain.
pub fn secrets(url: &str) -> Vec<String> {
    /// Pieces shorter than this are left: they would hide ordinary words of a message.
    const SHORTEST_PIECE: usize = 4;
    let (_, found) = redacted(url);
    let mut all = Vec::new();
    for secret in found.into_iter().filter(|s| !s.is_empty()) {
        let decoded = percent_decode(&secret);
        for text in [secret, decoded] {
            let pieces = text
                .split(['/', '?', '#', '@', ':', '&', '=', ','])
                .filter(|piece| piece.len() >= SHORTEST_PIECE && *piece != text)
                .map(str::to_owned)
                .collect::<Vec<_>>();
            all.push(text);
            all.extend(pieces);
        }
    }
    all.sort();
    all.dedup();
    all
}

/// `message` with every secret of `url` in it replaced by `***`.
pub fn scrub(message: &str, url: &str) -> String {
    let mut scrubbed = message.to_owned();
    let mut secrets = secrets(url);
    // The longest first, so that a secret containing another is hidden whole.
    secrets.sort_by_key(|secret| std::cmp::Reverse(secret.len()));
    for secret in secrets {
        scrubbed = scrubbed.replace(&secret, "***");
    }
    scrubbed
}

impl UrlError {
    /// This error with every secret of `url` in its message replaced by `***`: parsers quote
    /// the parts they refuse, and a part may hold a password.
    pub fn scrubbed(self, url: &str) -> UrlError {
        UrlError {
            part: self.part,
            message: scrub(&self.message, url),
        }
    }
}

/// `url` redacted, and the secrets taken out of it.
fn redacted(url: &str) -> (String, Vec<String>) {
    let mut secrets = Vec::new();
    let url = redact_query(url, &mut secrets);
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url, secrets);
    };
    // The authority's last `@` ends the userinfo whatever the password holds (`/`, `?`, `#`,
    // `@`); query values, where an `@` may also appear, are redacted already.
    let Some(at) = rest.rfind('@') else {
        return (url, secrets);
    };
    let (credentials, host) = (&rest[..at], &rest[at + 1..]);
    let Some((user, password)) = credentials.split_once(':') else {
        return (url, secrets);
    };
    secrets.push(password.to_owned());
    let shown = if user.is_empty() || user.contains(['/', '?', '#', '@']) {
        secrets.push(credentials.to_owned());
        format!("{scheme}://***@{host}")
    } else {
        format!("{scheme}://{user}:***@{host}")
    };
    (shown, secrets)
}

/// `url` with the values of secret-looking query parameters replaced by `***`, each value
/// added to `secrets`.
fn redact_query(url: &str, secrets: &mut Vec<String>) -> String {
    let Some(start) = url.find('?') else {
        return url.to_owned();
    };
    let (base, query) = url.split_at(start + 1);
    let (query, fragment) = query.split_at(query.find('#').unwrap_or(query.len()));
    let pairs: Vec<String> = query
        .split('&')
        .map(|pair| match pair.split_once('=') {
            Some((name, value)) if is_secret_name(name) && !value.is_empty() => {
                secrets.push(value.to_owned());
                format!("{name}=***")
            }
            _ => pair.to_owned(),
        })
        .collect();
    // No store URL has a fragment: a `#` there is one in a password's value, cut in two.
    let fragment = match fragment.strip_prefix('#') {
        Some(rest) if !rest.is_empty() => {
            secrets.push(rest.to_owned());
            "#***"
        }
        _ => fragment,
    };
    format!("{base}{}{fragment}", pairs.join("&"))
}

/// Whether a query parameter named `name` holds a secret.
fn is_secret_name(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    ["password", "passwd", "secret", "token"]
        .iter()
        .any(|word| name.contains(word))
        || name.ends_with("key")
}

/// `text` with `%XX` escapes decoded (bytes that do not form UTF-8 shown as U+FFFD).
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(high), Some(low)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                decoded.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
        }
        decoded.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&decoded).into_owned()
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
