//! Finding the servers and tools that tests run against, and refusing to pass without them.
//!
//! A test that needs a server reads its address from an environment variable, which
//! `scripts/test.sh` sets from the `.services/*.env` files that `scripts/services.sh start`
//! writes. When the variable is missing the test fails, saying how to start the servers:
//! a suite that skips silently would claim coverage it does not have. Set
//! `LEASEHOLD_SKIP_SERVICES=1` to skip such tests instead; each skip is then written to the
//! terminal, numbered, whatever the test harness captures.

use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable that turns a missing server into a skip.
pub const SKIP_VARIABLE: &str = "LEASEHOLD_SKIP_SERVICES";

static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// The value of `variable`, which locates `server` for a test. When it is unset or empty:
/// `None` after reporting the skip if `LEASEHOLD_SKIP_SERVICES=1`, and otherwise a panic
/// naming the variable and how to start the servers.
pub fn service_env(variable: &str, server: &str) -> Option<String> {
    if let Ok(value) = std::env::var(variable) {
        if !value.trim().is_empty() {
            return Some(value);
        }
    }
    skip_or_fail(
        &format!(
            "{variable} is not set: this test needs {server}. Run scripts/test.sh, which starts \
             the servers and sets their addresses, or start them with `scripts/services.sh \
             start` and `source` each .services/*.env file"
        ),
        &format!("needs {server} ({variable})"),
    );
    None
}

/// Whether `program` is on the `PATH`. When it is not: `false` after reporting the skip if
/// `LEASEHOLD_SKIP_SERVICES=1`, and otherwise a panic naming the Debian package to install
/// (`scripts/test.sh` installs every one).
pub fn require_tool(program: &str, debian_package: &str) -> bool {
    let found = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()));
    if !found {
        skip_or_fail(
            &format!(
                "{program} is not installed: this test needs it. Run scripts/test.sh, which \
                 installs it, or apt-get install {debian_package}"
            ),
            &format!("needs {program} (Debian package {debian_package})"),
        );
    }
    found
}

/// Panics with `failure` (and how to skip instead), unless skips are asked for: then says on
/// the terminal that the current test skipped a check, and why.
fn skip_or_fail(failure: &str, reason: &str) {
    if std::env::var(SKIP_VARIABLE).as_deref() != Ok("1") {
        panic!("{failure}; set {SKIP_VARIABLE}=1 to skip such tests instead");
    }
    let count = SKIPPED.fetch_add(1, Ordering::SeqCst) + 1;
    let test = std::thread::current().name().unwrap_or("a test").to_owned();
    // Straight to the terminal: the test harness captures print! and eprint!, and a skip
    // must be seen whether or not the test passes.
    let _ = writeln!(
        std::io::stderr(),
        "skipped ({count} in this test binary, {SKIP_VARIABLE}=1): {test} {reason}"
    );
}

/// How many checks of this test binary [`service_env`] and [`require_tool`] have skipped
/// so far.
pub fn skipped() -> usize {
    SKIPPED.load(Ordering::SeqCst)
}
