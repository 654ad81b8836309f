//! The server's hot path: "do I hold partition p?", asked before every unit of work.
//!
//! A participant holds half of a group's partitions, so a lookup either finds a serving lease
//! (a hit) or finds none (a miss). A hit reads the clock once to check the deadline, so the
//! clock reads are measured beside it: what a hit costs beyond one clock read is what the
//! lease table itself costs.
//!
//! Run with `cargo bench -p leasehold --bench lease`.

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::Criterion;
use leasehold::{admin, Clock, MemoryStore, NodeId, Participant, ParticipantConfig, TokioClock};
use leasehold::{GroupName, PartitionId};

const PARTITIONS: u32 = 1_024;
/// The participant takes this many partitions and leaves the rest for the misses.
const HELD: u32 = PARTITIONS / 2;
/// How long the set-up waits for the participant to take its share.
const SETTLE_LIMIT: Duration = Duration::from_secs(60);

/// A participant holding [`HELD`] of [`PARTITIONS`] partitions, renewing in the background
/// on `runtime`.
fn participant(runtime: &tokio::runtime::Runtime) -> Participant {
    runtime.block_on(async {
        let store = Arc::new(MemoryStore::new());
        let group = GroupName::new("bench").expect("valid name");
        admin::init(&*store, &group, PARTITIONS)
            .await
            .expect("init");
        let mut config =
            ParticipantConfig::new(NodeId::new("server-1").expect("valid"), PARTITIONS)
                .with_group(group)
                .with_max_partitions_per_node(HELD);
        config.max_acquires_per_scan = PARTITIONS;
        let participant = Participant::start(store, config, ()).expect("valid config");
        let deadline = tokio::time::Instant::now() + SETTLE_LIMIT;
        while participant.owned().len() < HELD as usize {
            assert!(
                tokio::time::Instant::now() < deadline,
                "took {} partitions",
                participant.owned().len()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        participant
    })
}

fn lease(criterion: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let participant = participant(&runtime);
    let held = participant.owned();
    let free: Vec<PartitionId> = (0..PARTITIONS)
        .map(PartitionId)
        .filter(|partition| !held.contains(partition))
        .collect();
    assert_eq!(held.len(), free.len());

    let mut group = criterion.benchmark_group("participant/lease");
    for (name, partitions) in [("hit", &held), ("miss", &free)] {
        group.bench_function(name, |bench| {
            let mut next = 0;
            bench.iter(|| {
                next = (next + 1) % partitions.len();
                participant.lease(black_box(partitions[next]))
            });
        });
    }
    group.finish();
    assert_eq!(
        participant.owned().len(),
        held.len(),
        "the leases stayed held throughout"
    );
    runtime.block_on(participant.shutdown());
}

/// The clock reads a lease check makes, alone. Tokio's clock is the participant's unless a
/// test or simulation injects another; it is read through the `dyn Clock` the participant
/// keeps.
fn clock(criterion: &mut Criterion) {
    let mut group = criterion.benchmark_group("clock/now");
    group.bench_function("std", |bench| bench.iter(std::time::Instant::now));
    group.bench_function("tokio", |bench| bench.iter(tokio::time::Instant::now));
    let clock: Arc<dyn Clock> = Arc::new(TokioClock);
    group.bench_function("participant", |bench| {
        bench.iter(|| black_box(&clock).now())
    });
    group.finish();
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    lease(&mut criterion);
    clock(&mut criterion);
    criterion.final_summary();
}
