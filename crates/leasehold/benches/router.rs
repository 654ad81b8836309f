//! The client's hot path: routing a key to the node that owns its partition.
//!
//! Every partition is held by one of sixteen nodes, so each lookup finds an owner to return.
//! Keys cycle through a few thousand distinct names so that lookups spread over the map as a
//! client's requests would, instead of hitting one cached entry.
//!
//! Run with `cargo bench -p leasehold --bench router`.

use std::hint::black_box;
use std::sync::Arc;

use criterion::{BenchmarkId, Criterion};
use leasehold::{
    admin, GroupName, LeaseRecord, LeaseState, LeaseStore, LeaseWrite, MemoryStore, NodeId,
    PutMode, Router,
};

/// Distinct keys a benchmark cycles through.
const KEYS: usize = 4096;
/// Nodes the partitions are spread over.
const NODES: usize = 16;
/// Lease writes sent to the store at once while setting the table up.
const SETUP_BATCH: usize = 1024;

/// A router over a table of `partitions` partitions, each held by one of [`NODES`] nodes.
async fn router_over(partitions: u32) -> Router {
    let store = Arc::new(MemoryStore::new());
    let group = GroupName::new("bench").expect("valid name");
    admin::init(&*store, &group, partitions)
        .await
        .expect("init");
    let nodes: Vec<NodeId> = (0..NODES)
        .map(|n| NodeId::new(format!("node-{n}")).expect("valid name"))
        .collect();
    let listing = store.list_leases(&group).await.expect("list");
    let writes: Vec<LeaseWrite> = listing
        .records
        .into_iter()
        .map(|lease| LeaseWrite {
            partition: lease.key,
            record: LeaseRecord {
                owner: Some(nodes[lease.key.0 as usize % NODES].clone()),
                epoch: lease.value.epoch.next(),
                state: LeaseState::Held,
                ..lease.value
            },
            mode: PutMode::Update(lease.version),
        })
        .collect();
    for batch in writes.chunks(SETUP_BATCH) {
        for result in store.put_leases(&group, batch).await.expect("write") {
            result.expect("each write lands");
        }
    }
    let router = Router::connect(store, group, partitions)
        .await
        .expect("connect");
    assert!(
        router.map().values().all(Option::is_some),
        "every partition has an owner"
    );
    router
}

fn owner_of_key(criterion: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let keys: Vec<String> = (0..KEYS).map(|k| format!("customer-{k}")).collect();
    let mut group = criterion.benchmark_group("router/owner_of_key");
    for partitions in [1_024_u32, 65_536] {
        let router = runtime.block_on(router_over(partitions));
        group.bench_with_input(
            BenchmarkId::from_parameter(partitions),
            &router,
            |bench, router| {
                let mut next = 0;
                bench.iter(|| {
                    next = (next + 1) % KEYS;
                    router.owner_of_key(black_box(&keys[next]))
                });
            },
        );
    }
    group.finish();

    // The same lookup with the owner borrowed instead of cloned.
    let mut group = criterion.benchmark_group("router/with_owner_of_key");
    for partitions in [1_024_u32, 65_536] {
        let router = runtime.block_on(router_over(partitions));
        group.bench_with_input(
            BenchmarkId::from_parameter(partitions),
            &router,
            |bench, router| {
                let mut next = 0;
                bench.iter(|| {
                    next = (next + 1) % KEYS;
                    router.with_owner_of_key(black_box(&keys[next]), |partition, owner| {
                        black_box((partition, owner));
                    })
                });
            },
        );
    }
    group.finish();
}

/// The key's hash and partition alone, to show what the map lookup adds to it.
fn partition_of(criterion: &mut Criterion) {
    let keys: Vec<String> = (0..KEYS).map(|k| format!("customer-{k}")).collect();
    criterion.bench_function("router/partition_for_key/65536", |bench| {
        let mut next = 0;
        bench.iter(|| {
            next = (next + 1) % KEYS;
            leasehold::partition_for_key(black_box(&keys[next]), black_box(65_536))
        });
    });
}

fn main() {
    let mut criterion = Criterion::default().configure_from_args();
    owner_of_key(&mut criterion);
    partition_of(&mut criterion);
    criterion.final_summary();
}
