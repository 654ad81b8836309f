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

/// Fails if the fast preset's timings differ from what its documentation promises (tests
/// and the demo rely on a hand-off waiting 1 s, not the default 30 s, for work in flight).
#[test]
fn the_fast_preset_has_the_timings_it_documents() {
    let fast = ParticipantConfig::fast(NodeId::new("n1").unwrap(), 8);
    let ms = Duration::from_millis;
    assert_eq!(
        (
            fast.heartbeat,
            fast.lease_validity,
            fast.acquire_after,
            fast.scan_interval,
            fast.store_timeout,
            fast.drain_timeout
        ),
        (ms(250), ms(1000), ms(1500), ms(250), ms(250), ms(1000))
    );
}

/// Fails if long timings a user may well set (a member forgotten after 300 days, a
/// hand-off waiting 100 days for its work) are refused: the documented limit is 365 days.
#[test]
fn timings_of_months_are_accepted() {
    let day = Duration::from_secs(24 * 3600);
    let long = ParticipantConfig {
        forget_members_after: 300 * day,
        drain_timeout: 100 * day,
        ..config()
    };
    assert_eq!(long.validate(), Ok(()));
    assert_eq!(ParticipantConfig::MAX_DURATION, 365 * day);
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

/// The next representable value below `x` (zero or a positive finite value), for the
/// boundaries of half-open ranges.
fn just_below(x: f64) -> f64 {
    if x == 0.0 {
        -f64::from_bits(1)
    } else {
        f64::from_bits(x.to_bits() - 1)
    }
}

const NANOSECOND: Duration = Duration::from_nanos(1);

/// Fails if a drift bound outside `[MIN_CLOCK_DRIFT, 0.5)` — negative, NaN, infinite, one
/// step below the minimum, or 0.5 itself — is accepted or refused without its value named,
/// or if the ends of the range are refused.
#[test]
fn max_clock_drift_outside_its_range_is_refused_with_the_value_named() {
    let min = ParticipantConfig::MIN_CLOCK_DRIFT;
    let outside = [
        -0.01,
        -0.0,
        0.0,
        just_below(min),
        0.5,
        1.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for value in outside {
        let bad = ParticipantConfig {
            max_clock_drift: value,
            ..config()
        };
        let message = bad.validate().unwrap_err().to_string();
        let named = format!("max_clock_drift = {value} must be in [{min}, 0.5)");
        assert_eq!(message, named, "{value:e}");
    }
    // Near one half, a taker must wait more than three validities.
    let slow_taker = ParticipantConfig {
        acquire_after: Duration::from_secs(100),
        ..config()
    };
    for value in [min, 0.01, just_below(0.5)] {
        let good = ParticipantConfig {
            max_clock_drift: value,
            ..slow_taker.clone()
        };
        assert_eq!(good.validate(), Ok(()), "{value:e}");
    }
}

/// Fails if a jitter outside `[0, 0.5)` — negative however slightly, NaN, infinite, or 0.5
/// itself — is accepted or refused without its value named, or if the ends of the range
/// are refused.
#[test]
fn jitter_outside_its_range_is_refused_with_the_value_named() {
    let outside = [
        -0.1,
        just_below(0.0),
        0.5,
        0.9,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    for value in outside {
        let bad = ParticipantConfig {
            jitter: value,
            ..config()
        };
        let message = bad.validate().unwrap_err().to_string();
        assert_eq!(message, format!("jitter = {value} must be in [0, 0.5)"));
    }
    for value in [0.0, 0.1, just_below(0.5)] {
        let good = ParticipantConfig {
            jitter: value,
            ..config()
        };
        assert_eq!(good.validate(), Ok(()), "{value:e}");
    }
}

/// A duration field of [`ParticipantConfig`] by name.
type DurationField = (&'static str, fn(&mut ParticipantConfig) -> &mut Duration);

const DURATIONS: [DurationField; 8] = [
    ("heartbeat", |c| &mut c.heartbeat),
    ("lease_validity", |c| &mut c.lease_validity),
    ("acquire_after", |c| &mut c.acquire_after),
    ("scan_interval", |c| &mut c.scan_interval),
    ("store_timeout", |c| &mut c.store_timeout),
    ("forget_members_after", |c| &mut c.forget_members_after),
    ("relist_after", |c| &mut c.relist_after),
    ("drain_timeout", |c| &mut c.drain_timeout),
];

fn with(name: &str, value: Duration, base: ParticipantConfig) -> ParticipantConfig {
    let (_, field) = DURATIONS.iter().find(|(n, _)| *n == name).unwrap();
    let mut config = base;
    *field(&mut config) = value;
    config
}

/// Fails if a duration one nanosecond over [`ParticipantConfig::MAX_DURATION`] is accepted
/// or refused without its name and value, or if `MAX_DURATION` itself is refused by that
/// bound. Heartbeat, validity, scan interval and store time-out have tighter bounds (half a
/// validity, and the member timeout), so for them `MAX_DURATION` is refused by another rule.
#[test]
fn each_duration_is_at_most_max_duration() {
    let max = ParticipantConfig::MAX_DURATION;
    for (name, _) in DURATIONS {
        let over = with(name, max + NANOSECOND, config()).validate();
        let value = max + NANOSECOND;
        assert_eq!(
            over,
            Err(ConfigError::DurationTooLong { name, value, max }),
            "{name}"
        );
        let at = with(name, max, config()).validate();
        let bounded_tighter = [
            "heartbeat",
            "lease_validity",
            "scan_interval",
            "store_timeout",
        ];
        if bounded_tighter.contains(&name) {
            assert!(
                !matches!(at, Ok(()) | Err(ConfigError::DurationTooLong { .. })),
                "{name}: {at:?}"
            );
        } else {
            assert_eq!(at, Ok(()), "{name}");
        }
    }
}

/// Fails if a zero heartbeat, validity, acquire_after, scan interval or store time-out is
/// accepted or refused without its name, if the shortest timings the other rules allow
/// (one or a few nanoseconds) are refused, or if a zero `relist_after` or `drain_timeout`,
/// which make a behaviour immediate, is refused.
#[test]
fn durations_that_must_not_be_zero_are_refused_at_zero_only() {
    let shortest = ParticipantConfig {
        heartbeat: NANOSECOND,
        store_timeout: NANOSECOND,
        scan_interval: NANOSECOND,
        lease_validity: 2 * NANOSECOND,
        acquire_after: 3 * NANOSECOND,
        ..config()
    };
    assert_eq!(shortest.validate(), Ok(()));
    for name in [
        "heartbeat",
        "lease_validity",
        "acquire_after",
        "scan_interval",
        "store_timeout",
    ] {
        let zero = with(name, Duration::ZERO, shortest.clone()).validate();
        assert_eq!(zero, Err(ConfigError::ZeroDuration { name }));
    }
    for name in ["relist_after", "drain_timeout"] {
        assert_eq!(with(name, Duration::ZERO, config()).validate(), Ok(()));
    }
    let forget_at_once = with("forget_members_after", Duration::ZERO, config());
    assert!(matches!(
        forget_at_once.validate(),
        Err(ConfigError::ForgetMembersTooSoon { .. })
    ));
}

/// Fails if a count of zero is accepted or refused with the wrong reason, or if one is
/// refused.
#[test]
fn counts_must_be_at_least_one() {
    type CountField = fn(&mut ParticipantConfig) -> &mut u32;
    let counts: [(CountField, ConfigError); 4] = [
        (|c| &mut c.partitions, ConfigError::ZeroPartitions),
        (|c| &mut c.max_partitions_per_node, ConfigError::ZeroCap),
        (
            |c| &mut c.max_acquires_per_scan,
            ConfigError::ZeroAcquiresPerScan,
        ),
        (|c| &mut c.weight, ConfigError::ZeroWeight),
    ];
    for (field, refusal) in counts {
        let mut zero = config();
        *field(&mut zero) = 0;
        assert_eq!(zero.validate(), Err(refusal.clone()));
        let mut one = config();
        *field(&mut one) = 1;
        assert_eq!(one.validate(), Ok(()), "{refusal}");
    }
}

/// Fails if a heartbeat of exactly half the validity is refused, or one nanosecond more is
/// accepted.
#[test]
fn heartbeat_may_be_half_the_validity_and_no_more() {
    let lease_validity = Duration::from_secs(30);
    let half = with("heartbeat", lease_validity / 2, config());
    assert_eq!(half.validate(), Ok(()));
    let heartbeat = lease_validity / 2 + NANOSECOND;
    let over = with("heartbeat", heartbeat, config());
    assert_eq!(
        over.validate(),
        Err(ConfigError::HeartbeatTooLong {
            heartbeat,
            lease_validity
        })
    );
}

/// Fails if the safety rule `acquire_after × (1 − ρ) > lease_validity × (1 + ρ)` accepts
/// its own boundary (equality is two owners for an instant) or the last nanosecond before
/// it, or refuses the first nanosecond past it.
#[test]
fn acquire_after_must_exceed_the_validity_with_the_drift_bound() {
    // (lease_validity, ρ, the longest unsafe acquire_after in nanoseconds): with ρ = 0.01,
    // 99 s against 101 s is exact equality; 30 s × 1.01 / 0.99 and 30 s × 1.001 / 0.999
    // fall between two nanoseconds.
    let cases = [
        (99, 0.01, 101_000_000_000),
        (30, 0.01, 30_606_060_606),
        (30, ParticipantConfig::MIN_CLOCK_DRIFT, 30_060_060_060),
    ];
    for (seconds, rho, unsafe_nanos) in cases {
        let lease_validity = Duration::from_secs(seconds);
        let base = ParticipantConfig {
            lease_validity,
            max_clock_drift: rho,
            ..config()
        };
        let acquire_after = Duration::from_nanos(unsafe_nanos);
        let refused = with("acquire_after", acquire_after, base.clone()).validate();
        assert_eq!(
            refused,
            Err(ConfigError::UnsafeAcquireAfter {
                acquire_after,
                lease_validity,
                max_clock_drift: rho,
            })
        );
        let safe = with("acquire_after", acquire_after + NANOSECOND, base);
        assert_eq!(
            safe.validate(),
            Ok(()),
            "{acquire_after:?} + 1ns, ρ = {rho}"
        );
    }
}

/// Fails if a store time-out equal to the heartbeat is refused, or one nanosecond longer is
/// accepted.
#[test]
fn store_timeout_may_be_one_heartbeat_and_no_more() {
    let heartbeat = config().heartbeat;
    assert_eq!(
        with("store_timeout", heartbeat, config()).validate(),
        Ok(())
    );
    let store_timeout = heartbeat + NANOSECOND;
    assert_eq!(
        with("store_timeout", store_timeout, config()).validate(),
        Err(ConfigError::StoreTimeoutTooLong {
            store_timeout,
            heartbeat
        })
    );
}

/// Fails if `forget_members_after` of exactly twice the member timeout is refused or one
/// nanosecond less is accepted, with the member timeout set by the validity and by the
/// heartbeat plus two scans in turn.
#[test]
fn members_are_forgotten_no_sooner_than_twice_the_member_timeout() {
    let by_validity = config();
    let by_scans = with("scan_interval", Duration::from_secs(20), config());
    for (base, member_timeout) in [
        (by_validity, Duration::from_secs(30)),
        (by_scans, Duration::from_secs(50)),
    ] {
        assert_eq!(base.member_timeout(), member_timeout);
        let twice = with("forget_members_after", member_timeout * 2, base.clone());
        assert_eq!(twice.validate(), Ok(()));
        let forget_members_after = member_timeout * 2 - NANOSECOND;
        let sooner = with("forget_members_after", forget_members_after, base);
        assert_eq!(
            sooner.validate(),
            Err(ConfigError::ForgetMembersTooSoon {
                forget_members_after,
                member_timeout
            })
        );
    }
}

#[test]
fn an_exclusion_list_naming_partitions_the_group_lacks_is_refused() {
    let config = ParticipantConfig::new(NodeId::new("n").unwrap(), 8).with_excluded([
        PartitionId(2),
        PartitionId(8),
        PartitionId(12),
    ]);
    let error = config.validate().unwrap_err();
    assert_eq!(
        error.to_string(),
        "excluded partitions must be below the partition count 8, but 2 are not: 8, 12"
    );
    let fine = ParticipantConfig::new(NodeId::new("n").unwrap(), 8).with_excluded([PartitionId(7)]);
    assert!(fine.validate().is_ok());
    assert!(fine.excludes(PartitionId(7)) && !fine.excludes(PartitionId(6)));
    let mut control = fine;
    control.controls.ignore_exclusions = true;
    assert_eq!(control.validate(), Err(ConfigError::UnsafeExclusions));
}

#[test]
fn the_reservation_control_is_refused_by_validation() {
    let mut control = ParticipantConfig::new(NodeId::new("n").unwrap(), 8);
    control.controls.ignore_reservations = true;
    assert_eq!(control.validate(), Err(ConfigError::UnsafeReservations));
}

#[test]
fn an_address_or_labels_no_store_would_keep_are_refused() {
    let mut config = ParticipantConfig::new(NodeId::new("n").unwrap(), 8);
    config.advertise = Some("http://10.0.0.7:8080".into());
    config.metadata = [("zone".to_string(), "eu-1".to_string())].into();
    assert!(config.validate().is_ok());
    config.advertise = Some("x".repeat(crate::MemberRecord::MAX_ADDRESS_BYTES + 1));
    let error = config.validate().unwrap_err();
    assert!(
        error.to_string().starts_with("advertise is 513 bytes"),
        "{error}"
    );
    config.advertise = None;
    config.metadata = (0..=crate::MemberRecord::MAX_METADATA_ENTRIES)
        .map(|i| (format!("k{i}"), "v".to_string()))
        .collect();
    let error = config.validate().unwrap_err();
    assert!(error.to_string().starts_with("metadata"), "{error}");
}

/// `config` with `change` made to it, validated.
fn validated(change: impl FnOnce(&mut ParticipantConfig)) -> Result<(), ConfigError> {
    let mut config = config();
    change(&mut config);
    config.validate()
}

#[test]
fn load_settings_outside_their_ranges_are_refused_with_the_value_named() {
    for bad in [0.99, -1.0, f64::NAN, f64::INFINITY] {
        let refused = validated(|c| c.load_band = bad);
        assert!(
            matches!(refused, Err(ConfigError::LoadBandOutOfRange { .. })),
            "load_band {bad}: {refused:?}"
        );
    }
    for good in [1.0, 1.25] {
        validated(|c| c.load_band = good).unwrap();
    }
    for bad in [0.0, -0.1, 1.0 + 1e-9, f64::NAN, f64::INFINITY] {
        let refused = validated(|c| c.churn_budget = bad);
        assert!(
            matches!(refused, Err(ConfigError::ChurnBudgetOutOfRange { .. })),
            "churn_budget {bad}: {refused:?}"
        );
    }
    for good in [1e-9, 0.5, 1.0] {
        validated(|c| c.churn_budget = good).unwrap();
    }
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let capacity = validated(|c| c.capacity = Some(bad));
        assert!(
            matches!(
                &capacity,
                Err(ConfigError::Published {
                    field: "capacity",
                    ..
                })
            ),
            "capacity {bad}: {capacity:?}"
        );
        let max_load = validated(|c| c.max_load = Some(bad));
        assert!(
            matches!(
                &max_load,
                Err(ConfigError::Published {
                    field: "max_load",
                    ..
                })
            ),
            "max_load {bad}: {max_load:?}"
        );
    }
    for good in [1e-9, 5.0] {
        validated(|c| c.capacity = Some(good)).unwrap();
        validated(|c| c.max_load = Some(good)).unwrap();
    }
}

#[test]
fn each_session_take_control_alone_is_refused_by_validation() {
    let ignores_session = validated(|c| c.controls.take_ignores_session = true);
    assert!(matches!(
        ignores_session,
        Err(ConfigError::UnsafeSessionTake)
    ));
    let ended_sessions = validated(|c| c.controls.take_ended_sessions = true);
    assert!(matches!(
        ended_sessions,
        Err(ConfigError::UnsafeSessionTake)
    ));
}

/// Fails if the simulator's switch for a negative control does not reach the configuration
/// it was taken from: every control would then run the safe code, and pass.
#[cfg(feature = "negative-controls")]
#[test]
fn a_control_turned_on_through_its_switch_is_refused_by_validation() {
    let mut config = ParticipantConfig::new(NodeId::new("n").unwrap(), 8);
    config.negative_controls_mut().reuse_epoch = true;
    assert_eq!(config.validate(), Err(ConfigError::UnsafeEpochReuse));
}
