//! The README's Rust quick start runs as written: its code is `examples/quickstart.rs` line
//! for line, and that program, started in an empty directory, creates the lease records,
//! holds all 64 partitions, and on SIGTERM hands every one off and exits 0.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use leasehold::{GroupName, LeaseState, LeaseStore};
use leasehold_sqlite::SqliteStore;

mod common;
use common::{example_binary, Stop};

/// Generous for a loaded machine.
const LIMIT: Duration = Duration::from_secs(60);

fn readme_block() -> String {
    let readme = include_str!("../../../README.md");
    let section = readme
        .split("## Quick start: Rust")
        .nth(1)
        .expect("the README has a Rust quick start");
    let block = section
        .split("```rust,no_run\n")
        .nth(1)
        .and_then(|rest| rest.split("```\n").next())
        .expect("the quick start has a Rust block");
    block.to_owned()
}

#[test]
fn the_readmes_quick_start_is_the_example_program() {
    let example = include_str!("../examples/quickstart.rs");
    // The example file starts with a module doc comment the README leaves out.
    let code = example
        .split_once("\n\n")
        .map(|(_, code)| code)
        .expect("a doc comment, then the code");
    assert_eq!(
        readme_block(),
        code,
        "the README's quick start and examples/quickstart.rs differ"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_quick_start_holds_everything_and_hands_it_off_on_sigterm() {
    let directory = tempfile::tempdir().unwrap();
    let mut server = Stop(
        Command::new(example_binary("quickstart"))
            .arg("server-1")
            .current_dir(directory.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starts the example"),
    );
    let database = directory.path().join("leasehold.db");
    let group = GroupName::new("default").unwrap();
    let started = Instant::now();
    let held = loop {
        assert!(
            started.elapsed() < LIMIT,
            "the example held nothing within {LIMIT:?}"
        );
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("the example exited early: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let Ok(store) = SqliteStore::open(&database).await else {
            continue;
        };
        let Ok(listing) = store.list_leases(&group).await else {
            continue;
        };
        let held = listing
            .records
            .iter()
            .filter(|lease| lease.value.owner.is_some())
            .count();
        if listing.records.len() == 64 && held == 64 {
            break held;
        }
    };
    assert_eq!(held, 64);

    let pid = server.0.id().to_string();
    let kill = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(kill.success());
    let started = Instant::now();
    let status = loop {
        if let Some(status) = server.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < LIMIT,
            "no exit within {LIMIT:?} of SIGTERM"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "exit status after SIGTERM: {status}");

    let mut out = String::new();
    std::io::Read::read_to_string(server.0.stdout.as_mut().unwrap(), &mut out).unwrap();
    assert_eq!(
        out.lines()
            .filter(|line| line.starts_with("serving "))
            .count(),
        64,
        "{out}"
    );
    let store = SqliteStore::open(&database).await.unwrap();
    let leases = store.list_leases(&group).await.unwrap().records;
    assert_eq!(leases.len(), 64);
    assert!(
        leases
            .iter()
            .all(|lease| lease.value.state == LeaseState::Released && lease.value.owner.is_none()),
        "every partition handed off: {leases:?}"
    );
}
