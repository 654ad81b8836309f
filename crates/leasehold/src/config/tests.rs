use proptest::prelude::*;

use super::*;

fn config() -> ParticipantConfig {
    ParticipantConfig::new(NodeId::new("n1").unwrap(), 64)
}

#[test]
fn defaults_and_fast_preset_are_valid() {
    config().validate().unwrap();
    ParticipantConfig::fast(NodeId::new("n1").unwrap(), 8)
        .validate()
        .unwrap();
    assert_eq!(config().heartbeat, Duration::from_secs(10));
    assert_eq!(config().lease_validity, Duration::from_secs(30));
    assert_eq!(config().acquire_after, Duration::from_secs(45));
}

#[test]
fn each_bad_value_is_named() {
    let cases: Vec<(ParticipantConfig, &str)> = vec![
        (
            ParticipantConfig {
                partitions: 0,
                ..config()
            },
            "partitions",
        ),
        (
            ParticipantConfig::new(NodeId::operator(), 64),
            "node id leasehold.operator is reserved",
        ),
        (
            ParticipantConfig {
                heartbeat: Duration::from_secs(16),
                ..config()
            },
            "heartbeat = 16s",
        ),
        (
            ParticipantConfig {
                acquire_after: Duration::from_secs(30),
                ..config()
            },
            "acquire_after = 30s",
        ),
        (
            ParticipantConfig {
                acquire_after: Duration::from_millis(30_500),
                max_clock_drift: 0.01,
                ..config()
            },
            "ρ = 0.01",
        ),
        (
            ParticipantConfig {
                max_partitions_per_node: 0,
                ..config()
            },
            "max_partitions_per_node",
        ),
        (
            ParticipantConfig {
                forget_members_after: Duration::from_secs(59),
                ..config()
            },
            "forget_members_after = 59s",
        ),
        (
            ParticipantConfig {
                max_clock_drift: 0.7,
                ..config()
            },
            "0.7",
        ),
        (
            ParticipantConfig {
                heartbeat: Duration::ZERO,
                ..config()
            },
            "heartbeat",
        ),
        (
            ParticipantConfig {
                max_clock_drift: 0.0,
                ..config()
            },
            "max_clock_drift = 0 must be in [0.001, 0.5)",
        ),
        (
            ParticipantConfig {
                max_clock_drift: f64::NAN,
                ..config()
            },
            "max_clock_drift = NaN",
        ),
        (
            ParticipantConfig {
                scan_interval: Duration::from_secs(3600 * 1_000_000_000),
                ..config()
            },
            "scan_interval = 3600000000000s must be at most",
        ),
        (
            ParticipantConfig {
                forget_members_after: Duration::MAX,
                ..config()
            },
            "forget_members_after",
        ),
        (
            ParticipantConfig {
                scan_interval: Duration::MAX,
                ..config()
            },
            "scan_interval",
        ),
        (
            ParticipantConfig {
                store_timeout: Duration::from_secs(11),
                ..config()
            },
            "store_timeout = 11s",
        ),
    ];
    for (bad, needle) in cases {
        let message = bad.validate().unwrap_err().to_string();
        assert!(
            message.contains(needle),
            "{message:?} should name {needle:?}"
        );
    }
}

/// Any duration from zero to [`Duration::MAX`], weighted towards the ones a person writes.
fn any_duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        (0..100_000u64).prop_map(Duration::from_millis),
        (0..u64::MAX).prop_map(Duration::from_secs),
        (any::<u64>(), 0..1_000_000_000u32).prop_map(|(s, n)| Duration::new(s, n)),
        Just(Duration::MAX),
    ]
}

/// Any fraction, in range or not, NaN and infinities included.
fn any_fraction() -> impl Strategy<Value = f64> {
    prop_oneof![0.0..0.6f64, any::<f64>(), Just(0.0), Just(f64::NAN)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn validate_never_panics_and_what_it_accepts_is_safe(
        timings in proptest::collection::vec(any_duration(), 8),
        max_clock_drift in any_fraction(),
        jitter in any_fraction(),
        counts in (any::<u32>(), any::<u32>(), any::<u32>(), any::<u32>()),
    ) {
        let (partitions, max_partitions_per_node, max_acquires_per_scan, weight) = counts;
        let config = ParticipantConfig {
            heartbeat: timings[0],
            lease_validity: timings[1],
            acquire_after: timings[2],
            scan_interval: timings[3],
            store_timeout: timings[4],
            forget_members_after: timings[5],
            relist_after: timings[6],
            drain_timeout: timings[7],
            max_clock_drift,
            jitter,
            partitions,
            max_partitions_per_node,
            max_acquires_per_scan,
            weight,
            ..config()
        };
        // Derived timings never panic, valid or not.
        let member_timeout = config.member_timeout();
        let backoff = config.max_scan_backoff();
        if config.validate().is_ok() {
            let rho = config.max_clock_drift;
            prop_assert!(rho >= ParticipantConfig::MIN_CLOCK_DRIFT);
            prop_assert!(
                config.acquire_after.as_secs_f64() * (1.0 - rho)
                    > config.lease_validity.as_secs_f64() * (1.0 + rho)
            );
            prop_assert_eq!(
                Some(member_timeout),
                config
                    .scan_interval
                    .checked_mul(2)
                    .and_then(|scans| scans.checked_add(config.heartbeat))
                    .map(|beat| beat.max(config.lease_validity))
            );
            prop_assert_eq!(Some(backoff), config.scan_interval.checked_mul(4));
            prop_assert!(config.forget_members_after >= member_timeout * 2);
            prop_assert!(config.store_timeout <= config.heartbeat);
        }
    }
}

#[test]
fn empty_node_id_is_rejected() {
    assert!(NodeId::new("").is_err());
}
