//! The participant's metrics move with what it does: taking, renewing, handing off on a
//! drain, losing to a kick, and a store that throttles. Virtual time; one registry shared by
//! two nodes, as in a process that embeds both.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use leasehold::metrics::{encode, Metrics, Registry};
use leasehold::testing::FaultyStore;
use leasehold::{
    admin, Environment, LeaseStore, MemoryStore, NodeId, Participant, ParticipantConfig,
    PartitionId,
};

const PARTITIONS: u32 = 8;

/// Every sample of an exposition, `name{labels}` → value. Fails on a line that is neither a
/// comment nor `name{labels} value`, so a malformed exposition fails the test that reads it.
fn samples(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("not a sample: {line:?}"));
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            other => other
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        let name_end = series.find('{').unwrap_or(series.len());
        let name = &series[..name_end];
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "bad metric name in {line:?}"
        );
        assert!(
            name_end == series.len() || series.ends_with('}'),
            "unclosed labels in {line:?}"
        );
        samples.insert(series.to_string(), value);
    }
    samples
}

fn value(text: &str, series: &str) -> f64 {
    *samples(text)
        .get(series)
        .unwrap_or_else(|| panic!("no sample {series} in:\n{text}"))
}

fn start(store: &Arc<dyn LeaseStore>, name: &str, metrics: &Metrics) -> Participant {
    let config = ParticipantConfig::fast(NodeId::new(name).unwrap(), PARTITIONS);
    let environment = Environment {
        metrics: Some(metrics.clone()),
        seed: name.len() as u64,
        ..Environment::default()
    };
    Participant::start_with(Arc::clone(store), config, (), environment).unwrap()
}

#[tokio::test(start_paused = true)]
async fn metrics_follow_takes_renewals_drains_kicks_and_throttling() {
    let memory: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let faulty = Arc::new(FaultyStore::new(Arc::clone(&memory)));
    let store: Arc<dyn LeaseStore> = faulty.clone();
    let group = ParticipantConfig::fast(NodeId::new("a").unwrap(), PARTITIONS).group;
    admin::init(&*store, &group, PARTITIONS).await.unwrap();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);

    let a = start(&store, "a", &metrics);
    let b = start(&store, "b", &metrics);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let text = encode(&registry);
    let series = |name: &str, node: &str| format!(r#"{name}{{group="default",node="{node}"}}"#);
    assert_eq!(
        value(&text, &series("leasehold_leases_held", "a"))
            + value(&text, &series("leasehold_leases_held", "b")),
        f64::from(PARTITIONS),
        "{text}"
    );
    assert_eq!(value(&text, &series("leasehold_leases_target", "a")), 4.0);
    assert_eq!(value(&text, &series("leasehold_live_members", "b")), 2.0);
    let taken = value(&text, &series("leasehold_lease_acquisitions_total", "a"))
        + value(&text, &series("leasehold_lease_acquisitions_total", "b"));
    assert!(taken >= f64::from(PARTITIONS), "{text}");
    assert!(value(&text, &series("leasehold_renewal_batch_size_count", "a")) > 0.0);
    let renewed = r#"leasehold_renewals_total{group="default",node="a",result="renewed"}"#;
    assert!(value(&text, renewed) > 0.0);
    let deadline = value(&text, &series("leasehold_lease_deadline_seconds", "a"));
    let validity = ParticipantConfig::fast(NodeId::new("a").unwrap(), 1).lease_validity;
    assert!(
        deadline > 0.0 && deadline <= validity.as_secs_f64(),
        "{deadline}"
    );
    let put_leases = r#"leasehold_store_call_duration_seconds_count{group="default",node="a",operation="put_leases"}"#;
    assert!(value(&text, put_leases) > 0.0);

    // A drain: a hands everything off and says so.
    admin::set_draining(&*store, &group, a.node(), true)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let text = encode(&registry);
    assert_eq!(value(&text, &series("leasehold_draining", "a")), 1.0);
    assert_eq!(value(&text, &series("leasehold_leases_held", "a")), 0.0);
    assert_eq!(value(&text, &series("leasehold_leases_target", "a")), 0.0);
    assert_eq!(
        value(&text, &series("leasehold_lease_deadline_seconds", "a")),
        f64::INFINITY
    );
    assert_eq!(
        value(&text, &series("leasehold_leases_held", "b")),
        f64::from(PARTITIONS)
    );
    let released = value(&text, &series("leasehold_lease_releases_total", "a"));
    assert!(released >= 1.0, "{text}");
    let lost_released =
        r#"leasehold_lease_losses_total{group="default",node="a",reason="released"}"#;
    assert_eq!(value(&text, lost_released), released);

    // A kick: b's next renewal of the partition conflicts.
    admin::kick(&*store, &group, PartitionId(2)).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let text = encode(&registry);
    let conflict = r#"leasehold_lease_losses_total{group="default",node="b",reason="conflict"}"#;
    assert_eq!(value(&text, conflict), 1.0, "{text}");
    let renewal_conflict =
        r#"leasehold_renewals_total{group="default",node="b",result="conflict"}"#;
    assert_eq!(value(&text, renewal_conflict), 1.0);
    let write_conflict = r#"leasehold_store_errors_total{group="default",node="b",operation="put_leases",kind="conflict"}"#;
    assert!(value(&text, write_conflict) >= 1.0);

    // Throttled reads fail scans, which back off.
    faulty.set_reads_throttled(true);
    tokio::time::sleep(Duration::from_secs(5)).await;
    let text = encode(&registry);
    let throttled = r#"leasehold_store_errors_total{group="default",node="b",operation="list_members",kind="throttled"}"#;
    assert!(value(&text, throttled) >= 1.0, "{text}");
    assert!(value(&text, &series("leasehold_scan_failures_total", "b")) >= 1.0);
    assert!(value(&text, &series("leasehold_scan_backoff_level", "b")) >= 1.0);
    faulty.set_reads_throttled(false);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let text = encode(&registry);
    assert_eq!(
        value(&text, &series("leasehold_scan_backoff_level", "b")),
        0.0
    );

    // b leaves while every batch of lease writes is lost on the way: its releases end its
    // tenures but are not counted as written.
    a.shutdown().await;
    let text = encode(&registry);
    let released = value(&text, &series("leasehold_lease_releases_total", "b"));
    let lost_released =
        r#"leasehold_lease_losses_total{group="default",node="b",reason="released"}"#;
    let lost_before = samples(&text).get(lost_released).copied().unwrap_or(0.0);
    let held = b.owned().len();
    assert!(held > 0);
    faulty.drop_batches(u32::MAX);
    b.shutdown().await;
    let text = encode(&registry);
    assert_eq!(value(&text, &series("leasehold_leases_held", "b")), 0.0);
    assert_eq!(
        value(&text, &series("leasehold_lease_releases_total", "b")),
        released,
        "{text}"
    );
    assert_eq!(value(&text, lost_released), lost_before + held as f64);
    assert!(
        text.ends_with("# EOF\n"),
        "an OpenMetrics exposition ends with # EOF"
    );
}

