//! What the tests of the example programs share: the programs, and a child that is killed
//! when the test ends however it ends.

use std::path::PathBuf;
use std::process::Child;

/// The example program `name`, built by `cargo test` beside the test binaries.
pub fn example_binary(name: &str) -> PathBuf {
    let deps = std::env::current_exe().expect("the test's own path");
    let debug = deps
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>/deps");
    let binary = debug.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: `cargo test -p leasehold-process` builds it (a run of one test binary does not: `cargo build -p leasehold-process --example {name}`)",
        binary.display()
    );
    binary
}

/// A child process, killed and reaped when dropped.
pub struct Stop(pub Child);

impl Drop for Stop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
