//! Shared Key authorization for the Table service.
//!
//! ```text
//! StringToSign = VERB + "\n" + Content-MD5 + "\n" + Content-Type + "\n"
//!                + Date + "\n" + CanonicalizedResource
//! CanonicalizedResource = "/" + account + encoded URI path [+ "?comp=" + value]
//! Authorization: SharedKey <account>:Base64(HMAC-SHA256(key, UTF-8(StringToSign)))
//! ```
//!
//! `Date` is the value sent in `x-ms-date`. With a path-style endpoint (Azurite's
//! `http://host/devstoreaccount1`) the account also starts the URI path, so the resource
//! reads `/devstoreaccount1/devstoreaccount1/<table>`.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use reqwest::Url;
use sha2::Sha256;

use crate::options::AccountKey;

/// The parts of a request that Shared Key signs.
pub(crate) struct Signed<'a> {
    pub(crate) verb: &'a str,
    pub(crate) content_type: &'a str,
    pub(crate) date: &'a str,
    pub(crate) url: &'a Url,
}

pub(crate) fn canonicalized_resource(account: &str, url: &Url) -> String {
    let mut resource = format!("/{account}{}", url.path());
    if let Some((_, comp)) = url.query_pairs().find(|(name, _)| name == "comp") {
        resource.push_str("?comp=");
        resource.push_str(&comp);
    }
    resource
}

pub(crate) fn string_to_sign(account: &str, request: &Signed<'_>) -> String {
    format!(
        "{}\n\n{}\n{}\n{}",
        request.verb,
        request.content_type,
        request.date,
        canonicalized_resource(account, request.url)
    )
}

/// The `Authorization` header value.
pub(crate) fn authorization(account: &str, key: &AccountKey, request: &Signed<'_>) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(key.bytes()).expect("HMAC takes keys of any length");
    mac.update(string_to_sign(account, request).as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes());
    format!("SharedKey {account}:{signature}")
}

#[cfg(test)]
mod tests {
    use super::*;

    const DATE: &str = "Sat, 01 Jun 2024 12:00:00 GMT";

    // Expected signatures computed independently from the formula above (Python's hmac
    // module), with the key "secret-key".
    fn key() -> AccountKey {
        AccountKey::from_base64("c2VjcmV0LWtleQ==").unwrap()
    }

    #[test]
    fn path_style_entity_request_signs_as_specified() {
        let url = Url::parse(
            "http://127.0.0.1:10002/devstoreaccount1/leases(PartitionKey='orders',RowKey='lease-0000000007')",
        )
        .unwrap();
        let request = Signed {
            verb: "PUT",
            content_type: "application/json",
            date: DATE,
            url: &url,
        };
        assert_eq!(
            string_to_sign("devstoreaccount1", &request),
            "PUT\n\napplication/json\nSat, 01 Jun 2024 12:00:00 GMT\n\
             /devstoreaccount1/devstoreaccount1/leases(PartitionKey='orders',RowKey='lease-0000000007')"
        );
        assert_eq!(
            authorization("devstoreaccount1", &key(), &request),
            "SharedKey devstoreaccount1:OkkLB4Z1L1BdOmPhM/oS87daYDxxFgNd43Igh8gOlVc="
        );
    }

    #[test]
    fn only_the_comp_parameter_joins_the_resource() {
        let url = Url::parse(
            "https://myaccount.table.core.windows.net/mytable?comp=acl&$filter=PartitionKey%20eq%20'x'",
        )
        .unwrap();
        let request = Signed {
            verb: "GET",
            content_type: "",
            date: DATE,
            url: &url,
        };
        assert_eq!(
            canonicalized_resource("myaccount", &url),
            "/myaccount/mytable?comp=acl"
        );
        assert_eq!(
            authorization("myaccount", &key(), &request),
            "SharedKey myaccount:fkHhe6f8cYVLsS8uyjQ5SYPGk+pTkqziDtETf4PUJHU="
        );
    }
}
