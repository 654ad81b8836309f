//! The leader-election example (`examples/leader.rs`) on one SQLite file: one candidate leads
//! at a time, and when the leader stops the other takes over with a higher fencing token.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod common;
use common::{example_binary, Stop};

/// Generous for a loaded machine: a takeover waits for the next scan (10 s by default).
const LIMIT: Duration = Duration::from_secs(60);

/// A candidate, and every line it printed so far.
struct Candidate {
    process: Stop,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Candidate {
    fn start(name: &str, directory: &Path) -> Candidate {
        let mut child = Command::new(example_binary("leader"))
            .arg(name)
            .current_dir(directory)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starts the example");
        let stdout = child.stdout.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Candidate {
            process: Stop(child),
            lines,
        }
    }

    /// The token of the first "leads" line, once there is one.
    fn leads(&self) -> Option<u64> {
        self.lines.lock().unwrap().iter().find_map(|line| {
            let token = line.split_once(" leads (token ")?.1.strip_suffix(')')?;
            token.parse().ok()
        })
    }

    fn printed(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

/// Waits for `ready` within [`LIMIT`], saying `what` if it never comes.
fn wait_for<T>(what: &str, mut ready: impl FnMut() -> Option<T>) -> T {
    let started = Instant::now();
    loop {
        if let Some(value) = ready() {
            return value;
        }
        assert!(started.elapsed() < LIMIT, "{what} within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn one_candidate_leads_and_the_other_takes_over_when_it_stops() {
    let directory = tempfile::tempdir().unwrap();
    let mut first = Candidate::start("candidate-1", directory.path());
    let first_token = wait_for("candidate-1 leading", || first.leads());

    let second = Candidate::start("candidate-2", directory.path());
    // Long enough for candidate-2 to have joined and scanned: it must not lead meanwhile.
    wait_for("candidate-1 working on", || {
        let works = first
            .lines
            .lock()
            .unwrap()
            .iter()
            .filter(|line| line.contains(" works as leader "))
            .count();
        (works >= 5).then_some(())
    });
    assert_eq!(second.leads(), None, "two leaders:\n{}", second.printed());

    let pid = first.process.0.id().to_string();
    assert!(Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap()
        .success());
    let status = wait_for("candidate-1 to exit on SIGTERM", || {
        first.process.0.try_wait().unwrap()
    });
    assert!(status.success(), "{status}\n{}", first.printed());
    let second_token = wait_for("candidate-2 to take over", || second.leads());
    assert!(
        second_token > first_token,
        "a new tenure: token {second_token} after {first_token}"
    );
    assert!(
        second.printed().contains(&format!(
            "candidate-2 works as leader (token {second_token})"
        )),
        "{}",
        second.printed()
    );
}