#[tokio::test(start_paused = true)]
async fn a_participant_without_metrics_registers_nothing() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let config = ParticipantConfig::fast(NodeId::new("quiet").unwrap(), 2);
    admin::init(&*store, &config.group, 2).await.unwrap();
    let mut registry = Registry::default();
    let _unused = Metrics::register(&mut registry);
    let participant = Participant::start(Arc::clone(&store), config, ()).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(participant.owned().len(), 2);
    let text = encode(&registry);
    assert!(
        !text.contains("node=\"quiet\""),
        "a participant given no metrics is not in any registry:\n{text}"
    );
    participant.shutdown().await;
}

/// Callbacks whose `on_acquired` holds the lease loop for longer than a tenth of the
/// heartbeat, in real time.
struct SlowToAcquire;

impl leasehold::Callbacks for SlowToAcquire {
    fn on_acquired(&self, _: &leasehold::LeaseGuard) {
        std::thread::sleep(Duration::from_millis(1200));
    }

    fn load(&self, _: PartitionId) -> Option<f64> {
        Some(1.0)
    }
}

/// A callback that holds up renewals (over a tenth of the heartbeat: 1 s at the default
/// 10 s) is counted as slow; one that returns at once, called at every renewal, is not.
#[tokio::test(start_paused = true)]
async fn a_callback_slower_than_a_tenth_of_the_heartbeat_is_counted() {
    let store: Arc<dyn LeaseStore> = Arc::new(MemoryStore::new());
    let config = ParticipantConfig::new(NodeId::new("slow").unwrap(), 2);
    admin::init(&*store, &config.group, 2).await.unwrap();
    let mut registry = Registry::default();
    let metrics = Metrics::register(&mut registry);
    let environment = Environment {
        metrics: Some(metrics.clone()),
        ..Environment::default()
    };
    let participant =
        Participant::start_with(Arc::clone(&store), config, SlowToAcquire, environment).unwrap();
    // Two takes, then renewals at least five heartbeats long, each asking for the loads.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(participant.owned().len(), 2);
    let text = encode(&registry);
    let series = |callback: &str| {
        value(
            &text,
            &format!(
                r#"leasehold_callbacks_slow_total{{group="default",node="slow",callback="{callback}"}}"#
            ),
        )
    };
    assert_eq!(series("on_acquired"), 2.0, "{text}");
    assert_eq!(series("load"), 0.0, "{text}");
    participant.shutdown().await;
}
