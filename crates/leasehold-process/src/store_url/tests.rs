use std::error::Error;

use super::*;

/// The message as the tool prints it: the error and its causes.
fn message(url: &str) -> String {
    let error = StoreUrl::parse(url).expect_err(url);
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text = format!("{text}: {cause}");
        source = cause.source();
    }
    text
}

#[test]
fn sqlite_and_memory_urls_are_read() {
    for (url, path) in [
        ("sqlite:leases.db", "leases.db"),
        ("sqlite:///a/b.db", "/a/b.db"),
        (DEFAULT_STORE, "leasehold.db"),
    ] {
        match StoreUrl::parse(url) {
            Ok(StoreUrl::Sqlite(got)) => assert_eq!(got, Path::new(path)),
            other => panic!("{url}: {other:?}"),
        }
    }
    let memory = StoreUrl::parse("memory:").unwrap();
    assert!(matches!(memory, StoreUrl::Memory) && !memory.is_shared());
    assert!(message("memory:x").contains("takes nothing after the colon"));
}

#[test]
fn each_scheme_goes_to_its_crate_and_shows_as_it_reads() {
    let mut urls = vec!["sqlite:/a/b.db", "sqlite:b.db", "memory:"];
    if cfg!(feature = "postgres") {
        urls.extend([
            "postgres://app@db:5432/leases",
            "postgres://app@db:1/d?sslmode=require",
        ]);
    }
    if cfg!(feature = "etcd") {
        urls.extend(["etcd://h1:1,h2:2/p", "etcd+https://h1:1,h2:2/p"]);
    }
    if cfg!(feature = "zookeeper") {
        urls.push("zk://h:1/leasehold");
    }
    if cfg!(feature = "azure") {
        urls.extend([
            "azure://acme/leases",
            "azure+http://127.0.0.1:10002/devstoreaccount1/leases",
        ]);
    }
    for url in urls {
        let parsed = StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(parsed.to_string(), url);
        assert_eq!(parsed.is_shared(), url != "memory:", "{url}");
    }
}

#[test]
fn bad_urls_name_the_url_and_the_problem() {
    let mut cases = vec![
        (
            "postgress://h/db",
            "unknown scheme \"postgress\"; supported: sqlite:PATH",
        ),
        (
            "leases.db",
            "the URL has no scheme (such as sqlite: or etcd://); supported:",
        ),
        (
            "sqlite:",
            "invalid store URL \"sqlite:\": the SQLite file path is empty",
        ),
    ];
    if cfg!(feature = "zookeeper") {
        cases.push(("zk://h:notaport", "port \"notaport\" of \"h:notaport\""));
    }
    if cfg!(feature = "azure") {
        cases.push((
            "azure://acme",
            "table is missing: expected azure://ACCOUNT/TABLE",
        ));
    }
    for (url, needle) in cases {
        let shown = message(url);
        assert!(shown.starts_with("invalid store URL"), "{shown}");
        assert!(shown.contains(needle), "{shown}");
    }
}

#[test]
#[cfg(feature = "postgres")]
fn passwords_are_never_shown() {
    let bad = message("postgres://app:s3cret@db:notaport/leases");
    assert!(
        bad.contains("postgres://app:***@db:notaport/leases"),
        "{bad}"
    );
    assert!(!bad.contains("s3cret"), "{bad}");
    let good = StoreUrl::parse("postgres://app:s3cret@db:5432/leases").unwrap();
    assert_eq!(good.to_string(), "postgres://app:***@db:5432/leases");
}

#[test]
#[cfg(not(feature = "etcd"))]
fn a_store_left_out_of_the_build_names_its_feature() {
    let shown = message("etcd://h:2379/p");
    assert!(
        shown.contains("built without support for etcd; rebuild with `--features etcd`"),
        "{shown}"
    );
}

/// Every URL shape a careless or unlucky user may give, each holding `secret` where a
/// password goes: in the userinfo (unencoded `/`, `?`, `#`, `@`, `:` included), as a
/// `password=`-like query value, beside another mistake.
fn shapes(secret: &str) -> Vec<String> {
    let schemes = [
        "postgres",
        "postgresql",
        "etcd",
        "etcd+https",
        "zk",
        "azure",
        "azure+http",
        "azure+https",
        "sqlite",
        "memory",
        "bogus",
    ];
    let users = ["app", "", "ap/p", "ap?p", "a@p"];
    let hosts = [
        "db:5432",
        "db:notaport",
        "db",
        "[::1]:2379",
        "h1:1,h2:2",
        "",
    ];
    let paths = ["/leases", "", "/", "/a/b/c", "/acct/table"];
    let mut urls = Vec::new();
    for scheme in schemes {
        for user in users {
            for host in hosts {
                for path in paths {
                    urls.push(format!("{scheme}://{user}:{secret}@{host}{path}"));
                }
            }
            let query = [
                format!("?password={secret}"),
                format!("?sslmode=require&password={secret}"),
                format!("?bogus=1&password={secret}&x=y"),
                format!("?sslpassword={secret}"),
                format!("?PASSWORD={secret}"),
            ];
            for query in query {
                urls.push(format!("{scheme}://{user}@db:5432/leases{query}"));
                urls.push(format!("{scheme}://db:notaport/leases{query}"));
                urls.push(format!("{scheme}:db{query}"));
            }
        }
    }
    urls
}

#[test]
fn a_password_never_shows_whatever_the_url_looks_like() {
    let mut tried = 0;
    for secret in [
        "S3CRETPW",
        "S3/CRETPW",
        "S3?CRETPW",
        "S3#CRETPW",
        "S3@CRETPW",
        "S3:CRETPW",
    ] {
        // The part a reader could recognise: the longest run without separators.
        let needle = "CRETPW";
        for url in shapes(secret) {
            tried += 1;
            let shown = match StoreUrl::parse(&url) {
                Ok(parsed) => format!("{parsed} {parsed:?}"),
                Err(_) => message(&url),
            };
            assert!(!shown.contains(needle), "{url} shows as: {shown}");
        }
    }
    assert!(tried > 1000, "{tried}");
}
