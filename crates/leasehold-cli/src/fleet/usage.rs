//! CPU time and memory of processes, read from /proc: this process (the fleet) and the
//! store's server when it runs on this machine.

use std::time::Duration;

use serde::Serialize;

/// Clock ticks per second of /proc's CPU times: 100 on every Linux this runs on.
const TICKS_PER_SECOND: u64 = 100;

/// CPU time used so far and memory, summed over some processes.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Usage {
    /// How many processes were read.
    pub processes: usize,
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident memory now, in MiB.
    pub rss_mib: f64,
    /// The largest resident memory each process reached, summed, in MiB.
    pub peak_rss_mib: f64,
}

/// This process.
pub fn own() -> Usage {
    of_pids(&[std::process::id()])
}

/// Every process whose command name (`/proc/PID/comm`) is `name`: `postgres`, `etcd`,
/// `java` for ZooKeeper.
pub fn named(name: &str) -> Usage {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Usage::default();
    };
    let pids: Vec<u32> = entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == name)
        })
        .collect();
    of_pids(&pids)
}

fn of_pids(pids: &[u32]) -> Usage {
    let mut usage = Usage::default();
    for pid in pids {
        let Some(cpu) = cpu_time(*pid) else { continue };
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
        usage.processes += 1;
        usage.cpu_seconds += cpu.as_secs_f64();
        usage.rss_mib += kib(&status, "VmRSS:") / 1024.0;
        usage.peak_rss_mib += kib(&status, "VmHWM:") / 1024.0;
    }
    usage
}

/// User plus system time of `pid` (fields 14 and 15 of /proc/PID/stat, after the command
/// name, which may hold spaces and ends at the last parenthesis).
fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    Some(Duration::from_millis(
        (user + system) * 1000 / TICKS_PER_SECOND,
    ))
}

/// A `Key:   123 kB` line of /proc/PID/status, in KiB; 0 if absent.
fn kib(status: &str, key: &str) -> f64 {
    status
        .lines()
        .find_map(|line| line.strip_prefix(key))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_process_is_read() {
        // Some CPU time to see.
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        assert_ne!(x, 1);
        let usage = own();
        assert_eq!(usage.processes, 1);
        assert!(
            usage.rss_mib > 0.0 && usage.peak_rss_mib >= usage.rss_mib,
            "{usage:?}"
        );
        assert_eq!(named("no-such-command-here").processes, 0);
        assert_eq!(kib("VmRSS:\t  2048 kB\n", "VmRSS:"), 2048.0);
    }
}
