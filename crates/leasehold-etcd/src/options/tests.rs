use leasehold::testing::assert_urls_refused;

use super::*;

#[test]
fn urls_give_endpoints_prefix_and_transport() {
    for (url, endpoints, prefix, tls) in [
        ("etcd://h:2379", &["h:2379"][..], "/leasehold", false),
        ("etcd://h:2379/", &["h:2379"], "/leasehold", false),
        (
            "etcd://a:1,b:2/apps/orders/",
            &["a:1", "b:2"],
            "/apps/orders",
            false,
        ),
        (
            "etcd+https://a:1,[::1]:2/p",
            &["a:1", "[::1]:2"],
            "/p",
            true,
        ),
    ] {
        let options = EtcdOptions::from_url(url).unwrap();
        assert_eq!(options.endpoints(), endpoints, "{url}");
        assert_eq!(options.key_prefix(), prefix, "{url}");
        assert_eq!(options.uses_tls(), tls, "{url}");
        options.validate().unwrap();
    }
    for url in ["etcd://h1:1,h2:2/p", "etcd+https://h1:1,h2:2/p"] {
        assert_eq!(EtcdOptions::from_url(url).unwrap().to_string(), url);
    }
}

#[test]
fn bad_urls_name_the_part() {
    let cases = [
        ("etcd+http://h:1", UrlPart::Scheme, "\"etcd+http\""),
        ("etcd:h:1", UrlPart::Host, "//HOST:PORT"),
        ("etcd://", UrlPart::Host, "host is missing"),
        (
            "etcd://nohost",
            UrlPart::Port,
            "port is missing from \"nohost\"",
        ),
        ("etcd://h:1,h:x/p", UrlPart::Port, "\"x\""),
        ("etcd://https://h:1", UrlPart::Host, "scheme of their own"),
    ];
    assert_urls_refused(EtcdOptions::from_url, &cases);
}

#[test]
fn tls_files_come_from_the_environment_only_over_tls() {
    let variables = |set: &'static [&'static str]| {
        move |name: &str| {
            set.contains(&name)
                .then(|| PathBuf::from(format!("/{name}.pem")))
        }
    };
    let all = &[
        "LEASEHOLD_ETCD_CA",
        "LEASEHOLD_ETCD_CERT",
        "LEASEHOLD_ETCD_KEY",
    ];
    let plain = EtcdOptions::from_url("etcd://h:1").unwrap();
    let plain = plain.with_variables(variables(all)).unwrap();
    assert!(plain.ca_file.is_none() && plain.client_certificate.is_none());

    let tls = EtcdOptions::from_url("etcd+https://h:1").unwrap();
    let filled = tls.clone().with_variables(variables(all)).unwrap();
    assert_eq!(filled.ca_file, Some("/LEASEHOLD_ETCD_CA.pem".into()));
    assert!(filled.client_certificate.is_some());
    let kept = tls.clone().ca_file("/mine.pem");
    let kept = kept.with_variables(variables(all)).unwrap();
    assert_eq!(kept.ca_file, Some("/mine.pem".into()));

    let error = tls
        .with_variables(variables(&["LEASEHOLD_ETCD_CERT"]))
        .unwrap_err();
    assert_eq!(error.variable(), "LEASEHOLD_ETCD_KEY");
    assert!(error.to_string().contains("set both"), "{error}");
}

#[test]
fn debug_and_display_never_show_the_password() {
    let options = EtcdOptions::new(["h:1"]).credentials("leases", "hunter2");
    let shown = format!("{options:?} {options}");
    assert!(shown.contains("leases"), "{shown}");
    assert!(!shown.contains("hunter2"), "{shown}");
}

#[test]
fn tls_settings_are_checked() {
    let plain = EtcdOptions::new(["127.0.0.1:2379"]);
    assert!(plain.tls_options().is_ok());
    assert!(plain.clone().tls(true).connect_options().is_ok());
    let refused = plain.clone().ca_file("/nonexistent/leasehold-ca.pem");
    let error = refused.validate().unwrap_err().to_string();
    assert!(error.contains("TLS is off"), "{error}");
    let missing = refused.tls(true);
    missing.validate().unwrap();
    let error = missing.connect_options().unwrap_err().to_string();
    assert!(error.contains("leasehold-ca.pem"), "{error}");
    for bad in [
        EtcdOptions::new(Vec::<String>::new()),
        EtcdOptions::new(["http://h:1"]),
        plain.request_timeout(Duration::ZERO),
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
}
