//! `leasehold sim` as the binary mounts it: arguments parse, a replay prints and exits 0, a
//! negative control exits 1.

use std::process::ExitCode;

use clap::Parser;
use leasehold_sim::{run_cli, FaultProfile, SimArgs};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    sim: SimArgs,
}

fn parse(args: &[&str]) -> SimArgs {
    let mut argv = vec!["leasehold-sim"];
    argv.extend_from_slice(args);
    Cli::try_parse_from(argv).expect("valid arguments").sim
}

#[test]
fn arguments_build_the_configuration() {
    let args = parse(&["--seeds", "10000", "--nodes", "7", "--partitions", "128"]);
    assert_eq!(args.seeds, 10_000);
    let config = args.config();
    assert_eq!((config.nodes, config.partitions), (7, 128));
    assert_eq!(config.duration.as_secs(), 900);
    assert_eq!(config.profile, FaultProfile::All);
    let args = parse(&[
        "--seed",
        "5",
        "--duration",
        "2m",
        "--faults",
        "none",
        "--unsafe",
    ]);
    let config = args.config();
    assert_eq!((args.seed, config.duration.as_secs()), (Some(5), 120));
    assert!(config.unsafe_timings);
    assert_eq!(
        config.replay_command(5),
        "leasehold sim --seed 5 --nodes 5 --partitions 64 --duration 120s --faults none --unsafe"
    );
    let argv = ["leasehold-sim", "--faults", "some"];
    assert!(Cli::try_parse_from(argv).is_err());
    assert!(parse(&["--seed", "3", "--trace"]).trace);
    assert!(!parse(&["--seed", "3"]).trace);
    // A trace follows one seed, and is text.
    assert!(Cli::try_parse_from(["leasehold-sim", "--seeds", "9", "--trace"]).is_err());
    assert!(Cli::try_parse_from(["leasehold-sim", "--seed", "3", "--trace", "--json"]).is_err());
}

#[test]
fn a_replay_succeeds_and_a_negative_control_fails() {
    let ok = run_cli(parse(&[
        "--seed",
        "3",
        "--nodes",
        "3",
        "--partitions",
        "8",
        "--duration",
        "300s",
    ]));
    assert_eq!(format!("{ok:?}"), format!("{:?}", ExitCode::SUCCESS));
    let batch = run_cli(parse(&[
        "--seeds",
        "4",
        "--nodes",
        "3",
        "--partitions",
        "8",
        "--duration",
        "300s",
        "--json",
    ]));
    assert_eq!(format!("{batch:?}"), format!("{:?}", ExitCode::SUCCESS));
    let caught = run_cli(parse(&[
        "--seeds",
        "4",
        "--nodes",
        "4",
        "--partitions",
        "16",
        "--duration",
        "600s",
        "--unsafe",
    ]));
    assert_eq!(format!("{caught:?}"), format!("{:?}", ExitCode::FAILURE));
}
