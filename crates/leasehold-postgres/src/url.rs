//! Reading a `postgres://` URL into the client's connection settings.
//!
//! The client's own parser reads the URL, so that every setting libpq users know keeps its
//! meaning; the checks before it exist to name the part of a URL that is wrong, which the
//! client's errors do not always do.

use std::error::Error;

use leasehold::store_url::{parse_hosts, split_scheme, PortRule, UrlError, UrlPart};
use tokio_postgres::config::SslMode;
use tokio_postgres::Config;

/// The connection settings `url` names. Errors name the part that is wrong, never the
/// password.
pub(crate) fn parse(url: &str) -> Result<Config, UrlError> {
    let (scheme, rest) = split_scheme(url)?;
    if scheme != "postgres" && scheme != "postgresql" {
        return Err(UrlError::new(
            UrlPart::Scheme,
            format!("scheme {scheme:?} is neither postgres nor postgresql"),
        ));
    }
    let Some(after) = rest.strip_prefix("//").filter(|after| !after.is_empty()) else {
        return Err(UrlError::new(
            UrlPart::Host,
            "the server is missing: expected postgres://USER@HOST:PORT/DATABASE",
        ));
    };
    // The userinfo ends at the last `@` that is not in a query value: a password holding an
    // unencoded `/`, `?` or `@` would otherwise be read as a path, a query or a host, and
    // quoted as one.
    if let Some(at) = after.rfind('@').filter(|at| !after[..*at].contains('=')) {
        if after[..at].contains(['@', '/', '?', '#']) {
            return Err(UrlError::new(
                UrlPart::User,
                "the user or password holds an '@', '/', '?' or '#': percent-encode it \
                 (%40, %2F, %3F, %23)",
            ));
        }
    }
    let (authority, path) = after.split_at(after.find(['/', '?']).unwrap_or(after.len()));
    let hosts = match authority.split_once('@') {
        Some((_, hosts)) => hosts,
        None => authority,
    };
    if !hosts.is_empty() {
        parse_hosts(hosts, PortRule::Optional)?;
    }
    let database = path.strip_prefix('/').unwrap_or_default();
    let database = database.split('?').next().unwrap_or_default();
    if database.contains('/') {
        return Err(UrlError::new(
            UrlPart::Database,
            format!("database {database:?} holds a '/'"),
        ));
    }
    let mut config: Config =
        with_known_ssl_mode(url)
            .parse()
            .map_err(|error: tokio_postgres::Error| {
                // The client's message is generic; its source says which setting (never a value).
                let reason = error
                    .source()
                    .map_or_else(|| error.to_string(), ToString::to_string);
                UrlError::new(UrlPart::Query, format!("a setting is not valid: {reason}"))
            })?;
    // `prefer` would let anyone on the path decide between TLS and plain, so it means plain
    // here, as `disable` does; ask for `require` to get TLS.
    if config.get_ssl_mode() == SslMode::Prefer {
        config.ssl_mode(SslMode::Disable);
    }
    Ok(config)
}

/// `url` with the libpq modes that tokio-postgres does not parse, `verify-ca` and
/// `verify-full`, written as `require`: every TLS connection here is verified in full anyway.
fn with_known_ssl_mode(url: &str) -> String {
    url.replace("sslmode=verify-full", "sslmode=require")
        .replace("sslmode=verify-ca", "sslmode=require")
}
