use leasehold::store_url::UrlPart;
use leasehold::testing::assert_urls_refused;

use super::*;

fn refusal(url: &str) -> UrlError {
    match PostgresOptions::from_url(url) {
        Ok(options) => panic!("{url} accepted as {options}"),
        Err(error) => error,
    }
}

#[test]
fn urls_keep_their_parts_and_never_show_the_password() {
    for (url, shown) in [
        (
            "postgres://app:s3cret@db:5432/leases",
            "postgres://app:***@db:5432/leases",
        ),
        (
            "postgresql://app@db/leases",
            "postgres://app@db:5432/leases",
        ),
        ("postgres://db:6432", "postgres://db:6432/"),
        (
            "postgres://u@h1:1,h2:2/d?sslmode=verify-full",
            "postgres://u@h1:1,h2:2/d?sslmode=require",
        ),
        ("postgres://u@[::1]:5/d", "postgres://u@[::1]:5/d"),
        (
            "postgres:///d?host=/run/postgresql&sslmode=require",
            "postgres:///d?host=/run/postgresql&sslmode=require",
        ),
    ] {
        let options = PostgresOptions::from_url(url).unwrap();
        assert_eq!(options.to_string(), shown, "{url}");
        assert!(!format!("{options:?}").contains("s3cret"));
    }
    let options = PostgresOptions::from_url("postgres://u@h/d?sslmode=require").unwrap();
    assert!(options.uses_tls());
    for plain in ["postgres://u@h/d", "postgres://u@h/d?sslmode=prefer"] {
        assert!(
            !PostgresOptions::from_url(plain).unwrap().uses_tls(),
            "{plain}"
        );
    }
}

#[test]
fn bad_urls_name_the_part_and_never_the_password() {
    let cases = [
        ("postgress://h/db", UrlPart::Scheme, "\"postgress\""),
        ("postgres:", UrlPart::Host, "server is missing"),
        ("postgres://", UrlPart::Host, "server is missing"),
        ("postgres:h/db", UrlPart::Host, "server is missing"),
        (
            "postgres://u:secret@h:notaport/db",
            UrlPart::Port,
            "\"notaport\"",
        ),
        ("postgres://u:secret@h:0/db", UrlPart::Port, "\"0\""),
        ("postgres://u:sec@ret@h/db", UrlPart::User, "%40"),
        ("postgres://u:secret@h/db/x", UrlPart::Database, "\"db/x\""),
        (
            "postgres://u:secret@h/db?sslmod=require",
            UrlPart::Query,
            "sslmod",
        ),
        (
            "postgres://u:secret@h/db?sslmode=allow",
            UrlPart::Query,
            "sslmode",
        ),
    ];
    assert_urls_refused(PostgresOptions::from_url, &cases);
    for (url, _, _) in cases {
        let message = refusal(url).to_string();
        assert!(
            !message.contains("secret") && !message.contains("ret@"),
            "{message}"
        );
    }
}

#[test]
fn the_environment_fills_in_only_what_the_url_left_out() {
    let variables = |name: &str| {
        let value = match name {
            "PGHOST" => "envhost",
            "PGPORT" => "7777",
            "PGUSER" => "envuser",
            "PGPASSWORD" => "envsecret",
            "PGDATABASE" => "envdb",
            "PGSSLROOTCERT" => "/ca.pem",
            _ => return None,
        };
        Some(value.to_owned())
    };
    let bare = PostgresOptions::from_url("postgres:///?sslmode=require").unwrap();
    let filled = bare.with_variables(variables).unwrap();
    assert_eq!(
        filled.to_string(),
        "postgres://envuser:***@envhost:7777/envdb?sslmode=require"
    );
    assert_eq!(filled.ca_file, Some(PathBuf::from("/ca.pem")));
    let full = PostgresOptions::from_url("postgres://u:pw@h:1/d").unwrap();
    let kept = full.ca_file("/mine.pem").with_variables(variables).unwrap();
    assert_eq!(kept.to_string(), "postgres://u:***@h:1/d");
    assert_eq!(kept.config.get_password(), Some(&b"pw"[..]));
    assert_eq!(kept.ca_file, Some(PathBuf::from("/mine.pem")));

    let bad_port = |name: &str| (name == "PGPORT").then(|| "x".to_owned());
    let error = PostgresOptions::default()
        .with_variables(bad_port)
        .unwrap_err();
    assert_eq!(error.variable(), "PGPORT");
}

#[test]
fn settings_are_checked() {
    assert!(PostgresOptions::default().validate().is_ok());
    for bad in ["", "1abc", "Leases", "a-b", "a;drop", &"x".repeat(41)] {
        let options = PostgresOptions::default().table_prefix(bad);
        assert!(options.validate().is_err(), "{bad:?} accepted");
    }
    let options = PostgresOptions::default()
        .reconnect_delay(Duration::from_millis(100), Duration::from_millis(1));
    let error = options.validate().unwrap_err().to_string();
    assert!(error.contains("max_reconnect_delay"), "{error}");
}
