//! The two small processes between `exec` and the command it runs.
//!
//! `exec` cannot be trusted to stop the command on time by itself: a process that is paused
//! (SIGSTOP, a frozen VM, a long page-in) cannot signal anything, while its command, a
//! separate process, runs on. So each command runs under a watchdog, another process, that
//! `exec` keeps told of the lease's deadline (`until NS` lines on its standard input, on
//! CLOCK_MONOTONIC, which every process of the machine shares) and that kills the command's
//! process group at that deadline unless told a later one. `stop` (or the end of its input,
//! when `exec` dies) sends SIGTERM, then SIGKILL after the grace or at the deadline,
//! whichever comes first. The watchdog exits with the command's status.
//!
//! The command itself starts as `exec-guarded`, which puts it in its own process group (so
//! that its children are signalled with it) and asks the kernel to kill it if the watchdog
//! dies, before replacing itself with the command.

use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use anyhow::Context;
use rustix::process::{Pid, Signal};
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::cli::{GuardedArgs, WatchdogArgs};
use crate::Outcome;

/// Nanoseconds on CLOCK_MONOTONIC: the one clock `exec` and its watchdogs, separate
/// processes, read alike.
pub fn monotonic_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    let seconds = u64::try_from(now.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(now.tv_nsec).unwrap_or(0);
    seconds.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// The local instant at which CLOCK_MONOTONIC reads `ns`. The local clock is read first, so
/// a delay between the two readings makes the answer earlier, never later.
fn instant_of(ns: u64) -> Instant {
    let local = Instant::now();
    local + Duration::from_nanos(ns.saturating_sub(monotonic_ns()))
}

/// The exit code a shell would report for `status`: the code, or 128 plus the signal.
pub fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(1),
        (None, Some(signal)) => u8::try_from(128 + (signal & 0x7f)).unwrap_or(1),
        (None, None) => 1,
    }
}

/// What `exec` tells a watchdog, one line each.
#[derive(Debug, PartialEq, Eq)]
enum Order {
    /// The lease's deadline moved (`until NS`).
    Until(u64),
    /// Stop the command now (`stop`), or `exec` is gone (end of input).
    Stop,
}

fn parse(line: &str) -> Option<Order> {
    match line.trim().split_once(' ') {
        Some(("until", ns)) => ns.parse().ok().map(Order::Until),
        None if line.trim() == "stop" => Some(Order::Stop),
        _ => None,
    }
}

/// `exec-watchdog`: runs the command and enforces the deadline; exits with its status.
pub fn run(args: &WatchdogArgs) -> anyhow::Result<Outcome> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the runtime")?;
    let status = runtime.block_on(watch(args))?;
    Ok(Outcome::Exit(code_of(status)))
}

async fn watch(args: &WatchdogArgs) -> anyhow::Result<ExitStatus> {
    // A stop meant for the whole service reaches this process too (systemd signals every
    // process of a unit): stopping the command is left to exec, and to the deadline.
    let mut term = signal(SignalKind::terminate())?;
    let mut interrupt = signal(SignalKind::interrupt())?;
    let mut hangup = signal(SignalKind::hangup())?;
    let mut deadline = instant_of(args.until_ns);
    let grace = Duration::from_nanos(args.grace_ns);
    let exe = std::env::current_exe().context("cannot find the leasehold binary")?;
    // Spawned from this (the main) thread: the kernel's parent-death signal follows the
    // thread that forked, which lives as long as the watchdog.
    let mut child = tokio::process::Command::new(exe)
        .args([
            "exec-guarded",
            "--parent",
            &std::process::id().to_string(),
            "--",
        ])
        .args(&args.command)
        .stdin(Stdio::null())
        .spawn()
        .context("cannot start the command")?;
    let pid = child
        .id()
        .and_then(|id| i32::try_from(id).ok())
        .and_then(Pid::from_raw);
    let mut orders = read_orders();
    let mut kill_at: Option<Instant> = None;
    let mut killed = false;
    let mut reading = true;
    loop {
        let kill_when = kill_at.map_or(deadline, |at| at.min(deadline));
        tokio::select! {
            status = child.wait() => return Ok(status?),
            _ = tokio::time::sleep_until(kill_when), if !killed => {
                signal_group(pid, Signal::KILL);
                killed = true;
            }
            order = orders.recv(), if reading => {
                match order {
                    Some(Order::Until(ns)) => deadline = instant_of(ns),
                    Some(Order::Stop) | None => {
                        if kill_at.is_none() {
                            signal_group(pid, Signal::TERM);
                            kill_at = Some(Instant::now() + grace);
                        }
                    }
                }
                // Nothing more comes once exec has closed its end (or died).
                reading &= order.is_some();
            }
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
            _ = hangup.recv() => {}
        }
    }
}

/// Orders from standard input, read on a thread of their own (a blocking read would keep an
/// async runtime from ending); `None` once `exec` closed it or died.
fn read_orders() -> mpsc::Receiver<Order> {
    let (send, receive) = mpsc::channel(16);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            match parse(&line) {
                Some(order) => {
                    if send.blocking_send(order).is_err() {
                        break;
                    }
                }
                None => eprintln!("leasehold exec-watchdog: ignoring {line:?}"),
            }
        }
    });
    receive
}

/// Signals the command's process group, and the command itself in case it has not yet made
/// its group; a command already gone is not an error.
fn signal_group(pid: Option<Pid>, signal: Signal) {
    if let Some(pid) = pid {
        let _ = rustix::process::kill_process_group(pid, signal);
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// `exec-guarded`: becomes the command, in its own process group, killed if the watchdog
/// dies. Returns only if the command cannot be run (127 not found, 126 otherwise).
pub fn guarded(args: &GuardedArgs) -> anyhow::Result<Outcome> {
    rustix::process::setpgid(None, None).context("cannot start a process group")?;
    rustix::process::set_parent_process_death_signal(Some(Signal::KILL))
        .context("cannot bind the command to its watchdog")?;
    // The watchdog may have died before the line above took effect: no signal would come.
    let parent = rustix::process::getppid().map(|pid| pid.as_raw_pid());
    anyhow::ensure!(
        parent.and_then(|pid| u32::try_from(pid).ok()) == Some(args.parent),
        "the watchdog is gone; not starting the command"
    );
    let (program, arguments) = args.command.split_first().context("no command was given")?;
    let error = std::process::Command::new(program).args(arguments).exec();
    eprintln!("leasehold: error: cannot run {program}: {error}");
    Ok(Outcome::Exit(match error.kind() {
        std::io::ErrorKind::NotFound => 127,
        _ => 126,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn orders_are_read_strictly() {
        assert_eq!(parse("until 17"), Some(Order::Until(17)));
        assert_eq!(parse("stop\n"), Some(Order::Stop));
        assert_eq!(parse("until -1"), None);
        assert_eq!(parse("until"), None);
        assert_eq!(parse("halt"), None);
    }

    #[test]
    fn statuses_are_reported_as_a_shell_would() {
        assert_eq!(code_of(ExitStatus::from_raw(0)), 0);
        assert_eq!(code_of(ExitStatus::from_raw(7 << 8)), 7);
        assert_eq!(code_of(ExitStatus::from_raw(9)), 137);
        assert_eq!(code_of(ExitStatus::from_raw(15)), 143);
    }

    #[test]
    fn a_deadline_in_the_past_is_now() {
        let before = Instant::now();
        assert!(instant_of(0) <= Instant::now());
        assert!(instant_of(0) >= before);
        let later = instant_of(monotonic_ns() + 5_000_000_000);
        assert!(later > before + Duration::from_secs(4));
    }
}
