use leasehold::store_url::UrlPart;
use leasehold::testing::assert_urls_refused;

use super::*;

fn key() -> AccountKey {
    AccountKey::from_base64("c2VjcmV0LWtleQ==").unwrap()
}

#[test]
fn urls_keep_the_endpoint_as_its_parts() {
    for (url, endpoint) in [
        ("azure://acme/leases", "https://acme.table.core.windows.net"),
        (
            "azure://acme/leases/",
            "https://acme.table.core.windows.net",
        ),
        (
            "azure+http://127.0.0.1:10002/devstoreaccount1/leases",
            "http://127.0.0.1:10002/devstoreaccount1",
        ),
        ("azure+https://proxy/acme/leases", "https://proxy/acme"),
    ] {
        let options = AzureOptions::from_url(url).unwrap();
        assert_eq!(options.endpoint_url(), endpoint, "{url}");
        assert_eq!(options.to_string(), url.trim_end_matches('/'), "{url}");
        options.key(key()).validate().unwrap();
    }
    assert!(!AzureOptions::from_url("azure+http://h:1/a/tbl")
        .unwrap()
        .uses_https());
}

#[test]
fn bad_urls_name_the_part() {
    let cases = [
        ("azure+ftp://h/a/t", UrlPart::Scheme, "\"azure+ftp\""),
        (
            "azure:acme/leases",
            UrlPart::Account,
            "expected azure://ACCOUNT/TABLE",
        ),
        ("azure://", UrlPart::Account, "account is missing"),
        (
            "azure://acme",
            UrlPart::Table,
            "table is missing: expected azure://ACCOUNT/TABLE",
        ),
        ("azure://acme/leases/x", UrlPart::Path, "\"/x\""),
        ("azure://ac-me/leases", UrlPart::Account, "\"ac-me\""),
        ("azure://acme/ab", UrlPart::Table, "\"ab\""),
        (
            "azure://acme/1leases",
            UrlPart::Table,
            "starting with a letter",
        ),
        ("azure+http://", UrlPart::Host, "host is missing"),
        ("azure+http://h:x/a/leases", UrlPart::Port, "\"x\""),
        (
            "azure+http://a:1,b:2/a/leases",
            UrlPart::Host,
            "more than one host",
        ),
        ("azure+http://h:1", UrlPart::Account, "account is missing"),
        (
            "azure+http://h:1/acct",
            UrlPart::Table,
            "HOST:PORT/ACCOUNT/TABLE",
        ),
    ];
    assert_urls_refused(AzureOptions::from_url, &cases);
}

#[test]
fn the_key_never_shows() {
    let options = AzureOptions::new("acct", "leases").key(key());
    let shown = format!("{options:?} {options}");
    assert!(
        !shown.contains("c2VjcmV0") && !shown.contains("secret"),
        "{shown}"
    );
    assert!(shown.contains("<redacted>"), "{shown}");
    assert!(AccountKey::from_base64("not base64!").is_err());
}

#[test]
fn a_missing_key_is_named() {
    let error = AccountKey::from_env("LEASEHOLD_TEST_NO_SUCH_VARIABLE").unwrap_err();
    assert_eq!(error.variable(), "LEASEHOLD_TEST_NO_SUCH_VARIABLE");
    assert!(error.to_string().contains("is not set"), "{error}");
    let keyless = AzureOptions::new("acct", "leases").validate().unwrap_err();
    assert!(
        keyless.to_string().contains("LEASEHOLD_AZURE_KEY"),
        "{keyless}"
    );
}

#[test]
fn names_and_timeouts_are_validated() {
    let good = AzureOptions::new("acct", "leases").key(key());
    assert!(good.validate().is_ok());
    for table in ["ab", "1leases", "lease-s", &"x".repeat(64)] {
        let options = AzureOptions::new("acct", table).key(key());
        assert!(options.validate().is_err(), "{table}");
    }
    assert!(good.call_timeout(Duration::ZERO).validate().is_err());
}
