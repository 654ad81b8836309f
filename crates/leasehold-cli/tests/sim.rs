//! `leasehold sim`: a replay prints and exits 0, a negative control exits 1, and its
//! durations are written as every other flag's are.

mod common;

use common::{assert_clean_error, leasehold};

/// A small fleet, for runs that take a moment.
const SMALL: [&str; 4] = ["--nodes", "3", "--partitions", "8"];

fn sim(args: &[&str]) -> common::Run {
    let mut argv = vec!["sim"];
    argv.extend_from_slice(args);
    leasehold(&argv)
}

#[test]
fn a_replay_succeeds_and_a_negative_control_fails() {
    let ok = sim(&[&["--seed", "3", "--duration", "300s"][..], &SMALL].concat());
    assert_eq!(ok.code, 0, "{ok:?}");
    assert!(
        ok.stdout.starts_with("seed 3: every invariant held"),
        "{ok:?}"
    );
    let batch = sim(&[
        &["--seeds", "4", "--duration", "300s", "--json"][..],
        &SMALL,
    ]
    .concat());
    assert_eq!(batch.code, 0, "{batch:?}");
    let summary: serde_json::Value = serde_json::from_str(&batch.stdout).expect("JSON");
    assert_eq!(summary["passed"], 4, "{batch:?}");
    // Standard error is a pipe here, not a terminal: no progress written into it.
    assert!(
        !batch.stderr.contains('\r') && !batch.stderr.contains("seeds"),
        "progress on a pipe: {:?}",
        batch.stderr
    );
    let caught = sim(&[
        "--seeds",
        "4",
        "--nodes",
        "4",
        "--partitions",
        "16",
        "--duration",
        "600s",
        "--unsafe",
    ]);
    assert_eq!(caught.code, 1, "{caught:?}");
    assert!(
        caught.stdout.contains("replay: leasehold sim --seed"),
        "{caught:?}"
    );
    // A violated seed adds nothing to the figures, which say so rather than show, say, no
    // fault injected.
    let passed = caught
        .stdout
        .split(": ")
        .nth(2)
        .and_then(|s| s.split(' ').next());
    assert!(
        caught.stdout.contains(&format!(
            "figures over the {} seeds that passed:",
            passed.unwrap_or("?")
        )),
        "{caught:?}"
    );
}

#[test]
fn each_negative_control_has_its_flag() {
    // Each with a seed whose short run breaks the control's invariant (a short run may
    // inject no fault the control needs, such as an exclusion of a held partition).
    for (flag, invariant, seed) in [
        ("--unsafe-epoch-reuse", "epoch-order", "0"),
        ("--unsafe-stop-acquiring", "liveness", "0"),
        ("--unsafe-ignore-members", "balance", "0"),
        ("--unsafe-ignore-exclusions", "exclusion", "12"),
    ] {
        let caught = sim(&[&["--seed", seed, "--duration", "300s", flag][..], &SMALL].concat());
        assert_eq!(caught.code, 1, "{flag}: {caught:?}");
        assert!(
            caught
                .stdout
                .contains(&format!("invariant {invariant} violated")),
            "{flag}: {caught:?}"
        );
        assert!(caught.stdout.contains(flag), "{flag}: {caught:?}");
    }
}

#[test]
fn durations_need_a_unit() {
    let run = sim(&[&["--seed", "3", "--duration", "42"][..], &SMALL].concat());
    assert_clean_error(
        &run,
        &[
            "--duration",
            "\"42\"",
            "no unit",
            "500ms, 2s, 1.5s, 1m30s, 2h",
        ],
    );
    let run = sim(&[&["--seed", "3", "--relist-after", "5"][..], &SMALL].concat());
    assert_clean_error(&run, &["--relist-after", "\"5\"", "no unit"]);
    let run = sim(&[&["--seed", "3", "--duration", "4m40s"][..], &SMALL].concat());
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("over 280s simulated"), "{run:?}");
}

#[test]
fn a_run_too_short_for_faults_and_settling_is_refused_naming_the_minimum() {
    let run = sim(&[&["--seed", "3", "--duration", "1m30s"][..], &SMALL].concat());
    assert_clean_error(
        &run,
        &[
            "--duration",
            "a run of 90s is too short",
            "settling window",
            "at least 276s",
        ],
    );
    assert!(run.stdout.is_empty(), "{run:?}");
    let run = sim(&["--seeds", "2", "--duration", "4m", "--faults", "none"]);
    assert_eq!(
        run.code, 0,
        "a fault-free run needs only the settling window: {run:?}"
    );
}

#[test]
fn help_states_the_duration_grammar() {
    for command in [&["sim", "--help"][..], &["--help"], &["node", "--help"]] {
        let run = leasehold(command);
        assert_eq!(run.code, 0, "{run:?}");
        assert!(
            run.stdout
                .contains("a number and a unit: 500ms, 2s, 1.5s, 1m30s, 2h"),
            "{command:?}: {}",
            run.stdout
        );
    }
}

#[test]
fn nodes_and_partitions_must_be_at_least_one() {
    let run = sim(&["--seed", "1", "--nodes", "0"]);
    assert_clean_error(&run, &["--nodes and --partitions must be at least 1"]);
}
